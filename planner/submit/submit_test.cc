#include "planner/submit/submit.h"

#include <fstream>
#include <string>
#include <vector>

#include "common/jobspec/defaults.h"
#include "common/jobspec/jobspec_testing.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/parallelize.h"
#include "common/jobspec/placements.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml.h"

// What a submitted spec is checked for, as SubmitJob checks it (PrepareAndPlan): every error
// names the field, the model's included (building the model is validating it).
namespace weft {
namespace {

using namespace jobspec_testing;  // NOLINT: the shared specs and fixtures

// SubmitJob's checks on a copy of spec.
absl::Status Check(const v1::JobSpec& spec) {
  v1::JobSpec copy = spec;
  return planner::PrepareAndPlan(&copy, "check", 0).status();
}

// The pipeline chunk of each layer, as the planner splits the model.
std::vector<int> Chunks(const v1::JobSpec& spec) {
  v1::JobSpec copy = spec;
  absl::StatusOr<std::shared_ptr<const planner::Plan>> plan =
      planner::PrepareAndPlan(&copy, "chunks", 0);
  EXPECT_TRUE(plan.ok()) << plan.status();
  std::vector<int> chunks;
  if (plan.ok()) {
    for (const planner::Layer& l : (*plan)->planned().graph.layers) chunks.push_back(l.chunk);
  }
  return chunks;
}

TEST_F(SpecTest, ExampleQuickstartIsValid) {
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile("examples/quickstart.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);
  EXPECT_EQ(WorldSize(*spec), 4);
  EXPECT_EQ(spec->model().layers(0).in_features(), 1024);
  EXPECT_EQ(spec->model().layers(0).out_features(), 4096);
  EXPECT_EQ(spec->data().batch_size(), 32);
  EXPECT_EQ(spec->train().seed(), 1234u);
}

TEST_F(SpecTest, NeverCrashesOnTruncatedOrGarbledInput) {
  const std::string text = kFullSpec;
  // Every prefix of the full spec.
  for (size_t n = 0; n <= text.size(); ++n) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(text.substr(0, n), dir_);
    if (spec.ok()) (void)Check(*spec);
  }
  // Random byte flips, deletions and insertions of YAML punctuation.
  std::mt19937 rng(42);
  const std::string punct = "{}[]:,-'\"&*!|>#%@` \n\t\x01\xff";
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string s = Garble(text, punct, &rng);
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(s, dir_);
    if (spec.ok()) (void)Check(*spec);
  }
  // Deep nesting and aliases.
  EXPECT_FALSE(ParseJobSpecYaml(std::string(10000, '[') , dir_).ok());
  EXPECT_FALSE(ParseJobSpecYaml("a: &x [*x]", dir_).ok());
  // Empty and default protos.
  EXPECT_FALSE(Check(v1::JobSpec()).ok());
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
           {{{"device: cpu", "device: cpu\nstorage: fp16"}},
            "storage: unknown storage \"fp16\"; known: f32, bf16"},
           {{{"name: tiny", "name: \"\""}}, "name: must not be empty"},
       }) {
    absl::StatusOr<v1::JobSpec> spec = Full(c.replace);
    ASSERT_TRUE(spec.ok()) << c.message << ": " << spec.status();
    absl::Status s = Check(*spec);
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
  EXPECT_INVALID(Check(empty), "model.layers: the model needs at least one layer");
  v1::JobSpec relu_only = *spec;
  relu_only.mutable_model()->clear_layers();
  relu_only.mutable_model()->add_layers()->CopyFrom(spec->model().layers(1));
  relu_only.clear_init_from();
  EXPECT_INVALID(Check(relu_only), "model.layers: the model has no linear layer");
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
  EXPECT_INVALID(Check(*spec),
                 "data.batch_size: 3 is smaller than the 4 shards the batch is split into over "
                 "mesh dim(s) dp, mp");
  for (int64_t batch : {4, 6, 7, 8}) {
    spec->mutable_data()->set_batch_size(batch);
    EXPECT_TRUE(Check(*spec).ok()) << batch << ": " << Check(*spec);
  }
  // Sharding the feature axis does not constrain the batch, but the features must cover the
  // shards: 8 input and 4 label features over 4 shards.
  spec->mutable_data()->set_batch_size(3);
  spec->mutable_data()->mutable_placements(0)->set_axis(-1);
  spec->mutable_data()->mutable_placements(1)->set_axis(-1);
  EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);
  spec->mutable_data()->set_batch_size(1);
  EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);

  absl::StatusOr<v1::JobSpec> narrow =
      Full({{"{shape: [4], dim_names: [dp]}", "{shape: [8], dim_names: [dp]}"},
            {"placements: [Shard(0)]", "placements: [Shard(-1)]"}});
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_INVALID(Check(*narrow),
                 "data.placements: [Shard(-1)] splits axis 1 of the label batch [8,4] (length 4) "
                 "into 8 shards over mesh dim(s) dp; some shards would be empty");
}

