#include "coordinator/coordinator.h"

#include <algorithm>
#include <filesystem>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpoint.h"
#include "common/crash_point.h"
#include "common/job_state.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/starting_state.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml.h"
#include "common/status.h"
#include "common/utf8.h"
#include "planner/arch/hf_export.h"
#include "planner/planner.h"
#include "planner/submit/submit.h"
#include "coordinator/scheduler.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {
namespace {

constexpr char kRestartMessage[] =
    "restarting: the coordinator restarted while the job ran; it resumes from its newest "
    "checkpoint once enough workers are connected";
// Lost workers stay listed (ListWorkers) up to this many, oldest forgotten first.
constexpr int kMaxLostWorkersListed = 256;
// How often a watcher looks at its caller's cancellation flag.
constexpr absl::Duration kWatchPollInterval = absl::Milliseconds(100);

// Where an attempt starts from: a restarted one (attempt > 0; attempts count from 0) from the newest checkpoint this job
// committed in its checkpoint.dir, optimizer states and step counter included; otherwise (and
// when it committed none: a folder may hold an earlier job's) as the spec says.
absl::StatusOr<CheckpointLoad> AttemptStartingState(const v1::Job& job) {
  const std::string& dir = job.spec().checkpoint().dir();
  if (job.attempt() > 0 && !dir.empty()) {
    absl::StatusOr<std::string> latest = checkpoint::FindLatest(dir);
    absl::StatusOr<checkpoint::CheckpointReader> reader =
        latest.ok() ? checkpoint::CheckpointReader::Open(*latest)
                    : absl::StatusOr<checkpoint::CheckpointReader>(latest.status());
    if (reader.ok()) {
      auto owner = reader->index().metadata.find("job_id");
      if (owner != reader->index().metadata.end() && owner->second == job.id()) {
        v1::JobSpec resumed = job.spec();
        resumed.mutable_train()->set_resume(true);
        return ResolveCheckpointLoad(resumed);
      }
    }
  }
  return ResolveCheckpointLoad(job.spec());
}

std::string RendezvousScope(const std::string& job_id, int attempt) {
  return absl::StrCat(job_id, "/", attempt);
}

// "ipv4:127.0.0.1:5000" -> "127.0.0.1", "ipv6:[::1]:5000" -> "::1".
std::string HostOfPeer(const std::string& peer) {
  std::string addr = peer;
  size_t colon = addr.find(':');
  if (colon != std::string::npos && (addr.rfind("ipv4", 0) == 0 || addr.rfind("ipv6", 0) == 0)) {
    addr = addr.substr(colon + 1);
  }
  if (!addr.empty() && addr[0] == '[') {
    size_t end = addr.find(']');
    return end == std::string::npos ? addr : addr.substr(1, end - 1);
  }
  size_t last = addr.rfind(':');
  return last == std::string::npos ? addr : addr.substr(0, last);
}

absl::Status DefaultPrepareSpec(v1::JobSpec* spec) { return PrepareJobSpec(spec); }

// The size of a page a request asks for: `asked`, the default when 0, at most the bound (a
// larger request gets a page of the bound, as Google's API guide AIP-158 has it).
absl::StatusOr<int> PageSize(int asked, int default_size, int max_size, const char* field) {
  if (asked < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", asked, " is negative (0 asks for ", default_size, ", at most ", max_size,
        " are given)"));
  }
  return asked == 0 ? default_size : std::min(asked, max_size);
}

// GetJob's steps_page_token: the last step of the page before, in decimal.
std::string StepsPageToken(int64_t after_step) { return absl::StrCat(after_step); }

// GetJobLogs' page_token: the position of the page before's last line, "attempt:time:rank:seq".
std::string LogsPageToken(const v1::JobLogLine& last) {
  return absl::StrCat(last.attempt(), ":", last.time_ms(), ":", last.rank(), ":", last.seq());
}

absl::StatusOr<LogLinePosition> ParseLogsPageToken(const std::string& token) {
  std::vector<std::string> parts = absl::StrSplit(token, ':');
  LogLinePosition after;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &after.attempt) ||
      !absl::SimpleAtoi(parts[1], &after.time_ms) || !absl::SimpleAtoi(parts[2], &after.rank) ||
      !absl::SimpleAtoi(parts[3], &after.seq) || after.attempt < 0 || after.rank < 0 ||
      after.seq <= 0) {
    return absl::InvalidArgumentError(
        "page_token: not a next_page_token of GetJobLogs (leave it empty for the first page)");
  }
  return after;
}

// A worker's TaskDone message says "rank R: <error>" (Task::Run); a RankError names the rank
// already.
std::string WithoutRankPrefix(const std::string& message, int rank) {
  const std::string prefix = absl::StrCat("rank ", rank, ": ");
  return absl::StartsWith(message, prefix) ? message.substr(prefix.size()) : message;
}

absl::Status BadStepsPageToken() {
  return absl::InvalidArgumentError(
      "steps_page_token: not a next_steps_page_token of GetJob (leave it empty for the first "
      "page)");
}

// The planner's Plan as the coordinator keeps it, with what its checkpoints record for
// `weftctl ckpt export --format hf` (planner/arch/hf_export.h), computed once with the plan.
class PlannerJobPlan final : public JobPlan {
 public:
  PlannerJobPlan(std::shared_ptr<const planner::Plan> plan, planner::HfExportMetadata hf_export)
      : plan_(std::move(plan)), hf_export_(std::move(hf_export)) {}
  int world_size() const override { return plan_->world_size(); }
  absl::StatusOr<v1::Program> Program(int rank, const planner::Attempt& attempt) const override {
    return plan_->Program(rank, attempt);
  }
  std::map<std::string, std::string> checkpoint_metadata() const override { return hf_export_; }

 private:
  const std::shared_ptr<const planner::Plan> plan_;
  const planner::HfExportMetadata hf_export_;
};

