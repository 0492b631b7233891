#include "worker/comm/nccl/max_keys.h"

#include "worker/comm/max_key.h"
#include "worker/kernels/cuda/grid_stride.h"

namespace weft {
namespace {

using cuda::Blocks;
using cuda::FirstIndex;
using cuda::GridStride;
using cuda::kThreads;

// One word in place: the float32 bits in `words` become keys, or keys become bits.
__global__ void EncodeF32Kernel(uint32_t* words, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    words[i] = static_cast<uint32_t>(F32MaxKey(words[i]));
  }
}
__global__ void DecodeF32Kernel(uint32_t* words, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) {
    words[i] = F32BitsOfMaxKey(static_cast<int32_t>(words[i]));
  }
}

__global__ void EncodeBf16Kernel(const uint16_t* bf16, int32_t* keys, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) keys[i] = Bf16MaxKey(bf16[i]);
}
__global__ void DecodeBf16Kernel(const int32_t* keys, uint16_t* bf16, int64_t n) {
  for (int64_t i = FirstIndex(); i < n; i += GridStride()) bf16[i] = Bf16BitsOfMaxKey(keys[i]);
}

}  // namespace

cudaError_t EncodeF32MaxKeys(void* data, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  EncodeF32Kernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(data), n);
  return cudaGetLastError();
}

cudaError_t DecodeF32MaxKeys(void* data, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DecodeF32Kernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<uint32_t*>(data), n);
  return cudaGetLastError();
}

cudaError_t EncodeBf16MaxKeys(const void* bf16, int32_t* keys, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  EncodeBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<const uint16_t*>(bf16), keys,
                                                       n);
  return cudaGetLastError();
}

cudaError_t DecodeBf16MaxKeys(const int32_t* keys, void* bf16, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  DecodeBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(keys, static_cast<uint16_t*>(bf16), n);
  return cudaGetLastError();
}

}  // namespace weft
