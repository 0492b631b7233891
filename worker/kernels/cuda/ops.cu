#include "worker/kernels/cuda/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include <cub/device/device_radix_sort.cuh>

#include "worker/kernels/cuda/grid_stride.h"

namespace weft::cuda {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// The sum of sums[0, kThreads) into sums[0], by a tree in a fixed order (deterministic). Every
// thread of a block of kThreads threads must call it, after writing its own sums[threadIdx.x].
__device__ void BlockSum(double* sums) {
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) sums[t] += sums[t + half];
    __syncthreads();
  }
}

template <typename Word>
__global__ void FillKernel(Word* dst, int64_t n, Word value) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) dst[i] = value;
}

__global__ void AddBiasKernel(const float* a, const float* bias, float* out, int64_t n,
                              int64_t cols) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = a[i] + bias[i % cols];
}

// BiasGrad blocks are 32 columns by 8 row lanes: a warp reads 32 consecutive floats of one row
// (coalesced), each thread sums every 8th row of its column in double, and lane 0 adds the 8
// partials in order. Rows are assigned to lanes and lanes added in a fixed order, so the result
// does not depend on scheduling.
constexpr int kBiasGradCols = 32;
constexpr int kBiasGradLanes = kThreads / kBiasGradCols;

__global__ void BiasGradKernel(const float* a, float* out, int64_t rows, int64_t cols) {
  __shared__ double partial[kBiasGradLanes][kBiasGradCols];
  const int64_t tiles = (cols + kBiasGradCols - 1) / kBiasGradCols;
  // The tile loop depends on blockIdx only, so every thread of the block reaches the barriers.
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t c = tile * kBiasGradCols + threadIdx.x;
    double sum = 0.0;
    if (c < cols) {
      for (int64_t r = threadIdx.y; r < rows; r += kBiasGradLanes) sum += a[r * cols + c];
    }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      double total = 0.0;
      for (int lane = 0; lane < kBiasGradLanes; ++lane) total += partial[lane][threadIdx.x];
      out[c] = static_cast<float>(total);
    }
    __syncthreads();  // partial is rewritten for the next tile
  }
}

__global__ void ReluKernel(const float* a, float* out, int64_t n) {
  // Written as the CPU backend writes it, so NaN maps to 0 on both.
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = a[i] > 0.0f ? a[i] : 0.0f;
}

__global__ void ReluGradKernel(const float* x, const float* dy, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

// GELU in double as on the CPU: float erf/exp would be within a few ulp, but double keeps the
// two backends equal to float rounding, and these kernels are memory-bound anyway.
__global__ void GeluKernel(const float* x, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const double v = x[i];
    out[i] = static_cast<float>(v * 0.5 * (1.0 + erf(v * kInvSqrt2)));
  }
}

__global__ void GeluGradKernel(const float* x, const float* dy, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const double v = x[i];
    const double cdf = 0.5 * (1.0 + erf(v * kInvSqrt2));
    const double pdf = kInvSqrt2Pi * exp(-0.5 * v * v);
    out[i] = static_cast<float>(dy[i] * (cdf + v * pdf));
  }
}

// Stage 1 of MseLoss: block b writes the double sum of its grid-stride share to partials[b].
__global__ void MsePartialKernel(const float* pred, const float* label, int64_t n,
                                 double* partials) {
  __shared__ double sums[kThreads];
  double sum = 0.0;
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const double d = static_cast<double>(pred[i]) - label[i];
    sum += d * d;
  }
  sums[threadIdx.x] = sum;
  BlockSum(sums);
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

// Stage 2 of MseLoss and CrossEntropyLoss, one block: out[0] = scale * the sum of
// partials[0, count).
__global__ void ScaledTotalKernel(const double* partials, int64_t count, float scale, float* out) {
  __shared__ double sums[kThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) sum += partials[i];
  sums[threadIdx.x] = sum;
  BlockSum(sums);
  if (threadIdx.x == 0) out[0] = static_cast<float>(static_cast<double>(scale) * sums[0]);
}

__global__ void MseGradKernel(const float* pred, const float* label, float* out, int64_t n,
                              float scale) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = scale * (pred[i] - label[i]);
}

__global__ void ScaleKernel(const float* a, float* out, int64_t n, float scale) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = scale * a[i];
}

__global__ void AddKernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = a[i] + b[i];
}

__global__ void SgdKernel(float* param, const float* grad, int64_t n, float lr,
                          float weight_decay, const float* grad_scale) {
  const float scale = grad_scale != nullptr ? grad_scale[0] : 1.0f;
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    // Without a scale, the CPU backend's expression exactly (no multiply by 1).
    const float g = grad_scale != nullptr ? grad[i] * scale : grad[i];
    param[i] -= lr * (g + weight_decay * param[i]);
  }
}

// Stage 1 of SumSquares: block b writes the double sum of its grid-stride share to partials[b].
__global__ void SumSquaresPartialKernel(const float* a, int64_t n, double* partials) {
  __shared__ double sums[kThreads];
  double sum = 0.0;
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const double x = static_cast<double>(a[i]);
    sum += x * x;
  }
  sums[threadIdx.x] = sum;
  BlockSum(sums);
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

__global__ void ClipCoefficientKernel(const float* norm_sq, float max_norm, float* out) {
  out[0] = fminf(1.0f, max_norm / (sqrtf(norm_sq[0]) + 1e-6f));
}

