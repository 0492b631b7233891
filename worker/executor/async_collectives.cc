#include "worker/executor/async_collectives.h"

#include <chrono>

#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace weft {
namespace {

int64_t NowUs() { return absl::ToUnixMicros(absl::Now()); }

}  // namespace

AsyncCollectives::AsyncCollectives(int communicators, bool record_timings)
    : record_timings_(record_timings) {
  // Every lane exists before any thread reads lanes_; a lane's thread starts with its first
  // collective (Start).
  for (int c = 0; c < communicators; ++c) lanes_.push_back(std::make_unique<Lane>());
}

AsyncCollectives::~AsyncCollectives() {
  WaitAll().IgnoreError();  // the executor reported any error already, or is being torn down
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_.SignalAll();
  }
  for (auto& lane : lanes_) {
    if (lane->thread.joinable()) lane->thread.join();
  }
}

void AsyncCollectives::Serve(int comm) {
  Lane& lane = *lanes_[comm];
  while (true) {
    std::shared_ptr<Pending> p;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && lane.queue.empty()) work_.Wait(&mu_);
      if (lane.queue.empty()) return;  // stopping, nothing left
      p = lane.queue.front();
      lane.queue.pop_front();
    }
    const int64_t start_us = record_timings_ ? NowUs() : 0;
    absl::Status status = p->run();
    const int64_t end_us = record_timings_ ? NowUs() : 0;
    absl::MutexLock lock(&mu_);
    p->timing.start_us = start_us;
    p->timing.end_us = end_us;
    p->status = std::move(status);
    p->done = true;
    finished_.SignalAll();
  }
}

void AsyncCollectives::Start(int comm, absl::Span<const ByteRange> ranges, int step_index,
                             std::function<absl::Status()> run) {
  auto p = std::make_shared<Pending>();
  p->comm = comm;
  p->ranges = ranges;
  p->run = std::move(run);
  p->timing.step_index = step_index;
  // Only the executor's thread calls Start, so only it starts threads.
  if (!lanes_[comm]->thread.joinable()) {
    lanes_[comm]->thread = std::thread([this, comm] { Serve(comm); });
  }
  ++in_flight_count_;
  absl::MutexLock lock(&mu_);
  in_flight_.push_back(p);
  lanes_[comm]->queue.push_back(std::move(p));
  work_.SignalAll();
}

bool AsyncCollectives::Covers(const Pending& p, absl::Span<const ByteRange> ranges,
                              int comm) const {
  if (comm >= 0 && p.comm == comm) return true;
  for (const ByteRange& mine : p.ranges) {
    for (const ByteRange& r : ranges) {
      if (mine.Overlaps(r)) return true;
    }
  }
  return false;
}

bool AsyncCollectives::WouldBlock(absl::Span<const ByteRange> ranges, int comm) const {
  if (in_flight_count_ == 0) return false;
  absl::MutexLock lock(&mu_);
  for (const auto& p : in_flight_) {
    if (!p->done && Covers(*p, ranges, comm)) return true;
  }
  return false;
}

template <typename CoversFn>
absl::Status AsyncCollectives::WaitWhere(const CoversFn& covers) {
  absl::Status first;
  // Only this (the executor's) thread changes in_flight_, so it stays put while waiting.
  for (size_t i = 0; i < in_flight_.size();) {
    const std::shared_ptr<Pending>& p = in_flight_[i];
    if (!covers(*p)) {
      ++i;
      continue;
    }
    if (!p->done) {
      const auto start = std::chrono::steady_clock::now();
      while (!p->done) finished_.Wait(&mu_);
      blocked_seconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    if (record_timings_) timings_.push_back(p->timing);
    if (first.ok()) first = p->status;
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  in_flight_count_ = in_flight_.size();
  return first;
}

absl::Status AsyncCollectives::WaitFor(absl::Span<const ByteRange> ranges, int comm) {
  if (in_flight_count_ == 0) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  return WaitWhere([&](const Pending& p) { return Covers(p, ranges, comm); });
}

absl::Status AsyncCollectives::WaitAll() {
  absl::MutexLock lock(&mu_);
  return WaitWhere([](const Pending&) { return true; });
}

double AsyncCollectives::TakeBlockedSeconds() {
  const double out = blocked_seconds_;
  blocked_seconds_ = 0;
  return out;
}

std::vector<CollectiveTiming> AsyncCollectives::TakeTimings() {
  absl::MutexLock lock(&mu_);
  std::vector<CollectiveTiming> out;
  out.swap(timings_);
  return out;
}

}  // namespace weft
