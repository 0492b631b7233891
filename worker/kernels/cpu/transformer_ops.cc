#include "worker/kernels/cpu/transformer_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/philox.h"
#include "worker/kernels/cpu/loops.h"

namespace weft::cpu {
namespace {

// Element i of n ids of dtype I32 or I64.
int64_t IdAt(const void* ids, v1::DType dtype, int64_t i) {
  if (dtype == v1::I64) return static_cast<const int64_t*>(ids)[i];
  return static_cast<const int32_t*>(ids)[i];
}

// The row of a shard starting at `offset` with `rows` rows that `id` falls on, or -1. Written so
// that no id, however far outside the shard, overflows.
int64_t ShardRow(int64_t id, int64_t offset, int64_t rows) {
  if (id < offset) return -1;
  const uint64_t row = static_cast<uint64_t>(id) - static_cast<uint64_t>(offset);
  return row < static_cast<uint64_t>(rows) ? static_cast<int64_t>(row) : -1;
}

// A DropoutSpec's mask with its per-call constants worked out once.
class DropoutMask {
 public:
  explicit DropoutMask(const DropoutSpec& spec)
      : p_(spec.p), seed_(spec.seed), stream_(spec.StreamKey()), keep_scale_(1.0f / (1.0f - spec.p)) {}

  bool active() const { return p_ > 0.0f; }
  // x as the mask leaves global element e: scaled by 1 / (1 - p), or dropped.
  float Apply(float x, int64_t e) const {
    return PhiloxUnit(seed_, stream_, static_cast<uint64_t>(e)) >= p_ ? x * keep_scale_ : 0.0f;
  }

 private:
  const float p_;
  const uint64_t seed_;
  const uint64_t stream_;
  const float keep_scale_;
};

// Row r's mean and 1 / sqrt(var + eps) (the biased variance), in double, two passes.
struct RowMoments {
  double mean = 0.0;
  double rstd = 0.0;
};
// Inlined always: a call from a vector clone would otherwise run this baseline-ISA copy.
__attribute__((always_inline)) inline RowMoments Moments(const float* x, int64_t dim, float eps) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < dim; ++c) sum += x[c];
  const double mean = sum / static_cast<double>(dim);
  double squares = 0.0;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < dim; ++c) {
    const double d = x[c] - mean;
    squares += d * d;
  }
  return {mean, 1.0 / std::sqrt(squares / static_cast<double>(dim) + static_cast<double>(eps))};
}

// 1 / sqrt(mean(x^2) + eps) of a row, in double.
__attribute__((always_inline)) inline double InverseRms(const float* x, int64_t dim, float eps) {
  double squares = 0.0;
#pragma omp simd reduction(+ : squares)
  for (int64_t c = 0; c < dim; ++c) squares += static_cast<double>(x[c]) * x[c];
  return 1.0 / std::sqrt(squares / static_cast<double>(dim) + static_cast<double>(eps));
}

// s[0, len) replaced by softmax(s), the maximum subtracted, each exp in float32, the sum in
// double. The moments of a LayerNorm row are inlined into clones of their callers; this one is
// called per row of attention scores, so it is cloned itself.
WEFT_CPU_VECTOR_CLONES
void SoftmaxInPlace(float* s, int64_t len) {
  float max = s[0];
#pragma omp simd reduction(max : max)
  for (int64_t j = 1; j < len; ++j) max = max < s[j] ? s[j] : max;
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < len; ++j) {
    s[j] = std::exp(s[j] - max);
    sum += s[j];
  }
  const double inverse = 1.0 / sum;
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) s[j] = static_cast<float>(s[j] * inverse);
}

// One row of AttentionGrad's dS (see there): w[j] = pd[j] w[j] - p[j] sum_j(pd w) for j < len,
// zeros up to cols.
WEFT_CPU_VECTOR_CLONES
void ScoreGradRow(const float* p, const float* pd, float* w, int64_t len, int64_t cols) {
  double dot = 0.0;
#pragma omp simd reduction(+ : dot)
  for (int64_t j = 0; j < len; ++j) dot += static_cast<double>(pd[j]) * w[j];
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) {
    w[j] = static_cast<float>(static_cast<double>(pd[j]) * w[j] - p[j] * dot);
  }
  std::fill(w + len, w + cols, 0.0f);
}

