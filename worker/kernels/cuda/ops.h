// The CUDA kernels of every Kernels op but Matmul (cuBLAS), as plain launchers: device pointers,
// int64_t sizes and the stream to enqueue on. A launcher returns as soon as the work is queued and
// reports nothing; the caller checks cudaGetLastError() after it. A launcher with no elements to
// write launches nothing (MseLoss still writes its one output). Semantics are those of
// worker/kernels/kernels.h and the CPU backend (cpu/cpu_kernels.cc), which the CUDA backend must
// match within float rounding.
//
// This header is compiled by the host C++ compiler too, so it includes CUDA's host headers only;
// and by nvcc, which does not see the protobuf headers, so element types are ElementType here.
//
// E.g.
//   weft::cuda::Relu(x, x, n, stream);
//   cudaError_t err = cudaGetLastError();
#ifndef WEFT_WORKER_KERNELS_CUDA_OPS_H_
#define WEFT_WORKER_KERNELS_CUDA_OPS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace weft::cuda {

// The element types, numbered as weft.v1.DType (proto/weft/v1/job.proto); cuda_kernels.cc checks
// that the numbers agree. bf16 is held as its 16 bits.
enum class ElementType : int { kF32 = 0, kBf16 = 1, kI32 = 2, kI64 = 3 };

// n elements of element_bytes bytes (2, 4 or 8), each set to the low element_bytes bytes of
// `bits` (one element as the host encodes it; both sides are little-endian).
void Fill(void* dst, int64_t n, int64_t element_bytes, uint64_t bits, cudaStream_t stream);

// out[r, c] = a[r, c] + bias[c]. out may alias a.
void AddBias(const float* a, const float* bias, float* out, int64_t rows, int64_t cols,
             cudaStream_t stream);

// out[c] = sum_r a[r, c], summed in double in a fixed order (deterministic); zeros when rows == 0.
void BiasGrad(const float* a, float* out, int64_t rows, int64_t cols, cudaStream_t stream);

// out = max(a, 0). out may alias a.
void Relu(const float* a, float* out, int64_t n, cudaStream_t stream);

// out = dy * (x > 0). out may alias dy.
void ReluGrad(const float* x, const float* dy, float* out, int64_t n, cudaStream_t stream);

// out = x * Phi(x), computed in double with erf. out may alias x.
void Gelu(const float* x, float* out, int64_t n, cudaStream_t stream);

// out = dy * (Phi(x) + x * phi(x)), computed in double. out may alias x or dy.
void GeluGrad(const float* x, const float* dy, float* out, int64_t n, cudaStream_t stream);

// The number of doubles of scratch MseLoss needs for n elements (one per block; at most 4096).
int64_t MseLossScratchSize(int64_t n);

// out[0] = scale * sum((pred - label)^2). Each block sums its share in double into
// scratch[block] (MseLossScratchSize(n) doubles, device memory); one block then adds the partials
// in a fixed order and writes the float result, so the loss is deterministic for a given n.
// out[0] = scale * 0 when n == 0.
void MseLoss(const float* pred, const float* label, float* out, int64_t n, float scale,
             double* scratch, cudaStream_t stream);

// out = scale * (pred - label).
void MseGrad(const float* pred, const float* label, float* out, int64_t n, float scale,
             cudaStream_t stream);

// out = scale * a. out may alias a.
void Scale(const float* a, float* out, int64_t n, float scale, cudaStream_t stream);

// out = a + b. out may alias a or b.
void Add(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);

// param -= lr * (grad + weight_decay * param).
void Sgd(float* param, const float* grad, int64_t n, float lr, float weight_decay,
         cudaStream_t stream);

// The per-step constants of AdamW, with the bias corrections folded in on the host (in double,
// as the CPU backend does): step_size = lr / (1 - beta1^t), inv_sqrt_bias2 = 1 / sqrt(1 - beta2^t),
// decay = 1 - lr * weight_decay.
struct AdamWStep {
  float beta1 = 0.0f;
  float beta2 = 0.0f;
  float eps = 0.0f;
  float decay = 1.0f;
  float step_size = 0.0f;
  float inv_sqrt_bias2 = 1.0f;
};

// PyTorch's AdamW: m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
// param = param * decay - step_size * m / (sqrt(v) * inv_sqrt_bias2 + eps).
void AdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
           cudaStream_t stream);

// Views a as [outer, axis_len, inner] elements of element_bytes bytes; out[o, i, j] =
// a[o, offset + i, j] for i < length. Copies in the widest words (up to 16 bytes) that the
// pointers and the byte offsets of every run allow.
void Slice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
           int64_t offset, int64_t length, int64_t element_bytes, cudaStream_t stream);

// Views out as [outer, axis_len, inner]; out[o, offset + i, j] = a[o, i, j] for i < length. Other
// elements of out are left as they are.
void Unslice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
             int64_t offset, int64_t length, int64_t element_bytes, cudaStream_t stream);

// out[i] = in[i] converted from `from` to `to` (from != to: the backend copies equal types), by
// the rules of common/dtype.h's ConvertElements, step for step: through double, except I64 to
// I32 (clamped), I32 to I64 (widened) and F32 <-> BF16 (directly; the same values). So floats to
// bf16 round to nearest even through float (a NaN stays a NaN of the same sign; its payload may
// differ from the CPU backend's), floats to integers truncate toward zero and saturate (NaN to 0),
// integers to floats round to nearest. Unknown types launch nothing.
void Cast(const void* in, ElementType from, void* out, ElementType to, int64_t n,
          cudaStream_t stream);

}  // namespace weft::cuda

#endif  // WEFT_WORKER_KERNELS_CUDA_OPS_H_
