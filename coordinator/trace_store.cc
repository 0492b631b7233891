#include "coordinator/trace_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weft::coordinator {

void TraceStore::Begin(const std::string& job_id, int attempt,
                       const std::vector<std::string>& workers) {
  absl::MutexLock lock(&mu_);
  EraseLocked(job_id);
  Entry& entry = jobs_[job_id];
  entry.trace.set_attempt(attempt);
  for (size_t r = 0; r < workers.size(); ++r) {
    v1::RankTrace* rank = entry.trace.add_ranks();
    rank->set_rank(static_cast<int32_t>(r));
    rank->set_worker_id(workers[r]);
  }
}

void TraceStore::Add(const std::string& job_id, int attempt, int rank,
                     const google::protobuf::RepeatedPtrField<v1::TraceSpan>& spans) {
  if (spans.empty()) return;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Entry& entry = it->second;
  if (entry.finished || entry.trace.attempt() != attempt || rank < 0 ||
      rank >= entry.trace.ranks_size()) {
    return;
  }
  const int64_t room = std::max<int64_t>(0, limits_.max_spans_per_job - entry.spans);
  const int64_t keep = std::min<int64_t>(room, spans.size());
  auto* out = entry.trace.mutable_ranks(rank)->mutable_spans();
  for (int64_t i = 0; i < keep; ++i) *out->Add() = spans.Get(static_cast<int>(i));
  entry.spans += keep;
  total_spans_ += keep;
  entry.trace.set_dropped_spans(entry.trace.dropped_spans() + spans.size() - keep);
  EvictLocked();
}

void TraceStore::Finish(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end() || it->second.finished) return;
  it->second.finished = true;
  finished_.push_back(job_id);
  EvictLocked();
}

void TraceStore::Forget(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  EraseLocked(job_id);
}

std::optional<v1::JobTrace> TraceStore::Get(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return std::nullopt;
  return it->second.trace;
}

int64_t TraceStore::total_spans() const {
  absl::MutexLock lock(&mu_);
  return total_spans_;
}

void TraceStore::EvictLocked() {
  while (!finished_.empty() &&
         (total_spans_ > limits_.max_spans_total ||
          static_cast<int64_t>(finished_.size()) > limits_.max_finished_jobs)) {
    const std::string oldest = finished_.front();
    EraseLocked(oldest);
  }
}

void TraceStore::EraseLocked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  total_spans_ -= it->second.spans;
  if (it->second.finished) {
    finished_.erase(std::remove(finished_.begin(), finished_.end(), job_id), finished_.end());
  }
  jobs_.erase(it);
}

absl::StatusOr<v1::JobTrace> TraceStore::TraceOf(const v1::Job& job) const {
  if (!job.spec().trace()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(), " was not submitted with trace: true"));
  }
  std::optional<v1::JobTrace> trace = Get(job.id());
  if (trace.has_value()) return *std::move(trace);
  if (job.state() == v1::PENDING) return v1::JobTrace();
  return absl::NotFoundError(absl::StrCat(
      "the trace of job ", job.id(), " is no longer held (traces live in the coordinator's "
      "memory: it restarted since, or forgot the trace to make room for newer ones)"));
}

}  // namespace weft::coordinator
