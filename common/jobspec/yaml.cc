#include "common/jobspec/yaml.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/param_pattern.h"
#include "common/jobspec/parallelize.h"
#include "common/jobspec/placements.h"
#include "common/jobspec/transformer_config.h"
#include "common/jobspec/validate.h"
#include "common/status.h"
#include "common/utf8.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/anchor.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/yaml.h"

namespace weft {
namespace {

using v1::JobSpec;
using v1::Placement;

// yaml-cpp throws; every call into it below happens inside one try block in
// ParseJobSpecYaml or in these helpers, which turn what they see into INVALID_ARGUMENT with the
// field path and the line/column of the node.

std::string Where(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return "";
  return absl::StrCat(" (line ", mark.line + 1, ", column ", mark.column + 1, ")");
}

absl::Status Invalid(const std::string& path, const YAML::Node& node, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what, Where(node)));
}

const char* KindName(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "undefined";
  }
}

// A key as an error quotes it: C-escaped (a control byte would garble the message), and at most
// 64 bytes of it.
std::string QuotedKey(const std::string& key) {
  constexpr size_t kShown = 64;
  const std::string escaped = absl::CHexEscape(key.substr(0, kShown));
  return absl::StrCat("\"", escaped, "\"", key.size() > kShown ? " (cut)" : "");
}

// The present (non-null) children of a mapping, by key. Rejects unknown and duplicate keys so
// that a typo ("in_feature") is an error instead of a silently ignored field.
class MapReader {
 public:
  static absl::StatusOr<MapReader> Read(const YAML::Node& node, const std::string& path,
                                        const std::vector<std::string>& known) {
    if (!node.IsMap()) {
      return Invalid(path, node, absl::StrCat("expected a mapping, got ", KindName(node)));
    }
    MapReader reader;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar()) {
        return Invalid(path, kv.first, "keys must be plain strings");
      }
      const std::string key = kv.first.Scalar();
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        return Invalid(path, kv.first,
                       absl::StrCat("unknown key ", QuotedKey(key), "; known: ", absl::StrJoin(known, ", ")));
      }
      if (reader.children_.count(key) > 0) {
        return Invalid(path, kv.first, absl::StrCat("duplicate key ", QuotedKey(key)));
      }
      reader.children_.emplace(key, kv.second);
    }
    return reader;
  }

  // Null (`key:` with nothing after it) counts as absent.
  bool Has(const std::string& key) const {
    auto it = children_.find(key);
    return it != children_.end() && !it->second.IsNull();
  }
  YAML::Node Get(const std::string& key) const { return children_.at(key); }

 private:
  std::map<std::string, YAML::Node> children_;
};

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

absl::Status RequireKey(const MapReader& map, const YAML::Node& node, const std::string& path,
                        const std::string& key) {
  if (map.Has(key)) return absl::OkStatus();
  return Invalid(Join(path, key), node, "is required");
}

absl::StatusOr<std::string> ReadScalar(const YAML::Node& node, const std::string& path) {
  if (!node.IsScalar()) {
    return Invalid(path, node, absl::StrCat("expected a scalar, got ", KindName(node)));
  }
  return node.Scalar();
}

absl::StatusOr<std::string> ReadString(const YAML::Node& node, const std::string& path) {
  return ReadScalar(node, path);
}

template <typename Int>
absl::StatusOr<Int> ReadInt(const YAML::Node& node, const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadScalar(node, path));
  Int value;
  if (!absl::SimpleAtoi(text, &value)) {
    return Invalid(path, node,
                   absl::StrCat("expected ", std::is_signed<Int>::value ? "an" : "a non-negative",
                                " integer, got \"", text, "\""));
  }
  return value;
}

// m's `key` under `path`: a count, which must be >= 1 (proto3 would read a written 0 as absent,
// and the defaults would fill it); 0 when m lacks it.
template <typename Int>
absl::StatusOr<Int> ReadCount(const MapReader& m, const std::string& path, const std::string& key) {
  if (!m.Has(key)) return 0;
  ASSIGN_OR_RETURN(Int value, ReadInt<Int>(m.Get(key), Join(path, key)));
  if (value < 1) {
    return Invalid(Join(path, key), m.Get(key), absl::StrCat("must be >= 1, got ", value));
  }
  return value;
}

absl::StatusOr<double> ReadDouble(const YAML::Node& node, const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadScalar(node, path));
  double value;
  if (!absl::SimpleAtod(text, &value)) {
    return Invalid(path, node, absl::StrCat("expected a number, got \"", text, "\""));
  }
  return value;
}

absl::StatusOr<bool> ReadBool(const YAML::Node& node, const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadScalar(node, path));
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  return Invalid(path, node, absl::StrCat("expected true or false, got \"", text, "\""));
}

absl::Status ForEachItem(const YAML::Node& node, const std::string& path,
                         const std::function<absl::Status(const YAML::Node&,
                                                          const std::string&)>& fn) {
  if (!node.IsSequence()) {
    return Invalid(path, node, absl::StrCat("expected a list, got ", KindName(node)));
  }
  for (size_t i = 0; i < node.size(); ++i) {
    RETURN_IF_ERROR(fn(node[i], absl::StrCat(path, "[", i, "]")));
  }
  return absl::OkStatus();
}

template <typename Int, typename Repeated>
absl::Status ReadIntList(const YAML::Node& node, const std::string& path, Repeated* out) {
  return ForEachItem(node, path, [&](const YAML::Node& item, const std::string& item_path) {
    ASSIGN_OR_RETURN(Int v, ReadInt<Int>(item, item_path));
    out->Add(v);
    return absl::OkStatus();
  });
}

absl::Status ReadPlacementList(const YAML::Node& node, const std::string& path,
                               google::protobuf::RepeatedPtrField<Placement>* out) {
  return ForEachItem(node, path, [&](const YAML::Node& item, const std::string& item_path) {
    ASSIGN_OR_RETURN(std::string text, ReadScalar(item, item_path));
    absl::StatusOr<Placement> p = ParsePlacement(text);
    if (!p.ok()) return Invalid(item_path, item, p.status().message());
    *out->Add() = *p;
    return absl::OkStatus();
  });
}