TEST_F(SpecTest, PartialPlacementsAreAllowedForParametersAndTheBatch) {
  absl::StatusOr<v1::JobSpec> spec =
      Full({{"weight: [Replicate()]", "weight: [Partial(sum)]"},
            {"bias: [Replicate()]", "bias: [Partial(avg)]"},
            {"placements: [Shard(0)]", "placements: [Partial()]"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);
  EXPECT_EQ(FormatPlacements(spec->data().placements()), "[Partial(sum)]");
}

TEST_F(SpecTest, ParameterShardsMustNotBeEmpty) {
  // fc1.weight is [16, 4]: Shard(1) over dp = 8 leaves four ranks without columns.
  absl::StatusOr<v1::JobSpec> spec =
      Full({{"{shape: [4], dim_names: [dp]}", "{shape: [8], dim_names: [dp]}"},
            {"weight: [Replicate()]", "weight: [Shard(1)]"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_INVALID(Check(*spec),
                 "model.layers[2] (fc1).placements.weight: [Shard(1)] splits axis 1 of weight "
                 "[16,4] (length 4) into 8 shards over mesh dim(s) dp");
  // Uneven is fine: 16 rows over 8 and 4 columns over 4 are even, 4 columns over 3 are not.
  spec->mutable_mesh()->set_shape(0, 3);
  spec->mutable_data()->set_batch_size(8);
  EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);
}

TEST_F(SpecTest, DataFileErrors) {
  absl::StatusOr<v1::JobSpec> spec = Full();
  ASSERT_TRUE(spec.ok());

  std::filesystem::remove(Path("inputs.npy"));
  absl::Status s = Check(*spec);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(absl::StrCat("data.input: ", Path("inputs.npy"), ": no such file")));

  WriteText("inputs.npy", "this is not an npy file at all");
  EXPECT_INVALID(Check(*spec), "data.input");

  WriteNpy("inputs.npy", {32, 7});
  EXPECT_INVALID(Check(*spec),
                 "model.layers[0] (fc0).in_features: 8 does not match the input's last dimension 7");

  WriteNpy("inputs.npy", {31, 8});
  EXPECT_INVALID(Check(*spec), "data.label");

  WriteNpy("inputs.npy", {32, 8});
  WriteNpy("labels.npy", {32, 5});
  EXPECT_INVALID(Check(*spec), "data.label: samples of shape [5] do not match");

  WriteNpy("labels.npy", {32});
  EXPECT_INVALID(Check(*spec), "data.label");

  WriteNpy("labels.npy", {32, 4});
  spec->mutable_data()->clear_label();
  EXPECT_INVALID(Check(*spec), "data.label: is required");
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
    EXPECT_INVALID(Check(*spec), c.message);
  }
}

TEST_F(SpecTest, InitFromErrors) {
  absl::StatusOr<v1::JobSpec> spec = Full();
  ASSERT_TRUE(spec.ok());

  WriteInit(/*fc0_weight=*/{16, 8});
  EXPECT_INVALID(Check(*spec),
                 "fc0.weight has shape [16,8], the model needs [8,16]");
  EXPECT_INVALID(Check(*spec), "init_from");

  std::vector<float> zeros(8 * 16, 0.0f);  // the larger of the two tensors
  ASSERT_TRUE(SafetensorsFile::Write(Path("init.safetensors"),
                                     {{"fc0.weight", {8, 16}, zeros.data()},
                                      {"fc1.weight", {16, 4}, zeros.data()}})
                  .ok());
  EXPECT_INVALID(Check(*spec), "has no tensor fc1.bias");

  // Malformed: a header length pointing past the end of the file, then plain garbage.
  WriteText("init.safetensors", std::string("\xff\xff\xff\x00\x00\x00\x00\x00{}", 10));
  EXPECT_INVALID(Check(*spec), "init_from");
  WriteText("init.safetensors", std::string("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":", 13));
  EXPECT_INVALID(Check(*spec), "init_from");
  WriteText("init.safetensors", "");
  EXPECT_INVALID(Check(*spec), "init_from");

  std::filesystem::remove(Path("init.safetensors"));
  absl::Status s = Check(*spec);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("init_from: "));
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
    EXPECT_INVALID(Check(*spec), c.message);
  }
}

TEST_F(SpecTest, TensorParallelExamplesAreValid) {
  absl::StatusOr<v1::JobSpec> tp = LoadJobSpecFile("examples/tensor_parallel.yaml");
  ASSERT_TRUE(tp.ok()) << tp.status();
  EXPECT_TRUE(Check(*tp).ok()) << Check(*tp);
  EXPECT_EQ(WorldSize(*tp), 4);
  EXPECT_EQ(Placements(*tp, 0, "weight"), "[Shard(1)]");
  EXPECT_EQ(Placements(*tp, 0, "bias"), "[Shard(0)]");
  EXPECT_EQ(Placements(*tp, 2, "weight"), "[Shard(0)]");
  EXPECT_EQ(Placements(*tp, 2, "bias"), "[Replicate()]");

  absl::StatusOr<v1::JobSpec> dpmp = LoadJobSpecFile("examples/dp_mp.yaml");
  ASSERT_TRUE(dpmp.ok()) << dpmp.status();
  EXPECT_TRUE(Check(*dpmp).ok()) << Check(*dpmp);
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
      if (spec.ok()) (void)Check(*spec);
    }
    for (int iter = 0; iter < 2000; ++iter) {
      const std::string s = Garble(text, punct, &rng);
      absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(s, dir_);
      if (!spec.ok()) continue;
      (void)Check(*spec);
      v1::JobSpec copy = *spec;
      (void)ResolveDataShapes(&copy);
    }
  }
  // A gRPC spec with parallelize and a mesh without names, or an empty one.
  v1::JobSpec bare;
  (*bare.mutable_parallelize())["x"].set_dim("d0");
  (*(*bare.mutable_parallelize())["x"].mutable_plan())["fc0"] = "ColWiseParallel";
  EXPECT_FALSE(Check(bare).ok());
  EXPECT_FALSE(ApplyParallelize(&bare).ok());
  bare.mutable_mesh()->add_shape(2);
  EXPECT_INVALID(ApplyParallelize(&bare), "parallelize.x.plan.fc0: the model has no layer");
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
  EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);
  EXPECT_EQ(Chunks(*spec), want);

  // Round trip through the wire, as SubmitJob receives it: the same spec, valid, and preparing
  // it changes nothing.
  v1::JobSpec wire;
  ASSERT_TRUE(wire.ParseFromString(spec->SerializeAsString()));
  EXPECT_EQ(Canonical(wire), Canonical(*spec));
  EXPECT_TRUE(wire.model().layers(1).has_stage());
  EXPECT_TRUE(Check(wire).ok()) << Check(wire);
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
    EXPECT_TRUE(Check(*s).ok()) << Check(*s);
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
            "data.batch_size: 3 cannot be split into 4 micro-batches (train.micro_batches) "
            "without leaving some empty"},
           {{{"{shape: [4], dim_names: [pp]}", two_by_two}, {"batch_size: 8", "batch_size: 4"}},
            "data.batch_size: 4 in 4 micro-batches (train.micro_batches) gives micro-batches "
            "of 1 sample(s), fewer than the 2 shards each is split into over mesh dim(s) dp "
            "(data.placements [Replicate(), Shard(0)]); every shard of a micro-batch needs at "
            "least one sample"},
           {{{"{shape: [4], dim_names: [pp]}", two_by_two}, {"batch_size: 8", "batch_size: 7"}},
            "data.batch_size: 7 in 4 micro-batches (train.micro_batches) gives micro-batches "
            "of as few as 1 sample(s)"},
           // One setting, two names: the same value under both is fine, two values are not.
           {{{"train: {steps: 3}", "train: {steps: 3, micro_batches: 2}"}},
            "train.micro_batches: 2 and pipeline.micro_batches: 4 are one setting (the "
            "micro-batches of a step) with two values; give one"},
       }) {
    absl::StatusOr<v1::JobSpec> spec =
        ParseJobSpecYaml(absl::StrReplaceAll(kPipelineSpec, c.replace), dir_);
    ASSERT_TRUE(spec.ok()) << c.message << ": " << spec.status();
    absl::Status s = Check(*spec);
    EXPECT_INVALID(s, c.message);
    // Where the checks before the model already reject the spec, it is for the same field.
    v1::JobSpec prepared = *spec;
    const absl::Status before_model = PrepareJobSpec(&prepared);
    if (!before_model.ok()) EXPECT_INVALID(before_model, c.message);
  }

  // What only a spec from gRPC can hold.
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kPipelineSpec, dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec negative = *spec;
  negative.mutable_pipeline()->set_micro_batches(-2);
  EXPECT_INVALID(Check(negative), "pipeline.micro_batches: must be >= 1, got -2");
  negative = *spec;
  negative.mutable_pipeline()->set_virtual_stages(-1);
  EXPECT_INVALID(Check(negative), "pipeline.virtual_stages: must be >= 1, got -1");
  v1::JobSpec no_dim = *spec;
  no_dim.mutable_pipeline()->clear_dim();
  EXPECT_INVALID(Check(no_dim), "pipeline.dim: is required");
  v1::JobSpec empty_block = *spec;
  empty_block.mutable_pipeline()->Clear();  // present but empty: no pipeline
  EXPECT_TRUE(Check(empty_block).ok()) << Check(empty_block);

  // A stage without a pipeline.
  absl::StatusOr<v1::JobSpec> plain = ParseJobSpecYaml(
      absl::StrReplaceAll(kSyntheticSpec, {{"{name: fc1,", "{name: fc1, stage: 0,"}}), dir_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_INVALID(Check(*plain),
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
    EXPECT_TRUE(Check(*spec).ok()) << replace[0].second << ": "
                                             << Check(*spec);
  }
}

