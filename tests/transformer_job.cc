#include "tests/transformer_job.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "common/checkpoint/directory.h"
#include "common/checkpoint/reader.h"
#include "tests/process.h"

namespace weft::testing {

void WriteLlmcTokens(const std::string& path, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 256 * sizeof(int32_t));
  for (int32_t t : tokens) {
    const uint16_t v = static_cast<uint16_t>(t);
    out.write(reinterpret_cast<const char*>(&v), sizeof(v));
  }
}

TransformerJob TransformerJob::Create(const std::string& arch, double dropout,
                                      TransformerJobShape shape) {
  TransformerJob job;
  job.arch = arch;
  job.shape = shape;
  RefTransformerConfig& c = job.config;
  c.arch = arch;
  c.vocab_size = shape.vocab;
  std::ostringstream y;
  if (arch == "gpt2") {
    c.n_positions = 16;
    c.n_embd = 16;
    c.n_layer = shape.layers;
    c.n_head = 4;
    c.layer_norm_epsilon = 1e-5;
    c.embd_pdrop = c.attn_pdrop = c.resid_pdrop = dropout;
    y << "{vocab_size: " << shape.vocab << ", n_positions: 16, n_embd: 16, n_layer: "
      << shape.layers << ", n_head: 4, layer_norm_epsilon: 1.0e-5, embd_pdrop: " << dropout
      << ", attn_pdrop: " << dropout << ", resid_pdrop: " << dropout << "}";
  } else {
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_hidden_layers = shape.layers;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = 10000.0;
    c.tie_word_embeddings = false;
    y << "{vocab_size: " << shape.vocab << ", hidden_size: 16, intermediate_size: 24, "
      << "num_hidden_layers: " << shape.layers << ", num_attention_heads: 4, "
      << "num_key_value_heads: 2, rms_norm_eps: 1.0e-5, rope_theta: 10000.0, "
      << "max_position_embeddings: 16, tie_word_embeddings: false, attention_dropout: 0.0}";
  }
  job.config_yaml = y.str();
  job.dir = MakeTempDir("transformer-" + arch);
  // 3 batches and a bit: step 4 wraps around to the first samples.
  job.tokens.resize(3 * shape.batch * shape.seq + 5);
  for (size_t i = 0; i < job.tokens.size(); ++i) {
    job.tokens[i] = static_cast<int32_t>((i * 7 + (i * i) % 13) % shape.vocab);
  }
  WriteLlmcTokens(job.dir + "/train.bin", job.tokens);

  RefTransformer model(c);
  model.SetTestParams(/*seed=*/100, /*scale=*/0.3);
  job.init = model.params;
  std::vector<NamedTensor> file;
  for (const RefParamShape& s : model.ParamShapes()) {
    const std::string name = arch == "gpt2" ? "transformer." + s.name : s.name;
    file.push_back({name, s.shape, model.params.at(s.name)});
  }
  WriteSafetensorsF32(job.dir + "/init.safetensors", file);
  job.optimizer.lr = 0.01;
  job.optimizer.weight_decay = 0.01;
  return job;
}

std::string TransformerJob::WriteSpec(const std::string& name, const std::string& mesh,
                                      const std::string& data_extra, const std::string& extra,
                                      const std::string& init_from,
                                      const std::string& model_extra,
                                      const std::string& optimizer_yaml,
                                      const std::string& train_extra) const {
  std::ostringstream s;
  s << "name: " << arch << "-" << name << "\n"
    << "mesh: " << mesh << "\n"
    << "model: {arch: " << arch << ", config: " << config_yaml << model_extra << "}\n"
    << "data: {source: tokens, path: train.bin, seq_len: " << shape.seq
    << ", batch_size: " << shape.batch << data_extra << "}\n"
    << "optimizer: "
    << (optimizer_yaml.empty()
            ? "{type: adamw, lr: 0.01, betas: [0.9, 0.999], eps: 1.0e-8, weight_decay: 0.01}"
            : optimizer_yaml)
    << "\n"
    << "train: {steps: " << shape.steps << ", seed: " << shape.seed << train_extra << "}\n"
    << "init_from: " << init_from << "\n"
    << "checkpoint: {dir: ckpt-" << name << ", every: " << shape.steps << "}\n"
    << extra;
  const std::string path = dir + "/" + name + ".yaml";
  std::ofstream(path) << s.str();
  return path;
}

std::vector<double> TransformerJob::Reference(
    std::map<std::string, std::vector<double>>* final_params) const {
  RefTransformer model(config);
  model.params = init;
  std::vector<double> losses =
      model.Train(tokens, shape.batch, shape.seq, shape.steps, optimizer, shape.seed);
  *final_params = model.params;
  return losses;
}

std::map<std::string, std::vector<double>> TransformerJob::FinalParams(
    const std::string& name) const {
  std::map<std::string, std::vector<double>> out;
  auto step_dir = checkpoint::ResolveStepDir(dir + "/ckpt-" + name);
  EXPECT_TRUE(step_dir.ok()) << step_dir.status();
  if (!step_dir.ok()) return out;
  auto reader = checkpoint::CheckpointReader::Open(*step_dir);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return out;
  EXPECT_EQ(reader->index().step, shape.steps);
  for (const auto& [tensor, _] : init) {
    auto it = reader->index().tensors.find(tensor);
    EXPECT_NE(it, reader->index().tensors.end()) << name << ": no " << tensor;
    if (it == reader->index().tensors.end()) continue;
    const std::vector<int64_t>& shape = it->second.global_shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> values(static_cast<size_t>(n));
    absl::Status s =
        reader->ReadBox(tensor, std::vector<int64_t>(shape.size(), 0), shape, values.data());
    EXPECT_TRUE(s.ok()) << s;
    out[tensor].assign(values.begin(), values.end());
  }
  return out;
}

}  // namespace weft::testing
