#include "coordinator/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint.h"
#include "common/jobspec/elastic.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/validate.h"
#include "common/status.h"
#include "coordinator/scheduler.h"
#include "coordinator/submission.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {
namespace {

std::string RendezvousScope(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

}  // namespace

Coordinator::SchedulingLock::SchedulingLock(Coordinator* c) : c_(c) { c_->mu_.Lock(); }

Coordinator::SchedulingLock::~SchedulingLock() {
  c_->mu_.Unlock();
  c_->DispatchStarted();
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(std::unique_ptr<JobStore> store,
                                                                  CoordinatorOptions options) {
  if (!options.now_ms) options.now_ms = [] { return absl::ToUnixMillis(absl::Now()); };
  if (!options.prepare_spec) options.prepare_spec = PrepareJobSpec;
  if (!options.plan) options.plan = PlanWithPlanner;
  if (!options.world_size) options.world_size = WorldSize;
  // Before this one serves anything.
  ASSIGN_OR_RETURN(Recovered recovered, RecoverJobs(store.get(), options));
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(store), std::move(options)));
  ObservedMutexLock lock(&c->mu_);
  for (size_t i = 0; i < recovered.queued.size(); ++i) {
    const v1::Job& job = recovered.queued[i];
    c->plans_[job.id()] = recovered.plans[i];
    if (job.state() == v1::RESTARTING) c->waiting_since_[job.id()] = c->Now();
    c->pending_.push_back(std::move(recovered.queued[i]));
  }
  return c;
}

Coordinator::Coordinator(std::unique_ptr<JobStore> store, CoordinatorOptions options)
    : options_(std::move(options)),
      store_(std::move(store)),
      queries_(store_.get(), options_.pages, options_.world_size),
      watchers_(options_.max_watchers_per_job, options_.max_watchers),
      writer_(store_.get(), [this](const v1::JobEvent& event) { watchers_.Publish(event); }),
      traces_(options_.trace_limits),
      profiles_(options_.cost_profiles_dir),
      committer_([this](const Commit& commit, const absl::Status& status, double seconds) {
        Committed(commit, status, seconds);
      }),
      retention_(store_.get(),
                 RetentionLimits{options_.job_retention_ms, options_.max_ended_jobs,
                                 options_.retention_interval_ms},
                 options_.now_ms, [this](const std::string& id) { return DeleteEndedJob(id); }) {
  if (absl::Status loaded = profiles_.Load(); !loaded.ok()) {
    spdlog::warn("cost profiles: {}", std::string(loaded.message()));
  }
  store_->SetWriteObserver([this] {
    if (mu_.HeldByThisThread()) {
      ++writes_under_lock_;
      spdlog::error("a job store write under the coordinator's lock");
    }
  });
  metrics_.CountAtScrape([this] { return store_->CountJobsByState(); },
                         [this] { return ListWorkers(); });
}

std::string Coordinator::RenderMetrics() { return metrics_.registry().Render(); }

Coordinator::~Coordinator() { Shutdown(); }

absl::Duration Coordinator::SinceLastTick() const { return last_tick_.Since(); }

void Coordinator::Start() {
  if (ticker_.joinable()) return;
  last_tick_.Touch();
  // Heartbeats are checked a few times per timeout, and at least every 250 ms for cancel grace.
  const int64_t period_ms = std::max<int64_t>(
      10, std::min<int64_t>({250, options_.heartbeat_interval_ms, options_.worker_timeout_ms / 4}));
  ticker_ = std::thread([this, period_ms] {
    while (!stop_ticker_.WaitForNotificationWithTimeout(absl::Milliseconds(period_ms))) Tick();
  });
}

void Coordinator::Shutdown() {
  stop_planning_ = true;  // a SubmitJob still planning returns at its next check
  {
    ObservedMutexLock lock(&mu_);
    if (!shutting_down_) {
      shutting_down_ = true;
      workers_.CloseAll(absl::UnavailableError("coordinator shutting down"));
    }
  }
  watchers_.CloseAll();
  rendezvous_.Shutdown();
  if (!stop_ticker_.HasBeenNotified()) stop_ticker_.Notify();
  if (ticker_.joinable() && ticker_.get_id() != std::this_thread::get_id()) ticker_.join();
  committer_.Stop();
  writer_.Stop();  // what was queued is stored
}