// LayerNorm over rows [begin, end).
WEFT_CPU_VECTOR_CLONES
void LayerNormRows(const float* x, const float* gamma, const float* beta, float* y, int64_t dim,
                   float eps, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const RowMoments s = Moments(xr, dim, eps);
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) {
      yr[c] = static_cast<float>((xr[c] - s.mean) * s.rstd * gamma[c] + beta[c]);
    }
  }
}

// LayerNormGrad's dx over rows [begin, end), each row's mean and rstd kept in moments[2r, 2r+1].
WEFT_CPU_VECTOR_CLONES
void LayerNormGradRows(const float* x, const float* gamma, const float* dy, float* dx,
                       int64_t dim, float eps, double* moments, int64_t begin, int64_t end) {
  const double inv_dim = 1.0 / static_cast<double>(dim);
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    const RowMoments s = Moments(xr, dim, eps);
    moments[2 * r] = s.mean;
    moments[2 * r + 1] = s.rstd;
    double g_sum = 0.0, gx_sum = 0.0;
#pragma omp simd reduction(+ : g_sum, gx_sum)
    for (int64_t c = 0; c < dim; ++c) {
      const double g = static_cast<double>(dyr[c]) * gamma[c];
      g_sum += g;
      gx_sum += g * (xr[c] - s.mean) * s.rstd;
    }
    const double g_mean = g_sum * inv_dim, gx_mean = gx_sum * inv_dim;
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) {
      const double d = dyr[c];
      const double xhat = (xr[c] - s.mean) * s.rstd;
      dxr[c] = static_cast<float>(s.rstd * (d * gamma[c] - g_mean - xhat * gx_mean));
    }
  }
}

// LayerNormGrad's column sums over columns [begin, end): xhat_sums[c] += dy xhat and dy_sums[c]
// += dy over every row in ascending order (either may be null: skipped).
WEFT_CPU_VECTOR_CLONES
void LayerNormGradColumns(const float* x, const float* dy, const double* moments, int64_t rows,
                          int64_t dim, double* xhat_sums, double* dy_sums, int64_t begin,
                          int64_t end) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    const double mean = moments[2 * r], rstd = moments[2 * r + 1];
    if (xhat_sums != nullptr) {
#pragma omp simd
      for (int64_t c = begin; c < end; ++c) xhat_sums[c] += dyr[c] * ((xr[c] - mean) * rstd);
    }
    if (dy_sums != nullptr) {
#pragma omp simd
      for (int64_t c = begin; c < end; ++c) dy_sums[c] += dyr[c];
    }
  }
}

WEFT_CPU_VECTOR_CLONES
void RmsNormRows(const float* x, const float* gamma, float* y, int64_t dim, float eps,
                 int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const double inv_rms = InverseRms(xr, dim, eps);
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) yr[c] = static_cast<float>(xr[c] * inv_rms * gamma[c]);
  }
}

// RmsNormGrad's dx over rows [begin, end), each row's 1 / rms kept in inv_rms[r].
WEFT_CPU_VECTOR_CLONES
void RmsNormGradRows(const float* x, const float* gamma, const float* dy, float* dx, int64_t dim,
                     float eps, double* inv_rms, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    const double u = InverseRms(xr, dim, eps);
    inv_rms[r] = u;
    double gx_sum = 0.0;
#pragma omp simd reduction(+ : gx_sum)
    for (int64_t c = 0; c < dim; ++c) gx_sum += static_cast<double>(dyr[c]) * gamma[c] * xr[c];
    const double correction = u * u * u * gx_sum / static_cast<double>(dim);
#pragma omp simd
    for (int64_t c = 0; c < dim; ++c) {
      dxr[c] = static_cast<float>(u * dyr[c] * gamma[c] - correction * xr[c]);
    }
  }
}

