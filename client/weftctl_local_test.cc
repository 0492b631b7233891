// `weftctl local` as a process against a scripted coordinator (testing/fake_coordinator.cc) and
// stand-in workers: the JSON lines, the exit status, and that no child process or temporary
// folder outlives it, also when it is interrupted.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/weftctl_runner.h"
#include "common/subprocess.h"
#include "common/testing_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::weft::ExitStatus;
using ::weft::PollUntil;
using ::weft::ReadAll;
using ::weft::Subprocess;
using ::weft::SubprocessOptions;

std::string g_weftctl;
std::string g_fake_coordinator;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Processes whose command line is exactly argv.
int CountProcesses(const std::vector<std::string>& argv) {
  std::string want;
  for (const std::string& a : argv) want += a + '\0';
  int n = 0;
  DIR* proc = opendir("/proc");
  while (dirent* d = readdir(proc)) {
    if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
    if (ReadAll(std::string("/proc/") + d->d_name + "/cmdline") == want) ++n;
  }
  closedir(proc);
  return n;
}

class WeftctlLocalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = weft::client::FreshTestDir("weftctl_local_");
    std::filesystem::create_directories(dir_ + "/tmp");
    // The stand-in worker runs until it is stopped; its argv identifies it in /proc.
    sleep_seconds_ = std::to_string(1000 + getpid() % 1000);
    worker_ = dir_ + "/worker.sh";
    std::ofstream(worker_) << "#!/bin/sh\nexec sleep " << sleep_seconds_ << "\n";
    chmod(worker_.c_str(), 0755);
  }

  // The quickstart spec renamed (the fake coordinator scripts jobs by name).
  std::string Spec(const std::string& name) {
    std::string text = ReadAll("examples/quickstart.yaml");
    const size_t at = text.find("name: quickstart");
    text.replace(at, std::string("name: quickstart").size(), "name: " + name);
    const std::string path = dir_ + "/" + name + ".yaml";
    std::ofstream(path) << text;
    return path;
  }

  // weftctl with args, TMPDIR in dir_/tmp, stdout in dir_/out and stderr in dir_/err; stopped
  // with its process group at the end of the test if it still runs.
  Subprocess& Start(const std::vector<std::string>& args) {
    SubprocessOptions options;
    options.argv = {g_weftctl};
    options.argv.insert(options.argv.end(), args.begin(), args.end());
    options.env = weft::EnvironmentWith({{"TMPDIR", dir_ + "/tmp"}});
    options.stdout_path = dir_ + "/out";
    options.stderr_path = dir_ + "/err";
    absl::StatusOr<std::unique_ptr<Subprocess>> p = Subprocess::Start(std::move(options));
    EXPECT_TRUE(p.ok()) << p.status();
    processes_.push_back(std::move(p).value());
    return *processes_.back();
  }

  // Exit code (minus the signal if killed by one), or -1 on a timeout (the process is then
  // killed).
  int Wait(Subprocess& p, int timeout_s) {
    const std::optional<ExitStatus> exit = p.WaitFor(absl::Seconds(timeout_s));
    if (!exit.has_value()) {
      p.Signal(SIGKILL);
      p.Wait();
      return -1;
    }
    return exit->CodeOrMinusSignal();
  }

  std::vector<std::string> LocalArgs(const std::string& spec) {
    return {"local", "--ranks", "4", "--json", "--coordinator_bin", g_fake_coordinator,
            "--worker_bin", worker_, spec};
  }

  void ExpectNothingLeft() {
    EXPECT_TRUE(std::filesystem::is_empty(dir_ + "/tmp")) << "temporary folder left behind";
    EXPECT_EQ(CountProcesses({"sleep", sleep_seconds_}), 0) << "worker left running";
  }

  std::string dir_, worker_, sleep_seconds_;
  std::vector<std::unique_ptr<Subprocess>> processes_;
};

