// The CUDA kernels of NcclCommunicator's float max: floats to their max keys
// (worker/comm/max_key.h) before an ncclMax over ncclInt32, and the keys back to floats after.
// Each launcher enqueues on `stream`, returns at once, and returns cudaGetLastError() (the launch's
// error); n == 0 launches nothing.
//
// E.g.
//   cudaError_t e = EncodeF32MaxKeys(data, n, stream);  // data now holds int32 keys
//   ncclAllReduce(data, data, n, ncclInt32, ncclMax, comm, stream);
//   e = DecodeF32MaxKeys(data, n, stream);              // the max, as float32 again
#ifndef WEFT_WORKER_COMM_NCCL_MAX_KEYS_H_
#define WEFT_WORKER_COMM_NCCL_MAX_KEYS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace weft {

// In place: n float32 values become their int32 keys, and back.
cudaError_t EncodeF32MaxKeys(void* data, int64_t n, cudaStream_t stream);
cudaError_t DecodeF32MaxKeys(void* data, int64_t n, cudaStream_t stream);

// keys[i] = the key of bf16 element bf16[i]; and bf16[i] = the bf16 of keys[i].
cudaError_t EncodeBf16MaxKeys(const void* bf16, int32_t* keys, int64_t n, cudaStream_t stream);
cudaError_t DecodeBf16MaxKeys(const int32_t* keys, void* bf16, int64_t n, cudaStream_t stream);

}  // namespace weft

#endif  // WEFT_WORKER_COMM_NCCL_MAX_KEYS_H_
