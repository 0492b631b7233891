// GPU figures of the CUDA backend, for a node with NVIDIA GPUs (bench/gpu.sh runs it with the
// quickstart step time):
//  matmul:    Kernels::Matmul through the CUDA backend (NewKernels, device "cuda") in f32 with
//             TF32 off, f32 with allow_tf32 and bf16, against cuBLAS called directly with the same
//             math, on square sizes and the shapes of one training step of the seed's MLP (batch
//             512, 1024 -> 4096 -> 1024: forward, input gradient (trans_b) and weight gradients
//             (trans_a)). Mean ms per call over --iters calls timed with CUDA events on the
//             stream the calls run on, TFLOP/s (2mnk) and the backend/cuBLAS time ratio.
//  allreduce: NCCL all-reduce (float32 sum, out of place) over the visible GPUs from one process
//             (ncclCommInitAll, one stream per device), 1 MiB .. 1 GiB; algorithm and bus
//             bandwidth as nccl-tests defines them.
// Without a usable GPU it prints "gpu_bench: no usable CUDA device: ..." and exits 1. Built only
// under --config=cuda. No test asserts on it.
// Usage: gpu_bench [--sections=matmul,allreduce] [--iters=50] [--warmup=5] [--device_index=0]
//                  [--devices=0]
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/help_flags.h"
#include "common/status.h"
#include "worker/kernels/backend.h"
#include "worker/kernels/kernels.h"

ABSL_FLAG(std::vector<std::string>, sections, std::vector<std::string>({"matmul", "allreduce"}),
          "comma-separated sections to run: matmul, allreduce");
ABSL_FLAG(int, iters, 50, "timed calls per matmul and per all-reduce size");
ABSL_FLAG(int, warmup, 5, "untimed calls before each timing");
ABSL_FLAG(int, device_index, 0, "the GPU of the matmul section (cuda:N)");
ABSL_FLAG(int, devices, 0, "GPUs of the all-reduce section, cuda:0 .. N-1; 0: all visible");

namespace weft {
namespace {

// The function name of a stringified call, "cudaMalloc(&p, n)" -> "cudaMalloc".
std::string CallName(const char* call) {
  const char* paren = std::strchr(call, '(');
  return paren == nullptr ? std::string(call) : std::string(call, paren - call);
}

absl::Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(CallName(call), ": ", cudaGetErrorString(e)));
}

absl::Status CublasStatus(cublasStatus_t e, const char* call) {
  if (e == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(CallName(call), ": ", cublasGetStatusString(e)));
}

absl::Status NcclStatus(ncclResult_t e, const char* call) {
  if (e == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(CallName(call), ": ", ncclGetErrorString(e)));
}

#define RETURN_IF_CUDA_ERROR(call) RETURN_IF_ERROR(CudaStatus((call), #call))
#define RETURN_IF_CUBLAS_ERROR(call) RETURN_IF_ERROR(CublasStatus((call), #call))
#define RETURN_IF_NCCL_ERROR(call) RETURN_IF_ERROR(NcclStatus((call), #call))

// Device memory on the current device; freed (on the device it was allocated on) with the object.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), device_(o.device_) { o.p_ = nullptr; }
  ~DeviceBuffer() {
    if (p_ == nullptr) return;
    int current = 0;
    cudaGetDevice(&current);
    cudaSetDevice(device_);
    cudaFree(p_);
    cudaSetDevice(current);
  }

  absl::Status Allocate(size_t bytes) {
    RETURN_IF_CUDA_ERROR(cudaGetDevice(&device_));
    return Annotate(CudaStatus(cudaMalloc(&p_, bytes), "cudaMalloc"),
                    absl::StrCat("allocating ", bytes >> 20, " MiB on cuda:", device_));
  }
  template <typename T>
  T* get() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  int device_ = 0;
};

// Two events to time work queued on one stream.
class StreamTimer {
 public:
  StreamTimer() = default;
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;
  ~StreamTimer() {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
  }

