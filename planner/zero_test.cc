// ZeroPlacement and ShardParameters: which axis of a parameter a ZeRO shard splits along the
// sharding dim, when a parameter stays whole, and level 3 placing the parameters as their shards.
#include "planner/zero.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "planner/build.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::P;
using testing::R;
using testing::S;

DistAttr Attr(const Mesh& mesh, std::vector<Placement> placements, int ndim) {
  return *DistAttr::Create(mesh, std::move(placements), ndim);
}

TEST(ZeroPlacementTest, SplitsTheFirstAxisTheDimCan) {
  const Mesh dp_mp = testing::MakeMesh({4, 2}, {"dp", "mp"});
  // [8, 6] whole: axis 0 on dp (dim 0).
  EXPECT_EQ(ZeroPlacement(Attr(dp_mp, {R, R}, 2), {8, 6}, 0), Attr(dp_mp, {S(0), R}, 2));
  // Axis 0 split by mp after dp: the gather back would take two steps, so axis 1.
  EXPECT_EQ(ZeroPlacement(Attr(dp_mp, {R, S(0)}, 2), {8, 6}, 0), Attr(dp_mp, {S(1), S(0)}, 2));
  // Axis 0 shorter than dp is wide (3 < 4): axis 1.
  EXPECT_EQ(ZeroPlacement(Attr(dp_mp, {R, R}, 2), {3, 8}, 0), Attr(dp_mp, {S(1), R}, 2));
  // Sharding along mp (dim 1) after dp split axis 0 to pieces of 2: still long enough for mp = 2.
  EXPECT_EQ(ZeroPlacement(Attr(dp_mp, {S(0), R}, 2), {8, 6}, 1), Attr(dp_mp, {S(0), S(0)}, 2));
}

TEST(ZeroPlacementTest, LeavesWholeWhatItCannotSplit) {
  const Mesh dp = testing::MakeMesh({4}, {"dp"});
  EXPECT_FALSE(ZeroPlacement(Attr(dp, {R}, 1), {3}, 0));        // a bias shorter than dp is wide
  EXPECT_FALSE(ZeroPlacement(Attr(dp, {S(0)}, 1), {8}, 0));     // already split along the dim
  const Mesh one = testing::MakeMesh({1, 4}, {"dp", "mp"});
  EXPECT_FALSE(ZeroPlacement(Attr(one, {R, R}, 1), {8}, 0));  // one rank: nothing to shard
}

// Level 3 on dp=2: the parameters become their shards, their placements before in gathered; a
// Partial one and one too short to split stay whole; below level 3 nothing changes.
TEST(ShardParametersTest, LevelThreePlacesParametersAsShards) {
  v1::JobSpec spec = testing::SpecBuilder({2}, {"dp"})
                         .Batch(8, {6}, {1})
                         .Linear("fc0", 6, 8)
                         .Place("weight", {P})
                         .Act("act0", "relu")
                         .Linear("fc1", 8, 1)
                         .Spec();
  spec.mutable_sharding()->set_dim("dp");
  for (int level : {2, 3}) {
    spec.mutable_sharding()->set_level(level);
    absl::StatusOr<Graph> g = BuildGraph(spec);
    ASSERT_TRUE(g.ok()) << g.status();
    std::map<std::string, DistAttr> before;
    for (int p : g->ParamIds()) before[g->tensors[p].name] = *g->tensors[p].dist;
    ASSERT_TRUE(ShardParameters(&*g).ok());
    std::map<std::string, DistAttr> after;
    for (int p : g->ParamIds()) after[g->tensors[p].name] = *g->tensors[p].dist;
    if (level < 3) {
      EXPECT_EQ(after, before);
      EXPECT_TRUE(g->gathered.empty());
      continue;
    }
    const Mesh& mesh = g->mesh;
    EXPECT_EQ(after["fc0.weight"], before["fc0.weight"]);  // Partial: its own update
    EXPECT_EQ(after["fc0.bias"], Attr(mesh, {S(0)}, 1));
    EXPECT_EQ(after["fc1.weight"], Attr(mesh, {S(0)}, 2));
    EXPECT_EQ(after["fc1.bias"], before["fc1.bias"]);  // [1]: too short for 2 ranks
    EXPECT_EQ(g->gathered.size(), 2u);
    for (const auto& [id, whole] : g->gathered) {
      EXPECT_EQ(whole, before[g->tensors[id].name]) << g->tensors[id].name;
    }
  }
}

}  // namespace
}  // namespace weft::planner