// The expression of the CPU backend's AdamW, term for term. sqrtf and '/' are IEEE-rounded
// (nvcc's defaults without --use_fast_math).
__global__ void AdamWKernel(float* param, const float* grad, float* m, float* v, int64_t n,
                            AdamWStep s, const float* grad_scale) {
  const float one_minus_beta1 = 1.0f - s.beta1, one_minus_beta2 = 1.0f - s.beta2;
  const float scale = grad_scale != nullptr ? grad_scale[0] : 1.0f;  // g * 1 is g exactly
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const float g = grad[i] * scale;
    const float mi = s.beta1 * m[i] + one_minus_beta1 * g;
    const float vi = s.beta2 * v[i] + one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] = param[i] * s.decay - s.step_size * mi / (sqrtf(vi) * s.inv_sqrt_bias2 + s.eps);
  }
}

// Slice and Unslice as one strided copy in words of type Word: the kept part of each outer index
// is a contiguous run of `run` words, `pitch` words apart in the full tensor and starting `start`
// words into it. Word idx of the compact side is word idx % run of outer index idx / run.
template <typename Word>
__global__ void SliceKernel(const Word* a, Word* out, int64_t n, int64_t run, int64_t pitch,
                            int64_t start) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t o = i / run;
    out[i] = a[o * pitch + start + (i - o * run)];
  }
}

template <typename Word>
__global__ void UnsliceKernel(const Word* a, Word* out, int64_t n, int64_t run, int64_t pitch,
                              int64_t start) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t o = i / run;
    out[o * pitch + start + (i - o * run)] = a[i];
  }
}

// The conversions of common/dtype.h's ConvertElements, written again for the device (that file
// is host C++ over protobuf types): the same steps in the same order, so results are bit-equal
// (a NaN's payload bits excepted: NaN stays NaN).

// FloatToBf16Bits: round to nearest even; a NaN keeps its sign and gets its quiet bit set before
// the low half is dropped.
__device__ inline uint16_t Bf16Bits(float f) {
  const uint32_t bits = __float_as_uint(f);
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits | 0x00400000u) >> 16;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}

// bf16 is carried as its bits; a distinct type keeps it apart from a 16-bit integer.
struct Bf16 {
  uint16_t bits;
};

__device__ inline double ToDouble(float v) { return v; }
__device__ inline double ToDouble(Bf16 v) {
  return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
}
__device__ inline double ToDouble(int32_t v) { return v; }
__device__ inline double ToDouble(int64_t v) { return static_cast<double>(v); }

// SaturatingCast: NaN to 0, clamped at the bounds (as doubles), truncated toward zero between.
template <typename Int>
__device__ inline Int Saturate(double v, Int lowest, Int highest) {
  if (isnan(v)) return 0;
  if (v <= static_cast<double>(lowest)) return lowest;
  if (v >= static_cast<double>(highest)) return highest;
  return static_cast<Int>(v);
}

template <typename To>
struct FromDouble;
template <>
struct FromDouble<float> {
  __device__ static float Convert(double v) { return static_cast<float>(v); }
};
template <>
struct FromDouble<Bf16> {
  // Through float, as ConvertElements goes.
  __device__ static Bf16 Convert(double v) { return Bf16{Bf16Bits(static_cast<float>(v))}; }
};
template <>
struct FromDouble<int32_t> {
  __device__ static int32_t Convert(double v) {
    return Saturate<int32_t>(v, INT32_MIN, INT32_MAX);
  }
};
template <>
struct FromDouble<int64_t> {
  __device__ static int64_t Convert(double v) {
    return Saturate<int64_t>(v, INT64_MIN, INT64_MAX);
  }
};

template <typename From, typename To>
__device__ inline To Convert(From v) {
  return FromDouble<To>::Convert(ToDouble(v));
}
// float <-> bf16 without the detour through double, which is exact for every value but a NaN:
// the hot pairs (bf16 Matmul operands), and a NaN keeps its sign either way.
template <>
__device__ inline Bf16 Convert<float, Bf16>(float v) {
  return Bf16{Bf16Bits(v)};
}
template <>
__device__ inline float Convert<Bf16, float>(Bf16 v) {
  return __uint_as_float(static_cast<uint32_t>(v.bits) << 16);
}
// The two integer pairs ConvertElements takes without double: exact where the value fits.
template <>
__device__ inline int32_t Convert<int64_t, int32_t>(int64_t v) {
  return static_cast<int32_t>(v < INT32_MIN ? INT32_MIN : (v > INT32_MAX ? INT32_MAX : v));
}
template <>
__device__ inline int64_t Convert<int32_t, int64_t>(int32_t v) {
  return v;
}

template <typename From, typename To>
__global__ void CastKernel(const From* in, To* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = Convert<From, To>(in[i]);
}

template <typename From>
void CastFrom(const From* in, ElementType to, void* out, int64_t n, cudaStream_t stream) {
  switch (to) {
    case ElementType::kF32:
      CastKernel<<<Blocks(n), kThreads, 0, stream>>>(in, static_cast<float*>(out), n);
      break;
    case ElementType::kBf16:
      CastKernel<<<Blocks(n), kThreads, 0, stream>>>(in, static_cast<Bf16*>(out), n);
      break;
    case ElementType::kI32:
      CastKernel<<<Blocks(n), kThreads, 0, stream>>>(in, static_cast<int32_t*>(out), n);
      break;
    case ElementType::kI64:
      CastKernel<<<Blocks(n), kThreads, 0, stream>>>(in, static_cast<int64_t*>(out), n);
      break;
  }
}

// The widest word of 16, 8, 4, 2 or 1 bytes that divides every byte count and address given.
int WordBytes(std::initializer_list<uint64_t> values) {
  uint64_t all = 16;
  for (uint64_t v : values) all |= v;
  return static_cast<int>(all & (~all + 1));  // the lowest set bit, at most 16
}

