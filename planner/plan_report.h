// PlanReport: what `weftctl plan` prints before any worker is touched — per rank, the memory the
// Program needs (its peak: the arena the memory plan laid its buffers out in, which is what the
// worker's allocator holds; and by role: parameters, gradients, optimizer states, peak live
// activations from a liveness walk over the instruction list) and every collective with its group
// and the bytes this rank sends; plus the total bytes moved per step over all ranks.
//
// E.g.
//   ASSIGN_OR_RETURN(std::vector<v1::Program> programs, PlanJob(spec, "plan", 0));
//   PlanReport report = ReportPlan(programs);
//   std::cout << report.total_bytes_per_step;
#ifndef WEFT_PLANNER_PLAN_REPORT_H_
#define WEFT_PLANNER_PLAN_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "weft/v1/program.pb.h"

namespace weft::planner {

struct CollectiveReport {
  int instruction = 0;      // index in Program.instructions
  std::string op;           // ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, ...
  std::string tensor;       // the buffer's global name
  std::vector<int> ranks;   // the group's global ranks
  std::string mesh_dims;    // e.g. "dp"
  int64_t bytes_sent = 0;   // by this rank per step (CollectiveBytes)
};

struct RankReport {
  int rank = 0;
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optimizer_state_bytes = 0;
  int64_t peak_activation_bytes = 0;  // activations, data and loss buffers alive at once
  // Everything the rank holds at its peak: parameters, gradients, optimizer states, live
  // activations and communication scratch (Program.arena_bytes).
  int64_t peak_bytes = 0;
  int64_t bytes_sent_per_step = 0;
  std::vector<CollectiveReport> collectives;
};

struct PlanReport {
  std::vector<RankReport> ranks;
  int64_t total_bytes_per_step = 0;  // sum over ranks of bytes_sent_per_step
};

PlanReport ReportPlan(const std::vector<v1::Program>& programs);

// One rank's report; without `collectives` only their totals (bytes_sent_per_step) are kept,
// which is what a report of thousands of ranks holds for most of them.
RankReport ReportRank(const v1::Program& program, bool collectives = true);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_PLAN_REPORT_H_
