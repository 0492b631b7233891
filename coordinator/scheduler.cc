#include "coordinator/scheduler.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/rank_placement.h"

namespace weft::coordinator {

std::vector<std::string> PlaceRanks(const PendingJob& job, const std::vector<WorkerSlot>& free) {
  std::vector<std::string> host_of_slot;
  for (const WorkerSlot& w : free) host_of_slot.push_back(w.host);
  const std::vector<int64_t> shape =
      job.mesh_shape.empty() ? std::vector<int64_t>{job.world_size} : job.mesh_shape;
  std::vector<std::string> out;
  for (int slot : PlaceRanksOnSlots(shape, host_of_slot)) out.push_back(free[slot].worker_id);
  return out;  // empty: fewer free workers than ranks (the caller checks first)
}

std::string DeviceKind(const std::string& device) {
  std::string kind = device.substr(0, device.find(':'));
  return kind.empty() ? "cpu" : kind;
}

ScheduleDecision Schedule(const std::vector<PendingJob>& pending_in_submit_order,
                          const std::vector<WorkerSlot>& workers_in_registration_order,
                          Placement placement) {
  ScheduleDecision decision;
  std::map<std::string, int64_t> registered;  // by device kind
  for (const WorkerSlot& w : workers_in_registration_order) ++registered[DeviceKind(w.device_kind)];
  std::set<std::string> taken;
  std::map<std::string, std::string> blocked_by;  // device kind -> first job that did not fit

  for (const PendingJob& job : pending_in_submit_order) {
    const std::string kind = DeviceKind(job.device_kind);
    std::vector<WorkerSlot> free;
    for (const WorkerSlot& w : workers_in_registration_order) {
      if (w.idle && DeviceKind(w.device_kind) == kind && taken.count(w.worker_id) == 0) {
        free.push_back(w);
      }
    }
    const int64_t n = job.world_size;
    std::string need = absl::StrCat(n, " idle ", kind, " worker", n == 1 ? "" : "s", ", ",
                                    registered[kind], " registered");
    if (static_cast<int64_t>(free.size()) < registered[kind]) {
      absl::StrAppend(&need, ", ", free.size(), " idle");
    }
    auto blocked = blocked_by.find(kind);
    if (blocked != blocked_by.end()) {
      decision.waiting[job.job_id] =
          absl::StrCat("queued behind ", blocked->second, "; needs ", need);
      continue;
    }
    if (n <= 0 || static_cast<int64_t>(free.size()) < n) {
      decision.waiting[job.job_id] = absl::StrCat("waiting for ", need);
      // Only a job the registered workers could run holds the queue: one that needs more workers
      // than there are would hold it until more register, which may be never.
      if (n <= registered[kind]) blocked_by[kind] = job.job_id;
      continue;
    }
    JobStart start{job.job_id, {}};
    if (placement == Placement::kTopology) {
      start.workers_by_rank = PlaceRanks(job, free);
    } else {
      for (int64_t r = 0; r < n; ++r) start.workers_by_rank.push_back(free[r].worker_id);
    }
    taken.insert(start.workers_by_rank.begin(), start.workers_by_rank.end());
    decision.start.push_back(std::move(start));
  }
  return decision;
}

}  // namespace weft::coordinator
