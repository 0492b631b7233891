#include "coordinator/job_run.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint/directory.h"
#include "common/utf8.h"
#include "coordinator/elastic.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {
namespace {

// A worker's TaskDone message says "rank R: <error>" (Task::Run); a RankError names the rank
// already.
std::string WithoutRankPrefix(const std::string& message, int rank) {
  const std::string prefix = absl::StrCat("rank ", rank, ": ");
  return absl::StartsWith(message, prefix) ? message.substr(prefix.size()) : message;
}

// "12.3 s".
std::string FormatMs(int64_t ms) { return absl::StrFormat("%.1f s", ms / 1000.0); }

std::string Plural(size_t n, const char* noun) {
  return absl::StrCat(n, " ", noun, n == 1 ? "" : "s");
}

}  // namespace

JobRun::JobRun(v1::Job job, std::vector<Slot> slots, JobRunConfig config)
    : job_(std::move(job)),
      slots_(std::move(slots)),
      config_(config),
      done_(slots_.size(), false),
      steps_(static_cast<int>(slots_.size()), job_.spec().data().batch_size()),
      saves_(static_cast<int>(slots_.size())) {}

v1::JobEvent StateEventOf(const v1::Job& job, int64_t now_ms) {
  v1::JobEvent event;
  event.set_job_id(job.id());
  event.set_time_ms(now_ms);
  event.set_state(job.state());
  event.set_message(job.message());
  return event;
}

std::vector<std::string> JobRun::Workers(const std::vector<int>& ranks) const {
  std::vector<std::string> out;
  for (int r : ranks) out.push_back(slots_[r].worker);
  return out;
}

std::vector<JobRun::Command> JobRun::Start(int64_t now_ms) {
  job_.set_state(v1::PLANNING);
  job_.set_message(absl::StrCat("planning ", Plural(slots_.size(), "rank")));
  return {StoreJob{job_, StateEventOf(job_, now_ms)}};
}

std::vector<JobRun::Command> JobRun::Apply(const Event& event, int64_t now) {
  Commands out;
  if (ended_) return out;
  if (const auto* e = std::get_if<Planned>(&event)) {
    OnPlanned(*e, now, &out);
  } else if (const auto* e = std::get_if<PlanFailed>(&event)) {
    MarkDoneFrom(0);  // nobody got anything to cancel
    End(v1::FAILED, absl::StrCat("planning failed: ", e->why), now, &out);
  } else if (const auto* e = std::get_if<ProgramFailed>(&event)) {
    // The ranks before it were sent and are cancelled; the others never ran.
    MarkDoneFrom(e->rank);
    End(v1::FAILED, absl::StrCat("planning failed: ", e->why), now, &out);
  } else if (const auto* e = std::get_if<SendFailed>(&event)) {
    MarkDoneFrom(e->rank);
    const std::string cause = absl::StrCat("sending the program of rank ", e->rank, " to worker ",
                                           slots_[e->rank].worker,
                                           ": the worker's stream is closed");
    job_.clear_rank_errors();
    job_.set_rank_errors_omitted(0);
    *job_.add_rank_errors() = RankError(e->rank, now, cause);
    Fail(e->rank, cause, now, &out);
  } else if (const auto* e = std::get_if<Unsent>(&event)) {
    DoneFrom(e->rank, now, &out);
  } else if (const auto* e = std::get_if<RankDone>(&event)) {
    const std::string message = e->message.empty() ? "failed" : e->message;
    OnRankDone(e->rank, e->ok,
               absl::StrCat("rank ", e->rank, " (", slots_[e->rank].worker, "): ", message),
               WithoutRankPrefix(message, e->rank), e->failed_at_us, now, &out);
  } else if (const auto* e = std::get_if<WorkerLost>(&event)) {
    const char* gone = e->drained ? "drained" : "lost";
    const Slot& slot = slots_[e->rank];
    OnRankDone(e->rank, false,
               absl::StrCat("worker ", slot.worker, " (rank ", e->rank, ", host ", slot.host, ") ",
                            gone, ": ", e->why),
               absl::StrCat("worker ", gone, ": ", e->why), 0, now, &out);
  } else if (const auto* e = std::get_if<Step>(&event)) {
    OnStep(e->report, now, &out);
  } else if (const auto* e = std::get_if<Shard>(&event)) {
    OnShard(e->report, now, &out);
  } else if (const auto* e = std::get_if<Committed>(&event)) {
    OnCommitted(*e, now, &out);
  } else if (const auto* e = std::get_if<Cancel>(&event)) {
    OnCancel(e->reason, now, &out);
  } else if (std::holds_alternative<Tick>(event)) {
    OnTick(now, &out);
  }
  return out;
}

