// Task with a fake executor, and Worker against a fake WorkerService on 127.0.0.1 (port picked
// at run time): hello, heartbeats, an assignment's reports, cancel, reconnect, giving up.
#include "worker/worker.h"

#include <atomic>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/comm/gloo/fake_rendezvous_service.h"

namespace weft {
namespace {

// Counts RunStep calls that block until their cancel, so that a test acts while one does.
class BlockedSteps {
 public:
  void Add() {
    absl::MutexLock lock(&mu_);
    ++count_;
  }
  // Whether a step has blocked within 10 s.
  bool WaitForOne() {
    absl::MutexLock lock(&mu_);
    auto blocked = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&blocked), absl::Seconds(10));
  }

 private:
  absl::Mutex mu_;
  int count_ ABSL_GUARDED_BY(mu_) = 0;
};

// What a FakeExecutor reports besides its loss, and what it was asked to do: the learning rate
// lr_per_step * step; the gradient norm of the steps in grad_norms (none for the others); RunEval
// after step s returns eval_losses[s] (0.5 when absent). It records the steps after which RunEval
// ran and the steps it wrote a checkpoint shard of (none: no chunks, an empty shard). Read it
// after the task's Join.
struct StepScript {
  double lr_per_step = 0.001;
  std::map<int64_t, double> grad_norms;
  std::map<int64_t, absl::StatusOr<double>> eval_losses;
  std::vector<int64_t> evals;
  std::vector<int64_t> checkpoints;
};

// Loss 1/step and a memory peak of 1000 * step + 24 bytes; fails at step `fail_at`; the loss
// `bad_loss` at step `bad_at` (when not 0); with
// `blocked` (not null), RunStep waits for Cancel and counts itself there; with `trace`, one span
// per step named after it; with `script` (not null), its learning rates, gradient norms,
// evaluations and checkpoints.
class FakeExecutor : public Executor {
 public:
  FakeExecutor(int64_t fail_at, BlockedSteps* blocked, bool trace = false, int64_t bad_at = 0,
               float bad_loss = 0, StepScript* script = nullptr)
      : fail_at_(fail_at),
        blocked_(blocked),
        trace_(trace),
        bad_at_(bad_at),
        bad_loss_(bad_loss),
        script_(script) {}
  absl::Status Initialize() override { return absl::OkStatus(); }
  absl::StatusOr<float> RunStep(int64_t step) override {
    if (step == fail_at_) {
      return absl::UnavailableError("all_reduce on group 1 (dp) ranks [0,1]: Connection closed");
    }
    if (blocked_ != nullptr) {
      blocked_->Add();
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&cancelled_));
    }
    if (cancelled()) return absl::CancelledError("cancelled");
    if (trace_) {
      spans_.emplace_back();
      spans_.back().set_name("step " + std::to_string(step));
      spans_.back().set_duration_us(step);
    }
    peak_bytes_ = 1000 * step + 24;
    last_step_ = step;
    if (bad_at_ > 0 && step == bad_at_) return bad_loss_;
    return 1.0f / step;
  }
  int64_t last_step_peak_bytes() const override { return peak_bytes_; }
  double last_step_lr() const override {
    return script_ != nullptr ? script_->lr_per_step * last_step_ : 0;
  }
  std::optional<double> last_step_grad_norm() const override {
    if (script_ == nullptr) return std::nullopt;
    auto it = script_->grad_norms.find(last_step_);
    if (it == script_->grad_norms.end()) return std::nullopt;
    return it->second;
  }
  absl::StatusOr<double> RunEval() override {
    if (script_ == nullptr) return Executor::RunEval();
    script_->evals.push_back(last_step_);
    auto it = script_->eval_losses.find(last_step_);
    return it != script_->eval_losses.end() ? it->second : absl::StatusOr<double>(0.5);
  }
  absl::StatusOr<std::vector<checkpoint::IndexedChunk>> WriteCheckpointShard(
      int64_t step) override {
    if (script_ == nullptr) return Executor::WriteCheckpointShard(step);
    script_->checkpoints.push_back(step);
    return std::vector<checkpoint::IndexedChunk>{};
  }
  std::vector<v1::TraceSpan> TakeSpans() override { return std::move(spans_); }
  absl::StatusOr<std::vector<float>> ReadBuffer(const std::string&) const override {
    return absl::NotFoundError("fake");
  }
  void Cancel() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

 private:
  bool cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

  const int64_t fail_at_;
  BlockedSteps* const blocked_;  // not owned
  const bool trace_;
  const int64_t bad_at_;
  const float bad_loss_;
  StepScript* const script_;  // not owned; may be null
  int64_t last_step_ = 0;
  std::vector<v1::TraceSpan> spans_;
  int64_t peak_bytes_ = 0;
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

// Job ids pick the behaviour: "fail-at-2" fails at step 2, "nan-at-2" has a NaN loss at step 2,
// "inf-at-3" an infinite one at step 3, "block" blocks until cancelled. With `script` set, every
// executor follows it.
class FakeEnvironment : public TaskEnvironment {
 public:
  absl::StatusOr<AttemptComms> MakeComms(const v1::Assignment&) override {
    AttemptComms comms;
    comms.cancel = [this] { comms_cancelled = true; };
    return comms;
  }
  absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const v1::Program& program,
                                                         CommunicatorFactory*) override {
    if (program.job_id() == "bad-program") return absl::InvalidArgumentError("buffer 7 missing");
    return std::unique_ptr<Executor>(std::make_unique<FakeExecutor>(
        program.job_id() == "fail-at-2" ? 2 : 0,
        program.job_id() == "block" ? &blocked_steps : nullptr, program.trace(),
        program.job_id() == "nan-at-2" ? 2 : program.job_id() == "inf-at-3" ? 3 : 0,
        program.job_id() == "nan-at-2" ? std::numeric_limits<float>::quiet_NaN()
                                       : -std::numeric_limits<float>::infinity(),
        script));
  }
  std::atomic<bool> comms_cancelled{false};
  BlockedSteps blocked_steps;
  StepScript* script = nullptr;  // not owned
};

