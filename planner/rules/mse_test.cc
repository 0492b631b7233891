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

SpmdDecision Decide(const std::string& type, std::vector<Placement> pred,
                    std::vector<Placement> label) {
  Graph g;
  g.mesh = MakeMesh({4}, {"dp"});
  int p = AddPlaced(&g, "pred", {8, 2}, pred);
  int l = AddPlaced(&g, "label", {8, 2}, label);
  int out = AddUnplaced(&g, "out", type == "mse" ? std::vector<int64_t>{1} : std::vector<int64_t>{8, 2});
  absl::StatusOr<SpmdDecision> d = InferSpmd(BuiltinRules(), g, Op{type, {p, l}, {out}});
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : SpmdDecision{};
}

TEST(MseRuleTest, ShardedBatchGivesPartialLoss) {
  SpmdDecision d = Decide("mse", {S(0)}, {S(0)});
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{P});
  EXPECT_EQ(Decide("mse", {R}, {R}).outputs[0].placements(), std::vector<Placement>{R});
  // A replicated label is sliced to match the sharded prediction, for free.
  d = Decide("mse", {S(0)}, {R});
  EXPECT_EQ(d.inputs[1].placements(), std::vector<Placement>{S(0)});
  EXPECT_EQ(d.cost_bytes, 0);
}

TEST(MseRuleTest, PartialPredictionIsReduced) {
  SpmdDecision d = Decide("mse", {P}, {R});
  EXPECT_EQ(d.inputs[0].placements(), std::vector<Placement>{R});
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{R});
  EXPECT_GT(d.cost_bytes, 0);
}

TEST(MseRuleTest, GradKeepsThePredictionPlacement) {
  EXPECT_EQ(Decide("mse_grad", {S(0)}, {S(0)}).outputs[0].placements(),
            std::vector<Placement>{S(0)});
  EXPECT_EQ(Decide("mse_grad", {R}, {R}).outputs[0].placements(), std::vector<Placement>{R});
}

}  // namespace
}  // namespace weft::planner