// A placement list, positional (`[Replicate(), Shard(1)]`, one per mesh dim) or by mesh dim name
// (`{mp: Shard(1)}`, unnamed dims Replicate()). Both become the positional list: the one
// canonical representation. `implicit` (may be null) receives the dims a named map left out.
absl::Status ReadPlacements(const YAML::Node& node, const std::string& path, const v1::Mesh& mesh,
                            google::protobuf::RepeatedPtrField<Placement>* out,
                            std::vector<int>* implicit) {
  if (!node.IsMap()) return ReadPlacementList(node, path, out);
  if (mesh.dim_names_size() != mesh.shape_size()) {
    return Invalid(path, node,
                   absl::StrCat("placements by mesh dim name need one name per mesh dim; "
                                "mesh.dim_names has ",
                                mesh.dim_names_size(), " for ", mesh.shape_size(), " dim(s)"));
  }
  std::vector<Placement> by_dim(mesh.shape_size());
  std::vector<bool> named(mesh.shape_size(), false);
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Invalid(path, kv.first, "keys must be mesh dim names");
    const std::string dim = kv.first.Scalar();
    const std::string item_path = Join(path, dim);
    ASSIGN_OR_RETURN(std::string text, ReadScalar(kv.second, item_path));
    absl::StatusOr<Placement> p = ParsePlacement(text);
    if (!p.ok()) return Invalid(item_path, kv.second, p.status().message());
    auto it = std::find(mesh.dim_names().begin(), mesh.dim_names().end(), dim);
    if (it == mesh.dim_names().end()) {
      return Invalid(item_path, kv.first,
                     absl::StrCat(FormatPlacement(*p), " on mesh dim \"", dim,
                                  "\": the mesh has no dim named ", dim, " (dims: ",
                                  MeshDimList(mesh), ")"));
    }
    const int index = static_cast<int>(it - mesh.dim_names().begin());
    if (named[index]) {
      return Invalid(item_path, kv.first, absl::StrCat("duplicate mesh dim \"", dim, "\""));
    }
    named[index] = true;
    by_dim[index] = *p;
  }
  out->Clear();
  for (int i = 0; i < mesh.shape_size(); ++i) {
    if (!named[i]) {
      by_dim[i].set_kind(Placement::REPLICATE);
      if (implicit != nullptr) implicit->push_back(i);
    }
    *out->Add() = by_dim[i];
  }
  return absl::OkStatus();
}

