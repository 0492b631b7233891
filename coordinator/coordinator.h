// The coordinator's core: JobService, WorkerService and RendezvousService logic with no
// transport. It owns the job queue, the registered workers, the running jobs (their rank
// assignment, step aggregation and completion) and the watchers of job events; the gRPC adapters
// in rpc/ only translate calls into these methods, so the whole life of a job is tested in one
// process without sockets.
//
// Every job state change and step event is written to the JobStore before watchers see it. The
// scheduler runs after every change that can free or add workers or jobs: jobs start in submit
// order on WorldSize(spec) idle workers of the spec's device kind, ranks assigned in worker
// registration order. Tick() (called by the background thread Start() launches, or by tests with
// a fake clock) finds workers whose heartbeats stopped and cancellations whose grace ran out.
//
// Failures: the ranks' failures of an attempt are gathered for failure_settle_ms and ordered by
// when they happened; the earliest is the job's cause, and every one is kept in the job record
// (Job.rank_errors, bounded). Logs: the lines a worker logs while it runs a rank come on its
// stream (LogLines) and are stored per job, attempt and rank (bounded by max_log_lines), for
// GetJobLogs; lines from a worker for a rank it does not run are ignored.
//
// Checkpoints: a job with checkpoint.dir has its ranks write their shards into a staging folder
// and report the chunks (CheckpointReport); once every rank of the attempt reported a step, a
// committer thread runs checkpoint::CommitCheckpoint off the main lock and the job gets a
// CheckpointSaved event. A job whose ranks all finished SUCCEEDS only after its last commit. A
// save some rank never reported (it died, the job failed) is never committed. A job with
// train.resume (or init_from naming a checkpoint) gets the step folder to load from in its
// Programs, resolved when the attempt starts.
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store, JobStore::Open(dir + "/weft.db"));
//   ASSIGN_OR_RETURN(std::unique_ptr<Coordinator> coordinator,
//                    Coordinator::Create(std::move(store), CoordinatorOptions()));
//   coordinator->Start();
//   ASSIGN_OR_RETURN(std::string worker_id,
//                    coordinator->ConnectWorker(hello, "ipv4:127.0.0.1:5000", connection));
//   ASSIGN_OR_RETURN(std::string job_id, coordinator->SubmitJob(spec));  // starts when it fits
//   coordinator->HandleWorkerMessage(worker_id, step_report);
//   coordinator->Shutdown();
#ifndef WEFT_COORDINATOR_COORDINATOR_H_
#define WEFT_COORDINATOR_COORDINATOR_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/path_roots.h"
#include "common/steady_stamp.h"
#include "coordinator/checkpoint_aggregator.h"
#include "coordinator/job_store.h"
#include "planner/planner.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/rendezvous.h"
#include "coordinator/step_aggregator.h"
#include "coordinator/trace_store.h"
#include "coordinator/worker_connection.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

// A planned job as the coordinator keeps it from SubmitJob until its attempts start: each rank's
// Program is emitted when an attempt starts (planner::Plan; tests substitute their own).
class JobPlan {
 public:
  virtual ~JobPlan() = default;
  virtual int world_size() const = 0;
  virtual absl::StatusOr<v1::Program> Program(int rank, const planner::Attempt& attempt) const = 0;
  // Index metadata that every checkpoint of the job records besides the job's name, id, attempt
  // and optimizer (the planner's: the Hugging Face export, planner/arch/hf_export.h).
  virtual std::map<std::string, std::string> checkpoint_metadata() const { return {}; }
};

// The pages of ListJobs (jobs) and GetJob (a job's steps): how many a request that names no size
// gets, and the most a page holds (a request for more gets this many).
struct PageLimits {
  int jobs_default = 100;
  int jobs_max = 1000;
  int steps_default = 1000;
  int steps_max = 10000;
  // GetJobLogs' lines; a page also ends after logs_max_bytes of text (lines are up to 4 KiB).
  int logs_default = 1000;
  int logs_max = 10000;
  size_t logs_max_bytes = 2 << 20;
};

