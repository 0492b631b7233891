// The learning rate of a step (JobSpec optimizer.schedule, v1::LrSchedule): what the worker
// applies, what it reports, and what validation checks a schedule against, defined once.
//
// E.g.
//   LearningRate(6e-4, &schedule, /*step=*/1);   // 6e-6 with warmup_steps 100
//   LearningRate(6e-4, nullptr, 7);              // 6e-4: no schedule, the constant lr
#ifndef WEFT_COMMON_LR_SCHEDULE_H_
#define WEFT_COMMON_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "weft/v1/job.pb.h"

namespace weft {

// The learning rate of step `step` (from 1: the step whose update is applied) under `schedule`
// with peak `lr`; `schedule` null: lr. The schedule must have passed ValidateLrSchedule (decay
// and decay_steps filled, as ApplyJobSpecDefaults fills them).
double LearningRate(double lr, const v1::LrSchedule* schedule, int64_t step);

// The schedule against its optimizer's peak lr; errors are INVALID_ARGUMENT naming the key under
// `path` (optimizer.schedule): a negative warmup_steps, warmup_steps >= decay_steps, an unknown
// decay, a min_lr above lr (or negative), cooldown_steps without wsd, or wsd's cooldown longer
// than its decay (decay_steps - warmup_steps).
absl::Status ValidateLrSchedule(const v1::LrSchedule& schedule, double lr,
                                const std::string& path);

}  // namespace weft

#endif  // WEFT_COMMON_LR_SCHEDULE_H_
