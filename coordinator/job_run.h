// One attempt of a job, from PLANNING to its end, as a table: Apply(event) → commands. It owns
// the attempt's record, its step and checkpoint aggregators, its ranks' failures and its
// deadlines; it does no I/O, takes no lock and reads no clock (each event says when it happened),
// so every row is tested without daemons (job_run_test.cc). The Coordinator routes events here
// under its lock and executes the commands.
//
//   state      event                           commands, next state
//   PLANNING   Planned(start)                  store RUNNING, send programs → RUNNING
//   PLANNING   PlanFailed(why)                 store FAILED, release → ended
//   any        Cancel(reason)                  store message, cancel ranks → cancelling
//   RUNNING    RankDone(ok) (last rank)        store SUCCEEDED, release → ended (after commits)
//   RUNNING    RankDone(failed), WorkerLost    gather failures for failure_settle_ms, then:
//                                              restarts left (train.max_restarts; attempts
//                                              less grows): append Restart, store RESTARTING,
//                                              cancel ranks, release, requeue → ended
//                                              none left: store FAILED, cancel ranks, release
//   RUNNING    Step(report) (last rank)        append step (and eval) event
//   RUNNING    Shard(report) (last rank)       commit checkpoint
//   RUNNING    Committed(ok / failed)          append CheckpointSaved / store FAILED
//   RUNNING    Committed(ok, grow_to)          append CheckpointSaved and Resize, store
//                                              RESTARTING at the new size (a grow, not a
//                                              restart), cancel ranks, release → ended; not at
//                                              the last step, nor while failing or cancelling
//   RUNNING    ProgramFailed(rank)             store FAILED (ranks from it count done)
//   RUNNING    SendFailed(rank)                as a failure of that rank, decided at once
//   any        Tick(now)                       failures settled, cancel grace over
//   cancelling RankDone (last rank), Tick      store CANCELLED, release → ended
//
// E.g.
//   JobRun run(job, {{"worker-1", "10.0.0.1"}, {"worker-2", "10.0.0.2"}}, config, now_ms);
//   std::vector<JobRun::Command> commands = run.Apply(JobRun::Planned{load, metadata}, now_ms);
//   commands = run.Apply(JobRun::RankDone{0, true}, now_ms);
#ifndef WEFT_COORDINATOR_JOB_RUN_H_
#define WEFT_COORDINATOR_JOB_RUN_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "common/jobspec/starting_state.h"
#include "coordinator/checkpoint_aggregator.h"
#include "coordinator/step_aggregator.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

// Job.rank_errors keeps at most this many errors of an attempt, each message cut to this many
// bytes (a job of many ranks fails on all of them at once).
inline constexpr int kMaxRankErrors = 256;
inline constexpr size_t kRankErrorMessageBytes = 4096;

// The event of the job's state and message as of now_ms.
v1::JobEvent StateEventOf(const v1::Job& job, int64_t now_ms);

struct JobRunConfig {
  // After a rank's failure, how long the other ranks' failures are gathered (0: the first
  // reported decides).
  int64_t failure_settle_ms = 1000;
  // How long cancelled ranks get to confirm before the attempt ends anyway.
  int64_t cancel_grace_ms = 5000;
  // The progress watchdog: once kProgressSteps steps have completed, an attempt that completes no
  // step (nor checkpoint shard) for max(progress_floor_ms, kProgressFactor x the median time
  // between its steps) fails as a rank would, and restarts (train.max_restarts): a partition
  // between workers that heartbeats to the coordinator do not see, or a hung collective, is
  // found in a multiple of a step rather than the collective timeout. 0: no watchdog.
  int64_t progress_floor_ms = 60'000;
  static constexpr int kProgressFactor = 10;
  static constexpr int kProgressSteps = 3;
};

class JobRun {
 public:
  // A rank's worker: its id and host, for rank errors and restart events.
  struct Slot {
    std::string worker;
    std::string host;
  };

  // ---- Events ----
  // The starting state is resolved (off the coordinator's lock) and the rendezvous is open.
  struct Planned {
    CheckpointLoad start;
    std::map<std::string, std::string> checkpoint_metadata;  // recorded in each commit's index
  };
  struct PlanFailed {
    std::string why;
  };
  // Rank `rank`'s Program could not be emitted: it and the ranks after it were never sent.
  struct ProgramFailed {
    int rank = -1;
    std::string why;
  };
  // Rank `rank`'s worker stream was closed when its Program was sent.
  struct SendFailed {
    int rank = -1;
  };
  // The ranks from `rank` on were not sent (the attempt was being cancelled): they are done.
  struct Unsent {
    int rank = -1;
  };
  // A rank's TaskDone. `message`: the worker's words; `failed_at_us`: when (0: the event's time).
  struct RankDone {
    int rank = -1;
    bool ok = true;
    std::string message;
    int64_t failed_at_us = 0;
  };
  struct WorkerLost {
    int rank = -1;
    std::string why;
    bool drained = false;  // the worker said Goodbye
  };
  struct Step {
    v1::StepReport report;
  };
  struct Shard {
    v1::CheckpointReport report;
  };
  struct Committed {
    int64_t step = 0;
    absl::Status status;
    v1::CheckpointSaved saved;  // when ok
    // Train.elastic: the size the coordinator found idle workers to grow to (GrowTo); 0: none.
    int grow_to = 0;
  };
  struct Cancel {
    std::string reason;
  };
  struct Tick {};
  using Event = std::variant<Planned, PlanFailed, ProgramFailed, SendFailed, Unsent, RankDone,
                             WorkerLost, Step, Shard, Committed, Cancel, Tick>;

