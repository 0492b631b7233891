// FThenB (GPipe): every stage runs the forward of all micro-batches, then their backwards, in
// micro-batch order. Stage 0 holds the activations of all m micro-batches at once.
//   pp=2, m=4, both stages: F0 F1 F2 F3 B0 B1 B2 B3
#include "absl/strings/str_cat.h"
#include "planner/pipeline/schedule.h"

namespace weft::planner::pipeline {
namespace {

class FThenBSchedule final : public PipelineSchedule {
 public:
  std::string name() const override { return "FThenB"; }

  absl::Status Check(const PipelineShape& shape) const override {
    if (shape.virtual_stages != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.virtual_stages ", shape.virtual_stages, " needs schedule VPP, not FThenB"));
    }
    return absl::OkStatus();
  }

  std::vector<ScheduleStep> Order(const PipelineShape& shape, int stage) const override {
    std::vector<ScheduleStep> order;
    for (int mb = 0; mb < shape.micro_batches; ++mb) {
      order.push_back({{WorkItem::kForward, mb, stage}});
    }
    for (int mb = 0; mb < shape.micro_batches; ++mb) {
      order.push_back({{WorkItem::kBackward, mb, stage}});
    }
    return order;
  }
};

}  // namespace

std::unique_ptr<PipelineSchedule> NewFThenBSchedule() { return std::make_unique<FThenBSchedule>(); }

}  // namespace weft::planner::pipeline