TEST_F(SpecTest, PipelineExamplesAreValid) {
  absl::StatusOr<v1::JobSpec> pp = LoadJobSpecFile("examples/pipeline.yaml");
  ASSERT_TRUE(pp.ok()) << pp.status();
  EXPECT_TRUE(Check(*pp).ok()) << Check(*pp);
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
    EXPECT_TRUE(Check(s).ok()) << schedule << ": " << Check(s);
  }
  v1::JobSpec vpp = *pp;
  vpp.mutable_pipeline()->set_schedule("VPP");
  vpp.mutable_pipeline()->set_virtual_stages(2);
  EXPECT_EQ(Chunks(vpp), (std::vector<int>{0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7}));

  absl::StatusOr<v1::JobSpec> dp = LoadJobSpecFile("examples/pipeline_dp.yaml");
  ASSERT_TRUE(dp.ok()) << dp.status();
  EXPECT_TRUE(Check(*dp).ok()) << Check(*dp);
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
    if (spec.ok()) (void)Check(*spec);
  }
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string s = Garble(text, punct, &rng);
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(s, dir_);
    if (!spec.ok()) continue;
    if (Check(*spec).ok() && !spec->pipeline().dim().empty()) {
      EXPECT_FALSE(Chunks(*spec).empty()) << s;
    }
  }
  // Extreme values from gRPC.
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kPipelineSpec, dir_);
  ASSERT_TRUE(spec.ok());
  for (int32_t v : {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}) {
    v1::JobSpec s = *spec;
    s.mutable_pipeline()->set_micro_batches(v);
    (void)Check(s);
    s = *spec;
    s.mutable_pipeline()->set_virtual_stages(v);
    s.mutable_pipeline()->set_schedule("VPP");
    (void)Check(s);
    s = *spec;
    s.mutable_model()->mutable_layers(4)->set_stage(v);
    EXPECT_FALSE(Check(s).ok());
  }
}