// Slice (a strided source) or, when `unslice`, Unslice (a strided destination) in `Word`s.
template <typename Word>
void StridedCopy(bool unslice, const void* a, void* out, int64_t outer, int64_t run_bytes,
                 int64_t pitch_bytes, int64_t start_bytes, cudaStream_t stream) {
  constexpr int64_t w = sizeof(Word);
  const int64_t run = run_bytes / w;
  const int64_t n = outer * run;
  const auto* src = static_cast<const Word*>(a);
  auto* dst = static_cast<Word*>(out);
  if (unslice) {
    UnsliceKernel<<<Blocks(n), kThreads, 0, stream>>>(src, dst, n, run, pitch_bytes / w,
                                                      start_bytes / w);
  } else {
    SliceKernel<<<Blocks(n), kThreads, 0, stream>>>(src, dst, n, run, pitch_bytes / w,
                                                    start_bytes / w);
  }
}

void SliceOrUnslice(bool unslice, const void* a, void* out, int64_t outer, int64_t axis_len,
                    int64_t inner, int64_t offset, int64_t length, int64_t element_bytes,
                    cudaStream_t stream) {
  if (outer <= 0 || length <= 0 || inner <= 0 || element_bytes <= 0) return;
  const int64_t run_bytes = length * inner * element_bytes;
  const int64_t pitch_bytes = axis_len * inner * element_bytes;
  const int64_t start_bytes = offset * inner * element_bytes;
  const int word = WordBytes({static_cast<uint64_t>(run_bytes), static_cast<uint64_t>(pitch_bytes),
                              static_cast<uint64_t>(start_bytes),
                              reinterpret_cast<uintptr_t>(a), reinterpret_cast<uintptr_t>(out)});
  switch (word) {
    case 16:
      StridedCopy<uint4>(unslice, a, out, outer, run_bytes, pitch_bytes, start_bytes, stream);
      break;
    case 8:
      StridedCopy<uint64_t>(unslice, a, out, outer, run_bytes, pitch_bytes, start_bytes, stream);
      break;
    case 4:
      StridedCopy<uint32_t>(unslice, a, out, outer, run_bytes, pitch_bytes, start_bytes, stream);
      break;
    case 2:
      StridedCopy<uint16_t>(unslice, a, out, outer, run_bytes, pitch_bytes, start_bytes, stream);
      break;
    default:
      StridedCopy<uint8_t>(unslice, a, out, outer, run_bytes, pitch_bytes, start_bytes, stream);
      break;
  }
}

}  // namespace

void Fill(void* dst, int64_t n, int64_t element_bytes, uint64_t bits, cudaStream_t stream) {
  if (n <= 0) return;
  switch (element_bytes) {
    case 2:
      FillKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<uint16_t*>(dst), n,
                                                     static_cast<uint16_t>(bits));
      break;
    case 4:
      FillKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(dst), n,
                                                     static_cast<uint32_t>(bits));
      break;
    case 8:
      FillKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<uint64_t*>(dst), n, bits);
      break;
  }
}

void AddBias(const float* a, const float* bias, float* out, int64_t rows, int64_t cols,
             cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t n = rows * cols;
  AddBiasKernel<<<Blocks(n), kThreads, 0, stream>>>(a, bias, out, n, cols);
}

void BiasGrad(const float* a, float* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  // rows == 0 still launches: the kernel writes the zero sums.
  if (cols <= 0 || rows < 0) return;
  const int64_t tiles = (cols + kBiasGradCols - 1) / kBiasGradCols;
  const int blocks = static_cast<int>(std::min(tiles, kMaxBlocks));
  const dim3 threads(kBiasGradCols, kBiasGradLanes);
  BiasGradKernel<<<blocks, threads, 0, stream>>>(a, out, rows, cols);
}

void Relu(const float* a, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  ReluKernel<<<Blocks(n), kThreads, 0, stream>>>(a, out, n);
}

void ReluGrad(const float* x, const float* dy, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  ReluGradKernel<<<Blocks(n), kThreads, 0, stream>>>(x, dy, out, n);
}

void Gelu(const float* x, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  GeluKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, n);
}

void GeluGrad(const float* x, const float* dy, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  GeluGradKernel<<<Blocks(n), kThreads, 0, stream>>>(x, dy, out, n);
}

int64_t MseLossScratchSize(int64_t n) { return n <= 0 ? 0 : Blocks(n); }

void MseLoss(const float* pred, const float* label, float* out, int64_t n, float scale,
             double* scratch, cudaStream_t stream) {
  // The grid depends on n alone, so each element always lands in the same partial: the sum is
  // the same run to run. With n == 0 only the final block runs, writing scale * 0.
  const int64_t partials = MseLossScratchSize(n);
  if (partials > 0) {
    MsePartialKernel<<<static_cast<int>(partials), kThreads, 0, stream>>>(pred, label, n,
                                                                          scratch);
  }
  ScaledTotalKernel<<<1, kThreads, 0, stream>>>(scratch, partials, scale, out);
}

void MseGrad(const float* pred, const float* label, float* out, int64_t n, float scale,
             cudaStream_t stream) {
  if (n <= 0) return;
  MseGradKernel<<<Blocks(n), kThreads, 0, stream>>>(pred, label, out, n, scale);
}

void Scale(const float* a, float* out, int64_t n, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(a, out, n, scale);
}

void Add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  AddKernel<<<Blocks(n), kThreads, 0, stream>>>(a, b, out, n);
}

void Sgd(float* param, const float* grad, int64_t n, float lr, float weight_decay,
         const float* grad_scale, cudaStream_t stream) {
  if (n <= 0) return;
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(param, grad, n, lr, weight_decay, grad_scale);
}