// ---- Routing ----

JobRun* Coordinator::FindRunLocked(const std::string& job_id, int attempt) {
  auto it = runs_.find(job_id);
  if (it == runs_.end() || it->second.run->job().attempt() != attempt) return nullptr;
  return it->second.run.get();
}

void Coordinator::RouteLocked(const std::string& job_id, const JobRun::Event& event) {
  auto it = runs_.find(job_id);
  if (it == runs_.end() || shutting_down_) return;
  ExecuteLocked(job_id, it->second.run->Apply(event, Now()));
}

void Coordinator::StoreLocked(const v1::Job& job, std::optional<v1::JobEvent> event) {
  writer_.Write(JobWrite{job.id(), job.attempt(), job, std::move(event)});
}

void Coordinator::ExecuteLocked(const std::string& job_id, std::vector<JobRun::Command> commands) {
  Attempt& attempt = runs_.at(job_id);
  const JobRun& run = *attempt.run;
  for (JobRun::Command& command : commands) {
    if (auto* c = std::get_if<JobRun::StoreJob>(&command)) {
      StoreLocked(c->job, std::move(c->event));
    } else if (auto* c = std::get_if<JobRun::AppendEvent>(&command)) {
      const v1::JobEvent& e = c->event;
      if (e.has_step()) metrics_.Step(run.job(), e.step());
      if (e.has_eval()) metrics_.Eval(run.job(), e.eval());
      if (e.has_saved()) metrics_.Checkpoint(run.job(), e.saved());
      if (e.has_restart()) metrics_.Restart(run.job());
      if (e.has_resize()) metrics_.Resize(run.job(), e.resize());
      writer_.Write(JobWrite{job_id, run.job().attempt(), std::nullopt, std::move(c->event)});
    } else if (auto* c = std::get_if<JobRun::SendPrograms>(&command)) {
      const v1::Job& job = run.job();
      std::vector<std::string> workers(job.workers().begin(), job.workers().end());
      if (job.spec().trace()) traces_.Begin(job_id, job.attempt(), workers);
      spdlog::info("job {}: running, ranks 0..{} on {}", job_id, run.world_size() - 1,
                   absl::StrJoin(workers, ", "));
      dispatches_.push_back(Send{job_id, job.attempt(), plans_.at(job_id),
                                 planner::Attempt{job_id, job.attempt(), c->start.step,
                                                  c->start.step_dir, c->start.optimizer_states},
                                 job.spec().trace(), attempt.rendezvous_ticket});
    } else if (auto* c = std::get_if<JobRun::CancelRanks>(&command)) {
      SendCancelLocked(run, c->ranks, c->reason);
    } else if (auto* c = std::get_if<JobRun::CommitCheckpoint>(&command)) {
      const v1::Checkpoint& spec = run.job().spec().checkpoint();
      committer_.Enqueue(Commit{job_id, run.job().attempt(), spec.dir(), spec.keep(),
                                std::move(c->metadata), std::move(c->save),
                                std::move(c->started_from)});
    } else if (auto* c = std::get_if<JobRun::Ended>(&command)) {
      EndedLocked(job_id, *c);  // the last command: the run is gone after it
      return;
    }
  }
}

void Coordinator::EndedLocked(const std::string& job_id, const JobRun::Ended& ended) {
  auto it = runs_.find(job_id);
  std::unique_ptr<JobRun> run = std::move(it->second.run);
  runs_.erase(it);
  traces_.Finish(job_id);
  const std::string scope = RendezvousScope(job_id, run->job().attempt());
  const RendezvousUsage held = rendezvous_.DropScope(scope);
  spdlog::info("rendezvous scope {} ended: held {} keys and {} bytes at most", scope, held.keys,
               held.peak_bytes);
  if (ended.next.has_value()) {
    // The next attempt waits first in line, from the newest checkpoint (AttemptStartingState),
    // once the failed attempt's complete saves are committed (ScheduleLocked).
    pending_.insert(pending_.begin(), *ended.next);
    waiting_since_[job_id] = Now();
  } else {
    plans_.erase(job_id);
    metrics_.Ended(run->job());
    retention_.MarkDue();
  }
  // Done ranks' workers are idle again; the others were told to cancel and drain.
  workers_.EndAttempt(run->Workers(ended.done_ranks), run->Workers(ended.draining_ranks),
                      ended.drain_deadline_ms);
}