TEST_F(CheckpointSpecTest, ErrorsNameTheField) {
  EXPECT_INVALID(Parse("checkpoint: {dir: c, every: 0}\n").status(), "checkpoint.every");
  EXPECT_INVALID(Parse("checkpoint: {dir: c, keep: -1}\n").status(), "checkpoint.keep");
  EXPECT_INVALID(Parse("checkpoint: {every: 2}\n").status(), "checkpoint.dir");
  EXPECT_INVALID(Parse("checkpoint: {dir: c, evry: 2}\n").status(), "evry");

  absl::StatusOr<v1::JobSpec> spec = Parse("", "train: {steps: 3, resume: true}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_INVALID(Check(*spec), "train.resume: needs checkpoint.dir");

  spec = Parse("checkpoint: {dir: empty}\n", "train: {steps: 3, resume: true}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_INVALID(Check(*spec), "train.resume: checkpoint.dir");
  EXPECT_INVALID(Check(*spec), "no committed checkpoint");

  std::filesystem::create_directories(dir_ + "/nothing");
  spec = Parse("init_from: nothing\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_INVALID(Check(*spec), "init_from");
  EXPECT_INVALID(Check(*spec), "without a committed checkpoint");

  v1::JobSpec relative = *Parse("checkpoint: {dir: c}\n");
  relative.mutable_checkpoint()->set_dir("relative/c");
  EXPECT_INVALID(Check(relative), "checkpoint.dir");
}

TEST_F(CheckpointSpecTest, ResumeAndInitFromCheckTheCheckpoint) {
  Commit(dir_ + "/ckpt", 2, kParams);
  absl::StatusOr<v1::JobSpec> spec =
      Parse("checkpoint: {dir: ckpt}\n", "train: {steps: 3, resume: true}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);
  absl::StatusOr<CheckpointLoad> load = ResolveCheckpointLoad(*spec);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->step_dir, dir_ + "/ckpt/step-2");
  EXPECT_EQ(load->step, 2);
  EXPECT_TRUE(load->optimizer_states);

  // Nothing left to run.
  spec = Parse("checkpoint: {dir: ckpt}\n", "train: {steps: 2, resume: true}");
  EXPECT_INVALID(Check(*spec), "train.steps");
  // AdamW needs its states, which an sgd checkpoint lacks.
  spec = Parse("checkpoint: {dir: ckpt}\n", "train: {steps: 3, resume: true}");
  spec->mutable_optimizer()->set_type("adamw");
  spec->mutable_optimizer()->add_betas(0.9);
  spec->mutable_optimizer()->add_betas(0.999);
  EXPECT_INVALID(Check(*spec), "has no tensor fc0.weight/adamw.m");

  // init_from: the checkpoint dir or a step folder; parameters only.
  for (const std::string& from : {"ckpt", "ckpt/step-2"}) {
    spec = Parse("init_from: " + from + "\n");
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);
    load = ResolveCheckpointLoad(*spec);
    ASSERT_TRUE(load.ok()) << load.status();
    EXPECT_EQ(load->step_dir, dir_ + "/ckpt/step-2");
    EXPECT_EQ(load->step, 0);
    EXPECT_FALSE(load->optimizer_states);
  }
  // A shape the model does not have.
  Commit(dir_ + "/other", 1, {{"fc0.weight", {8, 8}}});
  spec = Parse("init_from: other\n");
  EXPECT_INVALID(Check(*spec), "fc0.weight has shape [8,8], the model needs [8,16]");
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
  EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);
  EXPECT_EQ(Chunks(*spec), (std::vector<int>{0, 0, 1, 2, 3}));

  // A spec from gRPC with the counts left 0 and one stage: validation applies the defaults, and
  // ApplyJobSpecDefaults writes them (idempotently).
  v1::JobSpec grpc = *spec;
  grpc.mutable_pipeline()->clear_micro_batches();
  grpc.mutable_pipeline()->clear_virtual_stages();
  grpc.mutable_model()->mutable_layers(3)->set_stage(2);
  grpc.mutable_model()->mutable_layers(4)->set_stage(3);
  grpc.mutable_model()->mutable_layers(2)->set_stage(1);
  EXPECT_TRUE(Check(grpc).ok()) << Check(grpc);
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
  EXPECT_EQ(Chunks(*plain), std::vector<int>(3, 0));  // one stage: every layer in chunk 0
}

// An llm.c token file of `count` tokens: ids 0, 1, 2, ... modulo `modulo`, and `odd` at `at`.
void WriteTokens(const std::string& path, int64_t count, int32_t modulo, int64_t at = -1,
                 int32_t odd = 0) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(count);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 256 * sizeof(int32_t));
  for (int64_t i = 0; i < count; ++i) {
    const uint16_t v = static_cast<uint16_t>(i == at ? odd : i % modulo);
    out.write(reinterpret_cast<const char*>(&v), sizeof(v));
  }
}

