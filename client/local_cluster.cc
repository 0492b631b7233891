#include "client/local_cluster.h"

#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/coordinator_client.h"
#include "common/bearer_token.h"
#include "common/file_io.h"
#include "common/status.h"

namespace weft::client {
absl::StatusOr<std::string> FindDaemonBinary(
    const std::string& flag_value, const std::string& self_exe, const std::string& folder,
    const std::string& name, const std::function<bool(const std::string&)>& is_executable) {
  if (!flag_value.empty()) {
    if (is_executable(flag_value)) return flag_value;
    return absl::NotFoundError(absl::StrCat(flag_value, ": not an executable file"));
  }
  const std::filesystem::path dir = std::filesystem::path(self_exe).parent_path();
  const std::vector<std::string> candidates = {
      (dir.parent_path() / folder / name).string(),
      (dir / name).string(),
  };
  for (const std::string& c : candidates) {
    if (is_executable(c)) return c;
  }
  return absl::NotFoundError(absl::StrCat("cannot find ", name, "; tried ", candidates[0], " and ",
                                          candidates[1], " (build it, or pass --",
                                          folder == "coordinator" ? "coordinator_bin" : "worker_bin",
                                          ")"));
}

int ThreadsPerRank(int cpus, int ranks) {
  if (ranks <= 0) return std::max(1, cpus);
  return std::max(1, cpus / ranks);
}

std::vector<std::string> ChildEnvironment(const std::vector<std::string>& parent_env,
                                          int threads) {
  std::vector<std::string> env = parent_env;
  const auto set_unless_given = [&env](const std::string& name, const std::string& value) {
    for (const std::string& e : env) {
      if (absl::StartsWith(e, absl::StrCat(name, "="))) return;
    }
    env.push_back(absl::StrCat(name, "=", value));
  };
  set_unless_given("OPENBLAS_NUM_THREADS", absl::StrCat(threads));
  set_unless_given("OMP_WAIT_POLICY", "passive");
  return env;
}

std::string TailLines(const std::string& text, int lines) {
  if (lines <= 0) return "";
  size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;
  size_t pos = end;
  int seen = 0;
  while (pos > 0) {
    if (text[pos - 1] == '\n' && ++seen == lines) break;
    --pos;
  }
  return text.substr(pos, end - pos);
}

LocalCluster::LocalCluster(LocalClusterOptions options) : options_(std::move(options)) {}

LocalCluster::~LocalCluster() { Stop(); }

void LocalCluster::Progress(const std::string& line) const {
  if (options_.progress != nullptr) *options_.progress << "weftctl: " << line << std::endl;
}

absl::Status LocalCluster::Start() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp",
                                     "/weft-local-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError(
        absl::StrCat("creating a temporary folder ", pattern, ": ", std::strerror(errno)));
  }
  dir_ = pattern;
  std::error_code ec;
  std::filesystem::create_directories(dir_ + "/logs", ec);
  std::filesystem::create_directories(dir_ + "/data", ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", dir_, "/logs: ", ec.message()));

  // The children's environment, with BLAS threads split between the ranks.
  cpu_set_t set;
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  std::vector<std::string> parent_env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) parent_env.emplace_back(*e);
  env_ = ChildEnvironment(parent_env, ThreadsPerRank(cpus, options_.ranks));

  // Tokens of the cluster's own: only this process and its children read them.
  const std::string client_token_file = dir_ + "/client.token";
  const std::string worker_token_file = dir_ + "/worker.token";
  for (const std::string* file : {&client_token_file, &worker_token_file}) {
    absl::StatusOr<std::string> token = NewBearerToken();
    if (!token.ok()) return token.status();
    RETURN_IF_ERROR(WriteFileAtomically(*file, {*token + "\n"}));
    if (chmod(file->c_str(), 0600) != 0) {
      return absl::InternalError(absl::StrCat("chmod 0600 ", *file, ": ", std::strerror(errno)));
    }
    if (file == &client_token_file) client_token_ = *token;
  }
  const std::vector<std::string> roots = {"--data_root=" + options_.data_root,
                                          "--checkpoint_root=" + options_.checkpoint_root};
  std::vector<std::string> coordinator = {options_.coordinator_bin, "--listen", "127.0.0.1:0",
                                          "--port_file", dir_ + "/port", "--data_dir",
                                          dir_ + "/data", "--client_token_file", client_token_file,
                                          "--worker_token_file", worker_token_file};
  coordinator.insert(coordinator.end(), roots.begin(), roots.end());
  absl::Status s = Spawn("coordinator", coordinator);
  if (!s.ok()) return s;
  s = WaitForPort();
  if (!s.ok()) return s;
  Progress(absl::StrCat("coordinator listening on ", address_, " (folder ", dir_, ")"));
  for (int r = 0; r < options_.ranks; ++r) {
    const std::string device = options_.device == "cuda" ? absl::StrCat("cuda:", r) : "cpu";
    std::vector<std::string> worker = {options_.worker_bin, "--coordinator", address_,
                                       "--device",           device,  "--token_file",
                                       worker_token_file};
    worker.insert(worker.end(), roots.begin(), roots.end());
    s = Spawn(absl::StrCat("worker-", r), worker);
    if (!s.ok()) return s;
  }
  s = WaitForWorkers();
  if (!s.ok()) return s;
  Progress(absl::StrCat(options_.ranks, " worker(s) registered"));
  return absl::OkStatus();
}

