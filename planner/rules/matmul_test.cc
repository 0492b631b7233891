#include <gtest/gtest.h>

#include <cmath>

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

struct Case {
  std::vector<Placement> x, w;
  std::vector<Placement> want_x, want_w, want_out;
};

// One matmul x[32, 8] @ w[8, 16] on mesh [4](dp) (or a given mesh), returns the decision.
SpmdDecision Decide(const Mesh& mesh, std::vector<int64_t> xs, std::vector<int64_t> ws,
                    std::vector<int64_t> os, std::vector<Placement> xp, std::vector<Placement> wp,
                    bool ta = false, bool tb = false) {
  Graph g;
  g.mesh = mesh;
  int x = AddPlaced(&g, "x", xs, xp);
  int w = AddPlaced(&g, "w", ws, wp);
  int y = AddUnplaced(&g, "y", os);
  Op op{"matmul", {x, w}, {y}, "fc0"};
  op.attrs.Set("transpose_a", ta).Set("transpose_b", tb);
  absl::StatusOr<SpmdDecision> d = InferSpmd(BuiltinRules(), g, op);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : SpmdDecision{};
}

TEST(MatmulRuleTest, EinsumCasesOnOneMeshDim) {
  Mesh mesh = MakeMesh({4}, {"dp"});
  std::vector<Case> cases = {
      // mk[S(m)], kn[R] -> mn[S(m)]
      {{S(0)}, {R}, {S(0)}, {R}, {S(0)}},
      // mk[R], kn[S(n)] -> mn[S(n)]
      {{R}, {S(1)}, {R}, {S(1)}, {S(1)}},
      // mk[S(k)], kn[S(k)] -> mn[Partial(sum)]
      {{S(1)}, {S(0)}, {S(1)}, {S(0)}, {P}},
      // mk[R], kn[R] -> mn[R]
      {{R}, {R}, {R}, {R}, {R}},
      // mk[P], kn[R] -> mn[P]; mk[R], kn[P] -> mn[P]
      {{P}, {R}, {P}, {R}, {P}},
      {{R}, {P}, {R}, {P}, {P}},
  };
  for (const Case& c : cases) {
    SpmdDecision d = Decide(mesh, {32, 8}, {8, 16}, {32, 16}, c.x, c.w);
    ASSERT_EQ(d.outputs.size(), 1u);
    EXPECT_EQ(d.inputs[0].placements(), c.want_x) << FormatPlacements(c.x);
    EXPECT_EQ(d.inputs[1].placements(), c.want_w) << FormatPlacements(c.w);
    EXPECT_EQ(d.outputs[0].placements(), c.want_out) << FormatPlacements(c.x);
    EXPECT_EQ(d.cost_bytes, 0) << FormatPlacements(c.x);
  }
}

TEST(MatmulRuleTest, WeightGradientOfShardedBatchIsPartial) {
  // dW = x^T @ dy, x [32, 8] S(0), dy [32, 16] S(0): the batch axis is contracted.
  SpmdDecision d =
      Decide(MakeMesh({4}, {"dp"}), {32, 8}, {32, 16}, {8, 16}, {S(0)}, {S(0)}, true, false);
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{P});
  EXPECT_EQ(d.cost_bytes, 0);
  // dx = dy @ W^T, dy S(0), W R: rows stay split.
  d = Decide(MakeMesh({4}, {"dp"}), {32, 16}, {8, 16}, {32, 8}, {S(0)}, {R}, false, true);
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{S(0)});
  // dx = dy @ W^T with W column-parallel (S(1)) and dy S(1): contraction over out features.
  d = Decide(MakeMesh({2}, {"mp"}), {32, 16}, {8, 16}, {32, 8}, {S(1)}, {S(1)}, false, true);
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{P});
}

TEST(MatmulRuleTest, ConflictPicksTheCheaperReshardNotTheFirstListed) {
  Mesh mesh = MakeMesh({4}, {"dp"});
  // x S(0) and w S(1) on the same dim cannot run as is. Big x, small w: gather w.
  SpmdDecision d = Decide(mesh, {4096, 8}, {8, 16}, {4096, 16}, {S(0)}, {S(1)});
  EXPECT_EQ(d.inputs[0].placements(), std::vector<Placement>{S(0)});
  EXPECT_EQ(d.inputs[1].placements(), std::vector<Placement>{R});
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{S(0)});
  EXPECT_EQ(d.cost_bytes, 3 * 4 * 8 * 4);  // (K-1) * local bytes of w [8, 4]
  // Small x, big w: gather x instead.
  d = Decide(mesh, {8, 8}, {8, 4096}, {8, 4096}, {S(0)}, {S(1)});
  EXPECT_EQ(d.inputs[0].placements(), std::vector<Placement>{R});
  EXPECT_EQ(d.inputs[1].placements(), std::vector<Placement>{S(1)});
  EXPECT_EQ(d.outputs[0].placements(), std::vector<Placement>{S(1)});
  EXPECT_EQ(d.cost_bytes, 3 * 4 * 2 * 8);
}

