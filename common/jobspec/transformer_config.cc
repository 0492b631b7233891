#include "common/jobspec/transformer_config.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_io.h"
#include "common/jobspec/param_pattern.h"
#include "common/jobspec/validate.h"
#include "common/status.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace weft {
namespace {

using nlohmann::json;
using v1::TransformerConfig;

// A Hugging Face key that changes the math, accepted only at the values Weft implements (none:
// only null). `note` says what that value means.
struct FixedKey {
  std::string key;
  std::vector<json> allowed;
  std::string note;
};

// HF metadata any architecture may carry: token ids, dtypes, library versions, init and
// generation settings. None changes the forward or backward pass Weft runs.
const std::vector<std::string>& CommonIgnoredKeys() {
  // clang-format off
  static const auto* keys = new std::vector<std::string>{
      "architectures", "torch_dtype", "dtype", "transformers_version", "_name_or_path",
      "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range", "use_cache",
      "gradient_checkpointing", "output_attentions", "output_hidden_states", "return_dict"};
  // clang-format on
  return *keys;
}


// A key as messages show it: a config file's only when it reads as a config key (letters,
// digits and underscores, at most 64), for the same reason.
std::string ShowKey(const std::string& key, ConfigSource source) {
  const bool identifier =
      !key.empty() && key.size() <= 64 &&
      std::all_of(key.begin(), key.end(), [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
  if (source == ConfigSource::kFile && !identifier) return "(a key that is not an identifier)";
  return absl::StrCat("\"", key, "\"");
}

bool Contains(const std::vector<std::string>& list, const std::string& key) {
  return std::find(list.begin(), list.end(), key) != list.end();
}

// Whether `value` nests at most `depth` levels (bounded, so a hostile file cannot exhaust the
// stack: dump() recurses).
bool Shallow(const json& value, int depth) {
  if (!value.is_structured()) return true;
  if (depth == 0) return false;
  return std::all_of(value.begin(), value.end(),
                     [&](const json& child) { return Shallow(child, depth - 1); });
}

const char* TypeName(const json& value) {
  if (value.is_object()) return "a mapping";
  if (value.is_array()) return "a list";
  if (value.is_null()) return "null";
  return "a scalar";
}

// A value as messages show it, JSON-written and cut short. A config file's strings are never
// quoted: model.config_file may name any JSON file the cluster can read, and its values (a key in
// a credentials file) must not come back in an error.
std::string Show(const json& value, ConfigSource source = ConfigSource::kSpec) {
  if (source == ConfigSource::kFile && value.is_string()) return "a string (not shown)";
  if (source == ConfigSource::kFile && value.is_structured()) return TypeName(value);
  if (!Shallow(value, 4)) return TypeName(value);
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = absl::StrCat(text.substr(0, 77), "...");
  return text;
}

// Names keys in messages: "model.config.n_head" in a spec, "model.config_file: FILE: n_head"
// in a config file, with where the key was written when known.
class KeyNamer {
 public:
  KeyNamer(std::string path, ConfigSource source, const std::map<std::string, std::string>* where)
      : path_(std::move(path)), source_(source), where_(where) {}

  std::string Path(const std::string& key) const {
    return absl::StrCat(path_, source_ == ConfigSource::kSpec ? "." : ": ", key);
  }

  absl::Status Error(const std::string& key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(Path(key), ": ", what, Where(key)));
  }

  // `key` is missing: where the mapping was written.
  absl::Status Missing(const std::string& key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(Path(key), ": ", what, Where("")));
  }

  // An error about the mapping itself (e.g. its unknown key `key`).
  absl::Status MappingError(const std::string& key, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what, Where(key)));
  }

  ConfigSource source() const { return source_; }

 private:
  // A nested key ("rope_parameters.rope_type") is where its top-level key was written.
  std::string Where(const std::string& key) const {
    if (where_ == nullptr) return "";
    auto it = where_->find(key);
    if (it == where_->end()) it = where_->find(key.substr(0, key.find('.')));
    return it == where_->end() ? "" : it->second;
  }

  std::string path_;
  ConfigSource source_;
  const std::map<std::string, std::string>* where_;
};

// Typed reads of one key of a JSON object; null counts as absent.
class ConfigReader {
 public:
  ConfigReader(const json& config, const KeyNamer& namer) : config_(config), namer_(namer) {}

