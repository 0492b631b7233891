// Kernels: the math of every Instruction op, behind one interface so that the executor runs
// unchanged on the CPU backend (cpu/: OpenBLAS sgemm, plain loops) and a CUDA backend (cuBLAS,
// small kernels on a stream). Pointers are in the backend's memory space (host memory for CPU,
// device memory for CUDA); Allocate/CopyFromHost/CopyToHost move data across. Calls may be
// asynchronous; Synchronize() waits for them and reports any backend error. Shapes are validated
// by the executor before any kernel runs, so kernels do not check them.
//
// Layout: row-major float32. Tensors of rank > 2 are viewed as [rows, cols] by the caller.
//
// E.g.
//   std::unique_ptr<Kernels> k = NewCpuKernels();
//   k->Matmul(x, w, y, /*m=*/batch, /*n=*/out_features, /*k=*/in_features, false, false);
//   k->AddBias(y, b, y, batch, out_features);
#ifndef WEFT_WORKER_KERNELS_KERNELS_H_
#define WEFT_WORKER_KERNELS_KERNELS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

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

  // Memory. Allocate returns n floats (contents unspecified), or null when out of memory.
  virtual float* Allocate(int64_t n) = 0;
  virtual void Free(float* p) = 0;
  virtual void CopyFromHost(const float* host, float* dst, int64_t n) = 0;
  virtual void CopyToHost(const float* src, float* host, int64_t n) = 0;
  virtual void Copy(const float* src, float* dst, int64_t n) = 0;
  virtual void Fill(float* dst, int64_t n, float value) = 0;
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
  // param -= lr * (grad + weight_decay * param).
  virtual void Sgd(float* param, const float* grad, int64_t n, float lr, float weight_decay) = 0;
  // PyTorch's AdamW, step t from 1: p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
  // p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
  virtual void AdamW(float* param, const float* grad, float* m, float* v, int64_t n,
                     const AdamWHyper& hyper, int64_t step) = 0;
  // Views a as [outer, axis_len, inner]; out[o, i, j] = a[o, offset + i, j] for i < length.
  virtual void Slice(const float* a, float* out, int64_t outer, int64_t axis_len, int64_t inner,
                     int64_t offset, int64_t length) = 0;
  // The inverse of Slice: views out as [outer, axis_len, inner]; out[o, offset + i, j] =
  // a[o, i, j] for i < length. Other elements of out are left as they are.
  virtual void Unslice(const float* a, float* out, int64_t outer, int64_t axis_len, int64_t inner,
                       int64_t offset, int64_t length) = 0;
};

}  // namespace weft

#endif  // WEFT_WORKER_KERNELS_KERNELS_H_
