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
#include "coordinator/planner/plan_report.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::client {

struct PlannedJob {
  v1::JobSpec spec;                   // as the planner saw it: defaults and parallelize applied
  std::vector<v1::Program> programs;  // by global rank
  planner::PlanReport report;
};

// Loads the spec and checks it as SubmitJob does (PrepareJobSpec, PlanJob),
// so an invalid spec gets the same error, prefixed with the path.
absl::StatusOr<PlannedJob> PlanSpecFile(const std::string& path);

// Per rank: FormatProgram's listing, then memory and collectives from the report; last, the
// total bytes moved per step.
std::string FormatPlanText(const PlannedJob& job);

// {"job", "mesh": {"shape", "dim_names"}, "world_size", "total_bytes_per_step",
//  "ranks": [{"rank", "memory": {"param_bytes", "grad_bytes", "optimizer_state_bytes",
//             "peak_activation_bytes"}, "bytes_sent_per_step",
//             "collectives": [{"instruction", "op", "tensor", "ranks", "mesh_dims", "bytes_sent"}],
//             "instructions": [{"index", "op", "inputs": [{"buffer", "name", "shape"}],
//                               "outputs": [...], "group"?, "comment"?}]}]}
std::string FormatPlanJson(const PlannedJob& job);

}  // namespace weft::client

#endif  // WEFT_CLIENT_PLAN_H_
