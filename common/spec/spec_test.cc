#include "common/spec/spec.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/checkpoint/checkpoint.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

// `text` with 1 to 4 random edits: a byte replaced by one of `punct`, up to 8 bytes erased, or
// one of `punct` inserted. The fuzz tests feed these to the parser.
std::string Garble(const std::string& text, const std::string& punct, std::mt19937* rng) {
  std::string s = text;
  const int edits = 1 + (*rng)() % 4;
  for (int e = 0; e < edits && !s.empty(); ++e) {
    const size_t pos = (*rng)() % s.size();
    switch ((*rng)() % 3) {
      case 0: s[pos] = punct[(*rng)() % punct.size()]; break;
      case 1: s.erase(pos, 1 + (*rng)() % 8); break;
      case 2: s.insert(pos, 1, punct[(*rng)() % punct.size()]); break;
    }
  }
  return s;
}

// The issue's schema example, on a 4-rank dp mesh with small layers.
constexpr char kFullSpec[] = R"(
name: tiny
mesh: {shape: [4], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 16, bias: false}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 16, out_features: 4, bias: true,
       placements: {weight: [Replicate()], bias: [Replicate()]}}
  loss: mse
data:
  source: npy
  input: inputs.npy
  label: labels.npy
  batch_size: 8
  placements: [Shard(0)]
optimizer: {type: adamw, lr: 0.001, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.01}
train: {steps: 10, seed: 1234}
init_from: init.safetensors
device: cpu
)";

constexpr char kSyntheticSpec[] = R"(
name: synth
mesh: {shape: [2], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 16}
    - {name: act0, type: gelu}
    - {name: fc1, type: linear, in_features: 16, out_features: 4}
data:
  source: synthetic
  sample_shape: [8]
  label_shape: [4]
  num_samples: 32
  batch_size: 4
optimizer: {type: sgd, lr: 0.1}
train: {steps: 3}
)";

class SpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/spec_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  void WriteNpy(const std::string& name, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> data(n, 0.5f);
    ASSERT_TRUE(NpyFile::Write(Path(name), shape, data.data()).ok());
  }

  void WriteText(const std::string& name, const std::string& text) {
    std::ofstream(Path(name), std::ios::binary) << text;
  }

  // Tensors named by the model in kFullSpec, with shapes that can be overridden.
  void WriteInit(const std::vector<int64_t>& fc0_weight = {8, 16}) {
    std::vector<float> zeros(8 * 16 * 4, 0.0f);
    ASSERT_TRUE(SafetensorsFile::Write(Path("init.safetensors"),
                                       {{"fc0.weight", fc0_weight, zeros.data()},
                                        {"fc1.weight", {16, 4}, zeros.data()},
                                        {"fc1.bias", {4}, zeros.data()}})
                    .ok());
  }

  // kFullSpec with its files in place, edited by `replace` pairs.
  absl::StatusOr<v1::JobSpec> Full(
      const std::vector<std::pair<std::string, std::string>>& replace = {}) {
    WriteNpy("inputs.npy", {32, 8});
    WriteNpy("labels.npy", {32, 4});
    WriteInit();
    return ParseJobSpecYaml(absl::StrReplaceAll(kFullSpec, replace), dir_);
  }

  std::string dir_;
};

// A spec that parses but fails validation with INVALID_ARGUMENT naming `field`.
#define EXPECT_INVALID(status, field)                                          \
  do {                                                                         \
    absl::Status s_ = (status);                                                \
    EXPECT_EQ(s_.code(), absl::StatusCode::kInvalidArgument) << s_;            \
    EXPECT_THAT(std::string(s_.message()), HasSubstr(field)) << s_;            \
  } while (0)

TEST_F(SpecTest, ParsesEveryFieldOfTheFullExample) {
  absl::StatusOr<v1::JobSpec> spec = Full();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "tiny");
  ASSERT_EQ(spec->mesh().shape_size(), 1);
  EXPECT_EQ(spec->mesh().shape(0), 4);
  EXPECT_EQ(spec->mesh().dim_names(0), "dp");
  ASSERT_EQ(spec->model().layers_size(), 3);
  const v1::Layer& fc0 = spec->model().layers(0);
  EXPECT_EQ(fc0.name(), "fc0");
  EXPECT_EQ(fc0.type(), "linear");
  EXPECT_EQ(fc0.in_features(), 8);
  EXPECT_EQ(fc0.out_features(), 16);
  EXPECT_TRUE(fc0.has_bias());
  EXPECT_FALSE(fc0.bias());
  EXPECT_EQ(spec->model().layers(1).type(), "relu");
  EXPECT_FALSE(spec->model().layers(1).has_bias());
  const v1::Layer& fc1 = spec->model().layers(2);
  EXPECT_TRUE(fc1.bias());
  EXPECT_EQ(FormatPlacements(fc1.placements().at("weight").placements()), "[Replicate()]");
  EXPECT_EQ(FormatPlacements(fc1.placements().at("bias").placements()), "[Replicate()]");
  EXPECT_EQ(spec->model().loss(), "mse");
  EXPECT_EQ(spec->data().source(), "npy");
  EXPECT_EQ(spec->data().input(), Path("inputs.npy"));
  EXPECT_EQ(spec->data().label(), Path("labels.npy"));
  EXPECT_EQ(spec->data().batch_size(), 8);
  EXPECT_EQ(FormatPlacements(spec->data().placements()), "[Shard(0)]");
  EXPECT_EQ(spec->optimizer().type(), "adamw");
  EXPECT_DOUBLE_EQ(spec->optimizer().lr(), 0.001);
  ASSERT_EQ(spec->optimizer().betas_size(), 2);
  EXPECT_DOUBLE_EQ(spec->optimizer().betas(0), 0.9);
  EXPECT_DOUBLE_EQ(spec->optimizer().betas(1), 0.999);
  EXPECT_DOUBLE_EQ(spec->optimizer().eps(), 1e-8);
  EXPECT_DOUBLE_EQ(spec->optimizer().weight_decay(), 0.01);
  EXPECT_EQ(spec->train().steps(), 10);
  EXPECT_EQ(spec->train().seed(), 1234u);
  EXPECT_EQ(spec->init_from(), Path("init.safetensors"));
  EXPECT_EQ(spec->device(), "cpu");
  EXPECT_EQ(WorldSize(*spec), 4);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);

  ASSERT_TRUE(ResolveDataShapes(&*spec).ok());
  EXPECT_EQ(spec->data().sample_shape_size(), 1);
  EXPECT_EQ(spec->data().sample_shape(0), 8);
  EXPECT_EQ(spec->data().label_shape(0), 4);
  EXPECT_EQ(spec->data().num_samples(), 32);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
}

TEST_F(SpecTest, AppliesDefaults) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kSyntheticSpec, dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->model().layers(0).has_bias());
  EXPECT_TRUE(spec->model().layers(0).bias());
  EXPECT_FALSE(spec->model().layers(1).has_bias());
  EXPECT_EQ(spec->model().loss(), "mse");
  EXPECT_EQ(FormatPlacements(spec->data().placements()), "[Shard(0)]");
  EXPECT_EQ(spec->optimizer().betas_size(), 0);  // sgd
  EXPECT_DOUBLE_EQ(spec->optimizer().weight_decay(), 0);
  EXPECT_EQ(spec->train().seed(), 0u);
  EXPECT_EQ(spec->device(), "cpu");
  EXPECT_EQ(spec->precision(), "f32");
  EXPECT_FALSE(spec->allow_tf32());
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);

  absl::StatusOr<v1::JobSpec> gpu = ParseJobSpecYaml(
      absl::StrCat(kSyntheticSpec, "device: cuda\nprecision: bf16\nallow_tf32: true\n"), dir_);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->device(), "cuda");
  EXPECT_EQ(gpu->precision(), "bf16");
  EXPECT_TRUE(gpu->allow_tf32());
  EXPECT_TRUE(ValidateJobSpec(*gpu).ok()) << ValidateJobSpec(*gpu);
  EXPECT_THAT(std::string(ParseJobSpecYaml(absl::StrCat(kSyntheticSpec, "allow_tf32: maybe\n"),
                                           dir_)
                              .status()
                              .message()),
              HasSubstr("allow_tf32"));

  absl::StatusOr<v1::JobSpec> adam = ParseJobSpecYaml(
      absl::StrReplaceAll(kSyntheticSpec, {{"{type: sgd, lr: 0.1}", "{type: adamw, lr: 0.1}"},
                                           {"{shape: [2], dim_names: [dp]}", "{shape: [2, 1]}"}}),
      dir_);
  ASSERT_TRUE(adam.ok()) << adam.status();
  ASSERT_EQ(adam->optimizer().betas_size(), 2);
  EXPECT_DOUBLE_EQ(adam->optimizer().betas(0), 0.9);
  EXPECT_DOUBLE_EQ(adam->optimizer().betas(1), 0.999);
  EXPECT_DOUBLE_EQ(adam->optimizer().eps(), 1e-8);
  ASSERT_EQ(adam->mesh().dim_names_size(), 2);
  EXPECT_EQ(adam->mesh().dim_names(0), "d0");
  EXPECT_EQ(adam->mesh().dim_names(1), "d1");
  // No dim is named dp: the batch is replicated.
  EXPECT_EQ(FormatPlacements(adam->data().placements()), "[Replicate(), Replicate()]");
  EXPECT_TRUE(ValidateJobSpec(*adam).ok()) << ValidateJobSpec(*adam);

  // 2-d mesh with dp second.
  absl::StatusOr<v1::JobSpec> mp = ParseJobSpecYaml(
      absl::StrReplaceAll(kSyntheticSpec,
                          {{"{shape: [2], dim_names: [dp]}", "{shape: [1, 2], dim_names: [mp, dp]}"}}),
      dir_);
  ASSERT_TRUE(mp.ok()) << mp.status();
  EXPECT_EQ(FormatPlacements(mp->data().placements()), "[Replicate(), Shard(0)]");
}

