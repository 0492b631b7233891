#include "coordinator/planner/lower.h"

#include <gtest/gtest.h>

#include "coordinator/planner/test_util.h"

namespace weft::planner {
namespace {

using testing::MakeMesh;
using testing::P;
using testing::R;
using testing::S;

DistAttr A(const Mesh& mesh, std::vector<Placement> p) { return *DistAttr::Create(mesh, p, 2); }

std::vector<std::pair<v1::Instruction::Op, int>> Kinds(const std::vector<ReshardStep>& steps) {
  std::vector<std::pair<v1::Instruction::Op, int>> out;
  for (const ReshardStep& s : steps) out.push_back({s.kind, s.mesh_dim});
  return out;
}

using Want = std::vector<std::pair<v1::Instruction::Op, int>>;

TEST(LowerTest, EachTransitionOnOneDim) {
  Mesh mesh = MakeMesh({4}, {"dp"});
  auto lower = [&](Placement from, Placement to) {
    absl::StatusOr<std::vector<ReshardStep>> steps = LowerReshard(A(mesh, {from}), A(mesh, {to}), "t");
    EXPECT_TRUE(steps.ok()) << steps.status();
    return steps.ok() ? *steps : std::vector<ReshardStep>{};
  };
  EXPECT_EQ(Kinds(lower(P, R)), (Want{{v1::Instruction::ALL_REDUCE, 0}}));
  EXPECT_EQ(Kinds(lower(S(0), R)), (Want{{v1::Instruction::ALL_GATHER, 0}}));
  EXPECT_EQ(Kinds(lower(R, S(1))), (Want{{v1::Instruction::SLICE, 0}}));
  EXPECT_EQ(Kinds(lower(P, S(0))), (Want{{v1::Instruction::REDUCE_SCATTER, 0}}));
  EXPECT_EQ(Kinds(lower(S(0), S(1))),
            (Want{{v1::Instruction::ALL_GATHER, 0}, {v1::Instruction::SLICE, 0}}));
  EXPECT_TRUE(lower(S(1), S(1)).empty());
  EXPECT_EQ(lower(S(1), R)[0].axis, 1);
  EXPECT_EQ(lower(P, S(1))[0].after.placements(), std::vector<Placement>{S(1)});
}

TEST(LowerTest, ReplicateToPartialHasNoLowering) {
  Mesh mesh = MakeMesh({4}, {"dp"});
  absl::Status s = LowerReshard(A(mesh, {R}), A(mesh, {P}), "fc0.out").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("fc0.out"), std::string::npos) << s;
  EXPECT_NE(s.message().find("Replicate()->Partial(sum)"), std::string::npos) << s;
}

TEST(LowerTest, MultiDimOneMeshDimAtATime) {
  Mesh mesh = MakeMesh({2, 2}, {"dp", "mp"});
  absl::StatusOr<std::vector<ReshardStep>> steps =
      LowerReshard(A(mesh, {P, S(1)}), A(mesh, {R, R}), "t");
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(Kinds(*steps),
            (Want{{v1::Instruction::ALL_GATHER, 1}, {v1::Instruction::ALL_REDUCE, 0}}));
  EXPECT_EQ(steps->back().after.placements(), (std::vector<Placement>{R, R}));
  // The same axis split by both dims: gather the inner (mp) first.
  steps = LowerReshard(A(mesh, {S(0), S(0)}), A(mesh, {R, R}), "t");
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(Kinds(*steps),
            (Want{{v1::Instruction::ALL_GATHER, 1}, {v1::Instruction::ALL_GATHER, 0}}));
  // Un-sharding the outer dim of a nested split redoes the inner one.
  steps = LowerReshard(A(mesh, {S(0), S(0)}), A(mesh, {R, S(0)}), "t");
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(Kinds(*steps), (Want{{v1::Instruction::ALL_GATHER, 1},
                                 {v1::Instruction::ALL_GATHER, 0},
                                 {v1::Instruction::SLICE, 1}}));
}

TEST(LowerTest, SizeOneDimsNeedNoSteps) {
  Mesh mesh = MakeMesh({1, 2}, {"dp", "mp"});
  absl::StatusOr<std::vector<ReshardStep>> steps =
      LowerReshard(A(mesh, {P, P}), A(mesh, {R, R}), "t");
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(Kinds(*steps), (Want{{v1::Instruction::ALL_REDUCE, 1}}));
}

TEST(LowerTest, GroupIdsByFirstUse) {
  Graph g;
  g.mesh = MakeMesh({2, 3}, {"dp", "mp"});
  int a = testing::AddPlaced(&g, "a", {6, 6}, {R, P});
  int b = testing::AddPlaced(&g, "b", {6, 6}, {R, R});
  int c = testing::AddPlaced(&g, "c", {6, 6}, {P, R});
  int d = testing::AddPlaced(&g, "d", {6, 6}, {R, R});
  g.ops.push_back(Op{"reshard", {a}, {b}});
  g.ops.push_back(Op{"reshard", {c}, {d}});
  absl::StatusOr<LoweredGraph> lowered = Lower(g);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_EQ(lowered->group_dims, (std::vector<int>{1, 0}));
  EXPECT_EQ(lowered->group_base.at(1), 0);
  EXPECT_EQ(lowered->group_base.at(0), 2);  // after the 2 mp groups
}

}  // namespace
}  // namespace weft::planner
