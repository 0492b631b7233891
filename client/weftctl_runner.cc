#include "client/weftctl_runner.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

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

WeftctlResult RunWeftctl(const std::string& args) {
  const std::string base = TestTmpDir() + "/weftctl_" + std::to_string(getpid());
  const std::string command =
      WeftctlPath() + " " + args + " > " + base + ".out 2> " + base + ".err";
  const int status = std::system(command.c_str());
  WeftctlResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(base + ".out");
  r.err = ReadAll(base + ".err");
  return r;
}

}  // namespace weft::client
