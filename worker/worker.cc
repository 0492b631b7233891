#include "worker/worker.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/coordinator_channel.h"
#include "common/crash_point.h"
#include "common/path_roots.h"
#include "common/status.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/spdlog.h"
#include "worker/comm/gloo/gloo_communicator.h"
#include "worker/comm/gloo/rendezvous_store.h"
#include "worker/kernels/backend.h"
#include "worker/rendezvous_factory.h"

namespace weft {
namespace {

v1::WorkerMessage DoneMessage(const v1::Program& program, bool ok, const std::string& message) {
  v1::WorkerMessage msg;
  v1::TaskDone* done = msg.mutable_done();
  done->set_job_id(program.job_id());
  done->set_attempt(program.attempt());
  done->set_rank(program.rank());
  done->set_ok(ok);
  done->set_message(message);
  if (!ok) {
    const absl::Time now = absl::Now();
    done->set_failed_at_ms(absl::ToUnixMillis(now));
    done->set_failed_at_us(absl::ToUnixMicros(now));
  }
  return msg;
}

}  // namespace

// ---- GlooTaskEnvironment ----

GlooTaskEnvironment::GlooTaskEnvironment(std::shared_ptr<grpc::ChannelInterface> coordinator,
                                         std::string host, absl::Duration collective_timeout,
                                         ExecutorFactory make_executor)
    : coordinator_(std::move(coordinator)),
      host_(std::move(host)),
      collective_timeout_(collective_timeout),
      make_executor_(std::move(make_executor)) {}

absl::StatusOr<AttemptComms> GlooTaskEnvironment::MakeComms(const v1::Assignment& assignment) {
  auto factory = std::make_unique<RendezvousFactory<GlooCommunicatorFactory>>(
      std::make_unique<RendezvousStore>(coordinator_, assignment.rendezvous_scope(),
                                        assignment.rendezvous_ticket(),
                                        collective_timeout_),
      assignment.program().rank(), host_, collective_timeout_);
  RendezvousStore* store = factory->store();
  AttemptComms comms;
  comms.factory = std::move(factory);
  comms.cancel = [store] { store->Cancel(); };
  return comms;
}

absl::StatusOr<std::unique_ptr<Executor>> GlooTaskEnvironment::MakeExecutor(
    const v1::Program& program, CommunicatorFactory* comm_factory) {
  RETURN_IF_ERROR(CheckProgramDevice(program, "cpu"));
  return make_executor_(program, comm_factory);
}

// ---- Task ----

Task::Task(v1::Assignment assignment, TaskEnvironment* env, Report report)
    : assignment_(std::move(assignment)), env_(env), report_(std::move(report)) {}

Task::~Task() {
  Cancel("worker shutting down");
  Join();
}

void Task::Start() { thread_ = std::thread([this] { Run(); }); }

void Task::Join() {
  if (thread_.joinable()) thread_.join();
}

void Task::Detach() {
  if (thread_.joinable()) thread_.detach();
}

void Task::Emit(const v1::WorkerMessage& msg) {
  if (abandoned_.load()) return;
  report_(msg);
}

std::optional<absl::Time> Task::cancelled_at() const {
  absl::MutexLock lock(&mu_);
  if (!cancelled_) return std::nullopt;
  return cancelled_at_;
}

std::string Task::cancel_reason() const {
  absl::MutexLock lock(&mu_);
  return cancel_reason_;
}

void Task::Cancel(const std::string& reason) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) return;
  cancelled_ = true;
  cancelled_at_ = absl::Now();
  cancel_reason_ = reason;
  if (executor_ != nullptr) executor_->Cancel();
  if (cancel_comms_) cancel_comms_();
}