void JobRun::OnPlanned(const Planned& e, int64_t now, Commands* out) {
  if (job_.state() != v1::PLANNING) return;
  if (cancelling_) {
    DoneFrom(0, now, out);  // cancelled while planning: nothing was sent, nothing to confirm
    return;
  }
  const v1::JobSpec& spec = job_.spec();
  if (e.start.optimizer_states && e.start.step >= spec.train().steps()) {
    MarkDoneFrom(0);
    if (job_.attempt() > 0) {
      // Its own checkpoint of the last step: every step ran and was committed before the
      // attempt ended (the coordinator was killed between that commit and storing SUCCEEDED).
      End(v1::SUCCEEDED,
          absl::StrCat("every step ran: ", e.start.step_dir,
                       ", the checkpoint of the last step, was committed before the attempt ended"),
          now, out);
      return;
    }
    End(v1::FAILED,
        absl::StrCat("planning failed: train.steps: ", spec.train().steps(),
                     " leaves nothing to resume: ", e.start.step_dir, " is at step ",
                     e.start.step),
        now, out);
    return;
  }
  checkpoint_metadata_ = {{checkpoint::kJobIdMetadata, job_.id()},
                          {"job_name", spec.name()},
                          {"attempt", absl::StrCat(job_.attempt())},
                          {"optimizer", spec.optimizer().type()}};
  checkpoint_metadata_.insert(e.checkpoint_metadata.begin(), e.checkpoint_metadata.end());
  started_from_ = e.start.step_dir;
  job_.set_state(v1::RUNNING);
  job_.set_start_time_ms(now);
  job_.set_message(absl::StrCat("running on ", Plural(slots_.size(), "worker")));
  if (const int restarts = job_.attempt() - job_.grows(); restarts > 0) {
    absl::StrAppend(job_.mutable_message(), ", restart ", restarts, " of ",
                    spec.train().max_restarts());
  }
  if (job_.elastic_size() > 0) {
    absl::StrAppend(job_.mutable_message(), ", ", spec.train().elastic().dim(), " ",
                    job_.elastic_size());
  }
  if (e.start.optimizer_states) {
    absl::StrAppend(job_.mutable_message(), ", resuming from ", e.start.step_dir);
  } else if (!e.start.step_dir.empty()) {
    absl::StrAppend(job_.mutable_message(), ", parameters from ", e.start.step_dir);
  }
  job_.clear_workers();
  for (const Slot& slot : slots_) job_.add_workers(slot.worker);
  out->push_back(StoreJob{job_, StateEventOf(job_, now)});
  out->push_back(SendPrograms{e.start});
}

void JobRun::DoneFrom(int rank, int64_t now, Commands* out) {
  for (int r = std::max(rank, 0); r < world_size() && !ended_; ++r) {
    OnRankDone(r, true, "", "", 0, now, out);
  }
}

std::vector<int> JobRun::Ranks(bool done) const {
  std::vector<int> ranks;
  for (int r = 0; r < world_size(); ++r) {
    if (done_[r] == done) ranks.push_back(r);
  }
  return ranks;
}

void JobRun::CancelRunning(const std::string& reason, Commands* out) const {
  std::vector<int> ranks = Ranks(/*done=*/false);
  if (!ranks.empty()) out->push_back(CancelRanks{std::move(ranks), reason});
}

