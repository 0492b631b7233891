// 1F1B (PipeDream-flush, Megatron's non-interleaved schedule): stage s first runs
// w = min(pp - 1 - s, m) warm-up forwards, then alternates one forward and one backward until
// every forward ran, then the w remaining backwards (cool-down). A stage never holds more than
// pp - s micro-batches' activations, which is why it exists: FThenB holds m.
//   pp=4, m=8, stage 0: F0 F1 F2 | F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 | B5 B6 B7
//              stage 3: F0 B0 F1 B1 ... F7 B7
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "planner/pipeline/schedule.h"

namespace weft::planner::pipeline {
namespace {

class OneFOneBSchedule final : public PipelineSchedule {
 public:
  std::string name() const override { return "1F1B"; }

  absl::Status Check(const PipelineShape& shape) const override {
    if (shape.virtual_stages != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.virtual_stages ", shape.virtual_stages, " needs schedule VPP, not 1F1B"));
    }
    if (shape.micro_batches < shape.stages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.micro_batches ", shape.micro_batches, " is fewer than the ", shape.stages,
          " stages: 1F1B never fills the pipeline (use FThenB, or micro_batches >= ",
          shape.stages, ")"));
    }
    return absl::OkStatus();
  }

  std::vector<ScheduleStep> Order(const PipelineShape& shape, int stage) const override {
    const int m = shape.micro_batches;
    const int warmup = std::min(shape.stages - 1 - stage, m);
    std::vector<ScheduleStep> order;
    int f = 0, b = 0;
    for (; f < warmup; ++f) order.push_back({{WorkItem::kForward, f, stage}});
    for (; f < m; ++f, ++b) {
      order.push_back({{WorkItem::kForward, f, stage}});
      order.push_back({{WorkItem::kBackward, b, stage}});
    }
    for (; b < m; ++b) order.push_back({{WorkItem::kBackward, b, stage}});
    return order;
  }
};

}  // namespace

std::unique_ptr<PipelineSchedule> NewOneFOneBSchedule() {
  return std::make_unique<OneFOneBSchedule>();
}

}  // namespace weft::planner::pipeline