// RmsNormGrad's column sums over columns [begin, end): sums[c] += dy x / rms, rows ascending.
WEFT_CPU_VECTOR_CLONES
void RmsNormGradColumns(const float* x, const float* dy, const double* inv_rms, int64_t rows,
                        int64_t dim, double* sums, int64_t begin, int64_t end) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    const double u = inv_rms[r];
#pragma omp simd
    for (int64_t c = begin; c < end; ++c) sums[c] += static_cast<double>(dyr[c]) * xr[c] * u;
  }
}

// CrossEntropyParts over rows [begin, end).
WEFT_CPU_VECTOR_CLONES
void CrossEntropyPartsRows(const float* logits, const float* m, const void* targets,
                           v1::DType targets_dtype, float* sumexp, float* tlogit, int64_t cols,
                           int64_t col_offset, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* row = logits + r * cols;
    const float max = m[r];
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(row[c] - max);
    sumexp[r] = static_cast<float>(sum);
    const int64_t col = ShardRow(IdAt(targets, targets_dtype, r), col_offset, cols);
    tlogit[r] = col < 0 ? 0.0f : row[col];
  }
}

// CrossEntropyPartsGrad over rows [begin, end).
WEFT_CPU_VECTOR_CLONES
void CrossEntropyPartsGradRows(const float* logits, const float* m, const void* targets,
                               v1::DType targets_dtype, const float* d_sumexp,
                               const float* d_tlogit, float* dlogits, int64_t cols,
                               int64_t col_offset, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* row = logits + r * cols;
    float* drow = dlogits + r * cols;
    const float max = m[r], d = d_sumexp[r];
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) drow[c] = d * std::exp(row[c] - max);
    const int64_t col = ShardRow(IdAt(targets, targets_dtype, r), col_offset, cols);
    if (col >= 0) drow[col] += d_tlogit[r];
  }
}

// One (batch, head) of attention, as the blocks of Attention and AttentionGrad see it: rows of q
// (and dq, out, dout) are q_stride floats apart, rows of k (dk, v, dv) kv_stride apart.
struct HeadView {
  int64_t q_offset = 0;   // of row 0 in q, out, dq, dout
  int64_t kv_offset = 0;  // of row 0 in k, v, dk, dv
  int64_t q_stride = 0, kv_stride = 0;
  int64_t mask_base = 0;  // the dropout's global index of (b, h, 0, 0)
};

// Scores and probabilities of query rows [i0, i0 + rows) against keys [0, i0 + rows) into
// p (ld: cols = i0 + rows): softmax over j <= i, zeros for j > i. Returns cols.
int64_t BlockProbabilities(const float* q, const float* k, const AttentionShape& shape,
                           const HeadView& head, int64_t i0, int64_t rows, float* p) {
  const int64_t cols = i0 + rows;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
              static_cast<int>(cols), static_cast<int>(shape.head_dim), shape.scale,
              q + head.q_offset + i0 * head.q_stride, static_cast<int>(head.q_stride),
              k + head.kv_offset, static_cast<int>(head.kv_stride), 0.0f, p,
              static_cast<int>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = p + r * cols;
    const int64_t len = i0 + r + 1;  // keys j <= i
    SoftmaxInPlace(row, len);
    std::fill(row + len, row + cols, 0.0f);
  }
  return cols;
}

// p_dropped[r, j] = p[r, j] under the dropout mask of query row i0 + r (j <= i; zeros past it).
void DropBlock(const float* p, float* p_dropped, const DropoutMask& mask, const HeadView& head,
               int64_t seq, int64_t i0, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    const int64_t base = head.mask_base + i * seq;
    for (int64_t j = 0; j <= i; ++j) p_dropped[r * cols + j] = mask.Apply(p[r * cols + j], base + j);
    std::fill(p_dropped + r * cols + i + 1, p_dropped + (r + 1) * cols, 0.0f);
  }
}

HeadView ViewOf(const AttentionShape& shape, int64_t b, int64_t h) {
  const int64_t group = shape.heads / shape.kv_heads;
  HeadView view;
  view.q_stride = shape.heads * shape.head_dim;
  view.kv_stride = shape.kv_heads * shape.head_dim;
  view.q_offset = b * shape.seq * view.q_stride + h * shape.head_dim;
  view.kv_offset = b * shape.seq * view.kv_stride + (h / group) * shape.head_dim;
  view.mask_base = ((shape.batch_offset + b) * shape.global_heads + shape.head_offset + h) *
                   shape.seq * shape.seq;
  return view;
}

}  // namespace

