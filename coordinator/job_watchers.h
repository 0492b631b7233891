// The open WatchJob streams and their queues of live events, under a lock of their own that no
// disk or network I/O runs under: the store writer publishes each event once it is stored, and
// each stream's thread takes what queued for it.
//
// E.g.
//   JobWatchers watchers(/*max_per_job=*/64, /*max_total=*/512);
//   ASSIGN_OR_RETURN(std::shared_ptr<JobWatchers::Watcher> w, watchers.Subscribe("job-000001"));
//   watchers.Publish(event);                          // the store writer, once it is stored
//   JobWatchers::Batch batch = watchers.Next(w.get(), absl::Milliseconds(100));
#ifndef WEFT_COORDINATOR_JOB_WATCHERS_H_
#define WEFT_COORDINATOR_JOB_WATCHERS_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/job_store.h"
#include "coordinator/store_writer.h"
#include "weft/v1/job.pb.h"

namespace weft::coordinator {

class JobWatchers {
 public:
  struct Watcher {
    std::deque<v1::JobEvent> events;
    bool closed = false;  // by CloseAll
  };
  struct Batch {
    std::deque<v1::JobEvent> events;
    bool closed = false;
  };

  JobWatchers(int max_per_job, int max_total) : max_per_job_(max_per_job), max_total_(max_total) {}

  // RESOURCE_EXHAUSTED beyond either bound (the message says which); UNAVAILABLE after CloseAll.
  absl::StatusOr<std::shared_ptr<Watcher>> Subscribe(const std::string& job_id)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Unsubscribe(const std::string& job_id, const std::shared_ptr<Watcher>& watcher)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Queues the event for the job's watchers; a final state ends them (each still gets it).
  void Publish(const v1::JobEvent& event) ABSL_LOCKS_EXCLUDED(mu_);
  // Every watcher ends (the coordinator shuts down); later Subscribes are refused.
  void CloseAll() ABSL_LOCKS_EXCLUDED(mu_);
  // WatchJob: calls `emit` with every stored event of the job, then with live ones until the job
  // is final. Returns OK then, or as soon as `emit` returns false or `cancelled` (polled) returns
  // true. The replay is read and the watcher subscribed on the writer's thread, between two
  // groups of writes: no event falls between them. NOT_FOUND for an unknown job; UNAVAILABLE when
  // the coordinator shuts down first.
  absl::Status Watch(const std::string& job_id, StoreWriter* writer, JobStore* store,
                     const std::function<bool(const v1::JobEvent&)>& emit,
                     const std::function<bool()>& cancelled) ABSL_LOCKS_EXCLUDED(mu_);
  // What queued for the watcher, waiting up to `timeout` for something.
  Batch Next(Watcher* watcher, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int max_per_job_;
  const int max_total_;
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::vector<std::shared_ptr<Watcher>>> by_job_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_JOB_WATCHERS_H_