std::string ResolvePath(const std::string& path, const std::string& base_dir) {
  if (path.empty() || base_dir.empty()) return path;
  std::filesystem::path p(path);
  if (p.is_absolute()) return p.lexically_normal().string();
  return (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

absl::Status ParseMesh(const YAML::Node& node, const std::string& path, v1::Mesh* mesh) {
  ASSIGN_OR_RETURN(MapReader m,
                   MapReader::Read(node, path, {"shape", "dim_names", "auto", "ranks"}));
  if (m.Has("auto")) {
    ASSIGN_OR_RETURN(bool on, ReadBool(m.Get("auto"), Join(path, "auto")));
    mesh->set_auto_parallel(on);
  }
  if (m.Has("ranks")) {
    if (!mesh->auto_parallel()) {
      return Invalid(Join(path, "ranks"), m.Get("ranks"),
                     "only with auto: true (a written mesh's ranks are its shape's product)");
    }
    ASSIGN_OR_RETURN(int64_t ranks, ReadInt<int64_t>(m.Get("ranks"), Join(path, "ranks")));
    if (ranks < 1 || ranks > kMaxWorldSize) {
      return Invalid(Join(path, "ranks"), m.Get("ranks"),
                     absl::StrCat("must be in 1..", kMaxWorldSize, ", got ", ranks));
    }
    mesh->set_ranks(ranks);
  }
  if (mesh->auto_parallel()) {
    for (const char* key : {"shape", "dim_names"}) {
      if (m.Has(key)) {
        return Invalid(Join(path, key), m.Get(key),
                       "not with auto: true (the search chooses the mesh)");
      }
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(RequireKey(m, node, path, "shape"));
  RETURN_IF_ERROR(ReadIntList<int64_t>(m.Get("shape"), Join(path, "shape"),
                                       mesh->mutable_shape()));
  if (m.Has("dim_names")) {
    RETURN_IF_ERROR(ForEachItem(m.Get("dim_names"), Join(path, "dim_names"),
                                [&](const YAML::Node& item, const std::string& item_path) {
                                  ASSIGN_OR_RETURN(std::string s, ReadString(item, item_path));
                                  mesh->add_dim_names(s);
                                  return absl::OkStatus();
                                }));
  }
  return absl::OkStatus();
}

absl::Status ParseLayer(const YAML::Node& node, const std::string& index_path,
                        const v1::Mesh& mesh, v1::Layer* layer, ImplicitDims* implicit) {
  std::string path = index_path;
  // Name the layer in every error when it has a readable name.
  if (node.IsMap() && node["name"] && node["name"].IsScalar()) {
    path = absl::StrCat(index_path, " (", node["name"].Scalar(), ")");
  }
  ASSIGN_OR_RETURN(MapReader m,
                   MapReader::Read(node, path,
                                   {"name", "type", "in_features", "out_features", "bias",
                                    "placements", "stage", "inputs", "recompute"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "name"));
  RETURN_IF_ERROR(RequireKey(m, node, path, "type"));
  ASSIGN_OR_RETURN(*layer->mutable_name(), ReadString(m.Get("name"), Join(path, "name")));
  ASSIGN_OR_RETURN(*layer->mutable_type(), ReadString(m.Get("type"), Join(path, "type")));
  if (m.Has("in_features")) {
    ASSIGN_OR_RETURN(int64_t v, ReadInt<int64_t>(m.Get("in_features"), Join(path, "in_features")));
    layer->set_in_features(v);
  }
  if (m.Has("out_features")) {
    ASSIGN_OR_RETURN(int64_t v,
                     ReadInt<int64_t>(m.Get("out_features"), Join(path, "out_features")));
    layer->set_out_features(v);
  }
  if (m.Has("bias")) {
    ASSIGN_OR_RETURN(bool v, ReadBool(m.Get("bias"), Join(path, "bias")));
    layer->set_bias(v);
  }
  if (m.Has("placements")) {
    const std::string ppath = Join(path, "placements");
    ASSIGN_OR_RETURN(MapReader pm, MapReader::Read(m.Get("placements"), ppath, {"weight", "bias"}));
    for (const char* param : {"weight", "bias"}) {
      if (!pm.Has(param)) continue;
      v1::PlacementList list;
      std::vector<int> unnamed;
      RETURN_IF_ERROR(ReadPlacements(pm.Get(param), Join(ppath, param), mesh,
                                     list.mutable_placements(), &unnamed));
      for (int dim : unnamed) implicit->insert({layer->name(), param, dim});
      (*layer->mutable_placements())[param] = std::move(list);
    }
  }
  if (m.Has("recompute")) {
    ASSIGN_OR_RETURN(bool v, ReadBool(m.Get("recompute"), Join(path, "recompute")));
    layer->set_recompute(v);
  }
  if (m.Has("stage")) {
    ASSIGN_OR_RETURN(int32_t v, ReadInt<int32_t>(m.Get("stage"), Join(path, "stage")));
    layer->set_stage(v);
  }
  if (m.Has("inputs")) {
    RETURN_IF_ERROR(ForEachItem(m.Get("inputs"), Join(path, "inputs"),
                                [&](const YAML::Node& item, const std::string& item_path) {
                                  ASSIGN_OR_RETURN(*layer->add_inputs(),
                                                   ReadString(item, item_path));
                                  return absl::OkStatus();
                                }));
  }
  return absl::OkStatus();
}

// A `config:` value as JSON, the form Hugging Face writes, so that the spec's config and a
// config.json have one reader (TransformerConfigFromJson). Plain scalars are typed as YAML 1.2's
// core schema types them (null, true/false, integers, floats); quoted ones are strings. `depth`
// bounds nesting, aliases that refer back to themselves included.
absl::StatusOr<nlohmann::json> YamlToJson(const YAML::Node& node, const std::string& path,
                                          int depth) {
  if (depth > 32) return Invalid(path, node, "nested too deeply");
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return nlohmann::json(nullptr);
    case YAML::NodeType::Scalar: {
      const std::string& text = node.Scalar();
      if (node.Tag() != "?") return nlohmann::json(text);
      if (text == "~" || text == "null" || text == "Null" || text == "NULL") {
        return nlohmann::json(nullptr);
      }
      if (text == "true" || text == "True" || text == "TRUE") return nlohmann::json(true);
      if (text == "false" || text == "False" || text == "FALSE") return nlohmann::json(false);
      int64_t i;
      if (absl::SimpleAtoi(text, &i)) return nlohmann::json(i);
      double d;
      if (text.find_first_not_of("0123456789+-.eE") == std::string::npos &&
          text.find_first_of("0123456789") != std::string::npos && absl::SimpleAtod(text, &d)) {
        return nlohmann::json(d);
      }
      return nlohmann::json(text);
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json list = nlohmann::json::array();
      for (size_t i = 0; i < node.size(); ++i) {
        ASSIGN_OR_RETURN(nlohmann::json item,
                         YamlToJson(node[i], absl::StrCat(path, "[", i, "]"), depth + 1));
        list.push_back(std::move(item));
      }
      return list;
    }
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) return Invalid(path, kv.first, "keys must be plain strings");
        const std::string key = kv.first.Scalar();
        if (object.contains(key)) {
          return Invalid(path, kv.first, absl::StrCat("duplicate key ", QuotedKey(key)));
        }
        ASSIGN_OR_RETURN(object[key], YamlToJson(kv.second, Join(path, key), depth + 1));
      }
      return object;
    }
    default:
      return Invalid(path, node, "undefined value");
  }
}

// model.placements: {PATTERN: placements}, each list written as a layer parameter's
// (positional, or by mesh dim name with unnamed dims Replicate()).
absl::Status ParsePatternPlacements(const YAML::Node& node, const std::string& path,
                                    const v1::Mesh& mesh, v1::Model* model) {
  if (!node.IsMap()) {
    return Invalid(path, node,
                   absl::StrCat("expected a mapping {parameter name pattern: placements}, got ",
                                KindName(node)));
  }
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) {
      return Invalid(path, kv.first, "keys must be parameter name patterns");
    }
    const std::string pattern = kv.first.Scalar();
    const std::string pattern_path = PatternPath(pattern);
    const absl::Status valid = ValidateParamPattern(pattern);
    if (!valid.ok()) return Invalid(pattern_path, kv.first, valid.message());
    if (model->placements().count(pattern) > 0) {
      return Invalid(path, kv.first, absl::StrCat("duplicate pattern \"", pattern, "\""));
    }
    v1::PlacementList list;
    RETURN_IF_ERROR(
        ReadPlacements(kv.second, pattern_path, mesh, list.mutable_placements(), nullptr));
    (*model->mutable_placements())[pattern] = std::move(list);
  }
  return absl::OkStatus();
}

// model: {arch, config | config_file, placements, loss}: a transformer. A config file's path is
// resolved against base_dir and the file read here, so that the spec carries the config itself.
absl::Status ParseTransformer(const MapReader& m, const YAML::Node& node, const std::string& path,
                              const v1::Mesh& mesh, const std::string& base_dir,
                              const JobSpecYamlOptions& options, v1::Model* model) {
  if (m.Has("layers")) {
    return Invalid(Join(path, "layers"), m.Get("layers"),
                   "not allowed with model.arch (a transformer's layers come from its config)");
  }
  const std::string arch_path = Join(path, "arch");
  ASSIGN_OR_RETURN(*model->mutable_arch(), ReadString(m.Get("arch"), arch_path));
  const std::string& arch = model->arch();
  if (!IsKnownArch(arch)) {
    return Invalid(arch_path, m.Get("arch"),
                   absl::StrCat("unknown arch \"", arch, "\"; known: ", KnownArchs()));
  }
  const std::string config_path = Join(path, "config");
  const std::string file_path = Join(path, "config_file");
  if (m.Has("config") && m.Has("config_file")) {
    return Invalid(file_path, m.Get("config_file"),
                   "not allowed with model.config: give the config or a Hugging Face "
                   "config.json, not both");
  }
  if (m.Has("config")) {
    const YAML::Node config = m.Get("config");
    if (!config.IsMap()) {
      return Invalid(config_path, config,
                     absl::StrCat("expected a mapping of ", arch, " config keys, got ",
                                  KindName(config)));
    }
    std::map<std::string, std::string> where = {{"", Where(config)}};
    for (const auto& kv : config) {
      if (kv.first.IsScalar()) where[kv.first.Scalar()] = Where(kv.first);
    }
    ASSIGN_OR_RETURN(nlohmann::json json, YamlToJson(config, config_path, 0));
    ASSIGN_OR_RETURN(*model->mutable_config(),
                     TransformerConfigFromJson(arch, json, ConfigSource::kSpec, config_path,
                                               where));
  } else if (m.Has("config_file")) {
    ASSIGN_OR_RETURN(std::string file, ReadString(m.Get("config_file"), file_path));
    if (file.empty()) return Invalid(file_path, m.Get("config_file"), "must not be empty");
    model->set_config_file(ResolvePath(file, base_dir));
    if (options.read_files) {
      if (options.before_reading) {
        RETURN_IF_ERROR(options.before_reading(file_path, model->config_file()));
      }
      ASSIGN_OR_RETURN(*model->mutable_config(),
                       LoadTransformerConfigFile(arch, model->config_file()));
    }
  } else {
    return Invalid(config_path, node,
                   absl::StrCat("is required with model.arch (", arch,
                                "'s Hugging Face config keys), or model.config_file: a "
                                "config.json"));
  }
  if (m.Has("placements")) {
    RETURN_IF_ERROR(ParsePatternPlacements(m.Get("placements"), Join(path, "placements"), mesh,
                                           model));
  }
  if (m.Has("loss")) {
    ASSIGN_OR_RETURN(*model->mutable_loss(), ReadString(m.Get("loss"), Join(path, "loss")));
  }
  if (m.Has("config_file") && !options.read_files) return absl::OkStatus();  // no config read
  return ValidateTransformerModel(*model);
}