absl::Status LocalCluster::Spawn(const std::string& name, const std::vector<std::string>& argv) {
  Child child;
  child.name = name;
  child.log_path = absl::StrCat(dir_, "/logs/", name, ".log");
  SubprocessOptions options;
  options.argv = argv;
  options.env = env_;
  options.stdout_path = child.log_path;
  // In weftctl's group, so that a terminal's Ctrl-C reaches the daemons as before; they die
  // with weftctl if it is killed.
  options.new_process_group = false;
  options.die_with_parent = true;
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Start(std::move(options));
  if (!process.ok()) return process.status();
  child.process = std::move(process).value();
  children_.push_back(std::move(child));
  return absl::OkStatus();
}

absl::Status LocalCluster::CheckChildren() {
  for (Child& c : children_) {
    if (!c.process->Running()) {
      return absl::InternalError(absl::StrCat(c.name, " (pid ", c.process->pid(), ") ",
                                              c.process->exit_status()->Describe(), "; see ",
                                              c.log_path));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::WaitForPort() {
  const std::string port_file = dir_ + "/port";
  absl::StatusOr<int> port =
      WaitForPortFile(port_file, *children_.front().process,
                      absl::Seconds(options_.start_timeout_s), [this] { return Interrupted(); });
  if (port.ok()) {
    address_ = absl::StrCat("127.0.0.1:", *port);
    return absl::OkStatus();
  }
  if (absl::IsCancelled(port.status())) return absl::CancelledError("interrupted");
  if (absl::IsDeadlineExceeded(port.status())) {
    return absl::DeadlineExceededError(absl::StrCat("the coordinator wrote no port to ", port_file,
                                                    " within ", options_.start_timeout_s, " s"));
  }
  RETURN_IF_ERROR(CheckChildren());  // names the coordinator, how it ended and its log
  return port.status();
}

absl::Status LocalCluster::WaitForWorkers() {
  CoordinatorClient client(address_, {client_token_});
  int registered = 0;
  absl::Status last = absl::OkStatus();
  absl::Status failed = absl::OkStatus();  // a ListWorkers error other than UNAVAILABLE
  const absl::Status s = PollUntil(
      [&]() -> absl::StatusOr<bool> {
        if (Interrupted()) return absl::CancelledError("interrupted");
        RETURN_IF_ERROR(CheckChildren());
        absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.ListWorkers();
        if (!workers.ok()) {
          if (!absl::IsUnavailable(workers.status())) return failed = workers.status();
          last = workers.status();
          return false;
        }
        registered = 0;
        for (const v1::WorkerInfo& w : *workers) {
          if (w.state() != "lost") ++registered;
        }
        return registered >= options_.ranks;
      },
      absl::Seconds(options_.start_timeout_s), absl::Milliseconds(100));
  if (!absl::IsDeadlineExceeded(s) || !failed.ok()) return s;
  return absl::DeadlineExceededError(absl::StrCat(
      "only ", registered, " of ", options_.ranks, " worker(s) registered with the coordinator within ",
      options_.start_timeout_s, " s", last.ok() ? "" : absl::StrCat(" (", last.message(), ")")));
}

std::string LocalCluster::LogTails(int lines) const {
  std::string out;
  for (const Child& c : children_) {
    absl::StrAppend(&out, "==> ", c.log_path, " <==\n");
    const std::string tail = TailLines(ReadFileToString(c.log_path).value_or(""), lines);
    if (!tail.empty()) absl::StrAppend(&out, tail, "\n");
  }
  return out;
}

void LocalCluster::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // All at once: SIGTERM to every child, one grace period for all of them, then SIGKILL.
  for (Child& c : children_) c.process->Signal(SIGTERM);
  const absl::Time deadline = absl::Now() + absl::Seconds(options_.grace_s);
  for (Child& c : children_) c.process->WaitUntil(deadline);
  for (Child& c : children_) c.process->Stop(absl::ZeroDuration());
  if (!dir_.empty()) {
    if (options_.keep_tmp) {
      Progress(absl::StrCat("kept ", dir_));
    } else {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
}

}  // namespace weft::client
