#include "planner/lower.h"

#include <gtest/gtest.h>

#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::MakeMesh;
using testing::P;
using testing::R;
using testing::S;

const Placement Pavg = Placement::Partial(Placement::Reduce::kAvg);

DistAttr A(const Mesh& mesh, std::vector<Placement> p) { return *DistAttr::Create(mesh, p, 2); }

std::vector<std::pair<v1::Instruction::Op, int>> Kinds(const std::vector<ReshardStep>& steps) {
  std::vector<std::pair<v1::Instruction::Op, int>> out;
  for (const ReshardStep& s : steps) out.push_back({s.kind, s.mesh_dim});
  return out;
}

using Want = std::vector<std::pair<v1::Instruction::Op, int>>;

std::vector<ReshardStep> MustLower(const Mesh& mesh, std::vector<Placement> from,
                                   std::vector<Placement> to,
                                   std::vector<int64_t> shape = {8, 6}) {
  absl::StatusOr<std::vector<ReshardStep>> steps =
      LowerReshard(A(mesh, from), A(mesh, to), shape, 4, "t");
  EXPECT_TRUE(steps.ok()) << steps.status();
  if (!steps.ok()) return {};
  // Every step starts where the previous one ended and the last ends at the target (up to
  // size-1 mesh dims, whose moves need no step).
  auto same = [&](const DistAttr& a, const DistAttr& b) {
    for (int r = 0; r < mesh.size(); ++r) {
      if (a.LocalShape(shape, r) != b.LocalShape(shape, r)) return false;
      for (int d = 0; d < mesh.ndim(); ++d) {
        if (mesh.dim_size(d) > 1 && a.placement(d) != b.placement(d)) return false;
      }
    }
    return true;
  };
  DistAttr cur = A(mesh, from);
  for (const ReshardStep& s : *steps) {
    EXPECT_TRUE(same(s.before, cur)) << s.before.ToString() << " vs " << cur.ToString();
    cur = s.after;
  }
  if (!steps->empty()) EXPECT_TRUE(same(cur, A(mesh, to))) << cur.ToString();
  return *steps;
}

TEST(LowerTest, EachTransitionOnOneDim) {
  Mesh mesh = MakeMesh({4}, {"dp"});
  auto lower = [&](Placement from, Placement to) { return MustLower(mesh, {from}, {to}); };
  // P -> R: all-reduce, keeping the reduce kind.
  EXPECT_EQ(Kinds(lower(P, R)), (Want{{v1::Instruction::ALL_REDUCE, 0}}));
  EXPECT_EQ(lower(Pavg, R)[0].reduce, Placement::Reduce::kAvg);
  // P -> S: reduce-scatter along the target axis.
  EXPECT_EQ(Kinds(lower(P, S(0))), (Want{{v1::Instruction::REDUCE_SCATTER, 0}}));
  EXPECT_EQ(lower(P, S(1))[0].axis, 1);
  EXPECT_EQ(lower(P, S(1))[0].after.placements(), std::vector<Placement>{S(1)});
  EXPECT_EQ(lower(Pavg, S(0))[0].reduce, Placement::Reduce::kAvg);
  // S -> R: all-gather along the shard axis.
  EXPECT_EQ(Kinds(lower(S(0), R)), (Want{{v1::Instruction::ALL_GATHER, 0}}));
  EXPECT_EQ(lower(S(1), R)[0].axis, 1);
  // R -> S: a local slice.
  EXPECT_EQ(Kinds(lower(R, S(1))), (Want{{v1::Instruction::SLICE, 0}}));
  // S(i) -> S(j): one all-to-all, not a gather and a slice.
  std::vector<ReshardStep> a2a = lower(S(0), S(1));
  EXPECT_EQ(Kinds(a2a), (Want{{v1::Instruction::ALL_TO_ALL, 0}}));
  EXPECT_EQ(a2a[0].axis, 1);
  EXPECT_EQ(a2a[0].concat_axis, 0);
  // R -> P(sum): member 0 keeps the value, the others zero it; R -> P(avg): nothing to do.
  std::vector<ReshardStep> rp = lower(R, P);
  EXPECT_EQ(Kinds(rp), (Want{{v1::Instruction::SCALE, 0}}));
  EXPECT_TRUE(rp[0].first_member_only);
  EXPECT_TRUE(lower(R, Pavg).empty());
  // P(sum) <-> P(avg): a local scale by K or 1/K.
  std::vector<ReshardStep> s2a = lower(P, Pavg);
  EXPECT_EQ(Kinds(s2a), (Want{{v1::Instruction::SCALE, 0}}));
  EXPECT_FLOAT_EQ(s2a[0].scale, 4.0f);
  EXPECT_FALSE(s2a[0].first_member_only);
  EXPECT_FLOAT_EQ(lower(Pavg, P)[0].scale, 0.25f);
  // S -> P: through Replicate (gather, then member 0 keeps it).
  EXPECT_EQ(Kinds(lower(S(0), P)),
            (Want{{v1::Instruction::ALL_GATHER, 0}, {v1::Instruction::SCALE, 0}}));
  // Nothing to do.
  EXPECT_TRUE(lower(S(1), S(1)).empty());
  EXPECT_TRUE(lower(P, P).empty());
}

