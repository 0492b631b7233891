#include "client/weftctl_runner.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/subprocess.h"
#include "common/testing_files.h"
#include "gtest/gtest.h"

namespace weft::client {
namespace {

// The absolute path RunWeftctlTests took.
std::string& WeftctlPath() {
  static std::string* path = new std::string();
  return *path;
}

}  // namespace

int RunWeftctlTests(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    const std::string test =
        argc > 0 ? std::filesystem::path(argv[0]).filename().string() : std::string("test");
    std::fprintf(stderr, "usage: %s WEFTCTL\n", test.c_str());
    return 2;
  }
  WeftctlPath() = std::filesystem::absolute(argv[1]).string();
  return RUN_ALL_TESTS();
}

std::string FreshTestDir(const std::string& prefix) {
  const std::string dir = TestTmpDir() + "/" + prefix +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

WeftctlResult RunWeftctl(const std::vector<std::string>& args, absl::Duration timeout) {
  const std::string base = TestTmpDir() + "/weftctl_" + std::to_string(getpid());
  SubprocessOptions options;
  options.argv = {WeftctlPath()};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.stdout_path = base + ".out";
  options.stderr_path = base + ".err";
  WeftctlResult r;
  absl::StatusOr<std::unique_ptr<Subprocess>> weftctl = Subprocess::Start(std::move(options));
  if (!weftctl.ok()) {
    ADD_FAILURE() << weftctl.status();
    return r;
  }
  const std::optional<ExitStatus> exit = (*weftctl)->WaitFor(timeout);
  weftctl->reset();  // stops it if it still runs
  r.exit_code = exit.has_value() && exit->exited() ? exit->code : -1;
  r.out = ReadAll(base + ".out");
  r.err = ReadAll(base + ".err");
  return r;
}

WeftctlResult RunWeftctl(const std::string& args) {
  const std::vector<std::string> split = absl::StrSplit(args, ' ', absl::SkipEmpty());
  return RunWeftctl(split);
}

}  // namespace weft::client
