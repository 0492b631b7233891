// Causal attention and its VJP (ops.h's Attention, AttentionGrad): plain CUDA, no tensor cores,
// everything after the loads in double and every sum in a fixed order, so results are the same run
// to run and close to the CPU backend's double arithmetic.
//
// A block of kWarps warps takes one row at a time. Per tile of up to kTile partner rows, each warp
// computes the dot products of its partners (WarpDot), one thread per partner its dropout factor
// and coefficient, then every thread adds the tile's terms to the head_dim outputs it owns,
// partners in ascending order. The probabilities are recomputed
// from the scores each time they are needed: the forward never stores the [seq, seq] matrix, and
// the VJP keeps only three doubles per query row (max, softmax sum, dout . out).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "worker/kernels/cuda/ops.h"

namespace weft::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 4;
constexpr int kThreadsPerBlock = kWarps * kWarp;
constexpr int kTile = 64;  // partner rows per round
static_assert(kTile <= kThreadsPerBlock, "a tile's per-partner terms take one thread each");
constexpr int64_t kMaxRowBlocks = 1 << 20;

// The per-query-row statistics AttentionGrad's first kernel leaves for its second.
constexpr int kRowStats = 3;  // max score, softmax sum, dout . out

// a . b over head_dim elements by one warp, in double: lane l adds a[d] * b[d] for d = l, l + 32,
// ... in order (explicit fma, so every call site rounds alike), then a butterfly of shuffles adds
// the lanes. Addition commutes, so every lane ends with the same bits, and the result does not
// depend on which warp or kernel computes it, nor on which operand sits in shared memory.
__device__ double WarpDot(const float* a, const float* b, int64_t dim, int lane) {
  double sum = 0.0;
  for (int64_t d = lane; d < dim; d += kWarp) {
    sum = fma(static_cast<double>(a[d]), static_cast<double>(b[d]), sum);
  }
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  }
  return sum;
}

// scale * q_i . k_j, never contracted with what follows.
__device__ double Score(const AttentionDims& a, const float* q_row, const float* k_row, int lane) {
  return __dmul_rn(static_cast<double>(a.scale), WarpDot(q_row, k_row, a.head_dim, lane));
}

// The probability's dropout factor at local (b, h, i, j): keep_scale when kept, 0 when dropped,
// 1 without dropout. The global index is (batch_offset + b, head_offset + h, i, j) in
// [global_batch, global_heads, seq, seq].
__device__ double KeepFactor(const AttentionDims& a, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (!a.dropout.active()) return 1.0;
  const int64_t e =
      (((a.batch_offset + b) * a.global_heads + a.head_offset + h) * a.seq + i) * a.seq + j;
  return a.dropout.Keeps(static_cast<uint64_t>(e)) ? static_cast<double>(a.dropout.keep_scale)
                                                   : 0.0;
}

// Offsets of a row of q (or dq, out, dout) and of k (or v, dk, dv).
__device__ int64_t QOffset(const AttentionDims& a, int64_t b, int64_t i, int64_t h) {
  return ((b * a.seq + i) * a.heads + h) * a.head_dim;
}
__device__ int64_t KvOffset(const AttentionDims& a, int64_t b, int64_t j, int64_t kvh) {
  return ((b * a.seq + j) * a.kv_heads + kvh) * a.head_dim;
}

// Query row (b, h, i) of block-row `row` = (b * heads + h) * seq + i.
struct QueryRow {
  int64_t b, h, i, kvh;
};
__device__ QueryRow QueryRowOf(const AttentionDims& a, int64_t row) {
  QueryRow r;
  r.i = row % a.seq;
  r.h = (row / a.seq) % a.heads;
  r.b = row / (a.seq * a.heads);
  r.kvh = r.h / (a.heads / a.kv_heads);
  return r;
}

// max_{j <= i} s_ij of the block's query row q_row, returned to every thread.
__device__ double RowMaxScore(const AttentionDims& a, const float* q_row, const float* k,
                              const QueryRow& r, double* warp_max) {
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = threadIdx.x % kWarp;
  double m = -INFINITY;
  for (int64_t j = warp; j <= r.i; j += kWarps) {
    m = fmax(m, Score(a, q_row, k + KvOffset(a, r.b, j, r.kvh), lane));
  }
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  m = warp_max[0];
  for (int w = 1; w < kWarps; ++w) m = fmax(m, warp_max[w]);
  __syncthreads();  // warp_max is rewritten for the next row
  return m;
}

