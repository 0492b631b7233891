#include "coordinator/store_writer.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {

StoreWriter::StoreWriter(JobStore* store, std::function<void(const v1::JobEvent&)> published,
                         int64_t max_backlog)
    : store_(store),
      published_(std::move(published)),
      max_backlog_(max_backlog),
      thread_([this] { Loop(); }) {}

StoreWriter::~StoreWriter() { Stop(); }

void StoreWriter::Write(JobWrite write) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      queue_.push_back(std::move(write));
      ++queued_;
      return;
    }
  }
  absl::Status why;
  std::vector<JobWrite> lost = WriteGroup({std::move(write)}, &why);
  if (!lost.empty()) {
    spdlog::error("job {}: a write after the store writer stopped is lost: {}", lost[0].job_id,
                  why.ToString());
  }
}

absl::Status StoreWriter::Sync() {
  absl::MutexLock lock(&mu_);
  const int64_t ticket = queued_;
  auto done = [&] { return written_ >= ticket || stopped_ || !failing_.ok(); };
  mu_.Await(absl::Condition(&done));
  if (written_ >= ticket || stopped_) return absl::OkStatus();
  return failing_;
}

absl::Status StoreWriter::health() const {
  absl::MutexLock lock(&mu_);
  return failing_;
}

void StoreWriter::AwaitRoom() {
  absl::MutexLock lock(&mu_);
  auto room = [&] { return queued_ - written_ <= max_backlog_ || stopped_; };
  mu_.Await(absl::Condition(&room));
}

void StoreWriter::RunInOrder(const std::function<void()>& fn) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopped_) {
      queue_.push_back(&fn);
      const int64_t ticket = ++queued_;
      auto done = [&] { return written_ >= ticket || stopped_; };
      mu_.Await(absl::Condition(&done));
      if (written_ >= ticket) return;
    }
  }
  fn();  // the writer stopped before it got there
}

void StoreWriter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

int64_t StoreWriter::groups_written() const {
  absl::MutexLock lock(&mu_);
  return groups_;
}

int64_t StoreWriter::largest_group() const {
  absl::MutexLock lock(&mu_);
  return largest_group_;
}

void StoreWriter::Loop() {
  while (true) {
    std::vector<JobWrite> group;
    const std::function<void()>* fn = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [&] { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) {  // stopping, and everything queued is written
        stopped_ = true;
        return;
      }
      // The writes up to the first call to run in order; or that call.
      while (!queue_.empty() && std::holds_alternative<JobWrite>(queue_.front())) {
        group.push_back(std::get<JobWrite>(std::move(queue_.front())));
        queue_.pop_front();
      }
      if (group.empty()) {
        fn = std::get<const std::function<void()>*>(queue_.front());
        queue_.pop_front();
      }
    }
    if (fn != nullptr) {
      (*fn)();
      absl::MutexLock lock(&mu_);
      ++written_;
      continue;
    }
    const int64_t size = static_cast<int64_t>(group.size());
    absl::Status why;
    std::vector<JobWrite> waiting = WriteGroup(std::move(group), &why);
    absl::MutexLock lock(&mu_);
    ++groups_;
    largest_group_ = std::max(largest_group_, size);
    written_ += size - static_cast<int64_t>(waiting.size());
    if (waiting.empty()) {
      if (!failing_.ok()) spdlog::info("the job store takes writes again");
      failing_ = absl::OkStatus();
      continue;
    }
    const int64_t count = static_cast<int64_t>(waiting.size());
    if (stopping_) {
      // The coordinator is stopping: one try was all; what the store still refuses is lost.
      written_ += count;
      spdlog::error("stopping: {} write(s) the job store refused are lost: {}", count,
                    why.ToString());
      continue;
    }
    // Never lost while running: back at the front, in order, tried again after a pause.
    for (auto it = waiting.rbegin(); it != waiting.rend(); ++it) queue_.push_front(std::move(*it));
    const bool first = failing_.ok();
    failing_ = absl::Status(
        why.code(), absl::StrCat("the job store cannot be written (", why.message(), "): ",
                                 queued_ - written_, " write(s) wait, tried again every ",
                                 absl::FormatDuration(kRetryEvery)));
    if (first) {
      spdlog::error("{}; health says NOT_SERVING until they are stored",
                    std::string(failing_.message()));
    }
    auto stopping = [&] { return stopping_; };
    mu_.AwaitWithTimeout(absl::Condition(&stopping), kRetryEvery);
  }
}

std::vector<JobWrite> StoreWriter::WriteGroup(std::vector<JobWrite> group, absl::Status* why) {
  const std::vector<absl::Status> statuses = store_->WriteBatch(group);
  std::vector<JobWrite> waiting;
  for (size_t i = 0; i < group.size(); ++i) {
    if (IsRetriableStoreError(statuses[i])) {
      // The store cannot take it now (JobStore::WriteBatch then stored none of the batch, so the
      // order holds when they are tried again).
      if (waiting.empty()) *why = statuses[i];
      waiting.push_back(std::move(group[i]));
      continue;
    }
    if (!statuses[i].ok()) {
      // A write the store refuses for what it is: the in-memory state moves on (workers must
      // still be freed); the record is stale, and no watcher sees an event the store does not
      // hold.
      spdlog::error("job {}: {}", group[i].job_id, statuses[i].ToString());
      continue;
    }
    if (group[i].event.has_value()) published_(*group[i].event);
  }
  return waiting;
}

}  // namespace weft::coordinator
