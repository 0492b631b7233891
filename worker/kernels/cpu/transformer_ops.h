// The CPU backend's transformer kernels that gather, reduce over rows or need scratch (kernels.h's
// "Transformers" section; the elementwise ones are loops in cpu_kernels.cc). Plain functions on
// host pointers, so that CpuKernels owns the scratch and counts it in its MemoryStats: a kernel
// that needs scratch takes it as an argument, of the size common/kernel_scratch.h gives (the
// sizes the planner counts). Reductions add in
// double in a fixed order, so results do not depend on threads or timing. Kernels taking
// `threads` split their rows (or columns) over that many OpenMP threads (loops.h).
//
// E.g.
//   std::vector<float> scratch(CpuAttentionScratchFloats(shape.seq, /*grad=*/false));
//   cpu::Attention(q, k, v, out, shape, scratch.data());
#ifndef WEFT_WORKER_KERNELS_CPU_TRANSFORMER_OPS_H_
#define WEFT_WORKER_KERNELS_CPU_TRANSFORMER_OPS_H_

#include <cstdint>

#include "common/kernel_scratch.h"
#include "worker/kernels/kernels.h"

namespace weft::cpu {

// out[r, :] = table[ids[r] - row_offset, :] when that row is in [0, table_rows), else zeros.
void Embedding(const void* ids, v1::DType ids_dtype, const float* table, float* out, int64_t n,
               int64_t table_rows, int64_t dim, int64_t row_offset);

// grad_table[row, :] = the sum of dy[r, :] over the r whose ids[r] - row_offset is row, in
// ascending r, in double; zeros for rows no id falls on. Each table row walks a chain of its ids
// (chains: table_rows + n int64s of scratch), adding into sums (dim doubles of scratch).
void EmbeddingGrad(const void* ids, v1::DType ids_dtype, const float* dy, float* grad_table,
                   int64_t n, int64_t table_rows, int64_t dim, int64_t row_offset,
                   int64_t* chains, double* sums);

// y = (x - mean) / sqrt(var + eps) * gamma + beta per row, in double. y may alias x.
void LayerNorm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
               int64_t dim, float eps, int threads);

// LayerNorm's VJP: dx, and dgamma[c] = sum_r dy xhat, dbeta[c] = sum_r dy (each skipped when
// null), each column summed over rows in ascending order in double. dx may alias dy.
void LayerNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                   float* dbeta, int64_t rows, int64_t dim, float eps, double* scratch,
                   int threads);

// y = x / sqrt(mean(x^2) + eps) * gamma per row, in double. y may alias x.
void RmsNorm(const float* x, const float* gamma, float* y, int64_t rows, int64_t dim, float eps,
             int threads);

// RmsNorm's VJP: dx, and dgamma[c] = sum_r dy x / rms (skipped when null), summed as
// LayerNormGrad's. dx may alias dy.
void RmsNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                 int64_t rows, int64_t dim, float eps, double* scratch, int threads);

// Rotary embedding (kernels.h's Rope): inv_freq = 1 / powf(theta, (float)(2i) / (float)D),
// angle = (float)p * inv_freq, c = cosf(angle), s = sinf(angle), the rotation itself in float32,
// all as Hugging Face's LlamaRotaryEmbedding and apply_rotary_pos_emb compute them. table:
// 3 * (head_dim / 2) floats of scratch (inv_freq, and one position's cos and sin). out must not
// alias x.
void Rope(const float* x, float* out, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
          int64_t pos_offset, float theta, bool inverse, float* table);

// out[i] = x[i] * (1 / (1 - p)) when DropoutSpec keeps global element box.GlobalIndex(i), else 0;
// a copy when p == 0. out may alias x.
void Dropout(const float* x, float* out, int64_t n, const DropoutSpec& spec, const GlobalBox& box,
             int threads);

// sumexp[r] = sum_c exp(logits[r, c] - m[r]) (each exp in float32, the sum in double); tlogit[r]
// = logits[r, targets[r] - col_offset] when that column is in [0, cols), else 0.
void CrossEntropyParts(const float* logits, const float* m, const void* targets,
                       v1::DType targets_dtype, float* sumexp, float* tlogit, int64_t rows,
                       int64_t cols, int64_t col_offset, int threads);

// dlogits[r, c] = d_sumexp[r] * exp(logits[r, c] - m[r]), plus d_tlogit[r] at the target's
// column when it is in this shard.
void CrossEntropyPartsGrad(const float* logits, const float* m, const void* targets,
                           v1::DType targets_dtype, const float* d_sumexp, const float* d_tlogit,
                           float* dlogits, int64_t rows, int64_t cols, int64_t col_offset,
                           int threads);

// Causal attention (kernels.h's Attention), kCpuAttentionBlock query rows of one (batch, head) at a
// time: the block's scores against the keys up to its last row with one cblas_sgemm, the softmax
// per row (its sum in double), the probabilities' dropout, then the rows' output with a second
// sgemm. Only the causal half is computed. The sgemms accumulate in float32.
void Attention(const float* q, const float* k, const float* v, float* out,
               const AttentionShape& shape, float* scratch);

// Attention's VJP, recomputing the probabilities block by block as Attention does: dq is written
// per block; dk and dv are zeroed, then the blocks of every query head of a group add into them
// (sgemm with beta = 1) in a fixed order.
void AttentionGrad(const float* q, const float* k, const float* v, const float* dout, float* dq,
                   float* dk, float* dv, const AttentionShape& shape, float* scratch);

}  // namespace weft::cpu

#endif  // WEFT_WORKER_KERNELS_CPU_TRANSFORMER_OPS_H_
