// `weftctl local --trace FILE` through the real weft-coordinator and weft-worker on 127.0.0.1:
// the Chrome trace parses, has one named process per rank, every slice carries its micro-batch
// and chunk, and the slices measure real time (positive durations that add up to a part of the
// job's run). No test asserts how long anything takes.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "client/weftctl_runner.h"
#include "common/testing_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

using ::testing::HasSubstr;
using ::weft::ReadAll;

std::string g_coordinator, g_worker;

class WeftctlTraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = weft::client::FreshTestDir("weftctl_trace_");
  }

  // Runs weftctl with args; returns its exit status (-1 if it did not exit within 240 s), stdout
  // in out_, stderr in err_.
  int Run(const std::vector<std::string>& args) {
    const weft::client::WeftctlResult r = weft::client::RunWeftctl(args, absl::Seconds(240));
    out_ = r.out;
    err_ = r.err;
    return r.exit_code;
  }

  std::string WriteSpec(const std::string& name, const std::string& yaml) {
    const std::string path = dir_ + "/" + name + ".yaml";
    std::ofstream(path) << yaml;
    return path;
  }

  std::string dir_, out_, err_;
};

constexpr char kDataParallel[] = R"(name: traced
mesh: {shape: [2], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 64, out_features: 128}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 128, out_features: 16}
  loss: mse
data: {source: synthetic, sample_shape: [64], label_shape: [16], num_samples: 64, batch_size: 16}
optimizer: {type: sgd, lr: 0.01}
train: {steps: 3, seed: 7}
)";

TEST_F(WeftctlTraceTest, LocalTraceIsAChromeTraceOfRealTime) {
  const std::string spec = WriteSpec("dp", kDataParallel);
  const std::string trace_path = dir_ + "/trace.json";
  ASSERT_EQ(Run({"local", "--ranks", "2", "--coordinator_bin", g_coordinator, "--worker_bin",
                 g_worker, "--trace", trace_path, spec}),
            0)
      << err_;
  EXPECT_THAT(err_, HasSubstr("wrote the trace to " + trace_path));

  const nlohmann::json doc = nlohmann::json::parse(ReadAll(trace_path));
  std::map<int, std::string> process_names;
  std::map<std::pair<int, int>, int64_t> busy_us;  // by (rank, thread)
  std::map<int, int64_t> spans;
  std::set<std::string> categories;
  std::set<std::pair<int, int>> collective_threads;
  int64_t first = -1, last = 0;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    const int pid = e["pid"].get<int>();
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") process_names[pid] = e["args"]["name"];
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e;
    ASSERT_TRUE(e["args"].contains("micro_batch")) << e;
    ASSERT_TRUE(e["args"].contains("chunk")) << e;
    const int64_t ts = e["ts"].get<int64_t>(), dur = e["dur"].get<int64_t>();
    EXPECT_GT(dur, 0) << e;
    EXPECT_GE(ts, 0) << e;
    if (first < 0 || ts < first) first = ts;
    last = std::max(last, ts + dur);
    const int tid = e["tid"].get<int>();
    busy_us[{pid, tid}] += dur;
    ++spans[pid];
    categories.insert(e["cat"].get<std::string>());
    if (e["cat"] == "collective") collective_threads.insert({pid, tid});
  }
  ASSERT_EQ(process_names.size(), 2u);
  EXPECT_THAT(process_names[0], HasSubstr("rank 0"));
  EXPECT_THAT(process_names[1], HasSubstr("rank 1"));
  EXPECT_EQ(first, 0);  // relative to the earliest span
  for (int r = 0; r < 2; ++r) {
    // 3 steps, each at least its compute and its gradient all-reduces.
    EXPECT_GE(spans[r], 3 * 2) << "rank " << r;
    // Real time: the slices of each of a rank's threads never add up to more than the whole
    // trace.
    EXPECT_GT((busy_us[{r, 0}]), 0);
    for (int thread : {0, 1}) {
      EXPECT_LE((busy_us[{r, thread}]), last - first + 1) << "rank " << r << " thread " << thread;
    }
  }
  EXPECT_TRUE(categories.count("collective")) << "the data-parallel gradients are all-reduced";
  // By default a gradient's all-reduce runs on the communicators' thread (1) while the backward
  // goes on; the loss's, which the next instruction reads, on the executor's (0).
  EXPECT_EQ(collective_threads, (std::set<std::pair<int, int>>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
}

TEST_F(WeftctlTraceTest, TraceOfAFinishedJobIsFetchableWhileTheCoordinatorRuns) {
  // `weftctl local` stops its coordinator, so the `trace` command is tested against the fake in
  // weftctl_local_test; here only its usage errors.
  EXPECT_EQ(Run({"trace", "job-1"}), 2);
  EXPECT_THAT(err_, HasSubstr("'trace' needs JOB FILE"));
  EXPECT_EQ(Run({"trace", "job-1", "a", "b"}), 2);
  EXPECT_THAT(err_, HasSubstr("'trace' takes JOB FILE, got unexpected 'b'"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: weftctl_trace_test WEFTCTL COORDINATOR WORKER\n";
    return 2;
  }
  g_coordinator = std::filesystem::absolute(argv[2]).string();
  g_worker = std::filesystem::absolute(argv[3]).string();
  return weft::client::RunWeftctlTests(argc, argv);
}