absl::StatusOr<std::shared_ptr<const JobPlan>> DefaultPlan(const v1::JobSpec& spec) {
  ASSIGN_OR_RETURN(std::shared_ptr<const planner::Plan> plan, planner::PlanPrepared(spec, "", 0));
  ASSIGN_OR_RETURN(planner::HfExportMetadata hf_export, planner::HfExportMetadataOf(spec));
  return std::shared_ptr<const JobPlan>(
      std::make_shared<PlannerJobPlan>(std::move(plan), std::move(hf_export)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(std::unique_ptr<JobStore> store,
                                                                  CoordinatorOptions options) {
  if (!options.now_ms) options.now_ms = [] { return absl::ToUnixMillis(absl::Now()); };
  if (!options.prepare_spec) options.prepare_spec = DefaultPrepareSpec;
  if (!options.plan) options.plan = DefaultPlan;
  if (!options.world_size) options.world_size = WorldSize;

  // Jobs that were running restart first, in submit order (their workers reconnect), then the
  // pending ones.
  ASSIGN_OR_RETURN(std::vector<v1::Job> pending,
                   store->RestartInterruptedJobs(options.now_ms(), kRestartMessage));
  for (const v1::Job& job : pending) {
    spdlog::warn("job {}: RESTARTING as attempt {} (the coordinator restarted)", job.id(),
                 job.attempt());
  }
  ASSIGN_OR_RETURN(std::vector<v1::Job> queued, store->ListJobsInState(v1::PENDING));
  for (v1::Job& job : queued) pending.push_back(std::move(job));
  // A plan lives in memory only: the pending jobs of a previous coordinator are planned again,
  // before this one serves anything.
  std::vector<absl::StatusOr<std::shared_ptr<const JobPlan>>> plans;
  for (const v1::Job& job : pending) plans.push_back(options.plan(job.spec()));

  std::unique_ptr<Coordinator> c(new Coordinator(std::move(store), std::move(options)));
  c->committer_ = std::thread([coordinator = c.get()] { coordinator->CommitLoop(); });
  absl::MutexLock lock(&c->mu_);
  if (!pending.empty()) spdlog::info("{} job(s) queued again", pending.size());
  for (size_t i = 0; i < pending.size(); ++i) {
    v1::Job& job = pending[i];
    if (!plans[i].ok()) {
      job.set_state(v1::FAILED);
      job.set_message(absl::StrCat("planning failed after a coordinator restart: ",
                                   plans[i].status().message()));
      job.set_end_time_ms(c->Now());
      v1::JobEvent event = c->StateEvent(job);
      c->SaveJob(job, &event);
      continue;
    }
    c->plans_[job.id()] = *std::move(plans[i]);
    c->pending_.push_back(std::move(job));
  }
  return c;
}

Coordinator::Coordinator(std::unique_ptr<JobStore> store, CoordinatorOptions options)
    : options_(std::move(options)), store_(std::move(store)), traces_(options_.trace_limits) {
  // Jobs and workers are counted at scrape time: every state is listed, 0 included.
  metrics_.registry().AddCollector([this] {
    absl::StatusOr<std::map<v1::JobState, int64_t>> counts = store_->CountJobsByState();
    if (!counts.ok()) return;
    for (int s = v1::PENDING; s <= v1::JobState_MAX; ++s) {
      if (!v1::JobState_IsValid(s)) continue;
      auto it = counts->find(static_cast<v1::JobState>(s));
      metrics_.jobs()->Set({v1::JobState_Name(s)}, it == counts->end() ? 0 : it->second);
    }
  });
  metrics_.registry().AddCollector([this] {
    std::map<LabelValues, int> counts;
    for (const v1::WorkerInfo& w : ListWorkers()) counts[{w.state(), w.device().kind()}]++;
    metrics_.workers()->Clear();
    for (const auto& [labels, n] : counts) metrics_.workers()->Set(labels, n);
  });
}

std::string Coordinator::RenderMetrics() { return metrics_.registry().Render(); }

Coordinator::~Coordinator() { Shutdown(); }

absl::Duration Coordinator::SinceLastTick() const {
  return last_tick_.Since();
}

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
  {
    absl::MutexLock lock(&mu_);
    if (!shutting_down_) {
      shutting_down_ = true;
      for (auto& w : workers_) {
        if (w->connection != nullptr) w->connection->Close(absl::UnavailableError("coordinator shutting down"));
      }
      for (auto& [job_id, list] : watchers_) {
        for (auto& watcher : list) watcher->closed = true;
      }
    }
  }
  rendezvous_.Shutdown();
  if (!stop_ticker_.HasBeenNotified()) stop_ticker_.Notify();
  if (ticker_.joinable() && ticker_.get_id() != std::this_thread::get_id()) ticker_.join();
  if (committer_.joinable() && committer_.get_id() != std::this_thread::get_id()) {
    committer_.join();
  }
}

Coordinator::Worker* Coordinator::FindWorker(const std::string& worker_id) {
  for (auto& w : workers_) {
    if (w->id == worker_id) return w.get();
  }
  return nullptr;
}

v1::JobEvent Coordinator::StateEvent(const v1::Job& job) {
  v1::JobEvent event;
  event.set_job_id(job.id());
  event.set_time_ms(Now());
  event.set_state(job.state());
  event.set_message(job.message());
  return event;
}

void Coordinator::SaveJob(const v1::Job& job, const v1::JobEvent* event) {
  absl::Status s = store_->UpdateJob(job, event);
  if (!s.ok()) {
    // The in-memory state moves on (workers must still be freed); the record is stale.
    spdlog::error("job {}: {}", job.id(), s.ToString());
    return;
  }
  if (event != nullptr) Publish(*event);
}

bool Coordinator::AppendAndPublish(int attempt, const v1::JobEvent& event) {
  absl::Status s = store_->AppendEvent(event.job_id(), attempt, event);
  if (!s.ok()) {
    spdlog::error("job {}: {}", event.job_id(), s.ToString());
    return false;
  }
  Publish(event);
  return true;
}

void Coordinator::Publish(const v1::JobEvent& event) {
  auto it = watchers_.find(event.job_id());
  if (it == watchers_.end()) return;
  for (auto& watcher : it->second) watcher->events.push_back(event);
  if (event.event_case() == v1::JobEvent::kState && IsFinalState(event.state())) {
    watchers_.erase(it);  // each watcher ends after this event
  }
}

// ---- JobService ----

absl::StatusOr<std::string> Coordinator::SubmitJob(const v1::JobSpec& spec) {
  v1::JobSpec checked = spec;
  ApplyJobSpecDefaults(&checked);  // also when prepare_spec (a test's) does not
  RETURN_IF_ERROR(CheckSpecPaths(checked, options_.roots));  // before any file is opened
  RETURN_IF_ERROR(options_.prepare_spec(&checked));
  const int64_t world_size = options_.world_size(checked);
  if (world_size > options_.max_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh: ", world_size, " ranks; this coordinator plans at most ", options_.max_ranks,
        " (--max_ranks)"));
  }
  // Planned once, here, off the lock: its attempts only emit each rank's Program from it.
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = options_.plan(checked);
  if (!plan.ok()) return Annotate(plan.status(), "planning the job");
  if ((*plan)->world_size() != world_size) {
    return absl::InternalError(absl::StrCat("planning the job: the planner made ",
                                            (*plan)->world_size(), " ranks for ", world_size));
  }

  RETURN_IF_ERROR(CheckFitsTheWorkers(checked, **plan));

  SchedulingLock lock(this);
  if (shutting_down_) return absl::UnavailableError("coordinator is shutting down");
  ASSIGN_OR_RETURN(v1::Job job, store_->CreateJob(checked, Now(), "submitted"));
  plans_[job.id()] = *std::move(plan);
  spdlog::info("job {} ({}): submitted, {} ranks on {}", job.id(), checked.name(), world_size,
               checked.device());
  pending_.push_back(job);
  ScheduleLocked();
  return job.id();
}

namespace {

// A path of a spec_yaml after its relative paths were resolved (against spec_dir, or the roots):
// one still relative had no root to resolve against.
absl::Status CheckResolved(absl::string_view field, const std::string& path,
                           absl::string_view root) {
  if (std::filesystem::path(path).is_absolute()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": \"", path, "\" is relative, and this coordinator has no --", root,
      "_root to resolve it against: name it as an absolute path, as the cluster's machines see "
      "it, or resolve it on the client (weftctl submit --check-local-files; a gRPC client sends "
      "spec_dir, the folder to resolve it against)"));
}

}  // namespace

