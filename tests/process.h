// Child processes for integration tests: start the real binaries on 127.0.0.1, capture their
// output, and make sure nothing outlives the test.
//
// E.g.
//   CommandResult r = RunCommand({weftctl, "local", "--ranks", "2", "--json", spec}, 120);
//   EXPECT_EQ(r.exit_code, 0) << r.err;
//
//   ASSIGN_OR_RETURN(auto coord, CoordinatorProcess::Start(coordinator_bin, tmp_dir));
//   RunCommand({weftctl, "--coordinator", coord->address(), "list"}, 10);
#ifndef WEFT_TESTS_PROCESS_H_
#define WEFT_TESTS_PROCESS_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weft::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv to completion (killing its whole process group after timeout_s), capturing stdout
// and stderr.
CommandResult RunCommand(const std::vector<std::string>& argv, int timeout_s,
                         const std::map<std::string, std::string>& env = {});

// A long-running child in its own process group, killed (SIGTERM, then SIGKILL) on destruction.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv,
                                                             const std::string& log_path);
  ~ChildProcess();
  pid_t pid() const { return pid_; }
  // Sends sig to the child; Wait reaps it and returns its exit code (-signal if signalled).
  void Signal(int sig);
  int Wait();
  bool Running();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_;
  bool reaped_ = false;
  int status_ = 0;
};

// weft-coordinator listening on 127.0.0.1 with a port it picked itself.
class CoordinatorProcess {
 public:
  // `flags` are added to the command line (e.g. {"--debug_pause_before_commit_ms", "600000"}).
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(
      const std::string& binary, const std::string& work_dir,
      const std::vector<std::string>& flags = {});
  const std::string& address() const { return address_; }
  ChildProcess& process() { return *process_; }

 private:
  std::unique_ptr<ChildProcess> process_;
  std::string address_;
};

// Runfiles path of a binary built by this workspace, e.g. "client/weftctl".
std::string BinaryPath(const std::string& workspace_relative);
// A fresh directory under TEST_TMPDIR.
std::string MakeTempDir(const std::string& prefix);
std::string ReadFileOrEmpty(const std::string& path);

}  // namespace weft::testing

#endif  // WEFT_TESTS_PROCESS_H_