void JobRun::MarkDoneFrom(int rank) {
  for (int r = std::max(rank, 0); r < world_size(); ++r) done_[r] = true;
}

bool JobRun::AllDone() const {
  return std::all_of(done_.begin(), done_.end(), [](bool d) { return d; });
}

void JobRun::OnRankDone(int rank, bool ok, const std::string& failure, const std::string& error,
                        int64_t failed_at_us, int64_t now, Commands* out) {
  if (rank < 0 || rank >= world_size() || done_[rank]) return;
  done_[rank] = true;
  const bool all_done = AllDone();
  if (cancelling_) {
    if (all_done) End(v1::CANCELLED, absl::StrCat("cancelled: ", cancel_reason_), now, out);
    return;
  }
  if (!ok) {
    const int64_t at_us = failed_at_us > 0 ? failed_at_us : now * 1000;
    failures_.push_back({rank, at_us, failure, RankError(rank, at_us / 1000, error.empty() ? failure : error)});
    if (failures_.size() == 1) settle_deadline_ms_ = now + config_.failure_settle_ms;
  }
  if (!failures_.empty()) {
    // Decided once every rank answered or the window closed (Tick).
    if (all_done || config_.failure_settle_ms <= 0) DecideFailure(now, out);
    return;
  }
  if (all_done) {
    if (commits_in_flight_ > 0) {
      finish_after_commits_ = true;  // OnCommitted finishes it
      return;
    }
    End(v1::SUCCEEDED, absl::StrCat("all ", Plural(slots_.size(), "rank"), " finished"), now, out);
  }
}

void JobRun::OnStep(const v1::StepReport& report, int64_t now, Commands* out) {
  absl::StatusOr<std::optional<CompleteStep>> complete = steps_.Add(report);
  if (!complete.ok()) {
    spdlog::warn("job {}: {} (rank {})", job_.id(), complete.status().ToString(), report.rank());
    return;
  }
  if (!complete->has_value()) return;
  if (last_step_ms_.has_value()) {
    step_gaps_ms_.push_back(now - *last_step_ms_);
    if (step_gaps_ms_.size() > 64) step_gaps_ms_.pop_front();
  }
  last_step_ms_ = now;
  last_progress_ms_ = now;
  v1::JobEvent step;
  step.set_job_id(job_.id());
  step.set_time_ms(now);
  *step.mutable_step() = (*complete)->metrics;
  out->push_back(AppendEvent{std::move(step)});
  if (!(*complete)->eval) return;
  v1::JobEvent eval;
  eval.set_job_id(job_.id());
  eval.set_time_ms(now);
  *eval.mutable_eval() = *(*complete)->eval;
  out->push_back(AppendEvent{std::move(eval)});
}

void JobRun::OnShard(const v1::CheckpointReport& report, int64_t now, Commands* out) {
  last_progress_ms_ = now;  // a rank is saving: it is not stuck
  if (job_.spec().checkpoint().dir().empty()) {
    spdlog::warn("job {}: ignoring a checkpoint report: the job has no checkpoint.dir", job_.id());
    return;
  }
  absl::StatusOr<std::optional<CompleteSave>> save = saves_.Add(report);
  if (!save.ok()) {
    spdlog::warn("job {}: {} (rank {})", job_.id(), save.status().ToString(), report.rank());
    return;
  }
  if (!save->has_value()) return;
  ++commits_in_flight_;
  out->push_back(CommitCheckpoint{**std::move(save), checkpoint_metadata_, started_from_});
}

void JobRun::OnCommitted(const Committed& e, int64_t now, Commands* out) {
  if (!e.status.ok()) {
    End(v1::FAILED,
        absl::StrCat("committing the checkpoint of step ", e.step, ": ", e.status.message()), now,
        out);
    return;
  }
  --commits_in_flight_;
  v1::JobEvent event;
  event.set_job_id(job_.id());
  event.set_time_ms(now);
  *event.mutable_saved() = e.saved;
  out->push_back(AppendEvent{std::move(event)});
  if (finish_after_commits_ && commits_in_flight_ == 0) {
    End(v1::SUCCEEDED, absl::StrCat("all ", Plural(slots_.size(), "rank"), " finished"), now, out);
    return;
  }
  // Not past the last step, nor while the attempt fails or is cancelled.
  if (e.grow_to > 0 && !finish_after_commits_ && !cancelling_ && failures_.empty() &&
      e.step < job_.spec().train().steps()) {
    Grow(e.grow_to, e.step, now, out);
  }
}

