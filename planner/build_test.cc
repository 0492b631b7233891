#include "planner/build.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"

#include "common/jobspec/validate.h"
#include "planner/test_util.h"

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
  for (int p : g->ParamIds()) params.push_back(g->tensors[p].name);
  EXPECT_EQ(params, (std::vector<std::string>{"fc0.weight", "fc0.bias", "fc1.weight"}));
  EXPECT_EQ(g->tensors[g->params[0].tensor].shape, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(g->tensors[g->params[1].tensor].shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(g->tensors[g->loss].shape, (std::vector<int64_t>{1}));
  EXPECT_DOUBLE_EQ(g->ops.back().attrs.Float("scale"), 1.0 / 32);  // mean over 16 x 2 elements
  // Build places what the spec places: the parameters and the batch; propagate does the rest.
  for (const Tensor& t : g->tensors) {
    const bool given = t.role == v1::Buffer::PARAM || t.role == v1::Buffer::DATA;
    EXPECT_EQ(t.dist.has_value(), given) << t.name;
  }
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

namespace weft::planner {
namespace {

using testing::SpecBuilder;

// fc0 -> act0 -> fc1, then res1 = act0 + fc1 and fc2 reading res1.
v1::JobSpec Residual() {
  v1::JobSpec spec = SpecBuilder({1}, {"dp"})
                         .Batch(4, {8}, {8})
                         .Linear("fc0", 8, 8)
                         .Act("act0", "relu")
                         .Linear("fc1", 8, 8)
                         .Act("res1", "add")
                         .Linear("fc2", 8, 8)
                         .Spec();
  v1::Layer* res = spec.mutable_model()->mutable_layers(3);
  res->add_inputs("act0");
  res->add_inputs("fc1");
  return spec;
}

// A transformer spec that arrives over gRPC (no YAML reader) is checked by ValidateJobSpec too:
// a config the model cannot be built from is an error naming the key, never a division by zero.
TEST(BuildTest, ValidateJobSpecChecksATransformerConfigFromTheWire) {
  for (const auto& [mutate, key] :
       {std::pair<std::function<void(v1::TransformerConfig*)>, std::string>{
            [](v1::TransformerConfig* c) { c->set_n_head(0); }, "model.config.n_head"},
        {[](v1::TransformerConfig* c) { c->set_n_embd(7); }, "n_embd 7"}}) {
    v1::JobSpec spec = testing::Gpt2Spec();
    mutate(spec.mutable_model()->mutable_config());
    const absl::Status status = ValidateJobSpec(spec);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_NE(status.message().find(key), absl::string_view::npos) << status;
  }
}

TEST(BuildTest, InputsNameEarlierLayersAndAddSumsThem) {
  absl::StatusOr<Graph> g = BuildGraph(Residual());
  ASSERT_TRUE(g.ok()) << g.status();
  const Op* add = nullptr;
  for (const Op& op : g->ops) {
    if (op.type == "add") add = &op;
  }
  ASSERT_NE(add, nullptr);
  ASSERT_EQ(add->inputs.size(), 2u);
  EXPECT_EQ(g->tensors[add->inputs[0]].name, "act0.out");
  EXPECT_EQ(g->tensors[add->inputs[1]].name, "fc1.out");
  EXPECT_EQ(g->tensors[add->outputs[0]].name, "res1.out");
  // act0's output feeds both fc1 and res1: a tensor with two readers.
  int readers = 0;
  for (const Op& op : g->ops) {
    for (int in : op.inputs) readers += g->tensors[in].name == "act0.out";
  }
  EXPECT_EQ(readers, 2);
}

TEST(BuildTest, InputAndAddErrorsNameTheField) {
  struct Case {
    std::function<void(v1::JobSpec*)> edit;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {[](v1::JobSpec* s) { s->mutable_model()->mutable_layers(3)->set_inputs(1, "fc9"); },
            "model.layers[3] (res1).inputs[1]: no earlier layer named \"fc9\""},
           {[](v1::JobSpec* s) { s->mutable_model()->mutable_layers(3)->set_inputs(1, "fc2"); },
            "model.layers[3] (res1).inputs[1]: no earlier layer named \"fc2\""},
           {[](v1::JobSpec* s) { s->mutable_model()->mutable_layers(3)->clear_inputs(); },
            "model.layers[3] (res1).inputs: add sums two or more layers' outputs, got 1"},
           {[](v1::JobSpec* s) {
              v1::Layer* fc2 = s->mutable_model()->mutable_layers(4);
              fc2->add_inputs("act0");
              fc2->add_inputs("fc1");
            },
            "model.layers[4] (fc2).inputs: a linear layer reads one input, got 2"},
           {[](v1::JobSpec* s) {
              s->mutable_model()->mutable_layers(2)->set_out_features(4);
              s->mutable_model()->mutable_layers(4)->set_in_features(4);
            },
            "model.layers[3] (res1).inputs: act0 [4,8] and fc1 [4,4] differ in shape"},
           {[](v1::JobSpec* s) { s->mutable_model()->mutable_layers(3)->set_in_features(8); },
            "model.layers[3] (res1).in_features: only linear layers take features"},
           {[](v1::JobSpec* s) {
              v1::Layer* fc2 = s->mutable_model()->mutable_layers(4);
              fc2->add_inputs("fc1");  // res1 is read by nobody
            },
            "model.layers[3] (res1): its output is read by no later layer"},
       }) {
    v1::JobSpec spec = Residual();
    c.edit(&spec);
    absl::Status s = BuildGraph(spec).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s << "\nwant: " << c.message;
  }
  // `input` names the batch, whose width is the first linear's input: a residual over the data.
  v1::JobSpec spec = Residual();
  v1::Layer* res = spec.mutable_model()->mutable_layers(3);
  res->set_inputs(0, "input");
  res->set_inputs(1, "fc1");
  spec.mutable_model()->mutable_layers(4)->add_inputs("res1");
  spec.mutable_model()->mutable_layers(2)->add_inputs("act0");
  absl::StatusOr<Graph> g = BuildGraph(spec);
  ASSERT_TRUE(g.ok()) << g.status();
}

TEST(BuildTest, IntegerDataIsCastToFloat32) {
  v1::JobSpec spec = SpecBuilder({1}, {"dp"}).Batch(4, {8}, {2}).Linear("fc0", 8, 2).Spec();
  spec.mutable_data()->set_input_dtype(v1::I32);
  absl::StatusOr<Graph> g = BuildGraph(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tensors[g->ops[0].outputs[0]].dtype, v1::I32);  // loaded as the file holds it
  const Op& cast = g->ops[1];
  ASSERT_EQ(cast.type, "cast");
  EXPECT_EQ(g->tensors[cast.outputs[0]].name, "input.f32");
  EXPECT_EQ(g->tensors[cast.outputs[0]].dtype, v1::F32);
  EXPECT_EQ(g->tensors[g->ops[3].inputs[0]].name, "input.f32");  // what fc0 reads
}

// Sizes a spec can claim past validation, fed straight to the planner: each is refused with an
// INVALID_ARGUMENT naming the fields it comes from, never planned at a wrapped size. The first is
// issue 30's: 2^61 samples of 8 planned 21 KiB and crashed every worker that read the batch.
TEST(BuildTest, SizesThatOverflowInt64AreRefusedNamingTheirFields) {
  constexpr int64_t k2to40 = int64_t{1} << 40;
  v1::JobSpec huge_batch =
      SpecBuilder({2}, {"dp"}).Batch(int64_t{1} << 61, {8}, {2}).Linear("fc0", 8, 2).Spec();
  huge_batch.mutable_data()->set_num_samples(int64_t{1} << 61);
  v1::JobSpec wide = SpecBuilder({1}, {"dp"})
                         .Batch(4, {8}, {2})
                         .Linear("fc0", 8, k2to40)
                         .Linear("fc1", k2to40, k2to40)
                         .Linear("fc2", k2to40, 2)
                         .Spec();
  v1::JobSpec bytes = SpecBuilder({1}, {"dp"})
                          .Batch(4, {1}, {2})
                          .Linear("fc0", 1, int64_t{1} << 62)
                          .Linear("fc1", int64_t{1} << 62, 2)
                          .Spec();
  v1::JobSpec many_samples = SpecBuilder({1}, {"dp"}).Batch(4, {8}, {2}).Linear("fc0", 8, 2).Spec();
  many_samples.mutable_data()->set_num_samples(int64_t{1} << 61);
  v1::JobSpec vocabulary = testing::Gpt2Spec();
  vocabulary.mutable_model()->mutable_config()->set_vocab_size(k2to40);
  vocabulary.mutable_model()->mutable_config()->set_n_embd(k2to40);
  vocabulary.mutable_model()->mutable_config()->set_n_inner(8);
  vocabulary.mutable_data()->set_vocab_size(k2to40);
  for (const auto& [spec, message] : std::vector<std::pair<v1::JobSpec, std::string>>{
           {huge_batch, "planning job test: data.batch_size × data.sample_shape: tensor input "
                        "[2305843009213693952,8] overflows int64"},
           {wide, "planning job test: model.layers[1] (fc1): tensor fc1.weight "
                  "[1099511627776,1099511627776] overflows int64"},
           {bytes, "planning job test: model.layers[0] (fc0): tensor fc0.weight "
                   "[1,4611686018427387904] elements × f32 bytes overflows int64 "
                   "(4611686018427387904 × 4)"},
           {many_samples, "planning job test: data.num_samples × data.sample_shape "
                          "[2305843009213693952,8] overflows int64"},
           {vocabulary, "planning job tiny: model.config (embed): tensor "},
       }) {
    absl::StatusOr<std::shared_ptr<const Plan>> plan = testing::PlanWithDefaults(spec);
    ASSERT_FALSE(plan.ok()) << message;
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument) << plan.status();
    EXPECT_EQ(plan.status().message().substr(0, message.size()), message) << plan.status();
    EXPECT_TRUE(absl::StrContains(plan.status().message(), "overflows int64")) << plan.status();
  }
}

}  // namespace
}  // namespace weft::planner