TEST_F(SpecTest, ValidationAppliesDefaultsToSpecsFromGrpc) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kSyntheticSpec, dir_);
  ASSERT_TRUE(spec.ok());
  spec->mutable_mesh()->clear_dim_names();
  spec->mutable_data()->clear_placements();
  spec->mutable_model()->clear_loss();
  spec->clear_device();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
}

TEST_F(SpecTest, ExampleQuickstartIsValid) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile("examples/quickstart.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(WorldSize(*spec), 4);
  EXPECT_EQ(spec->model().layers(0).in_features(), 1024);
  EXPECT_EQ(spec->model().layers(0).out_features(), 4096);
  EXPECT_EQ(spec->data().batch_size(), 32);
  EXPECT_EQ(spec->train().seed(), 1234u);
}

TEST_F(SpecTest, LoadResolvesPathsAgainstTheSpecFolder) {
  WriteNpy("inputs.npy", {32, 8});
  WriteNpy("labels.npy", {32, 4});
  WriteInit();
  WriteText("job.yaml", kFullSpec);
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(Path("job.yaml"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().input(), Path("inputs.npy"));
  EXPECT_EQ(spec->init_from(), Path("init.safetensors"));
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);

  absl::StatusOr<v1::JobSpec> missing = LoadJobSpecFile(Path("nope.yaml"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("nope.yaml"));

  // Absolute paths stay as they are.
  absl::StatusOr<v1::JobSpec> abs = ParseJobSpecYaml(
      absl::StrReplaceAll(kFullSpec, {{"input: inputs.npy", "input: /abs/x.npy"}}), dir_);
  ASSERT_TRUE(abs.ok());
  EXPECT_EQ(abs->data().input(), "/abs/x.npy");
}

TEST_F(SpecTest, UnknownKeysAreErrorsNamingThem) {
  struct Case {
    std::string from, to, field;
  };
  for (const Case& c : std::vector<Case>{
           {"name: tiny", "name: tiny\nnmae: x", "nmae"},
           {"in_features: 8,", "in_feature: 8,", "in_feature"},
           {"loss: mse", "loss: mse\n  lossy: 1", "lossy"},
           {"batch_size: 8", "batchsize: 8", "batchsize"},
           {"steps: 10", "step: 10", "step"},
           {"lr: 0.001", "lr: 0.001, momentum: 0.9", "momentum"},
           {"dim_names: [dp]", "dim_names: [dp], names: [x]", "names"},
           {"weight: [Replicate()]", "weights: [Replicate()]", "weights"},
       }) {
    absl::StatusOr<v1::JobSpec> spec = Full({{c.from, c.to}});
    ASSERT_FALSE(spec.ok()) << c.to;
    EXPECT_INVALID(spec.status(), absl::StrCat("unknown key \"", c.field, "\""));
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr("line ")) << spec.status();
  }
}

TEST_F(SpecTest, ParseErrorsNameTheFieldAndLine) {
  struct Case {
    std::string from, to, message;
  };
  for (const Case& c : std::vector<Case>{
           {"batch_size: 8", "batch_size: eight", "data.batch_size: expected an integer"},
           {"batch_size: 8", "batch_size: 8.5", "data.batch_size"},
           {"shape: [4]", "shape: 4", "mesh.shape: expected a list"},
           {"lr: 0.001", "lr: fast", "optimizer.lr: expected a number"},
           {"bias: false}", "bias: maybe}", "model.layers[0] (fc0).bias"},
           {"seed: 1234", "seed: -1", "train.seed"},
           {"[Shard(0)]", "[Shard(x)]", "data.placements[0]: invalid placement"},
           {"weight: [Replicate()]", "weight: [Replicated()]",
            "model.layers[2] (fc1).placements.weight[0]"},
           {"name: tiny", "name: [a, b]", "name: expected a scalar"},
           {"batch_size: 8", "batch_size: 8\n  batch_size: 9", "duplicate key \"batch_size\""},
           {"train: {steps: 10, seed: 1234}", "train: {seed: 1234}", "train.steps: is required"},
           {"optimizer: {type: adamw, lr: 0.001,", "optimizer: {type: adamw,",
            "optimizer.lr: is required"},
           {"{name: act0, type: relu}", "{type: relu}", "model.layers[1].name: is required"},
       }) {
    absl::StatusOr<v1::JobSpec> spec = Full({{c.from, c.to}});
    ASSERT_FALSE(spec.ok()) << c.to;
    EXPECT_INVALID(spec.status(), c.message);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr("line ")) << spec.status();
  }
  absl::StatusOr<v1::JobSpec> no_data = Full({{"data:", "dat:"}});
  EXPECT_INVALID(no_data.status(), "dat");
}

TEST_F(SpecTest, MalformedYamlIsAnErrorWithItsPosition) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml("name: x\nmesh: {shape: [4\n", dir_);
  EXPECT_INVALID(spec.status(), "not valid YAML at line");
  EXPECT_INVALID(ParseJobSpecYaml("", dir_).status(), "empty");
  EXPECT_INVALID(ParseJobSpecYaml("- a\n- b\n", dir_).status(), "expected a mapping");
  EXPECT_INVALID(ParseJobSpecYaml("just text", dir_).status(), "expected a mapping");
}

TEST_F(SpecTest, NeverCrashesOnTruncatedOrGarbledInput) {
  const std::string text = kFullSpec;
  // Every prefix of the full spec.
  for (size_t n = 0; n <= text.size(); ++n) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(text.substr(0, n), dir_);
    if (spec.ok()) (void)ValidateJobSpec(*spec);
  }
  // Random byte flips, deletions and insertions of YAML punctuation.
  std::mt19937 rng(42);
  const std::string punct = "{}[]:,-'\"&*!|>#%@` \n\t\x01\xff";
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string s = Garble(text, punct, &rng);
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(s, dir_);
    if (spec.ok()) (void)ValidateJobSpec(*spec);
  }
  // Deep nesting and aliases.
  EXPECT_FALSE(ParseJobSpecYaml(std::string(10000, '[') , dir_).ok());
  EXPECT_FALSE(ParseJobSpecYaml("a: &x [*x]", dir_).ok());
  // Empty and default protos.
  EXPECT_FALSE(ValidateJobSpec(v1::JobSpec()).ok());
}

TEST_F(SpecTest, ValidationErrorsNameTheField) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> replace;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           // Layers.
           {{{"type: relu", "type: conv"}},
            "model.layers[1] (act0).type: unknown layer type \"conv\"; known: linear, relu, gelu"},
           {{{"in_features: 16, out_features: 4", "in_features: 4096, out_features: 4"}},
            "model.layers[2] (fc1).in_features: 4096 does not match the previous linear's "
            "out_features 16"},
           {{{"name: fc0, type: linear, in_features: 8", "name: fc0, type: linear, in_features: 9"}},
            "model.layers[0] (fc0).in_features: 9 does not match the input's last dimension 8"},
           {{{"out_features: 16, bias: false", "out_features: 0, bias: false"}},
            "model.layers[0] (fc0).out_features: must be > 0"},
           {{{"name: act0", "name: fc0"}}, "model.layers[1] (fc0).name: duplicate layer name"},
           {{{"{name: act0, type: relu}", "{name: act0, type: relu, in_features: 3}"}},
            "model.layers[1] (act0).in_features: only linear layers"},
           {{{"loss: mse", "loss: xent"}}, "model.loss: unknown loss \"xent\""},
           // Placements.
           {{{"weight: [Replicate()]", "weight: [Shard(2)]"}},
            "model.layers[2] (fc1).placements.weight[0]: Shard(2) on mesh dim dp is out of range "
            "for weight of rank 2"},
           {{{"bias: [Replicate()]", "bias: [Shard(-2)]"}},
            "model.layers[2] (fc1).placements.bias[0]: Shard(-2) on mesh dim dp is out of range"},

           {{{"weight: [Replicate()]", "weight: [Replicate(), Replicate()]"}},
            "model.layers[2] (fc1).placements.weight: 2 placement(s)"},
           {{{"placements: [Shard(0)]", "placements: [Shard(2)]"}},
            "data.placements[0]: Shard(2) on mesh dim dp is out of range"},
           {{{"placements: [Shard(0)]", "placements: [Shard(0), Replicate()]"}},
            "data.placements: 2 placement(s)"},
           // Mesh.
           {{{"{shape: [4], dim_names: [dp]}", "{shape: [], dim_names: []}"}}, "mesh.shape"},
           {{{"{shape: [4], dim_names: [dp]}", "{shape: [0], dim_names: [dp]}"}},
            "mesh.shape[0]: must be > 0"},
           {{{"{shape: [4], dim_names: [dp]}", "{shape: [4, 1], dim_names: [dp]}"}},
            "mesh.dim_names: 1 name(s) for 2 dimension(s)"},
           {{{"{shape: [4], dim_names: [dp]}", "{shape: [4, 1], dim_names: [dp, dp]}"},
             {"placements: [Shard(0)]", "placements: [Shard(0), Replicate()]"}},
            "mesh.dim_names[1]: duplicate name"},
           {{{"{shape: [4], dim_names: [dp]}", "{shape: [65536, 65536], dim_names: [a, b]}"}},
            "mesh.shape"},
           // Data.
           {{{"batch_size: 8", "batch_size: 3"}},
            "data.batch_size: 3 is smaller than the 4 shards the batch is split into over mesh "
            "dim(s) dp (data.placements [Shard(0)]); every shard needs at least one sample"},
           {{{"batch_size: 8", "batch_size: 0"}}, "data.batch_size: must be > 0"},
           {{{"source: npy", "source: csv"}}, "data.source: unknown source \"csv\""},
           {{{"input: inputs.npy", "input: other.npy"}}, "data.input"},
           // Optimizer, train, device, name.
           {{{"type: adamw", "type: adam"}}, "optimizer.type: unknown optimizer \"adam\""},
           {{{"lr: 0.001", "lr: 0"}}, "optimizer.lr: must be a finite number > 0"},
           {{{"lr: 0.001", "lr: -1"}}, "optimizer.lr"},
           {{{"betas: [0.9, 0.999]", "betas: [0.9, 1.0]"}}, "optimizer.betas[1]: must be in [0, 1)"},
           {{{"betas: [0.9, 0.999]", "betas: [0.9]"}}, "optimizer.betas: adamw needs two values"},
           {{{"weight_decay: 0.01", "weight_decay: -0.1"}}, "optimizer.weight_decay"},
           {{{"eps: 1.0e-8", "eps: nan"}}, "optimizer.eps"},
           {{{"steps: 10", "steps: 0"}}, "train.steps: must be > 0"},
           {{{"device: cpu", "device: tpu"}}, "device: unknown device \"tpu\""},
           {{{"device: cpu", "device: cpu\nprecision: fp8"}},
            "precision: unknown precision \"fp8\"; known: f32, bf16"},
           {{{"name: tiny", "name: \"\""}}, "name: must not be empty"},
       }) {
    absl::StatusOr<v1::JobSpec> spec = Full(c.replace);
    ASSERT_TRUE(spec.ok()) << c.message << ": " << spec.status();
    absl::Status s = ValidateJobSpec(*spec);
    EXPECT_FALSE(s.ok()) << c.message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << s;
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  }
}

