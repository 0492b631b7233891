#include "planner/checkpoint_writers.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "planner/planner.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::MustPlan;
using testing::P;
using testing::R;
using testing::S;
using testing::SpecBuilder;

int64_t Bytes(const v1::CheckpointItem& item) {
  int64_t n = 4;
  for (int64_t d : item.box().lengths()) n *= d;
  return n;
}

// (name, offsets) -> elements written, over all ranks; and bytes written per rank.
struct Written {
  std::map<std::string, int64_t> elements_by_name;
  std::map<std::tuple<std::string, std::vector<int64_t>>, int> writers;
  std::vector<int64_t> bytes_by_rank;
};

Written Collect(const std::vector<v1::Program>& programs) {
  Written w;
  w.bytes_by_rank.assign(programs.size(), 0);
  for (const v1::Program& p : programs) {
    for (const v1::CheckpointItem& item : p.checkpoint_items()) {
      if (!item.write()) continue;
      w.elements_by_name[item.name()] += Bytes(item) / 4;
      ++w.writers[{item.name(), {item.box().offsets().begin(), item.box().offsets().end()}}];
      w.bytes_by_rank[p.rank()] += Bytes(item);
    }
  }
  return w;
}

// (name, offsets) -> the ranks holding that box.
std::map<std::tuple<std::string, std::vector<int64_t>>, std::set<int>> Holders(
    const std::vector<v1::Program>& programs) {
  std::map<std::tuple<std::string, std::vector<int64_t>>, std::set<int>> out;
  for (const v1::Program& p : programs) {
    for (const v1::CheckpointItem& item : p.checkpoint_items()) {
      out[{item.name(), {item.box().offsets().begin(), item.box().offsets().end()}}].insert(
          p.rank());
    }
  }
  return out;
}

int64_t Numel(const v1::CheckpointItem& item) {
  int64_t n = 1;
  for (int64_t d : item.global_shape()) n *= d;
  return n;
}

// Every tensor is written exactly once, whole.
void ExpectOneCopyEach(const std::vector<v1::Program>& programs) {
  Written w = Collect(programs);
  std::map<std::string, int64_t> numel;
  for (const v1::Program& p : programs) {
    for (const v1::CheckpointItem& item : p.checkpoint_items()) numel[item.name()] = Numel(item);
  }
  EXPECT_EQ(w.elements_by_name, numel);
  for (const auto& [key, n] : w.writers) EXPECT_EQ(n, 1) << std::get<0>(key);
}

TEST(CheckpointWritersTest, DataParallelWritesOneCopyBalancedOverRanks) {
  v1::JobSpec spec = SpecBuilder({4}, {"dp"})
                         .Batch(16, {8}, {8})
                         .Linear("fc0", 8, 8)
                         .Linear("fc1", 8, 8)
                         .Linear("fc2", 8, 8)
                         .Linear("fc3", 8, 8)
                         .AdamW()
                         .Spec();
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 4u);
  for (const v1::Program& p : programs) {
    // 4 weights + 4 biases, each with m and v.
    EXPECT_EQ(p.checkpoint_items_size(), 24);
  }
  // Every rank holds every tensor whole: each box has 4 holders.
  for (const auto& [chunk, ranks] : Holders(programs)) {
    EXPECT_EQ(ranks.size(), 4u) << std::get<0>(chunk);
  }
  ExpectOneCopyEach(programs);
  // 12 weight-sized chunks of 256 bytes and 12 bias-sized of 32: 3 + 3 per rank.
  Written w = Collect(programs);
  for (int64_t b : w.bytes_by_rank) EXPECT_EQ(b, 3 * 256 + 3 * 32);
}

TEST(CheckpointWritersTest, OptimizerStatesAreNamedAfterTheirParameter) {
  v1::JobSpec spec = SpecBuilder({1}, {"d0"}).Batch(4, {3}, {2}).Linear("fc0", 3, 2).AdamW().Spec();
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 1u);
  std::set<std::string> names;
  for (const v1::CheckpointItem& item : programs[0].checkpoint_items()) {
    names.insert(item.name());
    EXPECT_TRUE(item.write());
    EXPECT_EQ(item.role(), item.name().find('/') == std::string::npos
                               ? v1::Buffer::PARAM
                               : v1::Buffer::OPTIMIZER_STATE);
  }
  EXPECT_EQ(names, (std::set<std::string>{"fc0.weight", "fc0.bias", "fc0.weight/adamw.m",
                                          "fc0.weight/adamw.v", "fc0.bias/adamw.m",
                                          "fc0.bias/adamw.v"}));
}

