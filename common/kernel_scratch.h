// The memory a device's kernels keep for themselves beside a program's arena, which the planner
// adds to the arena for the peak a rank needs (Program.kernel_scratch_bytes, PlannedPeakBytes).
//
// The cpu backend (worker/kernels/cpu) keeps five scratch vectors, each grown to exactly the
// largest size a call has asked of it and kept to the end of the job:
//  - f32: causal attention's score tiles (CpuAttentionScratchFloats) and the rotary
//    embedding's angles (CpuRopeScratchFloats);
//  - f64: the norms' row statistics and sums (CpuLayerNormGradScratchDoubles,
//    CpuRmsNormGradScratchDoubles) and EmbeddingGrad's row of sums;
//  - i64: EmbeddingGrad's row order (CpuEmbeddingGradScratchInt64s);
//  - two float32 copies of a bf16-precision Matmul's operands (a and b, numel each).
// These functions are the sizes the backend asks for, so the planned bytes are its bytes.
//
// The cuda backend's scratch is taken from its caching allocator for one call and handed back
// (the sort's temporary storage, attention's row statistics) or is a few KiB of loss partials;
// KernelScratchBytes counts none of it.
#ifndef WEFT_COMMON_KERNEL_SCRATCH_H_
#define WEFT_COMMON_KERNEL_SCRATCH_H_

#include <cstdint>

#include "proto/weft/v1/program.pb.h"

namespace weft {

// Query rows of one (batch, head) the cpu attention kernels score at a time.
inline constexpr int64_t kCpuAttentionBlock = 64;

// Floats of score tiles for causal attention over `seq` positions: one [block, seq] tile, three
// for the VJP.
int64_t CpuAttentionScratchFloats(int64_t seq, bool grad);
// Floats of the rotary embedding's inverse frequencies and one position's cos and sin
// (head_dim / 2 each).
int64_t CpuRopeScratchFloats(int64_t head_dim);
// Doubles of LayerNorm's VJP over rows x dim: two column sums and two moments per row.
int64_t CpuLayerNormGradScratchDoubles(int64_t rows, int64_t dim);
// Doubles of RMSNorm's VJP: a column sum and 1 / rms per row.
int64_t CpuRmsNormGradScratchDoubles(int64_t rows, int64_t dim);
// EmbeddingGrad over n ids of a table shard of table_rows rows: int64s of the chains of ids by
// row, and doubles of one row's sums.
int64_t CpuEmbeddingGradScratchInt64s(int64_t n, int64_t table_rows);
int64_t CpuEmbeddingGradScratchDoubles(int64_t dim);

// The bytes program.device()'s kernels keep beside the arena: on cpu (device "" or "cpu") the
// sum over the five vectors of the most any instruction of the step or its evaluation asks of
// each; 0 on cuda (see above).
int64_t KernelScratchBytes(const v1::Program& program);

// The most bytes a rank's program holds on its device: the arena and the kernels' scratch.
inline int64_t PlannedPeakBytes(const v1::Program& program) {
  return program.arena_bytes() + program.kernel_scratch_bytes();
}

}  // namespace weft

#endif  // WEFT_COMMON_KERNEL_SCRATCH_H_
