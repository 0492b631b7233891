// The central property on many configurations, without sockets: the planner's per-rank Programs,
// run by the real executor with every rank a thread (in-process communicators), give the same
// per-step losses and final parameters as the 1-rank run and as the float64 reference. Data
// parallel, tensor parallel (column -> row), both on 2-d and 3-d meshes, uneven shards, Partial
// batches and parameters, and a placement conflict the planner resolves with an all-to-all.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "common/jobspec/yaml.h"
#include "tests/cluster_fixture.h"
#include "tests/rank_simulation.h"

namespace weft::testing {
namespace {

const char* const kParams[] = {"fc0.weight", "fc0.bias", "fc1.weight", "fc2.weight", "fc2.bias"};

// Plans `yaml` and runs every rank in its own thread (PlanAndSimulate).
JobSimulation Simulate(const MlpJob& job, const std::string& yaml) {
  auto spec = ParseJobSpecYaml(yaml, job.dir);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return {};
  return PlanAndSimulate(*std::move(spec));
}

struct Config {
  std::string name;
  std::string mesh;                                 // YAML flow mapping
  std::map<std::string, std::string> layer_places;  // layer -> "weight: [...], bias: [...]"
  std::string data_places;                          // "" or "[Shard(0), Replicate()]"
  v1::Instruction::Op must_use = v1::Instruction::OP_UNSPECIFIED;
};

// Whether any rank holds a parameter in pieces (so the placements took effect).
bool AnySharded(const JobSimulation& out) {
  for (const auto& rank : out.pieces) {
    for (const auto& [name, piece] : rank) {
      if (piece.lengths != piece.global_shape) return true;
    }
  }
  return false;
}

std::ostream& operator<<(std::ostream& os, const Config& c) { return os << c.name; }

// MlpJob's YAML with placements added to its layers and batch.
std::string Yaml(const MlpJob& job, const Config& c) {
  std::string yaml = job.SpecYaml(c.mesh);
  for (const auto& [layer, places] : c.layer_places) {
    const std::string key = "{name: " + layer + ",";
    size_t at = yaml.find(key);
    EXPECT_NE(at, std::string::npos) << layer;
    if (at == std::string::npos) continue;
    size_t close = yaml.find('}', at);
    yaml.insert(close, ", placements: {" + places + "}");
  }
  if (!c.data_places.empty()) {
    const std::string key = "  batch_size: 8\n";
    size_t at = yaml.find(key);
    EXPECT_NE(at, std::string::npos);
    if (at != std::string::npos) {
      yaml.insert(at + key.size(), "  placements: " + c.data_places + "\n");
    }
  }
  return yaml;
}

class SimulatedRunTest : public ::testing::TestWithParam<Config> {};

TEST_P(SimulatedRunTest, MatchesOneRankAndFloat64Reference) {
  const Config& c = GetParam();
  MlpJob job = MlpJob::Create();
  RefMlp ref = job.Reference();
  std::vector<double> reference = ref.Train(job.inputs, job.labels, MlpJob::kSamples,
                                            MlpJob::kBatch, MlpJob::kSteps, job.optimizer);

  JobSimulation single = Simulate(job, job.SpecYaml("{shape: [1], dim_names: [dp]}"));
  const std::string yaml = Yaml(job, c);
  JobSimulation dist = Simulate(job, yaml);
  ASSERT_EQ(single.losses.size(), reference.size());
  ASSERT_EQ(dist.losses.size(), reference.size()) << yaml;
  ASSERT_EQ(dist.grad_norms.size(), reference.size());
  for (size_t s = 0; s < reference.size(); ++s) {
    EXPECT_LE(RelDiff(single.losses[s], reference[s]), 1e-4) << "step " << s + 1;
    EXPECT_LE(RelDiff(dist.losses[s], single.losses[s]), 1e-5) << "step " << s + 1;
    // The global gradient norm counts every element once, whatever the placements.
    EXPECT_LE(RelDiff(dist.grad_norms[s], single.grad_norms[s]), 1e-5)
        << "step " << s + 1 << ": grad norm " << dist.grad_norms[s] << " vs 1 rank "
        << single.grad_norms[s] << " in\n" << yaml;
  }
  for (const auto& [layer, places] : c.layer_places) {
    if (places.find("Shard") != std::string::npos) {
      EXPECT_TRUE(AnySharded(dist)) << "no parameter is sharded in\n" << yaml;
    }
  }
  if (c.must_use != v1::Instruction::OP_UNSPECIFIED) {
    EXPECT_GT(dist.ops[c.must_use], 0) << v1::Instruction::Op_Name(c.must_use) << " in\n" << yaml;
  }
  // Each rank's piece of each parameter equals the slice of the reference and of the 1-rank
  // run; a Partial(sum) parameter's other members hold zeros throughout.
  ASSERT_FALSE(single.pieces.empty());
  for (size_t r = 0; r < dist.pieces.size(); ++r) {
    for (const char* name : kParams) {
      auto it = dist.pieces[r].find(name);
      ASSERT_NE(it, dist.pieces[r].end()) << "rank " << r << " has no " << name;
      const ParamPiece& piece = it->second;
      std::vector<double> want = SliceBox(ref.params.at(name), piece);
      std::vector<double> one = SliceBox(single.pieces[0].at(name).values, piece);
      ASSERT_EQ(piece.values.size(), want.size()) << name;
      for (size_t i = 0; i < want.size(); ++i) {
        const std::string where = std::string(name) + "[" + std::to_string(i) + "] rank " +
                                  std::to_string(r);
        if (piece.zeros_init) {
          EXPECT_EQ(piece.values[i], 0.0f) << where;
          continue;
        }
        EXPECT_NEAR(piece.values[i], want[i], 1e-4) << where << " vs float64";
        EXPECT_NEAR(piece.values[i], one[i], 1e-5 * std::max(1.0, std::abs(one[i]))) << where;
      }
    }
  }
}

const std::string kColRow = "weight: [Shard(1)], bias: [Shard(0)]";

INSTANTIATE_TEST_SUITE_P(
    Meshes, SimulatedRunTest,
    ::testing::Values(
        Config{"dp2", "{shape: [2], dim_names: [dp]}"},
        Config{"dp4", "{shape: [4], dim_names: [dp]}"},
        Config{"dp8", "{shape: [8], dim_names: [dp]}"},
        // dp x mp with replicated parameters: the mp groups compute the same thing.
        Config{"dp2xmp2_replicated", "{shape: [2, 2], dim_names: [dp, mp]}"},
        Config{"mp2xdp2_replicated", "{shape: [2, 2], dim_names: [mp, dp]}"},
        // Megatron column -> row on mp; hidden 16 over 3 is uneven (5, 5, 6).
        Config{"mp2_col_row", "{shape: [2], dim_names: [mp]}",
               {{"fc0", kColRow}, {"fc1", "weight: [Shard(0)]"}}},
        Config{"mp4_col_row", "{shape: [4], dim_names: [mp]}",
               {{"fc0", kColRow}, {"fc1", "weight: [Shard(0)]"}}},
        Config{"mp3_uneven_col_row", "{shape: [3], dim_names: [mp]}",
               {{"fc0", kColRow}, {"fc1", "weight: [Shard(0)]"}, {"fc2", "weight: [Shard(1)]"}}},
        // The seed's DP2 x MP2.
        Config{"dp2xmp2_seed", "{shape: [2, 2], dim_names: [dp, mp]}",
               {{"fc0", "weight: [Replicate(), Shard(1)], bias: [Replicate(), Shard(0)]"},
                {"fc1", "weight: [Replicate(), Shard(0)]"}},
               "[Shard(0), Replicate()]"},
        // A 3-d mesh: data parallel, column -> row on mp, fc1 also split by columns on x and
        // fc2 column-parallel on x.
        Config{"dp2xmp2xx2", "{shape: [2, 2, 2], dim_names: [dp, mp, x]}",
               {{"fc0", "weight: [Replicate(), Shard(1), Replicate()], "
                        "bias: [Replicate(), Shard(0), Replicate()]"},
                {"fc1", "weight: [Replicate(), Shard(0), Shard(1)]"},
                {"fc2", "weight: [Replicate(), Replicate(), Shard(1)], "
                        "bias: [Replicate(), Replicate(), Shard(0)]"}},
               "[Shard(0), Replicate(), Replicate()]"},
        // Batch 8 over 3 ranks: 2, 2, 4 samples; the loss is still the global mean.
        Config{"dp3_uneven_batch", "{shape: [3], dim_names: [dp]}"},
        Config{"dp3xmp2_uneven", "{shape: [3, 2], dim_names: [dp, mp]}",
               {{"fc0", "weight: [Replicate(), Shard(1)]"},
                {"fc1", "weight: [Replicate(), Shard(0)]"}},
               "[Shard(0), Replicate()]"},
        // Partial batches: the sum (member 0 loads, the others hold zeros) or the mean.
        Config{"dp2_partial_sum_batch", "{shape: [2], dim_names: [dp]}", {}, "[Partial(sum)]",
               v1::Instruction::SCALE},
        Config{"dp2xmp2_partial_avg_batch", "{shape: [2, 2], dim_names: [dp, mp]}",
               {{"fc0", "weight: [Replicate(), Shard(1)]"}},
               "[Shard(0), Partial(avg)]"},
        // Partial parameters: fc1's weight a sum over mp (member 1 only decays its zeros:
        // WEIGHT_DECAY), fc2's bias a mean over dp.
        Config{"dp2xmp2_partial_params", "{shape: [2, 2], dim_names: [dp, mp]}",
               {{"fc1", "weight: [Replicate(), Partial(sum)]"},
                {"fc2", "bias: [Partial(avg), Replicate()]"}},
               "[Shard(0), Replicate()]", v1::Instruction::WEIGHT_DECAY},
        // fc0's weight split by rows on the batch dim: the input moves Shard(0) -> Shard(1).
        Config{"dp2_all_to_all", "{shape: [2], dim_names: [dp]}",
               {{"fc0", "weight: [Shard(0)]"}}, "[Shard(0)]", v1::Instruction::ALL_TO_ALL}),
    [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

}  // namespace
}  // namespace weft::testing
