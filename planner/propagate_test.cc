#include "planner/propagate.h"

#include <gtest/gtest.h>

#include "planner/build.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::P;
using testing::R;
using testing::S;
using testing::SpecBuilder;

absl::StatusOr<Graph> Placed(const v1::JobSpec& spec) {
  absl::StatusOr<Graph> g = BuildGraph(spec);
  if (!g.ok()) return g.status();
  return Propagate(BuiltinRules(), *std::move(g));
}

const Tensor& Find(const Graph& g, const std::string& name) {
  for (const Tensor& t : g.tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return g.tensors[0];
}

int CountOps(const Graph& g, const std::string& type) {
  int n = 0;
  for (const Op& op : g.ops) n += op.type == type;
  return n;
}

TEST(PropagateTest, DataParallelShardsActivationsAndReducesOnlyTheLoss) {
  v1::JobSpec spec = SpecBuilder({4}, {"dp"})
                         .Batch(16, {6}, {2})
                         .Linear("fc0", 6, 8)
                         .Act("act0", "relu")
                         .Linear("fc1", 8, 2)
                         .Spec();
  absl::StatusOr<Graph> g = Placed(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tensors[g->input].dist->placements(), std::vector<Placement>{S(0)});
  EXPECT_EQ(Find(*g, "fc0.weight").dist->placements(), std::vector<Placement>{R});
  for (const char* name : {"fc0.xw", "fc0.out", "act0.out", "fc1.out"}) {
    EXPECT_EQ(Find(*g, name).dist->placements(), std::vector<Placement>{S(0)}) << name;
  }
  // The only reshard: the Partial loss to Replicate.
  ASSERT_EQ(CountOps(*g, "reshard"), 1);
  EXPECT_EQ(g->tensors[g->loss].dist->placements(), std::vector<Placement>{R});
  EXPECT_EQ(g->tensors[g->ops.back().inputs[0]].dist->placements(), std::vector<Placement>{P});
}

TEST(PropagateTest, MegatronMlpReducesOnlyTheRowParallelOutput) {
  v1::JobSpec spec = SpecBuilder({2}, {"mp"})
                         .Batch(4, {6}, {6})
                         .Linear("fc0", 6, 8)
                         .Place("weight", {S(1)})
                         .Place("bias", {S(0)})
                         .Act("act0", "relu")
                         .Linear("fc1", 8, 6)
                         .Place("weight", {S(0)})
                         .Spec();
  absl::StatusOr<Graph> g = Placed(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tensors[g->input].dist->placements(), std::vector<Placement>{R});  // no dp dim
  EXPECT_EQ(Find(*g, "fc0.out").dist->placements(), std::vector<Placement>{S(1)});
  EXPECT_EQ(Find(*g, "act0.out").dist->placements(), std::vector<Placement>{S(1)});
  EXPECT_EQ(Find(*g, "fc1.out").dist->placements(), std::vector<Placement>{R});
  // fc1.xw is Partial; one reshard to Replicate before the bias.
  ASSERT_EQ(CountOps(*g, "reshard"), 1);
  for (const Op& op : g->ops) {
    if (op.type != "reshard") continue;
    EXPECT_EQ(g->tensors[op.inputs[0]].name, "fc1.xw");
    EXPECT_EQ(g->tensors[op.inputs[0]].dist->placements(), std::vector<Placement>{P});
  }
}

TEST(PropagateTest, DefaultPlacementsOnTwoDimMesh) {
  v1::JobSpec spec =
      SpecBuilder({2, 2}, {"dp", "mp"}).Batch(8, {6}, {2}).Linear("fc0", 6, 2).Spec();
  absl::StatusOr<Graph> g = Placed(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tensors[g->label].dist->placements(), (std::vector<Placement>{S(0), R}));
  EXPECT_EQ(Find(*g, "fc0.bias").dist->placements(), (std::vector<Placement>{R, R}));
}

TEST(PropagateTest, PartialParametersAndBatchesAreAccepted) {
  v1::JobSpec spec = SpecBuilder({4}, {"dp"})
                         .Batch(8, {6}, {2})
                         .Linear("fc0", 6, 2)
                         .Place("weight", {P})
                         .DataPlacements({P})
                         .Spec();
  absl::StatusOr<Graph> g = Placed(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tensors[g->params[0].tensor].dist->placements(), std::vector<Placement>{P});
  EXPECT_EQ(g->tensors[g->input].dist->placements(), std::vector<Placement>{P});
}

TEST(PropagateTest, RejectsBadAndMiscountedPlacements) {
  v1::JobSpec spec = SpecBuilder({4}, {"dp"})
                         .Batch(8, {6}, {2})
                         .Linear("fc0", 6, 2)
                         .Place("bias", {S(1)})
                         .Spec();
  absl::Status s = Placed(spec).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fc0.bias"), std::string::npos) << s;
  EXPECT_NE(s.message().find("Shard(1)"), std::string::npos) << s;

  spec = SpecBuilder({4}, {"dp"})
             .Batch(8, {6}, {2})
             .Linear("fc0", 6, 2)
             .Place("weight", {S(0), R})
             .Spec();
  s = Placed(spec).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("[Shard(0), Replicate()]"), std::string::npos) << s;

  spec = SpecBuilder({4}, {"dp"}).Batch(8, {6}, {2}).Linear("fc0", 6, 2).Place("gamma", {R}).Spec();
  s = Placed(spec).status();
  EXPECT_NE(s.message().find("gamma"), std::string::npos) << s;
}

}  // namespace
}  // namespace weft::planner
