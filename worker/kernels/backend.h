// The kernel backends compiled into this binary, by name: "cpu" always, "cuda" in a
// `--config=cuda` build. The worker and the tests pick a backend here instead of naming one.
//
// E.g.
//   ASSIGN_OR_RETURN(DeviceDescription d, ProbeDevice("cuda:0"));  // fails without a usable GPU
//   KernelOptions options;
//   options.device = "cuda";
//   ASSIGN_OR_RETURN(std::unique_ptr<Kernels> k, NewKernels(options));
#ifndef WEFT_WORKER_KERNELS_BACKEND_H_
#define WEFT_WORKER_KERNELS_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "worker/kernels/kernels.h"

namespace weft {

// "cpu", then "cuda" when this binary was built with --config=cuda.
std::vector<std::string> CompiledBackends();
bool CudaCompiled();

// "cpu" -> {"cpu", 0}; "cuda" -> {"cuda", 0}; "cuda:3" -> {"cuda", 3}. INVALID_ARGUMENT otherwise.
absl::StatusOr<std::pair<std::string, int>> ParseDevice(absl::string_view device);

// Checks that `device` ("cpu", "cuda:N") is usable and describes it. For CUDA, UNAVAILABLE with
// "no usable CUDA device: ..." and the CUDA error text (e.g. "CUDA driver version is insufficient
// for CUDA runtime version") when the driver or the GPU is missing, or when this binary was built
// without CUDA.
absl::StatusOr<DeviceDescription> ProbeDevice(absl::string_view device);

// A backend for options.device; UNAVAILABLE as ProbeDevice for a CUDA device that is not usable.
absl::StatusOr<std::unique_ptr<Kernels>> NewKernels(const KernelOptions& options);

}  // namespace weft

#endif  // WEFT_WORKER_KERNELS_BACKEND_H_
