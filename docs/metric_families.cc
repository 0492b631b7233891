// metric_families: every metric family the daemons register, for docs/docs_test, which holds the
// metrics table of docs/operations.md to it. One line per family, tab-separated:
//   DAEMON  NAME  TYPE  LABELS
// DAEMON is weft-coordinator or weft-worker, TYPE counter | gauge | histogram, LABELS the label
// names joined by commas (empty without labels).
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

void Print(const char* daemon, MetricsRegistry& registry) {
  for (const MetricFamilyInfo& family : registry.Families()) {
    std::cout << daemon << "\t" << family.name << "\t" << family.type << "\t"
              << absl::StrJoin(family.label_names, ",") << "\n";
  }
}

}  // namespace
}  // namespace weft

int main() {
  weft::coordinator::CoordinatorMetrics coordinator;
  weft::WorkerMetrics worker("cpu");
  weft::Print("weft-coordinator", coordinator.registry());
  weft::Print("weft-worker", worker.registry());
  return 0;
}
