#include "client/plan.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

#include "common/testing_files.h"
#include "planner/planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace weft::client {
namespace {

using ::testing::HasSubstr;

class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(TestTmpDir(), "/plan_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // An example spec edited by `replace`, written to a file of its own.
  std::string Edited(const std::string& example,
                     const std::vector<std::pair<std::string, std::string>>& replace,
                     const std::string& name) {
    const std::string text = ReadAll(example);
    const std::string edited = absl::StrReplaceAll(text, replace);
    for (const auto& [from, to] : replace) {
      EXPECT_THAT(text, HasSubstr(from)) << "the example changed; update this test";
    }
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << edited;
    return path;
  }

  std::string dir_;
};

std::vector<std::string> Serialized(const std::vector<v1::Program>& programs) {
  std::vector<std::string> out;
  for (const v1::Program& p : programs) out.push_back(p.SerializeAsString());
  return out;
}

TEST_F(PlanTest, TensorParallelExamplePlansOneAllReducePerRank) {
  absl::StatusOr<PlannedJob> job = PlanSpecFile("examples/tensor_parallel.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->programs.size(), 4u);
  ASSERT_EQ(job->report.ranks.size(), 4u);
  int64_t total = 0;
  for (const planner::RankReport& rank : job->report.ranks) {
    ASSERT_FALSE(rank.collectives.empty());
    for (const planner::CollectiveReport& c : rank.collectives) {
      EXPECT_EQ(c.mesh_dims, "mp");
      EXPECT_EQ(c.ranks, (std::vector<int>{0, 1, 2, 3}));
    }
    EXPECT_GT(rank.param_bytes, 0);
    total += rank.bytes_sent_per_step;
  }
  EXPECT_EQ(job->report.total_bytes_per_step, total);
  EXPECT_GT(total, 0);

  const std::string text = FormatPlanText(*job);
  EXPECT_THAT(text, HasSubstr("job tensor_parallel: mesh [4](mp), 4 rank(s)"));
  EXPECT_THAT(text, HasSubstr("== rank 3 =="));
  EXPECT_THAT(text, HasSubstr("ALL_REDUCE"));
  EXPECT_THAT(text, HasSubstr("over mp ranks [0,1,2,3]"));
  EXPECT_THAT(text, HasSubstr("memory: parameters "));
  EXPECT_THAT(text, HasSubstr("optimizer states "));
  EXPECT_THAT(text, HasSubstr("peak activations "));
  EXPECT_THAT(text,
              HasSubstr(absl::StrCat("total bytes moved per step (all ranks): ", total, " B")));
  // Local shapes: fc0's weight is [1024, 4096] split in four columns.
  EXPECT_THAT(text, HasSubstr("fc0.weight[1024,1024]"));
}

TEST_F(PlanTest, ParallelizeAndHandPlacementsPlanTheSamePrograms) {
  absl::StatusOr<PlannedJob> shortcut = PlanSpecFile("examples/tensor_parallel.yaml");
  ASSERT_TRUE(shortcut.ok()) << shortcut.status();
  const std::string hand =
      Edited("examples/tensor_parallel.yaml",
             {{"mp: {dim: mp, plan: {fc0: ColWiseParallel, fc1: RowWiseParallel}}", ""},
              {"parallelize:", ""},
              {"{name: fc0, type: linear, in_features: 1024, out_features: 4096}",
               "{name: fc0, type: linear, in_features: 1024, out_features: 4096, "
               "placements: {weight: [Shard(1)], bias: [Shard(0)]}}"},
              {"{name: fc1, type: linear, in_features: 4096, out_features: 1024}",
               "{name: fc1, type: linear, in_features: 4096, out_features: 1024, "
               "placements: {weight: [Shard(0)], bias: [Replicate()]}}"}},
             "hand.yaml");
  absl::StatusOr<PlannedJob> by_hand = PlanSpecFile(hand);
  ASSERT_TRUE(by_hand.ok()) << by_hand.status();
  EXPECT_TRUE(by_hand->spec.parallelize().empty());
  EXPECT_EQ(Serialized(shortcut->programs), Serialized(by_hand->programs));

  // DP2 x MP2: the seed's placements by mesh dim name, and the same through parallelize.
  absl::StatusOr<PlannedJob> named = PlanSpecFile("examples/dp_mp.yaml");
  ASSERT_TRUE(named.ok()) << named.status();
  const std::string par =
      Edited("examples/dp_mp.yaml",
             {{"placements: {weight: {mp: Shard(1)}}}   # column-parallel", "}"},
              {"placements: {weight: {mp: Shard(0)}}}   # row-parallel", "}"},
              {"  loss: mse",
               "  loss: mse\nparallelize:\n  tp: {dim: mp, plan: {fc0: ColWiseParallel, "
               "fc1: RowWiseParallel}}"}},
             "parallelize.yaml");
  absl::StatusOr<PlannedJob> shortcut2 = PlanSpecFile(par);
  ASSERT_TRUE(shortcut2.ok()) << shortcut2.status();
  EXPECT_EQ(Serialized(named->programs), Serialized(shortcut2->programs));
}

TEST_F(PlanTest, DpMpExampleUsesBothMeshDims) {
  absl::StatusOr<PlannedJob> job = PlanSpecFile("examples/dp_mp.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->report.ranks.size(), 4u);
  std::set<std::string> dims;
  for (const planner::CollectiveReport& c : job->report.ranks[0].collectives) {
    dims.insert(c.mesh_dims);
  }
  EXPECT_TRUE(dims.count("dp") > 0 && dims.count("mp") > 0) << FormatPlanText(*job);
}

TEST_F(PlanTest, JsonIsOneDocumentWithEveryRank) {
  absl::StatusOr<PlannedJob> job = PlanSpecFile("examples/dp_mp.yaml");
  ASSERT_TRUE(job.ok()) << job.status();
  const nlohmann::json doc = nlohmann::json::parse(FormatPlanJson(*job));
  EXPECT_EQ(doc["job"], "dp_mp");
  EXPECT_EQ(doc["mesh"]["shape"], nlohmann::json({2, 2}));
  EXPECT_EQ(doc["mesh"]["dim_names"], nlohmann::json({"dp", "mp"}));
  EXPECT_EQ(doc["world_size"], 4);
  EXPECT_EQ(doc["total_bytes_per_step"].get<int64_t>(), job->report.total_bytes_per_step);
  ASSERT_EQ(doc["ranks"].size(), 4u);
  for (size_t r = 0; r < 4; ++r) {
    const nlohmann::json& rank = doc["ranks"][r];
    EXPECT_EQ(rank["rank"], r);
    EXPECT_EQ(rank["memory"]["param_bytes"].get<int64_t>(), job->report.ranks[r].param_bytes);
    EXPECT_TRUE(rank["memory"].contains("grad_bytes"));
    EXPECT_TRUE(rank["memory"].contains("optimizer_state_bytes"));
    EXPECT_TRUE(rank["memory"].contains("peak_activation_bytes"));
    ASSERT_EQ(rank["collectives"].size(), job->report.ranks[r].collectives.size());
    for (const nlohmann::json& c : rank["collectives"]) {
      EXPECT_TRUE(c["ranks"].is_array());
      EXPECT_GE(c["bytes_sent"].get<int64_t>(), 0);
      // Each collective points at its instruction, which names its group.
      const nlohmann::json& ins = rank["instructions"][c["instruction"].get<int>()];
      EXPECT_EQ(ins["op"], c["op"]);
      EXPECT_TRUE(ins.contains("group"));
    }
    ASSERT_EQ(rank["instructions"].size(), static_cast<size_t>(job->programs[r].instructions_size()));
    const nlohmann::json& first = rank["instructions"][0];
    EXPECT_EQ(first["op"], "LOAD_INPUT");
    // The batch of 4 split over dp: 2 samples of [128, 1024] per rank.
    EXPECT_EQ(first["outputs"][0]["shape"], nlohmann::json({2, 128, 1024}));
  }
}

TEST_F(PlanTest, InvalidSpecsGetTheSubmitJobErrors) {
  const std::string missing_layer =
      Edited("examples/tensor_parallel.yaml", {{"fc1: RowWiseParallel", "fc9: RowWiseParallel"}},
             "missing.yaml");
  absl::StatusOr<PlannedJob> job = PlanSpecFile(missing_layer);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr("parallelize.mp.plan.fc9: the model has no layer named \"fc9\""));

  const std::string empty_shards =
      Edited("examples/dp_mp.yaml", {{"batch_size: 4", "batch_size: 1"}}, "empty.yaml");
  job = PlanSpecFile(empty_shards);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()),
              HasSubstr(empty_shards + ": data.batch_size: 1 is smaller than the 2 shards"));

  job = PlanSpecFile(dir_ + "/nope.yaml");
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace weft::client