TEST_F(SpecTest, ModelNeedsALinearLayer) {
  absl::StatusOr<v1::JobSpec> spec = Full();
  ASSERT_TRUE(spec.ok());
  v1::JobSpec empty = *spec;
  empty.mutable_model()->clear_layers();
  EXPECT_INVALID(ValidateJobSpec(empty), "model.layers: the model needs at least one layer");
  v1::JobSpec relu_only = *spec;
  relu_only.mutable_model()->clear_layers();
  relu_only.mutable_model()->add_layers()->CopyFrom(spec->model().layers(1));
  relu_only.clear_init_from();
  EXPECT_INVALID(ValidateJobSpec(relu_only), "model.layers: the model has no linear layer");
}

TEST_F(SpecTest, UnevenBatchShardsAreAllowedButNotEmptyOnes) {
  absl::StatusOr<v1::JobSpec> spec = Full(
      {{"{shape: [4], dim_names: [dp]}", "{shape: [2, 2], dim_names: [dp, mp]}"},
       {"placements: [Shard(0)]", "placements: [Shard(0), Shard(0)]"},
       {"weight: [Replicate()], bias: [Replicate()]",
        "weight: [Replicate(), Replicate()], bias: [Replicate(), Shard(0)]"},
       {"batch_size: 8", "batch_size: 3"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  // Both dims split the batch axis: 4 shards.
  EXPECT_INVALID(ValidateJobSpec(*spec),
                 "data.batch_size: 3 is smaller than the 4 shards the batch is split into over "
                 "mesh dim(s) dp, mp");
  for (int64_t batch : {4, 6, 7, 8}) {
    spec->mutable_data()->set_batch_size(batch);
    EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << batch << ": " << ValidateJobSpec(*spec);
  }
  // Sharding the feature axis does not constrain the batch, but the features must cover the
  // shards: 8 input and 4 label features over 4 shards.
  spec->mutable_data()->set_batch_size(3);
  spec->mutable_data()->mutable_placements(0)->set_axis(-1);
  spec->mutable_data()->mutable_placements(1)->set_axis(-1);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  spec->mutable_data()->set_batch_size(1);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);

  absl::StatusOr<v1::JobSpec> narrow =
      Full({{"{shape: [4], dim_names: [dp]}", "{shape: [8], dim_names: [dp]}"},
            {"placements: [Shard(0)]", "placements: [Shard(-1)]"}});
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_INVALID(ValidateJobSpec(*narrow),
                 "data.placements: [Shard(-1)] splits axis 1 of the label batch [8,4] (length 4) "
                 "into 8 shards over mesh dim(s) dp; some shards would be empty");
}

TEST_F(SpecTest, PartialPlacementsAreAllowedForParametersAndTheBatch) {
  absl::StatusOr<v1::JobSpec> spec =
      Full({{"weight: [Replicate()]", "weight: [Partial(sum)]"},
            {"bias: [Replicate()]", "bias: [Partial(avg)]"},
            {"placements: [Shard(0)]", "placements: [Partial()]"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(FormatPlacements(spec->data().placements()), "[Partial(sum)]");
}

TEST_F(SpecTest, ParameterShardsMustNotBeEmpty) {
  // fc1.weight is [16, 4]: Shard(1) over dp = 8 leaves four ranks without columns.
  absl::StatusOr<v1::JobSpec> spec =
      Full({{"{shape: [4], dim_names: [dp]}", "{shape: [8], dim_names: [dp]}"},
            {"weight: [Replicate()]", "weight: [Shard(1)]"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_INVALID(ValidateJobSpec(*spec),
                 "model.layers[2] (fc1).placements.weight: [Shard(1)] splits axis 1 of weight "
                 "[16,4] (length 4) into 8 shards over mesh dim(s) dp");
  // Uneven is fine: 16 rows over 8 and 4 columns over 4 are even, 4 columns over 3 are not.
  spec->mutable_mesh()->set_shape(0, 3);
  spec->mutable_data()->set_batch_size(8);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
}

TEST_F(SpecTest, DataFileErrors) {
  absl::StatusOr<v1::JobSpec> spec = Full();
  ASSERT_TRUE(spec.ok());

  std::filesystem::remove(Path("inputs.npy"));
  absl::Status s = ValidateJobSpec(*spec);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("data.input: ", Path("inputs.npy"), ": no such file")));

  WriteText("inputs.npy", "this is not an npy file at all");
  EXPECT_INVALID(ValidateJobSpec(*spec), "data.input");

  WriteNpy("inputs.npy", {32, 7});
  EXPECT_INVALID(ValidateJobSpec(*spec),
                 "model.layers[0] (fc0).in_features: 8 does not match the input's last dimension 7");

  WriteNpy("inputs.npy", {31, 8});
  EXPECT_INVALID(ValidateJobSpec(*spec), "data.label");

  WriteNpy("inputs.npy", {32, 8});
  WriteNpy("labels.npy", {32, 5});
  EXPECT_INVALID(ValidateJobSpec(*spec), "data.label: samples of shape [5] do not match");

  WriteNpy("labels.npy", {32});
  EXPECT_INVALID(ValidateJobSpec(*spec), "data.label");

  WriteNpy("labels.npy", {32, 4});
  spec->mutable_data()->clear_label();
  EXPECT_INVALID(ValidateJobSpec(*spec), "data.label: is required");
}

TEST_F(SpecTest, SyntheticDataErrors) {
  struct Case {
    std::string from, to, message;
  };
  for (const Case& c : std::vector<Case>{
           {"sample_shape: [8]", "sample_shape: [9]",
            "model.layers[0] (fc0).in_features: 8 does not match the input's last dimension 9"},
           {"label_shape: [4]", "label_shape: [3]",
            "data.label_shape: samples of shape [3] do not match the model's output [4]"},
           {"label_shape: [4]", "label_shape: []", "data.label_shape: is required"},
           {"sample_shape: [8]", "sample_shape: [0, 8]", "data.sample_shape[0]: must be > 0"},
           {"num_samples: 32", "num_samples: 0", "data.num_samples: must be > 0"},
           {"source: synthetic", "source: synthetic\n  input: x.npy", "data.input: only for"},
           {"batch_size: 4", "batch_size: 1", "data.batch_size: 1 is smaller than the 2 shards"},
           {"{type: sgd, lr: 0.1}", "{type: sgd, lr: 0.1, betas: [0.9, 0.9]}",
            "optimizer.betas: only adamw"},
       }) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpecYaml(absl::StrReplaceAll(kSyntheticSpec, {{c.from, c.to}}), dir_);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_INVALID(ValidateJobSpec(*spec), c.message);
  }
}

TEST_F(SpecTest, InitFromErrors) {
  absl::StatusOr<v1::JobSpec> spec = Full();
  ASSERT_TRUE(spec.ok());

  WriteInit(/*fc0_weight=*/{16, 8});
  EXPECT_INVALID(ValidateJobSpec(*spec),
                 "fc0.weight has shape [16,8], the model needs [8,16]");
  EXPECT_INVALID(ValidateJobSpec(*spec), "init_from");

  std::vector<float> zeros(64, 0.0f);
  ASSERT_TRUE(SafetensorsFile::Write(Path("init.safetensors"),
                                     {{"fc0.weight", {8, 16}, zeros.data()},
                                      {"fc1.weight", {16, 4}, zeros.data()}})
                  .ok());
  EXPECT_INVALID(ValidateJobSpec(*spec), "has no tensor fc1.bias");

  // Malformed: a header length pointing past the end of the file, then plain garbage.
  WriteText("init.safetensors", std::string("\xff\xff\xff\x00\x00\x00\x00\x00{}", 10));
  EXPECT_INVALID(ValidateJobSpec(*spec), "init_from");
  WriteText("init.safetensors", std::string("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":", 13));
  EXPECT_INVALID(ValidateJobSpec(*spec), "init_from");
  WriteText("init.safetensors", "");
  EXPECT_INVALID(ValidateJobSpec(*spec), "init_from");

  std::filesystem::remove(Path("init.safetensors"));
  absl::Status s = ValidateJobSpec(*spec);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("init_from: "));
}

// DP2 x MP2 with fc0 column-parallel and fc1 row-parallel: by hand, by dim name, by parallelize.
constexpr char kDpMpHand[] = R"(
name: dpmp
mesh: {shape: [2, 2], dim_names: [dp, mp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 16,
       placements: {weight: [Replicate(), Shard(1)], bias: [Replicate(), Shard(0)]}}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 16, out_features: 4,
       placements: {weight: [Replicate(), Shard(0)], bias: [Replicate(), Replicate()]}}
data:
  source: synthetic
  sample_shape: [8]
  label_shape: [4]
  num_samples: 32
  batch_size: 4
  placements: [Shard(0), Replicate()]
optimizer: {type: sgd, lr: 0.1}
train: {steps: 3}
)";

constexpr char kDpMpNamed[] = R"(
name: dpmp
mesh: {shape: [2, 2], dim_names: [dp, mp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 16,
       placements: {weight: {mp: Shard(1)}, bias: {mp: Shard(0)}}}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 16, out_features: 4,
       placements: {weight: {mp: Shard(0)}, bias: {}}}
data:
  source: synthetic
  sample_shape: [8]
  label_shape: [4]
  num_samples: 32
  batch_size: 4
  placements: {dp: Shard(0)}
optimizer: {type: sgd, lr: 0.1}
train: {steps: 3}
)";

constexpr char kDpMpParallelize[] = R"(
name: dpmp
mesh: {shape: [2, 2], dim_names: [dp, mp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 16}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 16, out_features: 4}
parallelize:
  mp: {dim: mp, plan: {fc0: ColWiseParallel, fc1: RowWiseParallel}}
data:
  source: synthetic
  sample_shape: [8]
  label_shape: [4]
  num_samples: 32
  batch_size: 4
optimizer: {type: sgd, lr: 0.1}
train: {steps: 3}
)";

// The spec without its parallelize field, serialized deterministically (map order).
std::string Canonical(v1::JobSpec spec) {
  spec.clear_parallelize();
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  spec.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

std::string Placements(const v1::JobSpec& spec, int layer, const std::string& param) {
  const auto& lists = spec.model().layers(layer).placements();
  auto it = lists.find(param);
  return it == lists.end() ? "absent" : FormatPlacements(it->second.placements());
}

TEST_F(SpecTest, PlacementsByMeshDimNameEqualPositionalOnes) {
  absl::StatusOr<v1::JobSpec> hand = ParseJobSpecYaml(kDpMpHand, dir_);
  absl::StatusOr<v1::JobSpec> named = ParseJobSpecYaml(kDpMpNamed, dir_);
  ASSERT_TRUE(hand.ok()) << hand.status();
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(Placements(*named, 0, "weight"), "[Replicate(), Shard(1)]");
  EXPECT_EQ(Placements(*named, 2, "bias"), "[Replicate(), Replicate()]");
  EXPECT_EQ(FormatPlacements(named->data().placements()), "[Shard(0), Replicate()]");
  EXPECT_EQ(Canonical(*named), Canonical(*hand));
  EXPECT_TRUE(ValidateJobSpec(*named).ok()) << ValidateJobSpec(*named);

  // Default dim names work too.
  absl::StatusOr<v1::JobSpec> d1 = ParseJobSpecYaml(
      absl::StrReplaceAll(kDpMpNamed, {{"dim_names: [dp, mp]", "dim_names: []"},
                                       {"mp:", "d1:"}, {"dp:", "d0:"}}),
      dir_);
  ASSERT_TRUE(d1.ok()) << d1.status();
  EXPECT_EQ(Placements(*d1, 0, "weight"), "[Replicate(), Shard(1)]");
}

TEST_F(SpecTest, PlacementByNameErrorsNameTheLayerParameterAndPlacement) {
  struct Case {
    std::string from, to, message;
  };
  for (const Case& c : std::vector<Case>{
           {"weight: {mp: Shard(1)}", "weight: {tp: Shard(1)}",
            "model.layers[0] (fc0).placements.weight.tp: Shard(1) on mesh dim \"tp\": the mesh "
            "has no dim named tp (dims: dp, mp)"},
           {"placements: {dp: Shard(0)}", "placements: {batch: Shard(0)}",
            "data.placements.batch: Shard(0) on mesh dim \"batch\": the mesh has no dim named "
            "batch"},
           {"weight: {mp: Shard(1)}", "weight: {mp: Shard(x)}",
            "model.layers[0] (fc0).placements.weight.mp: invalid placement \"Shard(x)\""},
           {"weight: {mp: Shard(1)}", "weight: {mp: [Shard(1)]}",
            "model.layers[0] (fc0).placements.weight.mp: expected a scalar"},
       }) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpecYaml(absl::StrReplaceAll(kDpMpNamed, {{c.from, c.to}}), dir_);
    ASSERT_FALSE(spec.ok()) << c.to;
    EXPECT_INVALID(spec.status(), c.message);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr("line ")) << spec.status();
  }
  // Validation names the layer, the parameter and the placement for the other faults too.
  for (const Case& c : std::vector<Case>{
           {"weight: {mp: Shard(1)}", "weight: {mp: Shard(2)}",
            "model.layers[0] (fc0).placements.weight[1]: Shard(2) on mesh dim mp is out of range "
            "for weight of rank 2"},
           {"placements: {weight: {mp: Shard(1)}, bias: {mp: Shard(0)}}",
            "placements: {weight: [Shard(1)], bias: {mp: Shard(0)}}",
            "model.layers[0] (fc0).placements.weight: 1 placement(s) [Shard(1)] for a mesh of 2 "
            "dim(s); give one per mesh dim (dp, mp)"},
       }) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpecYaml(absl::StrReplaceAll(kDpMpNamed, {{c.from, c.to}}), dir_);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_INVALID(ValidateJobSpec(*spec), c.message);
  }
}

TEST_F(SpecTest, ParallelizeGivesTheSameSpecAsHandPlacements) {
  absl::StatusOr<v1::JobSpec> hand = ParseJobSpecYaml(kDpMpHand, dir_);
  absl::StatusOr<v1::JobSpec> par = ParseJobSpecYaml(kDpMpParallelize, dir_);
  ASSERT_TRUE(hand.ok()) << hand.status();
  ASSERT_TRUE(par.ok()) << par.status();
  ASSERT_EQ(par->parallelize().size(), 1u);
  EXPECT_EQ(par->parallelize().at("mp").dim(), "mp");
  EXPECT_EQ(par->parallelize().at("mp").plan().at("fc0"), "ColWiseParallel");
  EXPECT_EQ(Placements(*par, 0, "weight"), "[Replicate(), Shard(1)]");
  EXPECT_EQ(Placements(*par, 0, "bias"), "[Replicate(), Shard(0)]");
  EXPECT_EQ(Placements(*par, 1, "weight"), "absent");
  EXPECT_EQ(Placements(*par, 2, "weight"), "[Replicate(), Shard(0)]");
  EXPECT_EQ(Placements(*par, 2, "bias"), "[Replicate(), Replicate()]");
  EXPECT_EQ(Canonical(*par), Canonical(*hand));
  EXPECT_TRUE(ValidateJobSpec(*par).ok()) << ValidateJobSpec(*par);

  // Applying it again changes nothing.
  v1::JobSpec again = *par;
  ASSERT_TRUE(ApplyParallelize(&again).ok());
  EXPECT_EQ(Canonical(again), Canonical(*par));

  // A spec that arrives over gRPC with only the shortcut and no defaults: the coordinator's
  // PrepareJobSpec expands both before planning and validates the result.
  v1::JobSpec grpc = *par;
  for (v1::Layer& layer : *grpc.mutable_model()->mutable_layers()) layer.clear_placements();
  grpc.mutable_model()->mutable_layers(0)->clear_bias();
  EXPECT_TRUE(ValidateJobSpec(grpc).ok()) << ValidateJobSpec(grpc);
  ASSERT_TRUE(PrepareJobSpec(&grpc).ok()) << PrepareJobSpec(&grpc);
  EXPECT_EQ(Canonical(grpc), Canonical(*hand));
}

TEST_F(SpecTest, ParallelizeMergesWithPlacementsOnOtherDims) {
  // fc0's weight sharded on dp by name (the mp dim left to parallelize), fc1 without bias, and
  // an explicit placement that agrees with the plan.
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      absl::StrReplaceAll(kDpMpParallelize,
                          {{"{name: fc0, type: linear, in_features: 8, out_features: 16}",
                            "{name: fc0, type: linear, in_features: 8, out_features: 16, "
                            "placements: {weight: {dp: Shard(0)}, "
                            "bias: [Replicate(), Shard(-1)]}}"},
                           {"in_features: 16, out_features: 4}",
                            "in_features: 16, out_features: 4, bias: false}"}}),
      dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(Placements(*spec, 0, "weight"), "[Shard(0), Shard(1)]");
  EXPECT_EQ(Placements(*spec, 0, "bias"), "[Replicate(), Shard(-1)]");  // the same as Shard(0)
  EXPECT_EQ(Placements(*spec, 2, "weight"), "[Replicate(), Shard(0)]");
  EXPECT_EQ(Placements(*spec, 2, "bias"), "absent");
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);

  // On a 1-d mesh: Megatron's column -> row MLP.
  absl::StatusOr<v1::JobSpec> mp4 = ParseJobSpecYaml(
      absl::StrReplaceAll(kDpMpParallelize, {{"{shape: [2, 2], dim_names: [dp, mp]}",
                                              "{shape: [4], dim_names: [mp]}"}}),
      dir_);
  ASSERT_TRUE(mp4.ok()) << mp4.status();
  EXPECT_EQ(Placements(*mp4, 0, "weight"), "[Shard(1)]");
  EXPECT_EQ(Placements(*mp4, 2, "weight"), "[Shard(0)]");
  EXPECT_EQ(FormatPlacements(mp4->data().placements()), "[Replicate()]");
  EXPECT_TRUE(ValidateJobSpec(*mp4).ok()) << ValidateJobSpec(*mp4);
}