bool Task::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void Task::Run() {
  const v1::Program& program = assignment_.program();
  spdlog::info("job {} attempt {} rank {}: starting ({} steps)", program.job_id(),
               program.attempt(), program.rank(), program.steps());
  // The attempt's communicators and executor outlive RunSteps: closing their connections is what
  // tells the peers, so the TaskDone (and the time of a failure in it) is made first.
  AttemptComms comms;
  std::unique_ptr<Executor> executor;
  const absl::Status status = RunSteps(comms, executor);
  v1::WorkerMessage done;
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) {
      done = DoneMessage(program, false, absl::StrCat(kCancelledPrefix, cancel_reason_));
    } else if (status.ok()) {
      done = DoneMessage(program, true, "");
    } else {
      done = DoneMessage(program, false, absl::StrCat("rank ", program.rank(), ": ",
                                                      status.message()));
    }
  }
  executor.reset();
  comms = AttemptComms();
  if (done.done().ok()) {
    spdlog::info("job {} attempt {} rank {}: done", program.job_id(), program.attempt(),
                 program.rank());
  } else {
    spdlog::warn("job {} attempt {}: {}", program.job_id(), program.attempt(),
                 done.done().message());
  }
  // Finished before the TaskDone leaves: the coordinator may answer it with the worker's next
  // assignment at once, and StartTask must then find this task finished (it joins the thread,
  // which by then only sends the TaskDone), not busy.
  finished_.Notify();
  Emit(done);
}

absl::Status Task::RunSteps(AttemptComms& comms, std::unique_ptr<Executor>& executor) {
  const v1::Program& program = assignment_.program();
  ASSIGN_OR_RETURN(comms, env_->MakeComms(assignment_));
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError(cancel_reason_);
    cancel_comms_ = comms.cancel;
  }
  absl::Cleanup forget_comms = [this] {
    absl::MutexLock lock(&mu_);
    cancel_comms_ = nullptr;
  };
  auto created = env_->MakeExecutor(program, comms.factory.get());
  if (!created.ok()) return Annotate(created.status(), "loading the program");
  executor = std::move(created).value();
  {
    absl::MutexLock lock(&mu_);
    executor_ = executor.get();
    if (cancelled_) executor_->Cancel();
  }
  absl::Cleanup forget_executor = [this] {
    absl::MutexLock lock(&mu_);
    executor_ = nullptr;
  };
  RETURN_IF_ERROR(Annotate(executor->Initialize(), "initializing"));
  // Every communicator of the attempt comes from comms.factory, so its total over the step is
  // this rank's traffic for the step.
  auto bytes_sent = [&comms] {
    return comms.factory != nullptr ? comms.factory->bytes_sent() : int64_t{0};
  };
  for (int64_t step = program.start_step() + 1; step <= program.steps(); ++step) {
    if (cancelled()) return absl::CancelledError("cancelled");
    const int64_t sent_before = bytes_sent();
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<float> loss = executor->RunStep(step);
    if (!loss.ok()) return Annotate(loss.status(), absl::StrCat("step ", step));
    // Every rank holds the same loss and gradient norm, so every rank stops here with the same
    // message.
    if (!std::isfinite(*loss)) {
      return absl::FailedPreconditionError(
          absl::StrCat("step ", step, ": the loss is ", std::isnan(*loss) ? "nan" : "inf",
                       "; training stops here, before the step is reported or saved"));
    }
    const std::optional<double> grad_norm = executor->last_step_grad_norm();
    if (grad_norm && !std::isfinite(*grad_norm)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step, ": the gradient norm is ", std::isnan(*grad_norm) ? "nan" : "inf",
          " (the loss was ", *loss, "); training stops here, before the step is reported or "
          "saved"));
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    // The step's own traffic and time: an evaluation after it is neither.
    const int64_t sent = bytes_sent() - sent_before;
    std::optional<double> eval_loss;
    if (EvaluatesAfter(program, step)) {
      absl::StatusOr<double> evaluated = executor->RunEval();
      if (!evaluated.ok()) {
        return Annotate(evaluated.status(), absl::StrCat("evaluation after step ", step));
      }
      if (!std::isfinite(*evaluated)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "evaluation after step ", step, ": the eval loss is ",
            std::isnan(*evaluated) ? "nan" : "inf",
            "; training stops here, before the step is reported or saved"));
      }
      eval_loss = *evaluated;
    }
    v1::WorkerMessage msg;
    v1::StepReport* report = msg.mutable_step();
    report->set_job_id(program.job_id());
    report->set_attempt(program.attempt());
    report->set_rank(program.rank());
    report->set_step(step);
    report->set_loss(*loss);
    report->set_lr(executor->last_step_lr());
    if (grad_norm) report->set_grad_norm(*grad_norm);
    if (eval_loss) report->set_eval_loss(*eval_loss);
    report->set_step_seconds(took.count());
    report->set_bytes_sent(sent);
    report->set_peak_bytes(executor->last_step_peak_bytes());
    const StepTimes times = executor->last_step_times();
    report->set_data_seconds(times.data_seconds);
    report->set_communication_seconds(times.communication_seconds);
    // The step's timeline (Program.trace), sent with its report.
    for (v1::TraceSpan& span : executor->TakeSpans()) *report->add_spans() = std::move(span);
    Emit(msg);
    if (SavesCheckpoint(program, step)) RETURN_IF_ERROR(SaveCheckpoint(executor.get(), step));
  }
  return absl::OkStatus();
}