void Embedding(const void* ids, v1::DType ids_dtype, const float* table, float* out, int64_t n,
               int64_t table_rows, int64_t dim, int64_t row_offset) {
  for (int64_t r = 0; r < n; ++r) {
    const int64_t row = ShardRow(IdAt(ids, ids_dtype, r), row_offset, table_rows);
    float* dst = out + r * dim;
    if (row < 0) {
      std::fill(dst, dst + dim, 0.0f);
    } else {
      std::memcpy(dst, table + row * dim, static_cast<size_t>(dim) * sizeof(float));
    }
  }
}

void EmbeddingGrad(const void* ids, v1::DType ids_dtype, const float* dy, float* grad_table,
                   int64_t n, int64_t table_rows, int64_t dim, int64_t row_offset,
                   int64_t* chains, double* sums) {
  // first[row] is the smallest r on row, next[r] the following one (-1 ends a chain). Built from
  // the last id back, so every chain is in ascending r.
  int64_t* first = chains;
  int64_t* next = chains + table_rows;
  std::fill(first, first + table_rows, int64_t{-1});
  for (int64_t r = n - 1; r >= 0; --r) {
    const int64_t row = ShardRow(IdAt(ids, ids_dtype, r), row_offset, table_rows);
    if (row < 0) continue;
    next[r] = first[row];
    first[row] = r;
  }
  for (int64_t row = 0; row < table_rows; ++row) {
    float* dst = grad_table + row * dim;
    if (first[row] < 0) {
      std::fill(dst, dst + dim, 0.0f);
      continue;
    }
    std::fill(sums, sums + dim, 0.0);
    for (int64_t r = first[row]; r >= 0; r = next[r]) {
      const float* src = dy + r * dim;
      for (int64_t c = 0; c < dim; ++c) sums[c] += src[c];
    }
    for (int64_t c = 0; c < dim; ++c) dst[c] = static_cast<float>(sums[c]);
  }
}

void LayerNorm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
               int64_t dim, float eps, int threads) {
  ParallelFor(threads, rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
    LayerNormRows(x, gamma, beta, y, dim, eps, begin, end);
  });
}


// With xhat = (x - mean) * rstd and g = dy * gamma:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
// by rows; then dgamma and dbeta by columns, from the rows' moments kept in scratch.
void LayerNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                   float* dbeta, int64_t rows, int64_t dim, float eps, double* scratch,
                   int threads) {
  double* xhat_sums = scratch;
  double* dy_sums = scratch + dim;
  double* moments = scratch + 2 * dim;
  // dx may alias dy: the column sums read dy, so they run first when it does.
  const bool sums_first = dx == dy;
  const auto rows_pass = [&] {
    ParallelFor(threads, rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
      LayerNormGradRows(x, gamma, dy, dx, dim, eps, moments, begin, end);
    });
  };
  if (!sums_first) rows_pass();
  if (dgamma != nullptr || dbeta != nullptr) {
    if (sums_first) {
      for (int64_t r = 0; r < rows; ++r) {
        const RowMoments s = Moments(x + r * dim, dim, eps);
        moments[2 * r] = s.mean;
        moments[2 * r + 1] = s.rstd;
      }
    }
    std::fill(scratch, scratch + 2 * dim, 0.0);
    ParallelFor(threads, dim, RowGrain(rows), [&](int64_t begin, int64_t end) {
      LayerNormGradColumns(x, dy, moments, rows, dim, dgamma != nullptr ? xhat_sums : nullptr,
                           dbeta != nullptr ? dy_sums : nullptr, begin, end);
    });
    if (dgamma != nullptr) {
      for (int64_t c = 0; c < dim; ++c) dgamma[c] = static_cast<float>(xhat_sums[c]);
    }
    if (dbeta != nullptr) {
      for (int64_t c = 0; c < dim; ++c) dbeta[c] = static_cast<float>(dy_sums[c]);
    }
  }
  if (sums_first) rows_pass();
}