TEST_F(SpecTest, ParallelizeErrorsNameWhatIsWrong) {
  const std::string plan = "mp: {dim: mp, plan: {fc0: ColWiseParallel, fc1: RowWiseParallel}}";
  struct Case {
    std::vector<std::pair<std::string, std::string>> replace;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{{"fc1: RowWiseParallel", "fc9: RowWiseParallel"}},
            "parallelize.mp.plan.fc9: the model has no layer named \"fc9\" (layers: fc0, act0, "
            "fc1)"},
           {{{"fc1: RowWiseParallel", "act0: RowWiseParallel"}},
            "parallelize.mp.plan.act0: RowWiseParallel applies to linear layers only; "
            "model.layers[1] (act0) is a relu layer"},
           {{{"fc1: RowWiseParallel", "fc1: RowParallel"}},
            "parallelize.mp.plan.fc1: unknown style \"RowParallel\"; known: ColWiseParallel, "
            "RowWiseParallel"},
           {{{"{dim: mp,", "{dim: tp,"}},
            "parallelize.mp.dim: the mesh has no dim named \"tp\" (dims: dp, mp)"},
           {{{"{dim: mp, plan: {fc0: ColWiseParallel, fc1: RowWiseParallel}}", "{dim: mp}"}},
            "parallelize.mp.plan: is required"},
           {{{"{dim: mp,", "{dim: mp, style: x,"}}, "unknown key \"style\""},
           // A placement the user wrote on the same dim must agree.
           {{{"{name: fc0, type: linear, in_features: 8, out_features: 16}",
              "{name: fc0, type: linear, in_features: 8, out_features: 16, "
              "placements: {weight: [Replicate(), Shard(0)]}}"}},
            "parallelize.mp.plan.fc0: ColWiseParallel puts fc0.weight at Shard(1) on mesh dim mp, "
            "but model.layers[0] (fc0).placements.weight gives Shard(0) there"},
           {{{"{name: fc0, type: linear, in_features: 8, out_features: 16}",
              "{name: fc0, type: linear, in_features: 8, out_features: 16, "
              "placements: {bias: {mp: Replicate()}}}"}},
            "parallelize.mp.plan.fc0: ColWiseParallel puts fc0.bias at Shard(0) on mesh dim mp, "
            "but model.layers[0] (fc0).placements.bias gives Replicate() there"},
           // Two entries on the same dim that disagree.
           {{{plan, plan + "\n  again: {dim: mp, plan: {fc0: RowWiseParallel}}"}},
            "parallelize.mp.plan.fc0: ColWiseParallel puts fc0.weight at Shard(1) on mesh dim mp, "
            "but parallelize.again (RowWiseParallel on mp) gives Shard(0) there"},
           {{{"{name: fc0, type: linear, in_features: 8, out_features: 16}",
              "{name: fc0, type: linear, in_features: 8, out_features: 16, "
              "placements: {weight: [Shard(1)]}}"}},
            "model.layers[0] (fc0).placements.weight: 1 placement(s) [Shard(1)] for a mesh of 2"},
       }) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpecYaml(absl::StrReplaceAll(kDpMpParallelize, c.replace), dir_);
    ASSERT_FALSE(spec.ok()) << c.message;
    EXPECT_INVALID(spec.status(), c.message);
  }

  // The same errors for a spec that arrives over gRPC.
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kDpMpParallelize, dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  (*spec->mutable_parallelize())["mp"].mutable_plan()->erase("fc1");
  (*(*spec->mutable_parallelize())["mp"].mutable_plan())["fc7"] = "RowWiseParallel";
  EXPECT_INVALID(ValidateJobSpec(*spec), "parallelize.mp.plan.fc7: the model has no layer");
  v1::JobSpec resolved = *spec;
  EXPECT_INVALID(PrepareJobSpec(&resolved), "parallelize.mp.plan.fc7");
}

