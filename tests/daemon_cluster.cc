#include "tests/daemon_cluster.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "common/jobspec/yaml.h"

namespace weft::testing {
namespace {

std::chrono::system_clock::time_point In(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

}  // namespace

JobOutcome JobOutcome::Of(const std::vector<v1::JobEvent>& events) {
  JobOutcome r;
  for (const v1::JobEvent& e : events) {
    if (e.has_step()) {
      r.losses[e.step().step()] = e.step().loss();
      r.lrs[e.step().step()] = e.step().lr();
      r.grad_norms[e.step().step()] = e.step().grad_norm();
      r.peak_bytes = std::max(r.peak_bytes, e.step().peak_bytes());
    }
    if (e.has_eval()) r.eval_losses[e.eval().step()] = e.eval().loss();
    if (e.has_saved()) r.saves.push_back(e.saved());
    if (e.event_case() == v1::JobEvent::kState) {
      r.state = e.state();
      r.message = e.message();
    }
  }
  return r;
}

std::vector<double> JobOutcome::LossList() const {
  std::vector<double> out;
  for (const auto& [step, loss] : losses) out.push_back(loss);
  return out;
}

absl::StatusOr<std::unique_ptr<DaemonCluster>> DaemonCluster::Start(int cpu_workers) {
  DaemonClusterOptions options;
  options.cpu_workers = cpu_workers;
  return Start(options);
}

absl::StatusOr<std::unique_ptr<DaemonCluster>> DaemonCluster::Start(
    const DaemonClusterOptions& options) {
  std::unique_ptr<DaemonCluster> c(new DaemonCluster());
  c->dir_ = MakeTempDir("cluster");
  auto coord = CoordinatorProcess::Start(BinaryPath("coordinator/weft-coordinator"), c->dir_,
                                         options.coordinator_flags, options.coordinator_env);
  if (!coord.ok()) return coord.status();
  c->coordinator_ = std::move(coord).value();
  c->options_ = options;
  for (int i = 0; i < options.cpu_workers; ++i) {
    absl::Status started = c->SpawnWorker({});
    if (!started.ok()) return started;
  }
  c->channel_ = grpc::CreateChannel(c->address(), grpc::InsecureChannelCredentials());
  const absl::Status registered = PollUntil(
      [&] { return static_cast<int>(c->ListWorkers().size()) >= options.cpu_workers; },
      absl::Seconds(30), absl::Milliseconds(50));
  if (!registered.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("only ", c->ListWorkers().size(), " of ", options.cpu_workers,
                     " workers registered within 30 s (logs in ", c->dir_, ")"));
  }
  return c;
}

absl::Status DaemonCluster::SpawnWorker(const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {BinaryPath("worker/weft-worker"), "--coordinator", address(),
                                   "--device", "cpu"};
  argv.insert(argv.end(), options_.worker_flags.begin(), options_.worker_flags.end());
  if (options_.worker_argv) {
    argv = options_.worker_argv(static_cast<int>(workers_.size()), std::move(argv));
  }
  std::map<std::string, std::string> all = options_.worker_env;
  for (const auto& [k, v] : env) all[k] = v;
  auto w = StartDaemon(argv, absl::StrCat(dir_, "/worker", workers_.size(), ".log"), all);
  if (!w.ok()) return w.status();
  workers_.push_back(std::move(w).value());
  return absl::OkStatus();
}

absl::Status DaemonCluster::StartWorker(const std::map<std::string, std::string>& env) {
  RETURN_IF_ERROR(SpawnWorker(env));
  const pid_t pid = workers_.back()->pid();
  const absl::Status up = PollUntil(
      [&] {
        // Registered, whatever became of it since (a worker that crashes at once is lost).
        for (const v1::WorkerInfo& w : ListWorkers()) {
          if (w.pid() == pid) return true;
        }
        return false;
      },
      absl::Seconds(30), absl::Milliseconds(50));
  if (!up.ok()) {
    return absl::DeadlineExceededError(
        absl::StrCat("worker ", workers_.size() - 1, " did not register within 30 s (logs in ",
                     dir_, ")"));
  }
  return absl::OkStatus();
}

absl::Status DaemonCluster::RestartCoordinator(const std::map<std::string, std::string>& env) {
  options_.coordinator_env = env;
  return RestartCoordinator();
}

absl::Status DaemonCluster::RestartCoordinator() {
  const std::string address = coordinator_->address();
  coordinator_->process().Signal(SIGKILL);
  coordinator_->process().Wait();
  // The new one writes its own port file; the old log is kept beside.
  std::filesystem::remove(dir_ + "/coordinator.port");
  std::filesystem::rename(dir_ + "/coordinator.log",
                          absl::StrCat(dir_, "/coordinator.log.", ++coordinator_restarts_));
  std::vector<std::string> flags = options_.coordinator_flags;
  flags.insert(flags.end(), {"--listen", address});
  auto coord = CoordinatorProcess::Start(BinaryPath("coordinator/weft-coordinator"), dir_, flags,
                                         options_.coordinator_env);
  if (!coord.ok()) return coord.status();
  coordinator_ = std::move(coord).value();
  return absl::OkStatus();
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
    if (!workers_[i]->Running() && workers_[i]->exit_status().has_value()) {
      absl::StrAppend(&out, "(its process ", workers_[i]->exit_status()->Describe(), ")\n");
    }
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

JobOutcome DaemonCluster::RunSpecFile(const std::string& spec_path) const {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(spec_path);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return {};
  std::string id;
  const grpc::Status s = Submit(*spec, &id);
  EXPECT_TRUE(s.ok()) << spec_path << ": " << s.error_message();
  if (!s.ok()) return {};
  JobOutcome outcome = JobOutcome::Of(Watch(id));
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << spec_path << ": " << outcome.message << "\n"
                                          << Logs();
  return outcome;
}

CommandResult DaemonCluster::Weftctl(const std::vector<std::string>& args, int timeout_s) const {
  std::vector<std::string> argv = {BinaryPath("client/weftctl"), "--coordinator", address()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, timeout_s);
}


}  // namespace weft::testing
