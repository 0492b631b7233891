// A running test cluster: a real weft-coordinator and N cpu weft-workers on 127.0.0.1 (ports
// picked at run time), with the few JobService calls the integration tests make. Everything it
// started is stopped when it is destroyed. A suite whose cases need no fresh daemons shares one
// (started in SetUpTestSuite, destroyed in TearDownTestSuite).
//
// E.g.
//   auto cluster = DaemonCluster::Start(2);  // returns once both workers are registered
//   std::string id;
//   ASSERT_TRUE(cluster->Submit(spec, &id).ok());
//   EXPECT_EQ(cluster->GetJob(id).state(), v1::PENDING);
//   JobOutcome run = cluster->RunSpecFile(spec_path);  // submitted as weftctl does, to its end
#ifndef WEFT_TESTS_DAEMON_CLUSTER_H_
#define WEFT_TESTS_DAEMON_CLUSTER_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"
#include "common/testing_health.h"
#include "tests/process.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft::testing {

struct DaemonClusterOptions {
  int cpu_workers = 1;
  std::vector<std::string> coordinator_flags;          // added to weft-coordinator's command line
  std::map<std::string, std::string> coordinator_env;  // added to its environment
  std::map<std::string, std::string> worker_env;       // added to every worker's
  std::vector<std::string> worker_flags;               // added to every worker's command line
  // Worker i's command line (i counts the workers started, from 0) from the one it would have:
  // e.g. started in a network namespace of its own, dialing the coordinator at another address.
  // Unset: as it is.
  std::function<std::vector<std::string>(int worker, std::vector<std::string> argv)> worker_argv;
};

// What a job's events said.
struct JobOutcome {
  std::map<int64_t, double> losses;  // by step
  std::map<int64_t, double> lrs;     // the learning rate each step applied
  std::map<int64_t, double> grad_norms;   // before clipping
  std::map<int64_t, double> eval_losses;  // by the step after which it evaluated
  int64_t peak_bytes = 0;             // the largest of the steps' (the most any rank held)
  std::vector<v1::CheckpointSaved> saves;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;  // the last state event's
  std::string message;

  static JobOutcome Of(const std::vector<v1::JobEvent>& events);
  // The losses in step order.
  std::vector<double> LossList() const;
};

class DaemonCluster {
 public:
  static absl::StatusOr<std::unique_ptr<DaemonCluster>> Start(int cpu_workers);
  static absl::StatusOr<std::unique_ptr<DaemonCluster>> Start(const DaemonClusterOptions& options);
  ~DaemonCluster();

  const std::string& address() const { return coordinator_->address(); }
  const std::string& dir() const { return dir_; }
  // The daemons, for tests that kill them or wait for them to end.
  Subprocess& coordinator() { return coordinator_->process(); }
  Subprocess& worker(int i) { return *workers_[i]; }
  int worker_count() const { return static_cast<int>(workers_.size()); }
  std::string coordinator_log() const;
  // Every daemon's log, for failure messages.
  std::string Logs() const;

  // Starts one more cpu worker (the cluster's worker flags and environment, plus `env`) and
  // returns once it is registered; it is worker(<the number started before it>).
  absl::Status StartWorker(const std::map<std::string, std::string>& env = {});

  // Kills the coordinator (SIGKILL) and starts a new one on the same address and job store, as a
  // crashed coordinator's supervisor would; returns once it serves. Workers reconnect by
  // themselves.
  absl::Status RestartCoordinator();
  // The same with `env` in place of the cluster's coordinator environment from now on (e.g. a
  // crash point armed, or none).
  absl::Status RestartCoordinator(const std::map<std::string, std::string>& env);

  grpc::Status Submit(const v1::JobSpec& spec, std::string* job_id = nullptr) const;
  // The job; fails the calling test if the call fails.
  v1::Job GetJob(const std::string& id) const;
  // Every event of the job until it ends (or timeout_s).
  std::vector<v1::JobEvent> Watch(const std::string& id, int timeout_s = 240) const;
  // Empty when the call fails.
  std::vector<v1::WorkerInfo> ListWorkers() const;
  // `weftctl --coordinator <address> args...`.
  CommandResult Weftctl(const std::vector<std::string>& args, int timeout_s = 60) const;
  // Loads the spec file as weftctl does, submits it and watches it to its end; fails the calling
  // test if it cannot be loaded or submitted, or unless it SUCCEEDED.
  JobOutcome RunSpecFile(const std::string& spec_path) const;

 private:
  DaemonCluster() = default;
  absl::Status SpawnWorker(const std::map<std::string, std::string>& env);

  std::string dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  DaemonClusterOptions options_;
  int coordinator_restarts_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
};

// A suite whose cases share one cluster of kWorkers cpu workers: started before its first case,
// stopped after its last. Base is ::testing::Test or ::testing::TestWithParam<...>; a suite that
// makes more once per suite (a baseline run) calls these from its own SetUpTestSuite and
// TearDownTestSuite.
//
// E.g.
//   class ResidualTest : public SharedClusterSuite<::testing::Test, 2> {};
//   TEST_F(ResidualTest, Runs) { RunClusterLosses(*cluster_, spec); }
template <typename Base, int kWorkers>
class SharedClusterSuite : public Base {
 protected:
  static void SetUpTestSuite() {
    auto cluster = DaemonCluster::Start(kWorkers);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(cluster).value();
  }
  static void TearDownTestSuite() { cluster_.reset(); }
  void SetUp() override { ASSERT_NE(cluster_, nullptr) << "the shared cluster did not start"; }

  inline static std::unique_ptr<DaemonCluster> cluster_;
};

}  // namespace weft::testing

#endif  // WEFT_TESTS_DAEMON_CLUSTER_H_
