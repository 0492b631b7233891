// The scheduler's decision, as a pure function: given the pending jobs in submit order and the
// registered workers in registration order, which jobs start now on which workers (PlaceRanks
// below: the mesh's innermost dims inside a host), and what every other job waits for. Jobs of one device kind start in submit order: a job that does not
// fit the idle workers blocks the later jobs of its kind (no overtaking), but not jobs of another
// kind, and not when it needs more workers of its kind than are registered (it waits for more
// to register; the jobs behind it run meanwhile).
//
// E.g.
//   ScheduleDecision d = Schedule({{"job-000001", "cpu", 4}},
//                                 {{"worker-1", "cpu", true}, {"worker-2", "cpu", true}});
//   // d.start is empty; d.waiting["job-000001"] ==
//   //     "waiting for 4 idle cpu workers, 2 registered"
#ifndef WEFT_COORDINATOR_SCHEDULER_H_
#define WEFT_COORDINATOR_SCHEDULER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace weft::coordinator {

struct PendingJob {
  std::string job_id;
  std::string device_kind;  // "cpu" | "cuda"
  int64_t world_size = 0;
  // The mesh, outermost dim first (ranks row-major: the last dim's members are neighbours);
  // empty: one dim of world_size.
  std::vector<int64_t> mesh_shape = {};
};

struct WorkerSlot {
  std::string worker_id;
  std::string device_kind;
  bool idle = false;
  std::string host = "";  // the worker's hello.host; workers of one host share its fast links
};

struct JobStart {
  std::string job_id;
  std::vector<std::string> workers_by_rank;
};

struct ScheduleDecision {
  std::vector<JobStart> start;                  // in submit order
  std::map<std::string, std::string> waiting;  // job id -> what it waits for
};

// How a job's ranks go to its workers: kTopology as PlaceRanks says; kRegistration the r-th
// idle worker in registration order for rank r (what Weft did before; kept to compare against).
enum class Placement { kTopology, kRegistration };

ScheduleDecision Schedule(const std::vector<PendingJob>& pending_in_submit_order,
                          const std::vector<WorkerSlot>& workers_in_registration_order,
                          Placement placement = Placement::kTopology);

// Topology-aware placement: the worker of each of a job's ranks, chosen from `free` (idle
// workers of its kind, in registration order; at least world_size of them) by their hosts as
// common/rank_placement.h says: the mesh's innermost dims inside a host, the outer ones across
// hosts, the fullest hosts first. On one host this is registration order.
//
// E.g. hosts a (a1, a2, a3) and b (b1, b2, b3), registered a1 b1 a2 b2 a3 b3, mesh [2, 2]:
//   -> {a1, a2, b1, b2}: each mp pair on one host (registration order would pair a1 with b1).
std::vector<std::string> PlaceRanks(const PendingJob& job, const std::vector<WorkerSlot>& free);

// The kind part of a device string: "cuda:1" -> "cuda", "" -> "cpu".
std::string DeviceKind(const std::string& device);

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_SCHEDULER_H_