absl::StatusOr<std::string> Coordinator::SubmitJob(const v1::SubmitJobRequest& request) {
  if (request.spec_yaml().empty()) {
    if (!request.spec_dir().empty()) {
      return absl::InvalidArgumentError("spec_dir: only with spec_yaml");
    }
    return SubmitJob(request.spec());
  }
  if (request.has_spec()) {
    return absl::InvalidArgumentError("spec_yaml: give the job as spec or as spec_yaml, not both");
  }
  if (request.spec_yaml().size() > kMaxJobSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat("spec_yaml: ", request.spec_yaml().size(),
                                                   " bytes; at most ", kMaxJobSpecBytes,
                                                   " (1 MiB)"));
  }
  JobSpecYamlOptions reading;
  std::string base_dir;
  if (!request.spec_dir().empty()) {
    // A relative spec_dir would resolve against wherever the coordinator runs.
    if (!std::filesystem::path(request.spec_dir()).is_absolute()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec_dir: \"", request.spec_dir(),
          "\" must be the absolute folder the spec_yaml's relative paths are resolved against"));
    }
    base_dir = request.spec_dir();
  } else {
    // Paths as the cluster sees them: relative ones under its roots.
    base_dir = options_.roots.data;
    reading.checkpoint_base_dir = options_.roots.checkpoint;
  }
  reading.before_reading = [this](absl::string_view field, const std::string& path) {
    RETURN_IF_ERROR(CheckResolved(field, path, "data"));
    return CheckDataFile(path, field, options_.roots);
  };
  ASSIGN_OR_RETURN(v1::JobSpec spec, ParseJobSpecYaml(request.spec_yaml(), base_dir, reading));
  for (const auto& [field, path, root] :
       std::initializer_list<std::tuple<const char*, const std::string&, const char*>>{
           {"data.input", spec.data().input(), "data"},
           {"data.label", spec.data().label(), "data"},
           {"data.path", spec.data().path(), "data"},
           {"eval.data.input", spec.eval().data().input(), "data"},
           {"eval.data.label", spec.eval().data().label(), "data"},
           {"eval.data.path", spec.eval().data().path(), "data"},
           {"init_from", spec.init_from(), "data"},
           {"checkpoint.dir", spec.checkpoint().dir(), "checkpoint"}}) {
    if (!path.empty()) RETURN_IF_ERROR(CheckResolved(field, path, root));
  }
  return SubmitJob(spec);
}

absl::Status Coordinator::CheckFitsTheWorkers(const v1::JobSpec& spec, const JobPlan& plan) {
  const std::string kind = spec.device().empty() ? "cpu" : spec.device();
  int64_t largest = 0;
  std::string largest_id;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& w : workers_) {
      if (w->status == WorkerStatus::kLost || w->hello.device().kind() != kind) continue;
      if (w->hello.device().memory_bytes() > largest) {
        largest = w->hello.device().memory_bytes();
        largest_id = w->id;
      }
    }
  }
  if (largest <= 0) return absl::OkStatus();  // no worker of the kind says its memory yet
  // Each rank's planned peak is its Program's arena (what its allocator holds), emitted off the
  // lock; the first rank that cannot fit is refused.
  for (int r = 0; r < plan.world_size(); ++r) {
    absl::StatusOr<v1::Program> program = plan.Program(r, planner::Attempt{});
    if (!program.ok()) return Annotate(program.status(), "planning the job");
    if (program->arena_bytes() > largest) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rank ", r, " needs ", absl::StrFormat("%.2f", program->arena_bytes() / 1073741824.0),
          " GiB at its planned peak (`weftctl plan` shows it by role), more than the ",
          absl::StrFormat("%.2f", largest / 1073741824.0), " GiB of the largest registered ",
          kind, " worker (", largest_id, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> Coordinator::GetJob(const v1::GetJobRequest& request) {
  const PageLimits& limits = options_.pages;
  ASSIGN_OR_RETURN(const int page_size,
                   PageSize(request.steps_page_size(), limits.steps_default, limits.steps_max,
                            "steps_page_size"));
  int64_t after_step = 0;
  if (!request.steps_page_token().empty() &&
      (!absl::SimpleAtoi(request.steps_page_token(), &after_step) || after_step <= 0)) {
    return BadStepsPageToken();
  }
  ASSIGN_OR_RETURN(JobStepsPage page,
                   store_->GetJobSteps(request.job_id(), after_step, page_size));
  if (page.next_after_step > 0) {
    page.job.set_next_steps_page_token(StepsPageToken(page.next_after_step));
  }
  return std::move(page.job);
}

absl::StatusOr<v1::ListJobsResponse> Coordinator::ListJobs(const v1::ListJobsRequest& request) {
  const PageLimits& limits = options_.pages;
  ASSIGN_OR_RETURN(const int page_size, PageSize(request.page_size(), limits.jobs_default,
                                                 limits.jobs_max, "page_size"));
  if (!v1::JobState_IsValid(request.state())) {
    return absl::InvalidArgumentError(
        absl::StrCat("state: ", static_cast<int>(request.state()), " is not a JobState"));
  }
  // The token is the last job id of the page before: the next page starts after it, whatever
  // became of that job since.
  absl::StatusOr<JobSummaryPage> page =
      store_->ListJobSummaries(request.state(), request.page_token(), page_size);
  if (absl::IsNotFound(page.status())) {
    return absl::InvalidArgumentError(
        "page_token: not a next_page_token of ListJobs (it names no job; leave it empty for the "
        "first page)");
  }
  if (!page.ok()) return page.status();
  v1::ListJobsResponse response;
  for (v1::JobSummary& job : page->jobs) *response.add_jobs() = std::move(job);
  if (page->more) response.set_next_page_token(response.jobs().rbegin()->id());
  return response;
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(const std::string& job_id,
                                               const std::string& reason) {
  const std::string why = reason.empty() ? "cancelled by the user" : reason;
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
    v1::JobEvent event = StateEvent(job);
    SaveJob(job, &event);
    retention_due_ = true;
    spdlog::info("job {}: {}", job_id, job.message());
    ScheduleLocked();
    return job;  // as stored (a delete may follow at once)
  }
  auto run = runs_.find(job_id);
  if (run != runs_.end()) {
    Run& r = run->second;
    if (!r.cancelling) {
      r.cancelling = true;
      r.cancel_reason = why;
      r.cancel_deadline_ms = Now() + options_.cancel_grace_ms;
      r.job.set_message(absl::StrCat("cancelling: ", why));
      SaveJob(r.job, nullptr);
      SendCancelLocked(r, why);
      spdlog::info("job {}: cancelling ({})", job_id, why);
    }
    return store_->GetJob(job_id);
  }
  ASSIGN_OR_RETURN(v1::Job job, store_->GetJob(job_id));
  return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is already ",
                                                    v1::JobState_Name(job.state())));
}

absl::Status Coordinator::WatchJob(const std::string& job_id,
                                   const std::function<bool(const v1::JobEvent&)>& emit,
                                   const std::function<bool()>& cancelled) {
  auto watcher = std::make_shared<Watcher>();
  std::vector<v1::JobEvent> replay;
  bool final = false;
  {
    // Under mu_, no event can be stored between reading the stored ones and subscribing.
    absl::MutexLock lock(&mu_);
    // Its state only: the step events come with the replay.
    ASSIGN_OR_RETURN(v1::Job job, store_->GetJob(job_id));
    ASSIGN_OR_RETURN(replay, store_->ListEvents(job_id));
    final = IsFinalState(job.state());
    if (!final) {
      if (shutting_down_) return absl::UnavailableError("coordinator is shutting down");
      std::vector<std::shared_ptr<Watcher>>& list = watchers_[job_id];
      if (static_cast<int>(list.size()) >= options_.max_watchers_per_job) {
        return absl::ResourceExhaustedError(
            absl::StrCat("job ", job_id, " has ", list.size(), " watch streams open (at most ",
                         options_.max_watchers_per_job, "); close one and watch again"));
      }
      size_t open = 0;
      for (const auto& [id, watching] : watchers_) open += watching.size();
      if (static_cast<int>(open) >= options_.max_watchers) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the coordinator has ", open, " watch streams open (at most ",
                         options_.max_watchers, "); close one and watch again"));
      }
      list.push_back(watcher);
    }
  }
  auto unsubscribe = [&] {
    absl::MutexLock lock(&mu_);
    auto it = watchers_.find(job_id);
    if (it == watchers_.end()) return;
    auto& list = it->second;
    list.erase(std::remove(list.begin(), list.end(), watcher), list.end());
    if (list.empty()) watchers_.erase(it);
  };
  for (const v1::JobEvent& event : replay) {
    if (!emit(event)) {
      unsubscribe();
      return absl::OkStatus();
    }
  }
  if (final) return absl::OkStatus();

  while (true) {
    std::deque<v1::JobEvent> batch;
    bool closed = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&] { return watcher->closed || !watcher->events.empty(); };
      mu_.AwaitWithTimeout(absl::Condition(&ready), kWatchPollInterval);
      batch.swap(watcher->events);
      closed = watcher->closed;
    }
    for (const v1::JobEvent& event : batch) {
      if (!emit(event)) {
        unsubscribe();
        return absl::OkStatus();
      }
      if (event.event_case() == v1::JobEvent::kState && IsFinalState(event.state())) {
        return absl::OkStatus();  // Publish already dropped this watcher
      }
    }
    if (closed) {
      unsubscribe();
      return absl::UnavailableError("coordinator is shutting down");
    }
    if (cancelled && cancelled()) {
      unsubscribe();
      return absl::CancelledError(absl::StrCat("watch of ", job_id, " cancelled by the client"));
    }
  }
}