v1::Assignment MakeAssignment(const std::string& job, int attempt, int rank, int64_t steps) {
  v1::Assignment a;
  a.set_rendezvous_scope(job + "/" + std::to_string(attempt));
  a.set_rendezvous_ticket("ticket-" + job);
  v1::Program* p = a.mutable_program();
  p->set_job_id(job);
  p->set_attempt(attempt);
  p->set_rank(rank);
  p->set_world_size(rank + 1);
  p->set_steps(steps);
  p->set_device("cpu");
  return a;
}

class Recorder {
 public:
  void Add(const v1::WorkerMessage& m) {
    absl::MutexLock lock(&mu_);
    messages_.push_back(m);
  }
  std::vector<v1::WorkerMessage> messages() {
    absl::MutexLock lock(&mu_);
    return messages_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::WorkerMessage> messages_;
};

TEST(TaskTest, ReportsEveryStepThenDone) {
  FakeEnvironment env;
  Recorder rec;
  Task task(MakeAssignment("j", 1, 2, 3), &env, [&](const v1::WorkerMessage& m) { rec.Add(m); });
  task.Start();
  task.Join();
  auto msgs = rec.messages();
  ASSERT_EQ(msgs.size(), 4u);
  for (int s = 1; s <= 3; ++s) {
    ASSERT_TRUE(msgs[s - 1].has_step());
    EXPECT_EQ(msgs[s - 1].step().job_id(), "j");
    EXPECT_EQ(msgs[s - 1].step().attempt(), 1);
    EXPECT_EQ(msgs[s - 1].step().rank(), 2);
    EXPECT_EQ(msgs[s - 1].step().step(), s);
    EXPECT_FLOAT_EQ(msgs[s - 1].step().loss(), 1.0f / s);
    EXPECT_GE(msgs[s - 1].step().step_seconds(), 0.0);
    EXPECT_EQ(msgs[s - 1].step().peak_bytes(), 1000 * s + 24);
  }
  ASSERT_TRUE(msgs[3].has_done());
  EXPECT_TRUE(msgs[3].done().ok());
  EXPECT_TRUE(task.finished());
}

// A task is finished when its TaskDone is sent, not after: the coordinator answers a TaskDone with
// the worker's next assignment at once, and the worker must not find the task still busy then.
TEST(TaskTest, IsFinishedWhenItsTaskDoneIsSent) {
  FakeEnvironment env;
  Task* task_ptr = nullptr;
  std::optional<bool> finished_at_done;
  Task task(MakeAssignment("j", 1, 0, 2), &env, [&](const v1::WorkerMessage& m) {
    if (m.has_done()) finished_at_done = task_ptr->finished();
  });
  task_ptr = &task;
  task.Start();
  task.Join();
  ASSERT_TRUE(finished_at_done.has_value());
  EXPECT_TRUE(*finished_at_done);
}

// The real executor on the CPU kernels: x [2,3] @ w [3,4] -> y [2,4], the loss the MSE of y
// against itself. Laid out back to back (arena_bytes 0), each of the 4 buffers takes one
// kArenaAlignment slot, and the executor allocates nothing else: the step's peak is 4 * 256.
class RealExecutorEnvironment : public FakeEnvironment {
 public:
  absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(const v1::Program& program,
                                                         CommunicatorFactory*) override {
    v1::Program p = program;
    for (const auto& [name, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
             {"x", {2, 3}}, {"w", {3, 4}}, {"y", {2, 4}}, {"loss", {1}}}) {
      v1::Buffer* b = p.add_buffers();
      b->set_id(p.buffers_size() - 1);
      b->set_name(name);
      for (int64_t d : shape) b->add_shape(d);
    }
    p.set_loss_buffer(3);
    v1::Instruction* mm = p.add_instructions();
    mm->set_op(v1::Instruction::MATMUL);
    mm->add_inputs(0);
    mm->add_inputs(1);
    mm->add_outputs(2);
    v1::Instruction* mse = p.add_instructions();
    mse->set_op(v1::Instruction::MSE_LOSS);
    mse->add_inputs(2);
    mse->add_inputs(2);
    mse->add_outputs(3);
    return Executor::Create(p, nullptr);
  }
};

TEST(TaskTest, ReportsTheExecutorsPeakBytes) {
  RealExecutorEnvironment env;
  Recorder rec;
  Task task(MakeAssignment("j", 1, 0, 2), &env, [&](const v1::WorkerMessage& m) { rec.Add(m); });
  task.Start();
  task.Join();
  auto msgs = rec.messages();
  ASSERT_EQ(msgs.size(), 3u);
  ASSERT_TRUE(msgs[2].done().ok()) << msgs[2].done().message();
  for (int s = 0; s < 2; ++s) EXPECT_EQ(msgs[s].step().peak_bytes(), 4 * 256) << "step " << s + 1;
}

TEST(TaskTest, AttachesEachStepsSpansToItsReport) {
  FakeEnvironment env;
  Recorder rec;
  v1::Assignment assignment = MakeAssignment("j", 1, 0, 2);
  assignment.mutable_program()->set_trace(true);
  Task task(assignment, &env, [&](const v1::WorkerMessage& m) { rec.Add(m); });
  task.Start();
  task.Join();
  auto msgs = rec.messages();
  ASSERT_EQ(msgs.size(), 3u);
  for (int s = 1; s <= 2; ++s) {
    ASSERT_EQ(msgs[s - 1].step().spans_size(), 1);
    EXPECT_EQ(msgs[s - 1].step().spans(0).name(), "step " + std::to_string(s));
  }
}

TEST(TaskTest, ErrorCarriesRankAndStep) {
  FakeEnvironment env;
  Recorder rec;
  Task task(MakeAssignment("fail-at-2", 0, 2, 5), &env,
            [&](const v1::WorkerMessage& m) { rec.Add(m); });
  task.Start();
  task.Join();
  auto msgs = rec.messages();
  ASSERT_EQ(msgs.size(), 2u);
  ASSERT_TRUE(msgs[1].has_done());
  EXPECT_FALSE(msgs[1].done().ok());
  EXPECT_EQ(msgs[1].done().message(),
            "rank 2: step 2: all_reduce on group 1 (dp) ranks [0,1]: Connection closed");
}

// A non-finite loss ends the task at that step, naming it: the step is not reported (its loss
// would be no number) and nothing after it runs or is saved.
TEST(TaskTest, ANonFiniteLossStopsTheTaskNamingTheStep) {
  for (const auto& [job, step, value] : {std::tuple<std::string, int, std::string>{"nan-at-2", 2, "nan"},
                                         {"inf-at-3", 3, "inf"}}) {
    FakeEnvironment env;
    Recorder rec;
    Task task(MakeAssignment(job, 0, 1, 5), &env, [&](const v1::WorkerMessage& m) { rec.Add(m); });
    task.Start();
    task.Join();
    auto msgs = rec.messages();
    ASSERT_EQ(msgs.size(), static_cast<size_t>(step)) << job;
    for (int s = 1; s < step; ++s) EXPECT_EQ(msgs[s - 1].step().step(), s) << job;
    ASSERT_TRUE(msgs.back().has_done()) << job;
    EXPECT_FALSE(msgs.back().done().ok());
    EXPECT_EQ(msgs.back().done().message(),
              "rank 1: step " + std::to_string(step) + ": the loss is " + value +
                  "; training stops here, before the step is reported or saved");
  }
}

// Runs `assignment` on executors that follow `script` and returns what the task sent.
std::vector<v1::WorkerMessage> RunScripted(const v1::Assignment& assignment, StepScript* script) {
  FakeEnvironment env;
  env.script = script;
  Recorder rec;
  Task task(assignment, &env, [&](const v1::WorkerMessage& m) { rec.Add(m); });
  task.Start();
  task.Join();
  return rec.messages();
}

// The assignment of a program that checkpoints after every step (into a folder nothing reads:
// the fake executor writes no shard), so that a step's CheckpointReport follows its StepReport.
v1::Assignment CheckpointingAssignment(const std::string& job, int rank, int64_t steps) {
  v1::Assignment a = MakeAssignment(job, 0, rank, steps);
  a.mutable_program()->set_checkpoint_dir("/nonexistent/ckpt");
  a.mutable_program()->set_checkpoint_every(1);
  return a;
}

// Each StepReport carries the executor's learning rate of that step, and its gradient norm when
// the executor has one (a program without grad_norm_buffer has none: 0).
TEST(TaskTest, ReportsEachStepsLearningRateAndGradientNorm) {
  StepScript script;
  script.lr_per_step = 0.25;
  script.grad_norms = {{1, 3.5}, {3, 0.125}};
  auto msgs = RunScripted(MakeAssignment("j", 0, 0, 3), &script);
  ASSERT_EQ(msgs.size(), 4u);
  ASSERT_TRUE(msgs[3].has_done());
  ASSERT_TRUE(msgs[3].done().ok()) << msgs[3].done().message();
  for (int s = 1; s <= 3; ++s) {
    ASSERT_TRUE(msgs[s - 1].has_step());
    EXPECT_DOUBLE_EQ(msgs[s - 1].step().lr(), 0.25 * s) << "step " << s;
  }
  EXPECT_DOUBLE_EQ(msgs[0].step().grad_norm(), 3.5);
  EXPECT_EQ(msgs[1].step().grad_norm(), 0.0) << "step 2 has no norm";
  EXPECT_DOUBLE_EQ(msgs[2].step().grad_norm(), 0.125);
}

// A non-finite gradient norm (with a finite loss) ends the task at that step, naming the step and
// which it was: the step is neither reported nor checkpointed, and nothing after it runs.
TEST(TaskTest, ANonFiniteGradientNormStopsTheTaskBeforeTheStepIsReportedOrSaved) {
  for (const auto& [step, norm, value] :
       {std::tuple<int, double, std::string>{2, std::numeric_limits<double>::quiet_NaN(), "nan"},
        {3, std::numeric_limits<double>::infinity(), "inf"}}) {
    StepScript script;
    for (int s = 1; s <= 5; ++s) script.grad_norms[s] = 1.0;
    script.grad_norms[step] = norm;
    auto msgs = RunScripted(CheckpointingAssignment("j", 1, 5), &script);
    // A StepReport and a CheckpointReport for each step before, then the TaskDone.
    ASSERT_EQ(msgs.size(), static_cast<size_t>(2 * (step - 1) + 1)) << value;
    for (int s = 1; s < step; ++s) {
      EXPECT_EQ(msgs[2 * (s - 1)].step().step(), s) << value;
      EXPECT_EQ(msgs[2 * (s - 1) + 1].checkpoint().step(), s) << value;
    }
    std::vector<int64_t> saved;
    for (int s = 1; s < step; ++s) saved.push_back(s);
    EXPECT_EQ(script.checkpoints, saved) << value;
    ASSERT_TRUE(msgs.back().has_done()) << value;
    EXPECT_FALSE(msgs.back().done().ok());
    const std::string& message = msgs.back().done().message();
    EXPECT_TRUE(absl::StartsWith(message, absl::StrCat("rank 1: step ", step,
                                                       ": the gradient norm is ", value)))
        << message;
    EXPECT_TRUE(absl::StrContains(
        message, "training stops here, before the step is reported or saved"))
        << message;
  }
}

// With Program.eval the task evaluates after every `every`-th step and after the last, and only
// then: those steps' reports carry the eval loss, the others none (has_eval_loss false, not 0).
TEST(TaskTest, EvaluatesAfterEveryNthStepAndTheLastAndReportsTheLoss) {
  StepScript script;
  script.eval_losses = {{2, 2.5}, {4, 2.25}, {5, 0.0}};
  v1::Assignment assignment = MakeAssignment("j", 0, 0, 5);
  assignment.mutable_program()->mutable_eval()->set_every(2);
  auto msgs = RunScripted(assignment, &script);
  ASSERT_EQ(msgs.size(), 6u);
  ASSERT_TRUE(msgs[5].done().ok()) << msgs[5].done().message();
  EXPECT_EQ(script.evals, (std::vector<int64_t>{2, 4, 5}));
  const std::map<int64_t, double> want = {{2, 2.5}, {4, 2.25}, {5, 0.0}};
  for (int s = 1; s <= 5; ++s) {
    const v1::StepReport& report = msgs[s - 1].step();
    ASSERT_EQ(report.step(), s);
    auto it = want.find(s);
    if (it == want.end()) {
      EXPECT_FALSE(report.has_eval_loss()) << "step " << s << " did not evaluate";
    } else {
      ASSERT_TRUE(report.has_eval_loss()) << "step " << s;
      EXPECT_DOUBLE_EQ(report.eval_loss(), it->second) << "step " << s;
    }
  }
}

// A program without eval never evaluates, and no report carries an eval loss.
TEST(TaskTest, AProgramWithoutEvalNeverEvaluates) {
  StepScript script;
  auto msgs = RunScripted(MakeAssignment("j", 0, 0, 4), &script);
  ASSERT_EQ(msgs.size(), 5u);
  ASSERT_TRUE(msgs[4].done().ok()) << msgs[4].done().message();
  EXPECT_TRUE(script.evals.empty());
  for (int s = 0; s < 4; ++s) EXPECT_FALSE(msgs[s].step().has_eval_loss()) << "step " << s + 1;
}

// A non-finite eval loss ends the task after that step's evaluation, naming the step and which it
// was: the step is neither reported nor checkpointed.
TEST(TaskTest, ANonFiniteEvalLossStopsTheTaskBeforeTheStepIsReportedOrSaved) {
  for (const auto& [loss, value] :
       {std::pair<double, std::string>{std::numeric_limits<double>::quiet_NaN(), "nan"},
        {-std::numeric_limits<double>::infinity(), "inf"}}) {
    StepScript script;
    script.eval_losses = {{2, loss}};
    v1::Assignment assignment = CheckpointingAssignment("j", 0, 5);
    assignment.mutable_program()->mutable_eval()->set_every(2);
    auto msgs = RunScripted(assignment, &script);
    ASSERT_EQ(msgs.size(), 3u) << value;  // step 1, its checkpoint, the TaskDone
    EXPECT_EQ(msgs[0].step().step(), 1);
    EXPECT_EQ(msgs[1].checkpoint().step(), 1);
    EXPECT_EQ(script.checkpoints, (std::vector<int64_t>{1})) << value;
    EXPECT_EQ(script.evals, (std::vector<int64_t>{2})) << value;
    ASSERT_TRUE(msgs[2].has_done());
    EXPECT_FALSE(msgs[2].done().ok());
    EXPECT_EQ(msgs[2].done().message(),
              "rank 0: evaluation after step 2: the eval loss is " + value +
                  "; training stops here, before the step is reported or saved");
  }
}

// An error from the evaluation fails the task, annotated with the step it followed; the step is
// neither reported nor checkpointed.
TEST(TaskTest, AnEvalErrorFailsTheTaskNamingTheStep) {
  StepScript script;
  script.eval_losses.emplace(3, absl::UnavailableError("all_reduce on group 1 (dp): reset"));
  v1::Assignment assignment = CheckpointingAssignment("j", 2, 4);
  assignment.mutable_program()->mutable_eval()->set_every(3);
  auto msgs = RunScripted(assignment, &script);
  ASSERT_EQ(msgs.size(), 5u);  // steps 1 and 2 with their checkpoints, the TaskDone
  EXPECT_EQ(script.checkpoints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(script.evals, (std::vector<int64_t>{3}));
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(msgs[i].has_step() && msgs[i].step().step() == 3);
  ASSERT_TRUE(msgs[4].has_done());
  EXPECT_FALSE(msgs[4].done().ok());
  EXPECT_EQ(msgs[4].done().message(),
            "rank 2: evaluation after step 3: all_reduce on group 1 (dp): reset");
}

TEST(TaskTest, BadProgramIsReported) {
  FakeEnvironment env;
  Recorder rec;
  Task task(MakeAssignment("bad-program", 0, 0, 5), &env,
            [&](const v1::WorkerMessage& m) { rec.Add(m); });
  task.Start();
  task.Join();
  auto msgs = rec.messages();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_EQ(msgs[0].done().message(), "rank 0: loading the program: buffer 7 missing");
}

TEST(TaskTest, CancelStopsARunningStep) {
  FakeEnvironment env;
  Recorder rec;
  Task task(MakeAssignment("block", 0, 1, 100), &env,
            [&](const v1::WorkerMessage& m) { rec.Add(m); });
  task.Start();
  ASSERT_TRUE(env.blocked_steps.WaitForOne());
  task.Cancel("job cancelled by user");
  task.Join();
  auto msgs = rec.messages();
  ASSERT_EQ(msgs.size(), 1u);
  EXPECT_FALSE(msgs[0].done().ok());
  EXPECT_EQ(msgs[0].done().message(), "cancelled: job cancelled by user");
  EXPECT_TRUE(env.comms_cancelled);
}

// A WorkerService that records what each stream says and sends what the test pushes.
class FakeCoordinator final : public v1::WorkerService::Service {
 public:
  grpc::Status Connect(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override {
    v1::WorkerMessage hello;
    if (!stream->Read(&hello)) return grpc::Status::CANCELLED;
    int stream_id;
    {
      absl::MutexLock lock(&mu_);
      hellos_.push_back(hello);
      stream_id = ++streams_;
    }
    v1::CoordinatorMessage welcome;
    welcome.mutable_welcome()->set_worker_id("w-" + std::to_string(stream_id));
    welcome.mutable_welcome()->set_heartbeat_interval_ms(20);
    stream->Write(welcome);
    std::atomic<bool> reader_done{false};
    std::thread reader([&] {
      v1::WorkerMessage m;
      while (stream->Read(&m)) {
        absl::MutexLock lock(&mu_);
        received_.push_back(m);
        // As the coordinator does: a worker's TaskDone is answered with its next assignment.
        if (m.has_done() && !after_done_.empty()) {
          outbox_.push_back(std::move(after_done_.front()));
          after_done_.pop_front();
        }
      }
      reader_done = true;
    });
    while (true) {
      std::deque<v1::CoordinatorMessage> out;
      {
        absl::MutexLock lock(&mu_);
        mu_.AwaitWithTimeout(absl::Condition(this, &FakeCoordinator::HasWork),
                             absl::Milliseconds(20));
        if (close_ > 0) {
          --close_;
          break;
        }
        out.swap(outbox_);
      }
      if (reader_done) break;
      for (const auto& m : out) stream->Write(m);
    }
    ctx->TryCancel();
    reader.join();
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "coordinator going away");
  }

  void Push(const v1::CoordinatorMessage& m) {
    absl::MutexLock lock(&mu_);
    outbox_.push_back(m);
  }
  // Sent as soon as the next TaskDone arrives, one per TaskDone, in order.
  void PushAfterDone(const v1::CoordinatorMessage& m) {
    absl::MutexLock lock(&mu_);
    after_done_.push_back(m);
  }
  void CloseStream() {
    absl::MutexLock lock(&mu_);
    ++close_;
  }
  // Waits until pred(hellos, received) holds; false after 10 s. Polled rather than awaited on
  // mu_: a predicate may read the worker's own state, which mu_ does not guard.
  bool WaitFor(const std::function<bool(const std::vector<v1::WorkerMessage>&,
                                        const std::vector<v1::WorkerMessage>&)>& pred) {
    for (int i = 0; i < 1000; ++i) {
      {
        absl::MutexLock lock(&mu_);
        if (pred(hellos_, received_)) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::vector<v1::WorkerMessage> received() {
    absl::MutexLock lock(&mu_);
    return received_;
  }

 private:
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !outbox_.empty() || close_ > 0; }

  absl::Mutex mu_;
  int streams_ ABSL_GUARDED_BY(mu_) = 0;
  int close_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::WorkerMessage> hellos_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WorkerMessage> received_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::CoordinatorMessage> outbox_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::CoordinatorMessage> after_done_ ABSL_GUARDED_BY(mu_);
};

int Count(const std::vector<v1::WorkerMessage>& msgs,
          const std::function<bool(const v1::WorkerMessage&)>& pred) {
  int n = 0;
  for (const auto& m : msgs) n += pred(m) ? 1 : 0;
  return n;
}

class WorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&coordinator_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    options_.coordinator = "127.0.0.1:" + std::to_string(port_);
    options_.host = "127.0.0.1";
    options_.reconnect_first_delay = absl::Milliseconds(50);
    options_.reconnect_max_delay = absl::Milliseconds(200);
  }
  void TearDown() override {
    if (worker_ != nullptr) {
      worker_->Shutdown();
      runner_.join();
      EXPECT_TRUE(run_status_.ok()) << run_status_;
    }
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  void StartWorker() {
    worker_ = std::make_unique<Worker>(options_, LocalCpuDevice(), &env_);
    runner_ = std::thread([this] { run_status_ = worker_->Run(); });
  }

  FakeCoordinator coordinator_;
  FakeEnvironment env_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  WorkerOptions options_;
  std::unique_ptr<Worker> worker_;
  std::thread runner_;
  absl::Status run_status_;
};

TEST_F(WorkerTest, HelloHeartbeatsAndAnAssignment) {
  StartWorker();
  ASSERT_TRUE(coordinator_.WaitFor([](const auto& hellos, const auto& received) {
    return hellos.size() == 1 && Count(received, [](const auto& m) { return m.has_heartbeat(); }) >= 2;
  }));
  EXPECT_EQ(worker_->worker_id(), "w-1");

  v1::CoordinatorMessage assign;
  *assign.mutable_assignment() = MakeAssignment("j", 0, 0, 3);
  coordinator_.Push(assign);
  ASSERT_TRUE(coordinator_.WaitFor([](const auto&, const auto& received) {
    return Count(received, [](const auto& m) { return m.has_done(); }) == 1;
  }));
  auto received = coordinator_.received();
  EXPECT_EQ(Count(received, [](const auto& m) { return m.has_step(); }), 3);
  EXPECT_EQ(Count(received, [](const auto& m) { return m.has_done() && m.done().ok(); }), 1);
}

// Queued jobs, each assigned the moment the one before reports its TaskDone (bench/hostile_load.sh
// saw a queued job fail "worker busy" this way): every one runs.
TEST_F(WorkerTest, AnAssignmentThatAnswersATaskDoneRuns) {
  StartWorker();
  constexpr int kJobs = 40;
  for (int j = 1; j < kJobs; ++j) {
    v1::CoordinatorMessage next;
    *next.mutable_assignment() = MakeAssignment(absl::StrCat("queued-", j), 0, 0, 1);
    coordinator_.PushAfterDone(next);
  }
  v1::CoordinatorMessage first;
  *first.mutable_assignment() = MakeAssignment("queued-0", 0, 0, 1);
  coordinator_.Push(first);
  ASSERT_TRUE(coordinator_.WaitFor([&](const auto&, const auto& received) {
    return Count(received, [](const auto& m) { return m.has_done(); }) == kJobs;
  }));
  for (const v1::WorkerMessage& m : coordinator_.received()) {
    if (m.has_done()) EXPECT_TRUE(m.done().ok()) << m.done().job_id() << ": " << m.done().message();
  }
}

TEST_F(WorkerTest, HelloDescribesTheDevice) {
  StartWorker();
  v1::WorkerMessage hello;
  ASSERT_TRUE(coordinator_.WaitFor([&](const auto& hellos, const auto&) {
    if (hellos.empty()) return false;
    hello = hellos[0];
    return true;
  }));
  EXPECT_EQ(hello.hello().host(), "127.0.0.1");
  EXPECT_EQ(hello.hello().device().kind(), "cpu");
  EXPECT_FALSE(hello.hello().device().name().empty());
  EXPECT_GT(hello.hello().device().memory_bytes(), 0);
  EXPECT_GT(hello.hello().device().cores(), 0);
  EXPECT_EQ(hello.hello().pid(), getpid());
}

// The worker itself does not judge the program's device: its environment does (a GPU worker's
// NcclTaskEnvironment runs cuda programs). A cuda program reaches the environment and runs.
TEST_F(WorkerTest, TheEnvironmentDecidesWhichDevicesRun) {
  StartWorker();
  v1::CoordinatorMessage assign;
  *assign.mutable_assignment() = MakeAssignment("gpu-job", 0, 0, 2);
  assign.mutable_assignment()->mutable_program()->set_device("cuda");
  coordinator_.Push(assign);
  ASSERT_TRUE(coordinator_.WaitFor([](const auto&, const auto& received) {
    return Count(received, [](const auto& m) { return m.has_done(); }) == 1;
  }));
  auto received = coordinator_.received();
  EXPECT_EQ(Count(received, [](const auto& m) { return m.has_done() && m.done().ok(); }), 1);
  EXPECT_EQ(Count(received, [](const auto& m) { return m.has_step(); }), 2);
}

TEST(CheckProgramDeviceTest, NamesBothDevices) {
  v1::Program program;
  program.set_job_id("job-1");
  program.set_rank(3);
  EXPECT_TRUE(CheckProgramDevice(program, "cpu").ok());  // empty means cpu
  program.set_device("cuda");
  EXPECT_TRUE(CheckProgramDevice(program, "cuda").ok());
  absl::Status s = CheckProgramDevice(program, "cpu");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "job job-1 rank 3 needs a cuda worker; this worker runs on cpu");
}

TEST_F(WorkerTest, CancelAndBusy) {
  StartWorker();
  v1::CoordinatorMessage assign;
  *assign.mutable_assignment() = MakeAssignment("block", 3, 1, 10);
  coordinator_.Push(assign);
  v1::CoordinatorMessage second;
  *second.mutable_assignment() = MakeAssignment("other", 0, 1, 1);
  coordinator_.Push(second);
  ASSERT_TRUE(coordinator_.WaitFor([](const auto&, const auto& received) {
    return Count(received, [](const auto& m) { return m.has_done(); }) == 1;
  }));
  auto received = coordinator_.received();
  EXPECT_EQ(Count(received,
                  [](const auto& m) {
                    return m.has_done() && m.done().job_id() == "other" && !m.done().ok() &&
                           absl::StrContains(m.done().message(), "busy with job block");
                  }),
            1);

  v1::CoordinatorMessage cancel;
  cancel.mutable_cancel()->set_job_id("block");
  cancel.mutable_cancel()->set_attempt(3);
  cancel.mutable_cancel()->set_reason("user asked");
  coordinator_.Push(cancel);
  ASSERT_TRUE(coordinator_.WaitFor([](const auto&, const auto& received) {
    return Count(received, [](const auto& m) {
             return m.has_done() && m.done().job_id() == "block" &&
                    m.done().message() == "cancelled: user asked";
           }) == 1;
  }));
}

// With a TaskLogSink on the default logger (as the daemon has it), what the process logs while a
// task runs reaches the coordinator as that task's lines, its error line before its TaskDone,
// and nothing of it after.
TEST_F(WorkerTest, SendsTheTasksLogLinesBeforeItsTaskDone) {
  auto task_log = std::make_shared<TaskLogSink>();
  const std::shared_ptr<spdlog::logger> before = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "worker_test",
      spdlog::sinks_init_list{std::make_shared<spdlog::sinks::stderr_sink_mt>(), task_log}));
  options_.task_log = task_log;
  StartWorker();
  v1::CoordinatorMessage assign;
  *assign.mutable_assignment() = MakeAssignment("fail-at-2", 4, 1, 5);
  coordinator_.Push(assign);
  ASSERT_TRUE(coordinator_.WaitFor([](const auto&, const auto& received) {
    return Count(received, [](const auto& m) { return m.has_done(); }) == 1;
  }));
  worker_->Shutdown();
  runner_.join();
  worker_.reset();
  spdlog::set_default_logger(before);

