// The coordinator's core: JobService, WorkerService and RendezvousService logic with no
// transport; the gRPC adapters in rpc/ only translate calls into these methods, so the whole life
// of a job is tested in one process without sockets.
//
// It is a thin router. Each attempt of a job is a JobRun (job_run.h), a table from events to
// commands; the workers are a WorkerRegistry (worker_registry.h), which turns their stream
// messages into (job, attempt, rank) events. Under mu_ the Coordinator routes each event to its
// JobRun and executes the commands: record and event writes are queued to the StoreWriter (one
// thread, grouped transactions: no disk write runs under mu_), cancels go to the workers' streams,
// complete saves to the committer thread, started attempts' starting states (checkpoint lookups)
// and Programs are resolved and emitted off mu_ (DispatchStarted). Reads of the store first sync
// the writer, so a caller reads its own writes; watchers see an event only once it is stored.
//
// Scheduling runs after every change that can free or add workers or jobs: jobs start in submit
// order on WorldSize(spec) idle workers of the spec's device kind, ranks assigned in worker
// registration order. Tick() (called by the background thread Start() launches, or by tests with
// a fake clock) finds workers whose heartbeats stopped, cancellations whose grace ran out and
// failures that settled.
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
#include <set>
#include <string>
#include <thread>
#include <variant>
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
#include "coordinator/checkpoint_committer.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/coordinator_options.h"
#include "coordinator/cost_profiles.h"
#include "coordinator/job_plan.h"
#include "coordinator/job_queries.h"
#include "coordinator/job_run.h"
#include "coordinator/job_store.h"
#include "coordinator/job_watchers.h"
#include "coordinator/observed_mutex.h"
#include "coordinator/rendezvous.h"
#include "coordinator/retention.h"
#include "coordinator/store_writer.h"
#include "coordinator/submission.h"
#include "coordinator/trace_store.h"
#include "coordinator/worker_connection.h"
#include "coordinator/worker_registry.h"
#include "planner/planner.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

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
  // Ends every worker stream and watch, wakes rendezvous waiters, stops the background thread;
  // SubmitJobs still planning stop at their next StopCheck, UNAVAILABLE. Running jobs stay
  // RUNNING in the store (the next start restarts them). Idempotent.
  void Shutdown();
  // Heartbeat timeouts and cancel deadlines as of now_ms(), then a scheduling pass; then, when
  // due, retention (ApplyRetention).
  void Tick();
  // How long ago Tick last got the lock (or Start ran), on the steady clock whatever now_ms
  // says. The daemon's systemd watchdog pings only while this stays short: the background thread
  // ticks every 250 ms at most, so a long gap means the thread or mu_ is stuck.
  absl::Duration SinceLastTick() const;
  // OK, or why job records wait to be stored (the job store's disk is full): they are retried
  // until stored, reads answer this error meanwhile, and health says NOT_SERVING.
  absl::Status StoreHealth() const { return writer_.health(); }

  // ---- JobService ----
  // Validates and dry-run plans a copy of `spec`; any error is returned and nothing is stored.
  // `stop` (the call's deadline and cancellation; planner/stop.h) is polled while it plans and
  // checks the plan's memory against the workers', and so is Shutdown: the status it gives is
  // returned, "planning the job: ..." saying what it was doing.
  absl::StatusOr<std::string> SubmitJob(const v1::JobSpec& spec,
                                        const planner::StopCheck& stop = {});
  // The request's spec, or its spec_yaml read as weftctl reads a spec file (ParseJobSpecYaml),
  // then SubmitJob(spec). A spec_yaml's relative paths are resolved against spec_dir when given
  // (the client sees the cluster's files at the same paths), else as the cluster sees them:
  // data paths, init_from and model.config_file against options.roots.data, checkpoint.dir
  // against options.roots.checkpoint. A model.config_file is read only under roots.data.
  // INVALID_ARGUMENT for both spec and spec_yaml, a spec_yaml over 1 MiB, a spec_dir that is not
  // absolute (or given without spec_yaml), a relative path with no root to resolve it against
  // (naming the field and the flag), or a YAML error (naming the field and the line).
  absl::StatusOr<std::string> SubmitJob(const v1::SubmitJobRequest& request,
                                        const planner::StopCheck& stop = {});
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
  // The cost profiles held (one per worker kind and host), and storing one (cost_profiles.h):
  // what `mesh: {auto: true}` jobs are searched with. INVALID_ARGUMENT names a bad field.
  std::vector<v1::CostProfile> ListCostProfiles() const { return profiles_.List(); }
  absl::Status PutCostProfile(const v1::CostProfile& profile) { return profiles_.Put(profile); }
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

  // Store writes made by a thread that held mu_: none, by design (tests and the load benchmark
  // check it).
  int64_t store_writes_under_lock() const { return writes_under_lock_.load(); }
  // The longest any thread held the coordinator's lock so far.
  absl::Duration longest_lock_hold() const { return mu_.longest_hold(); }
  // The store writer's groups (transactions) so far, and the most writes one held.
  int64_t store_groups_written() const { return writer_.groups_written(); }
  int64_t store_largest_group() const { return writer_.largest_group(); }

 private:
  using Worker = WorkerRegistry::Worker;
  // An attempt between PLANNING and its end, and what its Programs need once it is planned.
  struct Attempt {
    std::unique_ptr<JobRun> run;
    std::string rendezvous_ticket;  // only its workers get it
  };
  // A started attempt whose starting state (the newest checkpoint: a folder lookup that removes
  // staging folders) is resolved off mu_ (DispatchStarted).
  struct StartingAttempt {
    v1::Job job;
  };
  // A planned attempt whose Programs are still to be sent. Emitting a Program costs time linear
  // in the model, times the ranks: it runs off mu_ (DispatchStarted), each send under it.
  struct Send {
    std::string job_id;
    int attempt = 0;
    std::shared_ptr<const JobPlan> plan;
    planner::Attempt start;  // job, attempt, starting state
    bool trace = false;
    std::string rendezvous_ticket;
  };
  // A pending job at a new elastic size (Job.elastic_size), planned again off mu_
  // (DispatchStarted) before it may start; `planned_size` is the size its current plan is for.
  struct Replan {
    v1::Job job;
    int planned_size = 0;
  };
  using Dispatch = std::variant<StartingAttempt, Send, Replan>;

  // mu_, for a call that may start jobs: when it ends, mu_ is released and then the started
  // attempts are resolved and their Programs emitted and sent (DispatchStarted), before the call
  // returns.
  class ABSL_SCOPED_LOCKABLE SchedulingLock {
   public:
    explicit SchedulingLock(Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_);
    ~SchedulingLock() ABSL_UNLOCK_FUNCTION();

   private:
    Coordinator* const c_;
  };

  Coordinator(std::unique_ptr<JobStore> store, CoordinatorOptions options);
  int64_t Now() const { return options_.now_ms(); }

  // What a `mesh: {auto: true}` spec is searched over: the registered workers of its kind (lost
  // and drained ones aside), the least memory among them, the newest profile of the kind.
  AutoParallelInputs AutoParallelInputsFor(const v1::JobSpec& spec) ABSL_LOCKS_EXCLUDED(mu_);
  // CheckFits against the largest registered worker of the spec's device kind, one rank per
  // role (JobPlan::RoleRanks), polling `stop`.
  absl::Status CheckFitsTheWorkers(const v1::JobSpec& spec, const JobPlan& plan,
                                   const planner::StopCheck& stop) ABSL_LOCKS_EXCLUDED(mu_);
  // `caller`'s check, and UNAVAILABLE once Shutdown began: what planning off mu_ polls.
  planner::StopCheck PlanningStop(planner::StopCheck caller = {}) const;
  // Starts the pending jobs that fit and updates what the others wait for.
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJobLocked(v1::Job job, const std::vector<std::string>& workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resolves the starting states of started attempts and emits and sends their Programs, off mu_.
  void DispatchStarted() ABSL_LOCKS_EXCLUDED(mu_);
  void ResolveStart(const StartingAttempt& start) ABSL_LOCKS_EXCLUDED(mu_);
  void SendPrograms(const Send& send) ABSL_LOCKS_EXCLUDED(mu_);

  // Train.elastic (coordinator_elastic.cc). Under mu_, before scheduling: a job waiting to
  // restart past its wait_s shrinks (ShrinkTo), and a job whose size changed (a shrink, a grow)
  // is queued to be planned again.
  void ResizeWaitingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Plans the job at its new size and checks it fits, off mu_; then it may start or, when it
  // cannot run at that size, it goes back to its planned size and waits on.
  void PlanResized(const Replan& replan) ABSL_LOCKS_EXCLUDED(mu_);
  // The size a committed checkpoint lets the running job grow to (GrowTo), 0 for none.
  int GrowToLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The live attempt, or null when it ended (or another attempt runs).
  JobRun* FindRunLocked(const std::string& job_id, int attempt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the event to the job's live attempt and executes its commands.
  void RouteLocked(const std::string& job_id, const JobRun::Event& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExecuteLocked(const std::string& job_id, std::vector<JobRun::Command> commands)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndedLocked(const std::string& job_id, const JobRun::Ended& ended)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the record (and the event) for the store writer, which publishes the event once stored.
  void StoreLocked(const v1::Job& job, std::optional<v1::JobEvent> event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendCancelLocked(const JobRun& run, const std::vector<int>& ranks,
                        const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A worker's LogLines: stored, off mu_, when the worker runs that rank of that attempt.
  void HandleLogLines(const std::string& worker_id, const v1::LogLines& logs)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A worker's event for its rank: routed to the attempt when it is live.
  void DeliverLocked(Worker* worker, const RankEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker is gone (no heartbeat, its stream ended): its rank (if any) fails with `why`.
  void LostLocked(Worker* worker, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A commit's outcome, from the committer thread: routed to its attempt when that is live.
  void Committed(const Commit& commit, const absl::Status& status, double seconds)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Tick's part under mu_.
  void CheckDeadlines() ABSL_LOCKS_EXCLUDED(mu_);
  // Retention's pass (retention.h), once the ended jobs' records are stored.
  void ApplyRetention() ABSL_LOCKS_EXCLUDED(mu_);
  // The store's DeleteJob, then the job's trace and metric series go too; the job as it was.
  absl::StatusOr<v1::Job> DeleteEndedJob(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);

  const CoordinatorOptions options_;
  Rendezvous rendezvous_;
  // Its families have locks of their own; updated under mu_, rendered without it.
  CoordinatorMetrics metrics_;

  ObservedMutex mu_;
  // Read without mu_ (it has its own lock); written only by writer_ and off mu_.
  const std::unique_ptr<JobStore> store_;
  const JobQueries queries_;
  // Its own lock, no I/O under it: writer_ publishes, WatchJob streams take.
  JobWatchers watchers_;
  // The one writer of job records and events; destroyed (drained) before store_.
  StoreWriter writer_;
  // Written under mu_ (so spans land in the attempt they belong to); read without it.
  TraceStore traces_;
  CostProfiles profiles_;  // options_.cost_profiles_dir; thread-safe on its own
  // Complete saves, committed in order on its thread; stopped by Shutdown.
  CheckpointCommitter committer_;
  // Store writes made by a thread that held mu_ (tests expect none).
  std::atomic<int64_t> writes_under_lock_{0};
  // Set first by Shutdown; planning off mu_ reads it (PlanningStop).
  std::atomic<bool> stop_planning_{false};

  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Job> pending_ ABSL_GUARDED_BY(mu_);  // submit order
  // Each job's plan from SubmitJob (or from Create, for the pending jobs it recovers) until the
  // job ends.
  std::map<std::string, std::shared_ptr<const JobPlan>> plans_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Attempt> runs_ ABSL_GUARDED_BY(mu_);  // by job id
  // Started attempts to resolve and planned ones to send, in order (DispatchStarted).
  std::deque<Dispatch> dispatches_ ABSL_GUARDED_BY(mu_);
  // Train.elastic: since when each job queued RESTARTING has waited (ShrinkTo), and the pending
  // jobs being planned again at a new size (the scheduler skips them).
  std::map<std::string, int64_t> waiting_since_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> replanning_ ABSL_GUARDED_BY(mu_);

  // Told when a job ends (retention by count may then delete one).
  Retention retention_;

  absl::Notification stop_ticker_;
  // When Tick last got mu_ (or Start ran); read without it.
  SteadyStamp last_tick_;
  std::thread ticker_;     // owned; joined by Shutdown
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_COORDINATOR_H_
