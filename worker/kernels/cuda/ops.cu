#include "worker/kernels/cuda/ops.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace weft::cuda {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// Every elementwise kernel runs 256 threads a block over a grid-stride loop. The grid is capped so
// huge tensors reuse threads instead of launching millions of blocks; 4096 blocks of 256 threads
// is over 1M threads, enough to fill any current GPU.
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ inline int64_t FirstIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

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

// Stage 2 of MseLoss, one block: out[0] = scale * the sum of partials[0, count).
__global__ void MseFinalKernel(const double* partials, int64_t count, float scale, float* out) {
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
                          float weight_decay) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    param[i] -= lr * (grad[i] + weight_decay * param[i]);
  }
}

// The expression of the CPU backend's AdamW, term for term. sqrtf and '/' are IEEE-rounded
// (nvcc's defaults without --use_fast_math).
__global__ void AdamWKernel(float* param, const float* grad, float* m, float* v, int64_t n,
                            AdamWStep s) {
  const float one_minus_beta1 = 1.0f - s.beta1, one_minus_beta2 = 1.0f - s.beta2;
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const float g = grad[i];
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
  MseFinalKernel<<<1, kThreads, 0, stream>>>(scratch, partials, scale, out);
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
         cudaStream_t stream) {
  if (n <= 0) return;
  SgdKernel<<<Blocks(n), kThreads, 0, stream>>>(param, grad, n, lr, weight_decay);
}

void AdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
           cudaStream_t stream) {
  if (n <= 0) return;
  AdamWKernel<<<Blocks(n), kThreads, 0, stream>>>(param, grad, m, v, n, step);
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

}  // namespace weft::cuda
