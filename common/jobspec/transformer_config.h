// A transformer model in the spec (`model.arch`): its hyper-parameters (v1::TransformerConfig)
// read under Hugging Face's key names, from the spec's `model.config:` mapping or from a Hugging
// Face config.json (`model.config_file:`), and the spec-level checks of such a model. Every error
// is INVALID_ARGUMENT naming the key, e.g. "model.config.n_head: missing (gpt2 needs vocab_size,
// ...)" or "model.config_file: /jobs/config.json: hidden_act: \"gelu\" is not supported; ...".
//
// The keys an architecture reads (each the TransformerConfig field of that name):
//   gpt2   vocab_size n_positions n_embd n_layer n_head layer_norm_epsilon embd_pdrop attn_pdrop
//          resid_pdrop, and n_inner (null or absent: 4 * n_embd)
//   llama  vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads
//          num_key_value_heads rms_norm_eps rope_theta max_position_embeddings
//          tie_word_embeddings attention_dropout
//   qwen2  llama's keys
//
// Policy. A real config.json must load as is, and a spec must say what it trains:
//  - `config:` in the spec: every key above is required (n_inner excepted).
//  - A config file may leave out what Hugging Face itself defaults, and gets HF's default: gpt2
//    layer_norm_epsilon 1e-5, embd_pdrop = attn_pdrop = resid_pdrop 0.1; llama
//    num_key_value_heads = num_attention_heads, rope_theta 10000, tie_word_embeddings false,
//    attention_dropout 0; qwen2 as llama except num_key_value_heads (Qwen2Config's default is
//    32, so a file must give it). (Sizes, rms_norm_eps and max_position_embeddings are
//    required.)
//  - Both: HF metadata that does not change the math is accepted and ignored (architectures,
//    torch_dtype, token ids, initializer_range, use_cache, gpt2's summary_* and
//    task_specific_params, ...; the full list is in the unknown-key message). model_type, when
//    given, must be the arch. Keys that change the math are accepted only at the value Weft
//    implements, and otherwise rejected naming the key, its value and what Weft supports: gpt2
//    activation_function gelu_new (or gelu_pytorch_tanh), scale_attn_weights true,
//    scale_attn_by_inverse_layer_idx false, reorder_and_upcast_attn false, add_cross_attention
//    false, tie_word_embeddings true, n_ctx = n_positions; llama hidden_act silu, rope_scaling
//    null, attention_bias false, mlp_bias false, pretraining_tp 1, head_dim null or
//    hidden_size / num_attention_heads, rope_parameters {rope_type: default, rope_theta} (newer
//    transformers' home of rope_theta); qwen2 as llama without attention_bias, mlp_bias and
//    pretraining_tp (its q/k/v biases are part of the model), and use_sliding_window false
//    (sliding_window and max_window_layers are then ignored). null counts as absent. Any other
//    key is an error listing the known ones.
//  - Types are strict: an integer key takes an integer (not "4", 4.5 or true), a number key an
//    integer or a float, a flag true or false.
//  - Values: sizes > 0, epsilons and rope_theta finite and > 0, dropouts in [0, 1),
//    n_embd % n_head == 0; llama (and qwen2) hidden_size % num_attention_heads == 0,
//    num_attention_heads % num_key_value_heads == 0 and an even head_dim (rotary embeddings
//    rotate pairs). What depends on the mesh (heads, kv heads, vocab and sequence vs the
//    tensor-parallel degree) is the planner's to check.
//
// E.g.
//   ASSIGN_OR_RETURN(v1::TransformerConfig c,
//                    LoadTransformerConfigFile("llama", "/jobs/config.json"));
#ifndef WEFT_COMMON_JOBSPEC_TRANSFORMER_CONFIG_H_
#define WEFT_COMMON_JOBSPEC_TRANSFORMER_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json_fwd.hpp"
#include "weft/v1/job.pb.h"

namespace weft {

// The architectures' config halves are one table in transformer_config.cc (ArchConfig: keys,
// Hugging Face's defaults, value checks), one entry per architecture; the planner's ArchDef of
// the same name (planner/arch/arch.h) builds the model.

// "gpt2, llama, ...": the architectures, as messages list them.
std::string KnownArchs();
bool IsKnownArch(absl::string_view arch);

// Fills the values `config` leaves implied for `arch` (gpt2's n_inner 0: 4 * n_embd), so that
// the planner reads one width. An unknown arch: nothing (validation reports it).
void ResolveTransformerConfig(absl::string_view arch, v1::TransformerConfig* config);

// How many transformer blocks `config` has for `arch` (gpt2's n_layer, llama's and qwen2's
// num_hidden_layers); 0 for an unknown arch.
int64_t TransformerBlocks(absl::string_view arch, const v1::TransformerConfig& config);

// Where a config was written: decides which keys may be absent (see the policy above).
enum class ConfigSource { kSpec, kFile };

// Reads `config`, a JSON object in Hugging Face's form (the YAML reader converts `config:` to
// one), for `arch`. Keys are named "<path>.<key>" for kSpec (path "model.config") and
// "<path>: <key>" for kFile (path "model.config_file: /jobs/config.json"). `where` may map a key
// to where it was written (" (line 7, column 5)"), appended to that key's errors; "" is the
// mapping itself, for missing keys. n_inner and num_key_value_heads come back resolved.
absl::StatusOr<v1::TransformerConfig> TransformerConfigFromJson(
    absl::string_view arch, const nlohmann::json& config, ConfigSource source,
    const std::string& path, const std::map<std::string, std::string>& where = {});

// Reads a Hugging Face config.json as is (kFile). Errors start "model.config_file: <file>: ".
absl::StatusOr<v1::TransformerConfig> LoadTransformerConfigFile(absl::string_view arch,
                                                                const std::string& file);

// The value checks above on a config however it arrived (a spec over gRPC carries the proto),
// naming keys "model.config.<key>". A field of the other architecture set is an error; a gpt2
// n_inner of 0 means 4 * n_embd.
absl::Status ValidateTransformerConfig(absl::string_view arch, const v1::TransformerConfig& config);

// The spec-level checks of a model: with model.arch, a known arch, no layers, the config's
// values (ValidateTransformerConfig), loss cross_entropy (or empty: the default) and
// well-formed placement patterns (param_pattern.h); without it, no config, config_file or
// placements (a layers model places its parameters per layer). The YAML reader runs it; a spec
// from gRPC needs it before its model is built.
absl::Status ValidateTransformerModel(const v1::Model& model);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_TRANSFORMER_CONFIG_H_
