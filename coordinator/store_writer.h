// The coordinator's one writer of job records and events. The coordinator queues writes under
// its lock and goes on; this thread stores them, grouping what queued while the last group was
// written into one transaction (one fsync for many step reports), then hands each stored event
// to the watchers, in queue order: a watcher never sees an event the store does not hold. No disk
// write runs under the coordinator's lock.
//
// Readers see their own writes: a read of the store first waits (Sync) until every write queued
// before it is stored. The backlog is bounded: a producer that outpaces the disk (a worker that
// reports thousands of tiny steps a second) waits in AwaitRoom, off the coordinator's lock, before
// it reads its next message, so gRPC's flow control holds the worker's next report. Without the
// bound the queue grows without end and a Sync waits behind all of it. WatchJob's replay runs on this thread (RunInOrder), between two groups, so
// no event falls between the stored ones it replays and the live ones it is handed.
//
// E.g.
//   StoreWriter writer(store.get(), [&](const v1::JobEvent& e) { watchers.Publish(e); });
//   writer.Write(JobWrite{job.id(), job.attempt(), job, event});   // under the coordinator's lock
//   writer.Sync();                                                  // off it, before a read
//   ASSIGN_OR_RETURN(v1::Job stored, store->GetJob(job.id()));
#ifndef WEFT_COORDINATOR_STORE_WRITER_H_
#define WEFT_COORDINATOR_STORE_WRITER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <variant>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/job_store.h"
#include "weft/v1/job.pb.h"

namespace weft::coordinator {

class StoreWriter {
 public:
  // Writes queued and not yet stored past which AwaitRoom waits: about a tenth of a second of
  // step events on this project's CI machine.
  static constexpr int64_t kDefaultMaxBacklog = 2048;
  // How often writes the store could not take are tried again.
  static constexpr absl::Duration kRetryEvery = absl::Seconds(1);

  // `store` outlives the writer. `published` runs on the writer thread for each stored event.
  StoreWriter(JobStore* store, std::function<void(const v1::JobEvent&)> published,
              int64_t max_backlog = kDefaultMaxBacklog);
  ~StoreWriter();
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  // Queues the write; never waits for the disk. After Stop it is written at once.
  void Write(JobWrite write) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every write queued before the call is stored (or failed for good: it is logged).
  // While the store cannot take writes (its disk is full), returns that at once (RESOURCE_EXHAUSTED
  // for a full disk, else UNAVAILABLE), saying how many writes wait: the reader answers with it
  // rather than with a stale record.
  absl::Status Sync() ABSL_LOCKS_EXCLUDED(mu_);
  // OK, or why writes wait to be stored (the store failed them with IsRetriableStoreError: a full
  // disk, an I/O error); the writer retries them, oldest first, every kRetryEvery until they are
  // stored.
  absl::Status health() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits while more than max_backlog writes are queued and not yet stored. Never call it under
  // a lock the writer's `published` takes.
  void AwaitRoom() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs `fn` on the writer thread once every write queued before it is stored, and waits for
  // it. After Stop it runs on the caller's thread.
  void RunInOrder(const std::function<void()>& fn) ABSL_LOCKS_EXCLUDED(mu_);
  // Stores what is queued, then stops the thread. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Groups written, and the largest, since the start (the benchmark reports them).
  int64_t groups_written() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t largest_group() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Item = std::variant<JobWrite, const std::function<void()>*>;
  void Loop();
  // Stores the writes, then publishes the events of those stored. Returns those the store could
  // not take now (UNAVAILABLE), in order, and sets *why to the first such failure; a write that
  // fails otherwise is logged and dropped.
  std::vector<JobWrite> WriteGroup(std::vector<JobWrite> group, absl::Status* why);

  JobStore* const store_;
  const std::function<void(const v1::JobEvent&)> published_;
  const int64_t max_backlog_;
  mutable absl::Mutex mu_;
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;   // items ever queued
  int64_t written_ ABSL_GUARDED_BY(mu_) = 0;  // items ever done, in queue order
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status failing_ ABSL_GUARDED_BY(mu_);  // health()
  int64_t groups_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t largest_group_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // owned; joined by Stop
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_STORE_WRITER_H_