void SumSquares(const float* a, float* out, int64_t n, double* scratch, cudaStream_t stream) {
  // As MseLoss: the grid depends on n alone, so the sum is the same run to run.
  const int64_t partials = MseLossScratchSize(n);
  if (partials > 0) {
    SumSquaresPartialKernel<<<static_cast<int>(partials), kThreads, 0, stream>>>(a, n, scratch);
  }
  ScaledTotalKernel<<<1, kThreads, 0, stream>>>(scratch, partials, 1.0f, out);
}

void ClipCoefficient(const float* norm_sq, float max_norm, float* out, cudaStream_t stream) {
  ClipCoefficientKernel<<<1, 1, 0, stream>>>(norm_sq, max_norm, out);
}

void AdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
           const float* grad_scale, cudaStream_t stream) {
  if (n <= 0) return;
  AdamWKernel<<<Blocks(n), kThreads, 0, stream>>>(param, grad, m, v, n, step, grad_scale);
}

void Slice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
           int64_t offset, int64_t length, int64_t element_bytes, cudaStream_t stream) {
  SliceOrUnslice(/*unslice=*/false, a, out, outer, axis_len, inner, offset, length,
                 element_bytes, stream);
}

void Unslice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
             int64_t offset, int64_t length, int64_t element_bytes, cudaStream_t stream) {
  SliceOrUnslice(/*unslice=*/true, a, out, outer, axis_len, inner, offset, length,
                 element_bytes, stream);
}

void Cast(const void* in, ElementType from, void* out, ElementType to, int64_t n,
          cudaStream_t stream) {
  if (n <= 0 || from == to) return;
  switch (from) {
    case ElementType::kF32:
      CastFrom(static_cast<const float*>(in), to, out, n, stream);
      break;
    case ElementType::kBf16:
      CastFrom(static_cast<const Bf16*>(in), to, out, n, stream);
      break;
    case ElementType::kI32:
      CastFrom(static_cast<const int32_t*>(in), to, out, n, stream);
      break;
    case ElementType::kI64:
      CastFrom(static_cast<const int64_t*>(in), to, out, n, stream);
      break;
  }
}


// ---- Transformers

namespace {

__device__ inline float MaxOf(float a, float b) { return b > a ? b : a; }

// The block's total of every thread's `value`, returned to every thread: BlockSum's fixed tree,
// then a barrier so that `sums` may be written again.
__device__ double BlockTotal(double value, double* sums) {
  sums[threadIdx.x] = value;
  BlockSum(sums);
  const double total = sums[0];
  __syncthreads();
  return total;
}

// The block's maximum of every thread's `value`, returned to every thread (maxes: kThreads).
__device__ float BlockMax(float value, float* maxes) {
  const int t = static_cast<int>(threadIdx.x);
  maxes[t] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) maxes[t] = MaxOf(maxes[t], maxes[t + half]);
    __syncthreads();
  }
  const float result = maxes[0];
  __syncthreads();
  return result;
}

// Row kernels run kThreads threads a block, a block per row over a grid-stride loop on rows (the
// loop depends on blockIdx only, so every thread reaches the barriers); thread t handles columns
// t, t + kThreads, ... of the row.
int RowBlocks(int64_t rows) { return static_cast<int>(std::min(rows, kMaxBlocks)); }

// Runs f(ptr) with ptr the pointer typed as `type`'s integers (kI32 or kI64); nothing otherwise.
template <typename F>
void WithIndexType(const void* p, ElementType type, F&& f) {
  switch (type) {
    case ElementType::kI32:
      f(static_cast<const int32_t*>(p));
      break;
    case ElementType::kI64:
      f(static_cast<const int64_t*>(p));
      break;
    default:
      break;
  }
}

template <typename Index>
__global__ void EmbeddingKernel(const Index* ids, const float* table, float* out, int64_t total,
                                int64_t table_rows, int64_t dim, int64_t row_offset) {
  for (int64_t idx = FirstIndex(); idx < total; idx += GridStride()) {
    const int64_t r = idx / dim, c = idx - r * dim;
    const int64_t row = static_cast<int64_t>(ids[r]) - row_offset;
    out[idx] = row >= 0 && row < table_rows ? table[row * dim + c] : 0.0f;
  }
}

// EmbeddingGrad's sort input: each id's table row (table_rows for an id outside the shard, so it
// sorts last and no row reads it) and its position r.
template <typename Index>
__global__ void EmbeddingSortKeysKernel(const Index* ids, int64_t n, int64_t table_rows,
                                        int64_t row_offset, uint64_t* keys, int64_t* positions) {
  for (int64_t r = FirstIndex(); r < n; r += GridStride()) {
    const int64_t row = static_cast<int64_t>(ids[r]) - row_offset;
    keys[r] = static_cast<uint64_t>(row >= 0 && row < table_rows ? row : table_rows);
    positions[r] = r;
  }
}

// The first index of sorted keys[0, n) whose key is >= value.
__device__ int64_t LowerBound(const uint64_t* keys, int64_t n, uint64_t value) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// A block per table row: the row's run of the (stably) sorted keys holds the positions of its
// ids in ascending order; each thread adds dy's rows at those positions for its columns.
__global__ void EmbeddingGradSumKernel(const uint64_t* keys, const int64_t* positions, int64_t n,
                                       const float* dy, float* grad_table, int64_t table_rows,
                                       int64_t dim) {
  __shared__ int64_t run[2];
  for (int64_t row = blockIdx.x; row < table_rows; row += gridDim.x) {
    if (threadIdx.x == 0) {
      run[0] = LowerBound(keys, n, static_cast<uint64_t>(row));
      run[1] = LowerBound(keys, n, static_cast<uint64_t>(row) + 1);
    }
    __syncthreads();
    const int64_t begin = run[0], end = run[1];
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
      double sum = 0.0;
      for (int64_t j = begin; j < end; ++j) sum += dy[positions[j] * dim + c];
      grad_table[row * dim + c] = static_cast<float>(sum);
    }
    __syncthreads();  // run is rewritten for the next row
  }
}