void Coordinator::SendCancelLocked(const JobRun& run, const std::vector<int>& ranks,
                                   const std::string& reason) {
  v1::CoordinatorMessage msg;
  msg.mutable_cancel()->set_job_id(run.job().id());
  msg.mutable_cancel()->set_attempt(run.job().attempt());
  msg.mutable_cancel()->set_reason(reason);
  workers_.SendTo(run.Workers(ranks), msg);
}

// ---- JobService ----

absl::StatusOr<std::string> Coordinator::SubmitJob(const v1::JobSpec& spec,
                                                   const planner::StopCheck& stop) {
  const planner::StopCheck planning = PlanningStop(stop);
  // Off the lock.
  AutoParallelInputs auto_parallel;
  if (spec.mesh().auto_parallel()) auto_parallel = AutoParallelInputsFor(spec);
  ASSIGN_OR_RETURN(Submission submission,
                   PrepareSubmission(spec, options_, planning, auto_parallel));
  const v1::JobSpec& checked = submission.spec;
  RETURN_IF_ERROR(CheckFitsTheWorkers(checked, *submission.plan, planning));
  {
    ObservedMutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("coordinator is shutting down");
  }
  // Stored off the lock: once it is, a restarted coordinator would queue it.
  ASSIGN_OR_RETURN(v1::Job job,
                   store_->CreateJob(checked, Now(),
                                     submission.auto_parallel.empty()
                                         ? "submitted"
                                         : absl::StrCat("submitted; ", submission.auto_parallel)));
  SchedulingLock lock(this);
  plans_[job.id()] = std::move(submission.plan);
  spdlog::info("job {} ({}): submitted, {} ranks on {}", job.id(), checked.name(),
               submission.world_size, checked.device());
  pending_.push_back(job);
  ScheduleLocked();
  return job.id();
}

absl::StatusOr<std::string> Coordinator::SubmitJob(const v1::SubmitJobRequest& request,
                                                   const planner::StopCheck& stop) {
  ASSIGN_OR_RETURN(v1::JobSpec spec, SpecOfRequest(request, options_.roots));
  return SubmitJob(spec, stop);
}

AutoParallelInputs Coordinator::AutoParallelInputsFor(const v1::JobSpec& spec) {
  const std::string kind = DeviceKind(spec.device());
  AutoParallelInputs in;
  in.profile = profiles_.NewestOfKind(kind);
  for (const v1::WorkerInfo& w : ListWorkers()) {
    if (w.device().kind() != kind || w.state() == "lost" || w.state() == "drained") continue;
    in.host_of_slot.push_back(w.host());
    const int64_t memory = w.device().memory_bytes();
    if (memory > 0 && (in.memory_bytes == 0 || memory < in.memory_bytes)) in.memory_bytes = memory;
  }
  return in;
}

absl::Status Coordinator::CheckFitsTheWorkers(const v1::JobSpec& spec, const JobPlan& plan,
                                              const planner::StopCheck& stop) {
  const std::string kind = spec.device().empty() ? "cpu" : spec.device();
  int64_t largest = 0;
  std::string largest_id;
  {
    ObservedMutexLock lock(&mu_);
    if (const Worker* w = workers_.LargestOfKind(kind)) {
      largest = w->hello.device().memory_bytes();
      largest_id = w->id;
    }
  }
  return CheckFits(plan, kind, largest, largest_id, stop);  // off the lock: it emits Programs
}

planner::StopCheck Coordinator::PlanningStop(planner::StopCheck caller) const {
  return [this, caller = std::move(caller)]() -> absl::Status {
    if (stop_planning_) return absl::UnavailableError("the coordinator is shutting down");
    return caller ? caller() : absl::OkStatus();
  };
}

