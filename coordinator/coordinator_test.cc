#include "coordinator/coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml.h"
#include "common/path_roots.h"
#include "coordinator/recorded_connection.h"

namespace weft::coordinator {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/coordinator_test.XXXXXX";
  EXPECT_NE(mkdtemp(templ.data()), nullptr);
  return templ;
}

v1::JobSpec Spec(int ranks, const std::string& name = "mlp", const std::string& device = "") {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.mutable_mesh()->add_shape(ranks);
  spec.mutable_mesh()->add_dim_names("dp");
  spec.mutable_data()->set_batch_size(8);
  spec.set_device(device);
  return spec;
}

int64_t Ranks(const v1::JobSpec& spec) {
  int64_t n = 1;
  for (int64_t d : spec.mesh().shape()) n *= d;
  return n;
}

// A stand-in plan: empty Programs that say whose they are; "unplannable" jobs pass SubmitJob
// and fail when an attempt emits them.
class FakePlan final : public JobPlan {
 public:
  // Program fails for ranks >= fail_from (world: none).
  FakePlan(int world, int fail_from) : world_(world), fail_from_(fail_from) {}
  int world_size() const override { return world_; }
  absl::StatusOr<v1::Program> Program(int rank, const planner::Attempt& attempt,
                                      const planner::StopCheck&) const override {
    if (rank >= fail_from_) return absl::InvalidArgumentError("fc0.weight: no SPMD rule for matmul");
    v1::Program p;
    p.set_job_id(attempt.job_id);
    p.set_attempt(attempt.attempt);
    p.set_rank(rank);
    p.set_world_size(world_);
    p.set_start_step(attempt.start_step);
    p.set_load_checkpoint(attempt.load_checkpoint);
    p.set_load_optimizer_states(attempt.load_optimizer_states);
    return p;
  }

 private:
  const int world_;
  const int fail_from_;
};

// Watches a job (Coordinator::WatchJob) on a thread of its own, from construction until the
// job's final event.
class LiveWatch {
 public:
  LiveWatch(Coordinator* coordinator, const std::string& job)
      : thread_([this, coordinator, job] {
          result_ = coordinator->WatchJob(
              job,
              [this](const v1::JobEvent& e) {
                absl::MutexLock lock(&mu_);
                seen_.push_back(e);
                return true;
              },
              [] { return false; });
        }) {}

  // Waits (30 s at most) until the watch has seen n events; false if it has not.
  bool AwaitEvents(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&] { return seen_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(30));
  }

  // Waits for the watch to end; its status. seen() is complete after.
  absl::Status Join() {
    thread_.join();
    return result_;
  }
  const std::vector<v1::JobEvent>& seen() const { return seen_; }

 private:
  absl::Mutex mu_;
  std::vector<v1::JobEvent> seen_ ABSL_GUARDED_BY(mu_);
  absl::Status result_;
  std::thread thread_;  // last: it starts once the rest is made
};

// Drives the coordinator's mechanics with a stand-in validator and planner and a manual clock;
// RealSpecAndPlannerTest below runs the real ones.
class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir();
    Reopen();
  }
  // Every test's whole run, recovery and shutdown included: no job store write is made under the
  // coordinator's lock (the store writer and the unlocked paths make them all).
  void TearDown() override {
    if (coordinator_ != nullptr) {
      coordinator_->Shutdown();
      EXPECT_EQ(coordinator_->store_writes_under_lock(), 0);
    }
  }

  CoordinatorOptions Options() {
    CoordinatorOptions o;
    o.heartbeat_interval_ms = 100;
    o.worker_timeout_ms = 1000;
    o.cancel_grace_ms = 500;
    o.failure_settle_ms = failure_settle_ms_;  // 0: the first failure decides
    o.now_ms = [this] { return now_.load(); };
    o.prepare_spec = [](v1::JobSpec* spec) -> absl::Status {
      if (spec->name() == "bad") {
        return absl::InvalidArgumentError("model.layers[1] (act0).type: unknown layer type conv");
      }
      return absl::OkStatus();
    };
    o.plan = [this](const v1::JobSpec& spec,
                    const planner::StopCheck&) -> absl::StatusOr<std::shared_ptr<const JobPlan>> {
      ++plans_;
      const int world = Ranks(spec);
      return std::make_shared<FakePlan>(world, spec.name() == "unplannable"     ? 0
                                               : spec.name() == "rank1-fails" ? 1
                                                                              : world);
    };
    o.world_size = Ranks;
    o.pages = pages_;
    o.job_retention_ms = job_retention_ms_;
    o.max_ended_jobs = max_ended_jobs_;
    o.retention_interval_ms = 5000;
    return o;
  }

  void Reopen() {
    if (coordinator_ != nullptr) {
      coordinator_->Shutdown();
      EXPECT_EQ(coordinator_->store_writes_under_lock(), 0);
    }
    coordinator_.reset();
    auto store = JobStore::Open(dir_ + "/weft.db");
    ASSERT_TRUE(store.ok()) << store.status();
    auto c = Coordinator::Create(std::move(*store), Options());
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
  }

  // Connects a worker; returns its id.
  std::string Connect(std::shared_ptr<RecordedConnection>* conn, const std::string& kind = "cpu") {
    *conn = std::make_shared<RecordedConnection>();
    v1::Hello hello;
    hello.set_host("127.0.0.1");
    hello.mutable_device()->set_kind(kind);
    hello.set_pid(1234);
    auto id = coordinator_->ConnectWorker(hello, "ipv4:127.0.0.1:5555", *conn);
    EXPECT_TRUE(id.ok()) << id.status();
    auto sent = (*conn)->sent();
    EXPECT_FALSE(sent.empty());
    if (!sent.empty()) {
      EXPECT_TRUE(sent[0].has_welcome());
      EXPECT_EQ(sent[0].welcome().worker_id(), *id);
      EXPECT_EQ(sent[0].welcome().heartbeat_interval_ms(), 100);
    }
    return *id;
  }

  std::string Submit(const v1::JobSpec& spec) {
    auto id = coordinator_->SubmitJob(spec);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : "";
  }

  // The job with its first page of steps.
  v1::Job Get(const std::string& id) {
    v1::GetJobRequest request;
    request.set_job_id(id);
    auto job = coordinator_->GetJob(request);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : v1::Job();
  }

  void Step(const std::string& worker, const std::string& job, int rank, int64_t step, double loss,
            double seconds) {
    v1::WorkerMessage m;
    m.mutable_step()->set_job_id(job);
    m.mutable_step()->set_attempt(0);
    m.mutable_step()->set_rank(rank);
    m.mutable_step()->set_step(step);
    m.mutable_step()->set_loss(loss);
    m.mutable_step()->set_step_seconds(seconds);
    coordinator_->HandleWorkerMessage(worker, m);
  }

  void Done(const std::string& worker, const std::string& job, int rank, bool ok,
            const std::string& message = "", int attempt = 0, int64_t failed_at_ms = 0) {
    v1::WorkerMessage m;
    m.mutable_done()->set_failed_at_ms(failed_at_ms);
    m.mutable_done()->set_job_id(job);
    m.mutable_done()->set_attempt(attempt);
    m.mutable_done()->set_rank(rank);
    m.mutable_done()->set_ok(ok);
    m.mutable_done()->set_message(message);
    coordinator_->HandleWorkerMessage(worker, m);
  }

  void Heartbeat(const std::string& worker) {
    v1::WorkerMessage m;
    m.mutable_heartbeat();
    coordinator_->HandleWorkerMessage(worker, m);
  }

  std::string WorkerState(const std::string& worker) {
    for (const v1::WorkerInfo& w : coordinator_->ListWorkers()) {
      if (w.worker_id() == worker) return w.state();
    }
    return "absent";
  }

  std::vector<v1::JobEvent> Events(const std::string& job) {
    std::vector<v1::JobEvent> events;
    absl::Status s = coordinator_->WatchJob(
        job, [&](const v1::JobEvent& e) {
          events.push_back(e);
          return true;
        },
        [] { return true; });  // stop after the replay if the job is still live
    EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kCancelled) << s;
    return events;
  }

  std::string dir_;
  PageLimits pages_;  // Options() gives them; a test sets its own, then Reopen()
  int64_t failure_settle_ms_ = 0;
  int64_t job_retention_ms_ = 0;  // Options() gives them; a test sets its own, then Reopen()
  int64_t max_ended_jobs_ = 0;
  std::atomic<int64_t> now_{1000000};
  std::atomic<int> plans_{0};
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(CoordinatorTest, BadSpecIsRejectedAndNothingIsStored) {
  auto id = coordinator_->SubmitJob(Spec(2, "bad"));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("model.layers[1]"), absl::string_view::npos);
  EXPECT_TRUE(coordinator_->ListJobs({})->jobs().empty());
}

// A mesh above --max_ranks is refused before it is planned (planning holds memory in proportion
// to the ranks), with both figures.
TEST_F(CoordinatorTest, AMeshAboveMaxRanksIsRefusedBeforePlanning) {
  CoordinatorOptions options = Options();
  options.max_ranks = 3;
  auto store = JobStore::Open(dir_ + "/bounded.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto bounded = Coordinator::Create(std::move(*store), options);
  ASSERT_TRUE(bounded.ok()) << bounded.status();
  const int before = plans_;
  auto id = (*bounded)->SubmitJob(Spec(4, "big"));
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(id.status().message(), "mesh: 4 ranks; this coordinator plans at most 3 (--max_ranks)");
  EXPECT_EQ(plans_, before) << "planned anyway";
  EXPECT_TRUE((*bounded)->ListJobs({})->jobs().empty());
  EXPECT_TRUE((*bounded)->SubmitJob(Spec(3, "fits")).ok());
  (*bounded)->Shutdown();
}

TEST_F(CoordinatorTest, PendingJobSaysWhatItWaitsForThenRunsWithStableRanks) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(2));
  EXPECT_EQ(job, "job-000001");
  v1::Job pending = Get(job);
  EXPECT_EQ(pending.state(), v1::PENDING);
  EXPECT_EQ(pending.message(), "waiting for 2 idle cpu workers, 1 registered");
  EXPECT_EQ(pending.spec().device(), "cpu");  // the default is filled in

  std::string w2 = Connect(&c2);
  v1::Job running = Get(job);
  EXPECT_EQ(running.state(), v1::RUNNING);
  ASSERT_EQ(running.workers_size(), 2);
  EXPECT_EQ(running.workers(0), w1);
  EXPECT_EQ(running.workers(1), w2);
  ASSERT_EQ(c1->assignments().size(), 1u);
  ASSERT_EQ(c2->assignments().size(), 1u);
  EXPECT_EQ(c1->assignments()[0].program().rank(), 0);
  EXPECT_EQ(c2->assignments()[0].program().rank(), 1);
  EXPECT_EQ(c1->assignments()[0].program().job_id(), job);
  EXPECT_EQ(c1->assignments()[0].rendezvous_scope(), job + "/0");
  // Both ranks get the scope's ticket, which opens it.
  const std::string ticket = c1->assignments()[0].rendezvous_ticket();
  EXPECT_EQ(ticket.size(), 32u);
  EXPECT_EQ(c2->assignments()[0].rendezvous_ticket(), ticket);
  EXPECT_TRUE(coordinator_->rendezvous()->Set(job + "/0", ticket, "k", "v").ok());
  EXPECT_EQ(WorkerState(w1), "busy");

  // Stored events: PENDING (submitted), PENDING (waiting ...), PLANNING, RUNNING.
  std::vector<v1::JobEvent> events = Events(job);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].message(), "waiting for 2 idle cpu workers, 1 registered");
  EXPECT_EQ(events[2].state(), v1::PLANNING);
  EXPECT_EQ(events[3].state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, MatchesTheSpecsDeviceKind) {
  std::shared_ptr<RecordedConnection> cpu, gpu;
  Connect(&cpu, "cpu");
  std::string job = Submit(Spec(1, "mlp", "cuda"));
  EXPECT_EQ(Get(job).state(), v1::PENDING);
  EXPECT_EQ(Get(job).message(), "waiting for 1 idle cuda worker, 0 registered");
  std::string g = Connect(&gpu, "cuda");
  EXPECT_EQ(Get(job).state(), v1::RUNNING);
  EXPECT_EQ(Get(job).workers(0), g);
  EXPECT_TRUE(cpu->assignments().empty());
}

