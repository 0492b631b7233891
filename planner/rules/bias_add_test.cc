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

SpmdDecision BiasAdd(std::vector<Placement> x, std::vector<Placement> b) {
  Graph g;
  g.mesh = MakeMesh({2}, {"mp"});
  int xi = AddPlaced(&g, "x", {8, 6}, x);
  int bi = AddPlaced(&g, "b", {6}, b);
  int y = AddUnplaced(&g, "y", {8, 6});
  absl::StatusOr<SpmdDecision> d = InferSpmd(BuiltinRules(), g, Op{"bias_add", {xi, bi}, {y}});
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : SpmdDecision{};
}

SpmdDecision BiasGrad(std::vector<Placement> dy) {
  Graph g;
  g.mesh = MakeMesh({2}, {"mp"});
  int dyi = AddPlaced(&g, "dy", {8, 6}, dy);
  int db = AddUnplaced(&g, "db", {6});
  absl::StatusOr<SpmdDecision> d = InferSpmd(BuiltinRules(), g, Op{"bias_grad", {dyi}, {db}});
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : SpmdDecision{};
}

TEST(BiasAddRuleTest, Cases) {
  // x[S(0)], b[R] -> out[S(0)]
  SpmdDecision d = BiasAdd({S(0)}, {R});
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{S(0)});
  // x[S(last)], b[S(0)] -> out[S(last)]: column-parallel bias.
  d = BiasAdd({S(1)}, {S(0)});
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{S(1)});
  EXPECT_EQ(d.cost_bytes, 0);
  // x[S(last)], b[R]: slice the bias for free.
  d = BiasAdd({S(1)}, {R});
  EXPECT_EQ(d.inputs[1].placements(), std::vector<Placement>{S(0)});
  EXPECT_EQ(d.cost_bytes, 0);
  // A Partial x and a Partial bias add term by term.
  d = BiasAdd({P}, {P});
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{P});
  EXPECT_EQ(d.cost_bytes, 0);
  // A Partial x is all-reduced before adding the bias (row-parallel output).
  d = BiasAdd({P}, {R});
  EXPECT_EQ(d.inputs[0].placements(), std::vector<Placement>{R});
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{R});
}

TEST(BiasAddRuleTest, BiasGradCases) {
  EXPECT_EQ(BiasGrad({S(0)}).outputs[0].placements(), std::vector<Placement>{P});
  EXPECT_EQ(BiasGrad({S(1)}).outputs[0].placements(), std::vector<Placement>{S(0)});
  EXPECT_EQ(BiasGrad({R}).outputs[0].placements(), std::vector<Placement>{R});
  EXPECT_EQ(BiasGrad({P}).outputs[0].placements(), std::vector<Placement>{P});
}

}  // namespace
}  // namespace weft::planner