absl::StatusOr<v1::Job> Coordinator::GetJob(const v1::GetJobRequest& request) {
  RETURN_IF_ERROR(writer_.Sync());
  return queries_.GetJob(request);
}

absl::StatusOr<v1::ListJobsResponse> Coordinator::ListJobs(const v1::ListJobsRequest& request) {
  RETURN_IF_ERROR(writer_.Sync());
  return queries_.ListJobs(request);
}

absl::StatusOr<v1::GetJobLogsResponse> Coordinator::GetJobLogs(
    const v1::GetJobLogsRequest& request) {
  RETURN_IF_ERROR(writer_.Sync());
  return queries_.GetJobLogs(request);
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(const std::string& job_id,
                                               const std::string& reason) {
  const std::string why = reason.empty() ? "cancelled by the user" : reason;
  bool running = false;
  {
    SchedulingLock lock(this);
    auto pending = std::find_if(pending_.begin(), pending_.end(),
                                [&](const v1::Job& j) { return j.id() == job_id; });
    if (pending != pending_.end()) {
      v1::Job job = std::move(*pending);
      pending_.erase(pending);
      plans_.erase(job_id);
      job.set_state(v1::CANCELLED);
      job.set_message(absl::StrCat("cancelled while pending: ", why));
      job.set_end_time_ms(Now());
      waiting_since_.erase(job_id);
      StoreLocked(job, StateEventOf(job, Now()));
      retention_.MarkDue();
      spdlog::info("job {}: {}", job_id, job.message());
      ScheduleLocked();
      return job;  // as stored (a delete may follow at once)
    }
    running = runs_.count(job_id) > 0;
    if (running) {
      spdlog::info("job {}: cancelling ({})", job_id, why);
      RouteLocked(job_id, JobRun::Cancel{why});
    }
  }
  RETURN_IF_ERROR(writer_.Sync());
  ASSIGN_OR_RETURN(v1::Job job, store_->GetJob(job_id));
  if (running) return job;
  return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is already ",
                                                    v1::JobState_Name(job.state())));
}

absl::Status Coordinator::WatchJob(const std::string& job_id,
                                   const std::function<bool(const v1::JobEvent&)>& emit,
                                   const std::function<bool()>& cancelled) {
  return watchers_.Watch(job_id, &writer_, store_.get(), emit, cancelled);
}

std::vector<v1::WorkerInfo> Coordinator::ListWorkers() {
  ObservedMutexLock lock(&mu_);
  return workers_.List();
}

absl::StatusOr<v1::JobTrace> Coordinator::GetJobTrace(const std::string& job_id) {
  RETURN_IF_ERROR(writer_.Sync());
  ASSIGN_OR_RETURN(v1::Job job, store_->GetJob(job_id));
  return traces_.TraceOf(job);
}

// ---- Scheduling and dispatch ----

void Coordinator::ScheduleLocked() {
  if (shutting_down_) return;
  ResizeWaitingLocked();
  // Each pass starts jobs on disjoint workers; go again until a pass starts nothing.
  while (true) {
    std::vector<PendingJob> pending;
    for (const v1::Job& job : pending_) {
      // A restarting job waits for its failed attempt's commits, queued or in progress: its next
      // attempt starts from the newest checkpoint, which they may still make. A resized one
      // waits for its new plan.
      if (committer_.Busy(job.id()) || replanning_.count(job.id()) > 0) continue;
      const JobPlan& plan = *plans_.at(job.id());
      pending.push_back({job.id(), job.spec().device(), plan.world_size(), plan.mesh_shape()});
    }
    ScheduleDecision decision = Schedule(pending, workers_.Slots(), options_.placement);
    for (v1::Job& job : pending_) {
      auto waiting = decision.waiting.find(job.id());
      if (waiting == decision.waiting.end() || waiting->second == job.message()) continue;
      job.set_message(waiting->second);
      StoreLocked(job, StateEventOf(job, Now()));
    }
    if (decision.start.empty()) return;
    for (const JobStart& start : decision.start) {
      auto it = std::find_if(pending_.begin(), pending_.end(),
                             [&](const v1::Job& j) { return j.id() == start.job_id; });
      v1::Job job = std::move(*it);
      pending_.erase(it);
      StartJobLocked(std::move(job), start.workers_by_rank);
    }
  }
}