// model: {layers, loss}, or a transformer (ParseTransformer).
absl::Status ParseModel(const YAML::Node& node, const std::string& path, const v1::Mesh& mesh,
                        const std::string& base_dir, const JobSpecYamlOptions& options,
                        v1::Model* model, ImplicitDims* implicit) {
  ASSIGN_OR_RETURN(MapReader m,
                   MapReader::Read(node, path, {"layers", "loss", "arch", "config", "config_file",
                                                "placements", "recompute"}));
  if (m.Has("recompute")) {  // ValidateJobSpec checks the mode
    ASSIGN_OR_RETURN(*model->mutable_recompute(),
                     ReadString(m.Get("recompute"), Join(path, "recompute")));
  }
  if (m.Has("arch")) return ParseTransformer(m, node, path, mesh, base_dir, options, model);
  for (const std::string key : {"config", "config_file", "placements"}) {
    if (m.Has(key)) {
      return Invalid(Join(path, key), m.Get(key),
                     absl::StrCat("only with model.arch (a transformer: ", KnownArchs(), ")",
                                  key == "placements" ? "; a layers model places its parameters "
                                                        "per layer (model.layers[i].placements)"
                                                      : ""));
    }
  }
  if (!m.Has("layers")) {
    return Invalid(Join(path, "layers"), node,
                   absl::StrCat("is required (or model.arch: a transformer, ", KnownArchs(), ")"));
  }
  RETURN_IF_ERROR(ForEachItem(m.Get("layers"), Join(path, "layers"),
                              [&](const YAML::Node& item, const std::string& item_path) {
                                return ParseLayer(item, item_path, mesh, model->add_layers(),
                                                  implicit);
                              }));
  if (m.Has("loss")) {
    ASSIGN_OR_RETURN(*model->mutable_loss(), ReadString(m.Get("loss"), Join(path, "loss")));
  }
  return absl::OkStatus();
}

// data, or eval.data (`eval`: batch_size may be left to the job data's).
absl::Status ParseData(const YAML::Node& node, const std::string& path, const v1::Mesh& mesh,
                       bool eval, v1::Data* data) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path,
                                                {"source", "input", "label", "batch_size",
                                                 "placements", "sample_shape", "label_shape",
                                                 "num_samples", "path", "format", "seq_len"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "source"));
  if (!eval) RETURN_IF_ERROR(RequireKey(m, node, path, "batch_size"));
  ASSIGN_OR_RETURN(*data->mutable_source(), ReadString(m.Get("source"), Join(path, "source")));
  if (data->source() == "tokens") {
    // Shapes, sample count and dtypes come from seq_len and the file (ResolveDataShapes).
    for (const char* key : {"input", "label", "sample_shape", "label_shape", "num_samples"}) {
      if (m.Has(key)) {
        return Invalid(Join(path, key), m.Get(key),
                       "not for source tokens (samples are seq_len tokens of data.path, "
                       "labels the next token of each)");
      }
    }
  }
  if (m.Has("path")) {
    ASSIGN_OR_RETURN(*data->mutable_path(), ReadString(m.Get("path"), Join(path, "path")));
  }
  if (m.Has("format")) {
    ASSIGN_OR_RETURN(*data->mutable_format(), ReadString(m.Get("format"), Join(path, "format")));
  }
  if (m.Has("seq_len")) {
    ASSIGN_OR_RETURN(int64_t seq_len, ReadInt<int64_t>(m.Get("seq_len"), Join(path, "seq_len")));
    if (eval && seq_len < 1) {  // an absent one takes the job data's
      return Invalid(Join(path, "seq_len"), m.Get("seq_len"),
                     absl::StrCat("must be >= 1, got ", seq_len));
    }
    data->set_seq_len(seq_len);
  }
  if (m.Has("input")) {
    ASSIGN_OR_RETURN(*data->mutable_input(), ReadString(m.Get("input"), Join(path, "input")));
  }
  if (m.Has("label")) {
    ASSIGN_OR_RETURN(*data->mutable_label(), ReadString(m.Get("label"), Join(path, "label")));
  }
  if (m.Has("batch_size")) {
    ASSIGN_OR_RETURN(int64_t batch,
                     ReadInt<int64_t>(m.Get("batch_size"), Join(path, "batch_size")));
    if (eval && batch < 1) {  // an absent one takes the job data's
      return Invalid(Join(path, "batch_size"), m.Get("batch_size"),
                     absl::StrCat("must be >= 1, got ", batch));
    }
    data->set_batch_size(batch);
  }
  if (m.Has("placements")) {
    RETURN_IF_ERROR(ReadPlacements(m.Get("placements"), Join(path, "placements"), mesh,
                                   data->mutable_placements(), nullptr));
  }
  if (m.Has("sample_shape")) {
    RETURN_IF_ERROR(ReadIntList<int64_t>(m.Get("sample_shape"), Join(path, "sample_shape"),
                                         data->mutable_sample_shape()));
  }
  if (m.Has("label_shape")) {
    RETURN_IF_ERROR(ReadIntList<int64_t>(m.Get("label_shape"), Join(path, "label_shape"),
                                         data->mutable_label_shape()));
  }
  if (m.Has("num_samples")) {
    ASSIGN_OR_RETURN(int64_t n, ReadInt<int64_t>(m.Get("num_samples"), Join(path, "num_samples")));
    data->set_num_samples(n);
  }
  return absl::OkStatus();
}

