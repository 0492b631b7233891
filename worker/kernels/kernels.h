// Kernels: the math of every Instruction op, behind one interface so that the executor runs
// unchanged on the CPU backend (cpu/: OpenBLAS sgemm, plain loops) and a CUDA backend (cuBLAS,
// small kernels on a stream). Pointers are in the backend's memory space (host memory for CPU,
// device memory for CUDA); Allocate/CopyFromHost/CopyToHost move data across. Calls may be
// asynchronous; Synchronize() waits for them and reports any backend error. Shapes are validated
// by the executor before any kernel runs, so kernels do not check them.
//
// Memory is untyped and counted in bytes. Fill, Cast, Slice and Unslice work on elements of any
// v1::DType (F32, BF16, I32, I64; bf16 held as its 16 bits); the compute kernels are float32.
// Layout: row-major. Tensors of rank > 2 are viewed as [rows, cols] by the caller.
//
// E.g.
//   std::unique_ptr<Kernels> k = NewCpuKernels();
//   auto* y = static_cast<float*>(k->Allocate(batch * out_features * sizeof(float)));
//   k->Matmul(x, w, y, /*m=*/batch, /*n=*/out_features, /*k=*/in_features, false, false);
//   k->AddBias(y, b, y, batch, out_features);
#ifndef WEFT_WORKER_KERNELS_KERNELS_H_
#define WEFT_WORKER_KERNELS_KERNELS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "weft/v1/job.pb.h"

namespace weft {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// Matmul operand precision. kBf16 rounds both operands to bfloat16 (round to nearest even) and
// accumulates in float32 into a float32 result, as cuBLAS's bf16 GEMM does: parameters stay
// float32 master copies, only the products see bf16 (spec `precision: bf16`).
enum class MatmulPrecision { kF32, kBf16 };

// What to build a backend for (NewKernels in backend.h).
struct KernelOptions {
  std::string device = "cpu";  // "cpu" | "cuda"
  int device_index = 0;        // cuda:N
  // CUDA only: let cuBLAS use TF32 tensor cores for float32 matmuls (10-bit mantissa products).
  // Off by default so results stay comparable with the CPU backend (spec `allow_tf32: true`).
  bool allow_tf32 = false;
  MatmulPrecision precision = MatmulPrecision::kF32;
};

// Memory the backend holds, in bytes: the blocks Allocate handed out and Free has not taken back,
// and the backend's own scratch, each at the size the backend really reserves for it (at least
// the bytes requested), so that the peak is the memory a step needed:
//  - cpu: Allocate's blocks rounded up to 64 bytes (0 bytes to 64), plus the kBf16 Matmul's
//    operand copies (kept and grown to the largest operands seen).
//  - cuda: the caching allocator's blocks in use (cuda/caching_allocator.h): requests rounded up
//    to 512 bytes, and a cached block handed out again counts whole (up to twice the rounded
//    request). Besides Allocate's blocks these are the backend's own scratch: the kBf16 Matmul's
//    operand copies (in use during the call only, so they show in the peak) and MseLoss's partial
//    sums (kept). Cached blocks, free but not given back to the driver, do not count.
struct MemoryStats {
  int64_t bytes_in_use = 0;       // held now
  int64_t peak_bytes_in_use = 0;  // the most bytes_in_use has been since the last reset
};

// A device as a worker reports it in its hello.
struct DeviceDescription {
  std::string kind;                // "cpu" | "cuda"
  std::string name;                // CPU model or GPU name
  int64_t memory_bytes = 0;        // RAM, or the GPU's global memory
  int cores = 0;                   // CPU cores, or the GPU's multiprocessors
  std::string compute_capability;  // CUDA: "9.0"
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual const char* name() const = 0;  // "cpu", "cuda"
  // True when pointers returned by Allocate can be read and written by the host directly.
  virtual bool host_accessible() const = 0;