absl::Status Task::SaveCheckpoint(Executor* executor, int64_t step) {
  const v1::Program& program = assignment_.program();
  if (cancelled()) return absl::CancelledError("cancelled");
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::vector<checkpoint::IndexedChunk>> chunks =
      executor->WriteCheckpointShard(step);
  if (!chunks.ok()) return Annotate(chunks.status(), absl::StrCat("checkpoint of step ", step));
  // Crash tests (WEFT_DEBUG_CRASH_AT): the shard is on disk, the coordinator does not know yet.
  CrashPoint(kWorkerAfterShard, step);
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  v1::WorkerMessage msg;
  v1::CheckpointReport* report = msg.mutable_checkpoint();
  report->set_job_id(program.job_id());
  report->set_attempt(program.attempt());
  report->set_rank(program.rank());
  report->set_step(step);
  int64_t bytes = 0;
  for (const checkpoint::IndexedChunk& c : *chunks) {
    checkpoint::ChunkToProto(c, report->add_chunks());
    bytes += c.chunk.end - c.chunk.begin;
  }
  report->set_bytes(bytes);
  report->set_seconds(took.count());
  Emit(msg);
  return absl::OkStatus();
}

bool SavesCheckpoint(const v1::Program& program, int64_t step) {
  if (program.checkpoint_dir().empty()) return false;
  return step == program.steps() ||
         (program.checkpoint_every() > 0 && step % program.checkpoint_every() == 0);
}

// ---- Devices ----

v1::DeviceInfo ToDeviceInfo(const DeviceDescription& d) {
  v1::DeviceInfo device;
  device.set_kind(d.kind);
  device.set_name(d.name);
  device.set_memory_bytes(d.memory_bytes);
  device.set_cores(d.cores);
  device.set_compute_capability(d.compute_capability);
  return device;
}

v1::DeviceInfo LocalCpuDevice() {
  absl::StatusOr<DeviceDescription> cpu = ProbeDevice("cpu");
  return ToDeviceInfo(cpu.ok() ? *cpu : DeviceDescription{"cpu", "cpu"});
}

absl::Status CheckProgramDevice(const v1::Program& program, const std::string& kind) {
  const std::string wants = program.device().empty() ? "cpu" : program.device();
  if (wants == kind) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("job ", program.job_id(), " rank ",
                                                    program.rank(), " needs a ", wants,
                                                    " worker; this worker runs on ", kind));
}

// ---- Worker ----

Worker::Worker(WorkerOptions options, v1::DeviceInfo device, TaskEnvironment* env)
    : Worker(options, std::move(device), env,
             v1::WorkerService::NewStub(NewCoordinatorChannel(options.coordinator, {}))) {}

Worker::Worker(WorkerOptions options, v1::DeviceInfo device, TaskEnvironment* env,
               std::unique_ptr<v1::WorkerService::StubInterface> stub)
    : options_(std::move(options)),
      device_(std::move(device)),
      env_(env),
      stub_(std::move(stub)) {}

