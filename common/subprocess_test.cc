#include "common/subprocess.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "common/testing_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

std::string TempDir() {
  const std::string dir =
      TempPath(std::string("subprocess_") +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A process that exists and is not a zombie.
bool Alive(pid_t pid) {
  const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

SubprocessOptions Shell(const std::string& script, const std::string& out = "",
                        const std::string& err = "") {
  SubprocessOptions options;
  options.argv = {"/bin/sh", "-c", script};
  options.stdout_path = out;
  options.stderr_path = err;
  return options;
}

TEST(SubprocessTest, CapturesOutputAndExitCode) {
  const std::string dir = TempDir();
  auto p = Subprocess::Start(Shell("echo out; echo err >&2; exit 3", dir + "/out", dir + "/err"));
  ASSERT_TRUE(p.ok()) << p.status();
  const ExitStatus exit = (*p)->Wait();
  EXPECT_TRUE(exit.exited());
  EXPECT_EQ(exit.code, 3);
  EXPECT_EQ(exit.Describe(), "exited with code 3");
  EXPECT_EQ(ReadAll(dir + "/out"), "out\n");
  EXPECT_EQ(ReadAll(dir + "/err"), "err\n");
  EXPECT_FALSE((*p)->Running());
}

TEST(SubprocessTest, StderrGoesWithStdoutByDefault) {
  const std::string dir = TempDir();
  auto p = Subprocess::Start(Shell("echo one; echo two >&2", dir + "/log"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->Wait().code, 0);
  EXPECT_EQ(ReadAll(dir + "/log"), "one\ntwo\n");
}

TEST(SubprocessTest, Environment) {
  const std::string dir = TempDir();
  SubprocessOptions options = Shell("echo \"$WEFT_SUBPROCESS_TEST\"", dir + "/out");
  options.env = EnvironmentWith({{"WEFT_SUBPROCESS_TEST", "set"}});
  auto p = Subprocess::Start(options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->Wait().code, 0);
  EXPECT_EQ(ReadAll(dir + "/out"), "set\n");

  setenv("WEFT_SUBPROCESS_TEST", "parent", 1);
  const std::vector<std::string> env = EnvironmentWith({{"WEFT_SUBPROCESS_TEST", "child"}});
  EXPECT_THAT(env, ::testing::Contains("WEFT_SUBPROCESS_TEST=child"));
  EXPECT_THAT(env, ::testing::Not(::testing::Contains("WEFT_SUBPROCESS_TEST=parent")));
  unsetenv("WEFT_SUBPROCESS_TEST");
}

TEST(SubprocessTest, ExecFailureExits127SayingWhy) {
  const std::string dir = TempDir();
  SubprocessOptions options;
  options.argv = {dir + "/nope"};
  options.stdout_path = dir + "/log";
  auto p = Subprocess::Start(options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->Wait().code, 127);
  EXPECT_THAT(ReadAll(dir + "/log"), HasSubstr("exec " + dir + "/nope: "));
}

TEST(SubprocessTest, UnwritableOutputIsAnError) {
  auto p = Subprocess::Start(Shell("true", "/nonexistent-dir/out"));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("/nonexistent-dir/out"));
}

// `exec sleep` below stands for a child that runs until it is told to stop.
TEST(SubprocessTest, WaitHasADeadlineAndSignalEndsTheChild) {
  auto p = Subprocess::Start(Shell("exec sleep 300"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE((*p)->Running());
  EXPECT_FALSE((*p)->WaitFor(absl::Milliseconds(50)).has_value());
  (*p)->Signal(SIGKILL);
  std::optional<ExitStatus> exit = (*p)->WaitFor(absl::Seconds(30));
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_EQ(exit->CodeOrMinusSignal(), -SIGKILL);
  EXPECT_THAT(exit->Describe(), HasSubstr("was killed by signal 9"));
  EXPECT_EQ((*p)->Stop().signal, SIGKILL);  // already ended: just reaps
}

TEST(SubprocessTest, StopEndsAChildThatIgnoresSigterm) {
  const std::string dir = TempDir();
  auto p = Subprocess::Start(Shell("trap '' TERM; echo ready; exec sleep 300", dir + "/out"));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(PollUntil([&] { return ReadAll(dir + "/out") == "ready\n"; }, absl::Seconds(30)).ok());
  const absl::Time start = absl::Now();
  EXPECT_EQ((*p)->Stop(absl::Milliseconds(200)).signal, SIGKILL);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ((*p)->Stop().signal, SIGKILL);  // idempotent
}

TEST(SubprocessTest, StopTermsAChildThatListens) {
  auto p = Subprocess::Start(Shell("exec sleep 300"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)->Stop().signal, SIGTERM);
}

// The child leaves a grandchild behind in its group: it is there after the child ended, and
// gone once the Subprocess is destroyed.
TEST(SubprocessTest, DestructionKillsWhatIsLeftInTheGroup) {
  const std::string dir = TempDir();
  pid_t grandchild = 0;
  {
    auto p = Subprocess::Start(Shell("sleep 300 & echo $!", dir + "/out"));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)->Wait().code, 0);
    grandchild = std::atoi(ReadAll(dir + "/out").c_str());
    ASSERT_GT(grandchild, 0);
    EXPECT_TRUE(Alive(grandchild));
  }
  EXPECT_TRUE(PollUntil([&] { return !Alive(grandchild); }, absl::Seconds(30)).ok());
}

TEST(SubprocessTest, WithoutItsOwnGroupOnlyTheChildIsStopped) {
  SubprocessOptions options = Shell("exec sleep 300");
  options.new_process_group = false;
  auto p = Subprocess::Start(options);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(getpgid((*p)->pid()), getpgrp());
  EXPECT_EQ((*p)->Stop().signal, SIGTERM);
}

TEST(SubprocessTest, PollUntil) {
  int calls = 0;
  EXPECT_TRUE(PollUntil([&] { return ++calls == 3; }, absl::Seconds(30), absl::Milliseconds(1)).ok());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(PollUntil([] { return false; }, absl::Milliseconds(30)).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(PollUntil([]() -> absl::StatusOr<bool> { return absl::AbortedError("stop"); },
                      absl::Seconds(30))
                .code(),
            absl::StatusCode::kAborted);
}

TEST(SubprocessTest, PortFile) {
  EXPECT_EQ(ParsePortFile("41234\n"), 41234);
  EXPECT_EQ(ParsePortFile("41234"), 41234);
  EXPECT_EQ(ParsePortFile(""), std::nullopt);
  EXPECT_EQ(ParsePortFile("0"), std::nullopt);
  EXPECT_EQ(ParsePortFile("70000"), std::nullopt);
  EXPECT_EQ(ParsePortFile("12ab"), std::nullopt);
}

// A writer that writes the line in two parts (the sleep is that writer's pause): only the whole
// line counts.
TEST(SubprocessTest, WaitForPortFileTakesTheWholeLine) {
  const std::string dir = TempDir();
  const std::string port_file = dir + "/port";
  auto p = Subprocess::Start(Shell("printf 412 > " + port_file + "; sleep 0.2; printf '34\\n' >> " +
                                   port_file + "; exec sleep 300"));
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<int> port = WaitForPortFile(port_file, **p, absl::Seconds(30));
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(*port, 41234);
}

TEST(SubprocessTest, WaitForPortFileFailures) {
  const std::string dir = TempDir();
  auto dies = Subprocess::Start(Shell("exit 1"));
  ASSERT_TRUE(dies.ok()) << dies.status();
  absl::StatusOr<int> port = WaitForPortFile(dir + "/port", **dies, absl::Seconds(30));
  EXPECT_EQ(port.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(port.status().message()), HasSubstr("exited with code 1"));

  auto silent = Subprocess::Start(Shell("exec sleep 300"));
  ASSERT_TRUE(silent.ok()) << silent.status();
  port = WaitForPortFile(dir + "/port", **silent, absl::Milliseconds(100));
  EXPECT_EQ(port.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(port.status().message()), HasSubstr("wrote no port to " + dir + "/port"));
  port = WaitForPortFile(dir + "/port", **silent, absl::Seconds(30), [] { return true; });
  EXPECT_EQ(port.status().code(), absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace weft