// Job.rank_errors keeps at most this many errors of an attempt, each message cut to this many
// bytes (a job of many ranks fails on all of them at once).
inline constexpr int kMaxRankErrors = 256;
inline constexpr size_t kRankErrorMessageBytes = 4096;
// A stored log line's text is cut to this many bytes (workers cut theirs already).
inline constexpr size_t kLogLineBytes = 4096;

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
  // Wall-clock milliseconds; tests substitute a manual clock.
  std::function<int64_t()> now_ms;
  // Fills derived fields and checks a submitted spec (default: PrepareJobSpec:
  // ValidateJobSpec). Tests that exercise scheduling mechanics substitute their own; SubmitJob
  // applies ApplyJobSpecDefaults (device, checkpoint keep, ...) before it either way.
  std::function<absl::Status(v1::JobSpec*)> prepare_spec;
  // Plans a prepared spec, once per job (default: planner::PlanPrepared: building the model
  // validates it, and init_from or resume must hold its parameters).
  std::function<absl::StatusOr<std::shared_ptr<const JobPlan>>(const v1::JobSpec&)> plan;
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
  int64_t retention_interval_ms = 60000;
};

class Coordinator {
 public:
  // Recovers from the store: jobs that were running when a previous coordinator stopped are
  // RESTARTING as their next attempt and queued first (they resume from their newest checkpoint
  // once enough workers are connected); pending ones are queued after them, in submit order.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(std::unique_ptr<JobStore> store,
                                                             CoordinatorOptions options);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // Starts the background thread that calls Tick().
  void Start();
  // Ends every worker stream and watch, wakes rendezvous waiters, stops the background thread.
  // Running jobs stay RUNNING in the store (the next start restarts them). Idempotent.
  void Shutdown();
  // Heartbeat timeouts and cancel deadlines as of now_ms(), then a scheduling pass; then, when
  // due, retention (ApplyRetention).
  void Tick();
  // How long ago Tick last got the lock (or Start ran), on the steady clock whatever now_ms
  // says. The daemon's systemd watchdog pings only while this stays short: the background thread
  // ticks every 250 ms at most, so a long gap means the thread or mu_ is stuck.
  absl::Duration SinceLastTick() const;

  // ---- JobService ----
  // Validates and dry-run plans a copy of `spec`; any error is returned and nothing is stored.
  absl::StatusOr<std::string> SubmitJob(const v1::JobSpec& spec);
  // The request's spec, or its spec_yaml read as weftctl reads a spec file (ParseJobSpecYaml),
  // then SubmitJob(spec). A spec_yaml's relative paths are resolved against spec_dir when given
  // (the client sees the cluster's files at the same paths), else as the cluster sees them:
  // data paths, init_from and model.config_file against options.roots.data, checkpoint.dir
  // against options.roots.checkpoint. A model.config_file is read only under roots.data.
  // INVALID_ARGUMENT for both spec and spec_yaml, a spec_yaml over 1 MiB, a spec_dir that is not
  // absolute (or given without spec_yaml), a relative path with no root to resolve it against
  // (naming the field and the flag), or a YAML error (naming the field and the line).
  absl::StatusOr<std::string> SubmitJob(const v1::SubmitJobRequest& request);
  // The job with one page of its steps in step order, each as its latest attempt ran it
  // (options.pages bounds its size); next_steps_page_token names the next page, empty after the
  // last. INVALID_ARGUMENT names a negative steps_page_size or a token GetJob did not give.
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request);
  // One page of job summaries in submit order, of every job or those in request.state, read from
  // the store a page at a time; next_page_token (the page's last job id) is empty after the last.
  // INVALID_ARGUMENT names a negative page_size, an unknown state or a page_token that names no
  // job.
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request);
  // PENDING: CANCELLED at once. RUNNING: workers are told to cancel; the job becomes CANCELLED
  // when they confirm or after cancel_grace_ms. Final jobs: FAILED_PRECONDITION. Returns the job
  // without its steps.
  absl::StatusOr<v1::Job> CancelJob(const std::string& job_id, const std::string& reason);
  // Deletes a job that ended with its events, log lines and trace (its checkpoints stay), and
  // returns it as it was, without its steps. FAILED_PRECONDITION for a job that has not ended;
  // NOT_FOUND for an unknown job.
  absl::StatusOr<v1::Job> DeleteJob(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `emit` with every stored event of the job, then with live ones until the job is final.
  // Returns OK then, or as soon as `emit` returns false or `cancelled` (polled) returns true.
  // NOT_FOUND for an unknown job; UNAVAILABLE when the coordinator shuts down first.
  absl::Status WatchJob(const std::string& job_id,
                        const std::function<bool(const v1::JobEvent&)>& emit,
                        const std::function<bool()>& cancelled);
  std::vector<v1::WorkerInfo> ListWorkers();
  // The timeline of a job submitted with trace: its latest attempt's spans by rank (empty while
  // pending). FAILED_PRECONDITION when the job is not traced, NOT_FOUND for an unknown job or a
  // trace no longer held (the coordinator restarted, or it was forgotten to bound memory).
  absl::StatusOr<v1::JobTrace> GetJobTrace(const std::string& job_id);
  // One page of the lines the job's workers logged while they ran its ranks (options.pages bounds
  // it), ordered by attempt, time, rank and seq. NOT_FOUND for an unknown job; INVALID_ARGUMENT
  // names a rank or attempt the job does not have, a negative page_size or since_ms, or a
  // page_token GetJobLogs did not give.
  absl::StatusOr<v1::GetJobLogsResponse> GetJobLogs(const v1::GetJobLogsRequest& request);

  // ---- WorkerService ----
  // Registers a worker that said Hello from `peer` (gRPC's "ipv4:1.2.3.4:5678" form); sends it
  // Welcome through `connection` and returns its id.
  absl::StatusOr<std::string> ConnectWorker(const v1::Hello& hello, const std::string& peer,
                                            std::shared_ptr<WorkerConnection> connection);
  // Any message counts as a heartbeat; step reports and task completions drive the worker's job.
  void HandleWorkerMessage(const std::string& worker_id, const v1::WorkerMessage& msg);
  // The worker's stream ended: it is lost, and so is the job it was running.
  void DisconnectWorker(const std::string& worker_id, const std::string& why);

  // ---- RendezvousService ----
  Rendezvous* rendezvous() { return &rendezvous_; }

  // ---- Metrics (--metrics_listen; coordinator_metrics.h) ----
  // The Prometheus text of the coordinator's metrics; takes mu_ (do not call under it).
  std::string RenderMetrics() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class WorkerStatus { kIdle, kBusy, kLost };
  struct Worker {
    std::string id;
    v1::Hello hello;
    std::string host;
    std::shared_ptr<WorkerConnection> connection;  // null once lost
    WorkerStatus status = WorkerStatus::kIdle;
    // While busy: the attempt it runs or, after that attempt ended, is still winding down.
    std::string job_id;
    int attempt = 0;
    int rank = -1;
    bool draining = false;            // its job ended; waiting for its TaskDone
    int64_t release_deadline_ms = 0;  // draining: counted idle again after this
    int64_t last_heartbeat_ms = 0;
    bool drained = false;  // kLost because it said Goodbye: listed as drained
  };
  // A job attempt between PLANNING and its final state.
  struct Run {
    v1::Job job;                       // the stored record, without steps
    std::vector<std::string> workers;  // worker id by global rank
    std::vector<bool> done;            // by rank: TaskDone received (or worker lost)
    std::unique_ptr<StepAggregator> steps;
    std::unique_ptr<CheckpointAggregator> saves;
    // Recorded in the index of each checkpoint this attempt commits; made when it starts.
    std::map<std::string, std::string> checkpoint_metadata;
    int commits_in_flight = 0;       // complete saves queued or being committed
    bool finish_after_commits = false;  // every rank finished; SUCCEEDED once commits are done
    bool cancelling = false;
    std::string cancel_reason;
    int64_t cancel_deadline_ms = 0;
    // Rank failures gathered since the first (failure_settle_ms), and when to decide.
    struct Failure {
      int rank = -1;
      int64_t at_us = 0;  // when it failed, Unix microseconds
      std::string message;  // for Job.message: "rank 1 (worker-2): ..."
      v1::RankError error;  // for Job.rank_errors
    };
    std::vector<Failure> failures;
    int64_t settle_deadline_ms = 0;
  };
  // A complete save waiting for the committer thread.
  struct Commit {
    std::string job_id;
    int attempt = 0;
    std::string dir;
    int keep = 0;
    std::map<std::string, std::string> metadata;
    CompleteSave save;
  };
  // One WatchJob call's queue of live events.
  struct Watcher {
    std::deque<v1::JobEvent> events;
    bool closed = false;  // by Shutdown
  };

  // An attempt that has started (RUNNING) and whose Programs are still to be sent. Emitting a
  // Program costs time linear in the model, times the ranks: it runs off mu_ (DispatchStarted),
  // each send under it.
  struct Dispatch {
    std::string job_id;
    int attempt = 0;
    std::shared_ptr<const JobPlan> plan;
    planner::Attempt start;  // job, attempt, starting state
    bool trace = false;
    std::string rendezvous_scope;
    std::string rendezvous_ticket;
  };

  // mu_, for a call that may start jobs: when it ends, mu_ is released and then the started
  // attempts' Programs are emitted and sent (DispatchStarted), before the call returns.
  class ABSL_SCOPED_LOCKABLE SchedulingLock {
   public:
    explicit SchedulingLock(Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_) : c_(c) {
      c_->mu_.Lock();
    }
    ~SchedulingLock() ABSL_UNLOCK_FUNCTION() {
      c_->mu_.Unlock();
      c_->DispatchStarted();
    }

   private:
    Coordinator* const c_;
  };

  Coordinator(std::unique_ptr<JobStore> store, CoordinatorOptions options);
  // Emits and sends each queued attempt's Programs, rank by rank; stops an attempt that ended
  // meanwhile (its unsent ranks count as done), fails one whose Program cannot be emitted or
  // sent.
  void DispatchStarted() ABSL_LOCKS_EXCLUDED(mu_);

  int64_t Now() const { return options_.now_ms(); }
  // RESOURCE_EXHAUSTED with the figures when a rank's planned peak (its Program's arena) exceeds
  // the memory of the largest registered worker of the job's kind: it could never run. OK when
  // no such worker reports its memory.
  absl::Status CheckFitsTheWorkers(const v1::JobSpec& spec, const JobPlan& plan)
      ABSL_LOCKS_EXCLUDED(mu_);
  Worker* FindWorker(const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobEvent StateEvent(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores the job (and the event when given), then hands the event to watchers.
  void SaveJob(const v1::Job& job, const v1::JobEvent* event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Publish(const v1::JobEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the event to the attempt's record, then hands it to watchers; false (logged) when
  // the store fails, and then no watcher sees it.
  bool AppendAndPublish(int attempt, const v1::JobEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts the pending jobs that fit and updates what the others wait for.
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJobLocked(v1::Job job, const std::vector<std::string>& workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the run to a final state: stores it, drops its rendezvous scope, frees the workers that
  // are done and tells the others to cancel. Erases the run.
  // Takes the id by value: callers pass the run's own, which this erases.
  void FinishRunLocked(std::string job_id, v1::JobState state, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The attempt failed (`rank` failed or was lost; -1: no one rank): with restarts left
  // (Train.max_restarts) the job goes to RESTARTING, its ranks are told to stop, a restart event
  // names the rank, worker, host and cause, and its next attempt waits first in line; otherwise
  // FinishRunLocked(FAILED).
  void FailRunLocked(const std::string& job_id, int rank, const std::string& cause)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A rank's TaskDone (or loss) for a running attempt; a failure at `failed_at_us` (Unix
  // microseconds; 0: now), `failure` as the job's message names it, `error` as the rank's own
  // words (RankError.message).
  void RankDoneLocked(Run* run, int rank, bool ok, const std::string& failure,
                      const std::string& error = "", int64_t failed_at_us = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank's error in the run's attempt: its worker, that worker's host, the message cut.
  v1::RankError RankErrorLocked(const Run& run, int rank, int64_t at_ms,
                                const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The gathered failures decide: the earliest is the cause (FailRunLocked), the others follow;
  // all of them (bounded) become the job's rank_errors.
  void DecideFailureLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker's LogLines: stored, off mu_, when the worker runs that rank of that attempt.
  void HandleLogLines(const std::string& worker_id, const v1::LogLines& logs)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The worker is gone: its rank (if any) fails with `why`. `drained`: it left on purpose
  // (Goodbye), and is listed as drained rather than lost.
  void MarkLostLocked(Worker* worker, const std::string& why, bool drained = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps at most a bounded number of lost workers listed.
  void ForgetOldLostWorkersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWorkerLocked(Worker* worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The run's workers once it ended: those done are idle again, the others drain (told to cancel,
  // idle when they confirm or after cancel_grace_ms).
  void ReleaseWorkersLocked(const Run& run) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleStepLocked(Worker* worker, const v1::StepReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleDoneLocked(Worker* worker, const v1::TaskDone& done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleCheckpointLocked(Worker* worker, const v1::CheckpointReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The committer thread: commits queued saves in order until Shutdown.
  void CommitLoop();
  bool CommitReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return shutting_down_ || !commits_.empty();
  }
  // A commit's outcome: the CheckpointSaved event, or the job FAILED; finishes a job that was
  // waiting for it.
  void CommittedLocked(const Commit& commit, const absl::Status& status, double seconds,
                       const std::string& path) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tick's part under mu_.
  void CheckDeadlines() ABSL_LOCKS_EXCLUDED(mu_);
  // Deletes the ended jobs that retention no longer keeps, at most a batch a call, when a job
  // ended since the last call or retention_interval_ms passed (or the last batch was full).
  void ApplyRetention() ABSL_LOCKS_EXCLUDED(mu_);
  // The store's DeleteJob, then the job's trace and metric series go too; the job as it was.
  absl::StatusOr<v1::Job> DeleteEndedJob(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Drops the attempt's rendezvous scope (its keys, and its ticket with them).
  void EndRendezvousLocked(const std::string& job_id, int attempt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendCancelLocked(const Run& run, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  Rendezvous rendezvous_;
  // Its families have locks of their own; updated under mu_, rendered without it.
  CoordinatorMetrics metrics_;

  absl::Mutex mu_;
  // Written under mu_ (so the stored order is the published order); it has its own lock.
  const std::unique_ptr<JobStore> store_;
  // Written under mu_ (so spans land in the attempt they belong to); read without it.
  TraceStore traces_;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_worker_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);  // registration order
  std::vector<v1::Job> pending_ ABSL_GUARDED_BY(mu_);                  // submit order
  // Each job's plan from SubmitJob (or from Create, for the pending jobs it recovers) until the
  // job ends.
  std::map<std::string, std::shared_ptr<const JobPlan>> plans_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Run> runs_ ABSL_GUARDED_BY(mu_);               // by job id
  std::map<std::string, std::vector<std::shared_ptr<Watcher>>> watchers_ ABSL_GUARDED_BY(mu_);
  std::deque<Commit> commits_ ABSL_GUARDED_BY(mu_);  // for the committer thread, in order
  std::string committing_ ABSL_GUARDED_BY(mu_);      // the job whose commit is in progress
  std::deque<Dispatch> dispatches_ ABSL_GUARDED_BY(mu_);  // started attempts, in start order

  // Set when a job ends (retention by count may then delete one), cleared by ApplyRetention.
  std::atomic<bool> retention_due_{true};
  std::atomic<int64_t> next_retention_ms_{0};  // ApplyRetention's next check by the interval

  absl::Notification stop_ticker_;
  // When Tick last got mu_ (or Start ran); read without it.
  SteadyStamp last_tick_;
  std::thread ticker_;     // owned; joined by Shutdown
  std::thread committer_;  // owned; started by Create, joined by Shutdown
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_COORDINATOR_H_