TEST_F(CoordinatorTest, AggregatesStepsAndSucceeds) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  std::string job = Submit(Spec(2));
  ASSERT_EQ(Get(job).state(), v1::RUNNING);

  Step(w1, job, 0, 1, 0.5, 0.1);
  EXPECT_EQ(Get(job).steps_size(), 0);  // rank 1 has not reported step 1
  Step(w2, job, 1, 1, 0.5, 0.2);
  Step(w2, job, 1, 2, 0.4, 0.2);
  Step(w1, job, 0, 2, 0.4, 0.4);
  v1::Job j = Get(job);
  ASSERT_EQ(j.steps_size(), 2);
  EXPECT_EQ(j.steps(0).step(), 1);
  EXPECT_DOUBLE_EQ(j.steps(0).loss(), 0.5);
  EXPECT_DOUBLE_EQ(j.steps(0).step_seconds(), 0.2);
  EXPECT_DOUBLE_EQ(j.steps(0).samples_per_second(), 40.0);  // batch 8 / 0.2 s
  EXPECT_DOUBLE_EQ(j.steps(1).samples_per_second(), 20.0);

  // A report from a rank the worker does not hold is ignored.
  Step(w1, job, 1, 3, 9.9, 0.1);
  Done(w1, job, 0, true);
  EXPECT_EQ(Get(job).state(), v1::RUNNING);
  Done(w2, job, 1, true);
  j = Get(job);
  EXPECT_EQ(j.state(), v1::SUCCEEDED);
  // Which worker ran which rank stays in the record.
  ASSERT_EQ(j.workers_size(), 2);
  EXPECT_EQ(j.workers(0), w1);
  EXPECT_EQ(j.workers(1), w2);
  EXPECT_GT(j.end_time_ms(), 0);
  EXPECT_EQ(WorkerState(w1), "idle");
  EXPECT_EQ(WorkerState(w2), "idle");
  EXPECT_EQ(c1->cancels(), 0);

  std::vector<v1::JobEvent> events = Events(job);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state(), v1::SUCCEEDED);
  int steps = 0;
  for (const auto& e : events) steps += e.has_step();
  EXPECT_EQ(steps, 2);
}

// A StepReport of attempt 0 with the learning rate, gradient norm and (when set) eval loss.
v1::WorkerMessage RecipeStep(const std::string& job, int rank, int64_t step, double loss,
                             double lr, double grad_norm, std::optional<double> eval_loss) {
  v1::WorkerMessage m;
  v1::StepReport* r = m.mutable_step();
  r->set_job_id(job);
  r->set_rank(rank);
  r->set_step(step);
  r->set_loss(loss);
  r->set_step_seconds(0.1);
  r->set_lr(lr);
  r->set_grad_norm(grad_norm);
  if (eval_loss) r->set_eval_loss(*eval_loss);
  return m;
}

// The job's line of a gauge in the coordinator's metrics ("" when it has none).
std::string MetricLine(const std::string& metrics, const std::string& family,
                       const std::string& job) {
  const std::string prefix = absl::StrCat(family, "{job=\"", job, "\",name=\"mlp\"} ");
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (absl::StartsWith(line, prefix)) return std::string(line);
  }
  return "";
}

// A complete step carries rank 0's learning rate and gradient norm; when rank 0 evaluated, an
// eval event (rank 0's eval loss) follows the step's event, published live and stored. GetJob's
// last_eval is the latest evaluation (none before the first, and after a restart of the
// coordinator still), its steps are the steps only, and the job's learning-rate, gradient-norm
// and eval-loss gauges follow.
TEST_F(CoordinatorTest, PublishesAndStoresEachEvaluationAfterItsStep) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  std::string job = Submit(Spec(2));
  ASSERT_EQ(Get(job).state(), v1::RUNNING);
  LiveWatch watch(coordinator_.get(), job);
  ASSERT_TRUE(watch.AwaitEvents(3));  // the replay: PENDING, PLANNING, RUNNING

  // Step 1 evaluates nowhere; rank 1's figures differ from rank 0's (and are not used).
  coordinator_->HandleWorkerMessage(w1, RecipeStep(job, 0, 1, 3.0, 0.25, 1.5, std::nullopt));
  coordinator_->HandleWorkerMessage(w2, RecipeStep(job, 1, 1, 3.0, 9.0, 9.0, std::nullopt));
  EXPECT_FALSE(Get(job).has_last_eval());
  std::string metrics = coordinator_->RenderMetrics();
  EXPECT_EQ(MetricLine(metrics, "weft_job_learning_rate", job),
            absl::StrCat("weft_job_learning_rate{job=\"", job, "\",name=\"mlp\"} 0.25"));
  EXPECT_EQ(MetricLine(metrics, "weft_job_grad_norm", job),
            absl::StrCat("weft_job_grad_norm{job=\"", job, "\",name=\"mlp\"} 1.5"));
  EXPECT_EQ(MetricLine(metrics, "weft_job_eval_loss", job), "") << "no evaluation yet";

  // Step 2 evaluates (rank 0's eval loss is the one), and is complete only with rank 1's report.
  coordinator_->HandleWorkerMessage(w1, RecipeStep(job, 0, 2, 2.0, 0.5, 0.75, 2.75));
  EXPECT_FALSE(Get(job).has_last_eval()) << "rank 1 has not reported step 2";
  coordinator_->HandleWorkerMessage(w2, RecipeStep(job, 1, 2, 2.0, 0.5, 0.75, 9.5));
  v1::Job j = Get(job);
  ASSERT_TRUE(j.has_last_eval());
  EXPECT_EQ(j.last_eval().step(), 2);
  EXPECT_DOUBLE_EQ(j.last_eval().loss(), 2.75);
  metrics = coordinator_->RenderMetrics();
  EXPECT_EQ(MetricLine(metrics, "weft_job_eval_loss", job),
            absl::StrCat("weft_job_eval_loss{job=\"", job, "\",name=\"mlp\"} 2.75"));
  EXPECT_EQ(MetricLine(metrics, "weft_job_learning_rate", job),
            absl::StrCat("weft_job_learning_rate{job=\"", job, "\",name=\"mlp\"} 0.5"));
  EXPECT_EQ(MetricLine(metrics, "weft_job_grad_norm", job),
            absl::StrCat("weft_job_grad_norm{job=\"", job, "\",name=\"mlp\"} 0.75"));

  // Step 3 does not evaluate: the last evaluation stays step 2's. Rank 1 alone saying it
  // evaluated makes no evaluation.
  coordinator_->HandleWorkerMessage(w1, RecipeStep(job, 0, 3, 1.0, 0.125, 0.5, std::nullopt));
  coordinator_->HandleWorkerMessage(w2, RecipeStep(job, 1, 3, 1.0, 0.125, 0.5, 7.0));
  // Step 4 evaluates again.
  coordinator_->HandleWorkerMessage(w2, RecipeStep(job, 1, 4, 0.5, 0.0625, 0.25, 1.25));
  coordinator_->HandleWorkerMessage(w1, RecipeStep(job, 0, 4, 0.5, 0.0625, 0.25, 1.25));
  j = Get(job);
  ASSERT_TRUE(j.has_last_eval());
  EXPECT_EQ(j.last_eval().step(), 4);
  EXPECT_DOUBLE_EQ(j.last_eval().loss(), 1.25);
  ASSERT_EQ(j.steps_size(), 4) << "evaluations are not steps";
  for (int s = 1; s <= 4; ++s) EXPECT_EQ(j.steps(s - 1).step(), s);
  EXPECT_DOUBLE_EQ(j.steps(0).lr(), 0.25);
  EXPECT_DOUBLE_EQ(j.steps(0).grad_norm(), 1.5);
  EXPECT_DOUBLE_EQ(j.steps(1).lr(), 0.5);
  EXPECT_DOUBLE_EQ(j.steps(1).grad_norm(), 0.75);
  EXPECT_EQ(MetricLine(coordinator_->RenderMetrics(), "weft_job_eval_loss", job),
            absl::StrCat("weft_job_eval_loss{job=\"", job, "\",name=\"mlp\"} 1.25"));

  Done(w1, job, 0, true);
  Done(w2, job, 1, true);
  absl::Status result = watch.Join();
  EXPECT_TRUE(result.ok()) << result;

  // Live and stored alike: each step's event, the eval right after its step's, then the end.
  auto describe = [](const std::vector<v1::JobEvent>& events) {
    std::vector<std::string> out;
    for (const v1::JobEvent& e : events) {
      if (e.has_step()) {
        out.push_back(absl::StrCat("step ", e.step().step()));
      } else if (e.has_eval()) {
        out.push_back(absl::StrCat("eval ", e.eval().step(), " ", e.eval().loss()));
      } else {
        out.push_back(v1::JobState_Name(e.state()));
      }
    }
    return out;
  };
  const std::vector<std::string> want = {"PENDING", "PLANNING", "RUNNING",  "step 1",
                                         "step 2",  "eval 2 2.75", "step 3", "step 4",
                                         "eval 4 1.25", "SUCCEEDED"};
  EXPECT_EQ(describe(watch.seen()), want) << "published";
  std::vector<v1::JobEvent> stored = Events(job);
  EXPECT_EQ(describe(stored), want) << "stored";
  for (const v1::JobEvent& e : stored) {
    if (!e.has_eval()) continue;
    EXPECT_EQ(e.job_id(), job);
    EXPECT_GT(e.time_ms(), 0);
  }

  // The store holds the evaluation: a restarted coordinator answers the same.
  Reopen();
  j = Get(job);
  ASSERT_TRUE(j.has_last_eval());
  EXPECT_EQ(j.last_eval().step(), 4);
  EXPECT_DOUBLE_EQ(j.last_eval().loss(), 1.25);
}