Worker::~Worker() {
  Shutdown();
  CancelTask("worker shutting down", /*join=*/true);
  // An abandoned task may wait in its collective until the timeout: the process is ending, so it
  // is not waited for.
  absl::MutexLock lock(&mu_);
  for (std::unique_ptr<Task>& task : abandoned_) {
    if (task->finished()) continue;
    task->Detach();
    (void)task.release();
  }
}

std::string Worker::worker_id() const {
  absl::MutexLock lock(&mu_);
  return worker_id_;
}

bool Worker::idle() const {
  absl::MutexLock lock(&mu_);
  return task_ == nullptr || task_->finished();
}

absl::Status Worker::CheckAlive(absl::Duration window) const {
  const int64_t interval_ns = heartbeat_interval_ns_;
  if (interval_ns == 0) return absl::OkStatus();  // between streams: reconnecting
  const absl::Duration silent = last_heartbeat_.Since();
  const absl::Duration limit = std::max(window, 2 * absl::Nanoseconds(interval_ns));
  if (silent <= limit) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("no heartbeat sent to ", options_.coordinator, " for ",
                   absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(1))),
                   " (heartbeat every ", absl::FormatDuration(absl::Nanoseconds(interval_ns)),
                   ")"));
}

void Worker::Shutdown(const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    // Before the Goodbye: the stream the coordinator then closes must not be reconnected.
    shutdown_ = true;
    shutdown_requested_.Notify();
  }
  v1::WorkerMessage bye;
  bye.mutable_goodbye()->set_reason(reason);
  Send(bye, session());
  {
    absl::MutexLock lock(&write_mu_);
    if (stream_ != nullptr) stream_->WritesDone();  // the Goodbye is the stream's last message
  }
  absl::MutexLock lock(&mu_);
  // The coordinator ends the stream once it has read the Goodbye (Serve then returns); a cancel
  // sent before that could overtake the Goodbye, and the worker would be listed lost.
  mu_.AwaitWithTimeout(
      absl::Condition(+[](Worker* w) { return w->stream_ctx_ == nullptr; }, this),
      kGoodbyeGrace);
  if (stream_ctx_ != nullptr) stream_ctx_->TryCancel();
}

absl::Status Worker::Run() {
  absl::Time last_connected = absl::Now();
  absl::Duration delay = options_.reconnect_first_delay;
  int failures = 0;
  while (!shutdown_requested_.HasBeenNotified()) {
    const absl::Status status = Serve();
    if (shutdown_requested_.HasBeenNotified()) break;
    if (status.ok()) {
      last_connected = absl::Now();
      delay = options_.reconnect_first_delay;
      failures = 0;
      spdlog::warn("lost the coordinator at {}; reconnecting", options_.coordinator);
      if (options_.on_connection) {
        options_.on_connection(false, absl::StrCat("lost the coordinator at ",
                                                   options_.coordinator, "; reconnecting"));
      }
    } else {
      ++failures;
      // A refused token stays refused: trying again only hides the error.
      if (absl::IsUnauthenticated(status)) {
        CancelTask("worker refused by the coordinator", /*join=*/true);
        return absl::UnauthenticatedError(absl::StrCat(
            "the coordinator at ", options_.coordinator, " refused this worker (--token_file): ",
            status.message()));
      }
      if (absl::Now() - last_connected > options_.reconnect_deadline) {
        CancelTask("worker giving up on the coordinator", /*join=*/true);
        return absl::UnavailableError(
            absl::StrCat("no connection to the coordinator at ", options_.coordinator, " for ",
                         absl::FormatDuration(options_.reconnect_deadline), ": ",
                         status.message()));
      }
      spdlog::warn("connecting to {} (attempt {}): {}; retrying in {}", options_.coordinator,
                   failures, std::string(status.message()), absl::FormatDuration(delay));
      if (options_.on_connection) {
        options_.on_connection(
            false, absl::StrCat("connecting to ", options_.coordinator, " (attempt ", failures,
                                "): ", status.message(), "; retrying in ",
                                absl::FormatDuration(delay)));
      }
    }
    if (shutdown_requested_.WaitForNotificationWithTimeout(delay)) break;
    delay = std::min(delay * 2, options_.reconnect_max_delay);
  }
  CancelTask("worker shutting down", /*join=*/true);
  return absl::OkStatus();
}