TEST_F(SpecTest, TensorParallelExamplesAreValid) {
  absl::StatusOr<v1::JobSpec> tp = LoadJobSpecFile("examples/tensor_parallel.yaml");
  ASSERT_TRUE(tp.ok()) << tp.status();
  EXPECT_TRUE(ValidateJobSpec(*tp).ok()) << ValidateJobSpec(*tp);
  EXPECT_EQ(WorldSize(*tp), 4);
  EXPECT_EQ(Placements(*tp, 0, "weight"), "[Shard(1)]");
  EXPECT_EQ(Placements(*tp, 0, "bias"), "[Shard(0)]");
  EXPECT_EQ(Placements(*tp, 2, "weight"), "[Shard(0)]");
  EXPECT_EQ(Placements(*tp, 2, "bias"), "[Replicate()]");

  absl::StatusOr<v1::JobSpec> dpmp = LoadJobSpecFile("examples/dp_mp.yaml");
  ASSERT_TRUE(dpmp.ok()) << dpmp.status();
  EXPECT_TRUE(ValidateJobSpec(*dpmp).ok()) << ValidateJobSpec(*dpmp);
  EXPECT_EQ(Placements(*dpmp, 0, "weight"), "[Replicate(), Shard(1)]");
  EXPECT_EQ(Placements(*dpmp, 2, "weight"), "[Replicate(), Shard(0)]");
  EXPECT_EQ(FormatPlacements(dpmp->data().placements()), "[Shard(0), Replicate()]");
}

TEST_F(SpecTest, NeverCrashesOnGarbledParallelizeOrNamedPlacements) {
  std::mt19937 rng(7);
  const std::string punct = "{}[]:,-'\"&*!|>#%@` \n\t\x01\xff";
  for (const std::string& text : {std::string(kDpMpParallelize), std::string(kDpMpNamed)}) {
    for (size_t n = 0; n <= text.size(); ++n) {
      absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(text.substr(0, n), dir_);
      if (spec.ok()) (void)ValidateJobSpec(*spec);
    }
    for (int iter = 0; iter < 2000; ++iter) {
      const std::string s = Garble(text, punct, &rng);
      absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(s, dir_);
      if (!spec.ok()) continue;
      (void)ValidateJobSpec(*spec);
      v1::JobSpec copy = *spec;
      (void)ResolveDataShapes(&copy);
    }
  }
  // A gRPC spec with parallelize and a mesh without names, or an empty one.
  v1::JobSpec bare;
  (*bare.mutable_parallelize())["x"].set_dim("d0");
  (*(*bare.mutable_parallelize())["x"].mutable_plan())["fc0"] = "ColWiseParallel";
  EXPECT_FALSE(ValidateJobSpec(bare).ok());
  EXPECT_FALSE(ApplyParallelize(&bare).ok());
  bare.mutable_mesh()->add_shape(2);
  EXPECT_INVALID(ApplyParallelize(&bare), "parallelize.x.plan.fc0: the model has no layer");
}

// Pipeline: 4 linear layers on pp=4 with 1F1B over 4 micro-batches of 2.
constexpr char kPipelineSpec[] = R"(
name: pipe
mesh: {shape: [4], dim_names: [pp]}
pipeline: {dim: pp, schedule: 1F1B, micro_batches: 4, virtual_stages: 1}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 8}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 8, out_features: 8}
    - {name: fc2, type: linear, in_features: 8, out_features: 8}
    - {name: fc3, type: linear, in_features: 8, out_features: 4}
data:
  source: synthetic
  sample_shape: [8]
  label_shape: [4]
  num_samples: 32
  batch_size: 8
optimizer: {type: sgd, lr: 0.1}
train: {steps: 3}
trace: true
)";

// Replacements giving layers of kPipelineSpec a stage: {{"fc1", "2"}} -> fc1 gets stage: 2.
std::vector<std::pair<std::string, std::string>> Stages(
    const std::vector<std::pair<std::string, std::string>>& stages) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [layer, stage] : stages) {
    out.push_back({absl::StrCat("{name: ", layer, ","),
                   absl::StrCat("{stage: ", stage, ", name: ", layer, ",")});
  }
  return out;
}

std::vector<int> Chunks(const v1::JobSpec& spec) {
  absl::StatusOr<std::vector<int>> chunks = PipelineLayerChunks(spec);
  EXPECT_TRUE(chunks.ok()) << chunks.status();
  return chunks.ok() ? *chunks : std::vector<int>{};
}

TEST_F(SpecTest, ParsesThePipelineBlockStagesAndTrace) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      absl::StrReplaceAll(kPipelineSpec, Stages({{"fc0", "0"}, {"fc1", "1"}, {"fc2", "2"},
                                                 {"fc3", "3"}})),
      dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->has_pipeline());
  EXPECT_EQ(spec->pipeline().dim(), "pp");
  EXPECT_EQ(spec->pipeline().schedule(), "1F1B");
  EXPECT_EQ(spec->pipeline().micro_batches(), 4);
  EXPECT_EQ(spec->pipeline().virtual_stages(), 1);
  EXPECT_TRUE(spec->trace());
  const std::vector<int> want = {0, 0, 1, 2, 3};
  for (int i = 0; i < spec->model().layers_size(); ++i) {
    EXPECT_TRUE(spec->model().layers(i).has_stage()) << i;  // act0 takes fc0's
    EXPECT_EQ(spec->model().layers(i).stage(), want[i]) << i;
  }
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(Chunks(*spec), want);

  // Round trip through the wire, as SubmitJob receives it: the same spec, valid, and preparing
  // it changes nothing.
  v1::JobSpec wire;
  ASSERT_TRUE(wire.ParseFromString(spec->SerializeAsString()));
  EXPECT_EQ(Canonical(wire), Canonical(*spec));
  EXPECT_TRUE(wire.model().layers(1).has_stage());
  EXPECT_TRUE(ValidateJobSpec(wire).ok()) << ValidateJobSpec(wire);
  ASSERT_TRUE(PrepareJobSpec(&wire).ok()) << PrepareJobSpec(&wire);
  EXPECT_EQ(Canonical(wire), Canonical(*spec));

  // Schedules as written; the other forms of a bool.
  for (const char* schedule : {"FThenB", "1F1B"}) {
    absl::StatusOr<v1::JobSpec> s = ParseJobSpecYaml(
        absl::StrReplaceAll(kPipelineSpec, {{"schedule: 1F1B", absl::StrCat("schedule: ",
                                                                            schedule)},
                                            {"trace: true", "trace: no"}}),
        dir_);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->pipeline().schedule(), schedule);
    EXPECT_FALSE(s->trace());
    EXPECT_TRUE(ValidateJobSpec(*s).ok()) << ValidateJobSpec(*s);
  }
}