  // Memory, in bytes. Allocate returns a block of at least `bytes` bytes (contents unspecified),
  // aligned for any DType and distinct for every call (also for 0 bytes), or null when out of
  // memory. Free(nullptr) does nothing. Copy's ranges must not overlap unless they are equal.
  virtual void* Allocate(int64_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual void CopyFromHost(const void* host, void* dst, int64_t bytes) = 0;
  virtual void CopyToHost(const void* src, void* host, int64_t bytes) = 0;
  virtual void Copy(const void* src, void* dst, int64_t bytes) = 0;
  // dst[i] = value for i < n elements of dtype, value converted as EncodeElement
  // (common/dtype.h) converts it.
  virtual void Fill(void* dst, int64_t n, v1::DType dtype, double value) = 0;
  // See MemoryStats for what each backend counts. Thread-safe.
  virtual MemoryStats memory_stats() const = 0;
  // Sets peak_bytes_in_use to bytes_in_use, so the next peak is that of what runs after it.
  virtual void ResetPeakMemoryStats() = 0;
  virtual absl::Status Synchronize() = 0;
  // The backend's compute stream (a cudaStream_t for CUDA), so a communicator can order its own
  // stream against it with events; null for a synchronous backend.
  virtual void* stream() const { return nullptr; }

  // c[m, n] = op(a) @ op(b), in the backend's MatmulPrecision. op(a) is [m, k]: a is stored [m, k], or [k, m] when trans_a.
  // op(b) is [k, n]: b is stored [k, n], or [n, k] when trans_b. c must not alias a or b.
  virtual void Matmul(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
                      bool trans_a, bool trans_b) = 0;
  // out[r, c] = a[r, c] + bias[c]. out may alias a.
  virtual void AddBias(const float* a, const float* bias, float* out, int64_t rows,
                       int64_t cols) = 0;
  // out[c] = sum_r a[r, c].
  virtual void BiasGrad(const float* a, float* out, int64_t rows, int64_t cols) = 0;
  // out = max(a, 0). out may alias a.
  virtual void Relu(const float* a, float* out, int64_t n) = 0;
  // out = dy * (x > 0). out may alias dy.
  virtual void ReluGrad(const float* x, const float* dy, float* out, int64_t n) = 0;
  // out = x * Phi(x), Phi the standard normal CDF via erf.
  virtual void Gelu(const float* x, float* out, int64_t n) = 0;
  // out = dy * (Phi(x) + x * phi(x)).
  virtual void GeluGrad(const float* x, const float* dy, float* out, int64_t n) = 0;
  // out[0] = scale * sum((pred - label)^2), the sum accumulated in double.
  virtual void MseLoss(const float* pred, const float* label, float* out, int64_t n,
                       float scale) = 0;
  // out = scale * (pred - label).
  virtual void MseGrad(const float* pred, const float* label, float* out, int64_t n,
                       float scale) = 0;
  // out = scale * a. out may alias a.
  virtual void Scale(const float* a, float* out, int64_t n, float scale) = 0;
  // out = a + b. out may alias a or b (a residual connection, a gradient accumulated in place).
  virtual void Add(const float* a, const float* b, float* out, int64_t n) = 0;
  // param -= lr * (grad + weight_decay * param).
  virtual void Sgd(float* param, const float* grad, int64_t n, float lr, float weight_decay) = 0;
  // PyTorch's AdamW, step t from 1: p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
  // p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
  virtual void AdamW(float* param, const float* grad, float* m, float* v, int64_t n,
                     const AdamWHyper& hyper, int64_t step) = 0;
  // out[i] = in[i] converted from `from` to `to`, n elements, as common/dtype.h's
  // ConvertElements converts in host memory: floats to bf16 round to nearest even (NaN stays
  // NaN); floats to integers truncate toward zero and saturate at the integer's range, NaN to 0;
  // integers to floats round to nearest; I64 to I32 saturates; I32 to I64 is exact. in and out
  // must not overlap unless from == to.
  virtual void Cast(const void* in, v1::DType from, void* out, v1::DType to, int64_t n) = 0;
  // Views a as [outer, axis_len, inner] elements of element_bytes bytes each (any DType);
  // out[o, i, j] = a[o, offset + i, j] for i < length.
  virtual void Slice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
                     int64_t offset, int64_t length, int64_t element_bytes) = 0;
  // The inverse of Slice: views out as [outer, axis_len, inner]; out[o, offset + i, j] =
  // a[o, i, j] for i < length. Other elements of out are left as they are.
  virtual void Unslice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
                       int64_t offset, int64_t length, int64_t element_bytes) = 0;
};

}  // namespace weft

#endif  // WEFT_WORKER_KERNELS_KERNELS_H_
