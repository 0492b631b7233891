// Collects the per-rank StepReports of one job attempt and turns each step into one StepMetrics
// once every rank has reported it: the loss, learning rate and gradient norm of rank 0 (every
// rank holds the same: the loss and norm buffers hold replicated global values), the slowest
// rank's step time, the global batch over that time, the bytes all ranks sent during the step
// (the sum of their bytes_sent), and the largest rank's memory peak (the max of their
// peak_bytes: each rank's memory is its own device's); and, when the step evaluated, rank 0's
// eval loss as an EvalMetrics.
//
// E.g.
//   StepAggregator steps(/*world_size=*/2, /*batch_size=*/8);
//   steps.Add(report_rank0_step1);                      // std::nullopt: rank 1 still missing
//   std::optional<CompleteStep> m = steps.Add(report_rank1_step1);  // step 1 complete
#ifndef WEFT_COORDINATOR_STEP_AGGREGATOR_H_
#define WEFT_COORDINATOR_STEP_AGGREGATOR_H_

#include <cstdint>
#include <map>
#include <optional>

#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

struct CompleteStep {
  v1::StepMetrics metrics;
  std::optional<v1::EvalMetrics> eval;  // when the step evaluated (Program.eval)
};

class StepAggregator {
 public:
  StepAggregator(int world_size, int64_t batch_size)
      : world_size_(world_size), batch_size_(batch_size) {}

  // The step's metrics when this report completes it, std::nullopt while ranks are missing.
  // INVALID_ARGUMENT for a rank out of range, a step below 1, or a duplicate report.
  absl::StatusOr<std::optional<CompleteStep>> Add(const v1::StepReport& report);

  // Steps some but not all ranks reported.
  int incomplete_steps() const { return static_cast<int>(partial_.size()); }

 private:
  struct PartialStep {
    std::map<int, v1::StepReport> by_rank;
  };

  const int world_size_;
  const int64_t batch_size_;
  std::map<int64_t, PartialStep> partial_;  // by step
  int64_t last_complete_ = 0;               // highest step emitted
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_STEP_AGGREGATOR_H_