  const std::vector<v1::WorkerMessage> received = coordinator_.received();
  int done_at = -1, error_at = -1, started_at = -1, lines_after_done = 0;
  for (int i = 0; i < static_cast<int>(received.size()); ++i) {
    const v1::WorkerMessage& m = received[i];
    if (m.has_done()) done_at = i;
    if (!m.has_logs()) continue;
    EXPECT_EQ(m.logs().job_id(), "fail-at-2");
    EXPECT_EQ(m.logs().attempt(), 4);
    EXPECT_EQ(m.logs().rank(), 1);
    if (done_at >= 0) ++lines_after_done;
    for (const v1::LogLine& line : m.logs().lines()) {
      if (absl::StrContains(line.text(), "starting (5 steps)")) started_at = i;
      if (absl::StrContains(line.text(), "rank 1: step 2: all_reduce on group 1")) {
        error_at = i;
        EXPECT_EQ(line.level(), "warning");
      }
    }
  }
  ASSERT_GE(done_at, 0);
  EXPECT_GE(started_at, 0) << "the task's first line was not sent";
  EXPECT_GE(error_at, 0) << "the task's error line was not sent";
  EXPECT_LT(error_at, done_at) << "the error line came after the TaskDone";
  EXPECT_EQ(lines_after_done, 0);
}

