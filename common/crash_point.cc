#include "common/crash_point.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft {
namespace {

struct Armed {
  std::string point;
  std::optional<int64_t> step;  // any step when unset
};

absl::StatusOr<std::optional<Armed>> Parse(const char* value) {
  if (value == nullptr) return std::optional<Armed>();
  const std::string text(value);
  Armed armed;
  const size_t at = text.find('@');
  armed.point = text.substr(0, at);
  if (at != std::string::npos) {
    int64_t step;
    if (!absl::SimpleAtoi(text.substr(at + 1), &step) || step < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kCrashAtEnv, "=", text, ": the step after '@' must be a number >= 0"));
    }
    armed.step = step;
  }
  if (std::find(std::begin(kCrashPoints), std::end(kCrashPoints), armed.point) ==
      std::end(kCrashPoints)) {
    return absl::InvalidArgumentError(absl::StrCat(kCrashAtEnv, "=", text, ": unknown point '",
                                                   armed.point, "' (known: ",
                                                   absl::StrJoin(kCrashPoints, ", "), ")"));
  }
  return std::optional<Armed>(armed);
}

// Read once: the environment does not change under a running daemon.
const std::optional<Armed>& ArmedPoint() {
  static const std::optional<Armed>* armed = [] {
    absl::StatusOr<std::optional<Armed>> parsed = Parse(getenv(kCrashAtEnv));
    return new std::optional<Armed>(parsed.ok() ? *parsed : std::nullopt);
  }();
  return *armed;
}

// The number in environment variable `name` (its value `value`), at least `min`; 0 when unset.
absl::StatusOr<int64_t> ParseEnvNumber(const char* name, const char* value, int64_t min,
                                       const char* what) {
  if (value == nullptr) return 0;
  int64_t n;
  if (!absl::SimpleAtoi(value, &n) || n < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "=", value, ": must be ", what, " >= ", min));
  }
  return n;
}

// WEFT_DEBUG_STEP_MS's milliseconds and WEFT_DEBUG_STALL_AT's step; 0 when unset.
absl::StatusOr<int64_t> ParseStepMs(const char* value) {
  return ParseEnvNumber(kStepMsEnv, value, 0, "a number of milliseconds");
}
absl::StatusOr<int64_t> ParseStallAt(const char* value) {
  return ParseEnvNumber(kStallAtEnv, value, 1, "a step number");
}

}  // namespace

absl::Status CheckCrashPointEnv() {
  if (absl::Status s = Parse(getenv(kCrashAtEnv)).status(); !s.ok()) return s;
  if (absl::Status s = ParseStallAt(getenv(kStallAtEnv)).status(); !s.ok()) return s;
  return ParseStepMs(getenv(kStepMsEnv)).status();
}

bool DebugStallAt(int64_t attempt, int64_t step) {
  static const int64_t stall_at = ParseStallAt(getenv(kStallAtEnv)).value_or(0);
  return stall_at > 0 && attempt == 0 && step == stall_at;
}

absl::Duration DebugMinStepTime() {
  static const int64_t ms = ParseStepMs(getenv(kStepMsEnv)).value_or(0);
  return absl::Milliseconds(ms);
}

void CrashPoint(absl::string_view point, int64_t step) {
  const std::optional<Armed>& armed = ArmedPoint();
  if (!armed.has_value() || armed->point != point) return;
  if (armed->step.has_value() && *armed->step != step) return;
  const std::string line =
      absl::StrCat(kCrashAtEnv, ": killing this process at ", point, ", step ", step, "\n");
  (void)!write(2, line.data(), line.size());
  kill(getpid(), SIGKILL);
  _exit(137);  // not reached
}

}  // namespace weft