std::vector<v1::WorkerInfo> Coordinator::ListWorkers() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::WorkerInfo> out;
  for (const auto& w : workers_) {
    v1::WorkerInfo info;
    info.set_worker_id(w->id);
    info.set_host(w->host);
    *info.mutable_device() = w->hello.device();
    info.set_pid(w->hello.pid());
    info.set_metrics_address(w->hello.metrics_address());
    info.set_last_heartbeat_ms(w->last_heartbeat_ms);
    switch (w->status) {
      case WorkerStatus::kIdle:
        info.set_state("idle");
        break;
      case WorkerStatus::kBusy:
        info.set_state("busy");
        info.set_job_id(w->job_id);
        info.set_rank(w->rank);
        break;
      case WorkerStatus::kLost:
        info.set_state(w->drained ? "drained" : "lost");
        break;
    }
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<v1::JobTrace> Coordinator::GetJobTrace(const std::string& job_id) {
  ASSIGN_OR_RETURN(v1::Job job, store_->GetJob(job_id));
  if (!job.spec().trace()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " was not submitted with trace: true"));
  }
  std::optional<v1::JobTrace> trace = traces_.Get(job_id);
  if (trace.has_value()) return *std::move(trace);
  if (job.state() == v1::PENDING) return v1::JobTrace();
  return absl::NotFoundError(absl::StrCat(
      "the trace of job ", job_id, " is no longer held (traces live in the coordinator's memory: "
      "it restarted since, or forgot the trace to make room for newer ones)"));
}

absl::StatusOr<v1::GetJobLogsResponse> Coordinator::GetJobLogs(
    const v1::GetJobLogsRequest& request) {
  const PageLimits& limits = options_.pages;
  ASSIGN_OR_RETURN(const int page_size, PageSize(request.page_size(), limits.logs_default,
                                                 limits.logs_max, "page_size"));
  ASSIGN_OR_RETURN(const v1::Job job, store_->GetJob(request.job_id()));
  LogLineQuery query;
  query.job_id = job.id();
  query.limit = page_size;
  query.max_bytes = limits.logs_max_bytes;
  if (request.has_rank()) {
    const int64_t world = options_.world_size(job.spec());
    if (request.rank() < 0 || request.rank() >= world) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank: ", request.rank(), " is not a rank of job ", job.id(), " (ranks 0..",
                       world - 1, "; leave it unset for every rank)"));
    }
    query.rank = request.rank();
  }
  if (request.has_attempt()) {
    if (request.attempt() < 0 || request.attempt() > job.attempt()) {
      return absl::InvalidArgumentError(
          absl::StrCat("attempt: ", request.attempt(), " is not an attempt of job ", job.id(),
                       " (attempts 0..", job.attempt(), "; leave it unset for every attempt)"));
    }
    query.attempt = request.attempt();
  }
  if (request.since_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("since_ms: ", request.since_ms(), " is negative (0: every line)"));
  }
  query.since_ms = request.since_ms();
  if (!request.page_token().empty()) {
    ASSIGN_OR_RETURN(query.after, ParseLogsPageToken(request.page_token()));
  }
  ASSIGN_OR_RETURN(LogLinesPage page, store_->GetLogLines(query));
  v1::GetJobLogsResponse response;
  for (v1::JobLogLine& line : page.lines) *response.add_lines() = std::move(line);
  if (page.more) response.set_next_page_token(LogsPageToken(*response.lines().rbegin()));
  return response;
}

// ---- Scheduling ----

