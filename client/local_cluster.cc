#include "client/local_cluster.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/coordinator_client.h"
#include "common/status.h"

namespace weft::client {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status), " (",
                        strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("ended with status ", status);
}

}  // namespace

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
  for (const std::string& e : env) {
    if (absl::StartsWith(e, "OPENBLAS_NUM_THREADS=")) return env;
  }
  env.push_back(absl::StrCat("OPENBLAS_NUM_THREADS=", threads));
  return env;
}

std::optional<int> ParsePortFile(const std::string& content) {
  int port;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(content), &port)) return std::nullopt;
  if (port <= 0 || port > 65535) return std::nullopt;
  return port;
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

  absl::Status s = Spawn("coordinator", {options_.coordinator_bin, "--listen", "127.0.0.1:0",
                                         "--port_file", dir_ + "/port", "--data_dir",
                                         dir_ + "/data"});
  if (!s.ok()) return s;
  s = WaitForPort();
  if (!s.ok()) return s;
  Progress(absl::StrCat("coordinator listening on ", address_, " (folder ", dir_, ")"));
  for (int r = 0; r < options_.ranks; ++r) {
    const std::string device = options_.device == "cuda" ? absl::StrCat("cuda:", r) : "cpu";
    s = Spawn(absl::StrCat("worker-", r),
              {options_.worker_bin, "--coordinator", address_, "--device", device});
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
  const int log_fd = open(child.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(absl::StrCat("opening ", child.log_path, ": ", std::strerror(errno)));
  }
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  // Everything the child needs is built before fork: between fork and exec only
  // async-signal-safe calls are allowed.
  std::vector<char*> args, envp;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const std::string& e : env_) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return absl::InternalError(absl::StrCat("starting ", name, ": fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // weftctl blocks these for its signal thread; the daemons need them back.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(126);
    if (null_fd >= 0) dup2(null_fd, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    execve(args[0], args.data(), envp.data());
    const char msg[] = "weftctl: exec failed: ";
    (void)!write(2, msg, sizeof(msg) - 1);
    const char* err = strerror(errno);
    (void)!write(2, err, strlen(err));
    (void)!write(2, "\n", 1);
    _exit(127);
  }
  close(log_fd);
  if (null_fd >= 0) close(null_fd);
  child.pid = pid;
  children_.push_back(child);
  return absl::OkStatus();
}

absl::Status LocalCluster::CheckChildren() {
  for (Child& c : children_) {
    if (c.reaped) {
      return absl::InternalError(
          absl::StrCat(c.name, " (pid ", c.pid, ") ", DescribeExit(c.status), "; see ", c.log_path));
    }
    int status = 0;
    const pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == c.pid) {
      c.reaped = true;
      c.status = status;
      return absl::InternalError(
          absl::StrCat(c.name, " (pid ", c.pid, ") ", DescribeExit(status), "; see ", c.log_path));
    }
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::WaitForPort() {
  const std::string port_file = dir_ + "/port";
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options_.start_timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Interrupted()) return absl::CancelledError("interrupted");
    RETURN_IF_ERROR(CheckChildren());
    std::optional<int> port = ParsePortFile(ReadFile(port_file));
    if (port.has_value()) {
      // Read again: a port file caught half-written would parse as a shorter number.
      std::this_thread::sleep_for(kPoll);
      if (ParsePortFile(ReadFile(port_file)) == port) {
        address_ = absl::StrCat("127.0.0.1:", *port);
        return absl::OkStatus();
      }
    }
    std::this_thread::sleep_for(kPoll);
  }
  return absl::DeadlineExceededError(absl::StrCat("the coordinator wrote no port to ", port_file,
                                                  " within ", options_.start_timeout_s, " s"));
}

absl::Status LocalCluster::WaitForWorkers() {
  CoordinatorClient client(address_);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(options_.start_timeout_s);
  int registered = 0;
  absl::Status last = absl::OkStatus();
  while (std::chrono::steady_clock::now() < deadline) {
    if (Interrupted()) return absl::CancelledError("interrupted");
    RETURN_IF_ERROR(CheckChildren());
    absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.ListWorkers();
    if (workers.ok()) {
      registered = 0;
      for (const v1::WorkerInfo& w : *workers) {
        if (w.state() != "lost") ++registered;
      }
      if (registered >= options_.ranks) return absl::OkStatus();
    } else if (!absl::IsUnavailable(workers.status())) {
      return workers.status();
    } else {
      last = workers.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "only ", registered, " of ", options_.ranks, " worker(s) registered with the coordinator within ",
      options_.start_timeout_s, " s", last.ok() ? "" : absl::StrCat(" (", last.message(), ")")));
}

std::string LocalCluster::LogTails(int lines) const {
  std::string out;
  for (const Child& c : children_) {
    absl::StrAppend(&out, "==> ", c.log_path, " <==\n");
    const std::string tail = TailLines(ReadFile(c.log_path), lines);
    if (!tail.empty()) absl::StrAppend(&out, tail, "\n");
  }
  return out;
}

void LocalCluster::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (Child& c : children_) {
    if (!c.reaped) kill(c.pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(options_.grace_s);
  for (;;) {
    bool all = true;
    for (Child& c : children_) {
      if (c.reaped) continue;
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid || (r < 0 && errno == ECHILD)) {
        c.reaped = true;
        c.status = status;
      } else {
        all = false;
      }
    }
    if (all || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(kPoll);
  }
  for (Child& c : children_) {
    if (c.reaped) continue;
    kill(c.pid, SIGKILL);
    int status = 0;
    while (waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
    }
    c.reaped = true;
    c.status = status;
  }
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
