// A running test cluster: a real weft-coordinator and N cpu weft-workers on 127.0.0.1 (ports
// picked at run time), with the few JobService calls the integration tests make. Everything it
// started is stopped when it is destroyed.
//
// E.g.
//   auto cluster = DaemonCluster::Start(2);  // returns once both workers are registered
//   std::string id;
//   ASSERT_TRUE(cluster->Submit(spec, &id).ok());
//   EXPECT_EQ(cluster->GetJob(id).state(), v1::PENDING);
#ifndef WEFT_TESTS_DAEMON_CLUSTER_H_
#define WEFT_TESTS_DAEMON_CLUSTER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/process.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft::testing {

class DaemonCluster {
 public:
  // `coordinator_flags` are added to weft-coordinator's command line.
  static absl::StatusOr<std::unique_ptr<DaemonCluster>> Start(
      int cpu_workers, const std::vector<std::string>& coordinator_flags = {});
  ~DaemonCluster();

  const std::string& address() const { return coordinator_->address(); }
  const std::string& dir() const { return dir_; }
  // The daemons, for tests that kill them (Signal(SIGKILL)).
  ChildProcess& coordinator() { return coordinator_->process(); }
  ChildProcess& worker(int i) { return *workers_[i]; }
  std::string coordinator_log() const;
  // Every daemon's log, for failure messages.
  std::string Logs() const;

  grpc::Status Submit(const v1::JobSpec& spec, std::string* job_id = nullptr) const;
  // The job; fails the calling test if the call fails.
  v1::Job GetJob(const std::string& id) const;
  // Every event of the job until it ends (or timeout_s).
  std::vector<v1::JobEvent> Watch(const std::string& id, int timeout_s = 240) const;
  // Empty when the call fails.
  std::vector<v1::WorkerInfo> ListWorkers() const;
  // `weftctl --coordinator <address> args...`.
  CommandResult Weftctl(const std::vector<std::string>& args, int timeout_s = 60) const;

 private:
  DaemonCluster() = default;

  std::string dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::shared_ptr<grpc::Channel> channel_;
};

}  // namespace weft::testing

#endif  // WEFT_TESTS_DAEMON_CLUSTER_H_