  bool Has(const std::string& key) const {
    auto it = config_.find(key);
    return it != config_.end() && !it->is_null();
  }
  const json& At(const std::string& key) const { return config_.at(key); }

  absl::StatusOr<int64_t> Int(const std::string& key, const json& value) const {
    if (value.is_number_unsigned()) {
      const uint64_t u = value.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return namer_.Error(key, absl::StrCat(u, " is out of range"));
      }
      return static_cast<int64_t>(u);
    }
    if (value.is_number_integer()) return value.get<int64_t>();
    return namer_.Error(key, absl::StrCat("expected an integer, got ", Show(value, namer_.source())));
  }
  absl::StatusOr<double> Number(const std::string& key, const json& value) const {
    if (value.is_number()) return value.get<double>();
    return namer_.Error(key, absl::StrCat("expected a number, got ", Show(value, namer_.source())));
  }
  absl::StatusOr<bool> Bool(const std::string& key, const json& value) const {
    if (value.is_boolean()) return value.get<bool>();
    return namer_.Error(key, absl::StrCat("expected true or false, got ", Show(value, namer_.source())));
  }
  absl::StatusOr<std::string> String(const std::string& key, const json& value) const {
    if (value.is_string()) return value.get<std::string>();
    return namer_.Error(key, absl::StrCat("expected a string, got ", Show(value, namer_.source())));
  }

  // Reads model key `key` into the TransformerConfig field of that name, typed as the field.
  absl::Status ReadField(const std::string& key, const json& value, TransformerConfig* c) const {
    const google::protobuf::FieldDescriptor* field =
        TransformerConfig::descriptor()->FindFieldByName(key);
    const google::protobuf::Reflection* reflection = c->GetReflection();
    switch (field->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_INT64: {
        ASSIGN_OR_RETURN(int64_t v, Int(key, value));
        reflection->SetInt64(c, field, v);
        return absl::OkStatus();
      }
      case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE: {
        ASSIGN_OR_RETURN(double v, Number(key, value));
        reflection->SetDouble(c, field, v);
        return absl::OkStatus();
      }
      case google::protobuf::FieldDescriptor::CPPTYPE_BOOL: {
        ASSIGN_OR_RETURN(bool v, Bool(key, value));
        reflection->SetBool(c, field, v);
        return absl::OkStatus();
      }
      default:
        return absl::InternalError(absl::StrCat("TransformerConfig.", key, ": unexpected type"));
    }
  }

 private:
  const json& config_;
  const KeyNamer& namer_;
};

// "\"relu\" is not supported; Weft implements \"gelu_new\" or \"gelu_pytorch_tanh\" (...)".
std::string Unsupported(const json& value, const std::string& implemented,
                        const std::string& note, ConfigSource source = ConfigSource::kSpec) {
  return absl::StrCat(Show(value, source), " is not supported; Weft implements ", implemented,
                      note.empty() ? "" : absl::StrCat(" (", note, ")"));
}

absl::Status CheckFixedKey(const FixedKey& fixed, const json& value, const KeyNamer& namer) {
  std::vector<std::string> shown;
  for (const json& a : fixed.allowed) shown.push_back(Show(a));
  const std::string implemented = shown.empty() ? "null" : absl::StrJoin(shown, " or ");
  if (!fixed.allowed.empty()) {
    const json& want = fixed.allowed[0];
    const bool same_type = (want.is_boolean() && value.is_boolean()) ||
                           (want.is_string() && value.is_string()) ||
                           (want.is_number() && value.is_number());
    if (!same_type) {
      return namer.Error(fixed.key, absl::StrCat("expected ",
                                                 want.is_boolean()  ? "true or false"
                                                 : want.is_string() ? "a string"
                                                                    : "a number",
                                                 ", got ", Show(value, namer.source())));
    }
    for (const json& a : fixed.allowed) {
      if (a == value) return absl::OkStatus();
    }
  }
  return namer.Error(fixed.key, Unsupported(value, implemented, fixed.note, namer.source()));
}

