#include "worker/kernels/cpu/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/dtype.h"
#include "common/kernel_scratch.h"
#include "worker/kernels/cpu/loops.h"
#include "worker/kernels/cpu/transformer_ops.h"

namespace weft {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluTanhCubic = 0.044715;

// tanh-GELU's inner tanh in float, as one expf: tanh(u) = 1 - 2 / (exp(2u) + 1). libm's double
// tanh (and the expm1 it calls) cost a quarter of a GPT-2 step (bench/RESULTS.md); this is a few
// times cheaper, and its absolute error (a few 1e-8) stays below float's resolution of the
// terms it is added to (1 + t). Saturates to +-1 and keeps NaN.
inline float GeluInnerTanh(float v) {
  const float u = static_cast<float>(kSqrt2OverPi) *
                  (v + static_cast<float>(kGeluTanhCubic) * v * v * v);
  return 1.0f - 2.0f / (std::exp(2.0f * u) + 1.0f);
}

// The loops of the elementwise and row-wise methods below, over [begin, end) of their elements
// (or rows, or columns), each compiled as vector clones (loops.h) and run by ParallelFor.

WEFT_CPU_VECTOR_CLONES
void AddBiasRows(const float* a, const float* bias, float* out, int64_t cols, int64_t begin,
                 int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* ar = a + r * cols;
    float* orow = out + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) orow[c] = ar[c] + bias[c];
  }
}

// out[c] for c in [begin, end): the column's sum over all rows, in ascending row order.
WEFT_CPU_VECTOR_CLONES
void BiasGradColumns(const float* a, float* out, int64_t rows, int64_t cols, int64_t begin,
                     int64_t end) {
  for (int64_t c = begin; c < end; ++c) out[c] = 0.0f;
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a + r * cols;
#pragma omp simd
    for (int64_t c = begin; c < end; ++c) out[c] += ar[c];
  }
}

WEFT_CPU_VECTOR_CLONES
void ReluRange(const float* a, float* out, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) out[i] = a[i] > 0.0f ? a[i] : 0.0f;
}

WEFT_CPU_VECTOR_CLONES
void ReluGradRange(const float* x, const float* dy, float* out, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) out[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

void GeluRange(const float* x, float* out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const double v = x[i];
    out[i] = static_cast<float>(v * 0.5 * (1.0 + std::erf(v * kInvSqrt2)));
  }
}

void GeluGradRange(const float* x, const float* dy, float* out, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const double v = x[i];
    const double cdf = 0.5 * (1.0 + std::erf(v * kInvSqrt2));
    const double pdf = kInvSqrt2Pi * std::exp(-0.5 * v * v);
    out[i] = static_cast<float>(dy[i] * (cdf + v * pdf));
  }
}

WEFT_CPU_VECTOR_CLONES
void MseGradRange(const float* pred, const float* label, float* out, float scale, int64_t begin,
                  int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) out[i] = scale * (pred[i] - label[i]);
}

WEFT_CPU_VECTOR_CLONES
void ScaleRange(const float* a, float* out, float scale, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) out[i] = scale * a[i];
}

WEFT_CPU_VECTOR_CLONES
void AddRange(const float* a, const float* b, float* out, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
}

WEFT_CPU_VECTOR_CLONES
void MulRange(const float* a, const float* b, float* out, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) out[i] = a[i] * b[i];
}

WEFT_CPU_VECTOR_CLONES
void SgdRange(float* param, const float* grad, float lr, float weight_decay, int64_t begin,
              int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) param[i] -= lr * (grad[i] + weight_decay * param[i]);
}

WEFT_CPU_VECTOR_CLONES
void ScaledSgdRange(float* param, const float* grad, float lr, float weight_decay, float scale,
                    int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    param[i] -= lr * (grad[i] * scale + weight_decay * param[i]);
  }
}

WEFT_CPU_VECTOR_CLONES
double SumSquaresRange(const float* a, int64_t begin, int64_t end) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = begin; i < end; ++i) sum += static_cast<double>(a[i]) * a[i];
  return sum;
}

