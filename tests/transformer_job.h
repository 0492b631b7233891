// A small GPT-2, Llama or Qwen2 job for the integration tests: a token file (llm.c format) of a
// fixed pattern, parameters from a Hugging Face-named safetensors file in Hugging Face's layouts
// (gpt2's with the "transformer." prefix its files carry), spec files per case, the float64
// reference of the same run (tests/transformer_reference) and the parameters of a run's last
// checkpoint.
//
// E.g.
//   TransformerJob job = TransformerJob::Create("gpt2");
//   std::string spec = job.WriteSpec("dp2", "{shape: [2], dim_names: [dp]}");
//   std::map<std::string, std::vector<double>> params;
//   std::vector<double> want = job.Reference(&params);
#ifndef WEFT_TESTS_TRANSFORMER_JOB_H_
#define WEFT_TESTS_TRANSFORMER_JOB_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/mlp_reference.h"
#include "tests/transformer_reference.h"

namespace weft::testing {

// An llm.c token file: 256 int32 header (magic 20240520, version 1, token count), uint16 tokens.
void WriteLlmcTokens(const std::string& path, const std::vector<int32_t>& tokens);

// The job's sizes: the global batch, the sequence length, the steps, the vocabulary, the blocks
// and the seed.
struct TransformerJobShape {
  int batch = 4;
  int seq = 8;
  int steps = 4;
  int vocab = 32;
  int layers = 4;
  uint64_t seed = 11;
};

struct TransformerJob {
  std::string arch;
  TransformerJobShape shape;
  RefTransformerConfig config;
  std::string config_yaml;  // model.config as a flow mapping
  std::string dir;
  std::vector<int32_t> tokens;                       // train.bin's
  std::map<std::string, std::vector<double>> init;  // HF name -> values in HF layout
  RefOptimizer optimizer;                            // the spec's default optimizer

  // gpt2 (16 wide, 4 heads) or llama / qwen2 (16 wide, 4 heads over 2 kv heads, untied; qwen2's
  // q/k/v biases from the same test values as the weights), `dropout` on
  // gpt2's three sites; 3 batches and a bit of tokens (step 4 wraps around to the first samples)
  // in dir/train.bin and the parameters in dir/init.safetensors.
  static TransformerJob Create(const std::string& arch, double dropout = 0.0,
                               TransformerJobShape shape = {});

  // The spec of case `name` on `mesh`, written to dir/<name>.yaml; `data_extra` goes into data's
  // mapping, `model_extra` into model's, `train_extra` into train's, `extra` at the top;
  // `optimizer` replaces the default optimizer mapping (AdamW, lr 0.01, weight decay 0.01).
  // Checkpoints go to dir/ckpt-<name> after the last step.
  std::string WriteSpec(const std::string& name, const std::string& mesh,
                        const std::string& data_extra = "", const std::string& extra = "",
                        const std::string& init_from = "init.safetensors",
                        const std::string& model_extra = "", const std::string& optimizer = "",
                        const std::string& train_extra = "") const;

  // The float64 reference of the default spec: per-step losses, and the parameters after the
  // last step.
  std::vector<double> Reference(std::map<std::string, std::vector<double>>* final_params) const;

  // Every parameter of case `name`'s last checkpoint, by HF name (row-major: the graph's layout
  // holds the same elements in the same order as HF's).
  std::map<std::string, std::vector<double>> FinalParams(const std::string& name) const;
};

}  // namespace weft::testing

#endif  // WEFT_TESTS_TRANSFORMER_JOB_H_