void Coordinator::StartJobLocked(v1::Job job, const std::vector<std::string>& workers) {
  const std::string job_id = job.id();
  waiting_since_.erase(job_id);
  std::vector<JobRun::Slot> slots;
  for (size_t r = 0; r < workers.size(); ++r) {
    Worker* w = workers_.Find(workers[r]);
    workers_.Assign(w, job_id, job.attempt(), static_cast<int>(r));
    slots.push_back({w->id, w->host});
  }
  auto run = std::make_unique<JobRun>(job, std::move(slots),
                                      JobRunConfig{options_.failure_settle_ms,
                                                   options_.cancel_grace_ms,
                                                   options_.progress_floor_ms});
  std::vector<JobRun::Command> commands = run->Start(Now());
  runs_[job_id] = Attempt{std::move(run), ""};
  ExecuteLocked(job_id, std::move(commands));
  dispatches_.push_back(StartingAttempt{std::move(job)});  // resolved once mu_ is released
}

void Coordinator::DispatchStarted() {
  while (true) {
    Dispatch next;
    {
      ObservedMutexLock lock(&mu_);
      if (dispatches_.empty()) return;
      next = std::move(dispatches_.front());
      dispatches_.pop_front();
    }
    if (const auto* start = std::get_if<StartingAttempt>(&next)) ResolveStart(*start);
    if (const auto* send = std::get_if<Send>(&next)) SendPrograms(*send);
    if (const auto* replan = std::get_if<Replan>(&next)) PlanResized(*replan);
  }
}

void Coordinator::ResolveStart(const StartingAttempt& start) {
  const v1::Job& job = start.job;
  absl::StatusOr<CheckpointLoad> load = AttemptStartingState(job);  // off mu_: it reads folders
  ObservedMutexLock lock(&mu_);
  if (FindRunLocked(job.id(), job.attempt()) == nullptr) return;  // it ended meanwhile
  auto plan = plans_.find(job.id());
  absl::StatusOr<v1::JobSpec> spec = AttemptSpec(job);  // its mesh, at its elastic size
  absl::Status ready = load.ok() ? spec.status() : load.status();
  const int64_t world = ready.ok() ? options_.world_size(*spec) : 0;
  if (ready.ok() && (plan == plans_.end() || plan->second->world_size() != world)) {
    ready = absl::InternalError(absl::StrCat("no plan of ", world, " ranks for the job"));
  }
  if (ready.ok()) {
    const v1::Mesh& mesh = spec->mesh();
    absl::StatusOr<std::string> ticket = rendezvous_.Open(
        RendezvousScope(job.id(), job.attempt()),
        RendezvousLimits::ForMesh(std::vector<int64_t>(mesh.shape().begin(), mesh.shape().end())));
    if (ticket.ok()) {
      runs_.at(job.id()).rendezvous_ticket = *std::move(ticket);
    } else {
      ready = ticket.status();
    }
  }
  if (ready.ok()) {
    RouteLocked(job.id(), JobRun::Planned{*load, plan->second->checkpoint_metadata()});
  } else {
    RouteLocked(job.id(), JobRun::PlanFailed{std::string(ready.message())});
  }
  ScheduleLocked();  // a failed plan freed its workers
}

