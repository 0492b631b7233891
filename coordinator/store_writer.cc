#include "coordinator/store_writer.h"

#include <utility>
#include <vector>

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
  WriteGroup({std::move(write)});
}

void StoreWriter::Sync() {
  absl::MutexLock lock(&mu_);
  const int64_t ticket = queued_;
  auto done = [&] { return written_ >= ticket || stopped_; };
  mu_.Await(absl::Condition(&done));
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
    } else {
      WriteGroup(group);
    }
    absl::MutexLock lock(&mu_);
    if (fn == nullptr) {
      ++groups_;
      largest_group_ = std::max<int64_t>(largest_group_, static_cast<int64_t>(group.size()));
    }
    written_ += fn != nullptr ? 1 : static_cast<int64_t>(group.size());
  }
}

void StoreWriter::WriteGroup(const std::vector<JobWrite>& group) {
  const std::vector<absl::Status> statuses = store_->WriteBatch(group);
  for (size_t i = 0; i < group.size(); ++i) {
    if (!statuses[i].ok()) {
      // The in-memory state moves on (workers must still be freed); the record is stale, and no
      // watcher sees an event the store does not hold.
      spdlog::error("job {}: {}", group[i].job_id, statuses[i].ToString());
      continue;
    }
    if (group[i].event.has_value()) published_(*group[i].event);
  }
}

}  // namespace weft::coordinator