  // ---- Commands ----
  // Write the record (and the event, when set), then publish the event to watchers.
  struct StoreJob {
    v1::Job job;
    std::optional<v1::JobEvent> event;
  };
  // Append the event to the attempt's record, then publish it.
  struct AppendEvent {
    v1::JobEvent event;
  };
  // Emit and send every rank's Program, starting from `start`.
  struct SendPrograms {
    CheckpointLoad start;
  };
  struct CancelRanks {
    std::vector<int> ranks;
    std::string reason;
  };
  struct CommitCheckpoint {
    CompleteSave save;
    std::map<std::string, std::string> metadata;
    std::string started_from;  // the step folder the attempt loaded; empty: none
  };
  // The attempt ended: its done ranks' workers are idle, the others drain (they were told to
  // cancel) until they confirm or `drain_deadline_ms`. `next`: the job's next attempt, RESTARTING,
  // to queue first.
  struct Ended {
    v1::JobState state = v1::JOB_STATE_UNSPECIFIED;  // RESTARTING for a restart
    std::vector<int> done_ranks;
    std::vector<int> draining_ranks;
    int64_t drain_deadline_ms = 0;
    std::optional<v1::Job> next;
  };
  using Command =
      std::variant<StoreJob, AppendEvent, SendPrograms, CancelRanks, CommitCheckpoint, Ended>;

  // `job` as it was queued (PENDING or RESTARTING, its attempt set); `slots` by rank. The
  // constructor's commands (store PLANNING) come from Start.
  JobRun(v1::Job job, std::vector<Slot> slots, JobRunConfig config);
  // PLANNING: the first command.
  std::vector<Command> Start(int64_t now_ms);
  std::vector<Command> Apply(const Event& event, int64_t now_ms);

  const v1::Job& job() const { return job_; }
  int world_size() const { return static_cast<int>(slots_.size()); }
  const Slot& slot(int rank) const { return slots_[rank]; }
  // The workers of `ranks`, in order.
  std::vector<std::string> Workers(const std::vector<int>& ranks) const;
  bool ended() const { return ended_; }
  bool cancelling() const { return cancelling_; }

 private:
  struct Failure {
    int rank = -1;
    int64_t at_us = 0;
    std::string message;  // for Job.message: "rank 1 (worker-2): ..."
    v1::RankError error;
  };
  using Commands = std::vector<Command>;

  void OnPlanned(const Planned& e, int64_t now, Commands* out);
  void OnRankDone(int rank, bool ok, const std::string& failure, const std::string& error,
                  int64_t failed_at_us, int64_t now, Commands* out);
  void OnStep(const v1::StepReport& report, int64_t now, Commands* out);
  void OnShard(const v1::CheckpointReport& report, int64_t now, Commands* out);
  void OnCommitted(const Committed& e, int64_t now, Commands* out);
  // Ends the attempt for the next one at elastic size `to`, from the checkpoint of `step`.
  void Grow(int to, int64_t step, int64_t now, Commands* out);
  void OnCancel(const std::string& reason, int64_t now, Commands* out);
  void OnTick(int64_t now, Commands* out);
  // The median of step_gaps_ms_, which is not empty.
  int64_t MedianStepGapMs() const;
  // The ranks from `rank` on count done; none of them ran.
  void MarkDoneFrom(int rank);
  // The ranks from `rank` on were never sent: each is done, as a rank that finished.
  void DoneFrom(int rank, int64_t now, Commands* out);
  // The ranks done (or not).
  std::vector<int> Ranks(bool done) const;
  // Tells the ranks not done yet to stop.
  void CancelRunning(const std::string& reason, Commands* out) const;
  bool AllDone() const;
  // The gathered failures decide: the earliest is the cause, the others follow it.
  void DecideFailure(int64_t now, Commands* out);
  // Restart when train.max_restarts allows, else end FAILED.
  void Fail(int rank, const std::string& cause, int64_t now, Commands* out);
  // Moves to a final state: store it, cancel the ranks not done (unless it succeeded), release.
  void End(v1::JobState state, const std::string& message, int64_t now, Commands* out);
  void Release(v1::JobState state, int64_t now, std::optional<v1::Job> next, Commands* out);
  v1::RankError RankError(int rank, int64_t at_ms, const std::string& message) const;

  v1::Job job_;  // the stored record, without steps
  const std::vector<Slot> slots_;
  const JobRunConfig config_;
  std::vector<bool> done_;  // by rank: TaskDone received, lost, or never sent
  StepAggregator steps_;
  CheckpointAggregator saves_;
  std::map<std::string, std::string> checkpoint_metadata_;
  std::string started_from_;  // the attempt's starting step folder (CheckpointLoad::step_dir)
  int commits_in_flight_ = 0;
  bool finish_after_commits_ = false;  // every rank finished; SUCCEEDED once commits are done
  bool cancelling_ = false;
  std::string cancel_reason_;
  int64_t cancel_deadline_ms_ = 0;
  std::vector<Failure> failures_;
  int64_t settle_deadline_ms_ = 0;
  // The progress watchdog (JobRunConfig::progress_floor_ms): when the last step completed (or a
  // shard was reported), when the last step did (none yet: unset), and the times between the
  // last steps (at most 64).
  int64_t last_progress_ms_ = 0;
  std::optional<int64_t> last_step_ms_;
  std::deque<int64_t> step_gaps_ms_;
  bool ended_ = false;
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_JOB_RUN_H_
