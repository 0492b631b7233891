#include "tests/cluster_fixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/checkpoint/checkpoint.h"

namespace weft::testing {

MlpJob MlpJob::Create(bool fc1_bias) {
  MlpJob job;
  job.fc1_bias = fc1_bias;
  job.dir = MakeTempDir("mlp-job");
  job.inputs = TestValues(kSamples * kIn, 1, 1.0);
  job.labels = TestValues(kSamples * kOut, 2, 0.5);
  WriteNpyF32(job.dir + "/inputs.npy", {kSamples, kIn}, job.inputs);
  WriteNpyF32(job.dir + "/labels.npy", {kSamples, kOut}, job.labels);
  job.init = {
      {"fc0.weight", {kIn, kHidden}, TestValues(kIn * kHidden, 3, 0.35)},
      {"fc0.bias", {kHidden}, TestValues(kHidden, 4, 0.1)},
      {"fc1.weight", {kHidden, kHidden}, TestValues(kHidden * kHidden, 5, 0.25)},
      {"fc2.weight", {kHidden, kOut}, TestValues(kHidden * kOut, 6, 0.25)},
      {"fc2.bias", {kOut}, TestValues(kOut, 7, 0.1)},
  };
  if (fc1_bias) job.init.push_back({"fc1.bias", {kHidden}, TestValues(kHidden, 8, 0.1)});
  WriteSafetensorsF32(job.dir + "/init.safetensors", job.init);
  job.optimizer.type = "adamw";
  job.optimizer.lr = 0.01;
  job.optimizer.weight_decay = 0.01;
  return job;
}

std::string MlpJob::SpecYaml(const std::string& mesh, const std::string& extra,
                             const std::map<std::string, std::string>& layer_extra) const {
  auto more = [&](const std::string& layer) {
    auto it = layer_extra.find(layer);
    return it == layer_extra.end() ? std::string() : ", " + it->second;
  };
  std::ostringstream s;
  s << "name: mlp-test\n"
    << "mesh: " << mesh << "\n"
    << "model:\n"
    << "  layers:\n"
    << "    - {name: fc0, type: linear, in_features: 8, out_features: 16, bias: true" << more("fc0")
    << "}\n"
    << "    - {name: act0, type: gelu}\n"
    << "    - {name: fc1, type: linear, in_features: 16, out_features: 16, bias: "
    << (fc1_bias ? "true" : "false") << more("fc1") << "}\n"
    << "    - {name: act1, type: relu}\n"
    << "    - {name: fc2, type: linear, in_features: 16, out_features: 4, bias: true" << more("fc2")
    << "}\n"
    << "  loss: mse\n"
    << "data:\n"
    << "  source: npy\n"
    << "  input: inputs.npy\n"
    << "  label: labels.npy\n"
    << "  batch_size: 8\n"
    << "optimizer: {type: adamw, lr: 0.01, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.01}\n"
    << "train: {steps: 5, seed: 7}\n"
    << "init_from: init.safetensors\n"
    << extra;
  return s.str();
}

std::string MlpJob::WriteSpec(const std::string& file, const std::string& yaml) const {
  std::string path = dir + "/" + file;
  std::ofstream(path) << yaml;
  return path;
}

RefMlp MlpJob::Reference() const {
  RefMlp mlp({{"fc0", "linear", kIn, kHidden, true},
              {"act0", "gelu"},
              {"fc1", "linear", kHidden, kHidden, fc1_bias},
              {"act1", "relu"},
              {"fc2", "linear", kHidden, kOut, true}});
  for (const auto& t : init) mlp.params[t.name] = t.values;
  return mlp;
}

std::vector<double> MlpJob::ReferenceLosses(bool bf16_matmul, bool bf16_storage) const {
  RefMlp mlp = Reference();
  mlp.bf16_matmul = bf16_matmul;
  mlp.bf16_storage = bf16_storage;
  return mlp.Train(inputs, labels, kSamples, kBatch, kSteps, optimizer);
}

std::vector<double> RunLocalLosses(const std::string& spec_path, int ranks, int steps) {
  CommandResult r = RunCommand({BinaryPath("client/weftctl"), "local", "--ranks",
                                std::to_string(ranks), "--json", "--coordinator_bin",
                                BinaryPath("coordinator/weft-coordinator"), "--worker_bin",
                                BinaryPath("worker/weft-worker"), spec_path},
                               240);
  EXPECT_EQ(r.exit_code, 0) << spec_path << " on " << ranks << " ranks\nstdout:\n"
                            << r.out << "\nstderr:\n" << r.err;
  std::string state;
  std::vector<double> losses = ParseStepLosses(r.out, &state);
  EXPECT_EQ(state, "SUCCEEDED") << r.out << r.err;
  EXPECT_EQ(losses.size(), static_cast<size_t>(steps)) << r.out << r.err;
  return losses;
}

nlohmann::json PlanJson(const std::string& spec_path) {
  CommandResult r = RunCommand({BinaryPath("client/weftctl"), "plan", "--json", spec_path}, 120);
  EXPECT_EQ(r.exit_code, 0) << spec_path << ": " << r.err;
  if (r.exit_code != 0) return nlohmann::json::object();
  return nlohmann::json::parse(r.out);
}

int64_t LocalPeakBytes(const std::string& spec_path) {
  CommandResult r = RunCommand(
      {BinaryPath("client/weftctl"), "local", "--json", "--coordinator_bin",
       BinaryPath("coordinator/weft-coordinator"), "--worker_bin", BinaryPath("worker/weft-worker"),
       spec_path},
      240);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  int64_t peak = 0;
  int steps = 0;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json event = nlohmann::json::parse(line);
    if (event["type"] != "step") continue;
    ++steps;
    EXPECT_TRUE(event.contains("peak_bytes")) << line;
    if (event.contains("peak_bytes")) peak = std::max(peak, event["peak_bytes"].get<int64_t>());
  }
  EXPECT_GT(steps, 0) << r.out;
  return peak;
}