// optimizer.schedule: {warmup_steps, decay, decay_steps, min_lr, cooldown_steps}. Counts that
// must be >= 1 when written are rejected here with their line (proto3 cannot tell a written 0
// from an absent field); how they combine is checked by ValidateJobSpec.
absl::Status ParseSchedule(const YAML::Node& node, const std::string& path,
                           v1::LrSchedule* schedule) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path,
                                                {"warmup_steps", "decay", "decay_steps", "min_lr",
                                                 "cooldown_steps"}));
  if (m.Has("warmup_steps")) {
    ASSIGN_OR_RETURN(int64_t warmup,
                     ReadInt<int64_t>(m.Get("warmup_steps"), Join(path, "warmup_steps")));
    schedule->set_warmup_steps(warmup);
  }
  if (m.Has("decay")) {
    ASSIGN_OR_RETURN(*schedule->mutable_decay(), ReadString(m.Get("decay"), Join(path, "decay")));
  }
  ASSIGN_OR_RETURN(int64_t decay_steps, ReadCount<int64_t>(m, path, "decay_steps"));
  schedule->set_decay_steps(decay_steps);
  ASSIGN_OR_RETURN(int64_t cooldown_steps, ReadCount<int64_t>(m, path, "cooldown_steps"));
  schedule->set_cooldown_steps(cooldown_steps);
  if (m.Has("min_lr")) {
    ASSIGN_OR_RETURN(double min_lr, ReadDouble(m.Get("min_lr"), Join(path, "min_lr")));
    schedule->set_min_lr(min_lr);
  }
  return absl::OkStatus();
}

absl::Status ParseOptimizer(const YAML::Node& node, const std::string& path, v1::Optimizer* opt) {
  ASSIGN_OR_RETURN(MapReader m,
                   MapReader::Read(node, path, {"type", "lr", "betas", "eps", "weight_decay",
                                                "weight_decay_params", "clip_grad_norm",
                                                "schedule"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "type"));
  RETURN_IF_ERROR(RequireKey(m, node, path, "lr"));
  ASSIGN_OR_RETURN(*opt->mutable_type(), ReadString(m.Get("type"), Join(path, "type")));
  ASSIGN_OR_RETURN(double lr, ReadDouble(m.Get("lr"), Join(path, "lr")));
  opt->set_lr(lr);
  if (m.Has("betas")) {
    RETURN_IF_ERROR(ForEachItem(m.Get("betas"), Join(path, "betas"),
                                [&](const YAML::Node& item, const std::string& item_path) {
                                  ASSIGN_OR_RETURN(double b, ReadDouble(item, item_path));
                                  opt->add_betas(b);
                                  return absl::OkStatus();
                                }));
  }
  if (m.Has("eps")) {
    ASSIGN_OR_RETURN(double eps, ReadDouble(m.Get("eps"), Join(path, "eps")));
    opt->set_eps(eps);
  } else if (opt->type() == "adamw") {
    opt->set_eps(1e-8);
  }
  if (m.Has("weight_decay")) {
    ASSIGN_OR_RETURN(double wd, ReadDouble(m.Get("weight_decay"), Join(path, "weight_decay")));
    opt->set_weight_decay(wd);
  }
  if (m.Has("weight_decay_params")) {
    ASSIGN_OR_RETURN(*opt->mutable_weight_decay_params(),
                     ReadString(m.Get("weight_decay_params"), Join(path, "weight_decay_params")));
  }
  if (m.Has("clip_grad_norm")) {
    ASSIGN_OR_RETURN(double clip,
                     ReadDouble(m.Get("clip_grad_norm"), Join(path, "clip_grad_norm")));
    if (!(clip > 0) || !std::isfinite(clip)) {  // 0 would read as no clipping
      return Invalid(Join(path, "clip_grad_norm"), m.Get("clip_grad_norm"),
                     absl::StrCat("must be a finite number > 0, got ", clip));
    }
    opt->set_clip_grad_norm(clip);
  }
  if (m.Has("schedule")) {
    RETURN_IF_ERROR(ParseSchedule(m.Get("schedule"), Join(path, "schedule"),
                                  opt->mutable_schedule()));
  }
  return absl::OkStatus();
}

// train.elastic: {dim, min, wait_s}. min below 1 is rejected here with its line (absent: 1);
// the rest is checked by ValidateJobSpec (ValidateElastic).
absl::Status ParseElastic(const YAML::Node& node, const std::string& path, v1::Elastic* elastic) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path, {"dim", "min", "wait_s"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "dim"));
  ASSIGN_OR_RETURN(*elastic->mutable_dim(), ReadString(m.Get("dim"), Join(path, "dim")));
  ASSIGN_OR_RETURN(int32_t min, ReadCount<int32_t>(m, path, "min"));
  elastic->set_min(min);
  if (m.Has("wait_s")) {
    ASSIGN_OR_RETURN(int32_t wait_s, ReadInt<int32_t>(m.Get("wait_s"), Join(path, "wait_s")));
    elastic->set_wait_s(wait_s);
  }
  return absl::OkStatus();
}