TEST_F(SpecTest, PipelineDefaults) {
  // micro_batches and virtual_stages default to 1, trace to false; no stages stay no stages.
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      absl::StrReplaceAll(kPipelineSpec,
                          {{"{dim: pp, schedule: 1F1B, micro_batches: 4, virtual_stages: 1}",
                            "{dim: pp, schedule: FThenB}"},
                           {"trace: true", ""}}),
      dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->pipeline().micro_batches(), 1);
  EXPECT_EQ(spec->pipeline().virtual_stages(), 1);
  EXPECT_FALSE(spec->trace());
  for (const v1::Layer& layer : spec->model().layers()) EXPECT_FALSE(layer.has_stage());
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(Chunks(*spec), (std::vector<int>{0, 0, 1, 2, 3}));

  // A spec from gRPC with the counts left 0 and one stage: validation applies the defaults, and
  // ApplyJobSpecDefaults writes them (idempotently).
  v1::JobSpec grpc = *spec;
  grpc.mutable_pipeline()->clear_micro_batches();
  grpc.mutable_pipeline()->clear_virtual_stages();
  grpc.mutable_model()->mutable_layers(3)->set_stage(2);
  grpc.mutable_model()->mutable_layers(4)->set_stage(3);
  grpc.mutable_model()->mutable_layers(2)->set_stage(1);
  EXPECT_TRUE(ValidateJobSpec(grpc).ok()) << ValidateJobSpec(grpc);
  ApplyJobSpecDefaults(&grpc);
  EXPECT_EQ(grpc.pipeline().micro_batches(), 1);
  EXPECT_EQ(grpc.pipeline().virtual_stages(), 1);
  EXPECT_TRUE(grpc.model().layers(0).has_stage());
  EXPECT_EQ(grpc.model().layers(0).stage(), 0);
  EXPECT_EQ(grpc.model().layers(1).stage(), 0);
  v1::JobSpec again = grpc;
  ApplyJobSpecDefaults(&again);
  EXPECT_EQ(Canonical(again), Canonical(grpc));

  // Without a pipeline block nothing changes: no pipeline, no stages, no trace.
  absl::StatusOr<v1::JobSpec> plain = ParseJobSpecYaml(kSyntheticSpec, dir_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->has_pipeline());
  EXPECT_FALSE(plain->trace());
  for (const v1::Layer& layer : plain->model().layers()) EXPECT_FALSE(layer.has_stage());
  v1::JobSpec prepared = *plain;
  ASSERT_TRUE(PrepareJobSpec(&prepared).ok());
  EXPECT_FALSE(prepared.has_pipeline());
  EXPECT_EQ(Canonical(prepared), Canonical(*plain));
  EXPECT_INVALID(PipelineLayerChunks(*plain).status(), "pipeline.dim");
}

TEST_F(SpecTest, PipelineParseErrorsNameTheFieldAndLine) {
  struct Case {
    std::string from, to, message;
  };
  for (const Case& c : std::vector<Case>{
           {"micro_batches: 4", "micro_batch: 4", "pipeline: unknown key \"micro_batch\""},
           {"virtual_stages: 1}", "virtual_stages: 1, stages: 2}", "unknown key \"stages\""},
           {"{name: fc1,", "{name: fc1, stages: 1,",
            "model.layers[2] (fc1): unknown key \"stages\""},
           {"trace: true", "traces: true", "unknown key \"traces\""},
           {"micro_batches: 4", "micro_batches: 0", "pipeline.micro_batches: must be >= 1, got 0"},
           {"micro_batches: 4", "micro_batches: -3",
            "pipeline.micro_batches: must be >= 1, got -3"},
           {"micro_batches: 4", "micro_batches: four",
            "pipeline.micro_batches: expected an integer"},
           {"virtual_stages: 1", "virtual_stages: 0",
            "pipeline.virtual_stages: must be >= 1, got 0"},
           {"{dim: pp, schedule: 1F1B,", "{schedule: 1F1B,", "pipeline.dim: is required"},
           {"schedule: 1F1B, ", "", "pipeline.schedule: is required"},
           {"{name: fc1,", "{name: fc1, stage: one,",
            "model.layers[2] (fc1).stage: expected an integer"},
           {"{name: fc1,", "{name: fc1, stage: 99999999999,", "model.layers[2] (fc1).stage"},
           {"trace: true", "trace: sometimes", "trace: expected true or false"},
           {"pipeline: {dim: pp, schedule: 1F1B, micro_batches: 4, virtual_stages: 1}",
            "pipeline: [pp]", "pipeline: expected a mapping"},
       }) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpecYaml(absl::StrReplaceAll(kPipelineSpec, {{c.from, c.to}}), dir_);
    ASSERT_FALSE(spec.ok()) << c.to;
    EXPECT_INVALID(spec.status(), c.message);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr("line ")) << spec.status();
  }
}

TEST_F(SpecTest, PipelineValidationErrorsNameTheField) {
  const std::string two_by_two = "{shape: [2, 2], dim_names: [pp, dp]}";
  struct Case {
    std::vector<std::pair<std::string, std::string>> replace;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           // The block.
           {{{"{dim: pp,", "{dim: px,"}},
            "pipeline.dim: the mesh has no dim named \"px\" (dims: pp)"},
           {{{"schedule: 1F1B", "schedule: 1f1b"}},
            "pipeline.schedule: unknown schedule \"1f1b\"; known: FThenB, 1F1B, VPP"},
           {{{"schedule: 1F1B", "schedule: GPipe"}}, "pipeline.schedule: unknown schedule"},
           {{{"schedule: 1F1B", "schedule: VPP"}},
            "pipeline.virtual_stages: VPP needs virtual_stages > 1"},
           {{{"virtual_stages: 1", "virtual_stages: 2"}},
            "pipeline.virtual_stages: 2 chunks per rank need schedule VPP; 1F1B runs one chunk "
            "per rank"},
           {{{"schedule: 1F1B", "schedule: FThenB"}, {"virtual_stages: 1", "virtual_stages: 2"}},
            "pipeline.virtual_stages: 2 chunks per rank need schedule VPP; FThenB"},
           {{{"micro_batches: 4", "micro_batches: 3"}},
            "pipeline.micro_batches: 1F1B needs at least pp micro-batches (pp 4), got 3"},
           {{{"{shape: [4], dim_names: [pp]}", "{shape: [2], dim_names: [pp]}"},
             {"schedule: 1F1B, micro_batches: 4, virtual_stages: 1",
              "schedule: VPP, micro_batches: 3, virtual_stages: 2"}},
            "pipeline.micro_batches: VPP needs a multiple of pp micro-batches (pp 2), got 3"},
           // Stages.
           {Stages({{"fc0", "0"}, {"fc1", "1"}, {"fc2", "2"}, {"fc3", "4"}}),
            "model.layers[4] (fc3).stage: 4 is out of range for 4 pipeline chunk(s) (pp 4 x "
            "virtual_stages 1): stages are 0..3"},
           {Stages({{"fc0", "-1"}}), "model.layers[0] (fc0).stage: -1 is out of range"},
           {Stages({{"fc0", "0"}, {"fc1", "2"}, {"fc2", "1"}, {"fc3", "3"}}),
            "model.layers[3] (fc2).stage: 1 comes after stage 2 of model.layers[2] (fc1); "
            "stages must not decrease along the model"},
           {Stages({{"fc0", "0"}, {"act0", "1"}, {"fc1", "2"}, {"fc2", "2"}, {"fc3", "3"}}),
            "model.layers: stage 1 has no layer with parameters (only act0); with stages given, "
            "each of the 4 pipeline chunk(s) (pp 4 x virtual_stages 1) needs at least one linear "
            "layer"},
           {Stages({{"fc0", "0"}, {"fc2", "2"}, {"fc3", "3"}}),
            "model.layers: stage 1 has no layer with parameters (no layers)"},
           {Stages({{"fc0", "0"}, {"fc1", "1"}, {"fc2", "2"}}),
            "model.layers: stage 3 has no layer with parameters"},
           {{{"{shape: [4], dim_names: [pp]}", "{shape: [2], dim_names: [pp]}"},
             {"schedule: 1F1B, micro_batches: 4, virtual_stages: 1",
              "schedule: VPP, micro_batches: 4, virtual_stages: 3"}},
            "model.layers: 4 linear layer(s) cannot fill 6 pipeline chunk(s) (pp 2 x "
            "virtual_stages 3); each chunk needs at least one layer with parameters"},
           // Placements along the pipeline dim.
           {{{"{name: fc0, type: linear, in_features: 8, out_features: 8}",
              "{name: fc0, type: linear, in_features: 8, out_features: 8, "
              "placements: {weight: [Shard(1)]}}"}},
            "model.layers[0] (fc0).placements.weight[0]: Shard(1) on mesh dim pp, the pipeline "
            "dim: a parameter lives on its stage's ranks only, so it must be Replicate() there"},
           {{{"{name: fc2, type: linear, in_features: 8, out_features: 8}",
              "{name: fc2, type: linear, in_features: 8, out_features: 8, "
              "placements: {bias: {pp: Partial()}}}"}},
            "model.layers[3] (fc2).placements.bias[0]: Partial(sum) on mesh dim pp"},
           {{{"batch_size: 8", "batch_size: 8\n  placements: [Shard(0)]"}},
            "data.placements[0]: Shard(0) on mesh dim pp, the pipeline dim: the batch must be "
            "Replicate() there"},
           {{{"trace: true", "parallelize: {tp: {dim: pp, plan: {fc0: ColWiseParallel}}}"}},
            "parallelize.tp.dim: pp is the pipeline dim (pipeline.dim); tensor parallelism needs "
            "another mesh dim"},
           // Micro-batches.
           {{{"batch_size: 8", "batch_size: 3"}},
            "data.batch_size: 3 cannot be split into 4 micro-batches (pipeline.micro_batches) "
            "without leaving some empty"},
           {{{"{shape: [4], dim_names: [pp]}", two_by_two}, {"batch_size: 8", "batch_size: 4"}},
            "data.batch_size: 4 in 4 micro-batches (pipeline.micro_batches) gives micro-batches "
            "of 1 sample(s), fewer than the 2 shards each is split into over mesh dim(s) dp "
            "(data.placements [Replicate(), Shard(0)]); every shard of a micro-batch needs at "
            "least one sample"},
           {{{"{shape: [4], dim_names: [pp]}", two_by_two}, {"batch_size: 8", "batch_size: 7"}},
            "data.batch_size: 7 in 4 micro-batches (pipeline.micro_batches) gives micro-batches "
            "of as few as 1 sample(s)"},
       }) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpecYaml(absl::StrReplaceAll(kPipelineSpec, c.replace), dir_);
    ASSERT_TRUE(spec.ok()) << c.message << ": " << spec.status();
    absl::Status s = ValidateJobSpec(*spec);
    EXPECT_INVALID(s, c.message);
    v1::JobSpec prepared = *spec;
    EXPECT_INVALID(PrepareJobSpec(&prepared), c.message);
  }

  // What only a spec from gRPC can hold.
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kPipelineSpec, dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec negative = *spec;
  negative.mutable_pipeline()->set_micro_batches(-2);
  EXPECT_INVALID(ValidateJobSpec(negative), "pipeline.micro_batches: must be >= 1, got -2");
  negative = *spec;
  negative.mutable_pipeline()->set_virtual_stages(-1);
  EXPECT_INVALID(ValidateJobSpec(negative), "pipeline.virtual_stages: must be >= 1, got -1");
  v1::JobSpec no_dim = *spec;
  no_dim.mutable_pipeline()->clear_dim();
  EXPECT_INVALID(ValidateJobSpec(no_dim), "pipeline.dim: is required");
  v1::JobSpec empty_block = *spec;
  empty_block.mutable_pipeline()->Clear();  // present but empty: no pipeline
  EXPECT_TRUE(ValidateJobSpec(empty_block).ok()) << ValidateJobSpec(empty_block);

  // A stage without a pipeline.
  absl::StatusOr<v1::JobSpec> plain = ParseJobSpecYaml(
      absl::StrReplaceAll(kSyntheticSpec, {{"{name: fc1,", "{name: fc1, stage: 0,"}}), dir_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_INVALID(ValidateJobSpec(*plain),
                 "model.layers[2] (fc1).stage: stages need a pipeline block");
}