void JobRun::Grow(int to, int64_t step, int64_t now, Commands* out) {
  v1::JobEvent resize = ResizeEvent(job_, to, step, now);
  spdlog::info("job {}: {}", job_.id(), resize.message());
  out->push_back(AppendEvent{resize});
  CancelRunning(absl::StrCat("resizing: ", resize.message()), out);
  v1::Job next = job_;
  ApplyResize(resize, &next);
  next.set_attempt(job_.attempt() + 1);
  next.set_grows(job_.grows() + 1);
  next.set_state(v1::RESTARTING);
  next.clear_workers();
  out->push_back(StoreJob{next, StateEventOf(next, now)});
  Release(v1::RESTARTING, now, std::move(next), out);
}

void JobRun::OnCancel(const std::string& reason, int64_t now, Commands* out) {
  if (cancelling_) return;
  cancelling_ = true;
  cancel_reason_ = reason;
  cancel_deadline_ms_ = now + config_.cancel_grace_ms;
  job_.set_message(absl::StrCat("cancelling: ", reason));
  out->push_back(StoreJob{job_, std::nullopt});
  CancelRunning(reason, out);
}

int64_t JobRun::MedianStepGapMs() const {
  std::vector<int64_t> gaps(step_gaps_ms_.begin(), step_gaps_ms_.end());
  std::nth_element(gaps.begin(), gaps.begin() + gaps.size() / 2, gaps.end());
  return gaps[gaps.size() / 2];
}

void JobRun::OnTick(int64_t now, Commands* out) {
  if (!failures_.empty() && !cancelling_ && settle_deadline_ms_ <= now) {
    DecideFailure(now, out);
    return;
  }
  // The progress watchdog, while the ranks are meant to be stepping, once kProgressSteps steps
  // (kProgressSteps - 1 gaps) have completed.
  if (config_.progress_floor_ms > 0 && job_.state() == v1::RUNNING && !cancelling_ &&
      failures_.empty() && !finish_after_commits_ &&
      step_gaps_ms_.size() + 1 >= static_cast<size_t>(JobRunConfig::kProgressSteps)) {
    const int64_t median = MedianStepGapMs();
    const int64_t limit =
        std::max(config_.progress_floor_ms, JobRunConfig::kProgressFactor * median);
    if (now - last_progress_ms_ > limit) {
      Fail(-1,
           absl::StrCat("no step completed for ", FormatMs(now - last_progress_ms_), " (",
                        JobRunConfig::kProgressFactor, " x the median step time ",
                        FormatMs(median), ", at least ", FormatMs(config_.progress_floor_ms),
                        "): a rank is stuck, or its workers cannot reach each other"),
           now, out);
      return;
    }
  }
  if (cancelling_ && cancel_deadline_ms_ <= now) {
    const size_t silent = std::count(done_.begin(), done_.end(), false);
    End(v1::CANCELLED,
        absl::StrCat("cancelled: ", cancel_reason_, " (", Plural(silent, "rank"),
                     " did not confirm within ", config_.cancel_grace_ms, " ms)"),
        now, out);
  }
}

void JobRun::DecideFailure(int64_t now, Commands* out) {
  if (failures_.empty() || cancelling_) return;
  std::vector<Failure> failures = std::move(failures_);
  failures_.clear();
  std::stable_sort(failures.begin(), failures.end(),
                   [](const Failure& a, const Failure& b) { return a.at_us < b.at_us; });
  const Failure& first = failures.front();
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
  job_.clear_rank_errors();
  for (size_t i = 0; i < failures.size() && i < static_cast<size_t>(kMaxRankErrors); ++i) {
    *job_.add_rank_errors() = std::move(failures[i].error);
  }
  job_.set_rank_errors_omitted(
      static_cast<int32_t>(failures.size() - static_cast<size_t>(job_.rank_errors_size())));
  Fail(first.rank, cause, now, out);
}

