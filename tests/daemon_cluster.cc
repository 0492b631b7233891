#include "tests/daemon_cluster.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"

namespace weft::testing {
namespace {

std::chrono::system_clock::time_point In(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

}  // namespace

absl::StatusOr<std::unique_ptr<DaemonCluster>> DaemonCluster::Start(
    int cpu_workers, const std::vector<std::string>& coordinator_flags) {
  std::unique_ptr<DaemonCluster> c(new DaemonCluster());
  c->dir_ = MakeTempDir("cluster");
  auto coord = CoordinatorProcess::Start(BinaryPath("coordinator/weft-coordinator"), c->dir_,
                                         coordinator_flags);
  if (!coord.ok()) return coord.status();
  c->coordinator_ = std::move(coord).value();
  for (int i = 0; i < cpu_workers; ++i) {
    auto w = ChildProcess::Start({BinaryPath("worker/weft-worker"), "--coordinator",
                                  c->address(), "--device", "cpu"},
                                 absl::StrCat(c->dir_, "/worker", i, ".log"));
    if (!w.ok()) return w.status();
    c->workers_.push_back(std::move(w).value());
  }
  c->channel_ = grpc::CreateChannel(c->address(), grpc::InsecureChannelCredentials());
  for (int i = 0; i < 300; ++i) {
    if (static_cast<int>(c->ListWorkers().size()) >= cpu_workers) return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("only ", c->ListWorkers().size(), " of ", cpu_workers,
                   " workers registered within 30 s (logs in ", c->dir_, ")"));
}

DaemonCluster::~DaemonCluster() {
  workers_.clear();  // each one is stopped (SIGTERM, then SIGKILL) and reaped
  coordinator_.reset();
}

std::string DaemonCluster::coordinator_log() const { return dir_ + "/coordinator.log"; }

std::string DaemonCluster::Logs() const {
  std::string out = "coordinator:\n" + ReadFileOrEmpty(coordinator_log());
  for (size_t i = 0; i < workers_.size(); ++i) {
    absl::StrAppend(&out, "\nworker ", i, ":\n",
                    ReadFileOrEmpty(absl::StrCat(dir_, "/worker", i, ".log")));
  }
  return out;
}

grpc::Status DaemonCluster::Submit(const v1::JobSpec& spec, std::string* job_id) const {
  auto stub = v1::JobService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(30));
  v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitJobResponse resp;
  grpc::Status s = stub->SubmitJob(&ctx, req, &resp);
  if (job_id != nullptr) *job_id = resp.job_id();
  return s;
}

v1::Job DaemonCluster::GetJob(const std::string& id) const {
  auto stub = v1::JobService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(10));
  v1::GetJobRequest req;
  req.set_job_id(id);
  v1::Job job;
  grpc::Status s = stub->GetJob(&ctx, req, &job);
  EXPECT_TRUE(s.ok()) << id << ": " << s.error_message();
  return job;
}

std::vector<v1::JobEvent> DaemonCluster::Watch(const std::string& id, int timeout_s) const {
  auto stub = v1::JobService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(timeout_s));
  v1::WatchJobRequest req;
  req.set_job_id(id);
  auto reader = stub->WatchJob(&ctx, req);
  std::vector<v1::JobEvent> events;
  v1::JobEvent event;
  while (reader->Read(&event)) events.push_back(event);
  reader->Finish();
  return events;
}

std::vector<v1::WorkerInfo> DaemonCluster::ListWorkers() const {
  auto stub = v1::JobService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(10));
  v1::ListWorkersResponse resp;
  if (!stub->ListWorkers(&ctx, v1::ListWorkersRequest(), &resp).ok()) return {};
  return {resp.workers().begin(), resp.workers().end()};
}

CommandResult DaemonCluster::Weftctl(const std::vector<std::string>& args, int timeout_s) const {
  std::vector<std::string> argv = {BinaryPath("client/weftctl"), "--coordinator", address()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout_s);
}

}  // namespace weft::testing
