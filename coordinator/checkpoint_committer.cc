#include "coordinator/checkpoint_committer.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint.h"
#include "common/crash_point.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {

CheckpointCommitter::CheckpointCommitter(Committed committed)
    : committed_(std::move(committed)), thread_([this] { Loop(); }) {}

CheckpointCommitter::~CheckpointCommitter() { Stop(); }

void CheckpointCommitter::Enqueue(Commit commit) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(commit));
}

bool CheckpointCommitter::Busy(const std::string& job_id) const {
  absl::MutexLock lock(&mu_);
  return committing_ == job_id || std::any_of(queue_.begin(), queue_.end(), [&](const Commit& c) {
           return c.job_id == job_id;
         });
}

void CheckpointCommitter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void CheckpointCommitter::Loop() {
  while (true) {
    Commit commit;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      commit = std::move(queue_.front());
      queue_.pop_front();
      committing_ = commit.job_id;
    }
    // Crash tests (WEFT_DEBUG_CRASH_AT): every shard is written and reported, nothing committed.
    CrashPoint(kCoordinatorBeforeCommit, commit.save.step);
    const absl::Time start = absl::Now();
    const absl::Status status = checkpoint::CommitCheckpoint(
        commit.dir, commit.save.step, commit.save.chunks, commit.keep, commit.metadata,
        commit.started_from);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (status.ok()) {
      spdlog::info("job {}: checkpoint of step {} committed: {} bytes, {:.3f} s writing + {:.3f} "
                   "s committing, {}", commit.job_id, commit.save.step, commit.save.bytes,
                   commit.save.write_seconds, seconds,
                   checkpoint::StepDir(commit.dir, commit.save.step));
      // Crash tests: committed on disk, its event (and at the last step SUCCEEDED) not stored.
      CrashPoint(kCoordinatorAfterCommit, commit.save.step);
    } else {
      spdlog::error("job {}: committing the checkpoint of step {}: {}", commit.job_id,
                    commit.save.step, status.ToString());
    }
    {
      absl::MutexLock lock(&mu_);
      committing_.clear();
    }
    committed_(commit, status, seconds);
  }
}

}  // namespace weft::coordinator
