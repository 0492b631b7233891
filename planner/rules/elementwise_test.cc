#include <gtest/gtest.h>

#include "planner/spmd.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::AddPlaced;
using testing::AddUnplaced;
using testing::MakeMesh;
using testing::P;
using testing::R;
using testing::S;

TEST(ElementwiseRuleTest, ActivationsKeepReplicateAndShard) {
  for (const char* type : {"relu", "gelu"}) {
    for (Placement p : {R, S(0), S(1)}) {
      Graph g;
      g.mesh = MakeMesh({4}, {"dp"});
      int x = AddPlaced(&g, "x", {8, 6}, {p});
      int y = AddUnplaced(&g, "y", {8, 6});
      absl::StatusOr<SpmdDecision> d = InferSpmd(BuiltinRules(), g, Op{type, {x}, {y}, "a0"});
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(d->inputs[0].placements(), std::vector<Placement>{p});
      EXPECT_EQ(d->outputs[0].placements(), std::vector<Placement>{p});
    }
  }
}

TEST(ElementwiseRuleTest, PartialInputIsReducedFirst) {
  Graph g;
  g.mesh = MakeMesh({4}, {"mp"});
  int x = AddPlaced(&g, "x", {8, 6}, {P});
  int y = AddUnplaced(&g, "y", {8, 6});
  absl::StatusOr<SpmdDecision> d = InferSpmd(BuiltinRules(), g, Op{"relu", {x}, {y}, "a0"});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->inputs[0].placements(), std::vector<Placement>{R});
  EXPECT_EQ(d->outputs[0].placements(), std::vector<Placement>{R});
  EXPECT_DOUBLE_EQ(d->cost_bytes, 2.0 * 3 / 4 * 8 * 6 * 4);  // ring all-reduce
}

TEST(ElementwiseRuleTest, GradFollowsTheShardedOperandForFree) {
  Graph g;
  g.mesh = MakeMesh({4}, {"dp"});
  int x = AddPlaced(&g, "x", {8, 6}, {S(0)});
  int dy = AddPlaced(&g, "dy", {8, 6}, {R});
  int dx = AddUnplaced(&g, "dx", {8, 6});
  absl::StatusOr<SpmdDecision> d =
      InferSpmd(BuiltinRules(), g, Op{"relu_grad", {x, dy}, {dx}, "a0"});
  ASSERT_TRUE(d.ok()) << d.status();
  // Slicing dy is free; gathering x is not.
  EXPECT_EQ(d->inputs[1].placements(), std::vector<Placement>{S(0)});
  EXPECT_EQ(d->outputs[0].placements(), std::vector<Placement>{S(0)});
  EXPECT_EQ(d->cost_bytes, 0);
}

TEST(ElementwiseRuleTest, MissingRuleNamesOpAndPlacements) {
  Graph g;
  g.mesh = MakeMesh({4}, {"dp"});
  int x = AddPlaced(&g, "x", {8, 6}, {S(0)});
  int y = AddUnplaced(&g, "y", {8, 6});
  absl::Status s = InferSpmd(BuiltinRules(), g, Op{"softmax", {x}, {y}, "sm0"}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("softmax"), std::string::npos) << s;
  EXPECT_NE(s.message().find("sm0"), std::string::npos) << s;
  EXPECT_NE(s.message().find("x [Shard(0)]"), std::string::npos) << s;
}

TEST(ElementwiseRuleTest, RegistryRejectsDuplicates) {
  RuleRegistry registry;
  OpRule rule{[](const OpSignature&) -> absl::StatusOr<std::vector<DimStrategy>> {
                return std::vector<DimStrategy>{};
              },
              nullptr};
  EXPECT_TRUE(registry.Register("relu", rule).ok());
  EXPECT_FALSE(registry.Register("relu", rule).ok());
}

}  // namespace
}  // namespace weft::planner
