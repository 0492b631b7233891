// The lines a worker process logs while it runs a task, on their way to the coordinator as that
// task's (LogLines on the worker's stream, for `weftctl logs`): a spdlog sink on the default
// logger, beside the stderr sink, which still gets every line. Between Begin and End every line
// of the process counts as the task's, whichever thread logs it (the executor's, the
// communicators', the stream's); lines outside a task are not sent.
//
// Lines are batched: a flusher thread sends what is pending every flush_every, or as soon as
// batch_lines are pending, in messages of at most batch_lines lines; End sends the rest before it
// returns, so the Worker calls it before the task's TaskDone and a rank's last error line reaches
// the coordinator first. Bounded: a line is cut at max_line_bytes (between characters, invalid
// UTF-8 replaced), and while sending lags (a slow coordinator) at most max_pending lines wait;
// later ones are dropped and counted by one marker line.
//
// E.g.
//   auto task_log = std::make_shared<TaskLogSink>();
//   spdlog::default_logger()->sinks().push_back(task_log);  // before any other thread logs
//   task_log->Begin("job-000001", /*attempt=*/0, /*rank=*/1, send);  // the task starts
//   spdlog::error("loading fc0.weight: checksum mismatch");          // sent as rank 1's
//   task_log->End("job-000001", 0, 1);                                // sent; then its TaskDone
#ifndef WEFT_WORKER_TASK_LOG_H_
#define WEFT_WORKER_TASK_LOG_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "spdlog/details/null_mutex.h"
#include "spdlog/sinks/base_sink.h"
#include "weft/v1/service.pb.h"

namespace weft {

struct TaskLogOptions {
  int batch_lines = 64;                                  // per message, and a flush at once
  absl::Duration flush_every = absl::Milliseconds(250);  // the longest a line waits
  int max_pending = 4096;                                // lines waiting; later ones dropped
  size_t max_line_bytes = 4096;                          // a longer line is cut
};

// The sink's state has mu_, so the base sink needs no mutex of its own (its formatter is never
// used or set). Lock order: lifecycle_mu_, send_mu_, then whatever `send` takes (the stream's
// lock), then mu_. Nothing is logged under mu_.
class TaskLogSink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  // Sends one LogLines message on the task's stream; called on the flusher thread or End's.
  using Send = std::function<void(const v1::WorkerMessage&)>;

  explicit TaskLogSink(TaskLogOptions options = {});
  ~TaskLogSink() override;  // stops the flusher without sending
  TaskLogSink(const TaskLogSink&) = delete;
  TaskLogSink& operator=(const TaskLogSink&) = delete;

  // From now on the process's lines are this task's, sent through `send`. A task still begun is
  // ended first.
  void Begin(const std::string& job_id, int attempt, int rank, Send send)
      ABSL_LOCKS_EXCLUDED(lifecycle_mu_, send_mu_, mu_);
  // Sends the task's pending lines and stops taking lines; a no-op unless that task is begun.
  void End(const std::string& job_id, int attempt, int rank)
      ABSL_LOCKS_EXCLUDED(lifecycle_mu_, send_mu_, mu_);

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override ABSL_LOCKS_EXCLUDED(mu_);
  void flush_() override {}

 private:
  // Sends every waiting line (and the marker of those dropped) in batches; with `last`, lines
  // logged after these are no longer taken.
  void SendPendingLocked(bool last) ABSL_EXCLUSIVE_LOCKS_REQUIRED(send_mu_)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the current task, if any: the flusher stopped, its lines sent.
  void EndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(lifecycle_mu_) ABSL_LOCKS_EXCLUDED(send_mu_, mu_);
  void FlushLoop() ABSL_LOCKS_EXCLUDED(send_mu_, mu_);

  const TaskLogOptions options_;

  // Begin and End one at a time (the task's thread ends it, or the heartbeat thread when it
  // abandons the task, while the stream's reader may begin the next).
  absl::Mutex lifecycle_mu_ ABSL_ACQUIRED_BEFORE(send_mu_);
  std::thread flusher_ ABSL_GUARDED_BY(lifecycle_mu_);  // owned; runs between Begin and End

  absl::Mutex send_mu_ ABSL_ACQUIRED_BEFORE(mu_);  // one sender at a time, in order
  Send send_ ABSL_GUARDED_BY(send_mu_);

  absl::Mutex mu_;
  bool active_ ABSL_GUARDED_BY(mu_) = false;  // between Begin and End: lines are taken
  bool stop_flusher_ ABSL_GUARDED_BY(mu_) = false;
  std::string job_id_ ABSL_GUARDED_BY(mu_);
  int attempt_ ABSL_GUARDED_BY(mu_) = 0;
  int rank_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<v1::LogLine> pending_ ABSL_GUARDED_BY(mu_);
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;  // since the last send
};

}  // namespace weft

#endif  // WEFT_WORKER_TASK_LOG_H_