// EmbeddingGrad's scratch, carved from one block: the sort's keys and positions, in and out, and
// CUB's temporary storage, each at a 256-byte boundary.
struct EmbeddingGradScratch {
  uint64_t* keys_in = nullptr;
  uint64_t* keys_out = nullptr;
  int64_t* positions_in = nullptr;
  int64_t* positions_out = nullptr;
  void* sort_storage = nullptr;
  size_t sort_bytes = 0;
  int64_t total_bytes = 0;
};

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// The key bits the sort looks at: enough for table_rows, the largest key.
int SortBits(int64_t table_rows) {
  int bits = 1;
  while (bits < 64 && (static_cast<uint64_t>(table_rows) >> bits) != 0) ++bits;
  return bits;
}

// The layout of EmbeddingGrad's scratch at `base` (null: sizes only).
EmbeddingGradScratch EmbeddingGradLayout(void* base, int64_t n, int64_t table_rows) {
  EmbeddingGradScratch s;
  cub::DeviceRadixSort::SortPairs(nullptr, s.sort_bytes, static_cast<const uint64_t*>(nullptr),
                                  static_cast<uint64_t*>(nullptr),
                                  static_cast<const int64_t*>(nullptr),
                                  static_cast<int64_t*>(nullptr), n, 0, SortBits(table_rows));
  auto* bytes = static_cast<char*>(base);
  const int64_t array_bytes = Align256(n * static_cast<int64_t>(sizeof(int64_t)));
  int64_t offset = 0;
  auto carve = [&](int64_t size) {
    char* p = bytes == nullptr ? nullptr : bytes + offset;
    offset += Align256(size);
    return p;
  };
  s.keys_in = reinterpret_cast<uint64_t*>(carve(array_bytes));
  s.keys_out = reinterpret_cast<uint64_t*>(carve(array_bytes));
  s.positions_in = reinterpret_cast<int64_t*>(carve(array_bytes));
  s.positions_out = reinterpret_cast<int64_t*>(carve(array_bytes));
  s.sort_storage = carve(static_cast<int64_t>(s.sort_bytes));
  s.total_bytes = offset;
  return s;
}

// LayerNorm's statistics of row xr: its mean and 1 / sqrt(var + eps), var the biased variance
// (two passes), in double. Every thread of the block calls it.
__device__ void LayerNormStats(const float* xr, int64_t dim, float eps, double* sums,
                               double* mean, double* rstd) {
  double s = 0.0;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) s += xr[c];
  const double mu = BlockTotal(s, sums) / static_cast<double>(dim);
  double q = 0.0;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    const double d = xr[c] - mu;
    q += d * d;
  }
  const double var = BlockTotal(q, sums) / static_cast<double>(dim);
  *mean = mu;
  *rstd = 1.0 / sqrt(var + static_cast<double>(eps));
}

// RmsNorm's 1 / sqrt(mean(x^2) + eps) of row xr, in double. Every thread of the block calls it.
__device__ double RmsNormRstd(const float* xr, int64_t dim, float eps, double* sums) {
  double q = 0.0;
  for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
    const double v = xr[c];
    q += v * v;
  }
  const double ms = BlockTotal(q, sums) / static_cast<double>(dim);
  return 1.0 / sqrt(ms + static_cast<double>(eps));
}

__global__ void LayerNormKernel(const float* x, const float* gamma, const float* beta, float* y,
                                int64_t rows, int64_t dim, float eps) {
  __shared__ double sums[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * dim;
    float* yr = y + row * dim;
    double mean, rstd;
    LayerNormStats(xr, dim, eps, sums, &mean, &rstd);
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
      yr[c] = static_cast<float>((xr[c] - mean) * rstd * gamma[c] + beta[c]);
    }
  }
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma; row_stats (when not null)
// gets each row's mean and rstd for NormParamGradKernel.
__global__ void LayerNormGradKernel(const float* x, const float* gamma, const float* dy, float* dx,
                                    double* row_stats, int64_t rows, int64_t dim, float eps) {
  __shared__ double sums[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * dim;
    const float* dyr = dy + row * dim;
    double mean, rstd;
    LayerNormStats(xr, dim, eps, sums, &mean, &rstd);
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
      const double g = static_cast<double>(dyr[c]) * gamma[c];
      sum_g += g;
      sum_gx += g * ((xr[c] - mean) * rstd);
    }
    const double mean_g = BlockTotal(sum_g, sums) / static_cast<double>(dim);
    const double mean_gx = BlockTotal(sum_gx, sums) / static_cast<double>(dim);
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
      const double g = static_cast<double>(dyr[c]) * gamma[c];
      const double xhat = (xr[c] - mean) * rstd;
      dx[row * dim + c] = static_cast<float>(rstd * (g - mean_g - xhat * mean_gx));
    }
    if (row_stats != nullptr && threadIdx.x == 0) {
      row_stats[2 * row] = mean;
      row_stats[2 * row + 1] = rstd;
    }
  }
}

__global__ void RmsNormKernel(const float* x, const float* gamma, float* y, int64_t rows,
                              int64_t dim, float eps) {
  __shared__ double sums[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * dim;
    const double rstd = RmsNormRstd(xr, dim, eps, sums);
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
      y[row * dim + c] = static_cast<float>(xr[c] * rstd * gamma[c]);
    }
  }
}

