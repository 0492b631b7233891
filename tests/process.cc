#include "tests/process.h"

#include <signal.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace weft::testing {

CommandResult RunCommand(const std::vector<std::string>& argv, int timeout_s,
                         const std::map<std::string, std::string>& env) {
  CommandResult result;
  const std::string dir = MakeTempDir("command");
  SubprocessOptions options;
  options.argv = argv;
  options.env = EnvironmentWith(env);
  options.stdout_path = dir + "/stdout";
  options.stderr_path = dir + "/stderr";
  options.die_with_parent = true;  // a test killed at its timeout takes the command along
  absl::StatusOr<std::unique_ptr<Subprocess>> process = Subprocess::Start(std::move(options));
  if (!process.ok()) {
    result.err = process.status().ToString();
    return result;
  }
  std::optional<ExitStatus> exit = (*process)->WaitFor(absl::Seconds(timeout_s));
  result.timed_out = !exit.has_value();
  // Stops it if it timed out; either way kills whatever it left behind in its group (a daemon
  // it failed to stop).
  const ExitStatus status = (*process)->Stop();
  result.exit_code = status.exited() && !result.timed_out ? status.code : -1;
  result.out = ReadFileOrEmpty(dir + "/stdout");
  result.err = ReadFileOrEmpty(dir + "/stderr");
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return result;
}

absl::StatusOr<std::unique_ptr<Subprocess>> StartDaemon(
    const std::vector<std::string>& argv, const std::string& log_path,
    const std::map<std::string, std::string>& env) {
  SubprocessOptions options;
  options.argv = argv;
  options.env = EnvironmentWith(env);
  options.stdout_path = log_path;
  options.die_with_parent = true;
  return Subprocess::Start(std::move(options));
}

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const std::string& binary, const std::string& work_dir, const std::vector<std::string>& flags,
    const std::map<std::string, std::string>& env) {
  auto coord = std::unique_ptr<CoordinatorProcess>(new CoordinatorProcess());
  const std::string port_file = work_dir + "/coordinator.port";
  const std::string log = work_dir + "/coordinator.log";
  std::vector<std::string> argv = {binary, "--listen", "127.0.0.1:0", "--data_dir",
                                   work_dir + "/coordinator-data", "--port_file", port_file};
  argv.insert(argv.end(), flags.begin(), flags.end());
  absl::StatusOr<std::unique_ptr<Subprocess>> process = StartDaemon(argv, log, env);
  if (!process.ok()) return process.status();
  coord->process_ = std::move(process).value();
  absl::StatusOr<int> port = WaitForPortFile(port_file, *coord->process_, absl::Seconds(30));
  if (!port.ok()) {
    return absl::InternalError(absl::StrCat("coordinator did not start: ", port.status().message(),
                                            "; log:\n", ReadFileOrEmpty(log)));
  }
  coord->address_ = absl::StrCat("127.0.0.1:", *port);
  return coord;
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
