// The worker daemon's runtime, in two layers:
//
//  - Task: runs one Assignment to completion on its own thread (communicators, executor, one
//    StepReport per step, exactly one TaskDone). It knows nothing of gRPC: what it needs comes
//    from a TaskEnvironment and what it says goes to a callback, so tests drive it directly.
//  - Worker: the WorkerService stream client. Says Hello, sends heartbeats, turns Assignment and
//    Cancel into Task calls, forwards the task's messages, and reconnects with backoff when the
//    coordinator goes away (cancelling the running task: its peers are being torn down too).
//    With a TaskLogSink it sends the lines the process logs while a task runs as that task's
//    (LogLines), the last of them before the task's TaskDone.
//
// E.g.
//   GlooTaskEnvironment env(channel, "127.0.0.1", absl::Seconds(300), &Executor::Create);
//   Worker worker(options, LocalCpuDevice(), &env);
//   std::thread t([&] { status = worker.Run(); });
//   ...
//   worker.Shutdown();  // on SIGTERM
//   t.join();
#ifndef WEFT_WORKER_WORKER_H_
#define WEFT_WORKER_WORKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/path_roots.h"
#include "common/steady_stamp.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "weft/v1/service.grpc.pb.h"
#include "worker/comm/communicator.h"
#include "worker/executor/executor.h"
#include "worker/kernels/kernels.h"
#include "worker/task_log.h"
#include "worker/worker_metrics.h"

namespace weft {

// Executor::Create, or a fake in tests.
using ExecutorFactory = std::function<absl::StatusOr<std::unique_ptr<Executor>>(
    const v1::Program&, CommunicatorFactory*)>;

// The communicators of one attempt and a way to stop waiting for peers that will not come.
struct AttemptComms {
  std::unique_ptr<CommunicatorFactory> factory;  // may be null for a program with no groups
  std::function<void()> cancel;                  // may be empty
};

// What a Task needs from the machine it runs on.
class TaskEnvironment {
 public:
  virtual ~TaskEnvironment() = default;
  virtual absl::StatusOr<AttemptComms> MakeComms(const v1::Assignment& assignment) = 0;
  virtual absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(
      const v1::Program& program, CommunicatorFactory* comm_factory) = 0;
};

// The daemon's environment: Gloo communicators bootstrapped through the coordinator's
// RendezvousService (scope = Assignment.rendezvous_scope), bound to `host`.
//
// E.g.
//   GlooTaskEnvironment env(channel, "10.0.0.5", absl::Seconds(300), &Executor::Create);
class GlooTaskEnvironment : public TaskEnvironment {
 public:
  GlooTaskEnvironment(std::shared_ptr<grpc::ChannelInterface> coordinator, std::string host,
                      absl::Duration collective_timeout, ExecutorFactory make_executor);
  absl::StatusOr<AttemptComms> MakeComms(const v1::Assignment& assignment) override;
  absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(
      const v1::Program& program, CommunicatorFactory* comm_factory) override;

 private:
  const std::shared_ptr<grpc::ChannelInterface> coordinator_;
  const std::string host_;
  const absl::Duration collective_timeout_;
  const ExecutorFactory make_executor_;
};

// One Assignment run on its own thread, steps Program.start_step+1 .. steps. `report` receives
// every StepReport (with the bytes the attempt's communicators sent during the step, and the
// step's TraceSpans when the program is traced), after the StepReport of each step that saves a
// checkpoint (SavesCheckpoint) a CheckpointReport with the chunks this rank wrote, and then exactly
// one TaskDone (ok, or the first error with context: "rank 2: step 3: all_reduce on group 1 ...",
// or "cancelled: <reason>"); it is called from the task's thread.
//
// E.g.
//   Task task(assignment, &env, [&](const v1::WorkerMessage& m) { stream.Send(m); });
//   task.Start();
//   task.Cancel("job cancelled by user");
//   task.Join();
// How long a cancelled task may stay in a collective before its worker abandons it.
inline constexpr absl::Duration kAbandonAfter = absl::Seconds(2);
// Shutdown waits this long for the coordinator to end the stream after the Goodbye, then cancels
// it.
inline constexpr absl::Duration kGoodbyeGrace = absl::Seconds(2);

class Task {
 public:
  using Report = std::function<void(const v1::WorkerMessage&)>;

  Task(v1::Assignment assignment, TaskEnvironment* env, Report report);
  ~Task();  // cancels ("worker shutting down") and joins