void Coordinator::ScheduleLocked() {
  if (shutting_down_) return;
  // Each pass starts jobs on disjoint workers; a job whose planning fails frees its workers, so
  // go again until a pass starts nothing.
  while (true) {
    std::vector<PendingJob> pending;
    for (const v1::Job& job : pending_) {
      // A restarting job waits for its failed attempt's commits, queued or in progress: its next
      // attempt starts from the newest checkpoint, which they may still make.
      if (job.id() == committing_ ||
          std::any_of(commits_.begin(), commits_.end(),
                      [&](const Commit& c) { return c.job_id == job.id(); })) {
        continue;
      }
      pending.push_back({job.id(), job.spec().device(), options_.world_size(job.spec())});
    }
    std::vector<WorkerSlot> slots;
    for (const auto& w : workers_) {
      if (w->status == WorkerStatus::kLost) continue;
      slots.push_back({w->id, w->hello.device().kind(), w->status == WorkerStatus::kIdle});
    }
    ScheduleDecision decision = Schedule(pending, slots);

    for (v1::Job& job : pending_) {
      auto waiting = decision.waiting.find(job.id());
      if (waiting == decision.waiting.end() || waiting->second == job.message()) continue;
      job.set_message(waiting->second);
      v1::JobEvent event = StateEvent(job);
      SaveJob(job, &event);
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
  const int world = static_cast<int>(workers.size());
  job.set_state(v1::PLANNING);
  job.set_message(absl::StrCat("planning ", world, " rank", world == 1 ? "" : "s"));
  v1::JobEvent planning = StateEvent(job);
  SaveJob(job, &planning);

  Run& run = runs_[job_id];
  run.job = job;
  run.workers = workers;
  run.done.assign(world, false);
  run.steps = std::make_unique<StepAggregator>(world, job.spec().data().batch_size());
  run.saves = std::make_unique<CheckpointAggregator>(world);
  for (int r = 0; r < world; ++r) {
    Worker* w = FindWorker(workers[r]);
    w->status = WorkerStatus::kBusy;
    w->job_id = job_id;
    w->attempt = job.attempt();
    w->rank = r;
    w->draining = false;
  }

  // Where the starting state comes from: train.resume or init_from naming a checkpoint.
  absl::Status ready = absl::OkStatus();
  absl::StatusOr<CheckpointLoad> load = AttemptStartingState(job);
  if (!load.ok()) ready = load.status();
  if (ready.ok() && load->optimizer_states && load->step >= job.spec().train().steps()) {
    ready = absl::InvalidArgumentError(
        absl::StrCat("train.steps: ", job.spec().train().steps(), " leaves nothing to resume: ",
                     load->step_dir, " is at step ", load->step));
  }
  auto plan = plans_.find(job_id);
  if (ready.ok() && (plan == plans_.end() || plan->second->world_size() != world)) {
    ready = absl::InternalError(absl::StrCat("no plan of ", world, " ranks for the job"));
  }
  // The attempt's rendezvous scope, whose ticket only its workers get.
  std::string ticket;
  if (ready.ok()) {
    const v1::Mesh& mesh = job.spec().mesh();
    absl::StatusOr<std::string> opened = rendezvous_.Open(
        RendezvousScope(job_id, job.attempt()),
        RendezvousLimits::ForMesh(std::vector<int64_t>(mesh.shape().begin(), mesh.shape().end())));
    if (opened.ok()) {
      ticket = *std::move(opened);
    } else {
      ready = opened.status();
    }
  }
  if (!ready.ok()) {
    run.done.assign(world, true);  // nobody got anything to cancel
    FinishRunLocked(job_id, v1::FAILED, absl::StrCat("planning failed: ", ready.message()));
    return;
  }

  const v1::JobSpec& spec = job.spec();
  run.checkpoint_metadata = {{"job_id", job_id},
                             {"job_name", spec.name()},
                             {"attempt", absl::StrCat(job.attempt())},
                             {"optimizer", spec.optimizer().type()}};
  const std::map<std::string, std::string> planned = plan->second->checkpoint_metadata();
  run.checkpoint_metadata.insert(planned.begin(), planned.end());
  if (spec.trace()) traces_.Begin(job_id, job.attempt(), workers);
  run.job.set_state(v1::RUNNING);
  run.job.set_start_time_ms(Now());
  run.job.set_message(absl::StrCat("running on ", world, " worker", world == 1 ? "" : "s"));
  if (job.attempt() > 0) {
    absl::StrAppend(run.job.mutable_message(), ", restart ", job.attempt(), " of ",
                    spec.train().max_restarts());
  }
  if (load->optimizer_states) {
    absl::StrAppend(run.job.mutable_message(), ", resuming from ", load->step_dir);
  } else if (!load->step_dir.empty()) {
    absl::StrAppend(run.job.mutable_message(), ", parameters from ", load->step_dir);
  }
  for (const std::string& w : workers) run.job.add_workers(w);
  v1::JobEvent running = StateEvent(run.job);
  SaveJob(run.job, &running);
  spdlog::info("job {}: running, ranks 0..{} on {}", job_id, world - 1,
               absl::StrJoin(workers, ", "));

  // The Programs go out once mu_ is released (DispatchStarted).
  dispatches_.push_back(Dispatch{job_id, job.attempt(), plan->second,
                                 planner::Attempt{job_id, job.attempt(), load->step,
                                                  load->step_dir, load->optimizer_states},
                                 job.spec().trace(), RendezvousScope(job_id, job.attempt()),
                                 std::move(ticket)});
}

void Coordinator::DispatchStarted() {
  while (true) {
    Dispatch d;
    {
      absl::MutexLock lock(&mu_);
      if (dispatches_.empty()) return;
      d = std::move(dispatches_.front());
      dispatches_.pop_front();
    }
    const int world = d.plan->world_size();
    for (int r = 0; r < world; ++r) {
      absl::StatusOr<v1::Program> program = d.plan->Program(r, d.start);  // off mu_
      if (program.ok() && d.trace) program->set_trace(true);
      absl::MutexLock lock(&mu_);
      auto it = runs_.find(d.job_id);
      if (it == runs_.end() || it->second.job.attempt() != d.attempt) break;  // it ended
      Run& run = it->second;
      if (run.cancelling) {
        // Nothing to cancel on the ranks not sent yet: they are done.
        for (int later = r; later < world; ++later) RankDoneLocked(&run, later, true, "");
        break;
      }
      // The first rank that cannot get its Program fails the attempt; FinishRunLocked cancels
      // the ranks already sent.
      Worker* w = FindWorker(run.workers[r]);
      if (!program.ok()) {
        for (int later = r; later < world; ++later) run.done[later] = true;
        FinishRunLocked(d.job_id, v1::FAILED,
                        absl::StrCat("planning failed: ", program.status().message()));
        break;
      }
      v1::CoordinatorMessage msg;
      *msg.mutable_assignment()->mutable_program() = *std::move(program);
      msg.mutable_assignment()->set_rendezvous_scope(d.rendezvous_scope);
      msg.mutable_assignment()->set_rendezvous_ticket(d.rendezvous_ticket);
      if (w == nullptr || w->connection == nullptr || !w->connection->Send(msg)) {
        for (int later = r; later < world; ++later) run.done[later] = true;
        const std::string cause = absl::StrCat("sending the program of rank ", r, " to worker ",
                                               run.workers[r], ": the worker's stream is closed");
        run.job.clear_rank_errors();
        run.job.set_rank_errors_omitted(0);
        *run.job.add_rank_errors() = RankErrorLocked(run, r, Now(), cause);
        FailRunLocked(d.job_id, r, cause);
        break;
      }
    }
  }
}

void Coordinator::EndRendezvousLocked(const std::string& job_id, int attempt) {
  const std::string scope = RendezvousScope(job_id, attempt);
  const RendezvousUsage held = rendezvous_.DropScope(scope);
  spdlog::info("rendezvous scope {} ended: held {} keys and {} bytes at most", scope, held.keys,
               held.peak_bytes);
}

void Coordinator::SendCancelLocked(const Run& run, const std::string& reason) {
  v1::CoordinatorMessage msg;
  msg.mutable_cancel()->set_job_id(run.job.id());
  msg.mutable_cancel()->set_attempt(run.job.attempt());
  msg.mutable_cancel()->set_reason(reason);
  for (size_t r = 0; r < run.workers.size(); ++r) {
    if (run.done[r]) continue;
    Worker* w = FindWorker(run.workers[r]);
    if (w != nullptr && w->connection != nullptr) w->connection->Send(msg);
  }
}

void Coordinator::FinishRunLocked(std::string job_id, v1::JobState state,
                                  const std::string& message) {
  auto it = runs_.find(job_id);
  if (it == runs_.end()) return;
  Run run = std::move(it->second);
  runs_.erase(it);
  plans_.erase(job_id);
  traces_.Finish(job_id);

  run.job.set_state(state);
  run.job.set_message(message);
  run.job.set_end_time_ms(Now());
  // The workers stay in the record: which worker ran which rank of its last attempt.
  v1::JobEvent event = StateEvent(run.job);
  SaveJob(run.job, &event);
  metrics_.Ended(run.job);
  retention_due_ = true;
  EndRendezvousLocked(job_id, run.job.attempt());
  if (state == v1::SUCCEEDED) {
    spdlog::info("job {}: SUCCEEDED", job_id);
  } else {
    spdlog::warn("job {}: {}: {}", job_id, v1::JobState_Name(state), message);
  }

  if (state != v1::SUCCEEDED) SendCancelLocked(run, message);
  ReleaseWorkersLocked(run);
}

void Coordinator::ReleaseWorkersLocked(const Run& run) {
  for (size_t r = 0; r < run.workers.size(); ++r) {
    Worker* w = FindWorker(run.workers[r]);
    if (w == nullptr || w->status == WorkerStatus::kLost) continue;
    if (run.done[r]) {
      ReleaseWorkerLocked(w);
    } else {
      // It was told to cancel; it is free again when it confirms or after the grace period.
      w->draining = true;
      w->release_deadline_ms = Now() + options_.cancel_grace_ms;
    }
  }
}

void Coordinator::DecideFailureLocked(const std::string& job_id) {
  auto it = runs_.find(job_id);
  if (it == runs_.end() || it->second.failures.empty() || it->second.cancelling) return;
  std::vector<Run::Failure> failures = std::move(it->second.failures);
  it->second.failures.clear();
  std::stable_sort(failures.begin(), failures.end(),
                   [](const Run::Failure& a, const Run::Failure& b) { return a.at_us < b.at_us; });
  const Run::Failure& first = failures.front();
  std::string cause = first.message;
  constexpr size_t kListed = 8;
  for (size_t i = 1; i < failures.size() && i < kListed; ++i) {
    absl::StrAppend(&cause, i == 1 ? "; then " : "; ", failures[i].message.substr(0, 512), " (+",
                    (failures[i].at_us - first.at_us) / 1000, " ms)");
  }
  if (failures.size() > kListed) {
    absl::StrAppend(&cause, "; and ", failures.size() - kListed, " more");
  }
  // Every rank's error, in the same order, replaces those of an earlier failed attempt.
  v1::Job& job = it->second.job;
  job.clear_rank_errors();
  for (size_t i = 0; i < failures.size() && i < static_cast<size_t>(kMaxRankErrors); ++i) {
    *job.add_rank_errors() = std::move(failures[i].error);
  }
  job.set_rank_errors_omitted(
      static_cast<int32_t>(failures.size() - static_cast<size_t>(job.rank_errors_size())));
  FailRunLocked(job_id, first.rank, cause);
}

v1::RankError Coordinator::RankErrorLocked(const Run& run, int rank, int64_t at_ms,
                                           const std::string& message) {
  v1::RankError error;
  error.set_rank(rank);
  error.set_attempt(run.job.attempt());
  error.set_failed_at_ms(at_ms);
  error.set_message(std::string(Utf8Prefix(message, kRankErrorMessageBytes)));
  if (rank >= 0 && rank < static_cast<int>(run.workers.size())) {
    error.set_worker(run.workers[rank]);
    if (const Worker* w = FindWorker(run.workers[rank])) error.set_host(w->host);
  }
  return error;
}

void Coordinator::FailRunLocked(const std::string& job_id, int rank, const std::string& cause) {
  auto it = runs_.find(job_id);
  if (it == runs_.end()) return;
  const int max_restarts = it->second.job.spec().train().max_restarts();
  const int restarts = it->second.job.attempt();  // attempts count from 0
  if (restarts >= max_restarts || shutting_down_) {
    FinishRunLocked(job_id, v1::FAILED,
                    max_restarts == 0
                        ? cause
                        : absl::StrCat(cause, " (attempt ", restarts + 1, "; all ", max_restarts,
                                       " restarts (train.max_restarts) used)"));
    return;
  }
  Run run = std::move(it->second);
  runs_.erase(it);
  traces_.Finish(job_id);
  EndRendezvousLocked(job_id, run.job.attempt());
  // Saves of the failed attempt that every rank completed are still committed; the next attempt
  // waits for them (ScheduleLocked) and starts from the newest.

  // What failed, where: an event of its own, then the state.
  v1::JobEvent restart;
  restart.set_job_id(job_id);
  restart.set_time_ms(Now());
  v1::Restart* r = restart.mutable_restart();
  r->set_attempt(run.job.attempt());
  r->set_restarts_left(max_restarts - restarts - 1);
  r->set_rank(rank);
  r->set_cause(cause);
  metrics_.Restart(run.job);
  if (rank >= 0 && rank < static_cast<int>(run.workers.size())) {
    r->set_worker(run.workers[rank]);
    if (const Worker* w = FindWorker(run.workers[rank])) r->set_host(w->host);
  }
  restart.set_message(absl::StrCat("attempt ", run.job.attempt() + 1, " failed; restart ",
                                   restarts + 1, " of ", max_restarts, ": ", cause));
  spdlog::warn("job {}: {}", job_id, restart.message());
  absl::Status stored = store_->AppendEvent(job_id, run.job.attempt(), restart);
  if (!stored.ok()) spdlog::error("job {}: {}", job_id, stored.ToString());
  Publish(restart);

  // Every rank of the attempt is told to stop; each is free when it confirms (a rank stuck in a
  // collective is abandoned by its worker, Worker::AbandonStuckTask), or after the grace period.
  SendCancelLocked(run, absl::StrCat("restarting: ", cause));
  ReleaseWorkersLocked(run);

  // The next attempt waits first in line, from the newest checkpoint (AttemptStartingState).
  v1::Job job = std::move(run.job);
  job.set_attempt(job.attempt() + 1);
  job.set_state(v1::RESTARTING);
  job.set_message(absl::StrCat("restart ", job.attempt(), " of ", max_restarts, " after: ",
                               cause));
  job.clear_workers();
  v1::JobEvent state = StateEvent(job);
  SaveJob(job, &state);
  pending_.insert(pending_.begin(), std::move(job));
}

void Coordinator::ReleaseWorkerLocked(Worker* worker) {
  worker->status = WorkerStatus::kIdle;
  worker->job_id.clear();
  worker->attempt = 0;
  worker->rank = -1;
  worker->draining = false;
  worker->release_deadline_ms = 0;
}

void Coordinator::RankDoneLocked(Run* run, int rank, bool ok, const std::string& failure,
                                 const std::string& error, int64_t failed_at_us) {
  if (run->done[rank]) return;
  run->done[rank] = true;
  const bool all_done = std::all_of(run->done.begin(), run->done.end(), [](bool d) { return d; });
  if (run->cancelling) {
    if (all_done) {
      FinishRunLocked(run->job.id(), v1::CANCELLED, absl::StrCat("cancelled: ", run->cancel_reason));
    }
    return;
  }
  if (!ok) {
    const int64_t at_us = failed_at_us > 0 ? failed_at_us : Now() * 1000;
    run->failures.push_back(
        {rank, at_us, failure,
         RankErrorLocked(*run, rank, at_us / 1000, error.empty() ? failure : error)});
    if (run->failures.size() == 1) run->settle_deadline_ms = Now() + options_.failure_settle_ms;
  }
  if (!run->failures.empty()) {
    // Decided once every rank answered or the window closed (Tick).
    if (all_done || options_.failure_settle_ms <= 0) DecideFailureLocked(run->job.id());
    return;
  }
  if (all_done) {
    if (run->commits_in_flight > 0) {
      run->finish_after_commits = true;  // CommittedLocked finishes it
      return;
    }
    const size_t n = run->workers.size();
    FinishRunLocked(run->job.id(), v1::SUCCEEDED,
                    absl::StrCat("all ", n, " rank", n == 1 ? "" : "s", " finished"));
  }
}

// ---- WorkerService ----

absl::StatusOr<std::string> Coordinator::ConnectWorker(const v1::Hello& hello,
                                                       const std::string& peer,
                                                       std::shared_ptr<WorkerConnection> connection) {
  SchedulingLock lock(this);
  if (shutting_down_) return absl::UnavailableError("coordinator is shutting down");
  auto w = std::make_unique<Worker>();
  w->id = absl::StrCat("worker-", ++next_worker_);
  w->hello = hello;
  if (w->hello.device().kind().empty()) w->hello.mutable_device()->set_kind("cpu");
  // Listed by ListWorkers for scrapers to find: a HOST:PORT, nothing longer or stranger.
  if (hello.metrics_address().size() > 256 || !IsValidUtf8(hello.metrics_address())) {
    w->hello.clear_metrics_address();
  }
  w->host = hello.host().empty() ? HostOfPeer(peer) : hello.host();
  w->connection = std::move(connection);
  w->last_heartbeat_ms = Now();

  v1::CoordinatorMessage welcome;
  welcome.mutable_welcome()->set_worker_id(w->id);
  welcome.mutable_welcome()->set_heartbeat_interval_ms(options_.heartbeat_interval_ms);
  if (!w->connection->Send(welcome)) {
    return absl::UnavailableError("the worker's stream closed before Welcome");
  }
  spdlog::info("{} registered: {} {} on {} (pid {})", w->id, w->hello.device().kind(),
               w->hello.device().name(), w->host, hello.pid());
  std::string id = w->id;
  workers_.push_back(std::move(w));
  ScheduleLocked();
  return id;
}

void Coordinator::HandleWorkerMessage(const std::string& worker_id, const v1::WorkerMessage& msg) {
  if (msg.has_logs()) {
    HandleLogLines(worker_id, msg.logs());
    return;
  }
  SchedulingLock lock(this);
  Worker* w = FindWorker(worker_id);
  if (w == nullptr || w->status == WorkerStatus::kLost) return;
  w->last_heartbeat_ms = Now();
  switch (msg.msg_case()) {
    case v1::WorkerMessage::kStep:
      HandleStepLocked(w, msg.step());
      break;
    case v1::WorkerMessage::kDone:
      HandleDoneLocked(w, msg.done());
      break;
    case v1::WorkerMessage::kCheckpoint:
      HandleCheckpointLocked(w, msg.checkpoint());
      break;
    case v1::WorkerMessage::kHello:
      spdlog::warn("{}: ignoring a second Hello", worker_id);
      break;
    case v1::WorkerMessage::kGoodbye: {
      // The worker's own words: kept short and valid UTF-8.
      std::string reason = ReplaceInvalidUtf8(msg.goodbye().reason().substr(0, 256));
      MarkLostLocked(w, reason.empty() ? "the worker left" : reason, /*drained=*/true);
      ForgetOldLostWorkersLocked();
      break;
    }
    default:
      break;  // heartbeat
  }
  ScheduleLocked();
}

void Coordinator::HandleLogLines(const std::string& worker_id, const v1::LogLines& logs) {
  {
    absl::MutexLock lock(&mu_);
    Worker* w = FindWorker(worker_id);
    if (w == nullptr || w->status == WorkerStatus::kLost) return;
    w->last_heartbeat_ms = Now();
    // A worker logs only for the rank it runs (or, its attempt ended, still winds down).
    if (w->status != WorkerStatus::kBusy || w->job_id != logs.job_id() ||
        w->attempt != logs.attempt() || w->rank != logs.rank()) {
      spdlog::warn("{}: ignoring {} log line(s) for {} attempt {} rank {} (it runs {} attempt {} "
                   "rank {})",
                   w->id, logs.lines_size(), logs.job_id(), logs.attempt(), logs.rank(),
                   w->job_id, w->attempt, w->rank);
      return;
    }
  }
  // Off mu_: the store has its own lock and log lines need no order with the job's events (a
  // worker's messages are handled one at a time, so its lines still precede its TaskDone).
  google::protobuf::RepeatedPtrField<v1::LogLine> lines = logs.lines();
  for (v1::LogLine& line : lines) {
    if (line.text().size() > kLogLineBytes) {
      line.set_text(std::string(Utf8Prefix(line.text(), kLogLineBytes)));
    }
    if (line.level().size() > 16) line.set_level(std::string(Utf8Prefix(line.level(), 16)));
  }
  const absl::Status s = store_->AppendLogLines(logs.job_id(), logs.attempt(), logs.rank(), lines,
                                                options_.max_log_lines);
  if (absl::IsNotFound(s)) {
    // The job was deleted while this worker wound its rank down.
    spdlog::debug("{}: {}", worker_id, s.ToString());
  } else if (!s.ok()) {
    spdlog::error("{}: {}", worker_id, s.ToString());
  }
}

void Coordinator::HandleStepLocked(Worker* w, const v1::StepReport& report) {
  auto it = runs_.find(report.job_id());
  if (it == runs_.end() || it->second.job.attempt() != report.attempt() ||
      w->job_id != report.job_id() || w->attempt != report.attempt() || w->rank != report.rank()) {
    spdlog::warn("{}: ignoring a step report for {} attempt {} rank {} (it runs {} attempt {} rank {})",
                 w->id, report.job_id(), report.attempt(), report.rank(), w->job_id, w->attempt,
                 w->rank);
    return;
  }
  Run& run = it->second;
  traces_.Add(run.job.id(), run.job.attempt(), report.rank(), report.spans());
  absl::StatusOr<std::optional<CompleteStep>> complete = run.steps->Add(report);
  if (!complete.ok()) {
    spdlog::warn("job {}: {} ({})", run.job.id(), complete.status().ToString(), w->id);
    return;
  }
  if (!complete->has_value()) return;
  v1::JobEvent event;
  event.set_job_id(run.job.id());
  event.set_time_ms(Now());
  *event.mutable_step() = (*complete)->metrics;
  metrics_.Step(run.job, event.step());
  if (!AppendAndPublish(run.job.attempt(), event) || !(*complete)->eval) return;
  v1::JobEvent eval;
  eval.set_job_id(run.job.id());
  eval.set_time_ms(event.time_ms());
  *eval.mutable_eval() = *(*complete)->eval;
  metrics_.Eval(run.job, eval.eval());
  AppendAndPublish(run.job.attempt(), eval);
}

void Coordinator::HandleCheckpointLocked(Worker* w, const v1::CheckpointReport& report) {
  auto it = runs_.find(report.job_id());
  if (it == runs_.end() || it->second.job.attempt() != report.attempt() ||
      w->job_id != report.job_id() || w->attempt != report.attempt() || w->rank != report.rank()) {
    spdlog::warn("{}: ignoring a checkpoint report for {} attempt {} rank {}", w->id,
                 report.job_id(), report.attempt(), report.rank());
    return;
  }
  Run& run = it->second;
  const v1::JobSpec& spec = run.job.spec();
  if (spec.checkpoint().dir().empty()) {
    spdlog::warn("job {}: ignoring a checkpoint report: the job has no checkpoint.dir",
                 run.job.id());
    return;
  }
  absl::StatusOr<std::optional<CompleteSave>> save = run.saves->Add(report);
  if (!save.ok()) {
    spdlog::warn("job {}: {} ({})", run.job.id(), save.status().ToString(), w->id);
    return;
  }
  if (!save->has_value()) return;
  Commit commit;
  commit.job_id = run.job.id();
  commit.attempt = run.job.attempt();
  commit.dir = spec.checkpoint().dir();
  commit.keep = spec.checkpoint().keep();  // ApplyJobSpecDefaults set it at submit
  commit.metadata = run.checkpoint_metadata;
  commit.save = **std::move(save);
  ++run.commits_in_flight;
  commits_.push_back(std::move(commit));
}

void Coordinator::CommitLoop() {
  while (true) {
    Commit commit;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Coordinator::CommitReadyLocked));
      // Saves still queued are not committed; their staging folders are ignored by readers.
      if (shutting_down_) return;
      commit = std::move(commits_.front());
      commits_.pop_front();
      committing_ = commit.job_id;
    }
    // Crash tests (WEFT_DEBUG_CRASH_AT): every shard is written and reported, nothing committed.
    CrashPoint(kCoordinatorBeforeCommit, commit.save.step);
    const absl::Time start = absl::Now();
    const absl::Status status = checkpoint::CommitCheckpoint(
        commit.dir, commit.save.step, commit.save.chunks, commit.keep, commit.metadata);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    SchedulingLock lock(this);
    CommittedLocked(commit, status, seconds, checkpoint::StepDir(commit.dir, commit.save.step));
    committing_.clear();
    ScheduleLocked();  // a restarting job may have waited for this commit
  }
}