  // Mean milliseconds per call of `call` over `iters` calls queued on `stream`, after `warmup`
  // untimed calls. The events bracket the timed calls on the stream, so host gaps between calls
  // (launch overhead) count when the GPU waits for them.
  absl::StatusOr<double> MsPerCall(cudaStream_t stream, int warmup, int iters,
                                   const std::function<absl::Status()>& call) {
    if (start_ == nullptr) {
      RETURN_IF_CUDA_ERROR(cudaEventCreate(&start_));
      RETURN_IF_CUDA_ERROR(cudaEventCreate(&stop_));
    }
    for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(call());
    RETURN_IF_CUDA_ERROR(cudaEventRecord(start_, stream));
    for (int i = 0; i < iters; ++i) RETURN_IF_ERROR(call());
    RETURN_IF_CUDA_ERROR(cudaEventRecord(stop_, stream));
    RETURN_IF_CUDA_ERROR(cudaEventSynchronize(stop_));
    float ms = 0;
    RETURN_IF_CUDA_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
    return static_cast<double>(ms) / iters;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

std::string Describe(const DeviceDescription& d) {
  return absl::StrFormat("%s, %d SMs, %.1f GiB, compute capability %s", d.name, d.cores,
                         d.memory_bytes / double(1 << 30), d.compute_capability);
}

// ---- matmul ----------------------------------------------------------------------------------

struct MatmulShape {
  const char* what;
  int64_t m, n, k;
  bool trans_a, trans_b;
  bool mlp_step;  // one of the five matmuls of the seed MLP's training step
};

// The backend configurations timed, each against cuBLAS called directly with the same math.
struct MatmulMath {
  const char* name;
  bool allow_tf32;
  MatmulPrecision precision;
};

constexpr MatmulMath kMaths[] = {
    {"f32", false, MatmulPrecision::kF32},   // cublasSgemm, CUBLAS_DEFAULT_MATH
    {"tf32", true, MatmulPrecision::kF32},   // cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_TF32
    {"bf16", false, MatmulPrecision::kBf16}, // cublasGemmEx bf16 x bf16 -> f32, CUBLAS_COMPUTE_32F
};

// bfloat16 bits of f, rounded to nearest even as the backend's kBf16 rounds.
uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// c[m, n] = op(a) @ op(b) in row-major through cuBLAS, which is column-major: the row-major c is
// the column-major c^T = op(b)^T op(a)^T, so the operands are passed swapped.
absl::Status DirectMatmul(cublasHandle_t handle, const MatmulMath& math, const MatmulShape& s,
                          const float* a, const float* b, const uint16_t* a16,
                          const uint16_t* b16, float* c) {
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
  const int lda = s.trans_a ? m : k, ldb = s.trans_b ? k : n;
  const float alpha = 1.0f, beta = 0.0f;
  if (math.precision == MatmulPrecision::kBf16) {
    RETURN_IF_CUBLAS_ERROR(cublasGemmEx(handle, op_b, op_a, n, m, k, &alpha, b16, CUDA_R_16BF,
                                        ldb, a16, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, n,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else if (math.allow_tf32) {
    RETURN_IF_CUBLAS_ERROR(cublasGemmEx(handle, op_b, op_a, n, m, k, &alpha, b, CUDA_R_32F, ldb,
                                        a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, n,
                                        CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
  } else {
    RETURN_IF_CUBLAS_ERROR(
        cublasSgemm(handle, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, n));
  }
  return absl::OkStatus();
}

// max |x - y| / max |y|: how far the backend's result is from cuBLAS's.
double RelativeDifference(const std::vector<float>& x, const std::vector<float>& y) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(double(x[i]) - double(y[i])));
    scale = std::max(scale, std::fabs(double(y[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

absl::Status RunMatmul(int device_index, int warmup, int iters) {
  const MatmulShape shapes[] = {
      {"square", 1024, 1024, 1024, false, false, false},
      {"square", 2048, 2048, 2048, false, false, false},
      {"square", 4096, 4096, 4096, false, false, false},
      {"square", 8192, 8192, 8192, false, false, false},
      {"fc0 forward x@W", 512, 4096, 1024, false, false, true},
      {"fc1 forward h@W", 512, 1024, 4096, false, false, true},
      {"fc1 dX dy@W^T", 512, 4096, 1024, false, true, true},
      {"fc1 dW h^T@dy", 4096, 1024, 512, true, false, true},
      {"fc0 dW x^T@dh", 1024, 4096, 512, true, false, true},
  };

  std::vector<std::unique_ptr<Kernels>> backends;
  for (const MatmulMath& math : kMaths) {
    KernelOptions options;
    options.device = "cuda";
    options.device_index = device_index;
    options.allow_tf32 = math.allow_tf32;
    options.precision = math.precision;
    absl::StatusOr<std::unique_ptr<Kernels>> k = NewKernels(options);
    if (!k.ok()) return Annotate(k.status(), absl::StrCat("CUDA backend for ", math.name));
    if ((*k)->stream() == nullptr) {
      return absl::InternalError("the CUDA backend returned no stream");
    }
    backends.push_back(std::move(*k));
  }
  RETURN_IF_CUDA_ERROR(cudaSetDevice(device_index));
  cublasHandle_t handle = nullptr;
  RETURN_IF_CUBLAS_ERROR(cublasCreate(&handle));
  std::unique_ptr<cublasContext, cublasStatus_t (*)(cublasHandle_t)> handle_owner(handle,
                                                                                  &cublasDestroy);
  cudaStream_t stream = nullptr;
  RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::unique_ptr<CUstream_st, cudaError_t (*)(cudaStream_t)> stream_owner(stream,
                                                                           &cudaStreamDestroy);
  RETURN_IF_CUBLAS_ERROR(cublasSetStream(handle, stream));
  RETURN_IF_CUBLAS_ERROR(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  int cublas_version = 0;
  RETURN_IF_CUBLAS_ERROR(cublasGetVersion(handle, &cublas_version));

  std::printf("matmul on cuda:%d, cuBLAS %d; mean ms per call of %d calls after %d warm-up\n",
              device_index, cublas_version, iters, warmup);
  std::printf("%-17s %-16s %-4s %9s %9s %9s %11s %11s %9s\n", "matmul", "(m,n,k)", "math",
              "weft ms", "cublas ms", "weft TF/s", "cublas TF/s", "weft/cublas", "rel diff");
  StreamTimer timer;
  double mlp_weft[3] = {0, 0, 0}, mlp_cublas[3] = {0, 0, 0};
  for (const MatmulShape& s : shapes) {
    const int64_t a_n = s.m * s.k, b_n = s.k * s.n, c_n = s.m * s.n;
    std::vector<float> host_a(a_n), host_b(b_n);
    for (int64_t i = 0; i < a_n; ++i) host_a[i] = static_cast<float>((i % 17) - 8) * 0.01f;
    for (int64_t i = 0; i < b_n; ++i) host_b[i] = static_cast<float>((i % 13) - 6) * 0.01f;
    std::vector<uint16_t> host_a16(a_n), host_b16(b_n);
    for (int64_t i = 0; i < a_n; ++i) host_a16[i] = ToBf16(host_a[i]);
    for (int64_t i = 0; i < b_n; ++i) host_b16[i] = ToBf16(host_b[i]);
    DeviceBuffer a, b, c_weft, c_cublas, a16, b16;
    RETURN_IF_ERROR(a.Allocate(a_n * sizeof(float)));
    RETURN_IF_ERROR(b.Allocate(b_n * sizeof(float)));
    RETURN_IF_ERROR(c_weft.Allocate(c_n * sizeof(float)));
    RETURN_IF_ERROR(c_cublas.Allocate(c_n * sizeof(float)));
    RETURN_IF_ERROR(a16.Allocate(a_n * sizeof(uint16_t)));
    RETURN_IF_ERROR(b16.Allocate(b_n * sizeof(uint16_t)));
    RETURN_IF_CUDA_ERROR(
        cudaMemcpy(a.get<void>(), host_a.data(), a_n * sizeof(float), cudaMemcpyHostToDevice));
    RETURN_IF_CUDA_ERROR(
        cudaMemcpy(b.get<void>(), host_b.data(), b_n * sizeof(float), cudaMemcpyHostToDevice));
    RETURN_IF_CUDA_ERROR(cudaMemcpy(a16.get<void>(), host_a16.data(), a_n * sizeof(uint16_t),
                                    cudaMemcpyHostToDevice));
    RETURN_IF_CUDA_ERROR(cudaMemcpy(b16.get<void>(), host_b16.data(), b_n * sizeof(uint16_t),
                                    cudaMemcpyHostToDevice));
    // Pageable copies may return before the DMA lands; the streams below do not wait for them.
    RETURN_IF_CUDA_ERROR(cudaDeviceSynchronize());

    const std::string mnk = absl::StrCat("(", s.m, ",", s.n, ",", s.k, ")");
    const double flops = 2.0 * s.m * s.n * s.k;
    std::vector<float> out_weft(c_n), out_cublas(c_n);
    for (size_t v = 0; v < backends.size(); ++v) {
      const MatmulMath& math = kMaths[v];
      Kernels* kernels = backends[v].get();
      const std::string what = absl::StrCat(s.what, " ", math.name, " ", mnk);
      absl::StatusOr<double> weft_ms =
          timer.MsPerCall(static_cast<cudaStream_t>(kernels->stream()), warmup, iters, [&] {
            kernels->Matmul(a.get<float>(), b.get<float>(), c_weft.get<float>(), s.m, s.n, s.k,
                            s.trans_a, s.trans_b);
            return absl::OkStatus();
          });
      if (weft_ms.ok()) {
        absl::Status sync = kernels->Synchronize();
        if (!sync.ok()) weft_ms = sync;
      }
      if (!weft_ms.ok()) return Annotate(weft_ms.status(), absl::StrCat("weft matmul ", what));
      absl::StatusOr<double> cublas_ms = timer.MsPerCall(stream, warmup, iters, [&] {
        return DirectMatmul(handle, math, s, a.get<float>(), b.get<float>(),
                            a16.get<uint16_t>(), b16.get<uint16_t>(), c_cublas.get<float>());
      });
      if (!cublas_ms.ok()) return Annotate(cublas_ms.status(), absl::StrCat("cuBLAS ", what));
      RETURN_IF_CUDA_ERROR(cudaMemcpy(out_weft.data(), c_weft.get<void>(), c_n * sizeof(float),
                                      cudaMemcpyDeviceToHost));
      RETURN_IF_CUDA_ERROR(cudaMemcpy(out_cublas.data(), c_cublas.get<void>(),
                                      c_n * sizeof(float), cudaMemcpyDeviceToHost));
      if (s.mlp_step) {
        mlp_weft[v] += *weft_ms;
        mlp_cublas[v] += *cublas_ms;
      }
      std::printf("%-17s %-16s %-4s %9.3f %9.3f %9.1f %11.1f %11.3f %9.1e\n",
                  v == 0 ? s.what : "", v == 0 ? mnk.c_str() : "", math.name, *weft_ms,
                  *cublas_ms, flops / (*weft_ms * 1e9), flops / (*cublas_ms * 1e9),
                  *weft_ms / *cublas_ms, RelativeDifference(out_weft, out_cublas));
    }
  }
  for (size_t v = 0; v < backends.size(); ++v) {
    std::printf("the MLP step's five matmuls, %s: weft %.3f ms, cublas %.3f ms, weft/cublas %.3f\n",
                kMaths[v].name, mlp_weft[v], mlp_cublas[v], mlp_weft[v] / mlp_cublas[v]);
  }
  std::printf(
      "TF/s: TFLOP/s (2mnk per call). weft/cublas: backend time / direct cuBLAS time (1.000: no "
      "overhead).\n"
      "rel diff: max |C_weft - C_cublas| / max |C_cublas|.\n"
      "f32: cublasSgemm, CUBLAS_DEFAULT_MATH. tf32: cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_TF32.\n"
      "bf16: cublasGemmEx bf16 x bf16 -> f32, CUBLAS_COMPUTE_32F, operands converted to bf16 "
      "beforehand (not timed); the backend keeps f32 master copies and converts both operands "
      "on every call, so its bf16 weft/cublas includes that conversion.\n");
  return absl::OkStatus();
}

// ---- allreduce -------------------------------------------------------------------------------

// One GPU's part of the single-process all-reduce.
struct AllReduceRank {
  int device = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  DeviceBuffer send, recv;
};

// Frees the ranks' communicators and streams on every return path.
struct AllReduceRanks {
  std::vector<AllReduceRank> ranks;
  ~AllReduceRanks() {
    for (AllReduceRank& r : ranks) {
      cudaSetDevice(r.device);
      if (r.comm != nullptr) ncclCommDestroy(r.comm);
      if (r.stream != nullptr) cudaStreamDestroy(r.stream);
    }
  }
};

absl::Status SynchronizeAll(const std::vector<AllReduceRank>& ranks) {
  for (const AllReduceRank& r : ranks) {
    RETURN_IF_CUDA_ERROR(cudaSetDevice(r.device));
    RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(r.stream));
  }
  return absl::OkStatus();
}

absl::Status AllReduceOnce(const std::vector<AllReduceRank>& ranks, size_t count) {
  RETURN_IF_NCCL_ERROR(ncclGroupStart());
  for (const AllReduceRank& r : ranks) {
    RETURN_IF_NCCL_ERROR(ncclAllReduce(r.send.get<void>(), r.recv.get<void>(), count, ncclFloat,
                                       ncclSum, r.comm, r.stream));
  }
  RETURN_IF_NCCL_ERROR(ncclGroupEnd());
  return absl::OkStatus();
}

absl::Status RunAllReduce(int devices, int warmup, int iters) {
  int visible = 0;
  RETURN_IF_CUDA_ERROR(cudaGetDeviceCount(&visible));
  const int n = devices > 0 ? devices : visible;
  if (n > visible) {
    return absl::InvalidArgumentError(
        absl::StrCat("--devices=", devices, ", but ", visible, " CUDA device(s) are visible"));
  }
  int nccl_version = 0;
  RETURN_IF_NCCL_ERROR(ncclGetVersion(&nccl_version));
  std::printf("all-reduce, NCCL %d.%d.%d, float32 sum, out of place, one process over %d "
              "device(s); mean of %d calls after %d warm-up:\n",
              nccl_version / 10000, nccl_version / 100 % 100, nccl_version % 100, n, iters, warmup);
  for (int d = 0; d < n; ++d) {
    absl::StatusOr<DeviceDescription> desc = ProbeDevice(absl::StrCat("cuda:", d));
    if (!desc.ok()) return desc.status();
    std::printf("  cuda:%d %s\n", d, Describe(*desc).c_str());
  }

  AllReduceRanks all;
  all.ranks.resize(n);
  std::vector<ncclComm_t> comms(n);
  std::vector<int> device_list(n);
  for (int d = 0; d < n; ++d) device_list[d] = d;
  RETURN_IF_NCCL_ERROR(ncclCommInitAll(comms.data(), n, device_list.data()));
  size_t min_free = SIZE_MAX;
  int min_free_device = 0;
  for (int d = 0; d < n; ++d) {
    AllReduceRank& r = all.ranks[d];
    r.device = d;
    r.comm = comms[d];
    RETURN_IF_CUDA_ERROR(cudaSetDevice(d));
    RETURN_IF_CUDA_ERROR(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
    size_t free_bytes = 0, total_bytes = 0;
    RETURN_IF_CUDA_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (free_bytes < min_free) {
      min_free = free_bytes;
      min_free_device = d;
    }
  }

  // 1 MiB .. 1 GiB by powers of 4, while a send and a receive buffer fit with 256 MiB to spare.
  constexpr size_t kMiB = size_t{1} << 20;
  const size_t usable = min_free > 256 * kMiB ? min_free - 256 * kMiB : 0;
  std::vector<size_t> sizes;
  for (size_t bytes = kMiB; bytes <= 1024 * kMiB; bytes *= 4) {
    if (2 * bytes <= usable) sizes.push_back(bytes);
  }
  if (sizes.empty()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "all-reduce: ", min_free / kMiB, " MiB free on cuda:", min_free_device,
        ", not enough for two 1 MiB buffers and 256 MiB to spare"));
  }
  if (sizes.back() < 1024 * kMiB) {
    std::printf("  sizes above %zu MiB skipped: %zu MiB free on cuda:%d\n", sizes.back() / kMiB,
                min_free / kMiB, min_free_device);
  }
  for (AllReduceRank& r : all.ranks) {
    RETURN_IF_CUDA_ERROR(cudaSetDevice(r.device));
    RETURN_IF_ERROR(r.send.Allocate(sizes.back()));
    RETURN_IF_ERROR(r.recv.Allocate(sizes.back()));
    RETURN_IF_CUDA_ERROR(cudaMemset(r.send.get<void>(), 0, sizes.back()));
    RETURN_IF_CUDA_ERROR(cudaDeviceSynchronize());
  }

  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  std::printf("%12s %12s %10s %11s %11s\n", "bytes", "count", "time us", "algbw GB/s",
              "busbw GB/s");
  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    for (int i = 0; i < warmup; ++i) RETURN_IF_ERROR(AllReduceOnce(all.ranks, count));
    RETURN_IF_ERROR(SynchronizeAll(all.ranks));
    // Host time around the calls and the final synchronization of every stream, as nccl-tests.
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) RETURN_IF_ERROR(AllReduceOnce(all.ranks, count));
    RETURN_IF_ERROR(SynchronizeAll(all.ranks));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    const double algbw = bytes / seconds / 1e9;
    const std::string busbw = n > 1 ? absl::StrFormat("%.2f", algbw * bus_factor) : "-";
    std::printf("%12zu %12zu %10.1f %11.2f %11s\n", bytes, count, seconds * 1e6, algbw,
                busbw.c_str());
  }
  std::printf("algbw: bytes / time. busbw: algbw * 2(n-1)/n (nccl-tests), n = %d.\n", n);
  if (n < 2) {
    std::printf("bus bandwidth needs >= 2 GPUs: with 1 device the all-reduce is a local copy, "
                "and algbw above is that copy's rate.\n");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpu_bench [--sections=matmul,allreduce] [--iters=N] [--warmup=N] [--device_index=N] "
      "[--devices=N]: the CUDA backend's matmuls against cuBLAS, NCCL all-reduce bandwidth");
  weft::HelpListsFlagsOf("bench/gpu_bench.cc", "gpu_bench");
  absl::ParseCommandLine(argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured, also in a pipe
  const std::vector<std::string> sections = absl::GetFlag(FLAGS_sections);
  bool matmul = false, allreduce = false;
  for (const std::string& s : sections) {
    if (s == "matmul") {
      matmul = true;
    } else if (s == "allreduce") {
      allreduce = true;
    } else {
      std::fprintf(stderr, "gpu_bench: --sections: unknown section \"%s\" (matmul, allreduce)\n",
                   s.c_str());
      return 2;
    }
  }
  const int iters = absl::GetFlag(FLAGS_iters), warmup = absl::GetFlag(FLAGS_warmup);
  const int device_index = absl::GetFlag(FLAGS_device_index);
  if (iters < 1 || warmup < 0 || device_index < 0 || absl::GetFlag(FLAGS_devices) < 0) {
    std::fprintf(stderr, "gpu_bench: --iters must be >= 1, --warmup, --device_index and "
                         "--devices >= 0\n");
    return 2;
  }

  absl::StatusOr<weft::DeviceDescription> device =
      weft::ProbeDevice(absl::StrCat("cuda:", device_index));
  if (!device.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", std::string(device.status().message()).c_str());
    return 1;
  }
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::printf("device: cuda:%d %s; CUDA runtime %d.%d, driver %d.%d\n\n", device_index,
              weft::Describe(*device).c_str(), runtime / 1000, runtime % 1000 / 10,
              driver / 1000, driver % 1000 / 10);

  absl::Status status;
  if (matmul) status = weft::RunMatmul(device_index, warmup, iters);
  if (status.ok() && allreduce) {
    if (matmul) std::printf("\n");
    status = weft::RunAllReduce(absl::GetFlag(FLAGS_devices), warmup, iters);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