absl::Status Worker::Serve() {
  grpc::ClientContext ctx;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::OkStatus();
    stream_ctx_ = &ctx;
  }
  absl::Cleanup forget_ctx = [this] {
    absl::MutexLock lock(&mu_);
    stream_ctx_ = nullptr;
  };
  std::unique_ptr<grpc::ClientReaderWriterInterface<v1::WorkerMessage, v1::CoordinatorMessage>>
      stream = stub_->Connect(&ctx);

  v1::WorkerMessage hello;
  hello.mutable_hello()->set_host(options_.host);
  *hello.mutable_hello()->mutable_device() = device_;
  if (options_.memory_limit_bytes > 0 &&
      (device_.memory_bytes() == 0 || options_.memory_limit_bytes < device_.memory_bytes())) {
    hello.mutable_hello()->mutable_device()->set_memory_bytes(options_.memory_limit_bytes);
  }
  hello.mutable_hello()->set_pid(getpid());
  hello.mutable_hello()->set_metrics_address(options_.metrics_address);
  v1::CoordinatorMessage first;
  if (!stream->Write(hello) || !stream->Read(&first)) {
    // The call has ended (a failed write or read means so): Finish gives the server's status,
    // which a cancel here would replace with CANCELLED.
    grpc::Status s = stream->Finish();
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      return absl::UnauthenticatedError(s.error_message());
    }
    return absl::UnavailableError(s.ok() ? "stream closed before Welcome" : s.error_message());
  }
  if (!first.has_welcome()) {
    ctx.TryCancel();
    stream->Finish();
    return absl::UnavailableError("coordinator did not start with Welcome");
  }
  absl::Duration interval = options_.heartbeat_interval;
  if (interval <= absl::ZeroDuration()) {
    interval = absl::Milliseconds(first.welcome().heartbeat_interval_ms());
  }
  if (interval <= absl::ZeroDuration()) interval = absl::Seconds(5);
  {
    absl::MutexLock lock(&mu_);
    worker_id_ = first.welcome().worker_id();
    if (options_.metrics != nullptr) options_.metrics->Registered(worker_id_);
  }
  int64_t session;
  {
    absl::MutexLock lock(&write_mu_);
    stream_ = stream.get();
    session = ++session_;
  }
  spdlog::info("connected to {} as {} (heartbeat every {})", options_.coordinator,
               first.welcome().worker_id(), absl::FormatDuration(interval));
  last_heartbeat_.Touch();
  heartbeat_interval_ns_ = absl::ToInt64Nanoseconds(interval);
  if (options_.on_connection) {
    options_.on_connection(true, absl::StrCat("registered with ", options_.coordinator, " as ",
                                              first.welcome().worker_id()));
  }

  absl::Notification stop_heartbeats;
  std::thread heartbeats([&] {
    v1::WorkerMessage beat;
    beat.mutable_heartbeat();
    while (!stop_heartbeats.WaitForNotificationWithTimeout(interval)) {
      Send(beat, session);
      last_heartbeat_.Touch();
      AbandonStuckTask(session);
    }
  });

  v1::CoordinatorMessage msg;
  while (stream->Read(&msg)) Handle(msg);

  stop_heartbeats.Notify();
  heartbeats.join();
  heartbeat_interval_ns_ = 0;
  {
    absl::MutexLock lock(&write_mu_);
    stream_ = nullptr;
    ++session_;
  }
  // Its peers are losing the coordinator too, or being cancelled by it: stop without waiting for
  // a collective that may never complete. A later assignment waits for it (Join).
  CancelTask(shutdown_requested_.HasBeenNotified() ? "worker shutting down"
                                                   : "connection to the coordinator lost",
             /*join=*/false);
  grpc::Status s = stream->Finish();
  if (!shutdown_requested_.HasBeenNotified()) {
    spdlog::warn("stream to {} ended: {}", options_.coordinator,
                 s.ok() ? "closed by the coordinator" : s.error_message());
  }
  return absl::OkStatus();
}