// AdamW's update with the bias corrections folded into constants (see CpuKernels::AdamW).
struct AdamWConstants {
  float b1, b2, one_minus_b1, one_minus_b2, step_size, inv_sqrt_bias2, decay, eps;
};

WEFT_CPU_VECTOR_CLONES
void AdamWRange(float* param, const float* grad, float* m, float* v, const AdamWConstants& k,
                float scale, int64_t begin, int64_t end) {
  const AdamWConstants c = k;
  // The vectorizer will not reorder the division and sqrt on its own; it may here.
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float g = grad[i] * scale;
    const float mi = c.b1 * m[i] + c.one_minus_b1 * g;
    const float vi = c.b2 * v[i] + c.one_minus_b2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * c.decay - c.step_size * mi / (std::sqrt(vi) * c.inv_sqrt_bias2 + c.eps);
  }
}

WEFT_CPU_VECTOR_CLONES
void GeluTanhRange(const float* x, float* out, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float v = x[i];
    out[i] = 0.5f * v * (1.0f + GeluInnerTanh(v));
  }
}

// d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
WEFT_CPU_VECTOR_CLONES
void GeluTanhGradRange(const float* x, const float* dy, float* out, int64_t begin, int64_t end) {
  constexpr float kDu = static_cast<float>(kSqrt2OverPi);
  constexpr float kCubic3 = static_cast<float>(3.0 * kGeluTanhCubic);
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float v = x[i];
    const float t = GeluInnerTanh(v);
    const float du = kDu * (1.0f + kCubic3 * v * v);
    out[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

WEFT_CPU_VECTOR_CLONES
void SiluRange(const float* x, float* out, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const double v = x[i];
    out[i] = static_cast<float>(v / (1.0 + std::exp(-v)));
  }
}

WEFT_CPU_VECTOR_CLONES
void SiluGradRange(const float* x, const float* dy, float* out, int64_t begin, int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const double v = x[i];
    const double s = 1.0 / (1.0 + std::exp(-v));
    out[i] = static_cast<float>(dy[i] * s * (1.0 + v * (1.0 - s)));
  }
}

// -inf for a row of no columns. A row holding a NaN may give NaN or its largest number (the
// cross-entropy that follows exponentiates the NaN either way).
WEFT_CPU_VECTOR_CLONES
void RowMaxRows(const float* logits, float* out, int64_t cols, int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const float* row = logits + r * cols;
    float max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max)
    for (int64_t c = 0; c < cols; ++c) max = max < row[c] ? row[c] : max;
    out[r] = max;
  }
}

// The bf16 of a float's bits, as a float's bits (the low half zero): round to nearest even; a NaN
// stays NaN, its quiet bit set before the low half is dropped so that a payload only in the low
// bits cannot become infinity. common/dtype.h's FloatToBf16Bits, bit for bit, written on the
// float's own bits so that the loops below vectorize (the conformance tests hold the bf16 Matmul
// and Cast to one reference).
inline uint32_t Bf16RoundedBits(uint32_t bits) {
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  const uint32_t quiet_nan = (bits | 0x00400000u) & 0xFFFF0000u;
  return (bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded;
}

// dst[i] = src[i] rounded to bfloat16, kept in a float.
void RoundToBf16(const float* src, float* dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &src[i], sizeof(bits));
    const uint32_t out = Bf16RoundedBits(bits);
    std::memcpy(&dst[i], &out, sizeof(out));
  }
}

// The casts between float32 and bf16 that bf16 storage runs around every instruction (the
// executor's widening), vectorized and split over the threads: dst[i] = the bf16 bits of src[i],
// and the float a bf16 stands for (exact).
WEFT_CPU_VECTOR_CLONES void NarrowToBf16Range(const float* src, uint16_t* dst, int64_t begin,
                                              int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &src[i], sizeof(bits));
    dst[i] = static_cast<uint16_t>(Bf16RoundedBits(bits) >> 16);
  }
}
WEFT_CPU_VECTOR_CLONES void WidenBf16Range(const uint16_t* src, float* dst, int64_t begin,
                                           int64_t end) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
    std::memcpy(&dst[i], &bits, sizeof(bits));
  }
}

