#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/jobspec/defaults.h"
#include "common/jobspec/jobspec_testing.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/parallelize.h"
#include "common/jobspec/pipeline_chunks.h"
#include "common/jobspec/placements.h"
#include "common/jobspec/starting_state.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml.h"

// Reading job specs: YAML, defaults, placements by name, the parallelize shortcut, the pipeline
// and checkpoint blocks. What a spec is rejected for at SubmitJob, the model included, is
// planner/submit_test.
namespace weft {
namespace {

using namespace jobspec_testing;  // NOLINT: the shared specs and fixtures

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

// A client may not submit a name over 256 bytes or a spec over 1 MiB: both are refused with the
// figures (the size before anything else is read).
TEST_F(SpecTest, NameAndSpecSizesAreBounded) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kSyntheticSpec, dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ValidateJobSpec(*spec).ok());
  v1::JobSpec named = *spec;
  named.set_name(std::string(256, 'n'));
  EXPECT_TRUE(ValidateJobSpec(named).ok()) << ValidateJobSpec(named);
  named.set_name(std::string(257, 'n'));
  EXPECT_EQ(ValidateJobSpec(named).message(), "name: 257 bytes; at most 256");
  // A name holding what a terminal acts on (ESC, BEL, CR, LF, C1 CSI) is refused; text is not.
  for (const std::string& bad : {"red\x1b[31m", "bell\a", "a\rb", "two\nlines", "c1\xc2\x9b"}) {
    named.set_name(bad);
    EXPECT_THAT(std::string(ValidateJobSpec(named).message()),
                HasSubstr("name: holds a control character"))
        << bad;
  }
  named.set_name("red\x1b[31m");
  EXPECT_EQ(ValidateJobSpec(named).message(),
            "name: holds a control character (byte 0x1b at byte 3); a job name is printed by "
            "weftctl and logged by the coordinator");
  named.set_name("gpt2 124M — run 3 (日本)");
  EXPECT_TRUE(ValidateJobSpec(named).ok()) << ValidateJobSpec(named);
  v1::JobSpec big = *spec;
  big.set_init_from(std::string(size_t{1} << 20, 'x'));
  const absl::Status status = ValidateJobSpec(big);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr(absl::StrCat("the spec is ", big.ByteSizeLong(),
                                     " bytes; at most 1048576 (1 MiB)")));
}

// Strings must be UTF-8 (protobuf could not read the job record back), named by their field; a
// model deeper than kMaxModelLayers is refused before it is planned.
TEST_F(SpecTest, StringsAreUtf8AndDepthIsBounded) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kSyntheticSpec, dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec bad = *spec;
  bad.set_name("pipeli\x96ne");
  EXPECT_EQ(ValidateJobSpec(bad).message(), "name: is not valid UTF-8");
  bad = *spec;
  bad.mutable_model()->mutable_layers(1)->set_name("caf\xc3");
  EXPECT_EQ(ValidateJobSpec(bad).message(), "model.layers[1].name: is not valid UTF-8");
  bad = *spec;
  bad.mutable_model()->mutable_layers(0)->set_name("caf\xc3\xa9");  // valid: é
  EXPECT_NE(ValidateJobSpec(bad).message(), "model.layers[0].name: is not valid UTF-8");
  v1::JobSpec deep = *spec;
  while (deep.model().layers_size() <= kMaxModelLayers) {
    *deep.mutable_model()->add_layers() = spec->model().layers(1);
  }
  EXPECT_EQ(ValidateJobSpec(deep).message(), "model.layers: 1025 layers; at most 1024");
}

