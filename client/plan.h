// `weftctl plan SPEC`: the job's per-rank Programs as the coordinator would plan them, computed
// offline (no daemons), with what each rank needs: its instructions with local shapes, each
// collective with its group and the bytes it sends, its memory for parameters, gradients,
// optimizer states and peak activations, and the bytes moved per step over all ranks.
//
// E.g.
//   ASSIGN_OR_RETURN(PlannedJob job, PlanSpecFile("examples/dp_mp.yaml"));
//   std::cout << FormatPlanText(job);   // or FormatPlanJson(job): one JSON document
#ifndef WEFT_CLIENT_PLAN_H_
#define WEFT_CLIENT_PLAN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/plan_report.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::client {

// A plan as `weftctl plan` shows it. Every rank gets its report line (memory, bytes sent); the
// ranks listed in full also get their Program and collectives: by default every rank of a mesh of
// up to kListAllRanks, else the first rank of each pipeline stage (a stage's ranks run the same
// instructions on their own pieces). Programs are emitted one rank at a time and dropped unless
// listed, so planning thousands of ranks holds a handful of Programs.
inline constexpr int kListAllRanks = 16;

struct PlannedJob {
  v1::JobSpec spec;                   // as the planner saw it: defaults and parallelize applied
  std::vector<v1::Program> programs;  // the listed ranks', group ranks filled in, by rank
  std::vector<int> listed;            // their ranks
  planner::PlanReport report;         // every rank; collectives only for the listed ones
};

// Loads the spec and checks it as SubmitJob does (planner::PrepareAndPlan), so an invalid spec
// gets the same error, prefixed with the path. `ranks`: the ranks to list in full (empty: the
// default above, or every rank with `all`; out of range: INVALID_ARGUMENT).
absl::StatusOr<PlannedJob> PlanSpecFile(const std::string& path,
                                        const std::vector<int>& ranks = {}, bool all = false);

// Per listed rank: FormatProgram's listing, then memory and collectives from the report; then a
// line per other rank; last, the total bytes moved per step.
std::string FormatPlanText(const PlannedJob& job);

// {"job", "mesh": {"shape", "dim_names"}, "world_size", "total_bytes_per_step",
//  "listed_ranks": [...],
//  "ranks": [{"rank", "memory": {"peak_bytes", "param_bytes", "grad_bytes",
//             "optimizer_state_bytes", "peak_activation_bytes"}, "bytes_sent_per_step",
//             listed ranks only:
//             "collectives": [{"instruction", "op", "tensor", "ranks", "mesh_dims", "bytes_sent"}],
//             "instructions": [{"index", "op", "inputs": [{"buffer", "name", "shape", "dtype"}],
//                               "outputs": [...], "group"?, "comment"?}]}]}
std::string FormatPlanJson(const PlannedJob& job);

}  // namespace weft::client

#endif  // WEFT_CLIENT_PLAN_H_
