// train.elastic: the YAML block and its defaults, the sizes a dim may take, the resized spec
// (global batch and micro-batch kept), and what a spec is refused for, each error naming its
// field.
#include "common/jobspec/elastic.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/jobspec_testing.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

// kSyntheticSpec on a dp x mp mesh with checkpoints, restarts and train.elastic.
constexpr char kElastic[] = R"(
name: elastic
mesh: {shape: [4, 2], dim_names: [dp, mp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 8, out_features: 16}
    - {name: act0, type: gelu}
    - {name: fc1, type: linear, in_features: 16, out_features: 4}
data: {source: synthetic, sample_shape: [8], label_shape: [4], num_samples: 64, batch_size: 24}
optimizer: {type: sgd, lr: 0.1}
checkpoint: {dir: ckpt, every: 2}
train: {steps: 8, max_restarts: 3, elastic: {dim: dp}}
)";

class ElasticTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = jobspec_testing::MakeScratchDir("elastic_test_"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  absl::StatusOr<v1::JobSpec> Parse(
      const std::vector<std::pair<std::string, std::string>>& replace = {}) {
    return ParseJobSpecYaml(absl::StrReplaceAll(kElastic, replace), dir_);
  }

  std::string dir_;
};

TEST_F(ElasticTest, TheBlockParsesWithItsDefaults) {
  absl::StatusOr<v1::JobSpec> spec = Parse();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train().elastic().dim(), "dp");
  EXPECT_EQ(spec->train().elastic().min(), 1);
  EXPECT_EQ(spec->train().elastic().wait_s(), kDefaultElasticWaitSeconds);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);

  spec = Parse({{"elastic: {dim: dp}", "elastic: {dim: dp, min: 2, wait_s: 0}"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->train().elastic().min(), 2);
  EXPECT_TRUE(spec->train().elastic().has_wait_s()) << "a written 0 is not the default";
  EXPECT_EQ(spec->train().elastic().wait_s(), 0);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);

  spec = Parse({{"elastic: {dim: dp}", "elastic: {dim: dp, min: 0}"}});
  EXPECT_THAT(spec.status().message(), HasSubstr("train.elastic.min: must be >= 1, got 0"));
  spec = Parse({{"elastic: {dim: dp}", "elastic: {min: 2}"}});
  EXPECT_THAT(spec.status().message(), HasSubstr("train.elastic.dim"));
  spec = Parse({{"elastic: {dim: dp}", "elastic: {dim: dp, max: 8}"}});
  EXPECT_THAT(spec.status().message(), HasSubstr("unknown key \"max\""));
}

