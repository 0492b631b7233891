#include "planner/pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft::planner::pipeline {

std::string WorkItem::ToString(bool with_chunk) const {
  std::string s = absl::StrCat(kind == kForward ? "F" : "B", micro_batch);
  if (with_chunk) absl::StrAppend(&s, ".", chunk);
  return s;
}

absl::StatusOr<std::unique_ptr<PipelineSchedule>> ScheduleByName(const std::string& name) {
  if (name == "FThenB") return NewFThenBSchedule();
  if (name == "1F1B") return NewOneFOneBSchedule();
  if (name == "VPP") return NewVppSchedule();
  return absl::InvalidArgumentError(
      absl::StrCat("pipeline.schedule: unknown \"", name, "\" (FThenB | 1F1B | VPP)"));
}

std::vector<WorkItem> Flatten(const std::vector<ScheduleStep>& order) {
  std::vector<WorkItem> items;
  for (const ScheduleStep& step : order) items.insert(items.end(), step.begin(), step.end());
  return items;
}

std::string FormatOrder(const std::vector<ScheduleStep>& order, bool with_chunk) {
  std::vector<std::string> parts;
  for (const ScheduleStep& step : order) {
    std::vector<std::string> items;
    for (const WorkItem& item : step) items.push_back(item.ToString(with_chunk));
    std::string s = absl::StrJoin(items, " ");
    parts.push_back(step.size() == 1 ? s : absl::StrCat("[", s, "]"));
  }
  return absl::StrJoin(parts, " ");
}

int PeakActivations(const std::vector<ScheduleStep>& order) {
  int alive = 0, peak = 0;
  for (const WorkItem& item : Flatten(order)) {
    alive += item.kind == WorkItem::kForward ? 1 : -1;
    peak = std::max(peak, alive);
  }
  return peak;
}

absl::Status CheckOrders(const PipelineShape& shape,
                         const std::vector<std::vector<ScheduleStep>>& orders) {
  const int chunks = shape.chunks();
  if (static_cast<int>(orders.size()) != shape.stages) {
    return absl::InternalError(absl::StrCat("schedule: ", orders.size(), " orders for ",
                                            shape.stages, " stages"));
  }
  using Key = std::tuple<int, int, int>;  // kind, micro-batch, chunk
  std::map<Key, int> seen;
  std::vector<std::vector<WorkItem>> items(shape.stages);
  for (int s = 0; s < shape.stages; ++s) {
    items[s] = Flatten(orders[s]);
    for (const WorkItem& item : items[s]) {
      if (item.micro_batch < 0 || item.micro_batch >= shape.micro_batches || item.chunk < 0 ||
          item.chunk >= chunks || item.chunk % shape.stages != s) {
        return absl::InternalError(
            absl::StrCat("schedule: stage ", s, " runs ", item.ToString(), " out of range"));
      }
      if (++seen[Key{item.kind, item.micro_batch, item.chunk}] > 1) {
        return absl::InternalError(
            absl::StrCat("schedule: stage ", s, " runs ", item.ToString(), " twice"));
      }
    }
  }
  if (static_cast<int>(seen.size()) != 2 * shape.micro_batches * chunks) {
    return absl::InternalError("schedule: some (micro-batch, chunk) is not run");
  }
  // Run the stages with unbounded buffering: an item is ready when what it consumes is done.
  std::map<Key, bool> done;
  auto is_done = [&](WorkItem::Kind kind, int mb, int chunk) {
    return done.count(Key{kind, mb, chunk}) > 0;
  };
  auto ready = [&](const WorkItem& item) {
    if (item.kind == WorkItem::kForward) {
      return item.chunk == 0 || is_done(WorkItem::kForward, item.micro_batch, item.chunk - 1);
    }
    if (!is_done(WorkItem::kForward, item.micro_batch, item.chunk)) return false;
    return item.chunk == chunks - 1 ||
           is_done(WorkItem::kBackward, item.micro_batch, item.chunk + 1);
  };
  std::vector<size_t> next(shape.stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < shape.stages; ++s) {
      while (next[s] < items[s].size() && ready(items[s][next[s]])) {
        const WorkItem& item = items[s][next[s]++];
        done[Key{item.kind, item.micro_batch, item.chunk}] = true;
        progress = true;
      }
    }
  }
  std::vector<std::string> stuck;
  for (int s = 0; s < shape.stages; ++s) {
    if (next[s] < items[s].size()) {
      stuck.push_back(absl::StrCat("stage ", s, " at ", items[s][next[s]].ToString()));
    }
  }
  if (!stuck.empty()) {
    return absl::InternalError(
        absl::StrCat("schedule: the order cannot complete: ", absl::StrJoin(stuck, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace weft::planner::pipeline