TEST_F(WeftctlLocalTest, RunsAJobAndPrintsJsonLines) {
  Subprocess& weftctl = Start(LocalArgs(Spec("quickstart")));
  EXPECT_EQ(Wait(weftctl, 60), 0) << ReadAll(dir_ + "/err");
  const std::vector<std::string> lines = Lines(ReadAll(dir_ + "/out"));
  ASSERT_EQ(lines.size(), 12u) << ReadAll(dir_ + "/out");
  EXPECT_EQ(lines[0], "{\"type\":\"state\",\"state\":\"RUNNING\"}");
  for (int s = 1; s <= 10; ++s) {
    const nlohmann::json j = nlohmann::json::parse(lines[s]);
    EXPECT_EQ(j["type"], "step");
    EXPECT_EQ(j["step"], s);
    EXPECT_EQ(j["loss"].get<double>(), 1.0 / (3.0 * s));  // round-trips exactly
    EXPECT_EQ(j["samples_per_second"].get<double>(), 3200);
  }
  EXPECT_EQ(lines[11], "{\"type\":\"state\",\"state\":\"SUCCEEDED\"}");
  ExpectNothingLeft();
}

TEST_F(WeftctlLocalTest, FailedJobExitsOneAndShowsLogs) {
  Subprocess& weftctl = Start(LocalArgs(Spec("fail")));
  EXPECT_EQ(Wait(weftctl, 60), 1);
  const std::vector<std::string> lines = Lines(ReadAll(dir_ + "/out"));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(),
            "{\"type\":\"state\",\"state\":\"FAILED\",\"message\":\"rank 1: scripted failure\"}");
  const std::string err = ReadAll(dir_ + "/err");
  EXPECT_THAT(err, HasSubstr("coordinator.log <=="));
  EXPECT_THAT(err, HasSubstr("fake_coordinator: listening on port"));
  EXPECT_THAT(err, HasSubstr("worker-3.log <=="));
  ExpectNothingLeft();
}

TEST_F(WeftctlLocalTest, InterruptStopsEverything) {
  Subprocess& weftctl = Start(LocalArgs(Spec("hang")));
  (void)PollUntil(
      [&] { return ReadAll(dir_ + "/out").find("\"step\":1") != std::string::npos; },
      absl::Seconds(60));
  ASSERT_THAT(ReadAll(dir_ + "/out"), HasSubstr("\"step\":1")) << ReadAll(dir_ + "/err");
  // The fake coordinator does not wait for the workers: one may still be exec'ing its sleep.
  (void)PollUntil([&] { return CountProcesses({"sleep", sleep_seconds_}) == 4; },
                  absl::Seconds(30));
  EXPECT_EQ(CountProcesses({"sleep", sleep_seconds_}), 4);
  weftctl.Signal(SIGINT);
  EXPECT_EQ(Wait(weftctl, 30), 130) << ReadAll(dir_ + "/err");
  ExpectNothingLeft();
}

// The Chrome trace weftctl wrote: one process per rank, named, and spans with their args.
void ExpectChromeTrace(const std::string& text, int ranks) {
  const nlohmann::json doc = nlohmann::json::parse(text);
  std::set<int> named, with_spans;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") named.insert(e["pid"].get<int>());
      continue;
    }
    EXPECT_EQ(e["ph"], "X");
    EXPECT_TRUE(e["args"].contains("micro_batch")) << e;
    EXPECT_TRUE(e["args"].contains("chunk")) << e;
    EXPECT_GT(e["dur"].get<int64_t>(), 0) << e;
    EXPECT_GE(e["ts"].get<int64_t>(), 0) << e;
    with_spans.insert(e["pid"].get<int>());
  }
  EXPECT_EQ(static_cast<int>(named.size()), ranks);
  EXPECT_EQ(named, with_spans);
}

TEST_F(WeftctlLocalTest, TraceFlagWritesAChromeTrace) {
  std::vector<std::string> args = LocalArgs(Spec("quickstart"));
  args.insert(args.begin() + 1, {"--trace", dir_ + "/trace.json"});
  EXPECT_EQ(Wait(Start(args), 60), 0) << ReadAll(dir_ + "/err");
  EXPECT_THAT(ReadAll(dir_ + "/err"), HasSubstr("wrote the trace to " + dir_ + "/trace.json"));
  ExpectChromeTrace(ReadAll(dir_ + "/trace.json"), 4);
  ExpectNothingLeft();

  // A failed job still leaves its trace.
  args = LocalArgs(Spec("fail"));
  args.insert(args.begin() + 1, {"--trace", dir_ + "/failed.json"});
  EXPECT_EQ(Wait(Start(args), 60), 1);
  ExpectChromeTrace(ReadAll(dir_ + "/failed.json"), 4);
  ExpectNothingLeft();
}