TEST_F(SpecTest, PipelineCombinationsThatAreValid) {
  for (const std::vector<std::pair<std::string, std::string>>& replace :
       std::vector<std::vector<std::pair<std::string, std::string>>>{
           // FThenB runs with fewer micro-batches than stages, even one.
           {{"schedule: 1F1B, micro_batches: 4", "schedule: FThenB, micro_batches: 1"}},
           {{"schedule: 1F1B, micro_batches: 4", "schedule: FThenB, micro_batches: 3"}},
           // Uneven micro-batches: 9 = 2 + 2 + 2 + 3.
           {{"batch_size: 8", "batch_size: 9"}},
           // VPP: 2 x 2 chunks, micro-batches a multiple of pp.
           {{"{shape: [4], dim_names: [pp]}", "{shape: [2], dim_names: [pp]}"},
            {"schedule: 1F1B, micro_batches: 4, virtual_stages: 1",
             "schedule: VPP, micro_batches: 4, virtual_stages: 2"}},
           // pp x dp with the default batch placement (Shard(0) on dp, Replicate() on pp), and
           // parameters sharded on other dims but Replicate() on pp.
           {{"{shape: [4], dim_names: [pp]}", "{shape: [2, 2], dim_names: [dp, pp]}"}},
           {{"{shape: [4], dim_names: [pp]}", "{shape: [2, 2], dim_names: [pp, mp]}"},
            {"trace: true", "parallelize: {mp: {dim: mp, plan: {fc0: ColWiseParallel, "
                            "fc1: RowWiseParallel}}}"}},
           {{"{name: fc0, type: linear, in_features: 8, out_features: 8}",
             "{name: fc0, type: linear, in_features: 8, out_features: 8, "
             "placements: {weight: [Replicate()], bias: {pp: Replicate()}}}"}},
           // pp of size 1 and a pipeline dim with a default name.
           {{"{shape: [4], dim_names: [pp]}", "{shape: [1], dim_names: [pp]}"}},
           {{"{shape: [4], dim_names: [pp]}", "{shape: [4]}"}, {"{dim: pp,", "{dim: d0,"}},
           // Stages given on some layers only.
           Stages({{"fc1", "1"}, {"fc2", "2"}, {"fc3", "3"}}),
       }) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpecYaml(absl::StrReplaceAll(kPipelineSpec, replace), dir_);
    ASSERT_TRUE(spec.ok()) << replace[0].second << ": " << spec.status();
    EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << replace[0].second << ": "
                                             << ValidateJobSpec(*spec);
  }
}

TEST_F(SpecTest, PipelineChunksSplitByParameterCount) {
  // Linear layers of 1 x w weights (no bias) hold w parameters.
  auto model = [](const std::vector<int64_t>& widths, int pp, int virtual_stages) {
    v1::JobSpec spec;
    spec.mutable_mesh()->add_shape(pp);
    spec.mutable_mesh()->add_dim_names("pp");
    spec.mutable_pipeline()->set_dim("pp");
    spec.mutable_pipeline()->set_virtual_stages(virtual_stages);
    for (size_t i = 0; i < widths.size(); ++i) {
      v1::Layer* layer = spec.mutable_model()->add_layers();
      layer->set_name(absl::StrCat("l", i));
      if (widths[i] == 0) {
        layer->set_type("relu");
        continue;
      }
      layer->set_type("linear");
      layer->set_in_features(1);
      layer->set_out_features(widths[i]);
      layer->set_bias(false);
    }
    return spec;
  };
  // Smallest largest chunk: 100 | 1 1 1 | 100.
  EXPECT_EQ(Chunks(model({100, 1, 1, 1, 100}, 3, 1)), (std::vector<int>{0, 1, 1, 1, 2}));
  // 102 | 101 beats 103 | 100.
  EXPECT_EQ(Chunks(model({100, 1, 1, 1, 100}, 2, 1)), (std::vector<int>{0, 0, 0, 1, 1}));
  // Equal layers: equal chunks; ties fill earlier chunks first.
  EXPECT_EQ(Chunks(model({5, 5, 5, 5, 5, 5}, 3, 1)), (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(Chunks(model({5, 5, 5}, 2, 1)), (std::vector<int>{0, 0, 1}));
  // As many chunks as layers: one each, whatever the weights.
  EXPECT_EQ(Chunks(model({1, 1000, 1, 1}, 4, 1)), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(Chunks(model({1000, 1, 1, 1}, 2, 2)), (std::vector<int>{0, 1, 2, 3}));
  // Layers without parameters go with the layer before them; leading ones with chunk 0.
  EXPECT_EQ(Chunks(model({0, 4, 0, 4, 0, 4, 0, 4, 0}, 2, 1)),
            (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1, 1}));
  // Fewer linear layers than chunks; huge features do not overflow.
  EXPECT_INVALID(PipelineLayerChunks(model({4, 0, 4}, 3, 1)).status(),
                 "model.layers: 2 linear layer(s) cannot fill 3 pipeline chunk(s)");
  v1::JobSpec huge = model({4, 4, 4}, 2, 1);
  for (v1::Layer& layer : *huge.mutable_model()->mutable_layers()) {
    layer.set_in_features(int64_t{1} << 62);
    layer.set_out_features(int64_t{1} << 62);
  }
  EXPECT_EQ(Chunks(huge), (std::vector<int>{0, 0, 1}));
  // A dim the mesh lacks.
  v1::JobSpec other = model({4, 4}, 2, 1);
  other.mutable_pipeline()->set_dim("pq");
  EXPECT_INVALID(PipelineLayerChunks(other).status(), "pipeline.dim: the mesh has no dim");
}

TEST_F(SpecTest, PipelineExamplesAreValid) {
  absl::StatusOr<v1::JobSpec> pp = LoadJobSpecFile("examples/pipeline.yaml");
  ASSERT_TRUE(pp.ok()) << pp.status();
  EXPECT_TRUE(ValidateJobSpec(*pp).ok()) << ValidateJobSpec(*pp);
  EXPECT_EQ(WorldSize(*pp), 4);
  EXPECT_EQ(pp->pipeline().schedule(), "1F1B");
  EXPECT_EQ(pp->pipeline().micro_batches(), 8);
  EXPECT_EQ(pp->model().layers_size(), 15);
  // Two linear layers (and the relus after them) per stage.
  EXPECT_EQ(Chunks(*pp), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3}));
  // The issue's other schedules on the same model.
  for (const auto& [schedule, micro_batches, virtual_stages] :
       std::vector<std::tuple<std::string, int, int>>{
           {"FThenB", 8, 1}, {"1F1B", 4, 1}, {"VPP", 8, 2}}) {
    v1::JobSpec s = *pp;
    s.mutable_pipeline()->set_schedule(schedule);
    s.mutable_pipeline()->set_micro_batches(micro_batches);
    s.mutable_pipeline()->set_virtual_stages(virtual_stages);
    EXPECT_TRUE(ValidateJobSpec(s).ok()) << schedule << ": " << ValidateJobSpec(s);
  }
  v1::JobSpec vpp = *pp;
  vpp.mutable_pipeline()->set_schedule("VPP");
  vpp.mutable_pipeline()->set_virtual_stages(2);
  EXPECT_EQ(Chunks(vpp), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7}));

  absl::StatusOr<v1::JobSpec> dp = LoadJobSpecFile("examples/pipeline_dp.yaml");
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_TRUE(ValidateJobSpec(*dp).ok()) << ValidateJobSpec(*dp);
  EXPECT_EQ(WorldSize(*dp), 4);
  EXPECT_EQ(FormatPlacements(dp->data().placements()), "[Replicate(), Shard(0)]");
  EXPECT_EQ(Chunks(*dp), (std::vector<int>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1}));
  // pp x mp on the same mesh: the planner engineer's third integration case.
  v1::JobSpec mp = *dp;
  mp.mutable_mesh()->set_dim_names(1, "mp");
  mp.mutable_data()->clear_placements();
  (*mp.mutable_parallelize())["mp"].set_dim("mp");
  (*(*mp.mutable_parallelize())["mp"].mutable_plan())["fc0"] = "ColWiseParallel";
  (*(*mp.mutable_parallelize())["mp"].mutable_plan())["fc1"] = "RowWiseParallel";
  ASSERT_TRUE(PrepareJobSpec(&mp).ok()) << PrepareJobSpec(&mp);
  EXPECT_EQ(Placements(mp, 0, "weight"), "[Replicate(), Shard(1)]");
}