std::vector<double> RunClusterLosses(const DaemonCluster& cluster, const std::string& spec_path,
                                     int steps) {
  const JobOutcome outcome = cluster.RunSpecFile(spec_path);  // fails the test unless SUCCEEDED
  std::vector<double> losses = outcome.LossList();
  EXPECT_EQ(losses.size(), static_cast<size_t>(steps)) << spec_path << ": " << outcome.message;
  return losses;
}

const std::map<std::string, std::string>& ColRowOverMp() {
  static const auto* layers = new std::map<std::string, std::string>{
      {"fc0", "placements: {weight: [Shard(1)], bias: [Shard(0)]}"},
      {"fc1", "placements: {weight: [Shard(0)]}"}};
  return *layers;
}

double RelDiff(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-12); }

void ExpectLossesMatch(const std::vector<double>& losses, const std::vector<double>& one,
                       const std::vector<double>& reference, int steps, const std::string& what) {
  ASSERT_EQ(one.size(), static_cast<size_t>(steps)) << what << ": the 1-rank run";
  ASSERT_EQ(reference.size(), static_cast<size_t>(steps)) << what << ": the float64 reference";
  ASSERT_EQ(losses.size(), static_cast<size_t>(steps)) << what;
  for (int s = 0; s < steps; ++s) {
    EXPECT_LE(RelDiff(losses[s], one[s]), 1e-5)
        << what << " step " << s + 1 << ": " << losses[s] << " vs 1 rank " << one[s];
    EXPECT_LE(RelDiff(losses[s], reference[s]), 1e-4)
        << what << " step " << s + 1 << ": " << losses[s] << " vs float64 " << reference[s];
  }
}

void ExpectLossesNear(const std::vector<double>& got, const std::vector<double>& want,
                      double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_LE(RelDiff(got[s], want[s]), tolerance)
        << what << " step " << s + 1 << ": " << got[s] << " vs " << want[s];
  }
}

std::string MlpSpec(const MlpJob& job, const std::string& mesh, int steps,
                    const std::string& checkpoint, bool resume,
                    const std::map<std::string, std::string>& layer_extra,
                    const std::string& init_from) {
  std::string yaml =
      job.SpecYaml(mesh, checkpoint.empty() ? "" : "checkpoint: " + checkpoint + "\n", layer_extra);
  const std::string train = "train: {steps: 5, seed: 7}";
  yaml.replace(yaml.find(train), train.size(),
               "train: {steps: " + std::to_string(steps) + ", seed: 7" +
                   (resume ? ", resume: true" : "") + "}");
  if (!init_from.empty()) {
    const std::string init = "init_from: init.safetensors";
    yaml.replace(yaml.find(init), init.size(), "init_from: " + init_from);
  }
  return yaml;
}

bool WriteReadmeTokens(const std::string& dir) {
  CommandResult r = RunCommand({BinaryPath("client/weftctl"), "data", "tokenize", "--bytes",
                                BinaryPath("README.md"), dir + "/readme.bin"},
                               60);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0;
}

std::vector<double> ParseStepLosses(const std::string& json_lines, std::string* final_state) {
  std::vector<double> losses;
  std::istringstream in(json_lines);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    if (j.is_discarded()) continue;
    if (j["type"] == "step") {
      EXPECT_EQ(j["step"].get<int64_t>(), static_cast<int64_t>(losses.size()) + 1) << line;
      losses.push_back(j["loss"].get<double>());
    } else if (j["type"] == "state") {
      *final_state = j["state"].get<std::string>();
    }
  }
  return losses;
}

void ExpectSameTensors(const std::string& a_dir, const std::string& b_dir) {
  auto a = checkpoint::CheckpointReader::Open(a_dir);
  auto b = checkpoint::CheckpointReader::Open(b_dir);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  std::set<std::string> names_a, names_b;
  for (const auto& [name, t] : a->index().tensors) names_a.insert(name);
  for (const auto& [name, t] : b->index().tensors) names_b.insert(name);
  EXPECT_EQ(names_a, names_b);
  for (const auto& [name, t] : a->index().tensors) {
    if (names_b.count(name) == 0) continue;
    int64_t n = 1;
    for (int64_t d : t.global_shape) n *= d;
    std::vector<float> va(n), vb(n);
    const std::vector<int64_t> zeros(t.global_shape.size(), 0);
    ASSERT_TRUE(a->ReadBox(name, zeros, t.global_shape, va.data()).ok()) << name;
    ASSERT_TRUE(b->ReadBox(name, zeros, t.global_shape, vb.data()).ok()) << name;
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), n * sizeof(float)), 0) << name << " differs";
  }
}

}  // namespace weft::testing
