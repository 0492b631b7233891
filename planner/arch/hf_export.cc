#include "planner/arch/hf_export.h"

#include "planner/arch/transformer.h"
#include "planner/graph.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace weft::planner {
namespace {

// Key order as Hugging Face writes config.json: easier to compare by eye.
using Json = nlohmann::ordered_json;

Json Gpt2Config(const v1::TransformerConfig& c) {
  return Json{{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", c.vocab_size()},
              {"n_positions", c.n_positions()},
              {"n_embd", c.n_embd()},
              {"n_layer", c.n_layer()},
              {"n_head", c.n_head()},
              // 0 in a spec from gRPC: Hugging Face's null, 4 * n_embd.
              {"n_inner", c.n_inner() > 0 ? Json(c.n_inner()) : Json(nullptr)},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", c.layer_norm_epsilon()},
              {"embd_pdrop", c.embd_pdrop()},
              {"attn_pdrop", c.attn_pdrop()},
              {"resid_pdrop", c.resid_pdrop()},
              {"scale_attn_weights", true},
              {"scale_attn_by_inverse_layer_idx", false},
              {"reorder_and_upcast_attn", false},
              {"tie_word_embeddings", true}};
}

Json LlamaConfig(const v1::TransformerConfig& c) {
  const int64_t kv_heads =
      c.num_key_value_heads() > 0 ? c.num_key_value_heads() : c.num_attention_heads();
  return Json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", c.vocab_size()},
              {"hidden_size", c.hidden_size()},
              {"intermediate_size", c.intermediate_size()},
              {"num_hidden_layers", c.num_hidden_layers()},
              {"num_attention_heads", c.num_attention_heads()},
              {"num_key_value_heads", kv_heads},
              {"head_dim", c.hidden_size() / c.num_attention_heads()},
              {"hidden_act", "silu"},
              {"max_position_embeddings", c.max_position_embeddings()},
              {"rms_norm_eps", c.rms_norm_eps()},
              {"rope_theta", c.rope_theta()},
              {"rope_scaling", nullptr},
              {"attention_bias", false},
              {"attention_dropout", c.attention_dropout()},
              {"mlp_bias", false},
              {"pretraining_tp", 1},
              {"tie_word_embeddings", c.tie_word_embeddings()}};
}

std::string Dump(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<HfExportMetadata> HfExportMetadataOf(const v1::JobSpec& spec) {
  const std::string& arch = spec.model().arch();
  if (arch.empty()) return HfExportMetadata{};
  ASSIGN_OR_RETURN(Graph g, BuildTransformerGraph(spec));
  Json shapes = Json::object();
  for (const Parameter& p : g.params) {
    if (!p.file_shape.empty()) shapes[g.tensors[p.tensor].name] = p.file_shape;
  }
  const v1::TransformerConfig& c = spec.model().config();
  const Json config = arch == "gpt2" ? Gpt2Config(c) : LlamaConfig(c);
  return HfExportMetadata{{kHfArchKey, arch},
                          {kHfConfigKey, Dump(config, -1)},
                          {kHfShapesKey, Dump(shapes, -1)}};
}

}  // namespace weft::planner