TEST_F(WeftctlLocalTest, MissingCoordinatorBinaryIsAClearError) {
  Subprocess& weftctl = Start({"local", "--coordinator_bin", dir_ + "/nope", "--worker_bin",
                               worker_, Spec("quickstart")});
  EXPECT_EQ(Wait(weftctl, 30), 1);
  EXPECT_THAT(ReadAll(dir_ + "/err"), HasSubstr("weftctl: NOT_FOUND: "));
  ExpectNothingLeft();
}

TEST_F(WeftctlLocalTest, OtherCommandsAgainstTheFake) {
  // Start a fake coordinator by hand and drive submit/get/list/watch/cancel/workers.
  const std::string port_file = dir_ + "/port";
  SubprocessOptions options;
  options.argv = {g_fake_coordinator, "--listen", "127.0.0.1:0", "--port_file", port_file,
                  "--data_dir", dir_};
  options.stdout_path = dir_ + "/fake_coordinator.log";
  absl::StatusOr<std::unique_ptr<Subprocess>> coord = Subprocess::Start(std::move(options));
  ASSERT_TRUE(coord.ok()) << coord.status();
  const absl::StatusOr<int> port = weft::WaitForPortFile(port_file, **coord, absl::Seconds(10));
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  auto run = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"--coordinator", address});
    return Wait(Start(args), 30);
  };
  EXPECT_EQ(run({"submit", Spec("quickstart")}), 0) << ReadAll(dir_ + "/err");
  EXPECT_EQ(ReadAll(dir_ + "/out"), "job-1\n");
  EXPECT_EQ(run({"submit", Spec("fail"), "--watch"}), 1);
  EXPECT_THAT(ReadAll(dir_ + "/out"), HasSubstr("step 10/10  loss 0.0333333  3,200 samples/s"));
  EXPECT_THAT(ReadAll(dir_ + "/out"), HasSubstr("state FAILED: rank 1: scripted failure"));
  EXPECT_EQ(run({"watch", "job-1", "--json"}), 0);
  EXPECT_THAT(ReadAll(dir_ + "/out"), HasSubstr("{\"type\":\"state\",\"state\":\"SUCCEEDED\"}"));
  EXPECT_EQ(run({"list"}), 0);
  EXPECT_THAT(ReadAll(dir_ + "/out"), HasSubstr("job-2  fail"));
  EXPECT_EQ(run({"get", "job-1"}), 0);
  EXPECT_THAT(ReadAll(dir_ + "/out"), HasSubstr("name:     quickstart"));
  EXPECT_THAT(ReadAll(dir_ + "/out"), HasSubstr("steps:    10/10"));
  // --json: every step, from the fake's pages of 4.
  EXPECT_EQ(run({"get", "job-1", "--json"}), 0);
  {
    const nlohmann::json job = nlohmann::json::parse(ReadAll(dir_ + "/out"));
    ASSERT_EQ(job["steps"].size(), 10u) << job.dump();
    // 64-bit integers are numbers, not proto3 JSON's strings.
    for (int s = 0; s < 10; ++s) EXPECT_EQ(job["steps"][s]["step"], s + 1);
    EXPECT_FALSE(job.contains("next_steps_page_token"));
  }
  EXPECT_EQ(run({"get", "job-9"}), 1);
  EXPECT_EQ(ReadAll(dir_ + "/err"), "weftctl: NOT_FOUND: no job job-9\n");
  EXPECT_EQ(run({"cancel", "job-1"}), 0);
  EXPECT_EQ(ReadAll(dir_ + "/out"), "job-1 CANCELLED\n");
  // logs: every page (the fake's hold 2 lines), in the coordinator's order; one rank's; as JSON;
  // --follow on an ended job prints them once and returns.
  auto lines_out = [&] {
    std::vector<std::string> lines = absl::StrSplit(ReadAll(dir_ + "/out"), '\n');
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    return lines;
  };
  EXPECT_EQ(run({"logs", "job-1"}), 0) << ReadAll(dir_ + "/err");
  {
    const std::vector<std::string> lines = lines_out();
    ASSERT_EQ(lines.size(), 12u) << ReadAll(dir_ + "/out");
    EXPECT_THAT(lines[0], MatchesRegex("attempt 0 rank 0  [0-9:.]{12} info     rank 0 line 1"));
    EXPECT_THAT(lines[11], MatchesRegex("attempt 0 rank 3  [0-9:.]{12} error    rank 3 line 3"));
  }
  EXPECT_EQ(run({"logs", "job-1", "--rank", "1", "--json"}), 0) << ReadAll(dir_ + "/err");
  {
    const std::vector<std::string> lines = lines_out();
    ASSERT_EQ(lines.size(), 3u) << ReadAll(dir_ + "/out");
    for (int i = 0; i < 3; ++i) {
      const nlohmann::json line = nlohmann::json::parse(lines[i]);
      EXPECT_EQ(line["type"], "log");
      EXPECT_EQ(line["rank"], 1);
      EXPECT_EQ(line["seq"], i + 1);
      EXPECT_EQ(line["text"], "rank 1 line " + std::to_string(i + 1));
    }
  }
  EXPECT_EQ(run({"logs", "job-1", "--follow"}), 0) << ReadAll(dir_ + "/err");
  EXPECT_EQ(lines_out().size(), 12u) << ReadAll(dir_ + "/out");
  EXPECT_EQ(run({"logs", "job-9"}), 1);
  EXPECT_EQ(ReadAll(dir_ + "/err"), "weftctl: NOT_FOUND: no job job-9\n");
  EXPECT_EQ(run({"workers"}), 0);
  EXPECT_THAT(ReadAll(dir_ + "/out"), HasSubstr("w-63"));
  // trace: a job submitted without trace is a clear error; with it, a file.
  EXPECT_EQ(run({"trace", "job-1", dir_ + "/t.json"}), 1);
  EXPECT_THAT(ReadAll(dir_ + "/err"), HasSubstr("FAILED_PRECONDITION: job job-1 was not submitted"));
  {
    std::string text = ReadAll(Spec("traced"));
    std::ofstream(dir_ + "/traced.yaml") << text << "trace: true\n";
  }
  EXPECT_EQ(run({"submit", dir_ + "/traced.yaml"}), 0) << ReadAll(dir_ + "/err");
  EXPECT_EQ(ReadAll(dir_ + "/out"), "job-3\n");
  EXPECT_EQ(run({"trace", "job-3", dir_ + "/t.json"}), 0) << ReadAll(dir_ + "/err");
  EXPECT_THAT(ReadAll(dir_ + "/out"), HasSubstr("4 ranks, 80 spans"));
  ExpectChromeTrace(ReadAll(dir_ + "/t.json"), 4);
  // list: the fake's pages hold 2 jobs; weftctl follows them to --limit or the end.
  auto ids_listed = [&] {
    std::vector<std::string> ids;
    const std::string out = ReadAll(dir_ + "/out");
    for (absl::string_view line : absl::StrSplit(out, '\n')) {
      if (absl::StartsWith(line, "job-")) ids.emplace_back(line.substr(0, line.find(' ')));
    }
    return ids;
  };
  EXPECT_EQ(run({"list"}), 0) << ReadAll(dir_ + "/err");
  EXPECT_THAT(ids_listed(), ElementsAre("job-1", "job-2", "job-3"));
  EXPECT_EQ(ReadAll(dir_ + "/err"), "");
  EXPECT_EQ(run({"list", "--limit", "2"}), 0) << ReadAll(dir_ + "/err");
  EXPECT_THAT(ids_listed(), ElementsAre("job-1", "job-2"));
  EXPECT_THAT(ReadAll(dir_ + "/err"), HasSubstr("more follow"));
  EXPECT_EQ(run({"list", "--state", "cancelled"}), 0) << ReadAll(dir_ + "/err");
  EXPECT_THAT(ids_listed(), ElementsAre("job-1"));
  EXPECT_EQ(run({"list", "--state", "DONE"}), 2);
  EXPECT_THAT(ReadAll(dir_ + "/err"), HasSubstr("--state: unknown job state \"DONE\"; known: "));
  (*coord)->Signal(SIGKILL);
  (*coord)->Wait();
  EXPECT_EQ(run({"list"}), 1);
  EXPECT_THAT(ReadAll(dir_ + "/err"),
              HasSubstr("weftctl: UNAVAILABLE: cannot reach coordinator at " + address));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 3) {
    std::cerr << "usage: weftctl_local_test WEFTCTL FAKE_COORDINATOR\n";
    return 2;
  }
  g_weftctl = std::filesystem::absolute(argv[1]).string();
  g_fake_coordinator = std::filesystem::absolute(argv[2]).string();
  return RUN_ALL_TESTS();
}