TEST_F(WorkerTest, ReconnectsAfterTheStreamBreaks) {
  StartWorker();
  v1::CoordinatorMessage assign;
  *assign.mutable_assignment() = MakeAssignment("block", 0, 0, 10);
  coordinator_.Push(assign);
  ASSERT_TRUE(coordinator_.WaitFor([](const auto& hellos, const auto& received) {
    return hellos.size() == 1 && !received.empty();
  }));
  ASSERT_TRUE(env_.blocked_steps.WaitForOne());  // the task runs when its stream breaks
  coordinator_.CloseStream();
  ASSERT_TRUE(coordinator_.WaitFor([](const auto& hellos, const auto&) {
    return hellos.size() == 2;
  }));
  EXPECT_TRUE(coordinator_.WaitFor([&](const auto&, const auto&) {
    return worker_->worker_id() == "w-2";
  }));
  // The running task was cancelled with the first stream: once it has finished, nothing of it
  // was reported on the second.
  ASSERT_TRUE(coordinator_.WaitFor([&](const auto&, const auto&) { return worker_->idle(); }));
  EXPECT_EQ(Count(coordinator_.received(), [](const auto& m) { return m.has_done(); }), 0);
  // The next assignment runs normally.
  v1::CoordinatorMessage next;
  *next.mutable_assignment() = MakeAssignment("j2", 0, 0, 2);
  coordinator_.Push(next);
  EXPECT_TRUE(coordinator_.WaitFor([](const auto&, const auto& received) {
    return Count(received, [](const auto& m) { return m.has_done() && m.done().ok(); }) == 1;
  }));
}