void RmsNorm(const float* x, const float* gamma, float* y, int64_t rows, int64_t dim, float eps,
             int threads) {
  ParallelFor(threads, rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
    RmsNormRows(x, gamma, y, dim, eps, begin, end);
  });
}


// With u = 1 / rms: dx = u * dy * gamma - u^3 * x * mean(dy * gamma * x), by rows; then dgamma
// by columns.
void RmsNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                 int64_t rows, int64_t dim, float eps, double* scratch, int threads) {
  double* sums = scratch;
  double* inv_rms = scratch + dim;
  const bool sums_first = dx == dy;
  const auto rows_pass = [&] {
    ParallelFor(threads, rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
      RmsNormGradRows(x, gamma, dy, dx, dim, eps, inv_rms, begin, end);
    });
  };
  if (!sums_first) rows_pass();
  if (dgamma != nullptr) {
    if (sums_first) {
      for (int64_t r = 0; r < rows; ++r) inv_rms[r] = InverseRms(x + r * dim, dim, eps);
    }
    std::fill(sums, sums + dim, 0.0);
    ParallelFor(threads, dim, RowGrain(rows), [&](int64_t begin, int64_t end) {
      RmsNormGradColumns(x, dy, inv_rms, rows, dim, sums, begin, end);
    });
    for (int64_t c = 0; c < dim; ++c) dgamma[c] = static_cast<float>(sums[c]);
  }
  if (sums_first) rows_pass();
}

void Rope(const float* x, float* out, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
          int64_t pos_offset, float theta, bool inverse, float* table) {
  const int64_t half = head_dim / 2;
  float* inv_freq = table;
  float* cosines = table + half;
  float* sines = table + 2 * half;
  // Hugging Face: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)), in float32.
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
  }
  // The rotation by -angle negates sin.
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t t = 0; t < seq; ++t) {
    // position_ids.float() @ inv_freq: one float32 product per angle.
    const float position = static_cast<float>(pos_offset + t);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = position * inv_freq[i];
      cosines[i] = std::cos(angle);
      sines[i] = sign * std::sin(angle);
    }
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t at = ((b * seq + t) * heads + h) * head_dim;
        const float* xr = x + at;
        float* yr = out + at;
        // x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1).
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = xr[i], x2 = xr[i + half];
          yr[i] = x1 * cosines[i] + -x2 * sines[i];
          yr[i + half] = x2 * cosines[i] + x1 * sines[i];
        }
      }
    }
  }
}

void Dropout(const float* x, float* out, int64_t n, const DropoutSpec& spec, const GlobalBox& box,
             int threads) {
  const DropoutMask mask(spec);
  if (!mask.active()) {
    if (out != x) std::memmove(out, x, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  // The box's last axis is contiguous in the global tensor too: one GlobalIndex per run of it
  // (or per piece of a run that a thread's range cuts).
  const int64_t run = std::max<int64_t>(box.rank > 0 ? box.lengths[box.rank - 1] : 1, 1);
  ParallelFor(threads, n, kGrainElements, [&](int64_t begin, int64_t end) {
    for (int64_t start = begin; start < end;) {
      const int64_t stop = std::min(end, (start / run + 1) * run);
      const int64_t base = box.GlobalIndex(start);
      for (int64_t i = start; i < stop; ++i) out[i] = mask.Apply(x[i], base + (i - start));
      start = stop;
    }
  });
}

void CrossEntropyParts(const float* logits, const float* m, const void* targets,
                       v1::DType targets_dtype, float* sumexp, float* tlogit, int64_t rows,
                       int64_t cols, int64_t col_offset, int threads) {
  ParallelFor(threads, rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
    CrossEntropyPartsRows(logits, m, targets, targets_dtype, sumexp, tlogit, cols, col_offset,
                          begin, end);
  });
}

void CrossEntropyPartsGrad(const float* logits, const float* m, const void* targets,
                           v1::DType targets_dtype, const float* d_sumexp, const float* d_tlogit,
                           float* dlogits, int64_t rows, int64_t cols, int64_t col_offset,
                           int threads) {
  ParallelFor(threads, rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
    CrossEntropyPartsGradRows(logits, m, targets, targets_dtype, d_sumexp, d_tlogit, dlogits,
                              cols, col_offset, begin, end);
  });
}


