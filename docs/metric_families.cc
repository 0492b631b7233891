// metric_families: every metric family the daemons register, for docs/docs_test, which holds the
// metrics table of docs/operations.md to it. One line per family (the coordinator's, then a
// worker's), tab-separated:
//   NAME  TYPE  LABELS
// TYPE counter | gauge | histogram, LABELS the label names joined by commas (empty without
// labels).
//
// E.g.
//   bazel run //docs:metric_families
#include <iostream>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/metrics.h"
#include "coordinator/coordinator_metrics.h"
#include "worker/worker_metrics.h"

namespace weft {
namespace {

void Print(MetricsRegistry& registry) {
  for (const MetricFamilyInfo& family : registry.Families()) {
    std::cout << family.name << "\t" << family.type << "\t"
              << absl::StrJoin(family.label_names, ",") << "\n";
  }
}

}  // namespace
}  // namespace weft

int main() {
  weft::coordinator::CoordinatorMetrics coordinator;
  weft::WorkerMetrics worker("cpu");
  weft::Print(coordinator.registry());
  weft::Print(worker.registry());
  return 0;
}
