// The CPU backend of Kernels: OpenBLAS cblas_sgemm for Matmul, loops elsewhere, vectorized for the
// CPU at hand and split over KernelOptions::threads OpenMP threads (loops.h). Buffers are host
// memory (64-byte aligned), calls are synchronous.
//
// E.g.
//   std::unique_ptr<Kernels> k = NewCpuKernels();
//   auto* y = static_cast<float*>(k->Allocate(m * n * sizeof(float)));
//   k->Matmul(x, w, y, m, n, kdim, /*trans_a=*/false, /*trans_b=*/false);
#ifndef WEFT_WORKER_KERNELS_CPU_CPU_KERNELS_H_
#define WEFT_WORKER_KERNELS_CPU_CPU_KERNELS_H_

#include <memory>

#include "worker/kernels/kernels.h"

namespace weft {

// options.precision (kBf16 rounds matmul operands) and options.threads are honoured; the rest
// concerns CUDA only.
std::unique_ptr<Kernels> NewCpuKernels(const KernelOptions& options = {});

}  // namespace weft

#endif  // WEFT_WORKER_KERNELS_CPU_CPU_KERNELS_H_