void JobRun::Fail(int rank, const std::string& cause, int64_t now, Commands* out) {
  const int max_restarts = job_.spec().train().max_restarts();
  const int restarts = job_.attempt() - job_.grows();  // attempts count from 0; grows are not
  if (restarts >= max_restarts) {
    End(v1::FAILED,
        max_restarts == 0 ? cause
                          : absl::StrCat(cause, " (attempt ", job_.attempt() + 1, "; all ",
                                         max_restarts,
                                         " restarts (train.max_restarts) used)"),
        now, out);
    return;
  }
  // What failed, where: an event of its own, then the state. Saves of the failed attempt that
  // every rank completed are still committed; the next attempt waits for them and starts from
  // the newest.
  v1::JobEvent restart;
  restart.set_job_id(job_.id());
  restart.set_time_ms(now);
  v1::Restart* r = restart.mutable_restart();
  r->set_attempt(job_.attempt());
  r->set_restarts_left(max_restarts - restarts - 1);
  r->set_rank(rank);
  r->set_cause(cause);
  if (rank >= 0 && rank < world_size()) {
    r->set_worker(slots_[rank].worker);
    r->set_host(slots_[rank].host);
  }
  restart.set_message(absl::StrCat("attempt ", job_.attempt() + 1, " failed; restart ",
                                   restarts + 1, " of ", max_restarts, ": ", cause));
  spdlog::warn("job {}: {}", job_.id(), restart.message());
  out->push_back(AppendEvent{std::move(restart)});

  // Every rank of the attempt is told to stop; each is free when it confirms (a rank stuck in a
  // collective is abandoned by its worker), or after the grace period.
  CancelRunning(absl::StrCat("restarting: ", cause), out);

  v1::Job next = job_;
  next.set_attempt(job_.attempt() + 1);
  next.set_state(v1::RESTARTING);
  next.set_message(absl::StrCat("restart ", restarts + 1, " of ", max_restarts, " after: ",
                                cause));
  next.clear_workers();
  out->push_back(StoreJob{next, StateEventOf(next, now)});
  Release(v1::RESTARTING, now, std::move(next), out);
}

void JobRun::End(v1::JobState state, const std::string& message, int64_t now, Commands* out) {
  job_.set_state(state);
  job_.set_message(message);
  job_.set_end_time_ms(now);
  // The workers stay in the record: which worker ran which rank of its last attempt.
  out->push_back(StoreJob{job_, StateEventOf(job_, now)});
  if (state == v1::SUCCEEDED) {
    spdlog::info("job {}: SUCCEEDED", job_.id());
  } else {
    spdlog::warn("job {}: {}: {}", job_.id(), v1::JobState_Name(state), message);
    CancelRunning(message, out);
  }
  Release(state, now, std::nullopt, out);
}

void JobRun::Release(v1::JobState state, int64_t now, std::optional<v1::Job> next,
                     Commands* out) {
  Ended ended;
  ended.state = state;
  ended.done_ranks = Ranks(/*done=*/true);
  ended.draining_ranks = Ranks(/*done=*/false);
  ended.drain_deadline_ms = now + config_.cancel_grace_ms;
  ended.next = std::move(next);
  out->push_back(std::move(ended));
  ended_ = true;
}

v1::RankError JobRun::RankError(int rank, int64_t at_ms, const std::string& message) const {
  v1::RankError error;
  error.set_rank(rank);
  error.set_attempt(job_.attempt());
  error.set_failed_at_ms(at_ms);
  error.set_message(std::string(Utf8Prefix(message, kRankErrorMessageBytes)));
  if (rank >= 0 && rank < world_size()) {
    error.set_worker(slots_[rank].worker);
    error.set_host(slots_[rank].host);
  }
  return error;
}

}  // namespace weft::coordinator
