// spec_keys: the job spec's vocabulary as the code accepts it, for docs/docs_test, which holds
// docs/job-spec.md to it. Nothing here lists a key: the reader's own errors do. A key that
// ParseJobSpecYaml does not know is an error listing the ones it does ("model.layers[0]: unknown
// key "zz_probe"; known: name, type, ..."), so the tool adds such a key to every mapping of a spec
// that uses every section, reads the list from the error, and goes on into each key it learns
// (a key that takes a mapping is a section of its own). Allowed values come the same way from the
// validation's and the planner's errors for a value nobody accepts ('data.source: unknown source
// "zz_probe"; known: npy, synthetic, tokens').
//
// Prints one line per fact, tab-separated:
//   key     SECTION  QUALIFIER  KEY     a key of SECTION (model.layers[], parallelize.<name>; ""
//                                       is the top level); QUALIFIER is the arch for model.config
//   fixed   SECTION  QUALIFIER  KEY     a Hugging Face key accepted at the value Weft implements
//   ignored SECTION  QUALIFIER  KEY     Hugging Face metadata, accepted and ignored
//   value   FIELD    -          VALUE   a value FIELD accepts
// and exits 1 naming the probe when an error no longer has the form it reads.
//
// E.g.
//   bazel run //docs:spec_keys
#include <algorithm>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/jobspec/yaml.h"
#include "planner/submit/submit.h"
#include "yaml-cpp/yaml.h"

namespace weft {
namespace {

constexpr char kProbe[] = "zz_probe";

// A layers model that uses every section the reader has, each with its required keys, so that an
// unknown key added anywhere is the first thing the reader trips on. Not a valid job: only
// reading matters here.
constexpr char kLayersSpec[] = R"(
name: probe
mesh: {shape: [2, 2], dim_names: [dp, pp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 4, out_features: 4, bias: true, stage: 0,
       inputs: [input], recompute: true,
       placements: {weight: [Replicate(), Replicate()], bias: {dp: Replicate()}}}
  loss: mse
  recompute: full
data: {source: npy, input: a.npy, label: b.npy, batch_size: 8, placements: [Shard(0), Replicate()],
       sample_shape: [4], label_shape: [4], num_samples: 8, path: t.bin, format: llmc, seq_len: 4}
optimizer: {type: adamw, lr: 0.1, betas: [0.9, 0.99], eps: 1.0e-8, weight_decay: 0.0}
train: {steps: 1, seed: 1, resume: false, max_restarts: 0}
init_from: init.safetensors
device: cpu
parallelize: {mp: {dim: dp, plan: {fc0: ColWiseParallel}}}
pipeline: {dim: pp, schedule: 1F1B, micro_batches: 2, virtual_stages: 1}
trace: false
checkpoint: {dir: ckpt, every: 1, keep: 1}
precision: f32
storage: f32
allow_tf32: false
overlap: true
sharding: {dim: dp, level: 1}
bucket_mb: 25
)";

constexpr char kGpt2Model[] = R"(
arch: gpt2
config: {vocab_size: 16, n_positions: 8, n_embd: 8, n_layer: 1, n_head: 2, n_inner: 32,
         layer_norm_epsilon: 1.0e-5, embd_pdrop: 0.0, attn_pdrop: 0.0, resid_pdrop: 0.0}
placements: {"h.*.mlp.c_fc.weight": {dp: Replicate()}}
loss: cross_entropy
recompute: selective
)";

constexpr char kLlamaModel[] = R"(
arch: llama
config: {vocab_size: 16, hidden_size: 8, intermediate_size: 16, num_hidden_layers: 1,
         num_attention_heads: 2, num_key_value_heads: 1, rms_norm_eps: 1.0e-6, rope_theta: 10000.0,
         max_position_embeddings: 8, tie_word_embeddings: false, attention_dropout: 0.0}
)";

