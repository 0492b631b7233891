// The CUDA backend of Kernels: device memory from a caching allocator (cudaMalloc underneath,
// never managed memory), one compute stream, cuBLAS for every matmul (cublasGemmEx; float32
// compute without TF32 unless KernelOptions.allow_tf32; bf16 operands with float32 accumulation
// for MatmulPrecision::kBf16), and CUDA kernels (ops.cu) for the rest. Every launch and every
// CUDA/cuBLAS call is checked: the first error is kept and returned by the next Synchronize().
//
// Built only under --config=cuda (tools/cuda.bzl). Methods must be called from one thread at a
// time; the constructor selects the device on the calling thread and every entry point
// re-selects it, so the object may move between threads.
//
// E.g.
//   KernelOptions options;
//   options.device = "cuda";
//   options.device_index = 0;
//   ASSIGN_OR_RETURN(std::unique_ptr<Kernels> k, NewCudaKernels(options));
//   float* x = k->Allocate(n);
//   k->CopyFromHost(host.data(), x, n);
//   k->Relu(x, x, n);
//   RETURN_IF_ERROR(k->Synchronize());
#ifndef WEFT_WORKER_KERNELS_CUDA_CUDA_KERNELS_H_
#define WEFT_WORKER_KERNELS_CUDA_CUDA_KERNELS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/kernels/kernels.h"

namespace weft {

// UNAVAILABLE "no usable CUDA device: <call>: <CUDA error text>" when the driver, the device or
// cuBLAS cannot be initialized.
absl::StatusOr<std::unique_ptr<Kernels>> NewCudaKernels(const KernelOptions& options);

// Name, global memory, multiprocessors and compute capability of cuda:index; UNAVAILABLE as above
// (cudaGetDeviceCount's error text when there is no driver; "cuda:3 does not exist: 1 device"
// when index is out of range).
absl::StatusOr<DeviceDescription> ProbeCudaDevice(int index);

// The number of usable CUDA devices; 0 when there is no driver or no GPU.
int CudaDeviceCount();

}  // namespace weft

#endif  // WEFT_WORKER_KERNELS_CUDA_CUDA_KERNELS_H_