// One block per query row (b, h, i): out = sum_j (e_j / l) keep_ij v_j with e_j = exp(s_ij - m),
// l = sum_j e_j. Dynamic shared memory: head_dim doubles (the weighted sum), head_dim floats (q).
// Per tile: the warps' exponentials, then each partner's thread its dropout factor (and thread 0
// the running l), then every thread its outputs.
__global__ void __launch_bounds__(kThreadsPerBlock)
    AttentionKernel(const float* q, const float* k, const float* v, float* out, AttentionDims a) {
  extern __shared__ double shared[];
  const int64_t dim = a.head_dim;
  double* acc = shared;
  float* q_row = reinterpret_cast<float*>(shared + dim);
  __shared__ double unit[kTile];    // e_j
  __shared__ double weight[kTile];  // e_j keep_ij
  __shared__ double warp_max[kWarps];
  __shared__ double total;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarp, lane = tid % kWarp;
  const int64_t rows = a.batch * a.heads * a.seq;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const QueryRow r = QueryRowOf(a, row);
    const int64_t q_offset = QOffset(a, r.b, r.i, r.h);
    for (int64_t d = tid; d < dim; d += kThreadsPerBlock) {
      q_row[d] = q[q_offset + d];
      acc[d] = 0.0;
    }
    __syncthreads();
    const double m = RowMaxScore(a, q_row, k, r, warp_max);
    double l = 0.0;  // thread 0's
    for (int64_t j0 = 0; j0 <= r.i; j0 += kTile) {
      const int count = static_cast<int>(std::min<int64_t>(kTile, r.i + 1 - j0));
      for (int t = warp; t < count; t += kWarps) {
        const double e = exp(Score(a, q_row, k + KvOffset(a, r.b, j0 + t, r.kvh), lane) - m);
        if (lane == 0) unit[t] = e;
      }
      __syncthreads();
      if (tid < count) weight[tid] = unit[tid] * KeepFactor(a, r.b, r.h, r.i, j0 + tid);
      if (tid == 0) {
        for (int t = 0; t < count; ++t) l += unit[t];
      }
      __syncthreads();
      for (int64_t d = tid; d < dim; d += kThreadsPerBlock) {
        double sum = acc[d];
        for (int t = 0; t < count; ++t) sum += weight[t] * v[KvOffset(a, r.b, j0 + t, r.kvh) + d];
        acc[d] = sum;
      }
      __syncthreads();
    }
    if (tid == 0) total = l;
    __syncthreads();
    for (int64_t d = tid; d < dim; d += kThreadsPerBlock) {
      out[q_offset + d] = static_cast<float>(acc[d] / total);
    }
    __syncthreads();  // q_row, acc and total are rewritten for the next row
  }
}

