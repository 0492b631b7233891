#include "planner/optimizer.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"

#include "planner/autodiff.h"
#include "planner/build.h"
#include "planner/propagate.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::SpecBuilder;

absl::StatusOr<Graph> WithOptimizer(const v1::JobSpec& spec) {
  absl::StatusOr<Graph> g = BuildGraph(spec);
  if (!g.ok()) return g.status();
  g = Propagate(BuiltinRules(), *std::move(g));
  if (!g.ok()) return g.status();
  g = Autodiff(BuiltinRules(), *std::move(g));
  if (!g.ok()) return g.status();
  return AppendOptimizer(BuiltinRules(), *std::move(g));
}

TEST(OptimizerTest, GradientReshardsThenUpdates) {
  v1::JobSpec spec = SpecBuilder({4}, {"dp"}).Batch(8, {6}, {2}).Linear("fc0", 6, 2).Spec();
  absl::StatusOr<Graph> g = WithOptimizer(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<std::string> tail;
  for (const Op& op : g->ops) {
    if (op.phase == Phase::kOptimizer) tail.push_back(op.type);
  }
  EXPECT_EQ(tail, (std::vector<std::string>{"reshard", "reshard", "sgd", "sgd"}));
  for (const Op& op : g->ops) {
    if (op.type != "sgd") continue;
    const Tensor& param = g->tensors[op.inputs[0]];
    const Tensor& grad = g->tensors[op.inputs[1]];
    EXPECT_EQ(param.role, v1::Buffer::PARAM);
    EXPECT_EQ(grad.name, param.name + "@grad");
    EXPECT_EQ(*grad.dist, *param.dist);
    EXPECT_TRUE(grad.dist->IsReplicated());
  }
}

TEST(OptimizerTest, AdamWStatesArePlacedLikeTheParameter) {
  v1::JobSpec spec = SpecBuilder({2}, {"mp"})
                         .Batch(8, {6}, {4})
                         .Linear("fc0", 6, 4)
                         .Place("weight", {Placement::Shard(1)})
                         .AdamW()
                         .Spec();
  absl::StatusOr<Graph> g = WithOptimizer(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  int updates = 0;
  for (const Op& op : g->ops) {
    if (op.type != "adamw") continue;
    ++updates;
    ASSERT_EQ(op.inputs.size(), 4u);
    const Tensor& param = g->tensors[op.inputs[0]];
    EXPECT_EQ(g->tensors[op.inputs[2]].name, param.name + ".m");
    EXPECT_EQ(g->tensors[op.inputs[3]].name, param.name + ".v");
    for (int i : op.inputs) EXPECT_EQ(*g->tensors[i].dist, *param.dist) << g->tensors[i].name;
    EXPECT_EQ(g->tensors[op.inputs[2]].role, v1::Buffer::OPTIMIZER_STATE);
  }
  EXPECT_EQ(updates, 2);
}

TEST(OptimizerTest, UnknownTypeIsAnError) {
  v1::JobSpec spec = SpecBuilder({1}, {"dp"}).Batch(8, {6}, {2}).Linear("fc0", 6, 2).Spec();
  spec.mutable_optimizer()->set_type("lion");
  absl::Status s = WithOptimizer(spec).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("lion"), std::string::npos);
}

TEST(OptimizerTest, PartialParameterIsUpdatedFromTheWholeGradient) {
  v1::JobSpec spec = SpecBuilder({2, 2}, {"dp", "mp"})
                         .Batch(8, {6}, {2})
                         .Linear("fc0", 6, 2, /*bias=*/false)
                         .Place("weight", {testing::S(1), testing::P})
                         .AdamW()
                         .Spec();
  absl::StatusOr<Graph> g = WithOptimizer(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  int updates = 0;
  for (const Op& op : g->ops) {
    if (op.type != "adamw") continue;
    ++updates;
    EXPECT_EQ(g->tensors[op.inputs[0]].dist->placements(),
              (std::vector<Placement>{testing::S(1), testing::P}));
    for (int i = 1; i < 4; ++i) {
      EXPECT_EQ(g->tensors[op.inputs[i]].dist->placements(),
                (std::vector<Placement>{testing::S(1), testing::R}))
          << g->tensors[op.inputs[i]].name;
    }
  }
  EXPECT_EQ(updates, 1);
}


// ZeRO-3 on dp=2: each parameter is its shard (half of its first axis); every forward layer reads
// it through a gather in its own layer, a backward VJP that reads it through a gather of the
// backward pass, except in the last layer, whose backward follows at once and keeps its gathered
// copy; the gradient is reduce-scattered to the shard and the update runs on the parameter
// itself, with no gather back.
TEST(OptimizerTest, ZeroLevelThreeGathersParametersPerLayerAndPass) {
  v1::JobSpec spec = SpecBuilder({2}, {"dp"})
                         .Batch(8, {6}, {2})
                         .Linear("fc0", 6, 8)
                         .Act("act0", "relu")
                         .Linear("fc1", 8, 4)
                         .Act("act1", "relu")
                         .Linear("fc2", 4, 2)
                         .AdamW()
                         .Spec();
  spec.mutable_sharding()->set_dim("dp");
  spec.mutable_sharding()->set_level(3);
  absl::StatusOr<Graph> g = WithOptimizer(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  const DistAttr whole = DistAttr::Replicated(testing::MakeMesh({2}, {"dp"}));
  const DistAttr shard = whole.With(0, testing::S(0));
  ASSERT_EQ(g->gathered.size(), 6u);
  for (int p : g->ParamIds()) {
    const Tensor& t = g->tensors[p];
    EXPECT_EQ(*t.dist, shard) << t.name;
    EXPECT_EQ(g->gathered.at(p), whole) << t.name;
  }
  std::map<std::string, int> gathers;  // "<phase> <param>" -> count
  for (const Op& op : g->ops) {
    if (op.type == "reshard" && g->IsParam(op.inputs[0])) {
      const Tensor& out = g->tensors[op.outputs[0]];
      EXPECT_EQ(*out.dist, whole);
      EXPECT_EQ(out.role, v1::Buffer::ACTIVATION);
      EXPECT_EQ(op.layer, g->tensors[op.inputs[0]].layer);
      ++gathers[absl::StrCat(op.phase == Phase::kForward ? "forward " : "backward ",
                             g->tensors[op.inputs[0]].name)];
    }
    if (op.type == "adamw") {
      EXPECT_TRUE(g->IsParam(op.inputs[0])) << "the update runs on the parameter itself";
      EXPECT_EQ(*g->tensors[op.inputs[1]].dist, *g->tensors[op.inputs[0]].dist);
    }
  }
  // fc0's input gradient is not needed, so its weight is not gathered for the backward pass;
  // biases are read by no VJP; fc2 keeps its forward copy.
  EXPECT_EQ(gathers, (std::map<std::string, int>{{"forward fc0.weight", 1},
                                                 {"forward fc0.bias", 1},
                                                 {"forward fc1.weight", 1},
                                                 {"forward fc1.bias", 1},
                                                 {"forward fc2.weight", 1},
                                                 {"forward fc2.bias", 1},
                                                 {"backward fc1.weight", 1}}));
  EXPECT_TRUE(g->writes_into.empty());
}

// optimizer.weight_decay_params matrices: parameters of two or more dims in their files' shapes
// decay; vectors do not, gpt2's c_attn bias among them ([3, H, D] here, [3C] in its files).
TEST(OptimizerTest, WeightDecayOnMatricesOnly) {
  v1::JobSpec spec = testing::Gpt2Spec();
  spec.mutable_optimizer()->set_weight_decay(0.1);
  for (const std::string which : {"all", "matrices"}) {
    SCOPED_TRACE(which);
    spec.mutable_optimizer()->set_weight_decay_params(which);
    absl::StatusOr<Graph> g = WithOptimizer(spec);
    ASSERT_TRUE(g.ok()) << g.status();
    std::map<std::string, double> decay;
    for (const Op& op : g->ops) {
      if (op.type == "adamw") decay[g->tensors[op.inputs[0]].name] = op.attrs.Float("weight_decay");
    }
    ASSERT_FALSE(decay.empty());
    const bool matrices = which == "matrices";
    for (const auto& [param, wd] : decay) {
      const bool vector = param.find("bias") != std::string::npos ||
                          param.find("ln_") != std::string::npos;
      EXPECT_DOUBLE_EQ(wd, matrices && vector ? 0.0 : 0.1) << param;
    }
    EXPECT_DOUBLE_EQ(decay.at("h.0.attn.c_attn.bias"), matrices ? 0.0 : 0.1);
    EXPECT_DOUBLE_EQ(decay.at("h.0.attn.c_attn.weight"), 0.1);
    EXPECT_DOUBLE_EQ(decay.at("wte.weight"), 0.1);
  }
}

}  // namespace
}  // namespace weft::planner
