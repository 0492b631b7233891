#include "worker/kernels/backend.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "worker/kernels/cpu/cpu_kernels.h"
#ifdef WEFT_CUDA
#include "worker/kernels/cuda/cuda_kernels.h"
#endif

namespace weft {
namespace {

DeviceDescription DescribeCpu() {
  DeviceDescription d;
  d.kind = "cpu";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        d.name = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
      break;
    }
  }
  if (d.name.empty()) d.name = "cpu";
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0) d.memory_bytes = int64_t{pages} * page_size;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  d.cores = cores > 0 ? static_cast<int>(cores) : 1;
  return d;
}

#ifndef WEFT_CUDA
absl::Status NotCompiled() {
  return absl::UnavailableError(
      "no usable CUDA device: this binary was built without CUDA (build it with "
      "`bazel build --config=cuda //...` on a machine with CUDA at /usr/local/cuda)");
}
#endif

}  // namespace

bool CudaCompiled() {
#ifdef WEFT_CUDA
  return true;
#else
  return false;
#endif
}

std::vector<std::string> CompiledBackends() {
  std::vector<std::string> names = {"cpu"};
  if (CudaCompiled()) names.push_back("cuda");
  return names;
}

absl::StatusOr<std::pair<std::string, int>> ParseDevice(absl::string_view device) {
  if (device == "cpu") return std::make_pair(std::string("cpu"), 0);
  if (device == "cuda") return std::make_pair(std::string("cuda"), 0);
  absl::string_view index = device;
  int n = -1;
  if (absl::ConsumePrefix(&index, "cuda:") && absl::SimpleAtoi(index, &n) && n >= 0 &&
      !index.empty() && index.find_first_not_of("0123456789") == absl::string_view::npos) {
    return std::make_pair(std::string("cuda"), n);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device \"", device, "\": expected cpu, cuda or cuda:N"));
}

absl::StatusOr<DeviceDescription> ProbeDevice(absl::string_view device) {
  auto parsed = ParseDevice(device);
  if (!parsed.ok()) return parsed.status();
  if (parsed->first == "cpu") return DescribeCpu();
#ifdef WEFT_CUDA
  return ProbeCudaDevice(parsed->second);
#else
  return NotCompiled();
#endif
}

absl::StatusOr<std::unique_ptr<Kernels>> NewKernels(const KernelOptions& options) {
  if (options.device == "cpu") return NewCpuKernels(options);
  if (options.device == "cuda") {
#ifdef WEFT_CUDA
    return NewCudaKernels(options);
#else
    return NotCompiled();
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kernel backend \"", options.device, "\": expected cpu or cuda"));
}

}  // namespace weft