// A job that never evaluated has no last_eval, nor an eval-loss gauge.
TEST_F(CoordinatorTest, AJobWithoutEvaluationsHasNoLastEval) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1));
  for (int step = 1; step <= 3; ++step) {
    coordinator_->HandleWorkerMessage(w1, RecipeStep(job, 0, step, 1.0, 0.5, 2.0, std::nullopt));
  }
  v1::Job j = Get(job);
  EXPECT_FALSE(j.has_last_eval());
  EXPECT_EQ(j.steps_size(), 3);
  for (const v1::JobEvent& e : Events(job)) EXPECT_FALSE(e.has_eval());
  const std::string metrics = coordinator_->RenderMetrics();
  EXPECT_EQ(MetricLine(metrics, "weft_job_eval_loss", job), "");
  EXPECT_EQ(MetricLine(metrics, "weft_job_grad_norm", job),
            absl::StrCat("weft_job_grad_norm{job=\"", job, "\",name=\"mlp\"} 2"));
}

// Deleting a job that evaluated removes its learning-rate, gradient-norm and eval-loss series.
TEST_F(CoordinatorTest, DeletingAJobRemovesItsRecipeGauges) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1));
  coordinator_->HandleWorkerMessage(w1, RecipeStep(job, 0, 1, 1.0, 0.5, 2.0, 1.5));
  Done(w1, job, 0, true);
  std::string metrics = coordinator_->RenderMetrics();
  for (const char* family : {"weft_job_learning_rate", "weft_job_grad_norm", "weft_job_eval_loss"}) {
    EXPECT_NE(MetricLine(metrics, family, job), "") << family;
  }
  ASSERT_TRUE(coordinator_->DeleteJob(job).ok());
  metrics = coordinator_->RenderMetrics();
  for (const char* family : {"weft_job_learning_rate", "weft_job_grad_norm", "weft_job_eval_loss"}) {
    EXPECT_EQ(MetricLine(metrics, family, job), "") << family;
  }
}

// The ids of a ListJobs page.
std::vector<std::string> Ids(const v1::ListJobsResponse& page) {
  std::vector<std::string> ids;
  for (const v1::JobSummary& job : page.jobs()) ids.push_back(job.id());
  return ids;
}

// ListJobs: summaries in submit order, a default page when none is asked, a page of the bound
// for more, the state filter, and the errors naming their field.
TEST_F(CoordinatorTest, ListJobsGivesBoundedPagesOfSummaries) {
  pages_.jobs_default = 2;
  pages_.jobs_max = 3;
  Reopen();
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    v1::JobSpec spec = Spec(1, absl::StrCat("j", i));
    spec.mutable_train()->set_steps(10);
    ids.push_back(Submit(spec));  // the first runs on the one worker, the others wait
  }
  Step(w1, ids[0], 0, 1, 0.5, 0.1);

  auto first = coordinator_->ListJobs({});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(Ids(*first), (std::vector<std::string>{ids[0], ids[1]}));
  EXPECT_EQ(first->next_page_token(), ids[1]);
  const v1::JobSummary& running = first->jobs(0);
  EXPECT_EQ(running.name(), "j0");
  EXPECT_EQ(running.state(), v1::RUNNING);
  EXPECT_EQ(running.total_steps(), 10);
  EXPECT_EQ(running.last_step().step(), 1);
  EXPECT_DOUBLE_EQ(running.last_step().loss(), 0.5);
  EXPECT_FALSE(first->jobs(1).has_last_step());

  v1::ListJobsRequest request;
  request.set_page_size(1000);  // more than the bound: a page of 3
  request.set_page_token(first->next_page_token());
  auto rest = coordinator_->ListJobs(request);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(Ids(*rest), (std::vector<std::string>{ids[2], ids[3], ids[4]}));
  EXPECT_EQ(rest->next_page_token(), "");

  request = v1::ListJobsRequest();
  request.set_state(v1::PENDING);
  request.set_page_size(3);
  auto pending = coordinator_->ListJobs(request);
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ(Ids(*pending), (std::vector<std::string>{ids[1], ids[2], ids[3]}));
  request.set_page_token(pending->next_page_token());
  pending = coordinator_->ListJobs(request);
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_EQ(Ids(*pending), (std::vector<std::string>{ids[4]}));
  EXPECT_EQ(pending->next_page_token(), "");

  auto refused = [&](const v1::ListJobsRequest& r, const std::string& field) {
    auto page = coordinator_->ListJobs(r);
    ASSERT_FALSE(page.ok()) << field;
    EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument) << page.status();
    EXPECT_EQ(page.status().message().rfind(field + ": ", 0), 0u) << page.status();
  };
  request = v1::ListJobsRequest();
  request.set_page_size(-1);
  refused(request, "page_size");
  request = v1::ListJobsRequest();
  request.set_page_token("no-such-job");
  refused(request, "page_token");
  request = v1::ListJobsRequest();
  request.set_state(static_cast<v1::JobState>(99));
  refused(request, "state");
}

// GetJob: the job's steps a page at a time, following next_steps_page_token; pages
// bounded; a bad token named; CancelJob answers without steps.
TEST_F(CoordinatorTest, GetJobGivesStepsInBoundedPages) {
  pages_.steps_default = 2;
  pages_.steps_max = 3;
  Reopen();
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1));
  for (int step = 1; step <= 7; ++step) Step(w1, job, 0, step, 1.0 / step, 0.1);

  v1::GetJobRequest request;
  request.set_job_id(job);
  std::vector<int64_t> steps;
  std::vector<int> sizes;
  do {
    auto page = coordinator_->GetJob(request);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_EQ(page->state(), v1::RUNNING);
    sizes.push_back(page->steps_size());
    for (const v1::StepMetrics& m : page->steps()) steps.push_back(m.step());
    request.set_steps_page_token(page->next_steps_page_token());
    request.set_steps_page_size(100);  // after the default first page, pages of the bound
  } while (!request.steps_page_token().empty());
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(sizes, (std::vector<int>{2, 3, 2}));

  auto refused = [&](int page_size, const std::string& token, absl::StatusCode code,
                     const std::string& field) {
    v1::GetJobRequest r;
    r.set_job_id(job);
    r.set_steps_page_size(page_size);
    r.set_steps_page_token(token);
    auto page = coordinator_->GetJob(r);
    ASSERT_FALSE(page.ok()) << token;
    EXPECT_EQ(page.status().code(), code) << page.status();
    EXPECT_EQ(page.status().message().rfind(field + ": ", 0), 0u) << page.status();
  };
  refused(-5, "", absl::StatusCode::kInvalidArgument, "steps_page_size");
  for (const std::string token : {"x", "0", "-1", "3x", "1:3"}) {
    refused(0, token, absl::StatusCode::kInvalidArgument, "steps_page_token");
  }

  auto cancelled = coordinator_->CancelJob(job, "");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->steps_size(), 0);
}

v1::WorkerMessage TracedStep(const std::string& job, int rank, int64_t step,
                             const std::vector<std::string>& names) {
  v1::WorkerMessage m;
  v1::StepReport* r = m.mutable_step();
  r->set_job_id(job);
  r->set_rank(rank);
  r->set_step(step);
  r->set_loss(0.5);
  for (const std::string& name : names) {
    v1::TraceSpan* span = r->add_spans();
    span->set_name(name);
    span->set_category("forward");
    span->set_start_us(1700000000000000 + step * 1000);
    span->set_duration_us(10);
  }
  return m;
}

TEST_F(CoordinatorTest, KeepsTheSpansOfATracedJobByRankAfterItEnds) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  v1::JobSpec spec = Spec(2);
  spec.set_trace(true);
  std::string job = Submit(spec);
  ASSERT_EQ(Get(job).state(), v1::RUNNING);
  // The coordinator turns the spec's trace on in every program.
  EXPECT_TRUE(c1->assignments()[0].program().trace());
  EXPECT_TRUE(c2->assignments()[0].program().trace());

  coordinator_->HandleWorkerMessage(w1, TracedStep(job, 0, 1, {"F mb0 c0", "send a to r1"}));
  coordinator_->HandleWorkerMessage(w2, TracedStep(job, 1, 1, {"recv a from r0"}));
  auto partial = coordinator_->GetJobTrace(job);
  ASSERT_TRUE(partial.ok()) << partial.status();
  ASSERT_EQ(partial->ranks_size(), 2);
  EXPECT_EQ(partial->ranks(0).spans_size(), 2);

  coordinator_->HandleWorkerMessage(w1, TracedStep(job, 0, 2, {"F mb0 c0"}));
  coordinator_->HandleWorkerMessage(w2, TracedStep(job, 1, 2, {"recv a from r0"}));
  // A report for a rank the worker does not hold adds nothing.
  coordinator_->HandleWorkerMessage(w1, TracedStep(job, 1, 3, {"stray"}));
  Done(w1, job, 0, true);
  Done(w2, job, 1, true);
  ASSERT_EQ(Get(job).state(), v1::SUCCEEDED);

  auto trace = coordinator_->GetJobTrace(job);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->ranks_size(), 2);
  EXPECT_EQ(trace->ranks(0).rank(), 0);
  EXPECT_EQ(trace->ranks(0).worker_id(), w1);
  EXPECT_EQ(trace->ranks(1).worker_id(), w2);
  ASSERT_EQ(trace->ranks(0).spans_size(), 3);
  EXPECT_EQ(trace->ranks(0).spans(1).name(), "send a to r1");
  ASSERT_EQ(trace->ranks(1).spans_size(), 2);
  EXPECT_EQ(trace->ranks(1).spans(0).name(), "recv a from r0");
  EXPECT_EQ(trace->dropped_spans(), 0);
}