TEST_F(SpecTest, TextWithoutADocumentSaysWhereItBegins) {
  EXPECT_EQ(ParseJobSpecYaml("# only a comment\n\n", dir_).status().message(),
            "job spec is empty");
  EXPECT_EQ(ParseJobSpecYaml("# a comment\n,ame: x\nmesh: {shape: [1]}\n", dir_).status().message(),
            "job spec is not valid YAML at line 2: no document could be read");
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
  EXPECT_EQ(spec->storage(), "f32");
  EXPECT_FALSE(spec->allow_tf32());
  EXPECT_FALSE(spec->blocking_collectives());  // overlap: true by default
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);

  // sharding: a mesh dim and level 1, 2 or 3; anything else names what is wrong.
  absl::StatusOr<v1::JobSpec> zero =
      ParseJobSpecYaml(absl::StrCat(kSyntheticSpec, "sharding: {dim: dp, level: 2}\n"), dir_);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->sharding().dim(), "dp");
  EXPECT_EQ(zero->sharding().level(), 2);
  EXPECT_TRUE(ValidateJobSpec(*zero).ok()) << ValidateJobSpec(*zero);
  for (const auto& [yaml, error] : std::vector<std::pair<std::string, std::string>>{
           {"sharding: {dim: dp, level: 0}\n", "sharding.level"},
           {"sharding: {dim: dp}\n", "level"},
           {"sharding: {dim: dp, level: 1, stage: 3}\n", "stage"},
           {"sharding: {dim: dp, level: 4}\n", "or 3 (and parameters), got 4"},
           {"sharding: {dim: zz, level: 1}\n", "\"zz\" is not a dim of the mesh"}}) {
    absl::StatusOr<v1::JobSpec> bad = ParseJobSpecYaml(absl::StrCat(kSyntheticSpec, yaml), dir_);
    const absl::Status status = bad.ok() ? ValidateJobSpec(*bad) : bad.status();
    EXPECT_THAT(std::string(status.message()), HasSubstr(error)) << yaml;
  }

  absl::StatusOr<v1::JobSpec> zero3 =
      ParseJobSpecYaml(absl::StrCat(kSyntheticSpec, "sharding: {dim: dp, level: 3}\n"), dir_);
  ASSERT_TRUE(zero3.ok()) << zero3.status();
  EXPECT_TRUE(ValidateJobSpec(*zero3).ok()) << ValidateJobSpec(*zero3);

  // recompute: model.recompute full | selective, and a layer's own recompute: true | false.
  std::string recompute_yaml = kSyntheticSpec;
  recompute_yaml.replace(recompute_yaml.find("  layers:"), 0, "  recompute: selective\n");
  recompute_yaml.replace(recompute_yaml.find("type: gelu}"), 11, "type: gelu, recompute: false}");
  absl::StatusOr<v1::JobSpec> recompute = ParseJobSpecYaml(recompute_yaml, dir_);
  ASSERT_TRUE(recompute.ok()) << recompute.status();
  EXPECT_EQ(recompute->model().recompute(), "selective");
  EXPECT_FALSE(recompute->model().layers(0).has_recompute());
  ASSERT_TRUE(recompute->model().layers(1).has_recompute());
  EXPECT_FALSE(recompute->model().layers(1).recompute());
  EXPECT_TRUE(ValidateJobSpec(*recompute).ok()) << ValidateJobSpec(*recompute);
  // A bad mode, a layer's non-boolean recompute, a negative bucket size are refused, naming the field (the mode by
  // ValidateJobSpec, which checks gRPC specs too).
  for (const auto& [from, to, error] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"  layers:", "  recompute: some\n  layers:",
            "model.recompute: must be full or selective, got \"some\""},
           {"type: gelu}", "type: gelu, recompute: maybe}", "model.layers[1] (act0).recompute"},
           {"train: {steps: 3}", "train: {steps: 3}\nbucket_mb: -1",
            "bucket_mb: must be a number of MiB"}}) {
    std::string yaml = kSyntheticSpec;
    yaml.replace(yaml.find(from), from.size(), to);
    absl::StatusOr<v1::JobSpec> bad = ParseJobSpecYaml(yaml, dir_);
    const absl::Status status = bad.ok() ? ValidateJobSpec(*bad) : bad.status();
    EXPECT_THAT(std::string(status.message()), HasSubstr(error)) << yaml;
  }
  EXPECT_EQ(recompute->bucket_mb(), 25);  // DDP's default, applied with the spec's defaults
  absl::StatusOr<v1::JobSpec> blocking =
      ParseJobSpecYaml(absl::StrCat(kSyntheticSpec, "overlap: false\n"), dir_);
  ASSERT_TRUE(blocking.ok()) << blocking.status();
  EXPECT_TRUE(blocking->blocking_collectives());
  EXPECT_THAT(std::string(ParseJobSpecYaml(absl::StrCat(kSyntheticSpec, "overlap: sometimes\n"),
                                           dir_)
                              .status()
                              .message()),
              HasSubstr("overlap"));

  absl::StatusOr<v1::JobSpec> gpu = ParseJobSpecYaml(
      absl::StrCat(kSyntheticSpec,
                   "device: cuda\nprecision: bf16\nstorage: bf16\nallow_tf32: true\n"),
      dir_);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->device(), "cuda");
  EXPECT_EQ(gpu->precision(), "bf16");
  EXPECT_EQ(gpu->storage(), "bf16");
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

