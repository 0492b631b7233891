#include "coordinator/planner/build.h"

#include <gtest/gtest.h>

#include "coordinator/planner/test_util.h"

namespace weft::planner {
namespace {

using testing::SpecBuilder;

std::vector<std::string> OpTypes(const Graph& g) {
  std::vector<std::string> out;
  for (const Op& op : g.ops) out.push_back(op.type);
  return out;
}

TEST(BuildTest, MlpHasGlobalShapesAndParamNames) {
  v1::JobSpec spec = SpecBuilder({4}, {"dp"})
                         .Batch(16, {6}, {2})
                         .Linear("fc0", 6, 8)
                         .Act("act0", "gelu")
                         .Linear("fc1", 8, 2, /*bias=*/false)
                         .Spec();
  absl::StatusOr<Graph> g = BuildGraph(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(OpTypes(*g), (std::vector<std::string>{"load_input", "load_label", "matmul",
                                                    "bias_add", "gelu", "matmul", "mse"}));
  EXPECT_EQ(g->tensors[g->input].shape, (std::vector<int64_t>{16, 6}));
  EXPECT_EQ(g->tensors[g->label].shape, (std::vector<int64_t>{16, 2}));
  std::vector<std::string> params;
  for (int p : g->params) params.push_back(g->tensors[p].name);
  EXPECT_EQ(params, (std::vector<std::string>{"fc0.weight", "fc0.bias", "fc1.weight"}));
  EXPECT_EQ(g->tensors[g->params[0]].shape, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(g->tensors[g->params[1]].shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(g->tensors[g->loss].shape, (std::vector<int64_t>{1}));
  EXPECT_FLOAT_EQ(g->ops.back().scale, 1.0f / 32);  // mean over 16 x 2 elements
  for (const Tensor& t : g->tensors) EXPECT_FALSE(t.dist.has_value()) << t.name;
}

TEST(BuildTest, MultiDimSamplesContractTheLastAxis) {
  v1::JobSpec spec = SpecBuilder({1}, {"dp"}).Batch(4, {3, 5}, {3, 2}).Linear("fc0", 5, 2).Spec();
  absl::StatusOr<Graph> g = BuildGraph(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tensors[g->ops[2].outputs[0]].shape, (std::vector<int64_t>{4, 3, 2}));
}

TEST(BuildTest, ErrorsNameTheLayer) {
  absl::Status s =
      BuildGraph(SpecBuilder({1}, {"dp"}).Batch(4, {6}, {2}).Linear("fc0", 5, 2).Spec()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("fc0"), std::string::npos) << s;
  s = BuildGraph(SpecBuilder({1}, {"dp"}).Batch(4, {6}, {2}).Act("c0", "conv").Spec()).status();
  EXPECT_NE(s.message().find("conv"), std::string::npos) << s;
  s = BuildGraph(SpecBuilder({1}, {"dp"}).Batch(4, {6}, {3}).Linear("fc0", 6, 2).Spec()).status();
  EXPECT_NE(s.message().find("label"), std::string::npos) << s;
}

}  // namespace
}  // namespace weft::planner
