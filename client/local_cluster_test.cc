#include "client/local_cluster.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft::client {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(LocalClusterTest, FindsDaemonsInTheBazelBinLayout) {
  std::set<std::string> files = {"/b/coordinator/weft-coordinator", "/b/client/weft-worker"};
  auto exists = [&](const std::string& p) { return files.count(p) > 0; };
  EXPECT_EQ(*FindDaemonBinary("", "/b/client/weftctl", "coordinator", "weft-coordinator", exists),
            "/b/coordinator/weft-coordinator");
  // Same folder as weftctl when the bazel layout has none.
  EXPECT_EQ(*FindDaemonBinary("", "/b/client/weftctl", "worker", "weft-worker", exists),
            "/b/client/weft-worker");
  // The flag wins, and must exist.
  files.insert("/opt/w");
  EXPECT_EQ(*FindDaemonBinary("/opt/w", "/b/client/weftctl", "worker", "weft-worker", exists),
            "/opt/w");
  absl::StatusOr<std::string> missing =
      FindDaemonBinary("/nope", "/b/client/weftctl", "worker", "weft-worker", exists);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  files.clear();
  missing = FindDaemonBinary("", "/b/client/weftctl", "worker", "weft-worker", exists);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/b/worker/weft-worker"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("--worker_bin"));
}

TEST(LocalClusterTest, BlasThreadsSplitTheCores) {
  EXPECT_EQ(ThreadsPerRank(16, 4), 4);
  EXPECT_EQ(ThreadsPerRank(2, 4), 1);
  EXPECT_EQ(ThreadsPerRank(7, 2), 3);
  EXPECT_EQ(ThreadsPerRank(0, 1), 1);

  std::vector<std::string> env = ChildEnvironment({"PATH=/bin", "HOME=/root"}, 3);
  EXPECT_THAT(env, Contains("OPENBLAS_NUM_THREADS=3"));
  EXPECT_THAT(env, Contains("OMP_WAIT_POLICY=passive"));
  EXPECT_THAT(env, Contains("PATH=/bin"));
  // A user's own settings are kept.
  env = ChildEnvironment({"OPENBLAS_NUM_THREADS=8", "OMP_WAIT_POLICY=active"}, 3);
  EXPECT_EQ(env, (std::vector<std::string>{"OPENBLAS_NUM_THREADS=8", "OMP_WAIT_POLICY=active"}));
}

// The port file is parsed by common/subprocess (subprocess_test).

TEST(LocalClusterTest, TailLines) {
  EXPECT_EQ(TailLines("a\nb\nc\n", 2), "b\nc");
  EXPECT_EQ(TailLines("a\nb\nc", 2), "b\nc");
  EXPECT_EQ(TailLines("a\nb\nc", 5), "a\nb\nc");
  EXPECT_EQ(TailLines("", 3), "");
  EXPECT_EQ(TailLines("x", 0), "");
}

// A real start against stand-in daemons: the coordinator writes no port and exits at once, so
// Start fails naming it, and Stop leaves no child and no folder behind.
TEST(LocalClusterTest, StartFailsCleanlyWhenTheCoordinatorDies) {
  LocalClusterOptions options;
  options.ranks = 2;
  options.coordinator_bin = "/bin/false";
  options.worker_bin = "/bin/true";
  options.start_timeout_s = 10;
  LocalCluster cluster(options);
  absl::Status s = cluster.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("coordinator"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("exited with code 1"));
  EXPECT_THAT(cluster.LogTails(5), HasSubstr("coordinator.log"));
  const std::string dir = cluster.dir();
  cluster.Stop();
  EXPECT_FALSE(dir.empty());
  EXPECT_NE(access(dir.c_str(), F_OK), 0);
}

// A coordinator that ignores SIGTERM and never writes its port: Start gives up after its
// timeout and Stop SIGKILLs it after the grace period.
TEST(LocalClusterTest, StopKillsChildrenThatIgnoreSigterm) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string script = std::string(tmp != nullptr ? tmp : "/tmp") + "/stubborn.sh";
  {
    std::ofstream out(script);
    out << "#!/bin/sh\ntrap '' TERM\nexec sleep 60\n";
  }
  chmod(script.c_str(), 0755);
  LocalClusterOptions options;
  options.ranks = 1;
  options.coordinator_bin = script;
  options.worker_bin = "/bin/true";
  options.start_timeout_s = 1;
  options.grace_s = 1;
  LocalCluster cluster(options);
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = cluster.Start();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("wrote no port"));
  cluster.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  absl::Status children = cluster.CheckChildren();
  EXPECT_THAT(std::string(children.message()), HasSubstr("killed by signal 9"));
}

}  // namespace
}  // namespace weft::client
