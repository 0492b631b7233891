// `weftctl plan` as a process: the text lists the collectives, --json is one JSON document, an
// invalid spec exits 1 with SubmitJob's error. No daemon is started.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

using ::testing::HasSubstr;

std::string g_weftctl;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Result RunWeftctl(const std::string& args) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string base =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/weftctl_plan_" + std::to_string(getpid());
  const std::string command = g_weftctl + " " + args + " > " + base + ".out 2> " + base + ".err";
  const int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFile(base + ".out");
  r.err = ReadFile(base + ".err");
  return r;
}

TEST(WeftctlPlanTest, TextListsEachRanksCollectivesAndMemory) {
  const Result r = RunWeftctl("plan examples/dp_mp.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("job dp_mp: mesh [2,2](dp,mp), 4 rank(s)"));
  for (const char* rank : {"== rank 0 ==", "== rank 1 ==", "== rank 2 ==", "== rank 3 =="}) {
    EXPECT_THAT(r.out, HasSubstr(rank));
  }
  EXPECT_THAT(r.out, HasSubstr("ALL_REDUCE"));
  EXPECT_THAT(r.out, HasSubstr("over mp ranks [0,1]"));
  EXPECT_THAT(r.out, HasSubstr("over dp ranks [0,2]"));
  EXPECT_THAT(r.out, HasSubstr("memory: parameters "));
  EXPECT_THAT(r.out, HasSubstr("total bytes moved per step (all ranks): "));
  EXPECT_EQ(r.err, "");
}

TEST(WeftctlPlanTest, JsonIsOneDocument) {
  const Result r = RunWeftctl("plan --json examples/tensor_parallel.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["ranks"].size(), 4u);
  EXPECT_GT(doc["total_bytes_per_step"].get<int64_t>(), 0);
  EXPECT_FALSE(doc["ranks"][0]["collectives"].empty());
  EXPECT_EQ(doc["ranks"][0]["collectives"][0]["op"], "ALL_REDUCE");
  EXPECT_FALSE(doc["ranks"][0]["instructions"].empty());
}

TEST(WeftctlPlanTest, InvalidSpecExitsOneWithTheError) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string spec = std::string(tmp != nullptr ? tmp : "/tmp") + "/bad_plan.yaml";
  std::string text = ReadFile("examples/tensor_parallel.yaml");
  const std::string from = "fc1: RowWiseParallel";
  text.replace(text.find(from), from.size(), "fc1: RowWise");
  std::ofstream(spec) << text;
  const Result r = RunWeftctl("plan " + spec);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("weftctl: INVALID_ARGUMENT: "));
  EXPECT_THAT(r.err, HasSubstr("parallelize.mp.plan.fc1: unknown style \"RowWise\""));
  EXPECT_EQ(r.out, "");

  const Result usage = RunWeftctl("plan");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("'plan' needs SPEC"));
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: weftctl_plan_test WEFTCTL\n");
    return 2;
  }
  g_weftctl = std::filesystem::absolute(argv[1]).string();
  return RUN_ALL_TESTS();
}
