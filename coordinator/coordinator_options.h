// What a Coordinator is told at Create: its timeouts, its clock, how it prepares and plans a
// submitted spec (tests substitute their own), and its bounds.
#ifndef WEFT_COORDINATOR_COORDINATOR_OPTIONS_H_
#define WEFT_COORDINATOR_COORDINATOR_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/path_roots.h"
#include "coordinator/job_plan.h"
#include "coordinator/job_queries.h"
#include "coordinator/scheduler.h"
#include "coordinator/trace_store.h"
#include "weft/v1/job.pb.h"

namespace weft::coordinator {

struct CoordinatorOptions {
  // Told to workers in Welcome; how often they send a Heartbeat.
  int64_t heartbeat_interval_ms = 1000;
  // A worker silent for this long is lost.
  int64_t worker_timeout_ms = 10000;
  // How long a cancelled job's workers get to confirm (TaskDone) before the job is CANCELLED
  // anyway and they are counted idle again.
  int64_t cancel_grace_ms = 5000;
  // After a rank's failure, how long the other ranks' failures are gathered before the attempt
  // fails: the earliest by its time (TaskDone.failed_at_ms) is the cause, the others follow it
  // in the message (a checksum error on rank 1, not rank 2's "connection closed" echo of it).
  // 0: the first reported is the cause.
  int64_t failure_settle_ms = 1000;
  // The progress watchdog's floor (JobRunConfig::progress_floor_ms): an attempt that completes no
  // step for max(this, 10 x its median step time) restarts. 0: no watchdog.
  int64_t progress_floor_ms = 60'000;
  // Wall-clock milliseconds; tests substitute a manual clock.
  std::function<int64_t()> now_ms;
  // Fills derived fields and checks a submitted spec (default: PrepareJobSpec:
  // ValidateJobSpec). Tests that exercise scheduling mechanics substitute their own; SubmitJob
  // applies ApplyJobSpecDefaults (device, checkpoint keep, ...) before it either way.
  std::function<absl::Status(v1::JobSpec*)> prepare_spec;
  // Plans a prepared spec, once per job (default: PlanWithPlanner), polling the StopCheck in its
  // long loops: the SubmitJob call's deadline and cancellation, the coordinator's shutdown.
  std::function<absl::StatusOr<std::shared_ptr<const JobPlan>>(const v1::JobSpec&,
                                                               const planner::StopCheck&)>
      plan;
  // Mesh size (default: WorldSize).
  std::function<int64_t(const v1::JobSpec&)> world_size;
  // The largest mesh SubmitJob plans (--max_ranks): a larger one is refused before planning,
  // which would hold memory in proportion to it.
  int64_t max_ranks = 65536;
  // --data_root / --checkpoint_root: SubmitJob refuses a spec naming a path outside them
  // (CheckSpecPaths) before it reads any file; a checkpoint.dir holding files that are not
  // Weft's is refused too (checkpoint::CheckFolderIsWefts, in ValidateJobSpec).
  PathRoots roots;
  // Open WatchJob streams of a running or pending job, per job and in all: each holds a server
  // thread (the gRPC server has 1024, which workers' streams need too); more are refused.
  int max_watchers_per_job = 64;
  int max_watchers = 512;
  // Bounds on the timelines of traced jobs held in memory (GetJobTrace).
  TraceLimits trace_limits;
  PageLimits pages;
  // --max_log_lines: the most log lines stored of one rank's attempt; the ones after are
  // dropped, and one line says how many.
  int64_t max_log_lines = 10000;
  // Retention of ended jobs (--job_retention, --max_ended_jobs): a job that ended more than
  // job_retention_ms ago, or that is not among the max_ended_jobs that ended last, is deleted
  // with its events and log lines (0: no such bound). Checked every retention_interval_ms and
  // after each job ends.
  int64_t job_retention_ms = 0;
  int64_t max_ended_jobs = 0;
  // How ranks go to workers (--placement): by topology (PlaceRanks) or in registration order.
  Placement placement = Placement::kTopology;
  int64_t retention_interval_ms = 60000;
  // Where the cost profiles PutCostProfile stores are kept (the coordinator reads them back at
  // start; main: <data_dir>/cost_profiles). Empty: in memory only.
  std::string cost_profiles_dir;
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_COORDINATOR_OPTIONS_H_