TEST(CheckpointWritersTest, ShardedBoxesAreEachWrittenByTheirHolder) {
  // dp x mp: fc0.weight Shard(1) on mp: each mp column is one chunk, written once per dp group.
  v1::JobSpec spec = SpecBuilder({2, 2}, {"dp", "mp"})
                         .Batch(8, {4}, {6})
                         .Linear("fc0", 4, 6)
                         .Place("weight", {R, S(1)})
                         .Place("bias", {R, S(0)})
                         .Spec();
  std::vector<v1::Program> programs = MustPlan(spec);
  ExpectOneCopyEach(programs);
  // The copies of rank (dp, mp)'s box are held by the ranks with the same mp coordinate.
  std::map<std::tuple<std::string, std::vector<int64_t>>, std::set<int>> holders = Holders(programs);
  for (const auto& [chunk, ranks] : holders) {
    EXPECT_EQ(ranks.size(), 2u) << std::get<0>(chunk);
    EXPECT_EQ(*ranks.begin() % 2, *ranks.rbegin() % 2) << std::get<0>(chunk);
  }
}

TEST(CheckpointWritersTest, PartialSumParameterIsWrittenByMemberZero) {
  v1::JobSpec spec = SpecBuilder({2}, {"mp"})
                         .Batch(4, {4}, {2})
                         .Linear("fc0", 4, 2)
                         .Place("weight", {P})
                         .Spec();
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 2u);
  ExpectOneCopyEach(programs);
  bool found = false;
  for (const v1::CheckpointItem& item : programs[1].checkpoint_items()) {
    EXPECT_NE(item.name(), "fc0.weight") << "member 1 holds zeros, not the value";
  }
  for (const v1::CheckpointItem& item : programs[0].checkpoint_items()) {
    if (item.name() != "fc0.weight") continue;
    found = true;
    EXPECT_TRUE(item.write());
  }
  EXPECT_TRUE(found);
  const std::set<int> holders = Holders(programs)[{"fc0.weight", {0, 0}}];
  EXPECT_EQ(holders, std::set<int>{0});
}

TEST(CheckpointWritersTest, PipelineStagesWriteOnlyTheirOwnParameters) {
  v1::JobSpec spec = SpecBuilder({2, 2}, {"pp", "dp"})
                         .Batch(8, {4}, {4})
                         .Linear("fc0", 4, 4)
                         .Act("a0", "relu")
                         .Linear("fc1", 4, 4)
                         .Spec();
  spec.mutable_pipeline()->set_dim("pp");
  spec.mutable_pipeline()->set_schedule("FThenB");
  spec.mutable_pipeline()->set_micro_batches(2);
  spec.mutable_pipeline()->set_virtual_stages(1);
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 4u);
  ExpectOneCopyEach(programs);
  for (const v1::Program& p : programs) {
    const std::string layer = p.rank() < 2 ? "fc0" : "fc1";
    for (const v1::CheckpointItem& item : p.checkpoint_items()) {
      EXPECT_EQ(item.name().substr(0, 3), layer) << "rank " << p.rank();
    }
  }
}

TEST(CheckpointWritersTest, ProgramsCarryTheCheckpointSettings) {
  v1::JobSpec spec = SpecBuilder({1}, {"d0"}).Batch(4, {3}, {2}).Linear("fc0", 3, 2).Spec();
  spec.mutable_checkpoint()->set_dir("/tmp/ckpt");
  spec.mutable_checkpoint()->set_every(5);
  spec.mutable_checkpoint()->set_keep(2);
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 1u);
  EXPECT_EQ(programs[0].checkpoint_dir(), "/tmp/ckpt");
  EXPECT_EQ(programs[0].checkpoint_every(), 5);
}

}  // namespace
}  // namespace weft::planner
