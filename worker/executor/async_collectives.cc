#include "worker/executor/async_collectives.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/status.h"

namespace weft {
namespace {

int64_t NowUs() { return absl::ToUnixMicros(absl::Now()); }

}  // namespace

AsyncCollectives::AsyncCollectives(int communicators) {
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
    p->timing.start_us = NowUs();
    absl::Status status = p->run();
    const int64_t end_us = NowUs();
    absl::MutexLock lock(&mu_);
    p->timing.end_us = end_us;
    p->status = std::move(status);
    p->done = true;
    finished_.SignalAll();
  }
}

void AsyncCollectives::Start(int comm, std::vector<ByteRange> ranges, std::string label,
                             std::function<absl::Status()> run) {
  auto p = std::make_shared<Pending>();
  p->comm = comm;
  p->ranges = std::move(ranges);
  p->run = std::move(run);
  p->timing.label = std::move(label);
  // Only the executor's thread calls Start, so only it starts threads.
  if (!lanes_[comm]->thread.joinable()) {
    lanes_[comm]->thread = std::thread([this, comm] { Serve(comm); });
  }
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
  absl::MutexLock lock(&mu_);
  for (const auto& p : in_flight_) {
    if (!p->done && Covers(*p, ranges, comm)) return true;
  }
  return false;
}

absl::Status AsyncCollectives::Finish(const std::shared_ptr<Pending>& p) {
  const Pending* raw = p.get();
  while (!raw->done) finished_.Wait(&mu_);
  for (auto it = in_flight_.begin(); it != in_flight_.end(); ++it) {
    if (it->get() == raw) {
      in_flight_.erase(it);
      break;
    }
  }
  timings_.push_back(p->timing);
  return Annotate(p->status, p->timing.label);
}

absl::Status AsyncCollectives::WaitFor(absl::Span<const ByteRange> ranges, int comm) {
  absl::MutexLock lock(&mu_);
  absl::Status first;
  // Copies: Finish erases from in_flight_.
  const std::deque<std::shared_ptr<Pending>> started = in_flight_;
  for (const auto& p : started) {
    if (!Covers(*p, ranges, comm)) continue;
    absl::Status s = Finish(p);
    if (first.ok()) first = std::move(s);
  }
  return first;
}

absl::Status AsyncCollectives::WaitAll() {
  absl::MutexLock lock(&mu_);
  absl::Status first;
  const std::deque<std::shared_ptr<Pending>> started = in_flight_;
  for (const auto& p : started) {
    absl::Status s = Finish(p);
    if (first.ok()) first = std::move(s);
  }
  return first;
}

std::vector<CollectiveTiming> AsyncCollectives::TakeTimings() {
  absl::MutexLock lock(&mu_);
  std::vector<CollectiveTiming> out;
  out.swap(timings_);
  return out;
}

}  // namespace weft
