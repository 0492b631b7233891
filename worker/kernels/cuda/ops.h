// The CUDA kernels of every Kernels op but Matmul (cuBLAS), as plain launchers: device pointers,
// int64_t sizes and the stream to enqueue on. A launcher returns as soon as the work is queued and
// reports nothing (EmbeddingGrad also returns what CUB's sort returned); the caller checks
// cudaGetLastError() after it. A launcher with no elements to write launches nothing (MseLoss and
// CrossEntropyLoss still write their one output). Scratch a launcher needs comes from the caller
// (the backend's caching allocator), sized by the launcher's ...ScratchSize function. Semantics are those of
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

#include "worker/kernels/cuda/dropout_mask.h"

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

// param -= lr * (g + weight_decay * param), g = grad * grad_scale[0] (grad_scale: null, or one
// float of device memory).
void Sgd(float* param, const float* grad, int64_t n, float lr, float weight_decay,
         const float* grad_scale, cudaStream_t stream);

// out[0] = the sum of a[i]^2, by MseLoss's two stages (scratch: MseLossScratchSize(n) doubles),
// deterministic for a given n; 0 when n == 0.
void SumSquares(const float* a, float* out, int64_t n, double* scratch, cudaStream_t stream);

// out[0] = min(1, max_norm / (sqrtf(norm_sq[0]) + 1e-6)), one thread.
void ClipCoefficient(const float* norm_sq, float max_norm, float* out, cudaStream_t stream);

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
// param = param * decay - step_size * m / (sqrt(v) * inv_sqrt_bias2 + eps); g = grad *
// grad_scale[0] (grad_scale: null, or one float of device memory).
void AdamW(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWStep& step,
           const float* grad_scale, cudaStream_t stream);

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

// ---- Transformers (kernels.h's section of that name). Row reductions run one block per row and
// add in double by a fixed tree, so results do not depend on scheduling; ids and targets are
// kI32 or kI64 (anything else launches nothing).

// out[r, :] = table[ids[r] - row_offset, :] when that row is in [0, table_rows), else zeros.
void Embedding(const void* ids, ElementType ids_type, const float* table, float* out, int64_t n,
               int64_t table_rows, int64_t dim, int64_t row_offset, cudaStream_t stream);

// The bytes of scratch EmbeddingGrad needs for n ids and table_rows rows.
int64_t EmbeddingGradScratchSize(int64_t n, int64_t table_rows);

// grad_table[row, :] = the sum of dy[r, :] over the r whose ids[r] - row_offset is row, in
// ascending r, in double; zeros for rows no id falls on. Deterministic (no atomics): the ids are
// stably sorted by row with CUB, then each table row adds its run of the sorted ids in order.
// scratch: EmbeddingGradScratchSize(n, table_rows) bytes of device memory. Returns the sort's
// error, if any.
cudaError_t EmbeddingGrad(const void* ids, ElementType ids_type, const float* dy,
                          float* grad_table, int64_t n, int64_t table_rows, int64_t dim,
                          int64_t row_offset, void* scratch, cudaStream_t stream);

// y = (x - mean) / sqrt(var + eps) * gamma + beta per row of [rows, dim], in double.
void LayerNorm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
               int64_t dim, float eps, cudaStream_t stream);

// LayerNorm's VJP: dx, and dgamma[c] = sum_r dy xhat, dbeta[c] = sum_r dy (each skipped when
// null; the column sums in double in a fixed order, as BiasGrad's). row_stats: 2 * rows doubles
// of scratch (each row's mean and 1/sqrt(var + eps)) when dgamma or dbeta is given, else unused.
void LayerNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                   float* dbeta, int64_t rows, int64_t dim, float eps, double* row_stats,
                   cudaStream_t stream);

// y = x / sqrt(mean(x^2) + eps) * gamma per row, in double.
void RmsNorm(const float* x, const float* gamma, float* y, int64_t rows, int64_t dim, float eps,
             cudaStream_t stream);

// RmsNorm's VJP: dx, and dgamma[c] = sum_r dy x / rms (skipped when null). row_stats as
// LayerNormGrad's.
void RmsNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                 int64_t rows, int64_t dim, float eps, double* row_stats, cudaStream_t stream);

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and its VJP, in double.
void GeluTanh(const float* x, float* out, int64_t n, cudaStream_t stream);
void GeluTanhGrad(const float* x, const float* dy, float* out, int64_t n, cudaStream_t stream);