  void Start();
  // Stops at the next instruction boundary (or the rendezvous in progress). Thread-safe,
  // idempotent; the first reason wins.
  void Cancel(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);
  // Its TaskDone is made (it may still be on its way out: Join waits for it to be sent). The
  // worker may start its next task from then on.
  bool finished() const { return finished_.HasBeenNotified(); }
  void Join();
  // Lets the thread run on unowned (the process is ending). The Task must then be leaked.
  void Detach();
  // When Cancel was first called; nullopt before.
  std::optional<absl::Time> cancelled_at() const ABSL_LOCKS_EXCLUDED(mu_);
  std::string cancel_reason() const ABSL_LOCKS_EXCLUDED(mu_);
  // From now on nothing it reports is sent: the worker has answered for it (Worker's
  // AbandonStuckTask).
  void Abandon() { abandoned_.store(true); }

  const std::string& job_id() const { return assignment_.program().job_id(); }
  int attempt() const { return assignment_.program().attempt(); }
  int rank() const { return assignment_.program().rank(); }

 private:
  void Run();
  // Makes the attempt's communicators and executor into `comms` and `executor` (the caller's, so
  // that they outlive the error they may end with), then runs the steps.
  absl::Status RunSteps(AttemptComms& comms, std::unique_ptr<Executor>& executor);
  // Writes this rank's shard of step `step` and sends its CheckpointReport.
  absl::Status SaveCheckpoint(Executor* executor, int64_t step);
  bool cancelled() const ABSL_LOCKS_EXCLUDED(mu_);
  // report_, unless abandoned.
  void Emit(const v1::WorkerMessage& msg);

  const v1::Assignment assignment_;
  TaskEnvironment* const env_;  // not owned
  const Report report_;
  std::thread thread_;
  absl::Notification finished_;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time cancelled_at_ ABSL_GUARDED_BY(mu_);
  std::string cancel_reason_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> abandoned_{false};
  Executor* executor_ ABSL_GUARDED_BY(mu_) = nullptr;        // owned by RunSteps while set
  std::function<void()> cancel_comms_ ABSL_GUARDED_BY(mu_);  // from AttemptComms
};

// Whether a rank saves a checkpoint after `step`: Program.checkpoint_dir is set and the step is a
// multiple of checkpoint_every, or the last one.
bool SavesCheckpoint(const v1::Program& program, int64_t step);

// A device as the hello reports it.
v1::DeviceInfo ToDeviceInfo(const DeviceDescription& d);
// This machine's CPU as a DeviceInfo: model from /proc/cpuinfo, memory and cores from sysconf.
v1::DeviceInfo LocalCpuDevice();
// FAILED_PRECONDITION unless the program runs on `kind` ("cpu", "cuda"): a worker never runs a
// program meant for another device (the scheduler does not place one there either).
absl::Status CheckProgramDevice(const v1::Program& program, const std::string& kind);

struct WorkerOptions {
  std::string coordinator;  // host:port
  std::string host = "127.0.0.1";  // what peers dial for collectives; sent in Hello
  // Zero: use Welcome.heartbeat_interval_ms.
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // Reconnect delays double from the first to the largest; give up after reconnect_deadline
  // without a working stream.
  absl::Duration reconnect_first_delay = absl::Milliseconds(500);
  absl::Duration reconnect_max_delay = absl::Seconds(10);
  absl::Duration reconnect_deadline = absl::Minutes(10);
  // --data_root / --checkpoint_root: a program naming a path outside them is refused
  // (CheckProgramPaths) before it runs.
  PathRoots roots;
  // Told, on Run's thread, when a stream gets its Welcome (connected: "registered with
  // HOST:PORT as worker-1") and when it ends or an attempt to open one fails (not connected: why,
  // and when the next try is): the daemon's systemd READY=1 and STATUS=. Empty: nobody.
  std::function<void(bool connected, const std::string& what)> on_connection;
  // The sink on the default logger that takes the lines logged while a task runs (the daemon
  // adds it to its logger); each task's go to the coordinator. Null: none are sent.
  std::shared_ptr<TaskLogSink> task_log;
  // Observes every message the worker sends (its Prometheus metrics, worker_metrics.h), and
  // where they are served (Hello.metrics_address). Null / empty: none.
  std::shared_ptr<WorkerMetrics> metrics;
  std::string metrics_address;
  // --memory_limit: the memory this worker offers jobs, when less than its device has: what it
  // tells the coordinator in Hello (DeviceInfo.memory_bytes), which refuses a job whose planned
  // peak does not fit, and which the search of a `mesh: {auto: true}` job plans within. 0: the
  // device's.
  int64_t memory_limit_bytes = 0;
};

// The WorkerService stream client. One assignment at a time: another one while a task runs is
// answered with TaskDone{ok=false, "busy ..."}.
class Worker {
 public:
  // Over a plaintext channel without a token to options.coordinator; the daemon passes a stub
  // of its own channel, with its credentials.
  Worker(WorkerOptions options, v1::DeviceInfo device, TaskEnvironment* env);
  Worker(WorkerOptions options, v1::DeviceInfo device, TaskEnvironment* env,
         std::unique_ptr<v1::WorkerService::StubInterface> stub);
  ~Worker();

