// VPP: Megatron-LM's interleaved 1F1B (schedules.py, forward_backward_pipelining_with_
// interleaving). Each stage holds v chunks (chunk c on stage c mod pp) and runs the m*v
// virtual micro-batches in groups of pp: the k-th forward is micro-batch
// (k / (pp*v)) * pp + k % pp of local chunk (k mod pp*v) / pp, the k-th backward the same with
// the local chunk counted from the end. Stage s warms up with (pp - s - 1) * 2 + (v - 1) * pp
// forwards, then runs [F, B] steps (their transfers batched after both, as Megatron's
// send_forward_backward_recv_forward_backward), then the remaining backwards. Needs m a
// multiple of pp, as Megatron does.
//   pp=2, v=2, m=4, stage 0: F0.0 F1.0 F0.2 F1.2 [F2.0 B0.2] [F3.0 B1.2] [F2.2 B0.0] [F3.2 B1.0]
//                            B2.2 B3.2 B2.0 B3.0
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "planner/pipeline/schedule.h"

namespace weft::planner::pipeline {
namespace {

class VppSchedule final : public PipelineSchedule {
 public:
  std::string name() const override { return "VPP"; }

  absl::Status Check(const PipelineShape& shape) const override {
    if (shape.virtual_stages < 2) {
      return absl::InvalidArgumentError(
          "pipeline.virtual_stages must be >= 2 with schedule VPP (with 1 chunk per stage it is "
          "1F1B)");
    }
    if (shape.stages < 2) {
      return absl::InvalidArgumentError("schedule VPP needs a pipeline dim of size >= 2");
    }
    if (shape.micro_batches % shape.stages != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.micro_batches ", shape.micro_batches, " must be a multiple of the ",
          shape.stages, " stages with schedule VPP (as in Megatron's interleaved schedule)"));
    }
    return absl::OkStatus();
  }

  std::vector<ScheduleStep> Order(const PipelineShape& shape, int stage) const override {
    const int pp = shape.stages, v = shape.virtual_stages, m = shape.micro_batches;
    const int total = m * v;
    const int warmup = std::min((pp - stage - 1) * 2 + (v - 1) * pp, total);
    auto item = [&](int k, WorkItem::Kind kind) {
      const int in_group = k % (pp * v);
      int local_chunk = in_group / pp;
      if (kind == WorkItem::kBackward) local_chunk = v - 1 - local_chunk;
      const int mb = (k / (pp * v)) * pp + k % pp;
      return WorkItem{kind, mb, local_chunk * pp + stage};
    };
    std::vector<ScheduleStep> order;
    for (int k = 0; k < warmup; ++k) order.push_back({item(k, WorkItem::kForward)});
    for (int i = 0; i < total - warmup; ++i) {
      order.push_back({item(warmup + i, WorkItem::kForward), item(i, WorkItem::kBackward)});
    }
    for (int k = total - warmup; k < total; ++k) order.push_back({item(k, WorkItem::kBackward)});
    return order;
  }
};

}  // namespace

std::unique_ptr<PipelineSchedule> NewVppSchedule() { return std::make_unique<VppSchedule>(); }

}  // namespace weft::planner::pipeline
