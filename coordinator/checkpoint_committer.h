// The committer thread: commits complete saves (every rank of an attempt reported its shard of a
// step) in order, off the coordinator's lock, with checkpoint::CommitCheckpoint, then tells the
// coordinator the outcome. A restarting job waits while a save of its failed attempt is queued or
// being committed (Busy): its next attempt starts from the newest checkpoint, which that save may
// still make.
//
// E.g.
//   CheckpointCommitter committer([&](const Commit& c, const absl::Status& s, double seconds) {
//     ... route JobRun::Committed under the coordinator's lock ...
//   });
//   committer.Enqueue(Commit{"job-000001", 0, "/ckpt", 3, metadata, save});
#ifndef WEFT_COORDINATOR_CHECKPOINT_COMMITTER_H_
#define WEFT_COORDINATOR_CHECKPOINT_COMMITTER_H_

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/checkpoint_aggregator.h"

namespace weft::coordinator {

// A complete save waiting for the committer thread.
struct Commit {
  std::string job_id;
  int attempt = 0;
  std::string dir;
  int keep = 0;
  std::map<std::string, std::string> metadata;
  CompleteSave save;
  std::string started_from;  // checkpoint::CommitCheckpoint's
};

class CheckpointCommitter {
 public:
  // `committed` runs on the committer thread, after the commit is no longer Busy; `seconds` is
  // the commit's own time (the ranks' writing is in the save).
  using Committed = std::function<void(const Commit&, const absl::Status&, double seconds)>;
  explicit CheckpointCommitter(Committed committed);
  ~CheckpointCommitter();
  CheckpointCommitter(const CheckpointCommitter&) = delete;
  CheckpointCommitter& operator=(const CheckpointCommitter&) = delete;

  void Enqueue(Commit commit) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a save of the job is queued or being committed.
  bool Busy(const std::string& job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the thread once the commit in progress (if any) is done; saves still queued are not
  // committed, and readers ignore their staging folders. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  const Committed committed_;
  mutable absl::Mutex mu_;
  std::deque<Commit> queue_ ABSL_GUARDED_BY(mu_);
  std::string committing_ ABSL_GUARDED_BY(mu_);  // the job whose commit is in progress
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // owned; joined by Stop
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_CHECKPOINT_COMMITTER_H_