constexpr char kRecipeSpec[] = R"(
name: recipe
mesh: {shape: [2], dim_names: [dp]}
model: {arch: gpt2, config: {vocab_size: 32, n_positions: 16, n_embd: 16, n_layer: 2, n_head: 4,
        layer_norm_epsilon: 1.0e-5, embd_pdrop: 0.0, attn_pdrop: 0.0, resid_pdrop: 0.0}}
data: {source: tokens, path: train.bin, seq_len: 8, batch_size: 8}
optimizer: {type: adamw, lr: 6.0e-4, weight_decay: 0.1, weight_decay_params: matrices,
            clip_grad_norm: 1.0, schedule: {warmup_steps: 2, decay: cosine, min_lr: 6.0e-5}}
train: {steps: 10, seed: 1, micro_batches: 4}
eval: {data: {source: tokens, path: val.bin}, every: 2, batches: 2}
)";

// The recipe's keys as the issue names them, their defaults, and an error naming the key for
// each way they can be wrong.
TEST_F(SpecTest, RecipeKeysParseAndTheirErrorsNameTheKey) {
  WriteTokens(Path("train.bin"), 8 * 8 * 3 + 1, 32);
  WriteTokens(Path("val.bin"), 2 * 8 * 8 + 1, 32);          // exactly 2 eval batches
  WriteTokens(Path("other.bin"), 2 * 8 * 8 + 1, 32, 70, 40);  // id 40 past vocab_size 32
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kRecipeSpec, dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(Check(*spec).ok()) << Check(*spec);
  const v1::Optimizer& opt = spec->optimizer();
  EXPECT_EQ(opt.weight_decay_params(), "matrices");
  EXPECT_DOUBLE_EQ(opt.clip_grad_norm(), 1.0);
  EXPECT_EQ(opt.schedule().warmup_steps(), 2);
  EXPECT_EQ(opt.schedule().decay(), "cosine");
  EXPECT_EQ(opt.schedule().decay_steps(), 10);  // train.steps
  EXPECT_DOUBLE_EQ(opt.schedule().min_lr(), 6.0e-5);
  EXPECT_EQ(spec->train().micro_batches(), 4);
  EXPECT_EQ(spec->eval().every(), 2);
  EXPECT_EQ(spec->eval().batches(), 2);
  EXPECT_EQ(spec->eval().data().seq_len(), 8);      // data's
  EXPECT_EQ(spec->eval().data().batch_size(), 8);   // data's
  EXPECT_EQ(spec->eval().data().path(), Path("val.bin"));
  EXPECT_EQ(spec->eval().data().placements_size(), 1);  // data's: Shard(0) on dp
  // Without a schedule, weight_decay_params or eval: today's job.
  absl::StatusOr<v1::JobSpec> plain = ParseJobSpecYaml(
      absl::StrReplaceAll(kRecipeSpec, {{"weight_decay_params: matrices,", ""},
                                        {", schedule: {warmup_steps: 2, decay: cosine, "
                                         "min_lr: 6.0e-5}",
                                         ""},
                                        {"eval: {data: {source: tokens, path: val.bin}, every: "
                                         "2, batches: 2}",
                                         ""}}),
      dir_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->optimizer().has_schedule());
  EXPECT_EQ(plain->optimizer().weight_decay_params(), "all");
  EXPECT_FALSE(plain->has_eval());
  EXPECT_TRUE(Check(*plain).ok()) << Check(*plain);

  struct Case {
    std::vector<std::pair<std::string, std::string>> replace;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{{"warmup_steps: 2", "warmup_steps: 10"}},
            "optimizer.schedule.warmup_steps: 10 must be less than decay_steps 10 (train.steps "
            "when absent)"},
           {{{"min_lr: 6.0e-5", "min_lr: 1.0e-3"}},
            "optimizer.schedule.min_lr: 0.001 is above optimizer.lr 0.0006"},
           {{{"decay: cosine", "decay: exponential"}},
            "optimizer.schedule.decay: unknown decay \"exponential\"; known: constant, linear, "
            "cosine, wsd"},
           {{{"decay: cosine", "decay: wsd"}}, "optimizer.schedule.cooldown_steps: wsd needs 1..8"},
           {{{"min_lr: 6.0e-5", "min_lr: 6.0e-5, cooldown_steps: 3"}},
            "optimizer.schedule.cooldown_steps: only for decay wsd"},
           {{{"clip_grad_norm: 1.0", "clip_grad_norm: 0"}},
            "optimizer.clip_grad_norm: must be a finite number > 0, got 0"},
           {{{"weight_decay_params: matrices", "weight_decay_params: biases"}},
            "optimizer.weight_decay_params: unknown value \"biases\"; known: all, matrices"},
           {{{"micro_batches: 4", "micro_batches: 0"}}, "train.micro_batches: must be >= 1, got 0"},
           {{{"micro_batches: 4", "micro_batches: 8"}},
            "data.batch_size: 8 in 8 micro-batches (train.micro_batches) gives micro-batches of 1 "
            "sample(s), fewer than the 2 shards each is split into over mesh dim(s) dp"},
           {{{"batches: 2", "batches: 3"}},
            "eval.data: " + Path("val.bin") + " holds 16 samples, too few for eval.batches 3 of "
            "eval.data.batch_size 8 (24; evaluation reads the same samples every time and never "
            "wraps around)"},
           // Their product past int64 (UBSan would stop at the multiplication).
           {{{"batches: 2", "batches: 2147483647"},
             {"path: val.bin}", "path: val.bin, batch_size: 68719476736}"}},
            "eval.batches × eval.data.batch_size overflows int64 (2147483647 × 68719476736)"},
           {{{"path: val.bin", "path: other.bin"}},
            "eval.data.path: " + Path("other.bin") + " holds token 40 at position 70, outside "
            "model.config.vocab_size 32: eval data of another vocabulary (tokenizer)?"},
           {{{"path: val.bin", "path: gone.bin"}}, "eval.data.path: "},
           {{{"path: val.bin}", "path: val.bin, batch_size: 4}"}},
            "eval.data.batch_size: 4 in 4 micro-batches (train.micro_batches) gives micro-batches "
            "of 1 sample(s)"},
           {{{"every: 2", "every: 0"}}, "eval.every: must be >= 1, got 0"},
           {{{"batches: 2", "batches: 0"}}, "eval.batches: must be >= 1, got 0"},
           {{{"{source: tokens, path: val.bin}", "{path: val.bin}"}}, "eval.data.source: is required"},
           {{{"path: val.bin}", "path: val.bin, seq_len: 0}"}}, "eval.data.seq_len: must be >= 1"},
           {{{"every: 2,", "every: 2, cadence: 3,"}}, "eval: unknown key"},
       }) {
    absl::StatusOr<v1::JobSpec> bad = ParseJobSpecYaml(absl::StrReplaceAll(kRecipeSpec, c.replace), dir_);
    const absl::Status s = bad.ok() ? Check(*bad) : bad.status();
    EXPECT_INVALID(s, c.message);
  }
}

}  // namespace
}  // namespace weft