void Coordinator::SendPrograms(const Send& d) {
  const int world = d.plan->world_size();
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<v1::Program> program = d.plan->Program(r, d.start, PlanningStop());  // off mu_
    if (program.ok() && d.trace) program->set_trace(true);
    ObservedMutexLock lock(&mu_);
    JobRun* run = FindRunLocked(d.job_id, d.attempt);
    if (run == nullptr) return;  // it ended
    // The first rank that cannot get its Program ends the attempt; the ranks already sent are
    // cancelled.
    std::optional<JobRun::Event> stop;
    if (run->cancelling()) {
      stop = JobRun::Unsent{r};  // nothing to cancel on the ranks not sent yet: they are done
    } else if (!program.ok()) {
      stop = JobRun::ProgramFailed{r, std::string(program.status().message())};
    } else {
      v1::CoordinatorMessage msg;
      *msg.mutable_assignment()->mutable_program() = *std::move(program);
      msg.mutable_assignment()->set_rendezvous_scope(RendezvousScope(d.job_id, d.attempt));
      msg.mutable_assignment()->set_rendezvous_ticket(d.rendezvous_ticket);
      Worker* w = workers_.Find(run->slot(r).worker);
      if (w == nullptr || w->connection == nullptr || !w->connection->Send(msg)) {
        stop = JobRun::SendFailed{r};
      }
    }
    if (stop.has_value()) {
      RouteLocked(d.job_id, *stop);
      ScheduleLocked();
      return;
    }
  }
}

// ---- WorkerService ----

absl::StatusOr<std::string> Coordinator::ConnectWorker(
    const v1::Hello& hello, const std::string& peer, std::shared_ptr<WorkerConnection> connection) {
  SchedulingLock lock(this);
  if (shutting_down_) return absl::UnavailableError("coordinator is shutting down");
  Worker* w = workers_.Add(hello, peer, std::move(connection), Now());
  v1::CoordinatorMessage welcome;
  welcome.mutable_welcome()->set_worker_id(w->id);
  welcome.mutable_welcome()->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  if (!w->connection->Send(welcome)) {
    workers_.Remove(w);
    return absl::UnavailableError("the worker's stream closed before Welcome");
  }
  spdlog::info("{} registered: {} {} on {} (pid {})", w->id, w->hello.device().kind(),
               w->hello.device().name(), w->host, hello.pid());
  ScheduleLocked();
  return w->id;
}

void Coordinator::HandleWorkerMessage(const std::string& worker_id, const v1::WorkerMessage& msg) {
  if (msg.has_logs()) {
    HandleLogLines(worker_id, msg.logs());
    return;
  }
  {
    SchedulingLock lock(this);
    Worker* w = workers_.Heard(worker_id, Now());
    if (w == nullptr) return;
    if (std::optional<RankEvent> e = workers_.Interpret(w, msg)) DeliverLocked(w, *e);
    if (msg.has_goodbye()) workers_.ForgetOldLost();
    ScheduleLocked();
  }
  // A worker that reports faster than the store writes waits here, before its next message is
  // read (its stream's flow control then holds its next write): the backlog, and so how long a
  // read waits in Sync, stays bounded.
  writer_.AwaitRoom();
}

void Coordinator::DeliverLocked(Worker* w, const RankEvent& e) {
  if (FindRunLocked(e.job_id, e.attempt) == nullptr) {
    // Its attempt ended: a TaskDone confirms the cancel; anything else comes too late.
    if (std::holds_alternative<JobRun::RankDone>(e.event)) {
      workers_.Release(w);
    } else if (!std::holds_alternative<JobRun::WorkerLost>(e.event)) {
      spdlog::warn("{}: ignoring a report for {} attempt {}, which ended", w->id, e.job_id,
                   e.attempt);
    }
    return;
  }
  if (const auto* step = std::get_if<JobRun::Step>(&e.event)) {
    traces_.Add(e.job_id, e.attempt, step->report.rank(), step->report.spans());
  }
  RouteLocked(e.job_id, e.event);
}

void Coordinator::HandleLogLines(const std::string& worker_id, const v1::LogLines& logs) {
  {
    ObservedMutexLock lock(&mu_);
    Worker* w = workers_.Heard(worker_id, Now());
    if (w == nullptr || !workers_.MayLog(*w, logs)) return;
  }
  // Off mu_: the store has its own lock and log lines need no order with the job's events (a
  // worker's messages are handled one at a time, so its lines still precede its TaskDone).
  const absl::Status s = store_->AppendLogLines(logs.job_id(), logs.attempt(), logs.rank(),
                                                logs.lines(), options_.max_log_lines);
  // NOT_FOUND: the job was deleted while this worker wound its rank down.
  if (!s.ok() && !absl::IsNotFound(s)) spdlog::error("{}: {}", worker_id, s.ToString());
}