// Newer transformers keep rope_theta in rope_parameters {rope_type: default, rope_theta}.
absl::StatusOr<std::optional<double>> ReadRopeParameters(const ConfigReader& r,
                                                         const KeyNamer& namer) {
  if (!r.Has("rope_parameters")) return std::optional<double>();
  const json& params = r.At("rope_parameters");
  if (!params.is_object()) {
    return namer.Error("rope_parameters",
                       absl::StrCat("expected a mapping {rope_type: default, rope_theta}, got ",
                                    TypeName(params)));
  }
  std::optional<double> theta;
  for (auto it = params.begin(); it != params.end(); ++it) {
    const std::string key = absl::StrCat("rope_parameters.", it.key());
    if (it.key() == "rope_type") {
      ASSIGN_OR_RETURN(std::string type, r.String(key, it.value()));
      if (type != "default") {
        return namer.Error(key, Unsupported(it.value(), "\"default\"", "no rope scaling",
                                            namer.source()));
      }
    } else if (it.key() == "rope_theta") {
      ASSIGN_OR_RETURN(double v, r.Number(key, it.value()));
      theta = v;
    } else {
      return namer.Error("rope_parameters",
                         absl::StrCat("unknown key ", ShowKey(it.key(), namer.source()),
                                      "; Weft implements rope_type default (no rope scaling), "
                                      "read with rope_theta"));
    }
  }
  return theta;
}


// The value checks every architecture draws on, keys named by `namer`.
class ValueChecks {
 public:
  explicit ValueChecks(const KeyNamer& namer) : namer_(namer) {}

  absl::Status Positive(const std::string& key, int64_t v) const {
    if (v > 0) return absl::OkStatus();
    return namer_.Error(key, absl::StrCat("must be > 0, got ", v));
  }
  absl::Status Epsilon(const std::string& key, double v) const {
    if (std::isfinite(v) && v > 0) return absl::OkStatus();
    return namer_.Error(key, absl::StrCat("must be a finite number > 0, got ", v));
  }
  // kMaxTransformerBlocks (validate.h): planning time grows faster than the depth.
  absl::Status Blocks(const std::string& key, int64_t v) const {
    RETURN_IF_ERROR(Positive(key, v));
    if (v <= kMaxTransformerBlocks) return absl::OkStatus();
    return namer_.Error(key, absl::StrCat(v, " blocks; at most ", kMaxTransformerBlocks));
  }
  absl::Status Dropout(const std::string& key, double v) const {
    if (v >= 0 && v < 1) return absl::OkStatus();
    return namer_.Error(key, absl::StrCat("must be in [0, 1), got ", v));
  }

 private:
  const KeyNamer& namer_;
};

// What an architecture's config is (see the policy in the header): its keys, Hugging Face's
// defaults and the checks of its values. One entry per architecture in ArchConfigs(); the
// planner's ArchDef of the same name (planner/arch/arch.h) builds its model.
struct ArchConfig {
  // model.arch, and config.json's model_type.
  std::string name;
  // The hyper-parameters (TransformerConfig fields of the same name), in the order messages
  // list them.
  std::vector<std::string> model;
  // Model keys a spec's `config:` may leave out too (gpt2's n_inner: 4 * n_embd).
  std::vector<std::string> optional;
  // Model keys a config file may leave to Hugging Face's default.
  std::vector<std::string> file_defaults;
  // Checked against one value each (CheckFixedKey).
  std::vector<FixedKey> fixed;
  // Checked against other keys by the hooks below: gpt2 n_ctx; llama head_dim, rope_parameters.
  std::vector<std::string> related;
  // Metadata of this architecture, ignored.
  std::vector<std::string> ignored;
  // Model key -> a related key that may carry it instead (newer transformers' rope_parameters
  // holds rope_theta); `complete` reads it from there.
  std::map<std::string, std::string> carried_by;
  // After the model keys are read: Hugging Face's defaults for what a config file left out, and
  // the related keys that need no valid values.
  absl::Status (*complete)(const ConfigReader& r, const KeyNamer& namer, TransformerConfig* c);
  // The value checks, on a config however it arrived.
  absl::Status (*check_values)(const TransformerConfig& c, const KeyNamer& namer);
  // After the value checks: the related keys checked against valid values (llama's head_dim).
  absl::Status (*check_related)(const ConfigReader& r, const KeyNamer& namer,
                                const TransformerConfig& c);
  // The values a config leaves implied, filled in (gpt2's n_inner 0: 4 * n_embd).
  void (*resolve)(TransformerConfig* c);
  // How many transformer blocks the config has (gpt2's n_layer, llama's num_hidden_layers).
  int64_t (*blocks)(const TransformerConfig& c);
};