// The VJP's first half, one block per query row (b, h, i), with P_ij = e_j / l, dp_ij =
// dout_i . v_j and delta_i = sum_j P_ij keep_ij dp_ij (= dout_i . out_i):
//   dq_i = scale * sum_j P_ij (keep_ij dp_ij - delta_i) k_j,
// and the row's (m, l, delta) into stats. Two sweeps over the keys: l and delta, then dq.
// Dynamic shared memory: head_dim doubles (dq's sum), 2 * head_dim floats (q_i, dout_i).
__global__ void __launch_bounds__(kThreadsPerBlock)
    AttentionQueryGradKernel(const float* q, const float* k, const float* v, const float* dout,
                             float* dq, double* stats, AttentionDims a) {
  extern __shared__ double shared[];
  const int64_t dim = a.head_dim;
  double* acc = shared;
  float* q_row = reinterpret_cast<float*>(shared + dim);
  float* dout_row = q_row + dim;
  __shared__ double unit[kTile];   // e_j
  __shared__ double dprob[kTile];  // dp_ij
  __shared__ double coef[kTile];   // keep_ij dp_ij, then j's term of dq
  __shared__ double warp_max[kWarps];
  __shared__ double row_sum, row_delta;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarp, lane = tid % kWarp;
  const int64_t rows = a.batch * a.heads * a.seq;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const QueryRow r = QueryRowOf(a, row);
    const int64_t q_offset = QOffset(a, r.b, r.i, r.h);
    for (int64_t d = tid; d < dim; d += kThreadsPerBlock) {
      q_row[d] = q[q_offset + d];
      dout_row[d] = dout[q_offset + d];
      acc[d] = 0.0;
    }
    __syncthreads();
    const double m = RowMaxScore(a, q_row, k, r, warp_max);

    // unit and dprob for the tile of keys at j0, by the warps.
    auto load_tile = [&](int64_t j0, int count) {
      for (int t = warp; t < count; t += kWarps) {
        const int64_t kv = KvOffset(a, r.b, j0 + t, r.kvh);
        const double e = exp(Score(a, q_row, k + kv, lane) - m);
        const double dp = WarpDot(dout_row, v + kv, dim, lane);
        if (lane == 0) {
          unit[t] = e;
          dprob[t] = dp;
        }
      }
      __syncthreads();
    };

    // l (added as the forward adds it) and delta's numerator, by thread 0 in key order.
    double l = 0.0, weighted = 0.0;
    for (int64_t j0 = 0; j0 <= r.i; j0 += kTile) {
      const int count = static_cast<int>(std::min<int64_t>(kTile, r.i + 1 - j0));
      load_tile(j0, count);
      if (tid < count) coef[tid] = KeepFactor(a, r.b, r.h, r.i, j0 + tid) * dprob[tid];
      __syncthreads();
      if (tid == 0) {
        for (int t = 0; t < count; ++t) {
          l += unit[t];
          weighted += unit[t] * coef[t];
        }
      }
      __syncthreads();
    }
    if (tid == 0) {
      row_sum = l;
      row_delta = weighted / l;
      stats[kRowStats * row] = m;
      stats[kRowStats * row + 1] = l;
      stats[kRowStats * row + 2] = row_delta;
    }
    __syncthreads();
    const double sum = row_sum, delta = row_delta;

    for (int64_t j0 = 0; j0 <= r.i; j0 += kTile) {
      const int count = static_cast<int>(std::min<int64_t>(kTile, r.i + 1 - j0));
      load_tile(j0, count);
      if (tid < count) {
        const double keep = KeepFactor(a, r.b, r.h, r.i, j0 + tid);
        coef[tid] = unit[tid] / sum * (keep * dprob[tid] - delta);
      }
      __syncthreads();
      for (int64_t d = tid; d < dim; d += kThreadsPerBlock) {
        double total = acc[d];
        for (int t = 0; t < count; ++t) total += coef[t] * k[KvOffset(a, r.b, j0 + t, r.kvh) + d];
        acc[d] = total;
      }
      __syncthreads();
    }
    for (int64_t d = tid; d < dim; d += kThreadsPerBlock) {
      dq[q_offset + d] = static_cast<float>(static_cast<double>(a.scale) * acc[d]);
    }
    __syncthreads();  // the shared rows are rewritten for the next row
  }
}