void Coordinator::CommittedLocked(const Commit& commit, const absl::Status& status,
                                  double seconds, const std::string& path) {
  auto it = runs_.find(commit.job_id);
  const bool live = it != runs_.end() && it->second.job.attempt() == commit.attempt;
  if (!status.ok()) {
    spdlog::error("job {}: committing the checkpoint of step {}: {}", commit.job_id,
                  commit.save.step, status.ToString());
    if (live) {
      FinishRunLocked(commit.job_id, v1::FAILED,
                      absl::StrCat("committing the checkpoint of step ", commit.save.step, ": ",
                                   status.message()));
    }
    return;
  }
  spdlog::info("job {}: checkpoint of step {} committed: {} bytes, {:.3f} s writing + {:.3f} s "
               "committing, {}",
               commit.job_id, commit.save.step, commit.save.bytes, commit.save.write_seconds,
               seconds, path);
  if (!live) return;  // the attempt ended meanwhile; its events are final
  Run& run = it->second;
  --run.commits_in_flight;
  v1::JobEvent event;
  event.set_job_id(commit.job_id);
  event.set_time_ms(Now());
  v1::CheckpointSaved* saved = event.mutable_saved();
  saved->set_step(commit.save.step);
  saved->set_bytes(commit.save.bytes);
  saved->set_seconds(commit.save.write_seconds + seconds);
  saved->set_path(path);
  metrics_.Checkpoint(run.job, *saved);
  AppendAndPublish(commit.attempt, event);
  if (run.finish_after_commits && run.commits_in_flight == 0) {
    const size_t n = run.workers.size();
    FinishRunLocked(commit.job_id, v1::SUCCEEDED,
                    absl::StrCat("all ", n, " rank", n == 1 ? "" : "s", " finished"));
  }
}

