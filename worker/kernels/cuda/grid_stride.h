// The launch geometry of the element-wise CUDA kernels (worker/kernels/cuda, and the max keys of
// worker/comm/nccl): 256 threads a block over a grid-stride loop. The grid is capped so huge
// tensors reuse threads instead of launching millions of blocks; 4096 blocks of 256 threads is
// over 1M threads, enough to fill any current GPU. For .cu files only (nvcc).
//
// E.g.
//   __global__ void ScaleKernel(float* x, int64_t n, float s) {
//     for (int64_t i = FirstIndex(); i < n; i += GridStride()) x[i] *= s;
//   }
//   ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, s);
#ifndef WEFT_WORKER_KERNELS_CUDA_GRID_STRIDE_H_
#define WEFT_WORKER_KERNELS_CUDA_GRID_STRIDE_H_

#include <algorithm>
#include <cstdint>

namespace weft::cuda {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// Blocks for n elements: one element a thread, up to kMaxBlocks.
inline int Blocks(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__device__ inline int64_t FirstIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline int64_t GridStride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace weft::cuda

#endif  // WEFT_WORKER_KERNELS_CUDA_GRID_STRIDE_H_