// What the daemon turns into systemd's READY=1 and STATUS=, and its watchdog's check.
TEST_F(WorkerTest, ToldOfEachConnectionAndAliveWhileConnected) {
  // Shared with the callback, which the worker may still call after this body ends.
  struct Told {
    absl::Mutex mu;
    std::vector<std::string> lines ABSL_GUARDED_BY(mu);
  };
  auto told = std::make_shared<Told>();
  options_.on_connection = [told](bool connected, const std::string& what) {
    absl::MutexLock lock(&told->mu);
    told->lines.push_back(absl::StrCat(connected ? "up: " : "down: ", what));
  };
  StartWorker();
  ASSERT_TRUE(coordinator_.WaitFor([](const auto& hellos, const auto& received) {
    return hellos.size() == 1 &&
           Count(received, [](const auto& m) { return m.has_heartbeat(); }) >= 2;
  }));
  EXPECT_TRUE(worker_->CheckAlive(absl::Seconds(30)).ok());
  coordinator_.CloseStream();
  ASSERT_TRUE(coordinator_.WaitFor([&](const auto&, const auto&) {
    absl::MutexLock lock(&told->mu);
    return !told->lines.empty() && absl::EndsWith(told->lines.back(), " as w-2");
  }));
  EXPECT_TRUE(worker_->CheckAlive(absl::Seconds(30)).ok());
  absl::MutexLock lock(&told->mu);
  const std::vector<std::string>& lines = told->lines;
  ASSERT_GE(lines.size(), 3u);
  EXPECT_EQ(lines[0], "up: registered with " + options_.coordinator + " as w-1");
  EXPECT_EQ(lines[1], "down: lost the coordinator at " + options_.coordinator + "; reconnecting");
  EXPECT_EQ(lines.back(), "up: registered with " + options_.coordinator + " as w-2");
}

