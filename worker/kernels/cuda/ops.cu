#include "worker/kernels/cuda/ops.h"

#include <algorithm>

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

__global__ void FillKernel(float* dst, int64_t n, float value) {
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

// Slice and Unslice as one strided copy: the kept part of each outer index is a contiguous run
// of `run` = length * inner floats, `pitch` = axis_len * inner apart in the full tensor and
// starting `start` = offset * inner into it. Element idx of the compact side is run idx % run of
// outer index idx / run.
__global__ void SliceKernel(const float* a, float* out, int64_t n, int64_t run, int64_t pitch,
                            int64_t start) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t o = i / run;
    out[i] = a[o * pitch + start + (i - o * run)];
  }
}

__global__ void UnsliceKernel(const float* a, float* out, int64_t n, int64_t run, int64_t pitch,
                              int64_t start) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    const int64_t o = i / run;
    out[o * pitch + start + (i - o * run)] = a[i];
  }
}

__global__ void FloatToBf16Kernel(const float* in, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) out[i] = __float2bfloat16_rn(in[i]);
}

}  // namespace

void Fill(float* dst, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return;
  FillKernel<<<Blocks(n), kThreads, 0, stream>>>(dst, n, value);
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

void Slice(const float* a, float* out, int64_t outer, int64_t axis_len, int64_t inner,
           int64_t offset, int64_t length, cudaStream_t stream) {
  if (outer <= 0 || length <= 0 || inner <= 0) return;
  const int64_t run = length * inner;
  const int64_t n = outer * run;
  SliceKernel<<<Blocks(n), kThreads, 0, stream>>>(a, out, n, run, axis_len * inner,
                                                  offset * inner);
}

void Unslice(const float* a, float* out, int64_t outer, int64_t axis_len, int64_t inner,
             int64_t offset, int64_t length, cudaStream_t stream) {
  if (outer <= 0 || length <= 0 || inner <= 0) return;
  const int64_t run = length * inner;
  const int64_t n = outer * run;
  UnsliceKernel<<<Blocks(n), kThreads, 0, stream>>>(a, out, n, run, axis_len * inner,
                                                    offset * inner);
}

void FloatToBf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  FloatToBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(in, out, n);
}

}  // namespace weft::cuda