absl::Status NoRelatedChecks(const ConfigReader&, const KeyNamer&, const TransformerConfig&) {
  return absl::OkStatus();
}

void NothingImplied(TransformerConfig*) {}

// gpt2 (Hugging Face's GPT2Config).

absl::Status CompleteGpt2(const ConfigReader& r, const KeyNamer& namer, TransformerConfig* c) {
  // Hugging Face's GPT2Config defaults, for a config file.
  if (!r.Has("layer_norm_epsilon")) c->set_layer_norm_epsilon(1e-5);
  if (!r.Has("embd_pdrop")) c->set_embd_pdrop(0.1);
  if (!r.Has("attn_pdrop")) c->set_attn_pdrop(0.1);
  if (!r.Has("resid_pdrop")) c->set_resid_pdrop(0.1);
  if (r.Has("n_inner") && c->n_inner() <= 0) {
    return namer.Error("n_inner",
                       absl::StrCat("must be > 0 (or null: 4 * n_embd), got ", c->n_inner()));
  }
  if (r.Has("n_ctx")) {
    ASSIGN_OR_RETURN(int64_t n_ctx, r.Int("n_ctx", r.At("n_ctx")));
    if (n_ctx != c->n_positions()) {
      return namer.Error(
          "n_ctx",
          Unsupported(r.At("n_ctx"), absl::StrCat("n_ctx = n_positions = ", c->n_positions()),
                      "n_positions sizes the position table and the causal mask"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGpt2Values(const TransformerConfig& c, const KeyNamer& namer) {
  const ValueChecks check(namer);
  RETURN_IF_ERROR(check.Positive("vocab_size", c.vocab_size()));
  RETURN_IF_ERROR(check.Positive("n_positions", c.n_positions()));
  RETURN_IF_ERROR(check.Positive("n_embd", c.n_embd()));
  RETURN_IF_ERROR(check.Blocks("n_layer", c.n_layer()));
  RETURN_IF_ERROR(check.Positive("n_head", c.n_head()));
  if (c.n_inner() < 0) {
    return namer.Error("n_inner",
                       absl::StrCat("must be > 0 (or null: 4 * n_embd), got ", c.n_inner()));
  }
  RETURN_IF_ERROR(check.Epsilon("layer_norm_epsilon", c.layer_norm_epsilon()));
  RETURN_IF_ERROR(check.Dropout("embd_pdrop", c.embd_pdrop()));
  RETURN_IF_ERROR(check.Dropout("attn_pdrop", c.attn_pdrop()));
  RETURN_IF_ERROR(check.Dropout("resid_pdrop", c.resid_pdrop()));
  if (c.n_embd() % c.n_head() != 0) {
    return namer.Error("n_head", absl::StrCat(c.n_head(), " does not divide n_embd ", c.n_embd(),
                                              " (every head takes n_embd / n_head features)"));
  }
  return absl::OkStatus();
}

void ResolveGpt2(TransformerConfig* c) {
  if (c->n_inner() == 0) c->set_n_inner(4 * c->n_embd());
}

// llama (Hugging Face's LlamaConfig), and the architectures that share its config keys.

absl::Status CompleteLlama(const ConfigReader& r, const KeyNamer& namer, TransformerConfig* c) {
  // Hugging Face's LlamaConfig defaults, for a config file.
  if (!r.Has("num_key_value_heads")) c->set_num_key_value_heads(c->num_attention_heads());
  ASSIGN_OR_RETURN(std::optional<double> rope_parameters_theta, ReadRopeParameters(r, namer));
  if (rope_parameters_theta.has_value()) {
    if (r.Has("rope_theta") && c->rope_theta() != *rope_parameters_theta) {
      return namer.Error(
          "rope_parameters.rope_theta",
          absl::StrCat(*rope_parameters_theta, " differs from rope_theta ", c->rope_theta()));
    }
    c->set_rope_theta(*rope_parameters_theta);
  } else if (!r.Has("rope_theta")) {
    c->set_rope_theta(10000.0);
  }
  return absl::OkStatus();
}

absl::Status CheckLlamaValues(const TransformerConfig& c, const KeyNamer& namer) {
  const ValueChecks check(namer);
  RETURN_IF_ERROR(check.Positive("vocab_size", c.vocab_size()));
  RETURN_IF_ERROR(check.Positive("hidden_size", c.hidden_size()));
  RETURN_IF_ERROR(check.Positive("intermediate_size", c.intermediate_size()));
  RETURN_IF_ERROR(check.Blocks("num_hidden_layers", c.num_hidden_layers()));
  RETURN_IF_ERROR(check.Positive("num_attention_heads", c.num_attention_heads()));
  RETURN_IF_ERROR(check.Positive("num_key_value_heads", c.num_key_value_heads()));
  RETURN_IF_ERROR(check.Epsilon("rms_norm_eps", c.rms_norm_eps()));
  RETURN_IF_ERROR(check.Epsilon("rope_theta", c.rope_theta()));
  RETURN_IF_ERROR(check.Positive("max_position_embeddings", c.max_position_embeddings()));
  RETURN_IF_ERROR(check.Dropout("attention_dropout", c.attention_dropout()));
  if (c.hidden_size() % c.num_attention_heads() != 0) {
    return namer.Error(
        "num_attention_heads",
        absl::StrCat(c.num_attention_heads(), " does not divide hidden_size ", c.hidden_size(),
                     " (every head takes hidden_size / num_attention_heads features)"));
  }
  if (c.num_attention_heads() % c.num_key_value_heads() != 0) {
    return namer.Error(
        "num_key_value_heads",
        absl::StrCat(c.num_key_value_heads(), " does not divide num_attention_heads ",
                     c.num_attention_heads(),
                     " (each key/value head serves num_attention_heads / "
                     "num_key_value_heads query heads)"));
  }
  const int64_t head_dim = c.hidden_size() / c.num_attention_heads();
  if (head_dim % 2 != 0) {
    return namer.Error(
        "hidden_size",
        absl::StrCat("head_dim = hidden_size / num_attention_heads = ", c.hidden_size(), " / ",
                     c.num_attention_heads(), " = ", head_dim,
                     " is odd; rotary embeddings rotate pairs of features"));
  }
  return absl::OkStatus();
}

// head_dim, when given, must be the one Weft computes with (after the checks: it divides).
absl::Status CheckLlamaHeadDim(const ConfigReader& r, const KeyNamer& namer,
                               const TransformerConfig& c) {
  if (!r.Has("head_dim")) return absl::OkStatus();
  ASSIGN_OR_RETURN(int64_t head_dim, r.Int("head_dim", r.At("head_dim")));
  const int64_t implemented = c.hidden_size() / c.num_attention_heads();
  if (head_dim == implemented) return absl::OkStatus();
  return namer.Error(
      "head_dim", Unsupported(r.At("head_dim"),
                              absl::StrCat("hidden_size / num_attention_heads = ", c.hidden_size(),
                                           " / ", c.num_attention_heads(), " = ", implemented),
                              "or null"));
}

const ArchConfig& Gpt2Config() {
  static const auto* arch = new ArchConfig{
      .name = "gpt2",
      .model = {"vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "layer_norm_epsilon",
                "embd_pdrop", "attn_pdrop", "resid_pdrop", "n_inner"},
      .optional = {"n_inner"},
      .file_defaults = {"layer_norm_epsilon", "embd_pdrop", "attn_pdrop", "resid_pdrop"},
      .fixed = {{"activation_function", {"gelu_new", "gelu_pytorch_tanh"},
                 "GELU's tanh approximation"},
                {"scale_attn_weights", {true}, "scores divided by sqrt(head_dim)"},
                {"scale_attn_by_inverse_layer_idx", {false}, ""},
                {"reorder_and_upcast_attn", {false}, ""},
                {"add_cross_attention", {false}, "a decoder-only model"},
                {"tie_word_embeddings", {true}, "the LM head is wte"}},
      .related = {"n_ctx"},
      .ignored = {"summary_type", "summary_use_proj", "summary_activation",
                  "summary_proj_to_labels", "summary_first_dropout", "task_specific_params"},
      .carried_by = {},
      .complete = CompleteGpt2,
      .check_values = CheckGpt2Values,
      .check_related = NoRelatedChecks,
      .resolve = ResolveGpt2,
      .blocks = [](const TransformerConfig& c) { return c.n_layer(); },
  };
  return *arch;
}

const ArchConfig& LlamaConfig() {
  static const auto* arch = new ArchConfig{
      .name = "llama",
      .model = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta",
                "max_position_embeddings", "tie_word_embeddings", "attention_dropout"},
      .optional = {},
      .file_defaults = {"num_key_value_heads", "rope_theta", "tie_word_embeddings",
                        "attention_dropout"},
      .fixed = {{"hidden_act", {"silu"}, "the SwiGLU MLP"},
                {"rope_scaling", {}, "no rope scaling"},
                {"attention_bias", {false}, ""},
                {"mlp_bias", {false}, ""},
                {"pretraining_tp", {1}, ""}},
      .related = {"head_dim", "rope_parameters"},
      .ignored = {},
      .carried_by = {{"rope_theta", "rope_parameters"}},
      .complete = CompleteLlama,
      .check_values = CheckLlamaValues,
      .check_related = CheckLlamaHeadDim,
      .resolve = NothingImplied,
      .blocks = [](const TransformerConfig& c) { return c.num_hidden_layers(); },
  };
  return *arch;
}

// Newer transformers (4.53 on) write Qwen2's layer_types: one "full_attention" or
// "sliding_attention" per layer. Weft implements full attention in every layer, so the list must
// say that, one entry per layer.
absl::Status CheckQwen2Related(const ConfigReader& r, const KeyNamer& namer,
                               const TransformerConfig& c) {
  RETURN_IF_ERROR(CheckLlamaHeadDim(r, namer, c));
  if (!r.Has("layer_types") || r.At("layer_types").is_null()) return absl::OkStatus();
  const json& types = r.At("layer_types");
  if (!types.is_array()) {
    return namer.Error("layer_types", absl::StrCat("expected a list of \"full_attention\", one per "
                                                   "layer, got ", TypeName(types)));
  }
  if (static_cast<int64_t>(types.size()) != c.num_hidden_layers()) {
    return namer.Error("layer_types", absl::StrCat("has ", types.size(), " entries for ",
                                                   c.num_hidden_layers(),
                                                   " layers (num_hidden_layers)"));
  }
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] != "full_attention") {
      return namer.Error(
          absl::StrCat("layer_types[", i, "]"),
          Unsupported(types[i], "\"full_attention\"", "sliding-window attention is not implemented",
                      namer.source()));
    }
  }
  return absl::OkStatus();
}

// Qwen2Config: Llama's keys and checks, without its attention_bias, mlp_bias and pretraining_tp
// (Qwen2's q/k/v biases are always there, its o_proj and MLP never have any); sliding-window
// attention is not implemented, so its other keys are ignored only while it is off.
const ArchConfig& Qwen2Config() {
  static const auto* arch = [] {
    auto* qwen2 = new ArchConfig(LlamaConfig());
    qwen2->name = "qwen2";
    // Qwen2Config's num_key_value_heads defaults to 32, not to the heads: a file must say.
    qwen2->file_defaults = {"rope_theta", "tie_word_embeddings", "attention_dropout"};
    qwen2->fixed = {{"hidden_act", {"silu"}, "the SwiGLU MLP"},
                    {"rope_scaling", {}, "no rope scaling"},
                    {"use_sliding_window", {false}, "full causal attention in every layer"}};
    qwen2->ignored = {"sliding_window", "max_window_layers"};
    qwen2->related.push_back("layer_types");
    qwen2->check_related = CheckQwen2Related;
    return qwen2;
  }();
  return *arch;
}

// Every architecture, in the order messages list them.
const std::vector<const ArchConfig*>& ArchConfigs() {
  static const auto* archs = new std::vector<const ArchConfig*>{&Gpt2Config(), &LlamaConfig(),
                                                                   &Qwen2Config()};
  return *archs;
}

const ArchConfig* FindArchConfig(absl::string_view arch) {
  for (const ArchConfig* a : ArchConfigs()) {
    if (a->name == arch) return a;
  }
  return nullptr;
}

absl::StatusOr<const ArchConfig*> KnownArchConfig(absl::string_view arch) {
  if (const ArchConfig* a = FindArchConfig(arch)) return a;
  return absl::InvalidArgumentError(
      absl::StrCat("model.arch: unknown arch \"", arch, "\"; known: ", KnownArchs()));
}

std::string UnknownKeyMessage(const ArchConfig& arch, const std::string& key,
                              ConfigSource source) {
  std::vector<std::string> fixed = {"model_type"};
  for (const FixedKey& f : arch.fixed) fixed.push_back(f.key);
  fixed.insert(fixed.end(), arch.related.begin(), arch.related.end());
  std::vector<std::string> ignored = CommonIgnoredKeys();
  ignored.insert(ignored.end(), arch.ignored.begin(), arch.ignored.end());
  return absl::StrCat(
      "unknown key ", ShowKey(key, source), " for ", arch.name, "; known: ",
      absl::StrJoin(arch.model, ", "),
      "; Hugging Face's, accepted at the value Weft implements: ", absl::StrJoin(fixed, ", "),
      "; Hugging Face metadata, ignored: ", absl::StrJoin(ignored, ", "));
}

// "missing (gpt2 needs vocab_size, ...)": the keys this source must give.
std::string MissingMessage(const ArchConfig& arch, ConfigSource source) {
  std::vector<std::string> needed;
  for (const std::string& key : arch.model) {
    if (Contains(arch.optional, key)) continue;
    if (source == ConfigSource::kFile && Contains(arch.file_defaults, key)) continue;
    needed.push_back(key);
  }
  if (source == ConfigSource::kSpec) {
    return absl::StrCat("missing (", arch.name, " needs ", absl::StrJoin(needed, ", "), ")");
  }
  return absl::StrCat("missing (a ", arch.name, " config.json needs ",
                      absl::StrJoin(needed, ", "), "; Hugging Face's defaults fill ",
                      absl::StrJoin(arch.file_defaults, ", "), ")");
}

}  // namespace

