// The memory plan of a Program: every buffer gets an offset in one arena (Buffer.offset,
// Program.arena_bytes) so that buffers whose lifetimes in the instruction list do not overlap
// share bytes; the executor allocates the arena once, so the memory the plan predicts is the
// memory the worker's allocator holds. Lifetimes are common/program.h's BufferLives, the rule the
// executor checks the layout by: carried buffers (parameters, optimizer states, checkpointed
// buffers, any buffer read before it is written in the step) live for the whole job and sit at
// the bottom of the arena. The others are placed largest first, each in the smallest gap
// left by the buffers it overlaps in time (greedy by size, as TFLite's arena planner). Offsets
// are multiples of kArenaAlignment.
//
// E.g.
//   MemoryPlanner planner;
//   planner.Plan(&program);   // PlannedPeakBytes(program) is its rank's peak
//
// Besides the arena, the device's kernels keep scratch of their own for the job
// (common/kernel_scratch.h); Plan sets Program.kernel_scratch_bytes to it.
#ifndef WEFT_PLANNER_MEMORY_PLAN_H_
#define WEFT_PLANNER_MEMORY_PLAN_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/status/status.h"
#include "common/program.h"
#include "planner/stop.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

class MemoryPlanner {
 public:
  // Sets every buffer's offset, the program's arena_bytes and its kernel_scratch_bytes. Programs
  // of one plan mostly share their buffers' sizes and lifetimes (the ranks of a stage), so
  // layouts are remembered by them. Placing a buffer looks only at the buffers placed in the
  // stretches of the instruction list it lives in (a step of 1024 micro-batches has tens of
  // thousands of buffers, few alive at once); `stop` is polled every few dozen, and once it says
  // stop the program is left unplanned.
  absl::Status Plan(v1::Program* program, const StopCheck& stop = {});

 private:
  std::map<std::vector<int64_t>, std::pair<std::vector<int64_t>, int64_t>> layouts_;
};

}  // namespace weft::planner

#endif  // WEFT_PLANNER_MEMORY_PLAN_H_