TEST(LowerTest, MoveBytes) {
  Mesh mesh = MakeMesh({4}, {"dp"});
  const std::vector<int64_t> shape = {8, 6};  // 192 bytes whole, 48 per shard
  EXPECT_DOUBLE_EQ(*MoveBytes(A(mesh, {P}), 0, R, shape, 4), 2.0 * 3 / 4 * 192);
  EXPECT_DOUBLE_EQ(*MoveBytes(A(mesh, {P}), 0, S(0), shape, 4), 3.0 / 4 * 192);
  EXPECT_DOUBLE_EQ(*MoveBytes(A(mesh, {S(0)}), 0, R, shape, 4), 3 * 48);
  EXPECT_DOUBLE_EQ(*MoveBytes(A(mesh, {S(0)}), 0, S(1), shape, 4), 3.0 / 4 * 48);
  EXPECT_DOUBLE_EQ(*MoveBytes(A(mesh, {R}), 0, S(1), shape, 4), 0);
  EXPECT_DOUBLE_EQ(*MoveBytes(A(mesh, {R}), 0, P, shape, 4), 0);
  EXPECT_FALSE(MoveBytes(A(mesh, {S(0)}), 0, P, shape, 4).has_value());
  // On [2,2], dim 0 cannot re-split axis 0 while dim 1 splits it inside.
  Mesh mesh2 = MakeMesh({2, 2}, {"dp", "mp"});
  EXPECT_FALSE(MoveBytes(A(mesh2, {S(0), S(0)}), 0, R, shape, 4).has_value());
  EXPECT_FALSE(MoveBytes(A(mesh2, {R, S(0)}), 0, S(0), shape, 4).has_value());
  EXPECT_TRUE(MoveBytes(A(mesh2, {S(0), S(0)}), 1, R, shape, 4).has_value());
  EXPECT_TRUE(MoveBytes(A(mesh2, {S(0), R}), 1, S(0), shape, 4).has_value());
}

