// Child processes for integration tests, on common/subprocess: run a command to completion and
// capture its output, start the real coordinator on 127.0.0.1 with a port it picked itself, and
// find this workspace's binaries. Everything started here is stopped when its owner goes.
//
// E.g.
//   CommandResult r = RunCommand({weftctl, "local", "--ranks", "2", "--json", spec}, 120);
//   EXPECT_EQ(r.exit_code, 0) << r.err;
//
//   ASSIGN_OR_RETURN(auto coord, CoordinatorProcess::Start(coordinator_bin, tmp_dir));
//   RunCommand({weftctl, "--coordinator", coord->address(), "list"}, 10);
#ifndef WEFT_TESTS_PROCESS_H_
#define WEFT_TESTS_PROCESS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"

namespace weft::testing {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal or timed out
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs argv to completion (stopping its whole process group after timeout_s), with `env` added
// to this process's environment, and captures stdout and stderr. Whatever the command leaves
// behind in its group is killed.
CommandResult RunCommand(const std::vector<std::string>& argv, int timeout_s,
                         const std::map<std::string, std::string>& env = {});

// A daemon in its own process group with its output in log_path, stopped (SIGTERM, then SIGKILL)
// when the Subprocess goes; `env` is added to this process's environment.
absl::StatusOr<std::unique_ptr<Subprocess>> StartDaemon(
    const std::vector<std::string>& argv, const std::string& log_path,
    const std::map<std::string, std::string>& env = {});

// weft-coordinator listening on 127.0.0.1 with a port it picked itself; its data, port file and
// log (coordinator.log) in work_dir.
class CoordinatorProcess {
 public:
  // `flags` are added to the command line, `env` to its environment (e.g.
  // {{"WEFT_DEBUG_CRASH_AT", "coordinator_before_commit"}}).
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(
      const std::string& binary, const std::string& work_dir,
      const std::vector<std::string>& flags = {},
      const std::map<std::string, std::string>& env = {});
  const std::string& address() const { return address_; }
  Subprocess& process() { return *process_; }

 private:
  std::unique_ptr<Subprocess> process_;
  std::string address_;
};

// Runfiles path of a binary built by this workspace, e.g. "client/weftctl".
std::string BinaryPath(const std::string& workspace_relative);
// A fresh directory under TEST_TMPDIR.
std::string MakeTempDir(const std::string& prefix);
std::string ReadFileOrEmpty(const std::string& path);

}  // namespace weft::testing

#endif  // WEFT_TESTS_PROCESS_H_
