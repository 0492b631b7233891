#include "coordinator/job_watchers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_state.h"
#include "common/status.h"

namespace weft::coordinator {
namespace {

// How often a watch looks at its caller's cancellation flag.
constexpr absl::Duration kWatchPollInterval = absl::Milliseconds(100);

}  // namespace

absl::StatusOr<std::shared_ptr<JobWatchers::Watcher>> JobWatchers::Subscribe(
    const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  if (closed_) return absl::UnavailableError("coordinator is shutting down");
  std::vector<std::shared_ptr<Watcher>>& list = by_job_[job_id];
  if (static_cast<int>(list.size()) >= max_per_job_) {
    const size_t open = list.size();
    if (list.empty()) by_job_.erase(job_id);
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job_id, " has ", open, " watch streams open (at most ", max_per_job_,
                     "); close one and watch again"));
  }
  size_t open = 0;
  for (const auto& [id, watching] : by_job_) open += watching.size();
  if (static_cast<int>(open) >= max_total_) {
    if (list.empty()) by_job_.erase(job_id);
    return absl::ResourceExhaustedError(
        absl::StrCat("the coordinator has ", open, " watch streams open (at most ", max_total_,
                     "); close one and watch again"));
  }
  auto watcher = std::make_shared<Watcher>();
  list.push_back(watcher);
  return watcher;
}

void JobWatchers::Unsubscribe(const std::string& job_id, const std::shared_ptr<Watcher>& watcher) {
  absl::MutexLock lock(&mu_);
  auto it = by_job_.find(job_id);
  if (it == by_job_.end()) return;
  auto& list = it->second;
  list.erase(std::remove(list.begin(), list.end(), watcher), list.end());
  if (list.empty()) by_job_.erase(it);
}

void JobWatchers::Publish(const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  auto it = by_job_.find(event.job_id());
  if (it == by_job_.end()) return;
  for (auto& watcher : it->second) watcher->events.push_back(event);
  if (event.event_case() == v1::JobEvent::kState && IsFinalState(event.state())) {
    by_job_.erase(it);  // each watcher ends after this event
  }
}

void JobWatchers::CloseAll() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  for (auto& [job_id, list] : by_job_) {
    for (auto& watcher : list) watcher->closed = true;
  }
}

JobWatchers::Batch JobWatchers::Next(Watcher* watcher, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [&] { return watcher->closed || !watcher->events.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
  Batch batch;
  batch.events.swap(watcher->events);
  batch.closed = watcher->closed;
  return batch;
}

absl::Status JobWatchers::Watch(const std::string& job_id, StoreWriter* writer, JobStore* store,
                                const std::function<bool(const v1::JobEvent&)>& emit,
                                const std::function<bool()>& cancelled) {
  // On the writer's thread, between two groups: no event is stored between reading the stored
  // ones and subscribing.
  absl::Status status;
  std::vector<v1::JobEvent> replay;
  std::shared_ptr<JobWatchers::Watcher> watcher;
  writer->RunInOrder([&] {
    absl::StatusOr<v1::Job> job = store->GetJob(job_id);  // its state; steps come with the replay
    absl::StatusOr<std::vector<v1::JobEvent>> events =
        job.ok() ? store->ListEvents(job_id) : job.status();
    if (!events.ok()) {
      status = events.status();
      return;
    }
    replay = *std::move(events);
    if (IsFinalState(job->state())) return;
    absl::StatusOr<std::shared_ptr<JobWatchers::Watcher>> subscribed = Subscribe(job_id);
    if (subscribed.ok()) {
      watcher = *std::move(subscribed);
    } else {
      status = subscribed.status();
    }
  });
  RETURN_IF_ERROR(status);
  for (const v1::JobEvent& event : replay) {
    if (!emit(event)) {
      if (watcher != nullptr) Unsubscribe(job_id, watcher);
      return absl::OkStatus();
    }
  }
  if (watcher == nullptr) return absl::OkStatus();  // the job had ended
  while (true) {
    JobWatchers::Batch batch = Next(watcher.get(), kWatchPollInterval);
    for (const v1::JobEvent& event : batch.events) {
      if (!emit(event)) {
        Unsubscribe(job_id, watcher);
        return absl::OkStatus();
      }
      if (event.event_case() == v1::JobEvent::kState && IsFinalState(event.state())) {
        return absl::OkStatus();  // Publish already dropped this watcher
      }
    }
    if (batch.closed) {
      Unsubscribe(job_id, watcher);
      return absl::UnavailableError("coordinator is shutting down");
    }
    if (cancelled && cancelled()) {
      Unsubscribe(job_id, watcher);
      return absl::CancelledError(absl::StrCat("watch of ", job_id, " cancelled by the client"));
    }
  }
}

}  // namespace weft::coordinator