TEST(LowerTest, MultiDimPicksTheCheapestOrder) {
  Mesh mesh = MakeMesh({2, 2}, {"dp", "mp"});
  // All-reduce the small piece first, then gather: 2*(1/2)*n + n beats n + 2*(1/2)*2n.
  std::vector<ReshardStep> steps = MustLower(mesh, {P, S(1)}, {R, R});
  EXPECT_EQ(Kinds(steps),
            (Want{{v1::Instruction::ALL_REDUCE, 0}, {v1::Instruction::ALL_GATHER, 1}}));
  // P -> S on one dim and R -> S on the other: slice first (free), then reduce-scatter the
  // smaller piece; never all-reduce.
  steps = MustLower(mesh, {P, R}, {S(0), S(1)});
  EXPECT_EQ(Kinds(steps),
            (Want{{v1::Instruction::SLICE, 1}, {v1::Instruction::REDUCE_SCATTER, 0}}));
  // Slices first when they shrink what a later all-reduce moves.
  steps = MustLower(mesh, {R, P}, {S(0), R});
  EXPECT_EQ(Kinds(steps), (Want{{v1::Instruction::SLICE, 0}, {v1::Instruction::ALL_REDUCE, 1}}));
  // The same axis split by both dims: gather the inner (mp) first.
  steps = MustLower(mesh, {S(0), S(0)}, {R, R});
  EXPECT_EQ(Kinds(steps),
            (Want{{v1::Instruction::ALL_GATHER, 1}, {v1::Instruction::ALL_GATHER, 0}}));
  // Un-sharding the outer dim of a nested split redoes the inner one.
  steps = MustLower(mesh, {S(0), S(0)}, {R, S(0)});
  EXPECT_EQ(Kinds(steps), (Want{{v1::Instruction::ALL_GATHER, 1},
                                {v1::Instruction::ALL_GATHER, 0},
                                {v1::Instruction::SLICE, 1}}));
  // Swapping the shard axes of two dims: all-to-alls, never through Replicate on both.
  steps = MustLower(mesh, {S(0), S(1)}, {S(1), S(0)});
  int gathers = 0;
  for (const ReshardStep& s : steps) gathers += s.kind == v1::Instruction::ALL_GATHER;
  EXPECT_LE(gathers, 1);
  // Independent dims change independently, each with its own collective.
  steps = MustLower(mesh, {S(0), P}, {R, S(1)});
  EXPECT_EQ(steps.size(), 2u);
}

TEST(LowerTest, ThreeDimMesh) {
  Mesh mesh = MakeMesh({2, 2, 2}, {"dp", "mp", "x"});
  std::vector<ReshardStep> steps = MustLower(mesh, {P, S(1), S(0)}, {R, R, R}, {8, 8});
  EXPECT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].kind, v1::Instruction::ALL_REDUCE);  // smallest first
  steps = MustLower(mesh, {S(0), R, S(1)}, {S(1), R, S(0)}, {8, 8});
  for (const ReshardStep& s : steps) EXPECT_NE(s.kind, v1::Instruction::OP_UNSPECIFIED);
}

TEST(LowerTest, AcrossMeshesIsNotLowered) {
  Mesh a = MakeMesh({2}, {"dp"});
  Mesh b = MakeMesh({4}, {"dp"});
  absl::Status s = LowerReshard(A(a, {R}), A(b, {R}), {8, 6}, 4, "fc0.out").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("fc0.out"), std::string::npos) << s;
}

TEST(LowerTest, SizeOneDimsNeedNoSteps) {
  Mesh mesh = MakeMesh({1, 2}, {"dp", "mp"});
  std::vector<ReshardStep> steps = MustLower(mesh, {P, P}, {R, R});
  EXPECT_EQ(Kinds(steps), (Want{{v1::Instruction::ALL_REDUCE, 1}}));
  EXPECT_TRUE(MustLower(mesh, {S(0), R}, {S(1), R}).empty());
}

TEST(LowerTest, GroupIdsByFirstUse) {
  Graph g;
  g.mesh = MakeMesh({2, 3}, {"dp", "mp"});
  int a = testing::AddPlaced(&g, "a", {6, 6}, {R, P});
  int b = testing::AddPlaced(&g, "b", {6, 6}, {R, R});
  int c = testing::AddPlaced(&g, "c", {6, 6}, {P, R});
  int d = testing::AddPlaced(&g, "d", {6, 6}, {R, R});
  int e = testing::AddPlaced(&g, "e", {6, 6}, {R, R});
  int f = testing::AddPlaced(&g, "f", {6, 6}, {R, P});
  g.ops.push_back(Op{"reshard", {a}, {b}});
  g.ops.push_back(Op{"reshard", {c}, {d}});
  g.ops.push_back(Op{"reshard", {e}, {f}});  // local: no group
  absl::StatusOr<LoweredGraph> lowered = Lower(g);
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  EXPECT_EQ(lowered->group_dims, (std::vector<int>{1, 0}));
  EXPECT_EQ(lowered->group_base.at(1), 0);
  EXPECT_EQ(lowered->group_base.at(0), 2);  // after the 2 mp groups
}

}  // namespace
}  // namespace weft::planner