// dx = rstd * g - x * rstd^3 * mean(g * x), g = dy * gamma; row_stats (when not null) gets
// (0, rstd) per row, so NormParamGradKernel's xhat is x * rstd.
__global__ void RmsNormGradKernel(const float* x, const float* gamma, const float* dy, float* dx,
                                  double* row_stats, int64_t rows, int64_t dim, float eps) {
  __shared__ double sums[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * dim;
    const float* dyr = dy + row * dim;
    const double rstd = RmsNormRstd(xr, dim, eps, sums);
    double sum_gx = 0.0;
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
      sum_gx += static_cast<double>(dyr[c]) * gamma[c] * xr[c];
    }
    const double mean_gx = BlockTotal(sum_gx, sums) / static_cast<double>(dim);
    const double factor = rstd * rstd * rstd * mean_gx;
    for (int64_t c = threadIdx.x; c < dim; c += kThreads) {
      const double g = static_cast<double>(dyr[c]) * gamma[c];
      dx[row * dim + c] = static_cast<float>(rstd * g - xr[c] * factor);
    }
    if (row_stats != nullptr && threadIdx.x == 0) {
      row_stats[2 * row] = 0.0;
      row_stats[2 * row + 1] = rstd;
    }
  }
}

// dgamma[c] = sum_r dy[r, c] * (x[r, c] - mean[r]) * rstd[r] and dbeta[c] = sum_r dy[r, c] (each
// skipped when null), row_stats holding (mean, rstd) per row. Tiled as BiasGradKernel: 32 columns
// by 8 row lanes, each lane summing every 8th row in double, lane 0 adding the lanes in order.
__global__ void NormParamGradKernel(const float* x, const float* dy, const double* row_stats,
                                    float* dgamma, float* dbeta, int64_t rows, int64_t cols) {
  __shared__ double gamma_partial[kBiasGradLanes][kBiasGradCols];
  __shared__ double beta_partial[kBiasGradLanes][kBiasGradCols];
  const int64_t tiles = (cols + kBiasGradCols - 1) / kBiasGradCols;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t c = tile * kBiasGradCols + threadIdx.x;
    double sum_gamma = 0.0, sum_beta = 0.0;
    if (c < cols) {
      for (int64_t r = threadIdx.y; r < rows; r += kBiasGradLanes) {
        const double g = dy[r * cols + c];
        sum_gamma += g * ((x[r * cols + c] - row_stats[2 * r]) * row_stats[2 * r + 1]);
        sum_beta += g;
      }
    }
    gamma_partial[threadIdx.y][threadIdx.x] = sum_gamma;
    beta_partial[threadIdx.y][threadIdx.x] = sum_beta;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      double total_gamma = 0.0, total_beta = 0.0;
      for (int lane = 0; lane < kBiasGradLanes; ++lane) {
        total_gamma += gamma_partial[lane][threadIdx.x];
        total_beta += beta_partial[lane][threadIdx.x];
      }
      if (dgamma != nullptr) dgamma[c] = static_cast<float>(total_gamma);
      if (dbeta != nullptr) dbeta[c] = static_cast<float>(total_beta);
    }
    __syncthreads();
  }
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kGeluTanhCubic = 0.044715;

__global__ void GeluTanhKernel(const float* x, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const double v = x[i];
    const double t = tanh(kSqrt2OverPi * (v + kGeluTanhCubic * v * v * v));
    out[i] = static_cast<float>(0.5 * v * (1.0 + t));
  }
}

// d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2).
__global__ void GeluTanhGradKernel(const float* x, const float* dy, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const double v = x[i];
    const double t = tanh(kSqrt2OverPi * (v + kGeluTanhCubic * v * v * v));
    const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluTanhCubic * v * v);
    out[i] = static_cast<float>(dy[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * du));
  }
}

__global__ void SiluKernel(const float* x, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const double v = x[i];
    out[i] = static_cast<float>(v / (1.0 + exp(-v)));
  }
}

__global__ void SiluGradKernel(const float* x, const float* dy, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const double v = x[i];
    const double s = 1.0 / (1.0 + exp(-v));
    out[i] = static_cast<float>(dy[i] * s * (1.0 + v * (1.0 - s)));
  }
}

__global__ void MulKernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = a[i] * b[i];
}

// One thread per rotated pair (x[i], x[i + half]) of a [.., head_dim] row; the row's position is
// pos_offset + its seq index. sign is -1 for the inverse (sin(-a) = -sin(a)).
__global__ void RopeKernel(const float* x, float* out, int64_t pairs, int64_t seq, int64_t heads,
                           int64_t half, int64_t pos_offset, float theta, double sign) {
  const int64_t head_dim = 2 * half;
  for (int64_t idx = FirstIndex(); idx < pairs; idx += GridStride()) {
    const int64_t row = idx / half, i = idx - row * half;
    const int64_t t = (row / heads) % seq;
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float inv_freq =
        1.0f / static_cast<float>(pow(static_cast<double>(theta), static_cast<double>(exponent)));
    const float angle = static_cast<float>(pos_offset + t) * inv_freq;
    const double c = static_cast<float>(cos(static_cast<double>(angle)));
    const double s = sign * static_cast<float>(sin(static_cast<double>(angle)));
    const float* xr = x + row * head_dim;
    float* yr = out + row * head_dim;
    const double x0 = xr[i], x1 = xr[i + half];
    yr[i] = static_cast<float>(x0 * c - x1 * s);
    yr[i + half] = static_cast<float>(x1 * c + x0 * s);
  }
}

