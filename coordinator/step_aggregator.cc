#include "coordinator/step_aggregator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weft::coordinator {

absl::StatusOr<std::optional<CompleteStep>> StepAggregator::Add(const v1::StepReport& report) {
  if (report.rank() < 0 || report.rank() >= world_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("step report from rank ", report.rank(), ", world size is ", world_size_));
  }
  if (report.step() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("step report of rank ", report.rank(), " for step ", report.step(),
                     "; steps count from 1"));
  }
  // Every rank reports its steps in order, so steps complete in order: an older one is a repeat.
  if (report.step() <= last_complete_) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", report.rank(), " reported step ",
                                                   report.step(), " after it was complete"));
  }
  PartialStep& partial = partial_[report.step()];
  if (!partial.by_rank.emplace(report.rank(), report).second) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", report.rank(), " reported step ",
                                                   report.step(), " twice"));
  }
  if (static_cast<int>(partial.by_rank.size()) < world_size_) return std::optional<CompleteStep>();

  CompleteStep complete;
  v1::StepMetrics& metrics = complete.metrics;
  const v1::StepReport& first = partial.by_rank.at(0);
  metrics.set_step(report.step());
  metrics.set_loss(first.loss());
  metrics.set_lr(first.lr());
  metrics.set_grad_norm(first.grad_norm());
  if (first.has_eval_loss()) {
    complete.eval.emplace();
    complete.eval->set_step(report.step());
    complete.eval->set_loss(first.eval_loss());
  }
  double slowest = 0;
  int64_t bytes_sent = 0, peak_bytes = 0;
  for (const auto& [rank, r] : partial.by_rank) {
    slowest = std::max(slowest, r.step_seconds());
    bytes_sent += r.bytes_sent();
    peak_bytes = std::max(peak_bytes, r.peak_bytes());
  }
  metrics.set_bytes_sent(bytes_sent);
  metrics.set_peak_bytes(peak_bytes);
  metrics.set_step_seconds(slowest);
  metrics.set_samples_per_second(slowest > 0 ? static_cast<double>(batch_size_) / slowest : 0.0);
  partial_.erase(report.step());
  last_complete_ = std::max(last_complete_, report.step());
  return std::optional<CompleteStep>(std::move(complete));
}

}  // namespace weft::coordinator