void Coordinator::HandleDoneLocked(Worker* w, const v1::TaskDone& done) {
  if (w->status != WorkerStatus::kBusy || w->job_id != done.job_id() ||
      w->attempt != done.attempt()) {
    spdlog::warn("{}: ignoring TaskDone for {} attempt {}", w->id, done.job_id(), done.attempt());
    return;
  }
  auto it = runs_.find(done.job_id());
  if (it == runs_.end() || it->second.job.attempt() != done.attempt()) {
    // Its attempt already ended; this confirms the cancel.
    ReleaseWorkerLocked(w);
    return;
  }
  const std::string message = done.message().empty() ? "failed" : done.message();
  RankDoneLocked(&it->second, w->rank, done.ok(),
                 absl::StrCat("rank ", w->rank, " (", w->id, "): ", message),
                 WithoutRankPrefix(message, w->rank),
                 done.failed_at_us() > 0 ? done.failed_at_us() : done.failed_at_ms() * 1000);
}

void Coordinator::DisconnectWorker(const std::string& worker_id, const std::string& why) {
  SchedulingLock lock(this);
  Worker* w = FindWorker(worker_id);
  if (w == nullptr || w->status == WorkerStatus::kLost) return;
  MarkLostLocked(w, why);
  ForgetOldLostWorkersLocked();
  ScheduleLocked();
}