TEST_F(CoordinatorTest, TraceOfAnUntracedOrUnknownJobIsAnError) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1));
  EXPECT_EQ(coordinator_->GetJobTrace(job).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(coordinator_->GetJobTrace("job-999999").status().code(), absl::StatusCode::kNotFound);
  // A pending traced job has an empty trace.
  v1::JobSpec spec = Spec(2);
  spec.set_trace(true);
  std::string pending = Submit(spec);
  auto trace = coordinator_->GetJobTrace(pending);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->ranks_size(), 0);
  // After a restart the trace of a finished traced job is gone: NOT_FOUND says why.
  std::shared_ptr<RecordedConnection> c2;
  Done(w1, job, 0, true);
  std::string w2 = Connect(&c2);
  ASSERT_EQ(Get(pending).state(), v1::RUNNING);
  Reopen();
  auto gone = coordinator_->GetJobTrace(pending);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
  EXPECT_NE(gone.status().message().find("no longer held"), std::string::npos) << gone.status();
}

TEST_F(CoordinatorTest, FailedRankFailsTheJobAndCancelsTheOthers) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  std::string job = Submit(Spec(2));
  Done(w2, job, 1, false, "loading fc0.weight: shape mismatch");
  v1::Job j = Get(job);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_EQ(j.message(), "rank 1 (" + w2 + "): loading fc0.weight: shape mismatch");
  EXPECT_EQ(c1->cancels(), 1);
  EXPECT_EQ(c2->cancels(), 0);
  EXPECT_EQ(WorkerState(w2), "idle");
  // worker 1 is winding down until it confirms.
  EXPECT_EQ(WorkerState(w1), "busy");
  Done(w1, job, 0, false, "cancelled");
  EXPECT_EQ(WorkerState(w1), "idle");
  EXPECT_EQ(Get(job).state(), v1::FAILED);
}

TEST_F(CoordinatorTest, BrokenStreamLosesTheWorkerAndFailsItsJob) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  std::string job = Submit(Spec(2));
  coordinator_->DisconnectWorker(w2, "its stream broke");
  v1::Job j = Get(job);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_NE(j.message().find(w2), std::string::npos) << j.message();
  EXPECT_NE(j.message().find("rank 1"), std::string::npos) << j.message();
  EXPECT_NE(j.message().find("its stream broke"), std::string::npos) << j.message();
  EXPECT_EQ(WorkerState(w2), "lost");
  EXPECT_EQ(c1->cancels(), 1);
  EXPECT_TRUE(c2->closed());
}

// A worker that says Goodbye (SIGTERM) is drained, not lost: the rank it ran fails naming the
// reason, its stream's end afterwards changes nothing, and an idle one leaves quietly.
TEST_F(CoordinatorTest, AWorkerThatSaysGoodbyeIsDrainedNotLost) {
  std::shared_ptr<RecordedConnection> c1, c2, c3;
  std::string w1 = Connect(&c1), w2 = Connect(&c2), w3 = Connect(&c3);
  std::string job = Submit(Spec(2));
  v1::WorkerMessage bye;
  bye.mutable_goodbye()->set_reason("SIGTERM: the worker is shutting down\xff");
  coordinator_->HandleWorkerMessage(w2, bye);
  v1::Job j = Get(job);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_NE(j.message().find(absl::StrCat("worker ", w2, " (rank 1, host ")), std::string::npos)
      << j.message();
  EXPECT_NE(j.message().find(") drained: SIGTERM: the worker is shutting down\xEF\xBF\xBD"),
            std::string::npos)
      << j.message();  // the stray byte replaced
  EXPECT_EQ(WorkerState(w2), "drained");
  EXPECT_TRUE(c2->closed());
  EXPECT_EQ(c1->cancels(), 1);
  coordinator_->DisconnectWorker(w2, "its stream broke");
  EXPECT_EQ(WorkerState(w2), "drained");

  coordinator_->HandleWorkerMessage(w3, bye);
  EXPECT_EQ(WorkerState(w3), "drained");
  EXPECT_EQ(Get(job).state(), v1::FAILED);  // nothing else changed
}

TEST_F(CoordinatorTest, MissedHeartbeatsLoseTheWorker) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  std::string job = Submit(Spec(2));
  now_ += 600;
  Heartbeat(w1);
  coordinator_->Tick();
  EXPECT_EQ(Get(job).state(), v1::RUNNING);
  now_ += 600;  // worker 2 silent for 1200 ms > 1000 ms
  Heartbeat(w1);
  coordinator_->Tick();
  v1::Job j = Get(job);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_NE(j.message().find(w2 + " (rank 1"), std::string::npos) << j.message();
  EXPECT_NE(j.message().find("no heartbeat"), std::string::npos) << j.message();
  EXPECT_EQ(WorkerState(w2), "lost");
  EXPECT_EQ(WorkerState(w1), "busy");
  EXPECT_TRUE(c2->closed());
  EXPECT_EQ(c2->close_status().code(), absl::StatusCode::kUnavailable);

  // Messages from a lost worker are ignored; worker 1 is free after the grace period.
  Done(w2, job, 1, true);
  now_ += 600;
  Heartbeat(w1);
  coordinator_->Tick();
  EXPECT_EQ(WorkerState(w1), "idle");
}

// The systemd watchdog's view of the background thread: SinceLastTick only grows until a Tick
// gets the lock; a shut-down coordinator's Tick does nothing and leaves it growing.
TEST_F(CoordinatorTest, SinceLastTickGrowsUntilTheNextTick) {
  // Waits until SinceLastTick passes `at_least`; what it then was.
  auto wait_past = [this](absl::Duration at_least) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    absl::Duration since;
    while ((since = coordinator_->SinceLastTick()) <= at_least && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    EXPECT_GT(since, at_least);
    return since;
  };
  coordinator_->Tick();
  const absl::Duration grown = wait_past(coordinator_->SinceLastTick() + absl::Milliseconds(20));
  coordinator_->Tick();
  EXPECT_LT(coordinator_->SinceLastTick(), grown);

  // The background thread ticks (every 100 ms here): the gap shrinks without a call of ours.
  coordinator_->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::Duration last = coordinator_->SinceLastTick(), now;
  while ((now = coordinator_->SinceLastTick()) >= last && absl::Now() < deadline) {
    last = now;
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_LT(now, last) << "no tick in 10 s";

  coordinator_->Shutdown();
  const absl::Duration stopped = wait_past(absl::Milliseconds(20));
  coordinator_->Tick();
  EXPECT_GE(coordinator_->SinceLastTick(), stopped);
}

TEST_F(CoordinatorTest, CancelPendingAndFinalJobs) {
  std::string job = Submit(Spec(2));
  auto cancelled = coordinator_->CancelJob(job, "");
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  EXPECT_EQ(coordinator_->CancelJob(job, "").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(coordinator_->CancelJob("job-424242", "").status().code(),
            absl::StatusCode::kNotFound);
  // A cancelled pending job never starts.
  std::shared_ptr<RecordedConnection> c1, c2;
  Connect(&c1);
  Connect(&c2);
  EXPECT_TRUE(c1->assignments().empty());
}

// A job that ended is deleted with its events, trace and metric series; one still running is
// refused with what to do; an id never given and one deleted are told apart.
TEST_F(CoordinatorTest, DeleteJobRemovesAnEndedJobAndRefusesARunningOne) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  v1::JobSpec traced = Spec(1);
  traced.set_trace(true);
  std::string done = Submit(traced);
  coordinator_->HandleWorkerMessage(w1, TracedStep(done, 0, 1, {"F mb0 c0"}));
  Done(w1, done, 0, true);
  ASSERT_EQ(Get(done).state(), v1::SUCCEEDED);
  std::string running = Submit(Spec(1));
  ASSERT_EQ(Get(running).state(), v1::RUNNING);
  ASSERT_TRUE(coordinator_->GetJobTrace(done).ok());
  ASSERT_THAT(coordinator_->RenderMetrics(), HasSubstr(absl::StrCat("job=\"", done, "\"")));

  auto refused = coordinator_->DeleteJob(running);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(),
            absl::StrCat("job ", running, " is RUNNING: only a job that ended is deleted; cancel "
                         "it first (weftctl cancel ", running, ")"));
  EXPECT_EQ(Get(running).state(), v1::RUNNING);

  auto deleted = coordinator_->DeleteJob(done);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->id(), done);
  EXPECT_EQ(deleted->state(), v1::SUCCEEDED);
  v1::GetJobRequest get;
  get.set_job_id(done);
  EXPECT_EQ(coordinator_->GetJob(get).status().message(), absl::StrCat("job ", done, " was deleted"));
  EXPECT_EQ(coordinator_->GetJobTrace(done).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coordinator_->WatchJob(done, [](const v1::JobEvent&) { return true; },
                                   [] { return false; })
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(coordinator_->RenderMetrics(),
              Not(HasSubstr(absl::StrCat("job=\"", done, "\""))));
  EXPECT_EQ(Ids(*coordinator_->ListJobs({})), std::vector<std::string>{running});
  EXPECT_EQ(coordinator_->DeleteJob(done).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coordinator_->DeleteJob("job-424242").status().message(), "no job job-424242");

  // The running job ends; its worker is free for the next job, whose id is new.
  Done(w1, running, 0, true);
  ASSERT_TRUE(coordinator_->DeleteJob(running).ok());
  EXPECT_EQ(Submit(Spec(1)), "job-000003");
}

// Retention deletes the ended jobs beyond the newest max_ended_jobs as soon as one ends, and
// those that ended job_retention_ms ago once its interval comes round; never a job that runs.
TEST_F(CoordinatorTest, RetentionDeletesEndedJobsPastTheCountOrAge) {
  max_ended_jobs_ = 2;
  job_retention_ms_ = 60000;
  Reopen();
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::vector<std::string> jobs;
  auto stored = [&] {
    std::vector<std::string> ids;
    for (const std::string& id : Ids(*coordinator_->ListJobs({}))) ids.push_back(id);
    return ids;
  };
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(Submit(Spec(1)));
    now_ += 1000;
    Done(w1, jobs.back(), 0, true);
    coordinator_->Tick();
  }
  EXPECT_EQ(stored(), (std::vector<std::string>{jobs[2], jobs[3]}));
  v1::GetJobRequest get;
  get.set_job_id(jobs[0]);
  EXPECT_EQ(coordinator_->GetJob(get).status().message(),
            absl::StrCat("job ", jobs[0], " was deleted"));
  // A running job is not counted, nor deleted however old.
  const std::string running = Submit(Spec(1));
  ASSERT_EQ(Get(running).state(), v1::RUNNING);
  // jobs[2] ended at T+3000, jobs[3] at T+4000: at T+63500 the first is past 60 s.
  now_ = 1000000 + 63500;
  coordinator_->Tick();
  EXPECT_EQ(stored(), (std::vector<std::string>{jobs[3], running}));
  now_ += 5000;  // the next check
  coordinator_->Tick();
  EXPECT_EQ(stored(), std::vector<std::string>{running});
}

