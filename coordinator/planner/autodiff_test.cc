#include "coordinator/planner/autodiff.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace weft::planner