TEST_F(ElasticTest, SizesDivideTheSlicesOfTheGlobalBatch) {
  absl::StatusOr<v1::JobSpec> spec = Parse();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(ElasticDimIndex(*spec), 0);
  EXPECT_EQ(ElasticSubmittedSize(*spec), 4);
  EXPECT_EQ(ElasticSizes(*spec), (std::vector<int>{1, 2, 4}));
  // dp 4 x 3 micro-batches: 12 slices, so dp 3 (4 micro-batches) keeps each micro-batch too.
  spec = Parse({{"max_restarts: 3,", "max_restarts: 3, micro_batches: 3,"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(ElasticSizes(*spec), (std::vector<int>{1, 2, 3, 4}));
  spec = Parse({{"elastic: {dim: dp}", "elastic: {dim: dp, min: 2}"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(ElasticSizes(*spec), (std::vector<int>{2, 4}));
  // No train.elastic: no sizes, no dim.
  spec = Parse({{", elastic: {dim: dp}", ""}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ElasticSizes(*spec).empty());
  EXPECT_EQ(ElasticDimIndex(*spec), -1);
}

TEST_F(ElasticTest, AResizedSpecKeepsTheGlobalBatchAndEachMicroBatch) {
  absl::StatusOr<v1::JobSpec> spec = Parse({{"max_restarts: 3,", "max_restarts: 3, micro_batches: 3,"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  for (const auto& [size, micro_batches] : std::vector<std::pair<int, int>>{
           {4, 3}, {3, 4}, {2, 6}, {1, 12}}) {
    absl::StatusOr<v1::JobSpec> resized = ResizedSpec(*spec, size);
    ASSERT_TRUE(resized.ok()) << resized.status();
    EXPECT_EQ(resized->mesh().shape(0), size);
    EXPECT_EQ(resized->mesh().shape(1), 2) << "the other dims stay";
    EXPECT_EQ(resized->train().micro_batches(), micro_batches);
    EXPECT_EQ(resized->data().batch_size(), 24);
    EXPECT_EQ(int64_t{size} * micro_batches, 12);
    EXPECT_TRUE(ValidateJobSpec(*resized).ok()) << size << ": " << ValidateJobSpec(*resized);
  }
  EXPECT_THAT(ResizedSpec(*spec, 5).status().message(),
              HasSubstr("train.elastic.dim: dp cannot run at size 5; its sizes: 1, 2, 3, 4"));

  // The attempt's spec follows Job.elastic_size; 0 is the spec's own.
  v1::Job job;
  *job.mutable_spec() = *spec;
  EXPECT_EQ(AttemptSpec(job)->mesh().shape(0), 4);
  job.set_elastic_size(2);
  EXPECT_EQ(AttemptSpec(job)->mesh().shape(0), 2);
  EXPECT_EQ(AttemptSpec(job)->train().micro_batches(), 6);
  job.set_elastic_size(7);
  EXPECT_FALSE(AttemptSpec(job).ok());
}

TEST_F(ElasticTest, AResizedPipelineKeepsItsMicroBatchesInStep) {
  absl::StatusOr<v1::JobSpec> spec = Parse(
      {{"mesh: {shape: [4, 2], dim_names: [dp, mp]}", "mesh: {shape: [2, 2], dim_names: [dp, pp]}"},
       {"- {name: fc1,", "- {stage: 1, name: fc1,"},
       {"checkpoint:", "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 2}\ncheckpoint:"}});
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  absl::StatusOr<v1::JobSpec> resized = ResizedSpec(*spec, 1);
  ASSERT_TRUE(resized.ok()) << resized.status();
  EXPECT_EQ(resized->pipeline().micro_batches(), 4);
  EXPECT_EQ(resized->train().micro_batches(), 4);
  EXPECT_TRUE(ValidateJobSpec(*resized).ok()) << ValidateJobSpec(*resized);
}

TEST_F(ElasticTest, WhatASpecIsRefusedForIsNamed) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> replace;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{{"elastic: {dim: dp}", "elastic: {dim: ep}"}},
            "train.elastic.dim: the mesh has no dim named \"ep\" (dims: dp, mp)"},
           {{{"elastic: {dim: dp}", "elastic: {dim: mp}"}},
            "train.elastic.dim: mp is not data parallel: the batch is Replicate() there"},
           {{{"optimizer:", "parallelize: {tp: {dim: dp, plan: {fc0: ColWiseParallel, fc1: "
                            "RowWiseParallel}}}\noptimizer:"}},
            "train.elastic.dim: dp carries parallelize.tp (tensor parallelism)"},
           {{{"{name: fc0, type: linear, in_features: 8, out_features: 16}",
              "{name: fc0, type: linear, in_features: 8, out_features: 16, placements: {weight: "
              "{dp: Shard(1)}}}"}},
            "train.elastic.dim: dp shards a parameter (model.layers[0] (fc0).placements.weight "
            "[Shard(1), Replicate()])"},
           {{{"elastic: {dim: dp}", "elastic: {dim: dp, min: 5}"}},
            "train.elastic.min: must be in 1..4 (the mesh's dp), got 5"},
           {{{"elastic: {dim: dp}", "elastic: {dim: dp, min: 4}"}},
            "train.elastic.min: dp 4 can shrink to no size >= 4: a size must divide dp x "
            "micro_batches = 4"},
           {{{"mesh: {shape: [4, 2]", "mesh: {shape: [3, 2]"},
             {"elastic: {dim: dp}", "elastic: {dim: dp, min: 2}"}},
            "train.elastic.min: dp 3 can shrink to no size >= 2"},
           {{{"elastic: {dim: dp}", "elastic: {dim: dp, wait_s: -1}"}},
            "train.elastic.wait_s: must be in 0..86400, got -1"},
           {{{"max_restarts: 3", "max_restarts: 0"}},
            "train.max_restarts: train.elastic needs >= 1"},
           {{{"checkpoint: {dir: ckpt, every: 2}\n", ""}},
            "checkpoint.dir: train.elastic needs checkpoints"},
       }) {
    absl::StatusOr<v1::JobSpec> spec = Parse(c.replace);
    absl::Status status = spec.ok() ? ValidateJobSpec(*spec) : spec.status();
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.replace[0].second;
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  }
}

}  // namespace
}  // namespace weft