  // Serves until Shutdown() (then OK) or until no stream could be opened for
  // reconnect_deadline (UNAVAILABLE).
  absl::Status Run();
  // Says Goodbye (`reason`) as the stream's last message, so that the coordinator lists this
  // worker as drained, not lost, and fails the rank it runs with the reason; waits (at most
  // kGoodbyeGrace) for the coordinator to end the stream, then cancels what is left. Run returns
  // soon after. Thread-safe.
  void Shutdown(const std::string& reason = "the worker is shutting down")
      ABSL_LOCKS_EXCLUDED(mu_);

  // The id the coordinator gave this worker on the current stream ("" before the first Welcome).
  std::string worker_id() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether no task runs: none was assigned, or the last one finished (its TaskDone sent, or
  // dropped with the stream it belonged to). For tests.
  bool idle() const ABSL_LOCKS_EXCLUDED(mu_);
  // For the daemon's systemd watchdog: OK while the stream loop is alive. Connected, a heartbeat
  // must have gone out within `window` (or two heartbeat intervals, if longer): a heartbeat
  // thread stuck behind the stream's write lock is not. Between streams it is reconnecting,
  // which reconnect_deadline bounds.
  absl::Status CheckAlive(absl::Duration window) const;

 private:
  // One stream session: OK if it got a Welcome (the coordinator was reachable), UNAVAILABLE if
  // not; returns when the stream ends.
  absl::Status Serve();
  void Handle(const v1::CoordinatorMessage& msg);
  void StartTask(const v1::Assignment& assignment);
  // Writes on the stream of `session`; dropped (and logged) when that stream is gone, so a task
  // cancelled by a disconnect never reports on the next stream.
  void Send(const v1::WorkerMessage& msg, int64_t session) ABSL_LOCKS_EXCLUDED(write_mu_);
  int64_t session() const ABSL_LOCKS_EXCLUDED(write_mu_);
  // Cancels the running task (if any) and, with `join`, waits for it.
  void CancelTask(const std::string& reason, bool join) ABSL_LOCKS_EXCLUDED(mu_);
  // Gloo cannot interrupt a collective, so a rank whose peer is gone or stopped stays in one until
  // the collective timeout (--collective_timeout_s) even when cancelled. A task cancelled
  // kAbandonAfter ago and still running is abandoned: the worker sends its TaskDone (cancelled)
  // itself, so the coordinator frees it for the next attempt, drops what the task reports later,
  // and joins its thread once the collective times out (its memory is held until then). Called
  // from the heartbeat thread.
  void AbandonStuckTask(int64_t session) ABSL_LOCKS_EXCLUDED(mu_);

  const WorkerOptions options_;
  const v1::DeviceInfo device_;
  TaskEnvironment* const env_;  // not owned
  const std::unique_ptr<v1::WorkerService::StubInterface> stub_;

  mutable absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification shutdown_requested_;
  grpc::ClientContext* stream_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;  // owned by Serve
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Task> task_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Task>> abandoned_ ABSL_GUARDED_BY(mu_);  // AbandonStuckTask

  // Serializes writes on the stream (the reader, the heartbeat thread and the task all write).
  mutable absl::Mutex write_mu_;
  int64_t session_ ABSL_GUARDED_BY(write_mu_) = 0;  // bumped when a stream opens or closes
  grpc::ClientReaderWriterInterface<v1::WorkerMessage, v1::CoordinatorMessage>* stream_
      ABSL_GUARDED_BY(write_mu_) = nullptr;  // owned by Serve

  // For CheckAlive, read without a lock: the current stream's heartbeat interval (0 between
  // streams) and when its last heartbeat went out (or its Welcome came).
  std::atomic<int64_t> heartbeat_interval_ns_{0};
  SteadyStamp last_heartbeat_;
};

}  // namespace weft

#endif  // WEFT_WORKER_WORKER_H_