std::string KnownArchs() {
  std::vector<std::string> names;
  for (const ArchConfig* a : ArchConfigs()) names.push_back(a->name);
  return absl::StrJoin(names, ", ");
}

bool IsKnownArch(absl::string_view arch) { return FindArchConfig(arch) != nullptr; }

void ResolveTransformerConfig(absl::string_view arch, TransformerConfig* config) {
  if (const ArchConfig* a = FindArchConfig(arch)) a->resolve(config);
}

int64_t TransformerBlocks(absl::string_view arch, const TransformerConfig& config) {
  const ArchConfig* a = FindArchConfig(arch);
  return a != nullptr ? a->blocks(config) : 0;
}

absl::StatusOr<TransformerConfig> TransformerConfigFromJson(
    absl::string_view arch_name, const json& config, ConfigSource source, const std::string& path,
    const std::map<std::string, std::string>& where) {
  ASSIGN_OR_RETURN(const ArchConfig* arch, KnownArchConfig(arch_name));
  const KeyNamer namer(path, source, &where);
  if (!config.is_object()) {
    return namer.MappingError("", absl::StrCat("expected a mapping of ", arch->name,
                                               " config keys, got ", TypeName(config)));
  }
  const ConfigReader r(config, namer);
  // Unknown keys first: a typo should not read as its key missing.
  for (auto it = config.begin(); it != config.end(); ++it) {
    const std::string& key = it.key();
    const bool known = key == "model_type" || Contains(arch->model, key) ||
                       Contains(arch->related, key) || Contains(arch->ignored, key) ||
                       Contains(CommonIgnoredKeys(), key) ||
                       std::any_of(arch->fixed.begin(), arch->fixed.end(),
                                   [&](const FixedKey& f) { return f.key == key; });
    if (!known) return namer.MappingError(key, UnknownKeyMessage(*arch, key, namer.source()));
  }
  if (r.Has("model_type")) {
    ASSIGN_OR_RETURN(std::string type, r.String("model_type", r.At("model_type")));
    if (type != arch->name) {
      return namer.Error("model_type",
                         absl::StrCat("\"", type, "\" does not match model.arch ", arch->name,
                                      ": this config is for another architecture"));
    }
  }
  for (const FixedKey& fixed : arch->fixed) {
    if (r.Has(fixed.key)) RETURN_IF_ERROR(CheckFixedKey(fixed, r.At(fixed.key), namer));
  }

  TransformerConfig c;
  for (const std::string& key : arch->model) {
    if (r.Has(key)) {
      RETURN_IF_ERROR(r.ReadField(key, r.At(key), &c));
      continue;
    }
    auto carrier = arch->carried_by.find(key);
    if (carrier != arch->carried_by.end() && r.Has(carrier->second) &&
        r.At(carrier->second).is_object() && r.At(carrier->second).contains(key)) {
      continue;
    }
    const bool may_be_absent =
        Contains(arch->optional, key) ||
        (source == ConfigSource::kFile && Contains(arch->file_defaults, key));
    if (!may_be_absent) return namer.Missing(key, MissingMessage(*arch, source));
  }
  RETURN_IF_ERROR(arch->complete(r, namer, &c));
  RETURN_IF_ERROR(arch->check_values(c, namer));
  arch->resolve(&c);
  RETURN_IF_ERROR(arch->check_related(r, namer, c));
  return c;
}