__global__ void DropoutKernel(const float* x, float* out, int64_t n, DropoutMask mask,
                              MaskBox box) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const float v = x[i];
    if (!mask.active()) {
      out[i] = v;
    } else {
      const auto e = static_cast<uint64_t>(GlobalIndex(box, i));
      out[i] = mask.Keeps(e) ? v * mask.keep_scale : 0.0f;
    }
  }
}

__global__ void RowMaxKernel(const float* logits, float* out, int64_t rows, int64_t cols) {
  __shared__ float maxes[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* lr = logits + row * cols;
    float m = -INFINITY;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) m = MaxOf(m, lr[c]);
    m = BlockMax(m, maxes);
    if (threadIdx.x == 0) out[row] = m;
  }
}

template <typename Index>
__global__ void CrossEntropyPartsKernel(const float* logits, const float* m, const Index* targets,
                                        float* sumexp, float* tlogit, int64_t rows, int64_t cols,
                                        int64_t col_offset) {
  __shared__ double sums[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* lr = logits + row * cols;
    const double mr = m[row];
    double s = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) s += exp(lr[c] - mr);
    const double total = BlockTotal(s, sums);
    if (threadIdx.x == 0) {
      sumexp[row] = static_cast<float>(total);
      const int64_t c = static_cast<int64_t>(targets[row]) - col_offset;
      tlogit[row] = c >= 0 && c < cols ? lr[c] : 0.0f;
    }
  }
}

template <typename Index>
__global__ void CrossEntropyPartsGradKernel(const float* logits, const float* m,
                                            const Index* targets, const float* d_sumexp,
                                            const float* d_tlogit, float* dlogits, int64_t total,
                                            int64_t cols, int64_t col_offset) {
  for (int64_t idx = FirstIndex(); idx < total; idx += GridStride()) {
    const int64_t r = idx / cols, c = idx - r * cols;
    double g = static_cast<double>(d_sumexp[r]) * exp(static_cast<double>(logits[idx]) - m[r]);
    if (c == static_cast<int64_t>(targets[r]) - col_offset) g += d_tlogit[r];
    dlogits[idx] = static_cast<float>(g);
  }
}

// Stage 1 of CrossEntropyLoss, as MsePartialKernel's.
__global__ void CrossEntropyPartialKernel(const float* sumexp, const float* m,
                                          const float* tlogit, int64_t rows, double* partials) {
  __shared__ double sums[kThreads];
  double sum = 0.0;
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    sum += log(static_cast<double>(sumexp[r])) + m[r] - tlogit[r];
  }
  sums[threadIdx.x] = sum;
  BlockSum(sums);
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

__global__ void CrossEntropyLossGradKernel(const float* sumexp, float* d_sumexp, float* d_tlogit,
                                           int64_t rows, float scale) {
  for (int64_t r = FirstIndex(); r < rows; r += GridStride()) {
    d_sumexp[r] = scale / sumexp[r];
    d_tlogit[r] = -scale;
  }
}

template <typename Int>
__global__ void PositionsKernel(Int* out, int64_t total, int64_t len, int64_t offset) {
  for (int64_t idx = FirstIndex(); idx < total; idx += GridStride()) {
    out[idx] = static_cast<Int>(offset + idx % len);
  }
}

// Launches NormParamGradKernel over dim columns (also for rows == 0: it writes the zero sums).
void NormParamGrad(const float* x, const float* dy, const double* row_stats, float* dgamma,
                   float* dbeta, int64_t rows, int64_t dim, cudaStream_t stream) {
  const int64_t tiles = (dim + kBiasGradCols - 1) / kBiasGradCols;
  const dim3 threads(kBiasGradCols, kBiasGradLanes);
  NormParamGradKernel<<<static_cast<int>(std::min(tiles, kMaxBlocks)), threads, 0, stream>>>(
      x, dy, row_stats, dgamma, dbeta, rows, dim);
}

}  // namespace

void Embedding(const void* ids, ElementType ids_type, const float* table, float* out, int64_t n,
               int64_t table_rows, int64_t dim, int64_t row_offset, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  const int64_t total = n * dim;
  WithIndexType(ids, ids_type, [&](auto* typed) {
    EmbeddingKernel<<<Blocks(total), kThreads, 0, stream>>>(typed, table, out, total, table_rows,
                                                            dim, row_offset);
  });
}

int64_t EmbeddingGradScratchSize(int64_t n, int64_t table_rows) {
  return n <= 0 ? 0 : EmbeddingGradLayout(nullptr, n, table_rows).total_bytes;
}

cudaError_t EmbeddingGrad(const void* ids, ElementType ids_type, const float* dy,
                          float* grad_table, int64_t n, int64_t table_rows, int64_t dim,
                          int64_t row_offset, void* scratch, cudaStream_t stream) {
  if (table_rows <= 0 || dim <= 0) return cudaSuccess;
  EmbeddingGradScratch s;
  if (n > 0) {
    s = EmbeddingGradLayout(scratch, n, table_rows);
    WithIndexType(ids, ids_type, [&](auto* typed) {
      EmbeddingSortKeysKernel<<<Blocks(n), kThreads, 0, stream>>>(
          typed, n, table_rows, row_offset, s.keys_in, s.positions_in);
    });
    // LSD radix sort is stable: equal keys keep ascending positions.
    const cudaError_t err = cub::DeviceRadixSort::SortPairs(
        s.sort_storage, s.sort_bytes, s.keys_in, s.keys_out, s.positions_in, s.positions_out, n,
        0, SortBits(table_rows), stream);
    if (err != cudaSuccess) return err;
  }
  // n == 0: every run is empty, so every row is written as zeros.
  EmbeddingGradSumKernel<<<RowBlocks(table_rows), kThreads, 0, stream>>>(
      s.keys_out, s.positions_out, n > 0 ? n : 0, dy, grad_table, table_rows, dim);
  return cudaSuccess;
}

