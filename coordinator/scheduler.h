// The scheduler's decision, as a pure function: given the pending jobs in submit order and the
// registered workers in registration order, which jobs start now on which workers (worker of
// global rank r = the r-th chosen worker, in registration order, so ranks are stable), and what
// every other job waits for. Jobs of one device kind start in submit order: a job that does not
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
};

struct WorkerSlot {
  std::string worker_id;
  std::string device_kind;
  bool idle = false;
};

struct JobStart {
  std::string job_id;
  std::vector<std::string> workers_by_rank;
};

struct ScheduleDecision {
  std::vector<JobStart> start;                  // in submit order
  std::map<std::string, std::string> waiting;  // job id -> what it waits for
};

ScheduleDecision Schedule(const std::vector<PendingJob>& pending_in_submit_order,
                          const std::vector<WorkerSlot>& workers_in_registration_order);

// The kind part of a device string: "cuda:1" -> "cuda", "" -> "cpu".
std::string DeviceKind(const std::string& device);

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_SCHEDULER_H_