// Aliases read as the nodes they name; text that stands for more than kMaxJobSpecYamlNodes nodes
// with its aliases expanded (a few nested aliases stand for exponentially many), or an alias
// inside the node it names, is refused before it is read: the coordinator parses spec_yaml.
TEST_F(SpecTest, AliasesAreBoundedByWhatTheyStandFor) {
  absl::StatusOr<v1::JobSpec> plain = ParseJobSpecYaml(kSyntheticSpec, dir_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  absl::StatusOr<v1::JobSpec> aliased = ParseJobSpecYaml(
      absl::StrReplaceAll(kSyntheticSpec, {{"out_features: 16", "out_features: &width 16"},
                                           {"in_features: 16", "in_features: *width"}}),
      dir_);
  ASSERT_TRUE(aliased.ok()) << aliased.status();
  EXPECT_EQ(aliased->SerializeAsString(), plain->SerializeAsString());

  std::string laughs = "name: &l0 [lol, lol]\n";
  for (int i = 1; i < 40; ++i) {
    absl::StrAppend(&laughs, "l", i, ": &l", i, " [*l", i - 1, ", *l", i - 1, "]\n");
  }
  absl::StatusOr<v1::JobSpec> bomb = ParseJobSpecYaml(laughs, dir_);
  EXPECT_EQ(bomb.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bomb.status().message(),
            "job spec: more than 1048576 YAML nodes with its aliases expanded");

  absl::StatusOr<v1::JobSpec> cycle = ParseJobSpecYaml("name: x\nmesh: &m {shape: [*m]}\n", dir_);
  EXPECT_EQ(cycle.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cycle.status().message()),
              HasSubstr("job spec: an alias inside the node it names (line 2, column "));
}

// JobSpecYamlOptions.before_reading sees every file the parser would open (a config_file),
// resolved, and its error stops the parse before the file is read.
TEST_F(SpecTest, BeforeReadingIsAskedForTheConfigFile) {
  const std::string synthetic = kSyntheticSpec;
  const std::string yaml = synthetic.substr(0, synthetic.find("  layers:")) +
                           "  arch: gpt2\n  config_file: hf/config.json\n" +
                           synthetic.substr(synthetic.find("data:"));
  std::vector<std::string> asked;
  JobSpecYamlOptions options;
  options.before_reading = [&](absl::string_view field, const std::string& path) {
    asked.push_back(absl::StrCat(field, " ", path));
    return absl::PermissionDeniedError("not here");
  };
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml, dir_, options);
  EXPECT_EQ(spec.status(), absl::PermissionDeniedError("not here"));
  EXPECT_THAT(asked, ::testing::ElementsAre("model.config_file " + Path("hf/config.json")));
}

