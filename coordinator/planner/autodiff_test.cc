#include "coordinator/planner/autodiff.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "coordinator/planner/build.h"
#include "coordinator/planner/propagate.h"
#include "coordinator/planner/test_util.h"

namespace weft::planner {
namespace {

using testing::P;
using testing::R;
using testing::S;
using testing::SpecBuilder;

absl::StatusOr<Graph> Differentiated(const v1::JobSpec& spec) {
  absl::StatusOr<Graph> g = BuildGraph(spec);
  if (!g.ok()) return g.status();
  g = Propagate(BuiltinRules(), *std::move(g));
  if (!g.ok()) return g.status();
  return Autodiff(BuiltinRules(), *std::move(g));
}

v1::JobSpec Mlp(std::vector<int64_t> mesh, std::vector<std::string> names) {
  return SpecBuilder(mesh, names)
      .Batch(16, {6}, {2})
      .Linear("fc0", 6, 8)
      .Act("act0", "gelu")
      .Linear("fc1", 8, 2)
      .Spec();
}

TEST(AutodiffTest, GradientsHaveTheirParametersShapes) {
  absl::StatusOr<Graph> g = Differentiated(Mlp({1}, {"dp"}));
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->grad_of.size(), 4u);
  for (int p : g->ParamIds()) {
    const Tensor& grad = g->tensors[g->grad_of.at(p)];
    EXPECT_EQ(grad.name, g->tensors[p].name + "@grad");
    EXPECT_EQ(grad.shape, g->tensors[p].shape);
    EXPECT_EQ(grad.role, v1::Buffer::GRAD);
  }
  std::vector<std::string> backward;
  for (const Op& op : g->ops) {
    if (op.phase == Phase::kBackward) backward.push_back(op.type);
  }
  // No gradient for the input: the first layer has no dx matmul.
  EXPECT_EQ(backward, (std::vector<std::string>{"mse_grad", "bias_grad", "matmul", "matmul",
                                                 "gelu_grad", "bias_grad", "matmul"}));
  for (const Op& op : g->ops) {
    if (op.type == "mse_grad") {
      EXPECT_DOUBLE_EQ(op.attrs.Float("scale"), 2.0 / 32);
    }
  }
}

TEST(AutodiffTest, ShardedBatchMakesWeightGradientsPartial) {
  absl::StatusOr<Graph> g = Differentiated(Mlp({4}, {"dp"}));
  ASSERT_TRUE(g.ok()) << g.status();
  for (int p : g->ParamIds()) {
    EXPECT_EQ(g->tensors[g->grad_of.at(p)].dist->placements(), std::vector<Placement>{P})
        << g->tensors[p].name;
  }
  // Activation gradients stay batch-sharded; autodiff inserts no reshard.
  for (const Op& op : g->ops) {
    if (op.phase != Phase::kBackward) continue;
    EXPECT_NE(op.type, "reshard");
    if (op.type == "mse_grad" || op.type == "gelu_grad") {
      EXPECT_EQ(g->tensors[op.outputs[0]].dist->placements(), std::vector<Placement>{S(0)});
    }
  }
}

TEST(AutodiffTest, ColumnParallelWeightGradientIsSharded) {
  v1::JobSpec spec = SpecBuilder({2}, {"mp"})
                         .Batch(4, {6}, {6})
                         .Linear("fc0", 6, 8)
                         .Place("weight", {S(1)})
                         .Place("bias", {S(0)})
                         .Act("act0", "relu")
                         .Linear("fc1", 8, 6)
                         .Place("weight", {S(0)})
                         .Spec();
  absl::StatusOr<Graph> g = Differentiated(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  std::map<std::string, std::vector<Placement>> want = {{"fc0.weight", {S(1)}},
                                                        {"fc0.bias", {S(0)}},
                                                        {"fc1.weight", {S(0)}},
                                                        {"fc1.bias", {R}}};
  for (int p : g->ParamIds()) {
    EXPECT_EQ(g->tensors[g->grad_of.at(p)].dist->placements(), want[g->tensors[p].name])
        << g->tensors[p].name;
  }
}


// fc0 -> gelu -> fc1 under model.recompute `mode`, fc0 excluded when `keep_fc0`.
v1::JobSpec RecomputedMlp(const std::string& mode, bool keep_fc0 = false) {
  v1::JobSpec spec = Mlp({1}, {"dp"});
  spec.mutable_model()->set_recompute(mode);
  if (keep_fc0) spec.mutable_model()->mutable_layers(0)->set_recompute(false);
  return spec;
}

// The names of the tensors recomputed in the backward pass; fails the test when a backward op
// reads the forward tensor a copy recomputes.
std::set<std::string> Recomputed(const Graph& g) {
  std::set<std::string> names;
  std::set<int> freed;
  for (const Op& op : g.ops) {
    for (int out : op.outputs) {
      const Tensor& t = g.tensors[out];
      if (t.recomputes < 0) continue;
      EXPECT_EQ(op.phase, Phase::kBackward) << t.name;
      // A copy has its forward tensor's name, shape and placement.
      const Tensor& forward = g.tensors[t.recomputes];
      EXPECT_EQ(t.name, forward.name);
      EXPECT_EQ(t.shape, forward.shape);
      EXPECT_EQ(*t.dist, *forward.dist);
      names.insert(t.name);
      freed.insert(t.recomputes);
    }
  }
  for (const Op& op : g.ops) {
    if (op.phase != Phase::kBackward) continue;
    for (int in : op.inputs) {
      EXPECT_EQ(freed.count(in), 0u) << OpLabel(op) << " reads the freed " << g.tensors[in].name;
    }
  }
  return names;
}

// The three layers are one region: what the loss reads (fc1's output) and the batch are kept.
// Full recompute remakes fc0's matmul, its bias add and the gelu for the backward pass; selective
// keeps the matmul's output; with fc0 outside the region, its output is the region's input: kept.
TEST(AutodiffTest, RecomputeRemakesWhatARegionMadeInsideForItsBackward) {
  struct Want {
    std::string mode;
    bool keep_fc0;
    std::set<std::string> recomputed;
  };
  for (const Want& want : std::vector<Want>{
           {"", false, {}},
           {"full", false, {"fc0.xw", "fc0.out", "act0.out"}},
           {"selective", false, {"fc0.out", "act0.out"}},
           {"full", true, {"act0.out"}}}) {
    SCOPED_TRACE(want.mode + (want.keep_fc0 ? " without fc0" : ""));
    absl::StatusOr<Graph> g = Differentiated(RecomputedMlp(want.mode, want.keep_fc0));
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(Recomputed(*g), want.recomputed);
    // The gradients are named as without recompute.
    for (int p : g->ParamIds()) {
      EXPECT_EQ(g->tensors[g->grad_of.at(p)].name, g->tensors[p].name + "@grad");
    }
  }
}

// A value no gradient reads is never recomputed. On mp=2 with fc0 column- and fc1 row-parallel,
// fc1's Partial output is all-reduced inside the region; the loss reads the result (kept) and no
// gradient reads the Partial value, so no collective runs again.
TEST(AutodiffTest, RecomputeRemakesOnlyWhatAGradientReads) {
  v1::JobSpec spec = SpecBuilder({2}, {"mp"})
                         .Batch(16, {6}, {2})
                         .Linear("fc0", 6, 8, /*bias=*/false)
                         .Place("weight", {S(1)})
                         .Act("act0", "relu")
                         .Linear("fc1", 8, 2, /*bias=*/false)
                         .Place("weight", {S(0)})
                         .Spec();
  spec.mutable_model()->set_recompute("full");
  absl::StatusOr<Graph> g = Differentiated(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  // relu_grad reads fc0.out, the matmul VJPs read the batch (kept) and act0.out; the all-reduce
  // of fc1's Partial output is not remade.
  EXPECT_EQ(Recomputed(*g), (std::set<std::string>{"fc0.out", "act0.out"}));
  int reshards = 0;
  for (const Op& op : g->ops) {
    if (op.phase == Phase::kBackward && op.type == "reshard" &&
        g->tensors[op.outputs[0]].recomputes >= 0) {
      ++reshards;
    }
  }
  EXPECT_EQ(reshards, 0);
}

}  // namespace
}  // namespace weft::planner