constexpr char kQwen2Model[] = R"(
arch: qwen2
config: {vocab_size: 16, hidden_size: 8, intermediate_size: 16, num_hidden_layers: 1,
         num_attention_heads: 2, num_key_value_heads: 1, rms_norm_eps: 1.0e-6, rope_theta: 10000.0,
         max_position_embeddings: 8, tie_word_embeddings: false, attention_dropout: 0.0}
)";

// A job that passes every check and plans, for the value probes: each changes one field.
constexpr char kValidSpec[] = R"(
name: probe
mesh: {shape: [2, 2], dim_names: [dp, pp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 4, out_features: 4}
    - {name: fc1, type: linear, in_features: 4, out_features: 4}
data: {source: synthetic, sample_shape: [4], label_shape: [4], num_samples: 8, batch_size: 8}
optimizer: {type: adamw, lr: 0.1}
train: {steps: 1}
pipeline: {dim: pp, schedule: FThenB, micro_batches: 2}
)";

// A path into a spec: a mapping key, or "#N" for item N of a list.
using Path = std::vector<std::string>;

bool IsIndex(const std::string& segment) { return !segment.empty() && segment[0] == '#'; }
int Index(const std::string& segment) { return std::stoi(segment.substr(1)); }

YAML::Node Child(const YAML::Node& node, const std::string& segment) {
  if (!node.IsDefined() || node.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
  if (IsIndex(segment)) {
    if (!node.IsSequence() || Index(segment) >= static_cast<int>(node.size())) {
      return YAML::Node(YAML::NodeType::Undefined);
    }
    return node[Index(segment)];
  }
  if (!node.IsMap() || !node[segment]) return YAML::Node(YAML::NodeType::Undefined);
  return node[segment];
}

// (Node::reset, not =: assigning to a yaml-cpp handle rewrites the node it stands for.)
YAML::Node At(const YAML::Node& root, const Path& path) {
  YAML::Node node = root;
  for (const std::string& segment : path) node.reset(Child(node, segment));
  return node;
}

// Sets the value at `path` in `node` (a fresh copy), making mappings on the way.
void SetAt(YAML::Node node, const Path& path, size_t i, const YAML::Node& value) {
  const std::string& segment = path[i];
  if (i + 1 == path.size()) {
    if (IsIndex(segment)) {
      node[Index(segment)] = value;
    } else {
      node[segment] = value;
    }
    return;
  }
  YAML::Node child = IsIndex(segment) ? node[Index(segment)] : node[segment];
  SetAt(child, path, i + 1, value);
}

YAML::Node With(const YAML::Node& base, const Path& path, const YAML::Node& value) {
  YAML::Node spec = YAML::Clone(base);
  if (path.empty()) return YAML::Clone(value);
  SetAt(spec, path, 0, value);
  return spec;
}

// What reading (and, with `plan`, validating and planning) the spec says; "" when it passes.
std::string Read(const YAML::Node& spec, bool plan) {
  absl::StatusOr<v1::JobSpec> parsed = ParseJobSpecYaml(YAML::Dump(spec), "/probe");
  if (!parsed.ok()) return std::string(parsed.status().message());
  if (!plan) return "";
  absl::StatusOr<std::shared_ptr<const planner::Plan>> planned =
      planner::PrepareAndPlan(&*parsed, "probe", 0);
  return planned.ok() ? "" : std::string(planned.status().message());
}

// "a, b, c (line 3, column 5)" -> {a, b, c}; stops at the first "; " or " (line".
std::vector<std::string> ListOf(absl::string_view text) {
  const size_t end = std::min(text.find("; "), text.find(" (line"));
  if (end != absl::string_view::npos) text = text.substr(0, end);
  std::vector<std::string> items;
  for (absl::string_view item : absl::StrSplit(text, ", ")) {
    // "megatron, or a mapping {layer: ...}": only the names.
    static const std::regex kName("[A-Za-z0-9_.]+");
    const std::string s(item);
    if (std::regex_match(s, kName)) items.push_back(s);
  }
  return items;
}

struct Section {
  std::string qualifier;  // "gpt2" in 'unknown key "zz_probe" for gpt2'
  std::vector<std::string> keys, fixed, ignored;
};

// The section the error names, if it is the reader's refusal of the probe key.
std::optional<Section> UnknownKeyError(const std::string& error) {
  const std::string marker = absl::StrCat("unknown key \"", kProbe, "\"");
  size_t at = error.find(marker);
  if (at == std::string::npos) return std::nullopt;
  absl::string_view rest = absl::string_view(error).substr(at + marker.size());
  Section section;
  if (absl::ConsumePrefix(&rest, " for ")) {
    section.qualifier = std::string(rest.substr(0, rest.find(';')));
    rest.remove_prefix(section.qualifier.size());
  }
  if (!absl::ConsumePrefix(&rest, "; known: ")) return std::nullopt;
  section.keys = ListOf(rest);
  for (const auto& [label, into] :
       {std::make_pair("; Hugging Face's, accepted at the value Weft implements: ", &section.fixed),
        std::make_pair("; Hugging Face metadata, ignored: ", &section.ignored)}) {
    const size_t p = rest.find(label);
    if (p != absl::string_view::npos) *into = ListOf(rest.substr(p + strlen(label)));
  }
  return section;
}

class Explorer {
 public:
  // Every section under `path` of `base`; `shown` is the path as the docs write it.
  void Explore(const YAML::Node& base, const Path& path, const std::string& shown) {
    const YAML::Node here = At(base, path);
    YAML::Node probe = here.IsMap() ? YAML::Clone(here) : YAML::Node(YAML::NodeType::Map);
    probe[kProbe] = 1;
    if (std::optional<Section> section = UnknownKeyError(Read(With(base, path, probe), false))) {
      Record(shown, *section);
      if (!section->qualifier.empty()) return;  // a Hugging Face config: flat, Record has it all
      for (const std::string& key : section->keys) {
        Path child = path;
        child.push_back(key);
        Explore(base, child, shown.empty() ? key : absl::StrCat(shown, ".", key));
      }
      return;
    }
    if (here.IsSequence()) {  // a list of mappings: its first item
      if (here.size() > 0 && here[0].IsMap()) {
        Path item = path;
        item.push_back("#0");
        Explore(base, item, absl::StrCat(shown, "[]"));
      }
      return;
    }
    if (here.IsMap()) {  // mappings by a name of the user's (parallelize's entries)
      for (const auto& kv : here) {
        if (!kv.second.IsMap()) continue;
        Path entry = path;
        entry.push_back(kv.first.Scalar());
        Explore(base, entry, absl::StrCat(shown, ".<name>"));
      }
      return;
    }
    if (!here.IsDefined()) {  // a key the base spec lacks: try a list of mappings
      YAML::Node list(YAML::NodeType::Sequence);
      list.push_back(YAML::Node(YAML::NodeType::Map));
      Path item = path;
      item.push_back("#0");
      YAML::Node with_list = With(base, path, list);
      YAML::Node item_probe(YAML::NodeType::Map);
      item_probe[kProbe] = 1;
      if (std::optional<Section> section =
              UnknownKeyError(Read(With(with_list, item, item_probe), false))) {
        Explore(with_list, item, absl::StrCat(shown, "[]"));
      }
    }
  }

  void Print() const {
    for (const auto& [kind, section, qualifier, key] : facts_) {
      std::cout << kind << "\t" << section << "\t" << qualifier << "\t" << key << "\n";
    }
  }

  void Value(const std::string& field, const std::string& value) {
    facts_.insert({"value", field, "-", value});
  }

 private:
  void Record(const std::string& shown, const Section& section) {
    for (const auto& [kind, keys] : {std::make_pair("key", &section.keys),
                                     std::make_pair("fixed", &section.fixed),
                                     std::make_pair("ignored", &section.ignored)}) {
      for (const std::string& key : *keys) facts_.insert({kind, shown, section.qualifier, key});
    }
  }

  std::set<std::tuple<std::string, std::string, std::string, std::string>> facts_;
};

// One value probe: `edits` applied to kValidSpec put kProbe where `field` is read.
struct ValueProbe {
  std::string field;  // as the docs name it (model.layers[].type)
  std::vector<std::pair<Path, std::string>> edits;  // path -> YAML text
};

// The values of `field` the error lists: "...: unknown source "zz_probe"; known: a, b" or "...:
// must be a or b, got "zz_probe"".
std::vector<std::string> KnownValues(const std::string& error) {
  // 'unknown loss "zz_probe" for a transformer (model.arch); known: cross_entropy' too.
  const size_t quoted = error.find(absl::StrCat("\"", kProbe, "\""));
  const size_t known = error.find("; known: ", quoted == std::string::npos ? 0 : quoted);
  if (quoted != std::string::npos && known != std::string::npos) {
    return ListOf(error.substr(known + strlen("; known: ")));
  }
  static const std::regex kMustBe("must be ([A-Za-z0-9_, ]+) or ([A-Za-z0-9_]+), got \"zz_probe\"");
  std::smatch m;
  if (std::regex_search(error, m, kMustBe)) {
    std::vector<std::string> values = ListOf(m[1].str());
    values.push_back(m[2].str());
    return values;
  }
  return {};
}

int Run() {
  Explorer explorer;
  const YAML::Node layers = YAML::Load(kLayersSpec);
  explorer.Explore(layers, {}, "");
  for (const char* model : {kGpt2Model, kLlamaModel, kQwen2Model}) {
    explorer.Explore(With(layers, {"model"}, YAML::Load(model)), {}, "");
  }

  const std::vector<ValueProbe> probes = {
      {"model.layers[].type", {{{"model", "layers", "#1", "type"}, kProbe}}},
      {"model.loss", {{{"model", "loss"}, kProbe}}},
      {"model.loss", {{{"model"}, kGpt2Model}, {{"model", "loss"}, kProbe}}},
      {"model.arch", {{{"model"}, kGpt2Model}, {{"model", "arch"}, kProbe}}},
      {"model.recompute", {{{"model", "recompute"}, kProbe}}},
      {"data.source", {{{"data", "source"}, kProbe}}},
      {"data.format",
       {{{"data"}, "{source: tokens, path: /probe/tokens.bin, seq_len: 4, batch_size: 8}"},
        {{"data", "format"}, kProbe}}},
      {"optimizer.type", {{{"optimizer", "type"}, kProbe}}},
      {"pipeline.schedule", {{{"pipeline", "schedule"}, kProbe}}},
      {"parallelize.<name>.plan",
       {{{"pipeline"}, "null"}, {{"parallelize"}, "{mp: {dim: dp, plan: {fc0: zz_probe}}}"}}},
      {"parallelize.<name>.plan",
       {{{"pipeline"}, "null"}, {{"parallelize"}, "{mp: {dim: dp, plan: zz_probe}}"}}},
      {"device", {{{"device"}, kProbe}}},
      {"precision", {{{"precision"}, kProbe}}},
      {"storage", {{{"storage"}, kProbe}}},
  };
  const YAML::Node valid = YAML::Load(kValidSpec);
  if (std::string error = Read(valid, true); !error.empty()) {
    std::cerr << "spec_keys: the valid spec does not plan: " << error << "\n";
    return 1;
  }
  for (const ValueProbe& probe : probes) {
    YAML::Node spec = YAML::Clone(valid);
    for (const auto& [path, text] : probe.edits) spec.reset(With(spec, path, YAML::Load(text)));
    const std::string error = Read(spec, true);
    const std::vector<std::string> values = KnownValues(error);
    if (values.empty()) {
      std::cerr << "spec_keys: the probe of " << probe.field
                << " found no list of known values in: " << (error.empty() ? "(no error)" : error)
                << "\n";
      return 1;
    }
    for (const std::string& value : values) explorer.Value(probe.field, value);
  }
  explorer.Print();
  return 0;
}

}  // namespace
}  // namespace weft

int main() { return weft::Run(); }