// read_files = false: the structure alone (weftctl submit, whose paths are the cluster's): a
// config_file that is not here is recorded, not read. checkpoint_base_dir resolves checkpoint.dir
// apart from the data paths; an empty one leaves it relative.
TEST_F(SpecTest, SyntaxOnlyLeavesFilesUnreadAndCheckpointsHaveABaseOfTheirOwn) {
  const std::string synthetic = kSyntheticSpec;
  const std::string yaml = synthetic.substr(0, synthetic.find("  layers:")) +
                           "  arch: gpt2\n  config_file: hf/config.json\n" +
                           synthetic.substr(synthetic.find("data:")) +
                           "checkpoint: {dir: runs/a}\ninit_from: w.safetensors\n";
  JobSpecYamlOptions syntax_only;
  syntax_only.read_files = false;
  syntax_only.before_reading = [](absl::string_view, const std::string&) {
    return absl::InternalError("no file is opened");
  };
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml, "", syntax_only);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().config_file(), "hf/config.json");
  EXPECT_EQ(spec->model().config().n_embd(), 0);  // the file was not read
  EXPECT_EQ(spec->checkpoint().dir(), "runs/a");
  EXPECT_EQ(spec->init_from(), "w.safetensors");
  // The YAML's own errors are still found.
  EXPECT_THAT(std::string(ParseJobSpecYaml(absl::StrReplaceAll(yaml, {{"arch: gpt2", "arch: gpt9"}}),
                                           "", syntax_only)
                              .status()
                              .message()),
              HasSubstr("unknown arch \"gpt9\""));

  JobSpecYamlOptions roots = syntax_only;
  roots.checkpoint_base_dir = "/srv/checkpoints";
  spec = ParseJobSpecYaml(yaml, "/srv/data", roots);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().config_file(), "/srv/data/hf/config.json");
  EXPECT_EQ(spec->init_from(), "/srv/data/w.safetensors");
  EXPECT_EQ(spec->checkpoint().dir(), "/srv/checkpoints/runs/a");
  roots.checkpoint_base_dir = "";
  spec = ParseJobSpecYaml(yaml, "/srv/data", roots);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->checkpoint().dir(), "runs/a");
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

// Text that is not UTF-8 is named by its line and column (1-based, in bytes) and its byte,
// before YAML reads it: protobuf could neither store nor send such a string.
// num_samples = batch_size = 2^61 would overflow the planner's sizes (it planned 21 KiB, and the
// workers crashed reading the batch): a batch of more than 2^40 elements is refused, as is one
// whose element count overflows.
TEST_F(SpecTest, ABatchTooLargeForAnyMachineIsRefused) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kSyntheticSpec, dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec huge = *spec;
  huge.mutable_data()->set_num_samples(int64_t{1} << 61);
  huge.mutable_data()->set_batch_size(int64_t{1} << 61);
  EXPECT_INVALID(ValidateJobSpec(huge), "data.batch_size: 2305843009213693952 samples of shape "
                                        "[8] is more than 2^40 elements a batch");
  huge.mutable_data()->set_batch_size(int64_t{1} << 38);  // 2^41 input elements
  EXPECT_INVALID(ValidateJobSpec(huge), "is more than 2^40 elements a batch");
  huge.mutable_data()->set_batch_size(int64_t{1} << 36);  // 2^39 and 2^38: allowed
  EXPECT_THAT(std::string(ValidateJobSpec(huge).message()), Not(HasSubstr("2^40")));
}

// 8,000,024 pipeline micro-batches held the planner for minutes while its memory grew past the
// machine's (the spec fuzz test found it): at most kMaxMicroBatches, by either name.
TEST_F(SpecTest, MicroBatchesAreBounded) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(kSyntheticSpec, dir_);
  ASSERT_TRUE(spec.ok()) << spec.status();
  v1::JobSpec many = *spec;
  many.mutable_data()->set_batch_size(1 << 20);
  many.mutable_train()->set_micro_batches(kMaxMicroBatches);
  EXPECT_TRUE(ValidateJobSpec(many).ok()) << ValidateJobSpec(many);
  many.mutable_train()->set_micro_batches(kMaxMicroBatches + 1);
  EXPECT_INVALID(ValidateJobSpec(many), absl::StrCat("train.micro_batches: ", kMaxMicroBatches + 1,
                                                     "; at most 1024 (planning grows"));
}

