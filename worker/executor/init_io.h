// Where a Program's buffers get values from outside the step: the init list (ParamInit: Philox
// uniform, zeros, a safetensors file) and Program.load_checkpoint before the first step, and
// this rank's checkpoint shard after a step. Values are converted to each buffer's dtype on the
// host (a float32 uniform to bf16 rounds to nearest even; files convert as their readers do).
//
// E.g.
//   RETURN_IF_ERROR(CheckInit(program, buffers, init));                  // at Create
//   RETURN_IF_ERROR(LoadInitialValues(program, buffers, *kernels));      // at Initialize
//   ASSIGN_OR_RETURN(auto chunks, SaveCheckpointShard(program, buffers, *kernels, step));
#ifndef WEFT_WORKER_EXECUTOR_INIT_IO_H_
#define WEFT_WORKER_EXECUTOR_INIT_IO_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint/checkpoint.h"
#include "weft/v1/program.pb.h"
#include "worker/executor/buffers.h"
#include "worker/kernels/kernels.h"

namespace weft {

// The buffer in range, its box inside the global shape and as large as the buffer, a known kind
// (FROM_FILE with Program.init_from).
absl::Status CheckInit(const v1::Program& program, const Buffers& buffers,
                       const v1::ParamInit& init);
// The buffer in range, its box inside the global shape and as large as the buffer, the role
// PARAM or OPTIMIZER_STATE.
absl::Status CheckCheckpointItem(const Buffers& buffers, const v1::CheckpointItem& item);

// Reads Program.load_checkpoint (if any) into the buffers of its items, then runs the ParamInit
// of every buffer the checkpoint did not cover. The buffers must be placed.
absl::Status LoadInitialValues(const v1::Program& program, const Buffers& buffers,
                               Kernels& kernels);

// Writes the Program.checkpoint_items marked write, as the buffers hold them now, into
// checkpoint::StagingDir(checkpoint_dir, step); returns the chunks (none, and no file, when the
// rank writes nothing).
absl::StatusOr<std::vector<checkpoint::IndexedChunk>> SaveCheckpointShard(
    const v1::Program& program, const Buffers& buffers, Kernels& kernels, int64_t step);

}  // namespace weft

#endif  // WEFT_WORKER_EXECUTOR_INIT_IO_H_