absl::Status ParseTrain(const YAML::Node& node, const std::string& path, v1::Train* train) {
  ASSIGN_OR_RETURN(MapReader m,
                   MapReader::Read(node, path, {"steps", "seed", "resume", "max_restarts",
                                                "micro_batches", "elastic"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "steps"));
  ASSIGN_OR_RETURN(int64_t steps, ReadInt<int64_t>(m.Get("steps"), Join(path, "steps")));
  train->set_steps(steps);
  if (m.Has("seed")) {
    ASSIGN_OR_RETURN(uint64_t seed, ReadInt<uint64_t>(m.Get("seed"), Join(path, "seed")));
    train->set_seed(seed);
  }
  if (m.Has("resume")) {
    ASSIGN_OR_RETURN(bool resume, ReadBool(m.Get("resume"), Join(path, "resume")));
    train->set_resume(resume);
  }
  if (m.Has("max_restarts")) {
    ASSIGN_OR_RETURN(int32_t restarts,
                     ReadInt<int32_t>(m.Get("max_restarts"), Join(path, "max_restarts")));
    train->set_max_restarts(restarts);
  }
  ASSIGN_OR_RETURN(int32_t micro_batches, ReadCount<int32_t>(m, path, "micro_batches"));
  train->set_micro_batches(micro_batches);
  if (m.Has("elastic")) {
    RETURN_IF_ERROR(ParseElastic(m.Get("elastic"), Join(path, "elastic"), train->mutable_elastic()));
  }
  return absl::OkStatus();
}

// eval: {data, every, batches}. Counts below 1 are rejected here with their line (an absent
// every evaluates after the last step only, an absent batches is 1).
absl::Status ParseEval(const YAML::Node& node, const std::string& path, const v1::Mesh& mesh,
                       v1::Eval* eval) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path, {"data", "every", "batches"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "data"));
  RETURN_IF_ERROR(ParseData(m.Get("data"), Join(path, "data"), mesh, /*eval=*/true,
                            eval->mutable_data()));
  ASSIGN_OR_RETURN(int64_t every, ReadCount<int64_t>(m, path, "every"));
  eval->set_every(every);
  ASSIGN_OR_RETURN(int32_t batches, ReadCount<int32_t>(m, path, "batches"));
  eval->set_batches(batches);
  return absl::OkStatus();
}

// checkpoint: {dir, every, keep}. Counts below 1 are rejected here with their line (proto3 cannot
// tell a written 0 from an absent field; the defaults fill absent ones).
absl::Status ParseCheckpoint(const YAML::Node& node, const std::string& path,
                             const std::string& base_dir, v1::Checkpoint* checkpoint) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path, {"dir", "every", "keep"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "dir"));
  ASSIGN_OR_RETURN(std::string dir, ReadString(m.Get("dir"), Join(path, "dir")));
  if (dir.empty()) return Invalid(Join(path, "dir"), m.Get("dir"), "must not be empty");
  checkpoint->set_dir(ResolvePath(dir, base_dir));
  ASSIGN_OR_RETURN(int64_t every, ReadCount<int64_t>(m, path, "every"));
  checkpoint->set_every(every);
  ASSIGN_OR_RETURN(int32_t keep, ReadCount<int32_t>(m, path, "keep"));
  checkpoint->set_keep(keep);
  return absl::OkStatus();
}

// parallelize: {NAME: {dim: DIM, plan: {LAYER: STYLE} | megatron, sequence_parallel: BOOL}}.
// Styles, names, the named plan and whether it fits the model are checked when it is applied
// (ApplyParallelize), so specs from the YAML and from gRPC get the same errors.
absl::Status ParseParallelize(const YAML::Node& node, const std::string& path, JobSpec* spec) {
  if (!node.IsMap()) {
    return Invalid(path, node, absl::StrCat("expected a mapping, got ", KindName(node)));
  }
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Invalid(path, kv.first, "keys must be plain strings");
    const std::string name = kv.first.Scalar();
    const std::string entry_path = Join(path, name);
    if (spec->parallelize().count(name) > 0) {
      return Invalid(path, kv.first, absl::StrCat("duplicate key \"", name, "\""));
    }
    ASSIGN_OR_RETURN(MapReader m, MapReader::Read(kv.second, entry_path,
                                                  {"dim", "plan", "sequence_parallel"}));
    RETURN_IF_ERROR(RequireKey(m, kv.second, entry_path, "dim"));
    RETURN_IF_ERROR(RequireKey(m, kv.second, entry_path, "plan"));
    v1::ParallelizeConfig entry;
    ASSIGN_OR_RETURN(*entry.mutable_dim(), ReadString(m.Get("dim"), Join(entry_path, "dim")));
    const std::string plan_path = Join(entry_path, "plan");
    const YAML::Node plan = m.Get("plan");
    if (plan.IsScalar()) {
      // A named plan (megatron): the architecture's own.
      entry.set_preset(plan.Scalar());
    } else if (!plan.IsMap()) {
      return Invalid(plan_path, plan,
                     absl::StrCat("expected megatron (a transformer's plan) or a mapping "
                                  "{layer: ColWiseParallel | RowWiseParallel}, got ",
                                  KindName(plan)));
    } else {
      for (const auto& layer : plan) {
        if (!layer.first.IsScalar()) {
          return Invalid(plan_path, layer.first, "keys must be layer names");
        }
        const std::string layer_name = layer.first.Scalar();
        if (entry.plan().count(layer_name) > 0) {
          return Invalid(plan_path, layer.first,
                         absl::StrCat("duplicate layer \"", layer_name, "\""));
        }
        ASSIGN_OR_RETURN(std::string style,
                         ReadString(layer.second, Join(plan_path, layer_name)));
        (*entry.mutable_plan())[layer_name] = style;
      }
    }
    if (m.Has("sequence_parallel")) {
      const std::string sp_path = Join(entry_path, "sequence_parallel");
      if (!plan.IsScalar()) {
        return Invalid(sp_path, m.Get("sequence_parallel"),
                       "only with plan: megatron (per-layer styles have no sequence-parallel "
                       "regions)");
      }
      ASSIGN_OR_RETURN(bool sp, ReadBool(m.Get("sequence_parallel"), sp_path));
      entry.set_sequence_parallel(sp);
    }
    (*spec->mutable_parallelize())[name] = std::move(entry);
  }
  return absl::OkStatus();
}

// pipeline: {dim, schedule, micro_batches, virtual_stages}. Counts below 1 are rejected here,
// with their line: proto3 cannot tell a written 0 from an absent field, and the defaults fill an
// absent one. The rest (the dim, the schedule, how they combine) is checked by
// ValidateJobSpec, so specs from the YAML and from gRPC get the same errors.
absl::Status ParsePipeline(const YAML::Node& node, const std::string& path,
                           v1::Pipeline* pipeline) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path, {"dim", "schedule", "micro_batches",
                                                             "virtual_stages"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "dim"));
  RETURN_IF_ERROR(RequireKey(m, node, path, "schedule"));
  ASSIGN_OR_RETURN(*pipeline->mutable_dim(), ReadString(m.Get("dim"), Join(path, "dim")));
  ASSIGN_OR_RETURN(*pipeline->mutable_schedule(),
                   ReadString(m.Get("schedule"), Join(path, "schedule")));
  // Absent: 0, which the defaults fill (micro_batches from train.micro_batches, else 1).
  ASSIGN_OR_RETURN(int32_t micro_batches, ReadCount<int32_t>(m, path, "micro_batches"));
  ASSIGN_OR_RETURN(int32_t virtual_stages, ReadCount<int32_t>(m, path, "virtual_stages"));
  pipeline->set_micro_batches(micro_batches);
  pipeline->set_virtual_stages(virtual_stages);
  return absl::OkStatus();
}