// Sums (rank + 1) * step over the program's first group through a real communicator.
class AllReduceExecutor : public Executor {
 public:
  AllReduceExecutor(const v1::Program& program, CommunicatorFactory* factory)
      : program_(program), factory_(factory) {}
  absl::Status Initialize() override {
    auto comm = factory_->Create(program_.groups(0));
    if (!comm.ok()) return comm.status();
    comm_ = std::move(comm).value();
    return absl::OkStatus();
  }
  absl::StatusOr<float> RunStep(int64_t step) override {
    float x = (program_.rank() + 1.0f) * step;
    absl::Status s = comm_->AllReduce(&x, 1, v1::F32, ReduceOp::kSum);
    if (!s.ok()) return s;
    return x;
  }
  absl::StatusOr<std::vector<float>> ReadBuffer(const std::string&) const override {
    return absl::NotFoundError("fake");
  }
  void Cancel() override {}

 private:
  const v1::Program program_;
  CommunicatorFactory* const factory_;
  std::unique_ptr<Communicator> comm_;
};

// Two workers, each on its own (fake) coordinator stream, bootstrap Gloo through one shared
// RendezvousService and all-reduce every step.
TEST(WorkerGlooTest, TwoWorkersAllReduceThroughTheRendezvousService) {
  FakeRendezvousService rendezvous;
  FakeCoordinator coordinators[2];
  int rendezvous_port = 0, ports[2] = {0, 0};
  grpc::ServerBuilder rb;
  rb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &rendezvous_port);
  rb.RegisterService(&rendezvous);
  auto rendezvous_server = rb.BuildAndStart();
  std::unique_ptr<grpc::Server> servers[2];
  for (int r = 0; r < 2; ++r) {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &ports[r]);
    b.RegisterService(&coordinators[r]);
    servers[r] = b.BuildAndStart();
  }
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(rendezvous_port),
                                     grpc::InsecureChannelCredentials());
  ExecutorFactory make = [](const v1::Program& p, CommunicatorFactory* f) {
    return absl::StatusOr<std::unique_ptr<Executor>>(std::make_unique<AllReduceExecutor>(p, f));
  };
  std::unique_ptr<GlooTaskEnvironment> envs[2];
  std::unique_ptr<Worker> workers[2];
  std::thread runners[2];
  for (int r = 0; r < 2; ++r) {
    envs[r] = std::make_unique<GlooTaskEnvironment>(channel, "127.0.0.1", absl::Seconds(20),
                                                    make);
    WorkerOptions options;
    options.coordinator = "127.0.0.1:" + std::to_string(ports[r]);
    workers[r] = std::make_unique<Worker>(options, LocalCpuDevice(), envs[r].get());
    runners[r] = std::thread([&, r] { EXPECT_TRUE(workers[r]->Run().ok()); });
    v1::CoordinatorMessage assign;
    *assign.mutable_assignment() = MakeAssignment("gloo-job", 0, r, 3);
    assign.mutable_assignment()->mutable_program()->set_world_size(2);
    v1::CommGroup* g = assign.mutable_assignment()->mutable_program()->add_groups();
    g->set_id(1);
    g->add_ranks(0);
    g->add_ranks(1);
    g->set_mesh_dims("dp");
    coordinators[r].Push(assign);
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(coordinators[r].WaitFor([](const auto&, const auto& received) {
      return Count(received, [](const auto& m) { return m.has_done(); }) == 1;
    }));
    std::vector<double> losses;
    for (const auto& m : coordinators[r].received()) {
      if (m.has_step()) {
        losses.push_back(m.step().loss());
        // A 1-float ring all-reduce on 2 ranks: Gloo's segments put the float in chunk 0, so
        // each rank sends it once (rank 1 reduce-scatters it to 0, rank 0 gathers it back).
        EXPECT_EQ(m.step().bytes_sent(), 4) << "rank " << r;
      }
      if (m.has_done()) {
        EXPECT_TRUE(m.done().ok()) << m.done().message();
      }
    }
    EXPECT_EQ(losses, (std::vector<double>{3, 6, 9}));
  }
  for (int r = 0; r < 2; ++r) {
    workers[r]->Shutdown();
    runners[r].join();
    servers[r]->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }
  rendezvous_server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

TEST(WorkerGiveUpTest, NoCoordinatorMeansUnavailable) {
  FakeEnvironment env;
  WorkerOptions options;
  options.coordinator = "127.0.0.1:1";  // nothing listens there
  options.reconnect_first_delay = absl::Milliseconds(20);
  options.reconnect_max_delay = absl::Milliseconds(50);
  options.reconnect_deadline = absl::Milliseconds(300);
  Worker worker(options, LocalCpuDevice(), &env);
  absl::Status s = worker.Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), "127.0.0.1:1")) << s;
}

}  // namespace
}  // namespace weft
