#include "planner/autodiff.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/jobspec/parallelize.h"
#include "planner/build.h"
#include "planner/propagate.h"
#include "planner/test_util.h"

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

// gpt2's blocks under full and selective recompute: what a block makes inside and a gradient reads
// is recomputed, its output (the residual stream the next block reads) is kept, and embed and head
// are never recomputed. Selective keeps the matmul and attention outputs. The gradients are named
// as without recompute.
TEST(AutodiffTest, RecomputeRemakesWhatABlockMadeInsideForItsBackward) {
  std::map<std::string, std::set<std::string>> got;
  for (const std::string mode : {"", "full", "selective"}) {
    v1::JobSpec spec = testing::Gpt2Spec();
    spec.mutable_model()->set_recompute(mode);
    absl::StatusOr<Graph> g = Differentiated(spec);
    ASSERT_TRUE(g.ok()) << g.status();
    got[mode] = Recomputed(*g);
    for (int p : g->ParamIds()) {
      EXPECT_EQ(g->tensors[g->grad_of.at(p)].name, g->tensors[p].name + "@grad");
    }
  }
  EXPECT_TRUE(got[""].empty());
  for (const std::string mode : {"full", "selective"}) {
    SCOPED_TRACE(mode);
    for (const std::string& name : got[mode]) {
      EXPECT_EQ(name.rfind("h.", 0), 0u) << name << " is not in a block";
      EXPECT_EQ(name.find(".mlp.residual"), std::string::npos) << "a block's output: kept";
    }
    for (const char* h : {"h.0", "h.1"}) {
      // The norms' outputs feed matmuls whose weight gradients read them; the MLP's activation
      // feeds c_proj's.
      for (const char* part : {".ln_1.out", ".ln_2.out", ".mlp.act"}) {
        EXPECT_EQ(got[mode].count(std::string(h) + part), 1u) << h << part;
      }
    }
  }
  // Both remake q, k and v (a bias add and a split after the matmul); selective keeps the
  // attention's output, which c_proj's weight gradient reads, full remakes it.
  EXPECT_EQ(got["full"].count("h.0.attn.q"), 1u);
  EXPECT_EQ(got["selective"].count("h.0.attn.q"), 1u);
  EXPECT_EQ(got["full"].count("h.0.attn.out"), 1u);
  EXPECT_EQ(got["selective"].count("h.0.attn.out"), 0u);
  EXPECT_GT(got["full"].size(), got["selective"].size());
}

// A layers model's layers are one op or two (linear: matmul, then bias), and the next layer reads
// each one's output: with per-layer recompute nothing a gradient reads is made inside a layer.
TEST(AutodiffTest, ALayersModelHasNothingToRecompute) {
  v1::JobSpec spec = Mlp({1}, {"dp"});
  spec.mutable_model()->set_recompute("full");
  absl::StatusOr<Graph> g = Differentiated(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(Recomputed(*g).empty());
}

// A value no gradient reads is never recomputed, a collective included. gpt2 on mp=2 with
// Megatron's plan, full recompute: each block all-reduces its attention's and its MLP's
// row-parallel output. ln_2's gradient reads its input, the residual sum of the attention's
// reduced output, so that all-reduce runs again; the MLP's reduced output only feeds dropout and
// the residual add, whose gradients read nothing, so it does not.
TEST(AutodiffTest, RecomputeRemakesOnlyWhatAGradientReads) {
  v1::JobSpec spec = testing::Gpt2Spec();
  spec.mutable_mesh()->set_shape(0, 2);
  spec.mutable_mesh()->set_dim_names(0, "mp");
  v1::ParallelizeConfig& mp = (*spec.mutable_parallelize())["mp"];
  mp.set_dim("mp");
  mp.set_preset("megatron");
  ASSERT_TRUE(ApplyParallelize(&spec).ok());
  spec.mutable_model()->set_recompute("full");
  absl::StatusOr<Graph> g = Differentiated(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  std::set<std::string> collectives;  // the tensors recomputed reshards make
  for (const Op& op : g->ops) {
    if (op.type == "reshard" && g->tensors[op.outputs[0]].recomputes >= 0) {
      collectives.insert(g->tensors[op.outputs[0]].name);
    }
  }
  for (const char* h : {"h.0", "h.1"}) {
    EXPECT_EQ(collectives.count(std::string(h) + ".attn.c_proj.xw"), 1u) << h;
    for (const std::string& name : collectives) {
      EXPECT_EQ(name.find(".mlp."), std::string::npos) << name;
    }
  }
}

}  // namespace
}  // namespace weft::planner