TEST_F(CoordinatorTest, CancelRunningEndsWhenWorkersConfirm) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  std::string job = Submit(Spec(2));
  auto j = coordinator_->CancelJob(job, "user pressed ^C");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->state(), v1::RUNNING);
  EXPECT_EQ(c1->cancels(), 1);
  EXPECT_EQ(c2->cancels(), 1);
  Done(w1, job, 0, false, "cancelled");
  EXPECT_EQ(Get(job).state(), v1::RUNNING);
  Done(w2, job, 1, false, "cancelled");
  EXPECT_EQ(Get(job).state(), v1::CANCELLED);
  EXPECT_NE(Get(job).message().find("user pressed ^C"), std::string::npos);
  EXPECT_EQ(WorkerState(w1), "idle");
  EXPECT_EQ(WorkerState(w2), "idle");
}

TEST_F(CoordinatorTest, CancelRunningEndsAfterTheGracePeriod) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string queued = Submit(Spec(1, "later"));  // runs first
  std::string job = Submit(Spec(1));
  EXPECT_EQ(Get(job).state(), v1::PENDING);
  ASSERT_TRUE(coordinator_->CancelJob(queued, "").ok());
  coordinator_->Tick();
  EXPECT_EQ(Get(queued).state(), v1::RUNNING);
  now_ += 501;
  Heartbeat(w1);
  coordinator_->Tick();
  v1::Job j = Get(queued);
  EXPECT_EQ(j.state(), v1::CANCELLED);
  EXPECT_NE(j.message().find("did not confirm"), std::string::npos) << j.message();
  // The worker is free (it never confirmed, but the grace is over) and the next job starts.
  now_ += 501;
  Heartbeat(w1);
  coordinator_->Tick();
  EXPECT_EQ(Get(job).state(), v1::RUNNING);
}

TEST_F(CoordinatorTest, PlanningFailureFailsTheJobAndFreesWorkers) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1, "unplannable"));
  v1::Job j = Get(job);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_NE(j.message().find("no SPMD rule"), std::string::npos) << j.message();
  EXPECT_EQ(WorkerState(w1), "idle");
  EXPECT_TRUE(c1->assignments().empty());
}

TEST_F(CoordinatorTest, AProgramThatCannotBeEmittedFailsTheAttemptAndCancelsTheRanksSent) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1);
  std::string w2 = Connect(&c2);
  std::string job = Submit(Spec(2, "rank1-fails"));
  v1::Job j = Get(job);
  EXPECT_EQ(j.state(), v1::FAILED);
  EXPECT_NE(j.message().find("planning failed: fc0.weight: no SPMD rule"), std::string::npos)
      << j.message();
  // Rank 0 got its Program and then a cancel; rank 1 got nothing and is free at once.
  ASSERT_EQ(c1->assignments().size(), 1u);
  EXPECT_TRUE(c2->assignments().empty());
  EXPECT_EQ(WorkerState(w2), "idle");
  bool cancelled = false;
  for (const v1::CoordinatorMessage& m : c1->sent()) cancelled = cancelled || m.has_cancel();
  EXPECT_TRUE(cancelled);
}

TEST_F(CoordinatorTest, PlansEachJobOnceAtSubmit) {
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(2));
  EXPECT_EQ(plans_, 1);  // planned at SubmitJob, before any worker is free for it
  EXPECT_EQ(Get(job).state(), v1::PENDING);
  std::string w2 = Connect(&c2);
  EXPECT_EQ(Get(job).state(), v1::RUNNING);
  EXPECT_EQ(plans_, 1);  // the attempt only emitted each rank's Program from that plan
  ASSERT_EQ(c1->assignments().size(), 1u);
  ASSERT_EQ(c2->assignments().size(), 1u);
  EXPECT_EQ(c1->assignments()[0].program().rank(), 0);
  EXPECT_EQ(c2->assignments()[0].program().rank(), 1);
  EXPECT_EQ(c2->assignments()[0].program().job_id(), job);
}

TEST_F(CoordinatorTest, WatchStreamsLiveEventsUntilTheJobIsFinal) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1));
  LiveWatch watch(coordinator_.get(), job);
  // The replay (PENDING, PLANNING, RUNNING) has been seen before the live events are made.
  EXPECT_TRUE(watch.AwaitEvents(3));
  Step(w1, job, 0, 1, 0.3, 0.5);
  Done(w1, job, 0, true);
  absl::Status result = watch.Join();
  EXPECT_TRUE(result.ok()) << result;
  const std::vector<v1::JobEvent>& seen = watch.seen();
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0].state(), v1::PENDING);
  EXPECT_EQ(seen[1].state(), v1::PLANNING);
  EXPECT_EQ(seen[2].state(), v1::RUNNING);
  EXPECT_DOUBLE_EQ(seen[3].step().loss(), 0.3);
  EXPECT_EQ(seen[4].state(), v1::SUCCEEDED);

  EXPECT_EQ(coordinator_->WatchJob("job-999999", [](const v1::JobEvent&) { return true; }, nullptr)
                .code(),
            absl::StatusCode::kNotFound);
}

// Watch streams are bounded per job and in all: past either bound a watch is refused at once,
// with the figures; a closed stream frees its place.
TEST_F(CoordinatorTest, WatchStreamsAreBoundedPerJobAndInAll) {
  CoordinatorOptions options = Options();
  options.max_watchers_per_job = 2;
  options.max_watchers = 3;
  auto store = JobStore::Open(dir_ + "/watched.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto c = Coordinator::Create(std::move(*store), options);
  ASSERT_TRUE(c.ok()) << c.status();
  Coordinator& coordinator = **c;
  auto first = coordinator.SubmitJob(Spec(4, "first"));
  auto second = coordinator.SubmitJob(Spec(4, "second"));
  ASSERT_TRUE(first.ok() && second.ok());
  auto no_events = [](const v1::JobEvent&) { return true; };

  std::atomic<bool> stop{false};
  std::vector<std::thread> open;
  std::vector<std::unique_ptr<absl::Notification>> waiting;
  auto watch_in_background = [&](const std::string& job) {
    waiting.push_back(std::make_unique<absl::Notification>());
    absl::Notification* in_loop = waiting.back().get();
    open.emplace_back([&, job, in_loop] {
      coordinator.WatchJob(job, no_events, [&, in_loop] {
        if (!in_loop->HasBeenNotified()) in_loop->Notify();
        return stop.load();
      }).IgnoreError();
    });
    in_loop->WaitForNotification();  // registered and waiting
  };
  watch_in_background(*first);
  watch_in_background(*first);
  absl::Status s = coordinator.WatchJob(*first, no_events, [] { return true; });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), absl::StrCat("job ", *first,
                                      " has 2 watch streams open (at most 2); close one and "
                                      "watch again"));
  watch_in_background(*second);
  s = coordinator.WatchJob(*second, no_events, [] { return true; });
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "the coordinator has 3 watch streams open (at most 3); close one and watch again");
  stop = true;
  for (std::thread& t : open) t.join();
  // Closed: a watch fits again (and ends at its first poll).
  EXPECT_EQ(coordinator.WatchJob(*first, no_events, [] { return true; }).code(),
            absl::StatusCode::kCancelled);
  coordinator.Shutdown();
}

TEST_F(CoordinatorTest, WatchEndsWhenTheClientGoesAway) {
  std::string job = Submit(Spec(4));
  // Still there at the first poll (the watch is waiting for events by then), gone at the second.
  int polls = 0;
  absl::Status s = coordinator_->WatchJob(
      job, [](const v1::JobEvent&) { return true; }, [&] { return ++polls == 2; });
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(polls, 2);
}

// The cause, not the echo: failures are gathered for failure_settle_ms and the earliest by its
// time is the job's failure, the others after it; a lone failure decides when the window closes.
TEST_F(CoordinatorTest, TheEarliestFailureOverTheRanksIsTheCause) {
  failure_settle_ms_ = 1000;
  Reopen();
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  std::string job = Submit(Spec(2));
  ASSERT_EQ(Get(job).state(), v1::RUNNING);
  const int64_t t = now_.load();
  // Rank 1's echo arrives first; rank 0's checksum error happened 40 ms before it.
  Done(w2, job, 1, false, "all_reduce: Connection closed by peer", 0, t + 50);
  EXPECT_EQ(Get(job).state(), v1::RUNNING);  // gathering
  Done(w1, job, 0, false, "loading fc0.weight: checksum mismatch", 0, t + 10);
  v1::Job failed = Get(job);
  EXPECT_EQ(failed.state(), v1::FAILED);
  EXPECT_EQ(failed.message(),
            "rank 0 (worker-1): loading fc0.weight: checksum mismatch; then rank 1 (worker-2): "
            "all_reduce: Connection closed by peer (+40 ms)");

  std::string lone = Submit(Spec(2));
  ASSERT_EQ(Get(lone).state(), v1::RUNNING);
  Done(w1, lone, 0, false, "step 3: out of memory", 0, now_.load());
  now_ += 999;
  coordinator_->Tick();
  EXPECT_EQ(Get(lone).state(), v1::RUNNING);  // rank 1 is silent; the window is still open
  now_ += 1;
  coordinator_->Tick();
  EXPECT_EQ(Get(lone).state(), v1::FAILED);
  EXPECT_EQ(Get(lone).message(), "rank 0 (worker-1): step 3: out of memory");
}