void Worker::Handle(const v1::CoordinatorMessage& msg) {
  switch (msg.msg_case()) {
    case v1::CoordinatorMessage::kAssignment:
      StartTask(msg.assignment());
      break;
    case v1::CoordinatorMessage::kCancel: {
      const v1::Cancel& cancel = msg.cancel();
      absl::MutexLock lock(&mu_);
      if (task_ != nullptr && !task_->finished() && task_->job_id() == cancel.job_id() &&
          task_->attempt() == cancel.attempt()) {
        spdlog::info("job {} attempt {}: cancel ({})", cancel.job_id(), cancel.attempt(),
                     cancel.reason());
        task_->Cancel(cancel.reason());
      } else {
        spdlog::info("ignoring cancel of job {} attempt {}: not running here", cancel.job_id(),
                     cancel.attempt());
      }
      break;
    }
    case v1::CoordinatorMessage::kWelcome:
      break;
    default:
      spdlog::warn("ignoring an empty message from the coordinator");
  }
}

void Worker::StartTask(const v1::Assignment& assignment) {
  const v1::Program& program = assignment.program();
  const int64_t current = session();
  std::unique_ptr<Task> previous;
  {
    // A task cancelled when the stream to the coordinator broke (a restarted coordinator now
    // assigns the job's next attempt) gets until kAbandonAfter to end, then is abandoned.
    absl::MutexLock lock(&mu_);
    if (task_ != nullptr && !task_->finished()) {
      if (const std::optional<absl::Time> cancelled = task_->cancelled_at()) {
        Task* stuck = task_.get();
        mu_.AwaitWithDeadline(absl::Condition(
                                  +[](Task* t) { return t->finished(); }, stuck),
                              *cancelled + kAbandonAfter);
        if (!stuck->finished()) {
          spdlog::warn("job {} attempt {}: still in a collective {} after its cancel: abandoned",
                       stuck->job_id(), stuck->attempt(), absl::FormatDuration(kAbandonAfter));
          stuck->Abandon();
          abandoned_.push_back(std::move(task_));
        }
      }
    }
    if (task_ != nullptr && !task_->finished()) {
      const std::string busy =
          absl::StrCat("rank ", program.rank(), ": worker busy with job ", task_->job_id(),
                       " attempt ", task_->attempt());
      spdlog::warn("refusing job {} attempt {}: {}", program.job_id(), program.attempt(), busy);
      Send(DoneMessage(program, false, busy), current);
      return;
    }
    previous = std::move(task_);
  }
  if (previous != nullptr) previous->Join();
  // Before anything runs: a path outside this worker's roots fails the task, naming it.
  if (absl::Status paths = CheckProgramPaths(program, options_.roots); !paths.ok()) {
    spdlog::warn("refusing job {} attempt {}: {}", program.job_id(), program.attempt(),
                 std::string(paths.message()));
    Send(DoneMessage(program, false, absl::StrCat("rank ", program.rank(), ": ", paths.message())),
         current);
    return;
  }
  // The environment checks the program's device (CheckProgramDevice): a GPU worker's runs cuda
  // programs, a CPU worker's cpu ones.
  auto send = [this, current](const v1::WorkerMessage& m) { Send(m, current); };
  if (options_.task_log != nullptr) {
    options_.task_log->Begin(program.job_id(), program.attempt(), program.rank(), send);
  }
  auto task = std::make_unique<Task>(
      assignment, env_,
      [this, send, job_id = program.job_id(), attempt = program.attempt(), rank = program.rank(),
       last_step = std::make_shared<absl::Time>(absl::Now())](const v1::WorkerMessage& m) {
        // The rank's lines, its error among them, reach the coordinator before its TaskDone.
        if (m.has_done() && options_.task_log != nullptr) {
          options_.task_log->End(job_id, attempt, rank);
        }
        // The progress watchdog's test (WEFT_DEBUG_STALL_AT): the rank stops here, as one
        // blocked in a collective would, and is abandoned when its attempt is cancelled.
        if (m.has_step() && DebugStallAt(attempt, m.step().step())) {
          spdlog::warn("{}: stalling rank {} at step {} for the test", kStallAtEnv, rank,
                       m.step().step());
          absl::SleepFor(absl::Minutes(10));
        }
        // Tests' pace (WEFT_DEBUG_STEP_MS): the step's thread waits out its minimum time.
        if (m.has_step() && DebugMinStepTime() > absl::ZeroDuration()) {
          absl::SleepFor(*last_step + DebugMinStepTime() - absl::Now());
          *last_step = absl::Now();
        }
        send(m);
      });
  task->Start();
  absl::MutexLock lock(&mu_);
  task_ = std::move(task);
}

