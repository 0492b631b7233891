#include "tests/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace weft::testing {
namespace {

// argv/envp for execve, built before fork so the child only calls async-signal-safe functions.
struct ExecArgs {
  std::vector<std::string> storage;
  std::vector<char*> argv;
  std::vector<std::string> env_storage;
  std::vector<char*> envp;

  ExecArgs(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
    storage = args;
    for (auto& s : storage) argv.push_back(s.data());
    argv.push_back(nullptr);
    std::map<std::string, std::string> merged;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv(*e);
      size_t eq = kv.find('=');
      if (eq != std::string::npos) merged[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : env) merged[k] = v;
    for (const auto& [k, v] : merged) env_storage.push_back(k + "=" + v);
    for (auto& s : env_storage) envp.push_back(s.data());
    envp.push_back(nullptr);
  }
};

// SIGTERM to the child's process group, SIGKILL after 5 s if the child has not exited. The child
// itself is reaped here (a zombie would still count as alive for kill(-pgid, 0)); returns its
// wait status.
int StopGroup(pid_t pid) {
  kill(-pid, SIGTERM);
  int status = 0;
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      kill(-pid, SIGKILL);  // anything the child left behind in its group
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace

CommandResult RunCommand(const std::vector<std::string>& argv, int timeout_s,
                         const std::map<std::string, std::string>& env) {
  CommandResult result;
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) {
    result.err = "pipe failed";
    return result;
  }
  ExecArgs args(argv, env);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    close(out_pipe[0]);
    close(err_pipe[0]);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    execve(args.argv[0], args.argv.data(), args.envp.data());
    _exit(127);
  }
  setpgid(pid, pid);
  close(out_pipe[1]);
  close(err_pipe[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    int left_ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       deadline - std::chrono::steady_clock::now())
                                       .count());
    if (left_ms <= 0) {
      result.timed_out = true;
      break;
    }
    if (poll(fds, 2, left_ms) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? result.out : result.err).append(buf, n);
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  if (result.timed_out) {
    status = StopGroup(pid);
  } else {
    waitpid(pid, &status, 0);
    // Whatever the command left behind in its group (a daemon it failed to stop) dies with it.
    kill(-pid, SIGKILL);
  }
  result.exit_code = WIFEXITED(status) && !result.timed_out ? WEXITSTATUS(status) : -1;
  return result;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv, const std::string& log_path) {
  ExecArgs args(argv, {});
  int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("cannot open ", log_path));
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    setpgid(0, 0);
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    execve(args.argv[0], args.argv.data(), args.envp.data());
    _exit(127);
  }
  setpgid(pid, pid);
  close(log_fd);
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid));
}

ChildProcess::~ChildProcess() {
  if (!reaped_) {
    status_ = StopGroup(pid_);
    reaped_ = true;
  }
}

void ChildProcess::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

int ChildProcess::Wait() {
  if (!reaped_) {
    waitpid(pid_, &status_, 0);
    reaped_ = true;
  }
  if (WIFEXITED(status_)) return WEXITSTATUS(status_);
  return WIFSIGNALED(status_) ? -WTERMSIG(status_) : -1;
}

bool ChildProcess::Running() {
  if (reaped_) return false;
  pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const std::string& binary, const std::string& work_dir,
    const std::vector<std::string>& flags) {
  auto coord = std::unique_ptr<CoordinatorProcess>(new CoordinatorProcess());
  std::string port_file = work_dir + "/coordinator.port";
  std::vector<std::string> argv = {binary, "--listen", "127.0.0.1:0", "--data_dir",
                                   work_dir + "/coordinator-data", "--port_file", port_file};
  argv.insert(argv.end(), flags.begin(), flags.end());
  auto child = ChildProcess::Start(argv, work_dir + "/coordinator.log");
  if (!child.ok()) return child.status();
  coord->process_ = std::move(child).value();
  for (int i = 0; i < 300; ++i) {
    std::string port = ReadFileOrEmpty(port_file);
    while (!port.empty() && (port.back() == '\n' || port.back() == ' ')) port.pop_back();
    if (!port.empty()) {
      coord->address_ = "127.0.0.1:" + port;
      return coord;
    }
    if (!coord->process_->Running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::InternalError(absl::StrCat("coordinator did not start; log:\n",
                                          ReadFileOrEmpty(work_dir + "/coordinator.log")));
}

std::string BinaryPath(const std::string& workspace_relative) {
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* workspace = getenv("TEST_WORKSPACE");
  if (srcdir != nullptr) {
    return absl::StrCat(srcdir, "/", workspace != nullptr ? workspace : "weft", "/",
                        workspace_relative);
  }
  return "bazel-bin/" + workspace_relative;
}

std::string MakeTempDir(const std::string& prefix) {
  const char* base = getenv("TEST_TMPDIR");
  std::string tmpl = absl::StrCat(base != nullptr ? base : "/tmp", "/", prefix, "-XXXXXX");
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* dir = mkdtemp(buf.data());
  return dir != nullptr ? std::string(dir) : std::string();
}

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace weft::testing