TEST(MatmulRuleTest, TwoDimMeshDecidesPerDim) {
  Mesh mesh = MakeMesh({2, 2}, {"dp", "mp"});
  // Batch on dp, column-parallel weight on mp.
  SpmdDecision d = Decide(mesh, {8, 6}, {6, 4}, {8, 4}, {S(0), R}, {R, S(1)});
  EXPECT_EQ(d.outputs[0].placements(), (std::vector<Placement>{S(0), S(1)}));
  // Then row-parallel: hidden split on mp contracts.
  d = Decide(mesh, {8, 4}, {4, 6}, {8, 6}, {S(0), S(1)}, {R, S(0)});
  EXPECT_EQ(d.outputs[0].placements(), (std::vector<Placement>{S(0), P}));
}

// Brute force (STYLE.md): simulate every rank of a 1-D mesh in one process and check each
// strategy the rule lists reproduces the full product.
using Matrix = std::vector<double>;  // row-major

Matrix Slice(const Matrix& m, int64_t cols, const v1::TensorBox& box) {
  Matrix out;
  for (int64_t i = 0; i < box.lengths(0); ++i)
    for (int64_t j = 0; j < box.lengths(1); ++j)
      out.push_back(m[(box.offsets(0) + i) * cols + box.offsets(1) + j]);
  return out;
}

Matrix Local(const Matrix& m, std::vector<int64_t> shape, const DistAttr& attr, int rank) {
  if (attr.placement(0).is_partial()) {
    // Split the value into K terms that sum to it.
    Matrix out = m;
    double k = attr.mesh().size();
    for (double& v : out) v = v * (rank + 1) * 2 / (k * (k + 1));
    return out;
  }
  return Slice(m, shape[1], attr.Box(shape, rank));
}

Matrix MatMul(const Matrix& a, int64_t ar, int64_t ac, bool ta, const Matrix& b, int64_t br,
              int64_t bc, bool tb, int64_t* rows, int64_t* cols) {
  int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  Matrix out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l)
        out[i * n + j] += (ta ? a[l * ac + i] : a[i * ac + l]) * (tb ? b[j * bc + l] : b[l * bc + j]);
  *rows = m;
  *cols = n;
  return out;
}

TEST(MatmulRuleTest, BruteForceEveryStrategyMatchesTheFullProduct) {
  Mesh mesh = MakeMesh({3}, {"dp"});  // 3 ranks, shapes not divisible: uneven shards too
  struct Shapes {
    std::vector<int64_t> a, b, out;
    bool ta, tb;
  };
  for (const Shapes& s : {Shapes{{7, 5}, {5, 4}, {7, 4}, false, false},
                          Shapes{{7, 5}, {7, 4}, {5, 4}, true, false},
                          Shapes{{7, 4}, {5, 4}, {7, 5}, false, true}}) {
    Matrix a(s.a[0] * s.a[1]), b(s.b[0] * s.b[1]);
    for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(1.0 + i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = std::cos(2.0 + i);
    int64_t fr, fc;
    Matrix full = MatMul(a, s.a[0], s.a[1], s.ta, b, s.b[0], s.b[1], s.tb, &fr, &fc);
    Op op{"matmul", {0, 1}, {2}, "fc0"};
    op.attrs.Set("transpose_a", s.ta).Set("transpose_b", s.tb).Set("contract", int64_t{1});
    OpSignature sig{&op, {s.a, s.b}, {s.out}};
    absl::StatusOr<std::vector<DimStrategy>> strategies =
        BuiltinRules().Find("matmul")->strategies(sig);
    ASSERT_TRUE(strategies.ok());
    ASSERT_GE(strategies->size(), 6u);
    for (const DimStrategy& st : *strategies) {
      DistAttr pa = *DistAttr::Create(mesh, {st.inputs[0]}, 2);
      DistAttr pb = *DistAttr::Create(mesh, {st.inputs[1]}, 2);
      DistAttr po = *DistAttr::Create(mesh, {st.outputs[0]}, 2);
      Matrix sum(full.size(), 0.0);
      for (int r = 0; r < mesh.size(); ++r) {
        std::vector<int64_t> la = pa.LocalShape(s.a, r), lb = pb.LocalShape(s.b, r);
        int64_t lr, lc;
        Matrix local = MatMul(Local(a, s.a, pa, r), la[0], la[1], s.ta, Local(b, s.b, pb, r),
                              lb[0], lb[1], s.tb, &lr, &lc);
        ASSERT_EQ(po.LocalShape(s.out, r), (std::vector<int64_t>{lr, lc}));
        if (po.placement(0).is_partial()) {
          for (size_t i = 0; i < sum.size(); ++i) sum[i] += local[i];
        } else {
          Matrix want = Slice(full, fc, po.Box(s.out, r));
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(local[i], want[i], 1e-9) << FormatPlacements(st.inputs);
          }
        }
      }
      if (po.placement(0).is_partial()) {
        for (size_t i = 0; i < sum.size(); ++i) {
          ASSERT_NEAR(sum[i], full[i], 1e-9) << FormatPlacements(st.inputs);
        }
      }
    }
  }
}

}  // namespace
}  // namespace weft::planner
