#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"

extern char** environ;

namespace weft {
namespace {

int OpenForOutput(const std::string& path) {
  if (path.empty()) return open("/dev/null", O_WRONLY | O_CLOEXEC);
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

}  // namespace

std::string ExitStatus::Describe() const {
  if (signal != 0) return absl::StrCat("was killed by signal ", signal, " (", strsignal(signal), ")");
  if (code >= 0) return absl::StrCat("exited with code ", code);
  return "ended (its status was collected elsewhere)";
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(SubprocessOptions options) {
  if (options.argv.empty()) return absl::InvalidArgumentError("starting a process: empty argv");
  const std::string& name = options.argv[0];
  const std::vector<std::string> env =
      options.env.has_value() ? *options.env : EnvironmentWith({});
  // Everything the child needs is made before fork: between fork and exec only
  // async-signal-safe calls are allowed.
  std::vector<char*> argv, envp;
  for (const std::string& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const std::string exec_failed = absl::StrCat("exec ", name, ": ");

  int fds[3] = {open("/dev/null", O_RDONLY | O_CLOEXEC), OpenForOutput(options.stdout_path), -1};
  fds[2] = options.stderr_path.empty() ? fds[1] : OpenForOutput(options.stderr_path);
  auto close_fds = [&fds] {
    for (int i = 0; i < 3; ++i) {
      if (fds[i] >= 0 && (i < 2 || fds[i] != fds[1])) close(fds[i]);
    }
  };
  for (int i = 0; i < 3; ++i) {
    if (fds[i] < 0) {
      const int err = errno;
      close_fds();
      const std::string& path = i == 0   ? std::string("/dev/null")
                                : i == 1 ? options.stdout_path
                                         : options.stderr_path;
      return absl::InternalError(
          absl::StrCat("starting ", name, ": opening ", path, ": ", std::strerror(err)));
    }
  }
  const pid_t parent = getpid();
  const bool new_group = options.new_process_group;
  const bool die_with_parent = options.die_with_parent;

  const pid_t pid = fork();
  if (pid < 0) {
    const int err = errno;
    close_fds();
    return absl::InternalError(absl::StrCat("starting ", name, ": fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    if (new_group) setpgid(0, 0);
    // The parent may block signals for a sigwait thread (weftctl) or ignore SIGPIPE; the child
    // starts with the defaults.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (die_with_parent) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(126);  // the parent died before prctl
    }
    dup2(fds[0], 0);
    dup2(fds[1], 1);
    dup2(fds[2], 2);
    execve(argv[0], argv.data(), envp.data());
    const char* err = strerror(errno);
    (void)!write(2, exec_failed.data(), exec_failed.size());
    (void)!write(2, err, strlen(err));
    (void)!write(2, "\n", 1);
    _exit(127);
  }
  // Also here, so that the group exists when Start returns whichever side runs first.
  if (new_group) setpgid(pid, pid);
  close_fds();
  int pidfd = -1;
#ifdef SYS_pidfd_open
  pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));  // -1 before Linux 5.3
#endif
  return std::unique_ptr<Subprocess>(new Subprocess(std::move(options), pid, pidfd));
}

Subprocess::~Subprocess() {
  if (!reaped_) Stop(kStopGrace);
  if (pidfd_ >= 0) close(pidfd_);
}

bool Subprocess::Ended(bool block) {
  if (exit_.has_value()) return true;
  siginfo_t info;
  std::memset(&info, 0, sizeof(info));
  const int options = WEXITED | WNOWAIT | (block ? 0 : WNOHANG);
  while (waitid(P_PID, pid_, &info, options) != 0) {
    if (errno == EINTR) continue;
    // ECHILD: someone else collected it (SIGCHLD ignored); it has ended all the same.
    exit_ = ExitStatus();
    reaped_ = true;
    return true;
  }
  if (info.si_pid != pid_) return false;  // WNOHANG: still running
  ExitStatus status;
  if (info.si_code == CLD_EXITED) {
    status.code = info.si_status;
  } else {
    status.signal = info.si_status;  // CLD_KILLED, CLD_DUMPED
  }
  exit_ = status;
  return true;
}

void Subprocess::Signal(int sig) {
  if (!Ended(false)) kill(pid_, sig);
}

bool Subprocess::Running() { return !Ended(false); }

std::optional<ExitStatus> Subprocess::WaitUntil(absl::Time deadline) {
  while (!Ended(false)) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    if (pidfd_ >= 0) {
      // Readable once the child has ended.
      pollfd p = {pidfd_, POLLIN, 0};
      const int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(left, absl::Milliseconds(1)));
      poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
    } else {
      absl::SleepFor(std::min(left, absl::Milliseconds(10)));
    }
  }
  return exit_;
}

ExitStatus Subprocess::Wait() {
  Ended(true);
  return *exit_;
}

ExitStatus Subprocess::Stop(absl::Duration grace) {
  if (reaped_) return *exit_;
  const pid_t target = options_.new_process_group ? -pid_ : pid_;
  if (!Ended(false)) {
    kill(target, SIGTERM);
    if (!WaitFor(grace).has_value()) {
      kill(target, SIGKILL);
      Ended(true);
    }
  }
  if (!reaped_) {
    // The child is a zombie until reaped here, so the group id is still its own.
    if (options_.new_process_group) kill(-pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  return *exit_;
}

std::vector<std::string> EnvironmentWith(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string kv(*e);
    if (overrides.count(kv.substr(0, kv.find('='))) == 0) env.push_back(kv);
  }
  for (const auto& [key, value] : overrides) env.push_back(absl::StrCat(key, "=", value));
  return env;
}

absl::Status PollUntil(const std::function<absl::StatusOr<bool>()>& done, absl::Duration timeout,
                       absl::Duration interval) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<bool> d = done();
    if (!d.ok()) return d.status();
    if (*d) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("not done within ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(std::min(interval, deadline - now));
  }
}

std::optional<int> ParsePortFile(const std::string& content) {
  int port;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(content), &port)) return std::nullopt;
  if (port <= 0 || port > 65535) return std::nullopt;
  return port;
}

absl::StatusOr<int> WaitForPortFile(const std::string& path, Subprocess& process,
                                    absl::Duration timeout,
                                    const std::function<bool()>& cancelled) {
  std::optional<int> port;
  const absl::Status s = PollUntil(
      [&]() -> absl::StatusOr<bool> {
        if (cancelled && cancelled()) return absl::CancelledError("cancelled");
        // Without its newline the line may still be being written by a writer that does not
        // rename into place.
        const std::string content = ReadFileToString(path).value_or("");
        if (!content.empty() && content.back() == '\n') port = ParsePortFile(content);
        if (port.has_value()) return true;
        if (!process.Running()) {
          return absl::InternalError(absl::StrCat(process.options().argv[0], " (pid ",
                                                  process.pid(), ") ",
                                                  process.exit_status()->Describe(),
                                                  " before writing a port to ", path));
        }
        return false;
      },
      timeout);
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(absl::StrCat(process.options().argv[0], " wrote no port to ",
                                                    path, " within ",
                                                    absl::FormatDuration(timeout)));
  }
  if (!s.ok()) return s;
  return *port;
}

}  // namespace weft