TEST_F(SpecTest, TextThatIsNotUtf8IsNamedByItsLineAndColumn) {
  for (const auto& [text, where] : std::vector<std::pair<std::string, std::string>>{
           {"name: \"bad\xff\"\nmesh: {shape: [1]}\n", "line 1, column 11 (byte 0xff)"},
           {"name: x\n# caf\xc3\n", "line 2, column 6 (byte 0xc3)"},  // a cut sequence
           {"name: x\nmesh: {shape: [\xed\xa0\x80]}\n", "line 2, column 16 (byte 0xed)"}}) {
    absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(text, dir_);
    EXPECT_INVALID(spec.status(), absl::StrCat("job spec is not valid UTF-8 at ", where,
                                               "; save it as UTF-8"));
  }
}

TEST_F(SpecTest, MalformedYamlIsAnErrorWithItsPosition) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml("name: x\nmesh: {shape: [4\n", dir_);
  EXPECT_INVALID(spec.status(), "not valid YAML at line");
  EXPECT_INVALID(ParseJobSpecYaml("", dir_).status(), "empty");
  EXPECT_INVALID(ParseJobSpecYaml("- a\n- b\n", dir_).status(), "expected a mapping");
  EXPECT_INVALID(ParseJobSpecYaml("just text", dir_).status(), "expected a mapping");
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

