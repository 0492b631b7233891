// Child processes, for `weftctl local` (client/local_cluster) and the integration tests
// (tests/process): start one with its output in files, optionally leading its own process group;
// wait for it with a deadline; signal it; reap it; and stop it (SIGTERM, a grace period, SIGKILL),
// with everything left in its group, when it is no longer wanted. A Subprocess that is destroyed
// while its child runs stops it, so nothing outlives its owner. One owner, one thread at a time.
//
// E.g.
//   SubprocessOptions options;
//   options.argv = {coordinator_bin, "--listen", "127.0.0.1:0", "--port_file", port_file};
//   options.stdout_path = dir + "/coordinator.log";  // stderr goes there too
//   ASSIGN_OR_RETURN(std::unique_ptr<Subprocess> coordinator, Subprocess::Start(options));
//   ASSIGN_OR_RETURN(int port, WaitForPortFile(port_file, *coordinator, absl::Seconds(30)));
//   ...
//   coordinator->Signal(SIGKILL);
//   std::optional<ExitStatus> exit = coordinator->WaitFor(absl::Seconds(10));
#ifndef WEFT_COMMON_SUBPROCESS_H_
#define WEFT_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace weft {

// How a child ended.
struct ExitStatus {
  int code = -1;   // the exit code when it exited, else -1
  int signal = 0;  // the signal that killed it, else 0

  bool exited() const { return signal == 0 && code >= 0; }
  // The exit code, or minus the signal that killed it.
  int CodeOrMinusSignal() const { return signal != 0 ? -signal : code; }
  // "exited with code 1", "was killed by signal 9 (Killed)".
  std::string Describe() const;
};

struct SubprocessOptions {
  // argv[0] is the executable's path (no PATH search).
  std::vector<std::string> argv;
  // The child's whole environment, "KEY=value" each; nullopt: this process's (EnvironmentWith).
  std::optional<std::vector<std::string>> env;
  // Created or truncated. stdout_path empty: /dev/null; stderr_path empty: with stdout.
  std::string stdout_path;
  std::string stderr_path;
  // The child leads a process group of its own, so that whatever it starts is signalled and
  // stopped with it (Stop, the destructor). Without, it stays in this process's group: a
  // terminal's Ctrl-C reaches it, and only the child itself is signalled.
  bool new_process_group = true;
  // The child gets SIGTERM when the thread that started it ends (PR_SET_PDEATHSIG), so that it
  // does not outlive a parent that is killed; start it from a thread that lives as long.
  bool die_with_parent = false;
};

class Subprocess {
 public:
  // Forks and execs options.argv. The child's signal mask and SIGPIPE are reset to the defaults
  // and its stdin is /dev/null. A failed exec exits 127 after writing why to its stderr.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(SubprocessOptions options);
  // Stop(kStopGrace) if the child still runs; with its own group, SIGKILL to what is left in it.
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  static constexpr absl::Duration kStopGrace = absl::Seconds(5);

  pid_t pid() const { return pid_; }
  const SubprocessOptions& options() const { return options_; }

  // Sends sig to the child itself (not its group); nothing once it has ended.
  void Signal(int sig);
  // Whether it still runs.
  bool Running();
  // Waits until it ends or the deadline passes: how it ended, or nullopt.
  std::optional<ExitStatus> WaitUntil(absl::Time deadline);
  std::optional<ExitStatus> WaitFor(absl::Duration timeout) {
    return WaitUntil(absl::Now() + timeout);
  }
  // Blocks until it ends.
  ExitStatus Wait();
  // How it ended, once it has.
  const std::optional<ExitStatus>& exit_status() const { return exit_; }
  // SIGTERM (to its group when it leads one), up to `grace` to end, then SIGKILL; with its own
  // group, SIGKILL to whatever is left in the group; then reaps it. Idempotent.
  ExitStatus Stop(absl::Duration grace = kStopGrace);

 private:
  Subprocess(SubprocessOptions options, pid_t pid, int pidfd)
      : options_(std::move(options)), pid_(pid), pidfd_(pidfd) {}
  // Waits (blocking or not) for the child to end without reaping it: until Stop reaps it, its
  // pid, and so its group id, cannot be reused, and the group can safely be killed late.
  bool Ended(bool block);

  const SubprocessOptions options_;
  const pid_t pid_;
  int pidfd_;  // owned; -1 where pidfd_open is unavailable (WaitUntil then polls)
  std::optional<ExitStatus> exit_;
  bool reaped_ = false;
};

// This process's environment with `overrides` set (added or replaced), for SubprocessOptions::env.
std::vector<std::string> EnvironmentWith(const std::map<std::string, std::string>& overrides);

// Calls `done` every `interval` until it returns true (OK) or an error (returned), or until
// `timeout` has passed (DEADLINE_EXCEEDED). For conditions that nothing notifies: what another
// process writes to a file or reports over RPC.
absl::Status PollUntil(const std::function<absl::StatusOr<bool>()>& done, absl::Duration timeout,
                       absl::Duration interval = absl::Milliseconds(20));

// A port file's content ("41234\n") -> the port; nullopt while it is missing or not a port.
std::optional<int> ParsePortFile(const std::string& content);

// Waits until `path` holds a whole line with a port, as weft-coordinator --port_file writes it
// (atomically, "<port>\n"), and returns the port. INTERNAL (naming how) if `process` ended first,
// CANCELLED once `cancelled` returns true, DEADLINE_EXCEEDED after `timeout`.
absl::StatusOr<int> WaitForPortFile(const std::string& path, Subprocess& process,
                                    absl::Duration timeout,
                                    const std::function<bool()>& cancelled = nullptr);

}  // namespace weft

#endif  // WEFT_COMMON_SUBPROCESS_H_