void Attention(const float* q, const float* k, const float* v, float* out,
               const AttentionShape& shape, float* scratch) {
  const int64_t seq = shape.seq, head_dim = shape.head_dim;
  if (shape.batch == 0 || seq == 0 || shape.heads == 0 || head_dim == 0) return;
  const DropoutMask mask(shape.dropout);
  float* p = scratch;
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const HeadView head = ViewOf(shape, b, h);
      for (int64_t i0 = 0; i0 < seq; i0 += kCpuAttentionBlock) {
        const int64_t rows = std::min(kCpuAttentionBlock, seq - i0);
        const int64_t cols = BlockProbabilities(q, k, shape, head, i0, rows, p);
        if (mask.active()) DropBlock(p, p, mask, head, seq, i0, rows, cols);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                    static_cast<int>(head_dim), static_cast<int>(cols), 1.0f, p,
                    static_cast<int>(cols), v + head.kv_offset, static_cast<int>(head.kv_stride),
                    0.0f, out + head.q_offset + i0 * head.q_stride,
                    static_cast<int>(head.q_stride));
      }
    }
  }
}

// Per block, with P the probabilities, Pd = P under the mask, W = dout V^T (dPd):
//   dS = P * (dP - rowsum(P dP)) = Pd W - P rowsum(Pd W)   (dP = W * mask * 1/(1-p)),
//   dv += Pd^T dout,  dq = scale dS K,  dk += scale dS^T Q.
void AttentionGrad(const float* q, const float* k, const float* v, const float* dout, float* dq,
                   float* dk, float* dv, const AttentionShape& shape, float* scratch) {
  const int64_t seq = shape.seq, head_dim = shape.head_dim;
  const int64_t kv_elements = shape.batch * seq * shape.kv_heads * head_dim;
  std::fill(dk, dk + kv_elements, 0.0f);
  std::fill(dv, dv + kv_elements, 0.0f);
  if (shape.batch == 0 || seq == 0 || shape.heads == 0 || head_dim == 0) return;
  const DropoutMask mask(shape.dropout);
  const int64_t tile = std::min(kCpuAttentionBlock, seq) * seq;
  float* p = scratch;
  float* p_dropped = mask.active() ? scratch + tile : p;
  float* w = scratch + 2 * tile;
  const int d = static_cast<int>(head_dim);
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < shape.heads; ++h) {
      const HeadView head = ViewOf(shape, b, h);
      const int qs = static_cast<int>(head.q_stride), kvs = static_cast<int>(head.kv_stride);
      for (int64_t i0 = 0; i0 < seq; i0 += kCpuAttentionBlock) {
        const int64_t rows = std::min(kCpuAttentionBlock, seq - i0);
        const int64_t cols = BlockProbabilities(q, k, shape, head, i0, rows, p);
        if (mask.active()) DropBlock(p, p_dropped, mask, head, seq, i0, rows, cols);
        const int m = static_cast<int>(rows), n = static_cast<int>(cols);
        const int64_t q_rows = head.q_offset + i0 * head.q_stride;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, d, 1.0f, dout + q_rows, qs,
                    v + head.kv_offset, kvs, 0.0f, w, n);
        for (int64_t r = 0; r < rows; ++r) {
          ScoreGradRow(p + r * cols, p_dropped + r * cols, w + r * cols, i0 + r + 1, cols);
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, d, m, 1.0f, p_dropped, n,
                    dout + q_rows, qs, 1.0f, dv + head.kv_offset, kvs);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, n, shape.scale, w, n,
                    k + head.kv_offset, kvs, 0.0f, dq + q_rows, qs);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, d, m, shape.scale, w, n,
                    q + q_rows, qs, 1.0f, dk + head.kv_offset, kvs);
      }
    }
  }
}

}  // namespace weft::cpu