TEST(PipelineChunksTest, SplitByParameterCount) {
  // Layers of w parameters (0: none, an activation) on pp x virtual_stages chunks.
  auto chunks = [](const std::vector<int64_t>& params, int pp, int virtual_stages) {
    v1::Pipeline pipeline;
    pipeline.set_dim("pp");
    pipeline.set_virtual_stages(virtual_stages);
    std::vector<LayerForChunks> layers;
    for (size_t i = 0; i < params.size(); ++i) {
      layers.push_back({absl::StrCat("model.layers[", i, "] (l", i, ")"), absl::StrCat("l", i),
                        params[i], std::nullopt});
    }
    return ChunkLayers(pipeline, pp, layers);
  };
  auto ok = [&](const std::vector<int64_t>& params, int pp, int virtual_stages) {
    absl::StatusOr<std::vector<int>> c = chunks(params, pp, virtual_stages);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *c : std::vector<int>{};
  };
  // Smallest largest chunk: 100 | 1 1 1 | 100.
  EXPECT_EQ(ok({100, 1, 1, 1, 100}, 3, 1), (std::vector<int>{0, 1, 1, 1, 2}));
  // 102 | 101 beats 103 | 100.
  EXPECT_EQ(ok({100, 1, 1, 1, 100}, 2, 1), (std::vector<int>{0, 0, 0, 1, 1}));
  // Equal layers: equal chunks; ties fill earlier chunks first.
  EXPECT_EQ(ok({5, 5, 5, 5, 5, 5}, 3, 1), (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(ok({5, 5, 5}, 2, 1), (std::vector<int>{0, 0, 1}));
  // As many chunks as layers: one each, whatever the weights.
  EXPECT_EQ(ok({1, 1000, 1, 1}, 4, 1), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ok({1000, 1, 1, 1}, 2, 2), (std::vector<int>{0, 1, 2, 3}));
  // Layers without parameters go with the layer before them; leading ones with chunk 0.
  EXPECT_EQ(ok({0, 4, 0, 4, 0, 4, 0, 4, 0}, 2, 1),
            (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1, 1}));
  // Fewer layers with parameters than chunks; huge counts do not overflow.
  EXPECT_INVALID(chunks({4, 0, 4}, 3, 1).status(),
                 "model.layers: 2 linear layer(s) cannot fill 3 pipeline chunk(s)");
  const int64_t huge = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ok({huge, huge, huge}, 2, 1), (std::vector<int>{0, 0, 1}));
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

TEST(CheckpointNamesTest, OptimizerStatesAreNamedAfterTheirParameter) {
  EXPECT_EQ(CheckpointStateName("fc0.weight", "adamw", "m"), "fc0.weight/adamw.m");
  EXPECT_EQ(OptimizerStateNames("adamw"), (std::vector<std::string>{"m", "v"}));
  EXPECT_TRUE(OptimizerStateNames("sgd").empty());
}

// data.source tokens: parsed, its path resolved, shapes and dtypes filled from the file and
// seq_len, and what is wrong with it named by field.
TEST_F(SpecTest, TokenDataFromTheFileAndSeqLen) {
  // An llm.c file of 41 uint16 tokens: (41 - 1) / 8 = 5 samples of seq_len 8.
  auto llmc = [](int32_t count, int tokens) {
    std::string bytes(1024 + 2 * tokens, '\0');
    const int32_t header[3] = {20240520, 1, count};
    std::memcpy(bytes.data(), header, sizeof(header));
    return bytes;
  };
  WriteText("train.bin", llmc(41, 41));
  const std::string data_block = R"(data:
  source: synthetic
  sample_shape: [8]
  label_shape: [4]
  num_samples: 32
  batch_size: 4)";
  auto parse = [&](const std::string& data) {
    return ParseJobSpecYaml(absl::StrReplaceAll(kSyntheticSpec, {{data_block, data}}), dir_);
  };
  absl::StatusOr<v1::JobSpec> spec =
      parse("data: {source: tokens, path: train.bin, seq_len: 8, batch_size: 4}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().path(), Path("train.bin"));
  EXPECT_EQ(spec->data().format(), "");  // llmc
  EXPECT_EQ(spec->data().seq_len(), 8);
  EXPECT_EQ(FormatPlacements(spec->data().placements()), "[Shard(0)]");
  ASSERT_TRUE(ResolveDataShapes(&*spec).ok());
  EXPECT_THAT(spec->data().sample_shape(), ::testing::ElementsAre(8));
  EXPECT_THAT(spec->data().label_shape(), ::testing::ElementsAre(8));
  EXPECT_EQ(spec->data().num_samples(), 5);
  EXPECT_EQ(spec->data().input_dtype(), v1::I32);
  EXPECT_EQ(spec->data().label_dtype(), v1::I32);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);

  // The other formats; a Megatron path is the prefix of its .idx and .bin.
  WriteText("raw.bin", std::string(18, '\1'));
  spec = parse("data: {source: tokens, path: raw.bin, format: raw_u16, seq_len: 8, batch_size: 1}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ResolveDataShapes(&*spec).ok());
  EXPECT_EQ(spec->data().num_samples(), 1);
  std::string idx("MMIDIDX\0\0\1\0\0\0\0\0\0\0\x08", 18);
  const uint64_t counts[2] = {1, 2};
  const int32_t length = 9;
  const int64_t pointer_and_docs[3] = {0, 0, 1};
  idx.append(reinterpret_cast<const char*>(counts), sizeof(counts));
  idx.append(reinterpret_cast<const char*>(&length), sizeof(length));
  idx.append(reinterpret_cast<const char*>(pointer_and_docs), sizeof(pointer_and_docs));
  WriteText("mega.idx", idx);
  WriteText("mega.bin", std::string(18, '\0'));
  spec = parse("data: {source: tokens, path: mega, format: megatron, seq_len: 4, batch_size: 2}");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().path(), Path("mega"));
  ASSERT_TRUE(PrepareJobSpec(&*spec).ok()) << PrepareJobSpec(&*spec);
  EXPECT_EQ(spec->data().num_samples(), 2);

  // Errors, each naming its field (and the file where one is at fault).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{source: tokens, path: train.bin, format: csv, seq_len: 8, batch_size: 4}",
       "data.format: unknown format \"csv\"; known: llmc, raw_u16, megatron"},
      {"{source: tokens, seq_len: 8, batch_size: 4}", "data.path: is required for source tokens"},
      {"{source: tokens, path: nope.bin, seq_len: 8, batch_size: 4}",
       "data.path: " + Path("nope.bin") + ": no such file"},
      {"{source: tokens, path: train.bin, batch_size: 4}", "data.seq_len: must be >= 1, got 0"},
      {"{source: tokens, path: train.bin, seq_len: 41, batch_size: 4}",
       "data.path: " + Path("train.bin") + " holds 41 tokens, too few for one sample of "
       "data.seq_len 41 (needs 42"},
      // The largest seq_len: its "needs" does not overflow (UBSan found it in the spec fuzz test).
      {"{source: tokens, path: train.bin, seq_len: 9223372036854775807, batch_size: 4}",
       "data.seq_len 9223372036854775807 (needs 9223372036854775808:"},
      {"{source: tokens, path: mega, seq_len: 8, batch_size: 4}",
       "data.path: " + Path("mega") + ": no such file"},
      {"{source: tokens, path: raw.bin, format: megatron, seq_len: 8, batch_size: 4}",
       "data.path: " + Path("raw.bin") + ".idx: no such file"},
      {"{source: npy, input: inputs.npy, label: labels.npy, path: train.bin, batch_size: 4}",
       "data.path: only for source tokens"},
      {"{source: synthetic, sample_shape: [8], label_shape: [4], num_samples: 32, seq_len: 8, "
       "batch_size: 4}",
       "data.seq_len: only for source tokens"},
      {"{source: words, batch_size: 4}", "known: npy, synthetic, tokens"},
  };
  WriteNpy("inputs.npy", {32, 8});
  WriteNpy("labels.npy", {32, 4});
  for (const auto& [data, error] : cases) {
    spec = parse("data: " + data);
    ASSERT_TRUE(spec.ok()) << data << ": " << spec.status();
    EXPECT_INVALID(PrepareJobSpec(&*spec), error);
  }
  WriteText("bad.bin", llmc(1000, 998));
  spec = parse("data: {source: tokens, path: bad.bin, seq_len: 8, batch_size: 4}");
  ASSERT_TRUE(spec.ok());
  EXPECT_INVALID(PrepareJobSpec(&*spec),
                 "data.path: " + Path("bad.bin") + ": header says 1000 tokens but the file holds "
                 "998");

  // Keys that tokens fill themselves are parse errors with their line.
  for (const std::string key : {"input: x.npy", "label: y.npy", "sample_shape: [8]",
                                "label_shape: [8]", "num_samples: 5"}) {
    spec = parse("data: {source: tokens, path: train.bin, seq_len: 8, batch_size: 4, " + key +
                 "}");
    EXPECT_INVALID(spec.status(), "data." + key.substr(0, key.find(':')) +
                                      ": not for source tokens");
    EXPECT_INVALID(spec.status(), "(line ");
  }
  // Filled values that disagree with the file (a spec from gRPC) are named.
  spec = parse("data: {source: tokens, path: train.bin, seq_len: 8, batch_size: 4}");
  ASSERT_TRUE(spec.ok());
  spec->mutable_data()->add_sample_shape(4);
  EXPECT_INVALID(ValidateJobSpec(*spec), "data.sample_shape: [4] does not match data.seq_len 8");
  spec->mutable_data()->clear_sample_shape();
  spec->mutable_data()->set_num_samples(6);
  EXPECT_INVALID(ValidateJobSpec(*spec),
                 "data.num_samples: 6 does not match " + Path("train.bin") + " (5 samples of "
                 "seq_len 8)");
  spec->mutable_data()->set_num_samples(0);
  spec->mutable_data()->set_input_dtype(v1::I64);
  EXPECT_INVALID(ValidateJobSpec(*spec), "data.input_dtype: tokens are read as i32, got i64");
  spec->mutable_data()->set_input_dtype(v1::I32);
  spec->mutable_data()->set_input("x.npy");
  EXPECT_INVALID(ValidateJobSpec(*spec), "data.input: not for source tokens");
}

}  // namespace
}  // namespace weft
