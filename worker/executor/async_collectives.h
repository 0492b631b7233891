// Collectives that run on a thread of their communicator while the executor's thread goes on
// with the instructions after them (CPU workers; the planner starts each collective as early as
// its data allows, planner/early_collectives.h). The executor waits for a started
// collective only where an instruction touches its memory (any byte of the collective's inputs,
// outputs or scratch, read or written), where another instruction needs its communicator
// synchronously (SEND, RECV), and at the end of the step. Each communicator runs its collectives
// one at a time in the order they were started, which is program order, so every group sees the
// order a synchronous run gives; the executor only ever waits later than a synchronous run would
// have, so no new deadlock can arise.
//
// E.g.
//   AsyncCollectives async(/*communicators=*/2, /*record_timings=*/false);
//   async.Start(/*comm=*/0, ranges_of_step_7, /*step_index=*/7, [&] { return Run(s); });
//   RETURN_IF_ERROR(async.WaitFor({{other, other + n}}, /*comm=*/-1));  // no-op: disjoint
//   RETURN_IF_ERROR(async.WaitAll());
#ifndef WEFT_WORKER_EXECUTOR_ASYNC_COLLECTIVES_H_
#define WEFT_WORKER_EXECUTOR_ASYNC_COLLECTIVES_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace weft {

// Bytes [begin, end) of host memory.
struct ByteRange {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool Overlaps(const ByteRange& o) const { return begin < o.end && o.begin < end; }
};

// A started collective's run on its thread (wall clock, Unix microseconds), for the trace.
struct CollectiveTiming {
  int step_index = -1;  // as given to Start
  int64_t start_us = 0;
  int64_t end_us = 0;
};

class AsyncCollectives {
 public:
  // One thread per communicator index in [0, communicators), started with its first collective.
  // record_timings: keep each collective's CollectiveTiming for TakeTimings (the trace).
  AsyncCollectives(int communicators, bool record_timings);
  // Waits for every started collective, then stops the threads.
  ~AsyncCollectives();
  AsyncCollectives(const AsyncCollectives&) = delete;
  AsyncCollectives& operator=(const AsyncCollectives&) = delete;

  // Queues `run` on communicator `comm`'s thread; it touches `ranges`, which must outlive it (the
  // executor's per-step ranges, fixed at Initialize). Its error, if any, is returned by the wait
  // that covers it; `run` names the instruction in it.
  void Start(int comm, absl::Span<const ByteRange> ranges, int step_index,
             std::function<absl::Status()> run);

  // True when some started collective that WaitFor(ranges, comm) would wait for has not
  // finished yet, i.e. that call would block.
  bool WouldBlock(absl::Span<const ByteRange> ranges, int comm) const;

  // Waits for every started collective that touches any of `ranges` or runs on `comm` (-1: none
  // by communicator), in start order; returns the first error among them. With none started and
  // not yet waited for, returns at once without locking (the executor calls it per instruction).
  absl::Status WaitFor(absl::Span<const ByteRange> ranges, int comm);

  // Waits for every started collective; returns the first error among them.
  absl::Status WaitAll();

  // With record_timings, the timings of the collectives waited for since the last call, in the
  // order they were waited for; empty otherwise.
  std::vector<CollectiveTiming> TakeTimings();
  // Seconds the waits spent blocked since the last call (only a wait that found a collective
  // unfinished reads the clock). The executor's thread only.
  double TakeBlockedSeconds();
 private:
  struct Pending {
    int comm = 0;
    absl::Span<const ByteRange> ranges;
    std::function<absl::Status()> run;
    CollectiveTiming timing;
    bool done = false;  // guarded by mu_
    absl::Status status;
  };
  struct Lane {
    std::deque<std::shared_ptr<Pending>> queue;  // guarded by mu_
    std::thread thread;  // started and joined by the owner's thread only
  };

  void Serve(int comm);
  bool Covers(const Pending& p, absl::Span<const ByteRange> ranges, int comm) const;
  // Waits for every collective in flight that `covers`, in start order, removing each from
  // in_flight_ and recording its timing; the first error among them.
  template <typename CoversFn>
  absl::Status WaitWhere(const CoversFn& covers) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool record_timings_;
  mutable absl::Mutex mu_;
  absl::CondVar work_;      // a lane's queue grew, or stopping_
  absl::CondVar finished_;  // a Pending became done
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Lane>> lanes_;
  // Started and not yet waited for, in start order (only the executor's thread changes it).
  std::deque<std::shared_ptr<Pending>> in_flight_ ABSL_GUARDED_BY(mu_);
  // in_flight_.size(), read and written by the executor's thread only (Start and the waits), so
  // it reads it without the lock.
  size_t in_flight_count_ = 0;
  double blocked_seconds_ = 0;  // executor's thread only (the waits)
  std::vector<CollectiveTiming> timings_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_WORKER_EXECUTOR_ASYNC_COLLECTIVES_H_
