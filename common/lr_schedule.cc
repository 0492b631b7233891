#include "common/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace weft {

double LearningRate(double lr, const v1::LrSchedule* schedule, int64_t step) {
  if (schedule == nullptr) return lr;
  const double s = static_cast<double>(step);
  const double warmup = static_cast<double>(schedule->warmup_steps());
  if (schedule->warmup_steps() > 0 && step <= schedule->warmup_steps()) return lr * s / warmup;
  const double decay = static_cast<double>(schedule->decay_steps());
  const double min_lr = schedule->min_lr();
  const std::string& kind = schedule->decay();
  if (kind == "wsd") {
    const double cooldown = static_cast<double>(schedule->cooldown_steps());
    const double stable_end = decay - cooldown;
    if (s <= stable_end) return lr;
    return lr - (lr - min_lr) * std::min(1.0, (s - stable_end) / cooldown);
  }
  const double p = std::min(1.0, (s - warmup) / (decay - warmup));
  if (kind == "cosine") return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
  if (kind == "linear") return lr - (lr - min_lr) * p;
  return lr;  // constant
}

absl::Status ValidateLrSchedule(const v1::LrSchedule& schedule, double lr,
                                const std::string& path) {
  const std::string& decay = schedule.decay();
  if (decay != "constant" && decay != "linear" && decay != "cosine" && decay != "wsd") {
    return absl::InvalidArgumentError(absl::StrCat(path, ".decay: unknown decay \"", decay,
                                                   "\"; known: constant, linear, cosine, wsd"));
  }
  if (schedule.warmup_steps() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".warmup_steps: must be >= 0, got ",
                                                   schedule.warmup_steps()));
  }
  if (schedule.decay_steps() < 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".decay_steps: must be >= 1, got ",
                                                   schedule.decay_steps()));
  }
  if (schedule.warmup_steps() >= schedule.decay_steps()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".warmup_steps: ", schedule.warmup_steps(), " must be less than decay_steps ",
        schedule.decay_steps(), " (train.steps when absent): the schedule decays after warmup"));
  }
  if (!std::isfinite(schedule.min_lr()) || schedule.min_lr() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".min_lr: must be a finite number >= 0, got ", schedule.min_lr()));
  }
  if (schedule.min_lr() > lr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".min_lr: ", schedule.min_lr(),
                                                   " is above optimizer.lr ", lr,
                                                   ", the peak it decays from"));
  }
  if (decay != "wsd") {
    if (schedule.cooldown_steps() != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ".cooldown_steps: only for decay wsd (warmup-stable-decay), not ", decay));
    }
    return absl::OkStatus();
  }
  const int64_t decaying = schedule.decay_steps() - schedule.warmup_steps();
  if (schedule.cooldown_steps() < 1 || schedule.cooldown_steps() > decaying) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".cooldown_steps: wsd needs 1..", decaying,
        " (decay_steps - warmup_steps) steps of cooldown, got ", schedule.cooldown_steps()));
  }
  return absl::OkStatus();
}

}  // namespace weft