// An echo on a peer of the same host often fails within the millisecond of its cause: the
// microseconds order them, whichever report arrives first.
TEST_F(CoordinatorTest, FailuresWithinAMillisecondAreOrderedByTheirMicroseconds) {
  failure_settle_ms_ = 1000;
  Reopen();
  std::shared_ptr<RecordedConnection> c1, c2;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  std::string job = Submit(Spec(2));
  ASSERT_EQ(Get(job).state(), v1::RUNNING);
  const int64_t t_us = now_.load() * 1000;
  auto fail_at_us = [&](const std::string& worker, int rank, const std::string& message,
                        int64_t us) {
    v1::WorkerMessage m;
    m.mutable_done()->set_job_id(job);
    m.mutable_done()->set_rank(rank);
    m.mutable_done()->set_message(message);
    m.mutable_done()->set_failed_at_ms(us / 1000);
    m.mutable_done()->set_failed_at_us(us);
    coordinator_->HandleWorkerMessage(worker, m);
  };
  fail_at_us(w1, 0, "rank 0: all_reduce: Connection reset by peer", t_us + 900);
  fail_at_us(w2, 1, "rank 1: loading fc0.weight: checksum mismatch", t_us + 300);
  v1::Job failed = Get(job);
  ASSERT_EQ(failed.state(), v1::FAILED);
  EXPECT_EQ(failed.message(),
            "rank 1 (worker-2): rank 1: loading fc0.weight: checksum mismatch; then rank 0 "
            "(worker-1): rank 0: all_reduce: Connection reset by peer (+0 ms)");
  ASSERT_EQ(failed.rank_errors_size(), 2);
  EXPECT_EQ(failed.rank_errors(0).rank(), 1);
  EXPECT_EQ(failed.rank_errors(0).failed_at_ms(), t_us / 1000);
  EXPECT_EQ(failed.rank_errors(1).rank(), 0);
}

// Every rank's error of the failed attempt is in the job record, earliest first, with its worker,
// host, attempt and time: a TaskDone's message without the worker's "rank R: " prefix, a lost
// worker's reason. The record keeps them across a coordinator restart.
TEST_F(CoordinatorTest, EveryRanksErrorIsRecordedEarliestFirst) {
  failure_settle_ms_ = 1000;
  Reopen();
  std::shared_ptr<RecordedConnection> c1, c2, c3;
  std::string w1 = Connect(&c1), w2 = Connect(&c2), w3 = Connect(&c3);
  std::string job = Submit(Spec(3));
  ASSERT_EQ(Get(job).state(), v1::RUNNING);
  const int64_t t = now_.load();
  Done(w3, job, 2, false, "rank 2: step 1: all_reduce: Connection closed by peer", 0, t + 50);
  Done(w2, job, 1, false, "rank 1: step 1: loading fc0.weight: checksum mismatch", 0, t + 10);
  EXPECT_EQ(Get(job).rank_errors_size(), 0) << "recorded before the attempt was decided";
  now_ += 70;
  coordinator_->DisconnectWorker(w1, "its stream broke");
  v1::Job failed = Get(job);
  ASSERT_EQ(failed.state(), v1::FAILED);
  EXPECT_EQ(failed.message().rfind("rank 1 (" + w2 + "): rank 1: step 1: loading", 0), 0u)
      << failed.message();
  ASSERT_EQ(failed.rank_errors_size(), 3);
  EXPECT_EQ(failed.rank_errors_omitted(), 0);
  const v1::RankError& cause = failed.rank_errors(0);
  EXPECT_EQ(cause.rank(), 1);
  EXPECT_EQ(cause.worker(), w2);
  EXPECT_EQ(cause.host(), "127.0.0.1");
  EXPECT_EQ(cause.attempt(), 0);
  EXPECT_EQ(cause.failed_at_ms(), t + 10);
  EXPECT_EQ(cause.message(), "step 1: loading fc0.weight: checksum mismatch");
  EXPECT_EQ(failed.rank_errors(1).rank(), 2);
  EXPECT_EQ(failed.rank_errors(1).worker(), w3);
  EXPECT_EQ(failed.rank_errors(1).failed_at_ms(), t + 50);
  EXPECT_EQ(failed.rank_errors(1).message(), "step 1: all_reduce: Connection closed by peer");
  EXPECT_EQ(failed.rank_errors(2).rank(), 0);
  EXPECT_EQ(failed.rank_errors(2).worker(), w1);
  EXPECT_EQ(failed.rank_errors(2).failed_at_ms(), t + 70);
  EXPECT_EQ(failed.rank_errors(2).message(), "worker lost: its stream broke");

  Reopen();
  v1::Job reread = Get(job);
  ASSERT_EQ(reread.rank_errors_size(), 3);
  EXPECT_EQ(reread.rank_errors(0).message(), cause.message());
  EXPECT_EQ(reread.rank_errors(2).message(), "worker lost: its stream broke");
}

// A restarted job keeps the errors of its latest failed attempt: attempt 0's while it restarts,
// then attempt 1's.
TEST_F(CoordinatorTest, RankErrorsAreThoseOfTheLatestFailedAttempt) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  v1::JobSpec spec = Spec(1);
  spec.mutable_train()->set_max_restarts(1);
  std::string job = Submit(spec);
  Done(w1, job, 0, false, "rank 0: step 2: out of memory", 0, now_.load());
  v1::Job restarted = Get(job);
  ASSERT_EQ(restarted.attempt(), 1);
  ASSERT_EQ(restarted.rank_errors_size(), 1);
  EXPECT_EQ(restarted.rank_errors(0).attempt(), 0);
  EXPECT_EQ(restarted.rank_errors(0).message(), "step 2: out of memory");
  ASSERT_EQ(restarted.state(), v1::RUNNING) << restarted.message();
  Done(w1, job, 0, false, "rank 0: step 5: nan loss", 1, now_.load());
  v1::Job failed = Get(job);
  ASSERT_EQ(failed.state(), v1::FAILED);
  ASSERT_EQ(failed.rank_errors_size(), 1);
  EXPECT_EQ(failed.rank_errors(0).attempt(), 1);
  EXPECT_EQ(failed.rank_errors(0).message(), "step 5: nan loss");
}

// At most kMaxRankErrors errors are kept, the earliest, each cut at kRankErrorMessageBytes; the
// rest are counted.
TEST_F(CoordinatorTest, RankErrorsAreBounded) {
  failure_settle_ms_ = 1000;
  Reopen();
  constexpr int kRanks = kMaxRankErrors + 44;
  std::vector<std::shared_ptr<RecordedConnection>> connections(kRanks);
  std::vector<std::string> workers;
  for (auto& c : connections) workers.push_back(Connect(&c));
  std::string job = Submit(Spec(kRanks));
  ASSERT_EQ(Get(job).state(), v1::RUNNING);
  const int64_t t = now_.load();
  for (int r = kRanks - 1; r >= 0; --r) {  // the later ranks fail later, report first
    Done(workers[r], job, r, false, std::string(5000, 'x'), 0, t + r);
  }
  v1::Job failed = Get(job);
  ASSERT_EQ(failed.state(), v1::FAILED);
  ASSERT_EQ(failed.rank_errors_size(), kMaxRankErrors);
  EXPECT_EQ(failed.rank_errors_omitted(), 44);
  for (int r = 0; r < kMaxRankErrors; ++r) {
    EXPECT_EQ(failed.rank_errors(r).rank(), r);
    EXPECT_EQ(failed.rank_errors(r).message().size(), kRankErrorMessageBytes);
  }
}

v1::WorkerMessage LogLines(const std::string& job, int attempt, int rank,
                           const std::vector<std::string>& texts, int64_t time_ms) {
  v1::WorkerMessage m;
  v1::LogLines* logs = m.mutable_logs();
  logs->set_job_id(job);
  logs->set_attempt(attempt);
  logs->set_rank(rank);
  for (const std::string& text : texts) {
    v1::LogLine* line = logs->add_lines();
    line->set_time_ms(time_ms++);
    line->set_level("info");
    line->set_text(text);
  }
  return m;
}

// The texts of the job's lines GetJobLogs returns for `request` (every page), "rR: text".
std::vector<std::string> LogTexts(Coordinator* coordinator, v1::GetJobLogsRequest request) {
  std::vector<std::string> texts;
  while (true) {
    auto page = coordinator->GetJobLogs(request);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) return texts;
    for (const v1::JobLogLine& line : page->lines()) {
      texts.push_back(absl::StrCat("r", line.rank(), ": ", line.text()));
    }
    if (page->next_page_token().empty()) return texts;
    request.set_page_token(page->next_page_token());
  }
}

// A worker's lines are stored only for the rank it runs (while it runs it, or winds it down
// after its attempt ended); lines for another rank, attempt or job, or after it confirmed the
// end, are ignored.
TEST_F(CoordinatorTest, LogLinesAreStoredOnlyFromTheWorkerRunningThatRank) {
  pages_.logs_default = 2;
  Reopen();
  std::shared_ptr<RecordedConnection> c1, c2, c3;
  std::string w1 = Connect(&c1), w2 = Connect(&c2);
  std::string job = Submit(Spec(2));
  ASSERT_EQ(Get(job).state(), v1::RUNNING);
  std::string idle = Connect(&c3);
  const int64_t t = 1700000000000;
  coordinator_->HandleWorkerMessage(w1, LogLines(job, 0, 0, {"starting", "step 1"}, t));
  coordinator_->HandleWorkerMessage(w2, LogLines(job, 0, 1, {"starting"}, t + 5));
  coordinator_->HandleWorkerMessage(w2, LogLines(job, 0, 0, {"w2 posing as rank 0"}, t + 1));
  coordinator_->HandleWorkerMessage(w1, LogLines(job, 1, 0, {"another attempt"}, t + 2));
  coordinator_->HandleWorkerMessage(idle, LogLines(job, 0, 1, {"an idle worker"}, t + 3));
  coordinator_->HandleWorkerMessage(w1, LogLines("job-999999", 0, 0, {"another job"}, t + 4));
  // Rank 1 fails; rank 0 winds down: its lines until it confirms are kept, none after.
  coordinator_->HandleWorkerMessage(w2, LogLines(job, 0, 1, {"checksum mismatch"}, t + 10));
  Done(w2, job, 1, false, "rank 1: checksum mismatch");
  ASSERT_EQ(Get(job).state(), v1::FAILED);
  coordinator_->HandleWorkerMessage(w2, LogLines(job, 0, 1, {"after its TaskDone"}, t + 11));
  coordinator_->HandleWorkerMessage(w1, LogLines(job, 0, 0, {"cancelled"}, t + 12));
  Done(w1, job, 0, false, "cancelled");
  coordinator_->HandleWorkerMessage(w1, LogLines(job, 0, 0, {"after its TaskDone"}, t + 13));

  v1::GetJobLogsRequest all;
  all.set_job_id(job);
  EXPECT_EQ(LogTexts(coordinator_.get(), all),
            (std::vector<std::string>{"r0: starting", "r0: step 1", "r1: starting",
                                      "r1: checksum mismatch", "r0: cancelled"}));
  v1::GetJobLogsRequest rank1 = all;
  rank1.set_rank(1);
  EXPECT_EQ(LogTexts(coordinator_.get(), rank1),
            (std::vector<std::string>{"r1: starting", "r1: checksum mismatch"}));
  v1::GetJobLogsRequest since = all;
  since.set_since_ms(t + 5);
  EXPECT_EQ(LogTexts(coordinator_.get(), since),
            (std::vector<std::string>{"r1: starting", "r1: checksum mismatch", "r0: cancelled"}));
  v1::GetJobLogsRequest attempt0 = rank1;
  attempt0.set_attempt(0);
  auto page = coordinator_->GetJobLogs(attempt0);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->lines_size(), 2);
  EXPECT_EQ(page->lines(1).seq(), 2);
  EXPECT_EQ(page->lines(1).time_ms(), t + 10);
  EXPECT_EQ(page->lines(1).level(), "info");
  EXPECT_TRUE(page->next_page_token().empty());
}