void LayerNorm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
               int64_t dim, float eps, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  LayerNormKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(x, gamma, beta, y, rows, dim, eps);
}

void LayerNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                   float* dbeta, int64_t rows, int64_t dim, float eps, double* row_stats,
                   cudaStream_t stream) {
  if (dim <= 0 || rows < 0) return;
  const bool params = dgamma != nullptr || dbeta != nullptr;
  if (rows > 0) {
    LayerNormGradKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(
        x, gamma, dy, dx, params ? row_stats : nullptr, rows, dim, eps);
  }
  if (params) NormParamGrad(x, dy, row_stats, dgamma, dbeta, rows, dim, stream);
}

void RmsNorm(const float* x, const float* gamma, float* y, int64_t rows, int64_t dim, float eps,
             cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return;
  RmsNormKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(x, gamma, y, rows, dim, eps);
}

void RmsNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                 int64_t rows, int64_t dim, float eps, double* row_stats, cudaStream_t stream) {
  if (dim <= 0 || rows < 0) return;
  if (rows > 0) {
    RmsNormGradKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(
        x, gamma, dy, dx, dgamma != nullptr ? row_stats : nullptr, rows, dim, eps);
  }
  if (dgamma != nullptr) NormParamGrad(x, dy, row_stats, dgamma, nullptr, rows, dim, stream);
}

void GeluTanh(const float* x, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  GeluTanhKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, n);
}

void GeluTanhGrad(const float* x, const float* dy, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  GeluTanhGradKernel<<<Blocks(n), kThreads, 0, stream>>>(x, dy, out, n);
}

void Silu(const float* x, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  SiluKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, n);
}

void SiluGrad(const float* x, const float* dy, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  SiluGradKernel<<<Blocks(n), kThreads, 0, stream>>>(x, dy, out, n);
}

void Mul(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  MulKernel<<<Blocks(n), kThreads, 0, stream>>>(a, b, out, n);
}

void Rope(const float* x, float* out, int64_t batch, int64_t seq, int64_t heads,
          int64_t head_dim, int64_t pos_offset, float theta, bool inverse, cudaStream_t stream) {
  const int64_t half = head_dim / 2;
  const int64_t pairs = batch * seq * heads * half;
  if (pairs <= 0) return;
  RopeKernel<<<Blocks(pairs), kThreads, 0, stream>>>(x, out, pairs, seq, heads, half, pos_offset,
                                                     theta, inverse ? -1.0 : 1.0);
}

void Dropout(const float* x, float* out, int64_t n, const DropoutMask& mask, const MaskBox& box,
             cudaStream_t stream) {
  if (n <= 0) return;
  DropoutKernel<<<Blocks(n), kThreads, 0, stream>>>(x, out, n, mask, box);
}

void RowMax(const float* logits, float* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0 || cols < 0) return;
  RowMaxKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(logits, out, rows, cols);
}

void CrossEntropyParts(const float* logits, const float* m, const void* targets,
                       ElementType targets_type, float* sumexp, float* tlogit, int64_t rows,
                       int64_t cols, int64_t col_offset, cudaStream_t stream) {
  if (rows <= 0 || cols < 0) return;
  WithIndexType(targets, targets_type, [&](auto* typed) {
    CrossEntropyPartsKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(
        logits, m, typed, sumexp, tlogit, rows, cols, col_offset);
  });
}

void CrossEntropyPartsGrad(const float* logits, const float* m, const void* targets,
                           ElementType targets_type, const float* d_sumexp,
                           const float* d_tlogit, float* dlogits, int64_t rows, int64_t cols,
                           int64_t col_offset, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t total = rows * cols;
  WithIndexType(targets, targets_type, [&](auto* typed) {
    CrossEntropyPartsGradKernel<<<Blocks(total), kThreads, 0, stream>>>(
        logits, m, typed, d_sumexp, d_tlogit, dlogits, total, cols, col_offset);
  });
}

int64_t CrossEntropyLossScratchSize(int64_t rows) { return rows <= 0 ? 0 : Blocks(rows); }

void CrossEntropyLoss(const float* sumexp, const float* m, const float* tlogit, float* out,
                      int64_t rows, float scale, double* scratch, cudaStream_t stream) {
  const int64_t partials = CrossEntropyLossScratchSize(rows);
  if (partials > 0) {
    CrossEntropyPartialKernel<<<static_cast<int>(partials), kThreads, 0, stream>>>(
        sumexp, m, tlogit, rows, scratch);
  }
  ScaledTotalKernel<<<1, kThreads, 0, stream>>>(scratch, partials, scale, out);
}

void CrossEntropyLossGrad(const float* sumexp, float* d_sumexp, float* d_tlogit, int64_t rows,
                          float scale, cudaStream_t stream) {
  if (rows <= 0) return;
  CrossEntropyLossGradKernel<<<Blocks(rows), kThreads, 0, stream>>>(sumexp, d_sumexp, d_tlogit,
                                                                    rows, scale);
}

void Positions(void* out, ElementType type, int64_t outer, int64_t len, int64_t offset,
               cudaStream_t stream) {
  if (outer <= 0 || len <= 0) return;
  const int64_t total = outer * len;
  switch (type) {
    case ElementType::kI32:
      PositionsKernel<<<Blocks(total), kThreads, 0, stream>>>(static_cast<int32_t*>(out), total,
                                                              len, offset);
      break;
    case ElementType::kI64:
      PositionsKernel<<<Blocks(total), kThreads, 0, stream>>>(static_cast<int64_t*>(out), total,
                                                              len, offset);
      break;
    default:
      break;
  }
}

}  // namespace weft::cuda