void Coordinator::DisconnectWorker(const std::string& worker_id, const std::string& why) {
  SchedulingLock lock(this);
  Worker* w = workers_.Find(worker_id);
  if (w == nullptr || w->status == WorkerRegistry::Status::kLost) return;
  LostLocked(w, why);
  workers_.ForgetOldLost();
  ScheduleLocked();
}

void Coordinator::LostLocked(Worker* w, const std::string& why) {
  if (std::optional<RankEvent> e = workers_.Lose(w, why, /*drained=*/false)) DeliverLocked(w, *e);
}

// ---- Checkpoints ----

void Coordinator::Committed(const Commit& commit, const absl::Status& status, double seconds) {
  SchedulingLock lock(this);
  if (shutting_down_) return;
  if (const JobRun* run = FindRunLocked(commit.job_id, commit.attempt)) {
    JobRun::Committed committed{commit.save.step, status, {}, GrowToLocked(run->job())};
    committed.saved.set_step(commit.save.step);
    committed.saved.set_bytes(commit.save.bytes);
    committed.saved.set_seconds(commit.save.write_seconds + seconds);
    committed.saved.set_path(checkpoint::StepDir(commit.dir, commit.save.step));
    RouteLocked(commit.job_id, committed);
  }  // else the attempt ended meanwhile; its events are final
  ScheduleLocked();  // a restarting job may have waited for this commit
}

// ---- Deadlines and retention ----

void Coordinator::Tick() {
  CheckDeadlines();
  ApplyRetention();
}

void Coordinator::CheckDeadlines() {
  SchedulingLock lock(this);
  if (shutting_down_) return;
  last_tick_.Touch();
  const int64_t now = Now();
  for (Worker* w : workers_.Silent(now, options_.worker_timeout_ms)) {
    LostLocked(w, absl::StrCat("no heartbeat for ", now - w->last_heartbeat_ms, " ms (timeout ",
                               options_.worker_timeout_ms, " ms)"));
  }
  for (Worker* w : workers_.DrainOver(now)) {
    spdlog::warn("{}: did not confirm the end of {} within {} ms; counting it idle", w->id,
                 w->job_id, options_.cancel_grace_ms);
    workers_.Release(w);
  }
  std::vector<std::string> running;
  for (const auto& [job_id, attempt] : runs_) running.push_back(job_id);
  for (const std::string& job_id : running) RouteLocked(job_id, JobRun::Tick{});
  workers_.ForgetOldLost();
  ScheduleLocked();
}

void Coordinator::ApplyRetention() {
  {
    ObservedMutexLock lock(&mu_);
    if (shutting_down_) return;
  }
  // The ended jobs' final states are stored first; while the store fails, nothing is deleted.
  if (!writer_.Sync().ok()) return;
  retention_.Apply();
}

absl::StatusOr<v1::Job> Coordinator::DeleteJob(const std::string& job_id) {
  RETURN_IF_ERROR(writer_.Sync());
  absl::StatusOr<v1::Job> job = DeleteEndedJob(job_id);
  if (absl::IsFailedPrecondition(job.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        job.status().message(), "; cancel it first (weftctl cancel ", job_id, ")"));
  }
  if (job.ok()) spdlog::info("job {}: deleted ({})", job_id, v1::JobState_Name(job->state()));
  return job;
}

absl::StatusOr<v1::Job> Coordinator::DeleteEndedJob(const std::string& job_id) {
  ASSIGN_OR_RETURN(v1::Job job, store_->DeleteJob(job_id));
  // The store had the job final, which the thread that ended it queued under mu_ after it told
  // the trace store and the metrics: once mu_ is ours, they were told, and forgetting is last.
  { ObservedMutexLock lock(&mu_); }
  traces_.Forget(job.id());
  metrics_.Forget(job);
  return job;
}

}  // namespace weft::coordinator