void Worker::AbandonStuckTask(int64_t session) {
  std::unique_ptr<Task> stuck;
  {
    absl::MutexLock lock(&mu_);
    // Ones abandoned before that have ended since are joined here (they end at once).
    for (auto it = abandoned_.begin(); it != abandoned_.end();) {
      if ((*it)->finished()) {
        (*it)->Join();
        it = abandoned_.erase(it);
      } else {
        ++it;
      }
    }
    if (task_ == nullptr || task_->finished()) return;
    const std::optional<absl::Time> cancelled = task_->cancelled_at();
    if (!cancelled.has_value() || absl::Now() - *cancelled < kAbandonAfter) return;
    task_->Abandon();
    stuck = std::move(task_);
  }
  const std::string why = absl::StrCat(
      kCancelledPrefix, stuck->cancel_reason(), " (rank ", stuck->rank(), " was still in a collective ",
      absl::FormatDuration(kAbandonAfter),
      " later: abandoned; its thread ends at the collective timeout)");
  spdlog::warn("job {} attempt {}: {}", stuck->job_id(), stuck->attempt(), why);
  // Its thread's later lines are not the task's any more; this one is.
  if (options_.task_log != nullptr) {
    options_.task_log->End(stuck->job_id(), stuck->attempt(), stuck->rank());
  }
  v1::Program program;
  program.set_job_id(stuck->job_id());
  program.set_attempt(stuck->attempt());
  program.set_rank(stuck->rank());
  Send(DoneMessage(program, false, why), session);
  absl::MutexLock lock(&mu_);
  abandoned_.push_back(std::move(stuck));
}

void Worker::CancelTask(const std::string& reason, bool join) {
  std::unique_ptr<Task> finished;
  {
    absl::MutexLock lock(&mu_);
    if (task_ == nullptr) return;
    task_->Cancel(reason);
    if (join) finished = std::move(task_);
  }
  if (finished != nullptr) finished->Join();
}

int64_t Worker::session() const {
  absl::MutexLock lock(&write_mu_);
  return session_;
}

void Worker::Send(const v1::WorkerMessage& msg, int64_t session) {
  // What the worker did counts whether or not the coordinator hears of it.
  if (options_.metrics != nullptr) options_.metrics->Observe(msg);
  absl::MutexLock lock(&write_mu_);
  // Nothing is logged about log lines: the task's sink would take that line and send it too.
  if (stream_ == nullptr || session != session_) {
    if (!msg.has_heartbeat() && !msg.has_logs() && !msg.has_goodbye()) {
      spdlog::warn("dropping a {} message: its stream to the coordinator is gone",
                   msg.has_done() ? "task-done" : msg.has_checkpoint() ? "checkpoint" : "step");
    }
    return;
  }
  if (!stream_->Write(msg) && !msg.has_logs()) {
    spdlog::debug("write to the coordinator failed; the stream is closing");
  }
}

}  // namespace weft