absl::StatusOr<TransformerConfig> LoadTransformerConfigFile(absl::string_view arch,
                                                            const std::string& file) {
  const std::string path = absl::StrCat("model.config_file: ", file);
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, not a Hugging Face config.json"));
  }
  // "<file>: no such file", "<file>: cannot open: ...", all INVALID_ARGUMENT to the spec.
  absl::StatusOr<std::string> text = ReadFileToString(file);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.config_file: ", text.status().message()));
  }
  json config;
  try {
    config = json::parse(*text);
  } catch (const json::parse_error& e) {
    // Not e.what(): it quotes the bytes last read, and the file may be anything.
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not valid JSON (a syntax error at byte ", e.byte, ")"));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  }
  return TransformerConfigFromJson(arch, config, ConfigSource::kFile, path);
}

absl::Status ValidateTransformerConfig(absl::string_view arch_name,
                                       const TransformerConfig& config) {
  ASSIGN_OR_RETURN(const ArchConfig* arch, KnownArchConfig(arch_name));
  const KeyNamer namer("model.config", ConfigSource::kSpec, nullptr);
  std::vector<const google::protobuf::FieldDescriptor*> set;
  config.GetReflection()->ListFields(config, &set);
  for (const google::protobuf::FieldDescriptor* field : set) {
    if (!Contains(arch->model, field->name())) {
      return namer.Error(field->name(),
                         absl::StrCat("is not a ", arch->name, " key; ", arch->name, " reads ",
                                      absl::StrJoin(arch->model, ", ")));
    }
  }
  return arch->check_values(config, namer);
}