// x * sigmoid(x) and its VJP dy * s * (1 + x (1 - s)), in double.
void Silu(const float* x, float* out, int64_t n, cudaStream_t stream);
void SiluGrad(const float* x, const float* dy, float* out, int64_t n, cudaStream_t stream);

// out = a * b. out may alias a or b.
void Mul(const float* a, const float* b, float* out, int64_t n, cudaStream_t stream);

// Rotary embedding of x [batch, seq, heads, head_dim], rotate-half convention, at positions
// pos_offset + t; inverse rotates by -angle. inv_freq and the angle are float32 as Hugging Face
// computes them; pow, cos and sin are evaluated in double and rounded to float (the correctly
// rounded powf, cosf and sinf, almost always). out must not alias x.
void Rope(const float* x, float* out, int64_t batch, int64_t seq, int64_t heads,
          int64_t head_dim, int64_t pos_offset, float theta, bool inverse, cudaStream_t stream);

// AttentionShape (kernels.h) with its dropout worked out on the host.
struct AttentionDims {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  DropoutMask dropout;
  int64_t global_batch = 0, global_heads = 0, batch_offset = 0, head_offset = 0;
};

// Causal attention, one block per query row (b, h, i): the row's maximum score, then the
// probabilities a tile of keys at a time, weighting v. Scores, sums and the weighted sum in double,
// each in a fixed order. head_dim is limited by shared memory (12 bytes per element, 48 KiB).
void Attention(const float* q, const float* k, const float* v, float* out,
               const AttentionDims& dims, cudaStream_t stream);

// The doubles of scratch AttentionGrad needs: 3 per query row (its max, softmax sum and
// dout . out).
int64_t AttentionGradScratchSize(const AttentionDims& dims);

// Attention's VJP, recomputing the probabilities: one block per query row writes dq and the row's
// statistics into scratch, then one block per key row (b, kv head, j) sums dk and dv over the
// query heads of its group and the rows i >= j, in order. No atomics. head_dim is limited by
// shared memory (24 bytes per element, 48 KiB).
void AttentionGrad(const float* q, const float* k, const float* v, const float* dout, float* dq,
                   float* dk, float* dv, const AttentionDims& dims, double* scratch,
                   cudaStream_t stream);

// out[i] = x[i] * mask.keep_scale when mask keeps element GlobalIndex(box, i), else 0; out = x
// when the mask is inactive (p = 0). out may alias x.
void Dropout(const float* x, float* out, int64_t n, const DropoutMask& mask, const MaskBox& box,
             cudaStream_t stream);

// out[r] = max_c logits[r, c] (-inf for no columns).
void RowMax(const float* logits, float* out, int64_t rows, int64_t cols, cudaStream_t stream);

// sumexp[r] = sum_c exp(logits[r, c] - m[r]) in double; tlogit[r] = logits[r, targets[r] -
// col_offset] when that column is in [0, cols), else 0.
void CrossEntropyParts(const float* logits, const float* m, const void* targets,
                       ElementType targets_type, float* sumexp, float* tlogit, int64_t rows,
                       int64_t cols, int64_t col_offset, cudaStream_t stream);

// dlogits[r, c] = d_sumexp[r] * exp(logits[r, c] - m[r]), plus d_tlogit[r] at the target's column
// when it is in this shard; in double, rounded once.
void CrossEntropyPartsGrad(const float* logits, const float* m, const void* targets,
                           ElementType targets_type, const float* d_sumexp,
                           const float* d_tlogit, float* dlogits, int64_t rows, int64_t cols,
                           int64_t col_offset, cudaStream_t stream);

// The number of doubles of scratch CrossEntropyLoss needs for `rows` rows (as MseLoss's).
int64_t CrossEntropyLossScratchSize(int64_t rows);

// out[0] = scale * sum_r (log(sumexp[r]) + m[r] - tlogit[r]), in double, by MseLoss's two
// stages (deterministic for a given rows).
void CrossEntropyLoss(const float* sumexp, const float* m, const float* tlogit, float* out,
                      int64_t rows, float scale, double* scratch, cudaStream_t stream);

// d_sumexp[r] = scale / sumexp[r]; d_tlogit[r] = -scale.
void CrossEntropyLossGrad(const float* sumexp, float* d_sumexp, float* d_tlogit, int64_t rows,
                          float scale, cudaStream_t stream);

// out viewed [outer, len] of `type` (kI32 or kI64): out[o, t] = offset + t.
void Positions(void* out, ElementType type, int64_t outer, int64_t len, int64_t offset,
               cudaStream_t stream);

}  // namespace weft::cuda

#endif  // WEFT_WORKER_KERNELS_CUDA_OPS_H_
