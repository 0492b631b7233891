// Shared pieces of the integration tests: a small MLP job (npy data, init_from safetensors) whose
// files the fixture writes, and its float64 reference.
#ifndef WEFT_TESTS_CLUSTER_FIXTURE_H_
#define WEFT_TESTS_CLUSTER_FIXTURE_H_

#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "tests/daemon_cluster.h"
#include "tests/mlp_reference.h"
#include "tests/process.h"

namespace weft::testing {

// fc0 8->16 (bias) -> gelu -> fc1 16->16 (bias only if fc1_bias) -> relu -> fc2 16->4 (bias),
// mse, AdamW with weight decay, 20 samples, batch 8 (so step 3 wraps around), 5 steps.
struct MlpJob {
  static constexpr int kIn = 8, kHidden = 16, kOut = 4, kSamples = 20, kBatch = 8, kSteps = 5;

  std::string dir;  // holds inputs.npy, labels.npy, init.safetensors and the specs
  std::vector<double> inputs, labels;
  std::vector<NamedTensor> init;
  RefOptimizer optimizer;
  bool fc1_bias = false;

  // Writes the data and init files into a fresh temporary folder.
  static MlpJob Create(bool fc1_bias = false);
  // The YAML for a mesh (e.g. "{shape: [4], dim_names: [dp]}"); `extra` is appended verbatim and
  // layer_extra["fc0"] is added inside fc0's flow mapping (e.g. "placements: {weight: [Shard(1)]}").
  std::string SpecYaml(const std::string& mesh, const std::string& extra = "",
                       const std::map<std::string, std::string>& layer_extra = {}) const;
  // Writes SpecYaml to dir/<file> and returns its path.
  std::string WriteSpec(const std::string& file, const std::string& yaml) const;
  // The float64 reference of this job's layers, holding its init values.
  RefMlp Reference() const;
  // Per-step losses of the float64 reference; with bf16_matmul, of `precision: bf16` (matmul
  // operands rounded to bfloat16); with bf16_storage, of `storage: bf16` (stored values rounded
  // to bfloat16, RefMlp::bf16_storage).
  std::vector<double> ReferenceLosses(bool bf16_matmul = false, bool bf16_storage = false) const;
};

// Megatron column -> row over a 1-d mp mesh, as MlpJob::SpecYaml's layer_extra: fc0
// column-parallel (weight Shard(1), bias Shard(0)), fc1 row-parallel (weight Shard(0)).
const std::map<std::string, std::string>& ColRowOverMp();

// Runs `weftctl local --ranks N --json SPEC` through the real binaries and returns the per-step
// losses; fails the calling test unless the job SUCCEEDED with every step reported.
std::vector<double> RunLocalLosses(const std::string& spec_path, int ranks,
                                   int steps = MlpJob::kSteps);

// `weftctl plan --json SPEC`'s document; an empty object (and a failed test) when it fails.
nlohmann::json PlanJson(const std::string& spec_path);

// Runs `weftctl local --json SPEC` through the real binaries and returns the largest "peak_bytes"
// of its step events (each the most any rank's allocator held during that step); fails the
// calling test unless the job succeeded and every step reported one.
int64_t LocalPeakBytes(const std::string& spec_path);

// Runs the spec file on a running cluster (submitted as weftctl does, watched to its end) and
// returns the per-step losses; fails the calling test unless the job SUCCEEDED with every step
// reported. For suites that share one cluster between their cases.
std::vector<double> RunClusterLosses(const DaemonCluster& cluster, const std::string& spec_path,
                                     int steps = MlpJob::kSteps);

// |a - b| / |b|.
double RelDiff(double a, double b);

// A run's per-step losses against the same job's 1-rank run (within 1e-5, relative) and its
// float64 reference (within 1e-4); each holds `steps` losses. `what` names the run in failures.
void ExpectLossesMatch(const std::vector<double>& losses, const std::vector<double>& one,
                       const std::vector<double>& reference, int steps, const std::string& what);

// got's per-step losses within `tolerance` (relative) of want's, the same number of them.
void ExpectLossesNear(const std::vector<double>& got, const std::vector<double>& want,
                      double tolerance, const std::string& what);

// The MLP job's spec on `mesh` with `steps` steps, a checkpoint block (`checkpoint`, a flow
// mapping; empty: none), train.resume, extra per-layer keys and init_from (empty: the job's file).
std::string MlpSpec(const MlpJob& job, const std::string& mesh, int steps,
                    const std::string& checkpoint, bool resume,
                    const std::map<std::string, std::string>& layer_extra = {},
                    const std::string& init_from = "");

// This repository's README tokenized byte by byte (`weftctl data tokenize --bytes`) into
// dir/readme.bin, which examples/gpt2_*.yaml read; fails the calling test unless it worked.
bool WriteReadmeTokens(const std::string& dir);

// Every tensor of two committed checkpoints (step folders), read whole, is identical bit for bit;
// fails the calling test naming the tensor that differs.
void ExpectSameTensors(const std::string& a_dir, const std::string& b_dir);

// Losses parsed from `weftctl local --json` output; fails the calling test on a malformed line
// and sets *final_state to the last state event.
std::vector<double> ParseStepLosses(const std::string& json_lines, std::string* final_state);

}  // namespace weft::testing

#endif  // WEFT_TESTS_CLUSTER_FIXTURE_H_