absl::Status ValidateTransformerModel(const v1::Model& model) {
  if (model.arch().empty()) {
    const std::string kind =
        absl::StrCat("only with model.arch (a transformer: ", KnownArchs(), ")");
    if (model.has_config()) {
      return absl::InvalidArgumentError(absl::StrCat("model.config: ", kind));
    }
    if (!model.config_file().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("model.config_file: ", kind));
    }
    if (!model.placements().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.placements: ", kind,
                       "; a layers model places its parameters per layer "
                       "(model.layers[i].placements)"));
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(KnownArchConfig(model.arch()).status());
  if (model.layers_size() > 0) {
    return absl::InvalidArgumentError(
        "model.layers: not allowed with model.arch (a transformer's layers come from its "
        "config)");
  }
  if (!model.has_config()) {
    return absl::InvalidArgumentError(absl::StrCat("model.config: is required with model.arch (",
                                                   model.arch(),
                                                   "'s Hugging Face config "
                                                   "keys, or model.config_file: a config.json)"));
  }
  RETURN_IF_ERROR(ValidateTransformerConfig(model.arch(), model.config()));
  if (!model.loss().empty() && model.loss() != "cross_entropy") {
    return absl::InvalidArgumentError(absl::StrCat("model.loss: unknown loss \"", model.loss(),
                                                   "\" for a transformer (model.arch); known: "
                                                   "cross_entropy"));
  }
  const std::map<std::string, v1::PlacementList> placements(model.placements().begin(),
                                                            model.placements().end());
  for (const auto& [pattern, list] : placements) {
    RETURN_IF_ERROR(Annotate(ValidateParamPattern(pattern), PatternPath(pattern)));
  }
  return absl::OkStatus();
}

}  // namespace weft
