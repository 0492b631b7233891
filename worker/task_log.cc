#include "worker/task_log.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace weft {

TaskLogSink::TaskLogSink(TaskLogOptions options) : options_(options) {}

TaskLogSink::~TaskLogSink() {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  {
    absl::MutexLock lock(&mu_);
    active_ = false;
    stop_flusher_ = true;
  }
  if (flusher_.joinable()) flusher_.join();
}

void TaskLogSink::Begin(const std::string& job_id, int attempt, int rank, Send send) {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  EndLocked();
  {
    absl::MutexLock send_lock(&send_mu_);
    send_ = std::move(send);
    absl::MutexLock lock(&mu_);
    active_ = true;
    stop_flusher_ = false;
    job_id_ = job_id;
    attempt_ = attempt;
    rank_ = rank;
    pending_.clear();
    dropped_ = 0;
  }
  flusher_ = std::thread([this] { FlushLoop(); });
}

void TaskLogSink::End(const std::string& job_id, int attempt, int rank) {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (!active_ || job_id_ != job_id || attempt_ != attempt || rank_ != rank) return;
  }
  EndLocked();
}

void TaskLogSink::EndLocked() {
  {
    absl::MutexLock lock(&mu_);
    if (!active_) return;
    stop_flusher_ = true;
  }
  if (flusher_.joinable()) flusher_.join();
  absl::MutexLock send_lock(&send_mu_);
  SendPendingLocked(/*last=*/true);
  send_ = nullptr;
}

void TaskLogSink::sink_it_(const spdlog::details::log_msg& msg) {
  absl::MutexLock lock(&mu_);
  // A line logged outside a task, or past the bound, costs no copy.
  if (!active_) return;
  if (static_cast<int>(pending_.size()) >= options_.max_pending) {
    ++dropped_;
    return;
  }
  // Cut before the copy (a replaced byte grows to three, so cut again after).
  const absl::string_view payload = Utf8Prefix(
      absl::string_view(msg.payload.data(), msg.payload.size()), options_.max_line_bytes);
  const spdlog::string_view_t level = spdlog::level::to_string_view(msg.level);
  v1::LogLine& line = pending_.emplace_back();
  line.set_time_ms(
      std::chrono::duration_cast<std::chrono::milliseconds>(msg.time.time_since_epoch()).count());
  line.set_level(std::string(level.data(), level.size()));
  line.set_text(std::string(Utf8Prefix(ReplaceInvalidUtf8(payload), options_.max_line_bytes)));
}

void TaskLogSink::SendPendingLocked(bool last) {
  std::vector<v1::LogLine> lines;
  v1::LogLines batch;
  {
    absl::MutexLock lock(&mu_);
    if (!active_) return;
    if (last) active_ = false;  // in the same hold as the swap: no line falls between
    if (pending_.empty() && dropped_ == 0) return;
    lines.swap(pending_);
    if (dropped_ > 0) {
      // Where they would have been: after the lines that waited.
      v1::LogLine& marker = lines.emplace_back();
      marker.set_time_ms(absl::ToUnixMillis(absl::Now()));
      marker.set_level("warning");
      marker.set_text(absl::StrCat(
          "[weft] ", dropped_, " log line", dropped_ == 1 ? "" : "s",
          " of this task dropped by the worker: the coordinator took them slower than they were "
          "logged (the worker's own log has them)"));
      dropped_ = 0;
    }
    batch.set_job_id(job_id_);
    batch.set_attempt(attempt_);
    batch.set_rank(rank_);
  }
  // active_ was set: Begin gave send_ first.
  for (size_t begin = 0; begin < lines.size(); begin += options_.batch_lines) {
    v1::WorkerMessage msg;
    *msg.mutable_logs() = batch;
    const size_t end = std::min(lines.size(), begin + options_.batch_lines);
    for (size_t i = begin; i < end; ++i) *msg.mutable_logs()->add_lines() = std::move(lines[i]);
    send_(msg);
  }
}

void TaskLogSink::FlushLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_flusher_ || static_cast<int>(pending_.size()) >= options_.batch_lines;
      };
      mu_.AwaitWithTimeout(absl::Condition(&ready), options_.flush_every);
      if (stop_flusher_) return;
    }
    absl::MutexLock send_lock(&send_mu_);
    SendPendingLocked(/*last=*/false);
  }
}

}  // namespace weft