// Matmul in MatmulPrecision::kBf16 rounds both operands to bf16 into scratch copies owned by the
// object and runs cblas_sgemm on them. A product of two bf16 values has at most 16 significant
// bits, so it is exact in float32 and only the float32 accumulation rounds: the result is cuBLAS's
// bf16 GEMM (float32 compute) up to summation order. The scratch makes Matmul non-reentrant (see
// mu_ below for which methods may run together). kF32 calls cblas_sgemm on the operands as given.
// The transformer kernels that need scratch (transformer_ops.h) get it from the object likewise,
// counted in memory_stats the same way. Attention runs in float32 whatever the precision.
class CpuKernels final : public Kernels {
 public:
  CpuKernels(MatmulPrecision precision, int threads)
      : precision_(precision), threads_(std::max(threads, 1)) {}

  const char* name() const override { return "cpu"; }
  bool host_accessible() const override { return true; }

  // Blocks are 64-byte aligned and a multiple of 64 bytes long (aligned_alloc's rule), which is
  // also the size memory_stats counts.
  void* Allocate(int64_t bytes) override {
    if (bytes > kMaxAllocation) return nullptr;
    const size_t size = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, size);
    if (p == nullptr) return nullptr;
    absl::MutexLock lock(&mu_);
    block_sizes_[p] = static_cast<int64_t>(size);
    NoteInUseLocked(static_cast<int64_t>(size));
    return p;
  }
  void Free(void* p) override {
    if (p == nullptr) return;
    {
      absl::MutexLock lock(&mu_);
      auto it = block_sizes_.find(p);
      if (it != block_sizes_.end()) {
        stats_.bytes_in_use -= it->second;
        block_sizes_.erase(it);
      }
    }
    std::free(p);
  }
  void CopyFromHost(const void* host, void* dst, int64_t bytes) override {
    Copy(host, dst, bytes);
  }
  void CopyToHost(const void* src, void* host, int64_t bytes) override { Copy(src, host, bytes); }
  void Copy(const void* src, void* dst, int64_t bytes) override {
    if (src != dst && bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  void Fill(void* dst, int64_t n, v1::DType dtype, double value) override {
    switch (DTypeSize(dtype)) {
      case 2:
        FillWith<uint16_t>(dst, n, dtype, value);
        break;
      case 8:
        FillWith<uint64_t>(dst, n, dtype, value);
        break;
      default:
        FillWith<uint32_t>(dst, n, dtype, value);
        break;
    }
  }
  MemoryStats memory_stats() const override {
    absl::MutexLock lock(&mu_);
    return stats_;
  }
  void ResetPeakMemoryStats() override {
    absl::MutexLock lock(&mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  void Matmul(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
              bool trans_a, bool trans_b) override {
    if (m == 0 || n == 0) return;
    if (k == 0) {
      std::fill(c, c + m * n, 0.0f);
      return;
    }
    if (precision_ == MatmulPrecision::kBf16) {
      // Rounding is elementwise, so the copies keep a's and b's layouts (and leading dims).
      GrowScratch(a_bf16_, m * k);
      GrowScratch(b_bf16_, k * n);
      RoundToBf16(a, a_bf16_.data(), m * k);
      RoundToBf16(b, b_bf16_.data(), k * n);
      a = a_bf16_.data();
      b = b_bf16_.data();
    }
    const int lda = static_cast<int>(trans_a ? m : k);
    const int ldb = static_cast<int>(trans_b ? k : n);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a, lda, b, ldb, 0.0f, c, static_cast<int>(n));
  }

  void AddBias(const float* a, const float* bias, float* out, int64_t rows,
               int64_t cols) override {
    ForRows(rows, cols, [&](int64_t b, int64_t e) { AddBiasRows(a, bias, out, cols, b, e); });
  }

  // Over columns: each thread sums its columns' rows in order.
  void BiasGrad(const float* a, float* out, int64_t rows, int64_t cols) override {
    cpu::ParallelFor(threads_, cols, cpu::RowGrain(rows),
                     [&](int64_t b, int64_t e) { BiasGradColumns(a, out, rows, cols, b, e); });
  }

  void Relu(const float* a, float* out, int64_t n) override {
    ForElements(n, [&](int64_t b, int64_t e) { ReluRange(a, out, b, e); });
  }

  void ReluGrad(const float* x, const float* dy, float* out, int64_t n) override {
    ForElements(n, [&](int64_t b, int64_t e) { ReluGradRange(x, dy, out, b, e); });
  }

  void Gelu(const float* x, float* out, int64_t n) override {
    ForElements(n, [&](int64_t b, int64_t e) { GeluRange(x, out, b, e); });
  }

  void GeluGrad(const float* x, const float* dy, float* out, int64_t n) override {
    ForElements(n, [&](int64_t b, int64_t e) { GeluGradRange(x, dy, out, b, e); });
  }

  void MseLoss(const float* pred, const float* label, float* out, int64_t n,
               float scale) override {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(pred[i]) - label[i];
      sum += d * d;
    }
    out[0] = static_cast<float>(scale * sum);
  }

  void MseGrad(const float* pred, const float* label, float* out, int64_t n,
               float scale) override {
    ForElements(n, [&](int64_t b, int64_t e) { MseGradRange(pred, label, out, scale, b, e); });
  }

  void Scale(const float* a, float* out, int64_t n, float scale) override {
    ForElements(n, [&](int64_t b, int64_t e) { ScaleRange(a, out, scale, b, e); });
  }

  void Add(const float* a, const float* b, float* out, int64_t n) override {
    ForElements(n, [&](int64_t lo, int64_t hi) { AddRange(a, b, out, lo, hi); });
  }

  void Sgd(float* param, const float* grad, int64_t n, float lr, float weight_decay,
           const float* grad_scale) override {
    if (grad_scale == nullptr) {
      ForElements(n, [&](int64_t b, int64_t e) { SgdRange(param, grad, lr, weight_decay, b, e); });
      return;
    }
    const float scale = grad_scale[0];
    ForElements(n, [&](int64_t b, int64_t e) {
      ScaledSgdRange(param, grad, lr, weight_decay, scale, b, e);
    });
  }

  // Blocks of kGrainElements each sum on their own, in parallel; the block sums add in order, so
  // the result depends on n alone, not on the threads.
  void SumSquares(const float* a, int64_t n, float* out) override {
    const int64_t block = cpu::kGrainElements;
    const int64_t blocks = (n + block - 1) / block;
    std::vector<double> sums(static_cast<size_t>(blocks), 0.0);
    cpu::ParallelFor(threads_, blocks, 1, [&](int64_t first, int64_t last) {
      for (int64_t k = first; k < last; ++k) {
        sums[k] = SumSquaresRange(a, k * block, std::min(n, (k + 1) * block));
      }
    });
    double total = 0.0;
    for (double s : sums) total += s;
    out[0] = static_cast<float>(total);
  }

  void ClipCoefficient(const float* norm_sq, float max_norm, float* out) override {
    out[0] = std::min(1.0f, max_norm / (std::sqrt(norm_sq[0]) + 1e-6f));
  }

  void AdamW(float* param, const float* grad, float* m, float* v, int64_t n,
             const AdamWHyper& h, int64_t step, const float* grad_scale) override {
    const float b1 = h.beta1, b2 = h.beta2;
    const double bias1 = 1.0 - std::pow(static_cast<double>(b1), step);
    const double bias2 = 1.0 - std::pow(static_cast<double>(b2), step);
    // lr * (m / bias1) / (sqrt(v / bias2) + eps) with the bias corrections folded into two
    // constants, so the loop has one sqrt and one division and vectorizes.
    AdamWConstants c;
    c.b1 = b1;
    c.b2 = b2;
    c.one_minus_b1 = 1.0f - b1;
    c.one_minus_b2 = 1.0f - b2;
    c.step_size = static_cast<float>(h.lr / bias1);
    c.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
    c.decay = 1.0f - h.lr * h.weight_decay;
    c.eps = h.eps;
    const float scale = grad_scale != nullptr ? grad_scale[0] : 1.0f;  // g * 1 is g exactly
    ForElements(n, [&](int64_t b, int64_t e) { AdamWRange(param, grad, m, v, c, scale, b, e); });
  }

  void Cast(const void* in, v1::DType from, void* out, v1::DType to, int64_t n) override {
    if (n <= 0) return;
    if (from == v1::BF16 && to == v1::F32) {
      const auto* src = static_cast<const uint16_t*>(in);
      auto* dst = static_cast<float*>(out);
      ForElements(n, [&](int64_t b, int64_t e) { WidenBf16Range(src, dst, b, e); });
    } else if (from == v1::F32 && to == v1::BF16) {
      const auto* src = static_cast<const float*>(in);
      auto* dst = static_cast<uint16_t*>(out);
      ForElements(n, [&](int64_t b, int64_t e) { NarrowToBf16Range(src, dst, b, e); });
    } else {
      ConvertElements(in, from, out, to, n);
    }
  }

  void Slice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
             int64_t offset, int64_t length, int64_t element_bytes) override {
    const int64_t run = length * inner * element_bytes;
    const int64_t pitch = axis_len * inner * element_bytes;
    const auto* src = static_cast<const char*>(a) + offset * inner * element_bytes;
    auto* dst = static_cast<char*>(out);
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(dst + o * run, src + o * pitch, static_cast<size_t>(run));
    }
  }

  void Unslice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
               int64_t offset, int64_t length, int64_t element_bytes) override {
    const int64_t run = length * inner * element_bytes;
    const int64_t pitch = axis_len * inner * element_bytes;
    const auto* src = static_cast<const char*>(a);
    auto* dst = static_cast<char*>(out) + offset * inner * element_bytes;
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(dst + o * pitch, src + o * run, static_cast<size_t>(run));
    }
  }

  void Embedding(const void* ids, v1::DType ids_dtype, const float* table, float* out, int64_t n,
                 int64_t table_rows, int64_t dim, int64_t row_offset) override {
    cpu::Embedding(ids, ids_dtype, table, out, n, table_rows, dim, row_offset);
  }

  void EmbeddingGrad(const void* ids, v1::DType ids_dtype, const float* dy, float* grad_table,
                     int64_t n, int64_t table_rows, int64_t dim, int64_t row_offset) override {
    GrowScratch(i64_scratch_, CpuEmbeddingGradScratchInt64s(n, table_rows));
    GrowScratch(f64_scratch_, CpuEmbeddingGradScratchDoubles(dim));
    cpu::EmbeddingGrad(ids, ids_dtype, dy, grad_table, n, table_rows, dim, row_offset,
                       i64_scratch_.data(), f64_scratch_.data());
  }

  void LayerNorm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                 int64_t dim, float eps) override {
    cpu::LayerNorm(x, gamma, beta, y, rows, dim, eps, threads_);
  }

  void LayerNormGrad(const float* x, const float* gamma, const float* dy, float* dx,
                     float* dgamma, float* dbeta, int64_t rows, int64_t dim,
                     float eps) override {
    GrowScratch(f64_scratch_, CpuLayerNormGradScratchDoubles(rows, dim));
    cpu::LayerNormGrad(x, gamma, dy, dx, dgamma, dbeta, rows, dim, eps, f64_scratch_.data(),
                       threads_);
  }

  void RmsNorm(const float* x, const float* gamma, float* y, int64_t rows, int64_t dim,
               float eps) override {
    cpu::RmsNorm(x, gamma, y, rows, dim, eps, threads_);
  }

  void RmsNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                   int64_t rows, int64_t dim, float eps) override {
    GrowScratch(f64_scratch_, CpuRmsNormGradScratchDoubles(rows, dim));
    cpu::RmsNormGrad(x, gamma, dy, dx, dgamma, rows, dim, eps, f64_scratch_.data(), threads_);
  }

  void GeluTanh(const float* x, float* out, int64_t n) override {
    ForElements(n, [&](int64_t b, int64_t e) { GeluTanhRange(x, out, b, e); });
  }

  void GeluTanhGrad(const float* x, const float* dy, float* out, int64_t n) override {
    ForElements(n, [&](int64_t b, int64_t e) { GeluTanhGradRange(x, dy, out, b, e); });
  }

  void Silu(const float* x, float* out, int64_t n) override {
    ForElements(n, [&](int64_t b, int64_t e) { SiluRange(x, out, b, e); });
  }

  void SiluGrad(const float* x, const float* dy, float* out, int64_t n) override {
    ForElements(n, [&](int64_t b, int64_t e) { SiluGradRange(x, dy, out, b, e); });
  }

  void Mul(const float* a, const float* b, float* out, int64_t n) override {
    ForElements(n, [&](int64_t lo, int64_t hi) { MulRange(a, b, out, lo, hi); });
  }

  void Rope(const float* x, float* out, int64_t batch, int64_t seq, int64_t heads,
            int64_t head_dim, int64_t pos_offset, float theta, bool inverse) override {
    GrowScratch(f32_scratch_, CpuRopeScratchFloats(head_dim));
    cpu::Rope(x, out, batch, seq, heads, head_dim, pos_offset, theta, inverse,
              f32_scratch_.data());
  }

  void Attention(const float* q, const float* k, const float* v, float* out,
                 const AttentionShape& shape) override {
    GrowScratch(f32_scratch_, CpuAttentionScratchFloats(shape.seq, /*grad=*/false));
    cpu::Attention(q, k, v, out, shape, f32_scratch_.data());
  }

  void AttentionGrad(const float* q, const float* k, const float* v, const float* dout,
                     float* dq, float* dk, float* dv, const AttentionShape& shape) override {
    GrowScratch(f32_scratch_, CpuAttentionScratchFloats(shape.seq, /*grad=*/true));
    cpu::AttentionGrad(q, k, v, dout, dq, dk, dv, shape, f32_scratch_.data());
  }

  void Dropout(const float* x, float* out, int64_t n, const DropoutSpec& spec,
               const GlobalBox& box) override {
    cpu::Dropout(x, out, n, spec, box, threads_);
  }

  void RowMax(const float* logits, float* out, int64_t rows, int64_t cols) override {
    ForRows(rows, cols, [&](int64_t b, int64_t e) { RowMaxRows(logits, out, cols, b, e); });
  }

  void CrossEntropyParts(const float* logits, const float* m, const void* targets,
                         v1::DType targets_dtype, float* sumexp, float* tlogit, int64_t rows,
                         int64_t cols, int64_t col_offset) override {
    cpu::CrossEntropyParts(logits, m, targets, targets_dtype, sumexp, tlogit, rows, cols,
                           col_offset, threads_);
  }

  void CrossEntropyPartsGrad(const float* logits, const float* m, const void* targets,
                             v1::DType targets_dtype, const float* d_sumexp,
                             const float* d_tlogit, float* dlogits, int64_t rows, int64_t cols,
                             int64_t col_offset) override {
    cpu::CrossEntropyPartsGrad(logits, m, targets, targets_dtype, d_sumexp, d_tlogit, dlogits,
                               rows, cols, col_offset, threads_);
  }

  void CrossEntropyLoss(const float* sumexp, const float* m, const float* tlogit, float* out,
                        int64_t rows, float scale) override {
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      sum += std::log(static_cast<double>(sumexp[r])) + m[r] - tlogit[r];
    }
    out[0] = static_cast<float>(scale * sum);
  }

  void CrossEntropyLossGrad(const float* sumexp, float* d_sumexp, float* d_tlogit, int64_t rows,
                            float scale) override {
    for (int64_t r = 0; r < rows; ++r) {
      d_sumexp[r] = scale / sumexp[r];
      d_tlogit[r] = -scale;
    }
  }

  void Positions(void* out, v1::DType dtype, int64_t outer, int64_t len,
                 int64_t offset) override {
    if (dtype == v1::I64) {
      FillPositions(static_cast<int64_t*>(out), outer, len, offset);
    } else {
      FillPositions(static_cast<int32_t*>(out), outer, len, offset);
    }
  }

 private:
  // Half the address space: never satisfiable, and rounding it up cannot overflow.
  static constexpr int64_t kMaxAllocation = std::numeric_limits<int64_t>::max() / 2;

  // n elements of the width of `dtype`, every one the bits of value.
  template <typename Bits>
  static void FillWith(void* dst, int64_t n, v1::DType dtype, double value) {
    Bits bits = 0;
    EncodeElement(value, dtype, &bits);
    std::fill_n(static_cast<Bits*>(dst), std::max<int64_t>(n, 0), bits);
  }

  // out[o, t] = offset + t, in Int (int32_t or int64_t; I32 wraps as the cast does).
  template <typename Int>
  static void FillPositions(Int* out, int64_t outer, int64_t len, int64_t offset) {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t t = 0; t < len; ++t) out[o * len + t] = static_cast<Int>(offset + t);
    }
  }

  // Grows a scratch buffer to exactly n elements when it holds fewer, counting its growth in
  // memory_stats: each buffer ends as large as the largest call asked, which is what the planner
  // counts (common/kernel_scratch.h).
  template <typename T>
  void GrowScratch(std::vector<T>& scratch, int64_t n) {
    if (static_cast<int64_t>(scratch.size()) >= n) return;
    const int64_t before = static_cast<int64_t>(scratch.capacity() * sizeof(T));
    std::vector<T>().swap(scratch);  // freed first: the contents are not kept
    scratch.reserve(static_cast<size_t>(n));  // exactly n: resize alone may double the capacity
    scratch.resize(static_cast<size_t>(n));
    const int64_t after = static_cast<int64_t>(scratch.capacity() * sizeof(T));
    absl::MutexLock lock(&mu_);
    NoteInUseLocked(after - before);
  }

  void NoteInUseLocked(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    stats_.bytes_in_use += bytes;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }

  // Runs fn(begin, end) over n elements, or over `rows` rows of `cols`, on threads_ (loops.h).
  template <typename Fn>
  void ForElements(int64_t n, const Fn& fn) const {
    cpu::ParallelFor(threads_, n, cpu::kGrainElements, fn);
  }
  template <typename Fn>
  void ForRows(int64_t rows, int64_t cols, const Fn& fn) const {
    cpu::ParallelFor(threads_, rows, cpu::RowGrain(cols), fn);
  }

  const MatmulPrecision precision_;
  const int threads_;
  // kBf16 only: Matmul's operands rounded to bf16. Owned here and grown to the largest operand
  // seen, so steady-state steps do not allocate.
  std::vector<float> a_bf16_;
  std::vector<float> b_bf16_;
  // The transformer kernels' scratch (transformer_ops.h), kept and grown the same way.
  std::vector<float> f32_scratch_;
  std::vector<double> f64_scratch_;
  std::vector<int64_t> i64_scratch_;

  // Guards the memory accounting only: Allocate and Free may be called from several threads.
  // Otherwise the methods that use the scratch below (Matmul in bf16, the norms' gradients,
  // Rope, Attention, EmbeddingGrad) have one caller at a time; the data-movement methods
  // collectives call from their communicators' threads (Copy, Slice, Unslice, Scale, Cast, Fill)
  // touch no state and may run beside them (worker/executor/async_collectives.h).
  mutable absl::Mutex mu_;
  std::unordered_map<void*, int64_t> block_sizes_ ABSL_GUARDED_BY(mu_);  // Allocate's, by address
  MemoryStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Kernels> NewCpuKernels(const KernelOptions& options) {
  return std::make_unique<CpuKernels>(
      options.precision, options.threads > 0 ? options.threads : openblas_get_num_threads());
}

}  // namespace weft
