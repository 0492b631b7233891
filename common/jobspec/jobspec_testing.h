// Job specs for the jobspec tests (parsing, defaults, parallelize: common/jobspec/jobspec_test)
// and the SubmitJob tests (everything a submitted spec is checked for, the model included:
// planner/submit_test): example specs, a fixture with a scratch folder, npy and
// safetensors files for them, and a fuzzer's edits.
//
// E.g.
//   TEST_F(SpecTest, ...) { absl::StatusOr<v1::JobSpec> spec = Full({{"batch_size: 8", "..."}}); }
#ifndef WEFT_COMMON_JOBSPEC_JOBSPEC_TESTING_H_
#define WEFT_COMMON_JOBSPEC_JOBSPEC_TESTING_H_

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/checkpoint/checkpoint.h"
#include "common/jobspec/yaml.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "common/testing_files.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft::jobspec_testing {

using ::testing::HasSubstr;

// `text` with 1 to 4 random edits: a byte replaced by one of `punct`, up to 8 bytes erased, or
// one of `punct` inserted. The fuzz tests feed these to the parser.
inline std::string Garble(const std::string& text, const std::string& punct, std::mt19937* rng) {
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

// A fresh folder for the running test: TestTmpDir()/<prefix><pid>_<test name>.
inline std::string MakeScratchDir(absl::string_view prefix) {
  std::string dir = absl::StrCat(TestTmpDir(), "/", prefix, getpid(), "_",
                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::create_directories(dir);
  return dir;
}

// The issue's schema example, on a 4-rank dp mesh with small layers.
inline constexpr char kFullSpec[] = R"(
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

inline constexpr char kSyntheticSpec[] = R"(
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
    dir_ = MakeScratchDir("spec_test_");
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


// DP2 x MP2 with fc0 column-parallel and fc1 row-parallel: by hand, by dim name, by parallelize.
inline constexpr char kDpMpHand[] = R"(
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

inline constexpr char kDpMpNamed[] = R"(
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

inline constexpr char kDpMpParallelize[] = R"(
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
inline std::string Canonical(v1::JobSpec spec) {
  spec.clear_parallelize();
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  spec.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

inline std::string Placements(const v1::JobSpec& spec, int layer, const std::string& param) {
  const auto& lists = spec.model().layers(layer).placements();
  auto it = lists.find(param);
  return it == lists.end() ? "absent" : FormatPlacements(it->second.placements());
}


// Pipeline: 4 linear layers on pp=4 with 1F1B over 4 micro-batches of 2.
inline constexpr char kPipelineSpec[] = R"(
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
inline std::vector<std::pair<std::string, std::string>> Stages(
    const std::vector<std::pair<std::string, std::string>>& stages) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [layer, stage] : stages) {
    out.push_back({absl::StrCat("{name: ", layer, ","),
                   absl::StrCat("{stage: ", stage, ", name: ", layer, ",")});
  }
  return out;
}

class CheckpointSpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeScratchDir("ckpt_spec_test_");
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


}  // namespace weft::jobspec_testing

#endif  // WEFT_COMMON_JOBSPEC_JOBSPEC_TESTING_H_