TEST_F(SpecTest, NeverCrashesOnGarbledPipelineSpecs) {
  std::mt19937 rng(11);
  const std::string punct = "{}[]:,-'\"&*!|>#%@` \n\t\x01\xff" "0123456789";
  const std::string text = absl::StrReplaceAll(
      kPipelineSpec, Stages({{"fc0", "0"}, {"fc1", "1"}, {"fc2", "2"}, {"fc3", "3"}}));
  for (size_t n = 0; n <= text.size(); ++n) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(text.substr(0, n), dir_);
    if (spec.ok()) (void)ValidateJobSpec(*spec);
  }
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string s = Garble(text, punct, &rng);
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(s, dir_);
    if (!spec.ok()) continue;
    if (ValidateJobSpec(*spec).ok() && !spec->pipeline().dim().empty()) {
      EXPECT_TRUE(PipelineLayerChunks(*spec).ok()) << s;
    }
  }
  // Extreme values from gRPC.
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kPipelineSpec, dir_);
  ASSERT_TRUE(spec.ok());
  for (int32_t v : {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
    v1::JobSpec s = *spec;
    s.mutable_pipeline()->set_micro_batches(v);
    (void)ValidateJobSpec(s);
    s = *spec;
    s.mutable_pipeline()->set_virtual_stages(v);
    s.mutable_pipeline()->set_schedule("VPP");
    (void)ValidateJobSpec(s);
    (void)PipelineLayerChunks(s);
    s = *spec;
    s.mutable_model()->mutable_layers(4)->set_stage(v);
    EXPECT_FALSE(ValidateJobSpec(s).ok());
  }
}

TEST(PlacementTest, ParsesAndFormatsEveryForm) {
  struct Case {
    std::string text, canonical;
  };
  for (const Case& c : std::vector<Case>{{"Replicate()", "Replicate()"},
                                         {"Shard(1)", "Shard(1)"},
                                         {"Shard(-1)", "Shard(-1)"},
                                         {"Shard(0)", "Shard(0)"},
                                         {"Partial()", "Partial(sum)"},
                                         {"Partial(sum)", "Partial(sum)"},
                                         {"Partial(avg)", "Partial(avg)"},
                                         {" Shard( 2 ) ", "Shard(2)"}}) {
    absl::StatusOr<v1::Placement> p = ParsePlacement(c.text);
    ASSERT_TRUE(p.ok()) << c.text << ": " << p.status();
    EXPECT_EQ(FormatPlacement(*p), c.canonical);
    absl::StatusOr<v1::Placement> again = ParsePlacement(FormatPlacement(*p));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->SerializeAsString(), p->SerializeAsString());
  }
  absl::StatusOr<v1::Placement> shard = ParsePlacement("Shard(-1)");
  EXPECT_EQ(shard->kind(), v1::Placement::SHARD);
  EXPECT_EQ(shard->axis(), -1);
  EXPECT_EQ(ParsePlacement("Partial(avg)")->reduce(), v1::Placement::AVG);

  for (const char* bad : {"", "Replicate", "Replicate(1)", "Shard()", "Shard(a)", "Shard(1",
                          "Partial(max)", "shard(0)", "S(0)", "Shard(99999999999)", ")("}) {
    absl::StatusOr<v1::Placement> p = ParsePlacement(bad);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }

  google::protobuf::RepeatedPtrField<v1::Placement> list;
  *list.Add() = *ParsePlacement("Shard(0)");
  *list.Add() = *ParsePlacement("Replicate()");
  EXPECT_EQ(FormatPlacements(list), "[Shard(0), Replicate()]");
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

class CheckpointSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/ckpt_spec_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<v1::JobSpec> Parse(const std::string& extra, const std::string& train =
                                                                   "train: {steps: 3}") {
    return ParseJobSpecYaml(absl::StrReplaceAll(kSyntheticSpec, {{"train: {steps: 3}", train}}) +
                                extra,
                            dir_);
  }

  // A committed checkpoint of the synthetic spec's model (sgd: parameters only) at `step`.
  void Commit(const std::string& dir, int64_t step,
              const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
    std::vector<std::vector<float>> data;
    std::vector<checkpoint::ShardPiece> pieces;
    for (const auto& [name, shape] : tensors) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      data.emplace_back(n, 0.25f);
      pieces.push_back({name, shape, std::vector<int64_t>(shape.size(), 0), shape,
                        data.back().data()});
    }
    auto chunks = checkpoint::WriteShard(checkpoint::StagingDir(dir, step), 0, pieces);
    ASSERT_TRUE(chunks.ok()) << chunks.status();
    ASSERT_TRUE(checkpoint::CommitCheckpoint(dir, step, *chunks, 3).ok());
  }

  const std::vector<std::pair<std::string, std::vector<int64_t>>> kParams = {
      {"fc0.weight", {8, 16}}, {"fc0.bias", {16}}, {"fc1.weight", {16, 4}}, {"fc1.bias", {4}}};
  std::string dir_;
};

TEST_F(CheckpointSpecTest, ParsesTheBlockWithDefaultsAndAbsoluteDir) {
  absl::StatusOr<v1::JobSpec> spec = Parse("checkpoint: {dir: ckpt}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().dir(), dir_ + "/ckpt");
  EXPECT_EQ(spec->checkpoint().every(), kDefaultCheckpointEvery);
  EXPECT_EQ(spec->checkpoint().keep(), kDefaultCheckpointKeep);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  spec = Parse("checkpoint: {dir: /abs/ckpt, every: 7, keep: 1}\n", "train: {steps: 3, resume: false}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().dir(), "/abs/ckpt");
  EXPECT_EQ(spec->checkpoint().every(), 7);
  EXPECT_EQ(spec->checkpoint().keep(), 1);
  EXPECT_FALSE(spec->train().resume());
}

TEST_F(CheckpointSpecTest, ErrorsNameTheField) {
  EXPECT_INVALID(Parse("checkpoint: {dir: c, every: 0}\n").status(), "checkpoint.every");
  EXPECT_INVALID(Parse("checkpoint: {dir: c, keep: -1}\n").status(), "checkpoint.keep");
  EXPECT_INVALID(Parse("checkpoint: {every: 2}\n").status(), "checkpoint.dir");
  EXPECT_INVALID(Parse("checkpoint: {dir: c, evry: 2}\n").status(), "evry");

  absl::StatusOr<v1::JobSpec> spec = Parse("", "train: {steps: 3, resume: true}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_INVALID(ValidateJobSpec(*spec), "train.resume: needs checkpoint.dir");

  spec = Parse("checkpoint: {dir: empty}\n", "train: {steps: 3, resume: true}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_INVALID(ValidateJobSpec(*spec), "train.resume: checkpoint.dir");
  EXPECT_INVALID(ValidateJobSpec(*spec), "no committed checkpoint");

  std::filesystem::create_directories(dir_ + "/nothing");
  spec = Parse("init_from: nothing\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_INVALID(ValidateJobSpec(*spec), "init_from");
  EXPECT_INVALID(ValidateJobSpec(*spec), "without a committed checkpoint");

  v1::JobSpec relative = *Parse("checkpoint: {dir: c}\n");
  relative.mutable_checkpoint()->set_dir("relative/c");
  EXPECT_INVALID(ValidateJobSpec(relative), "checkpoint.dir");
}

TEST_F(CheckpointSpecTest, ResumeAndInitFromCheckTheCheckpoint) {
  Commit(dir_ + "/ckpt", 2, kParams);
  absl::StatusOr<v1::JobSpec> spec =
      Parse("checkpoint: {dir: ckpt}\n", "train: {steps: 3, resume: true}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  absl::StatusOr<CheckpointLoad> load = ResolveCheckpointLoad(*spec);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->step_dir, dir_ + "/ckpt/step-2");
  EXPECT_EQ(load->step, 2);
  EXPECT_TRUE(load->optimizer_states);

  // Nothing left to run.
  spec = Parse("checkpoint: {dir: ckpt}\n", "train: {steps: 2, resume: true}");
  EXPECT_INVALID(ValidateJobSpec(*spec), "train.steps");
  // AdamW needs its states, which an sgd checkpoint lacks.
  spec = Parse("checkpoint: {dir: ckpt}\n", "train: {steps: 3, resume: true}");
  spec->mutable_optimizer()->set_type("adamw");
  spec->mutable_optimizer()->add_betas(0.9);
  spec->mutable_optimizer()->add_betas(0.999);
  EXPECT_INVALID(ValidateJobSpec(*spec), "has no tensor fc0.weight/adamw.m");

  // init_from: the checkpoint dir or a step folder; parameters only.
  for (const std::string& from : {"ckpt", "ckpt/step-2"}) {
    spec = Parse("init_from: " + from + "\n");
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
    load = ResolveCheckpointLoad(*spec);
    ASSERT_TRUE(load.ok()) << load.status();
    EXPECT_EQ(load->step_dir, dir_ + "/ckpt/step-2");
    EXPECT_EQ(load->step, 0);
    EXPECT_FALSE(load->optimizer_states);
  }
  // A shape the model does not have.
  Commit(dir_ + "/other", 1, {{"fc0.weight", {8, 8}}});
  spec = Parse("init_from: other\n");
  EXPECT_INVALID(ValidateJobSpec(*spec), "fc0.weight has shape [8,8], the model needs [8,16]");
}

TEST(CheckpointNamesTest, OptimizerStatesAreNamedAfterTheirParameter) {
  EXPECT_EQ(CheckpointStateName("fc0.weight", "adamw", "m"), "fc0.weight/adamw.m");
  EXPECT_EQ(OptimizerStateNames("adamw"), (std::vector<std::string>{"m", "v"}));
  EXPECT_TRUE(OptimizerStateNames("sgd").empty());
}

}  // namespace
}  // namespace weft