absl::Status ParseSharding(const YAML::Node& node, const std::string& path,
                           v1::Sharding* sharding) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path, {"dim", "level"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "dim"));
  RETURN_IF_ERROR(RequireKey(m, node, path, "level"));
  ASSIGN_OR_RETURN(*sharding->mutable_dim(), ReadString(m.Get("dim"), Join(path, "dim")));
  ASSIGN_OR_RETURN(int32_t level, ReadInt<int32_t>(m.Get("level"), Join(path, "level")));
  sharding->set_level(level);  // ValidateJobSpec checks it (with the dim given, 0 is an error)
  return absl::OkStatus();
}

// With mesh.auto the search writes the strategy: a spec that writes part of one is refused,
// naming the key.
absl::Status CheckNoStrategy(const YAML::Node& root) {
  for (const char* key : {"parallelize", "pipeline", "sharding"}) {
    if (root[key]) return Invalid(key, root[key], "not with mesh.auto (the search chooses it)");
  }
  const YAML::Node data = root["data"];
  if (data && data.IsMap() && data["placements"]) {
    return Invalid("data.placements", data["placements"],
                   "not with mesh.auto (the search places the batch)");
  }
  const YAML::Node model = root["model"];
  if (!model || !model.IsMap()) return absl::OkStatus();
  if (model["placements"]) {
    return Invalid("model.placements", model["placements"],
                   "not with mesh.auto (the search places the parameters)");
  }
  const YAML::Node layers = model["layers"];
  if (layers && layers.IsSequence()) {
    for (size_t i = 0; i < layers.size(); ++i) {
      const YAML::Node layer = layers[i];
      for (const char* key : {"placements", "stage"}) {
        if (layer && layer.IsMap() && layer[key]) {
          return Invalid(absl::StrCat("model.layers[", i, "].", key), layer[key],
                         "not with mesh.auto (the search chooses it)");
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParseRoot(const YAML::Node& root, const std::string& base_dir,
                       const JobSpecYamlOptions& options, JobSpec* spec) {
  if (!root.IsDefined() || root.IsNull()) {
    return absl::InvalidArgumentError("job spec is empty");
  }
  ASSIGN_OR_RETURN(MapReader m,
                   MapReader::Read(root, "job spec",
                                   {"name", "mesh", "model", "data", "optimizer", "train",
                                    "init_from", "device", "parallelize", "pipeline",
                                    "trace", "checkpoint", "precision", "storage", "allow_tf32",
                                    "overlap", "sharding", "bucket_mb", "eval"}));
  for (const char* key : {"name", "mesh", "model", "data", "optimizer", "train"}) {
    RETURN_IF_ERROR(RequireKey(m, root, "", key));
  }
  ASSIGN_OR_RETURN(*spec->mutable_name(), ReadString(m.Get("name"), "name"));
  RETURN_IF_ERROR(ParseMesh(m.Get("mesh"), "mesh", spec->mutable_mesh()));
  if (spec->mesh().auto_parallel()) RETURN_IF_ERROR(CheckNoStrategy(root));
  // Placements by mesh dim name need the names, defaulted or not, before the model is read.
  DefaultMeshDimNames(spec->mutable_mesh());
  ImplicitDims implicit;
  RETURN_IF_ERROR(ParseModel(m.Get("model"), "model", spec->mesh(), base_dir, options,
                             spec->mutable_model(), &implicit));
  RETURN_IF_ERROR(
      ParseData(m.Get("data"), "data", spec->mesh(), /*eval=*/false, spec->mutable_data()));
  RETURN_IF_ERROR(ParseOptimizer(m.Get("optimizer"), "optimizer", spec->mutable_optimizer()));
  RETURN_IF_ERROR(ParseTrain(m.Get("train"), "train", spec->mutable_train()));
  if (m.Has("init_from")) {
    ASSIGN_OR_RETURN(std::string init, ReadString(m.Get("init_from"), "init_from"));
    spec->set_init_from(ResolvePath(init, base_dir));
  }
  if (m.Has("device")) {
    ASSIGN_OR_RETURN(*spec->mutable_device(), ReadString(m.Get("device"), "device"));
  }
  if (m.Has("eval")) {
    RETURN_IF_ERROR(ParseEval(m.Get("eval"), "eval", spec->mesh(), spec->mutable_eval()));
  }
  for (v1::Data* data : {spec->mutable_data(), spec->mutable_eval()->mutable_data()}) {
    data->set_input(ResolvePath(data->input(), base_dir));
    data->set_label(ResolvePath(data->label(), base_dir));
    data->set_path(ResolvePath(data->path(), base_dir));
  }
  if (!m.Has("eval")) spec->clear_eval();
  if (m.Has("parallelize")) {
    RETURN_IF_ERROR(ParseParallelize(m.Get("parallelize"), "parallelize", spec));
  }
  if (m.Has("pipeline")) {
    RETURN_IF_ERROR(ParsePipeline(m.Get("pipeline"), "pipeline", spec->mutable_pipeline()));
  }
  if (m.Has("trace")) {
    ASSIGN_OR_RETURN(bool trace, ReadBool(m.Get("trace"), "trace"));
    spec->set_trace(trace);
  }
  if (m.Has("sharding")) {
    RETURN_IF_ERROR(ParseSharding(m.Get("sharding"), "sharding", spec->mutable_sharding()));
  }
  if (m.Has("bucket_mb")) {
    ASSIGN_OR_RETURN(double bucket_mb, ReadDouble(m.Get("bucket_mb"), "bucket_mb"));
    spec->set_bucket_mb(bucket_mb);  // ValidateJobSpec checks it
  }
  if (m.Has("overlap")) {
    ASSIGN_OR_RETURN(bool overlap, ReadBool(m.Get("overlap"), "overlap"));
    spec->set_blocking_collectives(!overlap);
  }
  if (m.Has("precision")) {
    ASSIGN_OR_RETURN(*spec->mutable_precision(), ReadString(m.Get("precision"), "precision"));
  }
  if (m.Has("storage")) {
    ASSIGN_OR_RETURN(*spec->mutable_storage(), ReadString(m.Get("storage"), "storage"));
  }
  if (m.Has("allow_tf32")) {
    ASSIGN_OR_RETURN(bool allow_tf32, ReadBool(m.Get("allow_tf32"), "allow_tf32"));
    spec->set_allow_tf32(allow_tf32);
  }
  if (m.Has("checkpoint")) {
    RETURN_IF_ERROR(ParseCheckpoint(
        m.Get("checkpoint"), "checkpoint",
        options.checkpoint_base_dir.value_or(base_dir),
        spec->mutable_checkpoint()));
  }
  ApplyJobSpecDefaults(spec);
  return ExpandParallelize(spec, implicit);
}

// Counts the first document's nodes as a reader that follows every alias sees them (an alias
// counts the nodes of what it names), from yaml-cpp's parse events, without building the nodes.
// Counts are capped at kMaxJobSpecYamlNodes + 1, so no sum overflows.
class ExpandedNodeCounter final : public YAML::EventHandler {
 public:
  int64_t total() const { return total_; }
  // The first alias met inside the node it names (yaml-cpp would build a cycle), or null.
  const YAML::Mark* self_alias() const { return self_alias_ ? &self_alias_mark_ : nullptr; }

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t anchor) override { Leaf(anchor); }
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    Leaf(anchor);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    auto it = sizes_.find(anchor);
    if (it == sizes_.end()) {  // its node has not ended: the alias is inside it
      if (!self_alias_) self_alias_mark_ = mark;
      self_alias_ = true;
      return;
    }
    Add(it->second);
  }
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    open_.push_back({anchor, 1});
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    open_.push_back({anchor, 1});
  }
  void OnMapEnd() override { Close(); }

 private:
  static constexpr int64_t kCap = kMaxJobSpecYamlNodes + 1;

  void Add(int64_t n) {
    int64_t& into = open_.empty() ? total_ : open_.back().second;
    into = std::min(kCap, into + n);
  }
  void Leaf(YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) sizes_[anchor] = 1;
    Add(1);
  }
  void Close() {
    const auto [anchor, size] = open_.back();
    open_.pop_back();
    if (anchor != YAML::NullAnchor) sizes_[anchor] = size;
    Add(size);
  }

  // The collections not yet ended, outermost first, with their nodes so far.
  std::vector<std::pair<YAML::anchor_t, int64_t>> open_;
  std::map<YAML::anchor_t, int64_t> sizes_;  // the nodes of each anchored node that has ended
  int64_t total_ = 0;
  bool self_alias_ = false;
  YAML::Mark self_alias_mark_;
};

absl::Status CheckExpandedSize(const std::string& text) {
  // Without an anchor (`&name`) there is no alias: the nodes are the ones the text shows, and the
  // second parse (most of a parse's time) is skipped.
  if (text.find('&') == std::string::npos) return absl::OkStatus();
  std::istringstream in(text);
  YAML::Parser parser(in);
  ExpandedNodeCounter counter;
  parser.HandleNextDocument(counter);
  if (const YAML::Mark* mark = counter.self_alias()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job spec: an alias inside the node it names (line ", mark->line + 1,
                     ", column ", mark->column + 1, ")"));
  }
  if (counter.total() > kMaxJobSpecYamlNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("job spec: more than ", kMaxJobSpecYamlNodes,
                     " YAML nodes with its aliases expanded"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<JobSpec> ParseJobSpecYaml(absl::string_view yaml, const std::string& base_dir,
                                         const JobSpecYamlOptions& options) {
  // YAML is Unicode text, and a job record's strings must be UTF-8: say where it is not (yaml-cpp
  // would read the bytes into a string that protobuf then cannot send).
  if (const size_t bad = FirstInvalidUtf8(yaml); bad != absl::string_view::npos) {
    const absl::string_view before = yaml.substr(0, bad);
    const size_t line_start = before.rfind('\n');
    const size_t column = line_start == absl::string_view::npos ? bad + 1 : bad - line_start;
    return absl::InvalidArgumentError(absl::StrCat(
        "job spec is not valid UTF-8 at line ", std::count(before.begin(), before.end(), '\n') + 1,
        ", column ", column, " (byte 0x", absl::Hex(static_cast<unsigned char>(yaml[bad]),
                                                    absl::kZeroPad2),
        "); save it as UTF-8"));
  }
  JobSpec spec;
  try {
    const std::string text(yaml);
    RETURN_IF_ERROR(CheckExpandedSize(text));
    YAML::Node root = YAML::Load(text);
    if (!root.IsDefined() || root.IsNull()) {
      // yaml-cpp reads some malformed text (a leading ",") as no document at all: say where the
      // text begins rather than that it is empty.
      int line = 0;
      for (absl::string_view l : absl::StrSplit(yaml, '\n')) {
        ++line;
        const absl::string_view content = absl::StripLeadingAsciiWhitespace(l);
        if (!content.empty() && content[0] != '#') {
          return absl::InvalidArgumentError(absl::StrCat(
              "job spec is not valid YAML at line ", line, ": no document could be read"));
        }
      }
    }
    RETURN_IF_ERROR(ParseRoot(root, base_dir, options, &spec));
  } catch (const YAML::Exception& e) {
    std::string where;
    if (!e.mark.is_null()) {
      where = absl::StrCat(" at line ", e.mark.line + 1, ", column ", e.mark.column + 1);
    }
    return absl::InvalidArgumentError(absl::StrCat("job spec is not valid YAML", where, ": ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", e.what()));
  }
  return spec;
}

absl::StatusOr<std::string> ReadJobSpecFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a job spec"));
  }
  return ReadSmallRegularFile(path, kMaxJobSpecBytes);
}

absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadJobSpecFile(path));
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) abs = path;
  absl::StatusOr<JobSpec> spec = ParseJobSpecYaml(text, abs.parent_path().string());
  if (!spec.ok()) return Annotate(spec.status(), path);
  return spec;
}
}  // namespace weft
