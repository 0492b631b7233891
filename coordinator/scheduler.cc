#include "coordinator/scheduler.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"

namespace weft::coordinator {

std::vector<std::string> PlaceRanks(const PendingJob& job, const std::vector<WorkerSlot>& free) {
  const int64_t n = job.world_size;
  // Hosts in the order their first free worker registered, each with its free workers.
  std::vector<std::pair<std::string, std::vector<std::string>>> hosts;
  std::map<std::string, size_t> host_index;
  for (const WorkerSlot& w : free) {
    auto [it, added] = host_index.try_emplace(w.host, hosts.size());
    if (added) hosts.push_back({w.host, {}});
    hosts[it->second].second.push_back(w.worker_id);
  }
  // Fullest hosts first (stable: ties keep registration order).
  std::stable_sort(hosts.begin(), hosts.end(), [](const auto& a, const auto& b) {
    return a.second.size() > b.second.size();
  });
  // Block sizes, largest first: the products of the mesh's innermost dims.
  std::vector<int64_t> shape = job.mesh_shape.empty() ? std::vector<int64_t>{n} : job.mesh_shape;
  std::vector<int64_t> blocks;
  int64_t product = 1;
  for (auto d = shape.rbegin(); d != shape.rend(); ++d) blocks.push_back(product *= *d);
  std::reverse(blocks.begin(), blocks.end());
  blocks.push_back(1);
  for (int64_t block : blocks) {
    if (block <= 0 || n % block != 0) continue;
    int64_t holds = 0;
    for (const auto& [host, workers] : hosts) {
      holds += static_cast<int64_t>(workers.size()) / block * block;
    }
    if (holds < n) continue;
    std::vector<std::string> out;
    for (const auto& [host, workers] : hosts) {
      const int64_t take = std::min<int64_t>(
          static_cast<int64_t>(workers.size()) / block * block, n - static_cast<int64_t>(out.size()));
      out.insert(out.end(), workers.begin(), workers.begin() + take);
      if (static_cast<int64_t>(out.size()) == n) break;
    }
    return out;
  }
  return {};  // fewer free workers than ranks: the caller checks first
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
