// `weftctl plan` as a process: the text lists the collectives, --json is one JSON document, an
// invalid spec exits 1 with SubmitJob's error. No daemon is started.
#include <fstream>
#include <string>

#include "client/weftctl_runner.h"
#include "common/testing_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

using ::testing::HasSubstr;
using ::weft::ReadAll;
using ::weft::TempPath;
using ::weft::client::RunWeftctl;
using ::weft::client::WeftctlResult;

TEST(WeftctlPlanTest, TextListsEachRanksCollectivesAndMemory) {
  const WeftctlResult r = RunWeftctl("plan examples/dp_mp.yaml");
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
  const WeftctlResult r = RunWeftctl("plan --json examples/tensor_parallel.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["ranks"].size(), 4u);
  EXPECT_GT(doc["total_bytes_per_step"].get<int64_t>(), 0);
  EXPECT_FALSE(doc["ranks"][0]["collectives"].empty());
  EXPECT_EQ(doc["ranks"][0]["collectives"][0]["op"], "ALL_REDUCE");
  EXPECT_FALSE(doc["ranks"][0]["instructions"].empty());
}

TEST(WeftctlPlanTest, InvalidSpecExitsOneWithTheError) {
  const std::string spec = TempPath("bad_plan.yaml");
  std::string text = ReadAll("examples/tensor_parallel.yaml");
  const std::string from = "fc1: RowWiseParallel";
  text.replace(text.find(from), from.size(), "fc1: RowWise");
  std::ofstream(spec) << text;
  const WeftctlResult r = RunWeftctl("plan " + spec);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("weftctl: INVALID_ARGUMENT: "));
  EXPECT_THAT(r.err, HasSubstr("parallelize.mp.plan.fc1: unknown style \"RowWise\""));
  EXPECT_EQ(r.out, "");

  const WeftctlResult usage = RunWeftctl("plan");
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("'plan' needs SPEC"));
}

}  // namespace

int main(int argc, char** argv) { return weft::client::RunWeftctlTests(argc, argv); }