TEST_F(CoordinatorTest, GetJobLogsNamesWhatIsWrongWithTheRequest) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1));
  v1::GetJobLogsRequest unknown;
  unknown.set_job_id("job-999999");
  EXPECT_EQ(coordinator_->GetJobLogs(unknown).status().code(), absl::StatusCode::kNotFound);
  auto expect_invalid = [&](const v1::GetJobLogsRequest& request, const std::string& field) {
    auto got = coordinator_->GetJobLogs(request);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_EQ(got.status().message().rfind(field + ":", 0), 0u) << got.status();
  };
  v1::GetJobLogsRequest request;
  request.set_job_id(job);
  EXPECT_TRUE(coordinator_->GetJobLogs(request).ok());
  for (int rank : {-1, 1}) {
    v1::GetJobLogsRequest bad = request;
    bad.set_rank(rank);
    expect_invalid(bad, "rank");
  }
  for (int attempt : {-1, 1}) {
    v1::GetJobLogsRequest bad = request;
    bad.set_attempt(attempt);
    expect_invalid(bad, "attempt");
  }
  for (const std::string token : {"x", "0:1:2", "0:1:2:0", "-1:5:0:1", "0:a:0:1"}) {
    v1::GetJobLogsRequest bad = request;
    bad.set_page_token(token);
    expect_invalid(bad, "page_token");
  }
  v1::GetJobLogsRequest negative = request;
  negative.set_page_size(-1);
  expect_invalid(negative, "page_size");
  negative = request;
  negative.set_since_ms(-5);
  expect_invalid(negative, "since_ms");
}

TEST_F(CoordinatorTest, RendezvousScopeIsDroppedWhenTheAttemptEnds) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1));
  ASSERT_EQ(c1->assignments().size(), 1u);
  const std::string ticket = c1->assignments()[0].rendezvous_ticket();
  ASSERT_TRUE(coordinator_->rendezvous()->Set(job + "/0", ticket, "gloo/0", "addr").ok());
  Done(w1, job, 0, true);
  EXPECT_EQ(coordinator_->rendezvous()->Get(job + "/0", ticket, "gloo/0").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(coordinator_->rendezvous()->ScopeCount(), 0);
}

TEST_F(CoordinatorTest, RestartRestartsRunningJobsFirstAndRequeuesPendingOnes) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string running = Submit(Spec(1));
  std::string pending = Submit(Spec(1, "second"));
  ASSERT_EQ(Get(running).state(), v1::RUNNING);
  ASSERT_EQ(Get(pending).state(), v1::PENDING);
  Step(w1, running, 0, 1, 0.5, 0.1);

  Reopen();
  v1::Job r = Get(running);
  EXPECT_EQ(r.state(), v1::RESTARTING);
  EXPECT_EQ(r.attempt(), 1);
  EXPECT_EQ(r.message().rfind("restarting: the coordinator restarted while the job ran", 0), 0u)
      << r.message();
  EXPECT_EQ(r.steps_size(), 1);  // nothing stored was lost
  EXPECT_EQ(Get(pending).state(), v1::PENDING);

  // The interrupted job goes first, as its next attempt; the pending one after it.
  std::shared_ptr<RecordedConnection> again;
  std::string w2 = Connect(&again);
  EXPECT_EQ(Get(running).state(), v1::RUNNING);
  EXPECT_EQ(Get(running).attempt(), 1);
  EXPECT_EQ(Get(pending).state(), v1::PENDING);
  Done(w2, running, 0, true, "", /*attempt=*/1);
  EXPECT_EQ(Get(running).state(), v1::SUCCEEDED);
  EXPECT_EQ(Get(pending).state(), v1::RUNNING);
  // Job ids keep counting after a restart.
  EXPECT_EQ(Submit(Spec(1)), "job-000003");
}

TEST_F(CoordinatorTest, ShutdownClosesWorkerStreamsWithoutFailingJobs) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1));
  coordinator_->Shutdown();
  EXPECT_TRUE(c1->closed());
  coordinator_->DisconnectWorker(w1, "its stream broke");
  EXPECT_EQ(Get(job).state(), v1::RUNNING);  // the next start marks it FAILED
  EXPECT_EQ(coordinator_->SubmitJob(Spec(1)).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(CoordinatorTest, ListWorkersReportsDeviceAndAssignment) {
  std::shared_ptr<RecordedConnection> c1;
  std::string w1 = Connect(&c1);
  std::string job = Submit(Spec(1));
  std::vector<v1::WorkerInfo> workers = coordinator_->ListWorkers();
  ASSERT_EQ(workers.size(), 1u);
  EXPECT_EQ(workers[0].worker_id(), w1);
  EXPECT_EQ(workers[0].device().kind(), "cpu");
  EXPECT_EQ(workers[0].host(), "127.0.0.1");
  EXPECT_EQ(workers[0].state(), "busy");
  EXPECT_EQ(workers[0].job_id(), job);
  EXPECT_EQ(workers[0].rank(), 0);
  EXPECT_EQ(workers[0].pid(), 1234);
}

// The real PrepareJobSpec + planner behind SubmitJob.
TEST(RealSpecAndPlannerTest, SubmitJobRejectsAnUnknownLayerType) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok());
  auto c = Coordinator::Create(std::move(*store), CoordinatorOptions());
  ASSERT_TRUE(c.ok());
  v1::JobSpec spec;
  spec.set_name("bad");
  spec.mutable_mesh()->add_shape(1);
  spec.mutable_mesh()->add_dim_names("dp");
  v1::Layer* fc = spec.mutable_model()->add_layers();
  fc->set_name("fc0");
  fc->set_type("linear");
  fc->set_in_features(4);
  fc->set_out_features(4);
  v1::Layer* bad = spec.mutable_model()->add_layers();
  bad->set_name("act0");
  bad->set_type("conv");
  spec.mutable_model()->set_loss("mse");
  spec.mutable_data()->set_source("synthetic");
  spec.mutable_data()->add_sample_shape(4);
  spec.mutable_data()->add_label_shape(4);
  spec.mutable_data()->set_num_samples(8);
  spec.mutable_data()->set_batch_size(4);
  spec.mutable_optimizer()->set_type("sgd");
  spec.mutable_optimizer()->set_lr(0.1);
  spec.mutable_train()->set_steps(1);
  auto id = (*c)->SubmitJob(spec);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("model.layers[1]"), absl::string_view::npos)
      << id.status();
  EXPECT_TRUE((*c)->ListJobs({})->jobs().empty());

  // The same spec with a relu is accepted and waits for a worker.
  bad->set_type("relu");
  id = (*c)->SubmitJob(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  v1::GetJobRequest get;
  get.set_job_id(*id);
  auto job = (*c)->GetJob(get);
  EXPECT_EQ(job->state(), v1::PENDING);
  EXPECT_EQ(job->message(), "waiting for 1 idle cpu worker, 0 registered");
  (*c)->Shutdown();
}

// A SubmitJobRequest's spec_yaml is read as weftctl reads a spec file: the same reader, relative
// paths against spec_dir, the same errors; the job stored equals the one weftctl's JobSpec makes.
TEST(RealSpecAndPlannerTest, SubmitJobReadsSpecYamlAsWeftctlReadsAFile) {
  const std::string dir = TempDir();
  std::filesystem::create_directories(dir + "/data");
  CoordinatorOptions options;
  auto roots = PathRoots::Resolve(dir + "/data", "");
  ASSERT_TRUE(roots.ok()) << roots.status();
  options.roots = *roots;
  auto store = JobStore::Open(dir + "/weft.db");
  ASSERT_TRUE(store.ok());
  auto c = Coordinator::Create(std::move(*store), options);
  ASSERT_TRUE(c.ok());
  const std::string yaml = R"(name: from-yaml
mesh: {shape: [2], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 16}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 16, out_features: 4}
  loss: mse
