// Prints the planner's predicted traffic of a spec, {"total_bytes_per_step":N,"ranks":[...]},
// as SubmitJob would plan it (PrepareJobSpec, PlanJob, ReportPlan). The
// fallback of bench/tp_step.sh for when `weftctl plan --json` is not built.
// Usage: plan_bytes SPEC.yaml
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/yaml.h"
#include "planner/plan_report.h"
#include "planner/planner.h"
#include "planner/submit/submit.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: plan_bytes SPEC.yaml\n";
    return 2;
  }
  absl::StatusOr<weft::v1::JobSpec> spec = weft::LoadJobSpecFile(argv[1]);
  if (!spec.ok()) {
    std::cerr << argv[1] << ": " << spec.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::shared_ptr<const weft::planner::Plan>> plan =
      weft::planner::PrepareAndPlan(&*spec, "plan", 0);
  if (!plan.ok()) {
    std::cerr << argv[1] << ": " << plan.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::vector<weft::v1::Program>> programs = (*plan)->AllPrograms();
  if (!programs.ok()) {
    std::cerr << argv[1] << ": planning: " << programs.status() << "\n";
    return 1;
  }
  const weft::planner::PlanReport report = weft::planner::ReportPlan(*programs);
  std::vector<std::string> ranks;
  for (const auto& r : report.ranks) {
    ranks.push_back(absl::StrCat("{\"rank\":", r.rank, ",\"bytes_sent_per_step\":",
                                 r.bytes_sent_per_step, ",\"collectives\":", r.collectives.size(),
                                 "}"));
  }
  std::cout << "{\"total_bytes_per_step\":" << report.total_bytes_per_step << ",\"ranks\":["
            << absl::StrJoin(ranks, ",") << "]}\n";
  return 0;
}