void Coordinator::MarkLostLocked(Worker* w, const std::string& why, bool drained) {
  const WorkerStatus before = w->status;
  const char* gone = drained ? "drained" : "lost";
  w->status = WorkerStatus::kLost;
  w->drained = drained;
  if (w->connection != nullptr) {
    w->connection->Close(absl::UnavailableError(absl::StrCat(w->id, " ", gone, ": ", why)));
    w->connection = nullptr;
  }
  if (shutting_down_) return;
  if (drained) {
    spdlog::info("{} drained: {}", w->id, why);
  } else {
    spdlog::warn("{} lost: {}", w->id, why);
  }
  if (before == WorkerStatus::kBusy) {
    auto it = runs_.find(w->job_id);
    if (it != runs_.end() && it->second.job.attempt() == w->attempt) {
      RankDoneLocked(&it->second, w->rank, false,
                     absl::StrCat("worker ", w->id, " (rank ", w->rank, ", host ", w->host, ") ",
                                  gone, ": ", why),
                     absl::StrCat("worker ", gone, ": ", why));
    }
  }
}

void Coordinator::ForgetOldLostWorkersLocked() {
  int lost = 0;
  for (const auto& w : workers_) lost += w->status == WorkerStatus::kLost;
  for (auto it = workers_.begin(); lost > kMaxLostWorkersListed && it != workers_.end();) {
    if ((*it)->status == WorkerStatus::kLost) {
      it = workers_.erase(it);
      --lost;
    } else {
      ++it;
    }
  }
}

void Coordinator::Tick() {
  CheckDeadlines();
  ApplyRetention();
}

absl::StatusOr<v1::Job> Coordinator::DeleteJob(const std::string& job_id) {
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
  // The store had the job final, which the thread that ended it wrote under mu_ before it told
  // the trace store and the metrics: once mu_ is ours, they were told, and forgetting is last.
  { absl::MutexLock lock(&mu_); }
  traces_.Forget(job.id());
  metrics_.Forget(job);
  return job;
}

void Coordinator::ApplyRetention() {
  if (options_.job_retention_ms <= 0 && options_.max_ended_jobs <= 0) return;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
  }
  const int64_t now = Now();
  if (!retention_due_.exchange(false) && now < next_retention_ms_) return;
  next_retention_ms_ = now + options_.retention_interval_ms;
  constexpr int kBatch = 64;  // a batch a tick: deleting many jobs' events takes a while
  const int64_t ended_before =
      options_.job_retention_ms > 0 ? now - options_.job_retention_ms : 0;
  absl::StatusOr<std::vector<std::string>> expired =
      store_->ListExpiredJobs(ended_before, options_.max_ended_jobs, kBatch);
  if (!expired.ok()) {
    spdlog::error("retention: {}", expired.status().ToString());
    return;
  }
  // A batch ends after a second too: the ticker's next Tick waits for it (and the watchdog for
  // that Tick).
  const absl::Time stop_at = absl::Now() + absl::Seconds(1);
  size_t done = 0;
  for (const std::string& job_id : *expired) {
    if (absl::Now() >= stop_at) break;
    ++done;
    absl::StatusOr<v1::Job> job = DeleteEndedJob(job_id);
    if (!job.ok()) {
      spdlog::error("retention: deleting job {}: {}", job_id, job.status().ToString());
      continue;
    }
    const bool by_age = ended_before > 0 && job->end_time_ms() < ended_before;
    spdlog::info("job {}: deleted by retention ({}, ended {} s ago): {}", job_id,
                 v1::JobState_Name(job->state()), (now - job->end_time_ms()) / 1000,
                 by_age ? absl::StrCat("older than --job_retention (",
                                       options_.job_retention_ms / 1000, " s)")
                        : absl::StrCat("beyond the ", options_.max_ended_jobs,
                                       " jobs that ended last (--max_ended_jobs)"));
  }
  if (static_cast<int>(expired->size()) == kBatch || done < expired->size()) {
    retention_due_ = true;
  }
}

void Coordinator::CheckDeadlines() {
  SchedulingLock lock(this);
  if (shutting_down_) return;
  last_tick_.Touch();
  const int64_t now = Now();
  for (auto& w : workers_) {
    if (w->status == WorkerStatus::kLost) continue;
    const int64_t silent = now - w->last_heartbeat_ms;
    if (silent > options_.worker_timeout_ms) {
      MarkLostLocked(w.get(), absl::StrCat("no heartbeat for ", silent, " ms (timeout ",
                                           options_.worker_timeout_ms, " ms)"));
    }
  }
  for (auto& w : workers_) {
    if (w->status == WorkerStatus::kBusy && w->draining && w->release_deadline_ms <= now) {
      spdlog::warn("{}: did not confirm the end of {} within {} ms; counting it idle", w->id,
                   w->job_id, options_.cancel_grace_ms);
      ReleaseWorkerLocked(w.get());
    }
  }
  std::vector<std::string> settled;
  for (const auto& [job_id, run] : runs_) {
    if (!run.failures.empty() && !run.cancelling && run.settle_deadline_ms <= now) {
      settled.push_back(job_id);
    }
  }
  for (const std::string& job_id : settled) DecideFailureLocked(job_id);
  std::vector<std::string> expired;
  for (const auto& [job_id, run] : runs_) {
    if (run.cancelling && run.cancel_deadline_ms <= now) expired.push_back(job_id);
  }
  for (const std::string& job_id : expired) {
    Run& run = runs_.at(job_id);
    int silent = 0;
    for (bool d : run.done) silent += !d;
    FinishRunLocked(job_id, v1::CANCELLED,
                    absl::StrCat("cancelled: ", run.cancel_reason, " (", silent, " rank",
                                 silent == 1 ? "" : "s", " did not confirm within ",
                                 options_.cancel_grace_ms, " ms)"));
  }
  ForgetOldLostWorkersLocked();
  ScheduleLocked();
}

}  // namespace weft::coordinator