data: {source: synthetic, sample_shape: [8], label_shape: [4], num_samples: 32, batch_size: 4}
optimizer: {type: sgd, lr: 0.1}
train: {steps: 3}
checkpoint: {dir: ckpt/run1}
)";
  v1::SubmitJobRequest request;
  request.set_spec_yaml(yaml);
  request.set_spec_dir(dir + "/jobs");
  auto id = (*c)->SubmitJob(request);
  ASSERT_TRUE(id.ok()) << id.status();
  v1::GetJobRequest get;
  get.set_job_id(*id);
  auto job = (*c)->GetJob(get);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().checkpoint().dir(), dir + "/jobs/ckpt/run1");

  // weftctl's way: the file parsed on the client, its JobSpec submitted.
  auto parsed = ParseJobSpecYaml(yaml, dir + "/jobs");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  v1::SubmitJobRequest as_spec;
  *as_spec.mutable_spec() = *parsed;
  auto id2 = (*c)->SubmitJob(as_spec);
  ASSERT_TRUE(id2.ok()) << id2.status();
  get.set_job_id(*id2);
  auto job2 = (*c)->GetJob(get);
  ASSERT_TRUE(job2.ok()) << job2.status();
  EXPECT_EQ(job->spec().SerializeAsString(), job2->spec().SerializeAsString());

  auto refused = [&](const v1::SubmitJobRequest& r) {
    auto bad = (*c)->SubmitJob(r);
    EXPECT_FALSE(bad.ok());
    return bad.ok() ? absl::OkStatus() : bad.status();
  };
  // The reader's error, naming the field and the line.
  v1::SubmitJobRequest typo = request;
  typo.set_spec_yaml(absl::StrReplaceAll(yaml, {{"in_features: 16", "in_feature: 16"}}));
  absl::Status s = refused(typo);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("model.layers[2] (fc1)"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("in_feature"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("line 7"));

  v1::SubmitJobRequest both = request;
  *both.mutable_spec() = *parsed;
  EXPECT_EQ(refused(both).message(), "spec_yaml: give the job as spec or as spec_yaml, not both");
  v1::SubmitJobRequest relative = request;
  relative.set_spec_dir("jobs");
  EXPECT_THAT(std::string(refused(relative).message()), HasSubstr("spec_dir: \"jobs\" must be"));
  // Without spec_dir the paths are the cluster's: this coordinator has no checkpoint root.
  relative.clear_spec_dir();
  EXPECT_EQ(refused(relative).message(),
            "checkpoint.dir: \"ckpt/run1\" is relative, and this coordinator has no "
            "--checkpoint_root to resolve it against: name it as an absolute path, as the "
            "cluster's machines see it, or resolve it on the client (weftctl submit "
            "--check-local-files; a gRPC client sends spec_dir, the folder to resolve it "
            "against)");
  v1::SubmitJobRequest dir_alone = as_spec;
  dir_alone.set_spec_dir(dir);
  EXPECT_EQ(refused(dir_alone).message(), "spec_dir: only with spec_yaml");
  v1::SubmitJobRequest big = request;
  big.set_spec_yaml(yaml + "#" + std::string(kMaxJobSpecBytes, 'x') + "\n");
  EXPECT_THAT(std::string(refused(big).message()), HasSubstr("bytes; at most 1048576 (1 MiB)"));
  // Aliases inside aliases are not expanded (ParseJobSpecYaml counts what they stand for).
  std::string laughs = "name: &l0 [x, x]\n";
  for (int i = 1; i < 30; ++i) {
    absl::StrAppend(&laughs, "a", i, ": &l", i, " [*l", i - 1, ", *l", i - 1, "]\n");
  }
  v1::SubmitJobRequest bomb = request;
  bomb.set_spec_yaml(laughs);
  EXPECT_THAT(std::string(refused(bomb).message()),
              HasSubstr("more than 1048576 YAML nodes with its aliases expanded"));

  // The coordinator reads a model.config_file itself: only under its data root.
  std::ofstream(dir + "/config.json") << R"({"vocab_size": 64, "n_positions": 16, "n_embd": 8,
                                             "n_layer": 1, "n_head": 2})";
  v1::SubmitJobRequest outside = request;
  outside.set_spec_yaml(yaml.substr(0, yaml.find("model:")) +
                        "model: {arch: gpt2, config_file: ../config.json}\n" +
                        yaml.substr(yaml.find("data:")));
  s = refused(outside);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("model.config_file: ", dir, "/config.json")));
  EXPECT_THAT(std::string(s.message()), HasSubstr("is outside --data_root"));
  EXPECT_EQ((*c)->ListJobs({})->jobs_size(), 2);
  (*c)->Shutdown();
}

// A spec_yaml without spec_dir names the cluster's files: its relative paths are resolved under
// the coordinator's roots (data paths, init_from and model.config_file under --data_root,
// checkpoint.dir under --checkpoint_root); with no root to resolve against, a relative path is
// refused before anything is read.
TEST(RealSpecAndPlannerTest, ASpecYamlWithoutSpecDirNamesPathsUnderTheClustersRoots) {
  const std::string dir = TempDir();
  std::filesystem::create_directories(dir + "/data/models");
  std::filesystem::create_directories(dir + "/checkpoints");
  auto start = [&](const std::string& data_root, const std::string& checkpoint_root) {
    CoordinatorOptions options;
    auto roots = PathRoots::Resolve(data_root, checkpoint_root);
    EXPECT_TRUE(roots.ok()) << roots.status();
    options.roots = *roots;
    auto store = JobStore::Open(absl::StrCat(dir, "/weft", data_root.empty(), ".db"));
    EXPECT_TRUE(store.ok());
    auto c = Coordinator::Create(std::move(*store), options);
    EXPECT_TRUE(c.ok());
    return std::move(*c);
  };
  const std::string head = R"(name: remote
mesh: {shape: [1], dim_names: [dp]}
)";
  const std::string mlp = R"(model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 4}
  loss: mse
)";
  const std::string tail = R"(data: {source: synthetic, sample_shape: [8], label_shape: [4], num_samples: 32, batch_size: 4}
optimizer: {type: sgd, lr: 0.1}
train: {steps: 3}
)";
  auto request = [](const std::string& yaml) {
    v1::SubmitJobRequest r;
    r.set_spec_yaml(yaml);
    return r;
  };

  std::unique_ptr<Coordinator> rooted = start(dir + "/data", dir + "/checkpoints");
  auto id = rooted->SubmitJob(request(head + mlp + tail + "checkpoint: {dir: runs/one}\n"));
  ASSERT_TRUE(id.ok()) << id.status();
  v1::GetJobRequest get;
  get.set_job_id(*id);
  auto job = rooted->GetJob(get);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->spec().checkpoint().dir(), dir + "/checkpoints/runs/one");
  // init_from and model.config_file are looked for under the data root.
  auto missing = rooted->SubmitJob(request(head + mlp + tail + "init_from: models/w.safetensors\n"));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr(dir + "/data/models/w.safetensors"));
  auto config = rooted->SubmitJob(
      request(head + "model: {arch: gpt2, config_file: models/config.json}\n" + tail));
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr(dir + "/data/models/config.json"));
  // `..` does not lead out of the root it resolves under.
  auto out = rooted->SubmitJob(request(head + mlp + tail + "checkpoint: {dir: ../elsewhere}\n"));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kPermissionDenied) << out.status();
  rooted->Shutdown();

  std::unique_ptr<Coordinator> open = start("", "");
  auto relative = open->SubmitJob(
      request(head + "model: {arch: gpt2, config_file: models/config.json}\n" + tail));
  EXPECT_EQ(relative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(relative.status().message()),
              HasSubstr("model.config_file: \"models/config.json\" is relative, and this "
                        "coordinator has no --data_root"));
  auto ckpt = open->SubmitJob(request(head + mlp + tail + "checkpoint: {dir: runs/one}\n"));
  EXPECT_THAT(std::string(ckpt.status().message()),
              HasSubstr("checkpoint.dir: \"runs/one\" is relative, and this coordinator has no "
                        "--checkpoint_root"));
  auto absolute = open->SubmitJob(
      request(head + mlp + tail + "checkpoint: {dir: " + dir + "/checkpoints/abs}\n"));
  EXPECT_TRUE(absolute.ok()) << absolute.status();
  EXPECT_EQ(open->ListJobs({})->jobs_size(), 1);
  open->Shutdown();
}

// A spec that takes the planner seconds on this machine's 2 cores (8 layers on 2 pipeline stages,
// 1024 micro-batches: the memory plan of each stage's tens of thousands of buffers), and a
// small one it plans at once.
v1::SubmitJobRequest LongPlanRequest() {
  std::string layers;
  for (int i = 0; i < 8; ++i) {
    absl::StrAppend(&layers, "    - {name: fc", i, ", type: linear, in_features: 64, ",
                    "out_features: 64", i == 0 ? ", stage: 0" : i == 4 ? ", stage: 1" : "", "}\n");
    if (i < 7) absl::StrAppend(&layers, "    - {name: act", i, ", type: relu}\n");
  }
  v1::SubmitJobRequest request;
  request.set_spec_yaml(absl::StrCat(R"(name: long
mesh: {shape: [2, 2], dim_names: [pp, dp]}
pipeline: {dim: pp, schedule: 1F1B, micro_batches: 1024}
model:
  layers:
)", layers, R"(  loss: mse
data: {source: synthetic, sample_shape: [64], label_shape: [64], num_samples: 4096,
       batch_size: 2048}
optimizer: {type: sgd, lr: 0.1}
train: {steps: 1, seed: 1}
)"));
  return request;
}

v1::SubmitJobRequest SmallRequest() {
  v1::SubmitJobRequest request;
  request.set_spec_yaml(R"(name: small
mesh: {shape: [1], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 4}
  loss: mse
data: {source: synthetic, sample_shape: [8], label_shape: [4], num_samples: 32, batch_size: 4}
optimizer: {type: sgd, lr: 0.1}
train: {steps: 3}
)");
  return request;
}

// A SubmitJob whose call's deadline (50 ms) passes while the planner works stops there:
// DEADLINE_EXCEEDED saying what it was doing, nothing stored; the coordinator serves on.
TEST(RealSpecAndPlannerTest, PlanningStopsAtTheCallsDeadline) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok());
  auto c = Coordinator::Create(std::move(*store), CoordinatorOptions());
  ASSERT_TRUE(c.ok());
  const absl::Time deadline = absl::Now() + absl::Milliseconds(50);
  auto id = (*c)->SubmitJob(LongPlanRequest(), [deadline] {
    return absl::Now() < deadline ? absl::OkStatus()
                                  : absl::DeadlineExceededError("the call's deadline passed");
  });
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDeadlineExceeded) << id.status();
  EXPECT_THAT(std::string(id.status().message()),
              testing::StartsWith("planning the job: planning job long: "));
  EXPECT_THAT(std::string(id.status().message()), HasSubstr(": stopped while "));
  EXPECT_THAT(std::string(id.status().message()),
              testing::EndsWith(": the call's deadline passed"));
  EXPECT_TRUE((*c)->ListJobs({})->jobs().empty());
  auto small = (*c)->SubmitJob(SmallRequest());
  EXPECT_TRUE(small.ok()) << small.status();
  EXPECT_EQ((*c)->ListJobs({})->jobs_size(), 1);
  (*c)->Shutdown();
}

// Shutdown stops a SubmitJob still planning (it would hold the gRPC server's Wait, and so the
// daemon's exit, for as long as the plan takes): UNAVAILABLE, saying where it stopped.
TEST(RealSpecAndPlannerTest, ShutdownStopsASubmitStillPlanning) {
  CoordinatorOptions options;
  absl::Notification planning;
  options.plan = [&planning](const v1::JobSpec& spec, const planner::StopCheck& stop) {
    planning.Notify();
    return PlanWithPlanner(spec, stop);
  };
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok());
  auto c = Coordinator::Create(std::move(*store), options);
  ASSERT_TRUE(c.ok());
  absl::StatusOr<std::string> id;
  absl::Notification returned;
  std::thread submit([&] {
    id = (*c)->SubmitJob(LongPlanRequest());
    returned.Notify();
  });
  planning.WaitForNotification();
  (*c)->Shutdown();
  // A safety bound only: the submit returns at the planner's next check.
  ASSERT_TRUE(returned.WaitForNotificationWithTimeout(absl::Seconds(60)));
  submit.join();
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnavailable) << id.status();
  EXPECT_THAT(std::string(id.status().message()), HasSubstr(": stopped while "));
  EXPECT_THAT(std::string(id.status().message()),
              testing::EndsWith(": the coordinator is shutting down"));
}

}  // namespace
}  // namespace weft::coordinator