// The VJP's second half, one block per key row (b, kvh, j), over the query heads h of kvh's group
// and the query rows i >= j, in that order, with P_ij = exp(s_ij - m_i) / l_i from stats (the
// first half's bits, as the dot products are the same):
//   dv_j = sum P_ij keep_ij dout_i,   dk_j = scale * sum P_ij (keep_ij dp_ij - delta_i) q_i.
// Dynamic shared memory: 2 * head_dim doubles (the sums), 2 * head_dim floats (k_j, v_j).
__global__ void __launch_bounds__(kThreadsPerBlock)
    AttentionKeyGradKernel(const float* q, const float* k, const float* v, const float* dout,
                           const double* stats, float* dk, float* dv, AttentionDims a) {
  extern __shared__ double shared[];
  const int64_t dim = a.head_dim;
  double* acc_k = shared;
  double* acc_v = shared + dim;
  float* k_row = reinterpret_cast<float*>(shared + 2 * dim);
  float* v_row = k_row + dim;
  __shared__ double prob[kTile];    // P_ij
  __shared__ double dprob[kTile];   // dp_ij
  __shared__ double coef_v[kTile];  // i's term of dv
  __shared__ double coef_k[kTile];  // i's term of dk
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarp, lane = tid % kWarp;
  const int64_t group = a.heads / a.kv_heads;
  const int64_t rows = a.batch * a.kv_heads * a.seq;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t j = row % a.seq, kvh = (row / a.seq) % a.kv_heads;
    const int64_t b = row / (a.seq * a.kv_heads);
    const int64_t kv_offset = KvOffset(a, b, j, kvh);
    for (int64_t d = tid; d < dim; d += kThreadsPerBlock) {
      k_row[d] = k[kv_offset + d];
      v_row[d] = v[kv_offset + d];
      acc_k[d] = 0.0;
      acc_v[d] = 0.0;
    }
    __syncthreads();
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const double* head_stats = stats + kRowStats * (b * a.heads + h) * a.seq;  // [seq][3]
      for (int64_t i0 = j; i0 < a.seq; i0 += kTile) {
        const int count = static_cast<int>(std::min<int64_t>(kTile, a.seq - i0));
        for (int t = warp; t < count; t += kWarps) {
          const int64_t i = i0 + t;
          const double s = Score(a, q + QOffset(a, b, i, h), k_row, lane);
          const double dp = WarpDot(dout + QOffset(a, b, i, h), v_row, dim, lane);
          if (lane == 0) {
            prob[t] = exp(s - head_stats[kRowStats * i]) / head_stats[kRowStats * i + 1];
            dprob[t] = dp;
          }
        }
        __syncthreads();
        if (tid < count) {
          const int64_t i = i0 + tid;
          const double keep = KeepFactor(a, b, h, i, j);
          coef_v[tid] = prob[tid] * keep;
          coef_k[tid] = prob[tid] * (keep * dprob[tid] - head_stats[kRowStats * i + 2]);
        }
        __syncthreads();
        for (int64_t d = tid; d < dim; d += kThreadsPerBlock) {
          double sum_k = acc_k[d], sum_v = acc_v[d];
          for (int t = 0; t < count; ++t) {
            const int64_t offset = QOffset(a, b, i0 + t, h) + d;
            sum_v += coef_v[t] * dout[offset];
            sum_k += coef_k[t] * q[offset];
          }
          acc_k[d] = sum_k;
          acc_v[d] = sum_v;
        }
        __syncthreads();
      }
    }
    for (int64_t d = tid; d < dim; d += kThreadsPerBlock) {
      dk[kv_offset + d] = static_cast<float>(static_cast<double>(a.scale) * acc_k[d]);
      dv[kv_offset + d] = static_cast<float>(acc_v[d]);
    }
    __syncthreads();  // the shared rows are rewritten for the next row
  }
}

int RowBlocks(int64_t rows) { return static_cast<int>(std::min(rows, kMaxRowBlocks)); }

// False when there is nothing to compute (or the shape is not one the kernels can index).
bool HasWork(const AttentionDims& a) {
  return a.batch > 0 && a.seq > 0 && a.heads > 0 && a.kv_heads > 0 && a.head_dim > 0 &&
         a.heads % a.kv_heads == 0;
}

}  // namespace

void Attention(const float* q, const float* k, const float* v, float* out,
               const AttentionDims& dims, cudaStream_t stream) {
  if (!HasWork(dims)) return;
  const size_t shared = static_cast<size_t>(dims.head_dim) * (sizeof(double) + sizeof(float));
  AttentionKernel<<<RowBlocks(dims.batch * dims.heads * dims.seq), kThreadsPerBlock, shared,
                    stream>>>(q, k, v, out, dims);
}

int64_t AttentionGradScratchSize(const AttentionDims& dims) {
  return HasWork(dims) ? kRowStats * dims.batch * dims.heads * dims.seq : 0;
}

void AttentionGrad(const float* q, const float* k, const float* v, const float* dout, float* dq,
                   float* dk, float* dv, const AttentionDims& dims, double* scratch,
                   cudaStream_t stream) {
  if (!HasWork(dims)) return;
  const size_t dim = static_cast<size_t>(dims.head_dim);
  AttentionQueryGradKernel<<<RowBlocks(dims.batch * dims.heads * dims.seq), kThreadsPerBlock,
                             dim * (sizeof(double) + 2 * sizeof(float)), stream>>>(
      q, k, v, dout, dq, scratch, dims);
  // Queued behind the first kernel on the same stream, so the statistics are complete.
  AttentionKeyGradKernel<<<RowBlocks(dims.batch * dims.kv_heads * dims.seq), kThreadsPerBlock,
                           dim * (2 * sizeof(double) + 2 * sizeof(float)), stream>>>(
      q, k, v, dout, scratch, dk, dv, dims);
}

}  // namespace weft::cuda
