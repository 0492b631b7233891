#include "common/spec/spec.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/checkpoint/checkpoint.h"
#include "common/dist_attr.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "yaml-cpp/yaml.h"

namespace weft {
namespace {

using v1::JobSpec;
using v1::Placement;

// Far above any real cluster; keeps the product of the mesh shape from overflowing.
constexpr int64_t kMaxWorldSize = int64_t{1} << 20;

// ---------------------------------------------------------------------------------------------
// YAML -> JobSpec. yaml-cpp throws; every call into it below happens inside one try block in
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
                       absl::StrCat("unknown key \"", key, "\"; known: ", absl::StrJoin(known, ", ")));
      }
      if (reader.children_.count(key) > 0) {
        return Invalid(path, kv.first, absl::StrCat("duplicate key \"", key, "\""));
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

// (layer name, parameter, mesh dim index) of placements the user left to the default
// Replicate(): a named placement map's unnamed dims. The parallelize shortcut may set those;
// anything the user wrote is a conflict when it differs.
using ImplicitDims = std::set<std::tuple<std::string, std::string, int>>;

// d0, d1, ... when the spec names no mesh dim (part of ApplyJobSpecDefaults).
void DefaultMeshDimNames(v1::Mesh* mesh) {
  if (mesh->dim_names_size() == 0) {
    for (int i = 0; i < mesh->shape_size(); ++i) mesh->add_dim_names(absl::StrCat("d", i));
  }
}

std::string MeshDimList(const v1::Mesh& mesh) {
  return absl::StrJoin(mesh.dim_names(), ", ");
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
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path, {"shape", "dim_names"}));
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
                                    "placements", "stage"}));
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
  if (m.Has("stage")) {
    ASSIGN_OR_RETURN(int32_t v, ReadInt<int32_t>(m.Get("stage"), Join(path, "stage")));
    layer->set_stage(v);
  }
  return absl::OkStatus();
}

absl::Status ParseModel(const YAML::Node& node, const std::string& path, const v1::Mesh& mesh,
                        v1::Model* model, ImplicitDims* implicit) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path, {"layers", "loss"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "layers"));
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

absl::Status ParseData(const YAML::Node& node, const std::string& path, const v1::Mesh& mesh,
                       v1::Data* data) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path,
                                                {"source", "input", "label", "batch_size",
                                                 "placements", "sample_shape", "label_shape",
                                                 "num_samples"}));
  RETURN_IF_ERROR(RequireKey(m, node, path, "source"));
  RETURN_IF_ERROR(RequireKey(m, node, path, "batch_size"));
  ASSIGN_OR_RETURN(*data->mutable_source(), ReadString(m.Get("source"), Join(path, "source")));
  if (m.Has("input")) {
    ASSIGN_OR_RETURN(*data->mutable_input(), ReadString(m.Get("input"), Join(path, "input")));
  }
  if (m.Has("label")) {
    ASSIGN_OR_RETURN(*data->mutable_label(), ReadString(m.Get("label"), Join(path, "label")));
  }
  ASSIGN_OR_RETURN(int64_t batch, ReadInt<int64_t>(m.Get("batch_size"), Join(path, "batch_size")));
  data->set_batch_size(batch);
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

absl::Status ParseOptimizer(const YAML::Node& node, const std::string& path, v1::Optimizer* opt) {
  ASSIGN_OR_RETURN(MapReader m,
                   MapReader::Read(node, path, {"type", "lr", "betas", "eps", "weight_decay"}));
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
  return absl::OkStatus();
}

absl::Status ParseTrain(const YAML::Node& node, const std::string& path, v1::Train* train) {
  ASSIGN_OR_RETURN(MapReader m, MapReader::Read(node, path, {"steps", "seed", "resume"}));
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
  if (m.Has("every")) {
    ASSIGN_OR_RETURN(int64_t every, ReadInt<int64_t>(m.Get("every"), Join(path, "every")));
    if (every < 1) {
      return Invalid(Join(path, "every"), m.Get("every"), absl::StrCat("must be >= 1, got ", every));
    }
    checkpoint->set_every(every);
  }
  if (m.Has("keep")) {
    ASSIGN_OR_RETURN(int32_t keep, ReadInt<int32_t>(m.Get("keep"), Join(path, "keep")));
    if (keep < 1) {
      return Invalid(Join(path, "keep"), m.Get("keep"), absl::StrCat("must be >= 1, got ", keep));
    }
    checkpoint->set_keep(keep);
  }
  return absl::OkStatus();
}

// parallelize: {NAME: {dim: DIM, plan: {LAYER: STYLE}}}. Styles and names are checked when it
// is applied (ApplyParallelize), so specs from the YAML and from gRPC get the same errors.
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
    ASSIGN_OR_RETURN(MapReader m, MapReader::Read(kv.second, entry_path, {"dim", "plan"}));
    RETURN_IF_ERROR(RequireKey(m, kv.second, entry_path, "dim"));
    RETURN_IF_ERROR(RequireKey(m, kv.second, entry_path, "plan"));
    v1::ParallelizeConfig entry;
    ASSIGN_OR_RETURN(*entry.mutable_dim(), ReadString(m.Get("dim"), Join(entry_path, "dim")));
    const std::string plan_path = Join(entry_path, "plan");
    const YAML::Node plan = m.Get("plan");
    if (!plan.IsMap()) {
      return Invalid(plan_path, plan,
                     absl::StrCat("expected a mapping {layer: ColWiseParallel | "
                                  "RowWiseParallel}, got ",
                                  KindName(plan)));
    }
    for (const auto& layer : plan) {
      if (!layer.first.IsScalar()) {
        return Invalid(plan_path, layer.first, "keys must be layer names");
      }
      const std::string layer_name = layer.first.Scalar();
      if (entry.plan().count(layer_name) > 0) {
        return Invalid(plan_path, layer.first,
                       absl::StrCat("duplicate layer \"", layer_name, "\""));
      }
      ASSIGN_OR_RETURN(std::string style, ReadString(layer.second, Join(plan_path, layer_name)));
      (*entry.mutable_plan())[layer_name] = style;
    }
    (*spec->mutable_parallelize())[name] = std::move(entry);
  }
  return absl::OkStatus();
}

// pipeline: {dim, schedule, micro_batches, virtual_stages}. Counts below 1 are rejected here,
// with their line: proto3 cannot tell a written 0 from an absent field, and the defaults turn an
// absent one into 1. The rest (the dim, the schedule, how they combine) is checked by
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
  // Absent: 1.
  auto read_count = [&](const std::string& key) -> absl::StatusOr<int32_t> {
    if (!m.Has(key)) return 1;
    ASSIGN_OR_RETURN(int32_t value, ReadInt<int32_t>(m.Get(key), Join(path, key)));
    if (value < 1) {
      return Invalid(Join(path, key), m.Get(key), absl::StrCat("must be >= 1, got ", value));
    }
    return value;
  };
  ASSIGN_OR_RETURN(int32_t micro_batches, read_count("micro_batches"));
  ASSIGN_OR_RETURN(int32_t virtual_stages, read_count("virtual_stages"));
  pipeline->set_micro_batches(micro_batches);
  pipeline->set_virtual_stages(virtual_stages);
  return absl::OkStatus();
}

absl::Status ExpandParallelize(JobSpec* spec, const ImplicitDims& implicit);

absl::Status ParseRoot(const YAML::Node& root, const std::string& base_dir, JobSpec* spec) {
  if (!root.IsDefined() || root.IsNull()) {
    return absl::InvalidArgumentError("job spec is empty");
  }
  ASSIGN_OR_RETURN(MapReader m,
                   MapReader::Read(root, "job spec",
                                   {"name", "mesh", "model", "data", "optimizer", "train",
                                    "init_from", "device", "parallelize", "pipeline",
                                    "trace", "checkpoint", "precision", "allow_tf32"}));
  for (const char* key : {"name", "mesh", "model", "data", "optimizer", "train"}) {
    RETURN_IF_ERROR(RequireKey(m, root, "", key));
  }
  ASSIGN_OR_RETURN(*spec->mutable_name(), ReadString(m.Get("name"), "name"));
  RETURN_IF_ERROR(ParseMesh(m.Get("mesh"), "mesh", spec->mutable_mesh()));
  // Placements by mesh dim name need the names, defaulted or not, before the model is read.
  DefaultMeshDimNames(spec->mutable_mesh());
  ImplicitDims implicit;
  RETURN_IF_ERROR(ParseModel(m.Get("model"), "model", spec->mesh(), spec->mutable_model(),
                             &implicit));
  RETURN_IF_ERROR(ParseData(m.Get("data"), "data", spec->mesh(), spec->mutable_data()));
  RETURN_IF_ERROR(ParseOptimizer(m.Get("optimizer"), "optimizer", spec->mutable_optimizer()));
  RETURN_IF_ERROR(ParseTrain(m.Get("train"), "train", spec->mutable_train()));
  if (m.Has("init_from")) {
    ASSIGN_OR_RETURN(std::string init, ReadString(m.Get("init_from"), "init_from"));
    spec->set_init_from(ResolvePath(init, base_dir));
  }
  if (m.Has("device")) {
    ASSIGN_OR_RETURN(*spec->mutable_device(), ReadString(m.Get("device"), "device"));
  }
  v1::Data* data = spec->mutable_data();
  data->set_input(ResolvePath(data->input(), base_dir));
  data->set_label(ResolvePath(data->label(), base_dir));
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
  if (m.Has("precision")) {
    ASSIGN_OR_RETURN(*spec->mutable_precision(), ReadString(m.Get("precision"), "precision"));
  }
  if (m.Has("allow_tf32")) {
    ASSIGN_OR_RETURN(bool allow_tf32, ReadBool(m.Get("allow_tf32"), "allow_tf32"));
    spec->set_allow_tf32(allow_tf32);
  }
  if (m.Has("checkpoint")) {
    RETURN_IF_ERROR(ParseCheckpoint(m.Get("checkpoint"), "checkpoint", base_dir,
                                    spec->mutable_checkpoint()));
  }
  ApplyJobSpecDefaults(spec);
  return ExpandParallelize(spec, implicit);
}

// ---------------------------------------------------------------------------------------------
// Validation.

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

template <typename Repeated>
std::vector<int64_t> ToVector(const Repeated& r) {
  return std::vector<int64_t>(r.begin(), r.end());
}

std::string LayerPath(const v1::Layer& layer, int index) {
  if (layer.name().empty()) return absl::StrCat("model.layers[", index, "]");
  return absl::StrCat("model.layers[", index, "] (", layer.name(), ")");
}

// One placement per mesh dim and shard axes in range for a tensor of `rank` axes. Partial is
// allowed: a parameter or batch may start as partial sums that the planner reduces.
absl::Status ValidatePlacements(const google::protobuf::RepeatedPtrField<Placement>& placements,
                                const v1::Mesh& mesh, int rank, const std::string& path,
                                absl::string_view what) {
  if (placements.size() != mesh.shape_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", placements.size(), " placement(s) ", FormatPlacements(placements),
        " for a mesh of ", mesh.shape_size(), " dim(s); give one per mesh dim (",
        absl::StrJoin(mesh.dim_names(), ", "), ")"));
  }
  for (int i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    const std::string item = absl::StrCat(path, "[", i, "]");
    switch (p.kind()) {
      case Placement::REPLICATE:
      case Placement::PARTIAL:
        break;
      case Placement::SHARD:
        if (p.axis() < -rank || p.axis() >= rank) {
          return absl::InvalidArgumentError(absl::StrCat(
              item, ": ", FormatPlacement(p), " on mesh dim ", mesh.dim_names(i),
              " is out of range for ", what, " of rank ", rank, " (axes ", -rank, "..", rank - 1,
              ")"));
        }
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(item, ": placement kind is unspecified"));
    }
  }
  return absl::OkStatus();
}

// How many shards each axis of a tensor of `rank` axes is split into, and over which mesh dims.
// placements must have passed ValidatePlacements.
struct AxisSplit {
  int64_t shards = 1;
  std::vector<std::string> dims;
};
std::vector<AxisSplit> AxisSplits(const google::protobuf::RepeatedPtrField<Placement>& placements,
                                  const v1::Mesh& mesh, int rank) {
  std::vector<AxisSplit> splits(rank);
  for (int i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    if (p.kind() != Placement::SHARD) continue;
    const int axis = p.axis() < 0 ? p.axis() + rank : p.axis();
    if (axis < 0 || axis >= rank) continue;
    splits[axis].shards *= mesh.shape(i);
    splits[axis].dims.push_back(mesh.dim_names(i));
  }
  return splits;
}

// Uneven shards are fine (the last takes the remainder); empty ones are not.
absl::Status CheckNoEmptyShards(const google::protobuf::RepeatedPtrField<Placement>& placements,
                                const v1::Mesh& mesh, const std::vector<int64_t>& shape,
                                const std::string& path, absl::string_view what) {
  const std::vector<AxisSplit> splits =
      AxisSplits(placements, mesh, static_cast<int>(shape.size()));
  for (size_t axis = 0; axis < shape.size(); ++axis) {
    if (splits[axis].shards <= shape[axis]) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": ", FormatPlacements(placements), " splits axis ", axis, " of ", what, " ",
        ShapeString(shape), " (length ", shape[axis], ") into ", splits[axis].shards,
        " shards over mesh dim(s) ", absl::StrJoin(splits[axis].dims, ", "),
        "; some shards would be empty"));
  }
  return absl::OkStatus();
}

absl::Status ValidateMesh(const v1::Mesh& mesh) {
  if (mesh.shape_size() == 0) {
    return absl::InvalidArgumentError("mesh.shape: must list at least one dimension, e.g. [4]");
  }
  int64_t world = 1;
  for (int i = 0; i < mesh.shape_size(); ++i) {
    if (mesh.shape(i) <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("mesh.shape[", i, "]: must be > 0, got ", mesh.shape(i)));
    }
    if (mesh.shape(i) > kMaxWorldSize || world * mesh.shape(i) > kMaxWorldSize) {
      return absl::InvalidArgumentError(absl::StrCat("mesh.shape: ", ShapeString(ToVector(mesh.shape())),
                                                     " has more than ", kMaxWorldSize, " ranks"));
    }
    world *= mesh.shape(i);
  }
  if (mesh.dim_names_size() != mesh.shape_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh.dim_names: ", mesh.dim_names_size(), " name(s) for ", mesh.shape_size(),
        " dimension(s) of shape ", ShapeString(ToVector(mesh.shape()))));
  }
  std::set<std::string> seen;
  for (int i = 0; i < mesh.dim_names_size(); ++i) {
    if (mesh.dim_names(i).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("mesh.dim_names[", i, "]: must not be empty"));
    }
    if (!seen.insert(mesh.dim_names(i)).second) {
      return absl::InvalidArgumentError(absl::StrCat("mesh.dim_names[", i, "]: duplicate name \"",
                                                     mesh.dim_names(i), "\""));
    }
  }
  return absl::OkStatus();
}

struct ParamShape {
  std::string name;  // fc0.weight
  std::vector<int64_t> shape;
};

// Checks the layer chain. `input_width` is the data's last axis when known (-1 otherwise);
// returns the model's output width in *output_width (-1 when the model has no linear layer and
// the input width is unknown) and every parameter's global shape.
absl::Status ValidateModel(const v1::Model& model, const v1::Mesh& mesh, int64_t input_width,
                           int64_t* output_width, std::vector<ParamShape>* params) {
  if (model.layers_size() == 0) {
    return absl::InvalidArgumentError("model.layers: the model needs at least one layer");
  }
  std::set<std::string> names;
  int64_t width = input_width;
  int last_linear = -1;
  for (int i = 0; i < model.layers_size(); ++i) {
    const v1::Layer& layer = model.layers(i);
    const std::string path = LayerPath(layer, i);
    if (layer.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ".name: must not be empty"));
    }
    if (!names.insert(layer.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".name: duplicate layer name \"", layer.name(), "\""));
    }
    if (layer.type() == "linear") {
      if (layer.in_features() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".in_features: must be > 0, got ", layer.in_features()));
      }
      if (layer.out_features() <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".out_features: must be > 0, got ", layer.out_features()));
      }
      if (width >= 0 && layer.in_features() != width) {
        if (last_linear >= 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ".in_features: ", layer.in_features(),
              " does not match the previous linear's out_features ", width, " (",
              LayerPath(model.layers(last_linear), last_linear), ")"));
        }
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".in_features: ", layer.in_features(),
                         " does not match the input's last dimension ", width));
      }
      for (const auto& kv : layer.placements()) {
        if (kv.first != "weight" && kv.first != "bias") {
          return absl::InvalidArgumentError(absl::StrCat(
              path, ".placements: unknown parameter \"", kv.first, "\"; known: weight, bias"));
        }
      }
      const bool bias = !layer.has_bias() || layer.bias();
      params->push_back({layer.name() + ".weight", {layer.in_features(), layer.out_features()}});
      auto w = layer.placements().find("weight");
      if (w != layer.placements().end()) {
        RETURN_IF_ERROR(ValidatePlacements(w->second.placements(), mesh, 2,
                                           path + ".placements.weight", "weight"));
        RETURN_IF_ERROR(CheckNoEmptyShards(w->second.placements(), mesh,
                                           {layer.in_features(), layer.out_features()},
                                           path + ".placements.weight", "weight"));
      }
      auto b = layer.placements().find("bias");
      if (b != layer.placements().end()) {
        if (!bias) {
          return absl::InvalidArgumentError(
              absl::StrCat(path, ".placements.bias: the layer has bias: false"));
        }
        RETURN_IF_ERROR(ValidatePlacements(b->second.placements(), mesh, 1,
                                           path + ".placements.bias", "bias"));
        RETURN_IF_ERROR(CheckNoEmptyShards(b->second.placements(), mesh, {layer.out_features()},
                                           path + ".placements.bias", "bias"));
      }
      if (bias) params->push_back({layer.name() + ".bias", {layer.out_features()}});
      width = layer.out_features();
      last_linear = i;
    } else if (layer.type() == "relu" || layer.type() == "gelu") {
      if (layer.in_features() != 0 || layer.out_features() != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ".", layer.in_features() != 0 ? "in_features" : "out_features",
            ": only linear layers take features (", layer.type(), " keeps the width)"));
      }
      if (layer.has_bias()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".bias: only linear layers have a bias"));
      }
      if (!layer.placements().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".placements: ", layer.type(), " has no parameters"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(path, ".type: unknown layer type \"",
                                                     layer.type(), "\"; known: linear, relu, gelu"));
    }
  }
  if (params->empty()) {
    return absl::InvalidArgumentError(
        "model.layers: the model has no linear layer, so nothing to train");
  }
  if (!model.loss().empty() && model.loss() != "mse") {
    return absl::InvalidArgumentError(
        absl::StrCat("model.loss: unknown loss \"", model.loss(), "\"; known: mse"));
  }
  *output_width = width;
  return absl::OkStatus();
}

// The default batch placement when the spec gives none: Shard(0) on a dim named dp.
google::protobuf::RepeatedPtrField<Placement> EffectiveDataPlacements(const JobSpec& spec) {
  if (spec.data().placements_size() > 0) return spec.data().placements();
  google::protobuf::RepeatedPtrField<Placement> out;
  for (int i = 0; i < spec.mesh().shape_size(); ++i) {
    Placement* p = out.Add();
    if (i < spec.mesh().dim_names_size() && spec.mesh().dim_names(i) == "dp") {
      p->set_kind(Placement::SHARD);
      p->set_axis(0);
    } else {
      p->set_kind(Placement::REPLICATE);
    }
  }
  return out;
}

absl::Status CheckPositiveShape(const std::vector<int64_t>& shape, const std::string& path) {
  if (shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is required for synthetic data"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, "[", i, "]: must be > 0, got ", shape[i]));
    }
  }
  return absl::OkStatus();
}

// Validation reports INVALID_ARGUMENT whatever the reader's code was: to SubmitJob, a spec that
// names a missing or unreadable file is an invalid argument.
absl::Status AsInvalid(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(context, ": ", status.message()));
}

// Reads an npy header for validation; errors name the field.
absl::StatusOr<std::vector<int64_t>> NpyShape(const std::string& file, const std::string& field) {
  if (file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": is required for source npy"));
  }
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", file, ": no such file"));
  }
  absl::StatusOr<NpyFile> npy = NpyFile::Open(file);
  if (!npy.ok()) return AsInvalid(npy.status(), field);
  if (npy->shape().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", file, ": is a scalar; expected [num_samples, ...]"));
  }
  return npy->shape();
}

// Data shapes and placements: the per-sample shape's last axis feeds the first linear, the
// label matches the model's output, and the batch divides evenly across the ranks it is
// sharded on. Sets *input_width for the model check.
absl::Status ValidateData(const JobSpec& spec, std::vector<int64_t>* sample_shape,
                          std::vector<int64_t>* label_shape) {
  const v1::Data& data = spec.data();
  if (data.source() == "npy") {
    ASSIGN_OR_RETURN(std::vector<int64_t> in, NpyShape(data.input(), "data.input"));
    ASSIGN_OR_RETURN(std::vector<int64_t> lb, NpyShape(data.label(), "data.label"));
    if (in[0] != lb[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.label: ", data.label(), " has ", lb[0], " samples but data.input ", data.input(),
          " has ", in[0]));
    }
    if (in[0] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("data.input: ", data.input(), " has no samples"));
    }
    sample_shape->assign(in.begin() + 1, in.end());
    label_shape->assign(lb.begin() + 1, lb.end());
    if (sample_shape->empty() || label_shape->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          sample_shape->empty() ? "data.input: " : "data.label: ",
          sample_shape->empty() ? data.input() : data.label(),
          ": is 1-D; expected [num_samples, features...]"));
    }
    // ResolveDataShapes may have filled these; they must agree with the files.
    if (data.sample_shape_size() > 0 && ToVector(data.sample_shape()) != *sample_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.sample_shape: ", ShapeString(ToVector(data.sample_shape())), " does not match ",
          data.input(), " samples of shape ", ShapeString(*sample_shape)));
    }
    if (data.label_shape_size() > 0 && ToVector(data.label_shape()) != *label_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.label_shape: ", ShapeString(ToVector(data.label_shape())), " does not match ",
          data.label(), " samples of shape ", ShapeString(*label_shape)));
    }
    if (data.num_samples() != 0 && data.num_samples() != in[0]) {
      return absl::InvalidArgumentError(absl::StrCat("data.num_samples: ", data.num_samples(),
                                                     " does not match ", data.input(), " (",
                                                     in[0], " samples)"));
    }
  } else if (data.source() == "synthetic") {
    if (!data.input().empty() || !data.label().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          data.input().empty() ? "data.label" : "data.input",
          ": only for source npy (synthetic data comes from the seeded generator)"));
    }
    *sample_shape = ToVector(data.sample_shape());
    *label_shape = ToVector(data.label_shape());
    RETURN_IF_ERROR(CheckPositiveShape(*sample_shape, "data.sample_shape"));
    RETURN_IF_ERROR(CheckPositiveShape(*label_shape, "data.label_shape"));
    if (data.num_samples() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.num_samples: must be > 0 for synthetic data, got ", data.num_samples()));
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("data.source: unknown source \"", data.source(), "\"; known: npy, synthetic"));
  }
  if (data.batch_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.batch_size: must be > 0, got ", data.batch_size()));
  }
  return absl::OkStatus();
}

absl::Status ValidateBatchPlacements(const JobSpec& spec, const std::vector<int64_t>& sample_shape,
                                     const std::vector<int64_t>& label_shape) {
  const google::protobuf::RepeatedPtrField<Placement> placements = EffectiveDataPlacements(spec);
  const int input_rank = 1 + static_cast<int>(sample_shape.size());
  const int label_rank = 1 + static_cast<int>(label_shape.size());
  RETURN_IF_ERROR(ValidatePlacements(placements, spec.mesh(), std::min(input_rank, label_rank),
                                     "data.placements", "a data batch"));
  // Uneven batch shards are fine (the last one takes the remainder), but every shard needs a
  // sample.
  const int64_t batch = spec.data().batch_size();
  const AxisSplit split = AxisSplits(placements, spec.mesh(), input_rank)[0];
  if (split.shards > batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.batch_size: ", batch, " is smaller than the ", split.shards,
        " shards the batch is split into over mesh dim(s) ", absl::StrJoin(split.dims, ", "),
        " (data.placements ", FormatPlacements(placements),
        "); every shard needs at least one sample"));
  }
  std::vector<int64_t> input_shape = {batch}, label = {batch};
  input_shape.insert(input_shape.end(), sample_shape.begin(), sample_shape.end());
  label.insert(label.end(), label_shape.begin(), label_shape.end());
  RETURN_IF_ERROR(CheckNoEmptyShards(placements, spec.mesh(), input_shape, "data.placements",
                                     "the input batch"));
  return CheckNoEmptyShards(placements, spec.mesh(), label, "data.placements", "the label batch");
}

// ---------------------------------------------------------------------------------------------
// Pipeline.

constexpr char kFThenB[] = "FThenB";
constexpr char kOneFOneB[] = "1F1B";
constexpr char kVpp[] = "VPP";

// "4 pipeline chunk(s) (pp 4 x virtual_stages 1)": what the chunk count is made of.
std::string ChunksString(const v1::Pipeline& pipeline, int64_t pp) {
  const int64_t virtual_stages = std::max(1, pipeline.virtual_stages());
  return absl::StrCat(pp * virtual_stages, " pipeline chunk(s) (", pipeline.dim(), " ", pp,
                      " x virtual_stages ", virtual_stages, ")");
}

// Each layer's parameter count (0 without parameters), capped so that no sum over the model can
// overflow whatever features a spec claims.
std::vector<int64_t> LayerParamCounts(const v1::Model& model) {
  const int64_t cap = (int64_t{1} << 61) / std::max(1, model.layers_size());
  std::vector<int64_t> counts;
  for (const v1::Layer& layer : model.layers()) {
    const int64_t in = layer.in_features(), out = layer.out_features();
    if (layer.type() != "linear" || in <= 0 || out <= 0) {
      counts.push_back(0);
      continue;
    }
    int64_t n = in > cap / out ? cap : in * out;
    if (!layer.has_bias() || layer.bias()) n = std::min(cap, n + std::min(out, cap));
    counts.push_back(n);
  }
  return counts;
}

// Splits `weights` (each > 0, at least `groups` of them) into `groups` contiguous non-empty
// groups with the smallest possible largest sum; returns each item's group. Ties go to the
// earliest groups: each is filled up to that bound while leaving an item for every later group.
std::vector<int> BalancedSplit(const std::vector<int64_t>& weights, int64_t groups) {
  auto groups_needed = [&](int64_t limit) {
    int64_t needed = 1, sum = 0;
    for (int64_t w : weights) {
      if (sum + w > limit) {
        ++needed;
        sum = 0;
      }
      sum += w;
    }
    return needed;
  };
  int64_t lo = 0, hi = 0;
  for (int64_t w : weights) {
    lo = std::max(lo, w);
    hi += w;
  }
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (groups_needed(mid) <= groups) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const int64_t n = static_cast<int64_t>(weights.size());
  std::vector<int> group(weights.size());
  int64_t g = 0, sum = 0, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (count > 0 && (sum + weights[i] > lo || n - i <= groups - 1 - g)) {
      ++g;
      sum = 0;
      count = 0;
    }
    sum += weights[i];
    ++count;
    group[i] = static_cast<int>(g);
  }
  return group;
}

// The chunk of each layer on a pipeline dim of size `pp`: the stages the layers give (a layer
// without one is in the previous layer's stage, the first layer's is 0), else a split by
// parameter count where a layer without parameters goes with the layer before it. Errors name
// the field.
absl::StatusOr<std::vector<int>> LayerChunks(const JobSpec& spec, int64_t pp) {
  const v1::Model& model = spec.model();
  const int64_t chunks = pp * std::max(1, spec.pipeline().virtual_stages());
  const std::vector<int64_t> counts = LayerParamCounts(model);
  std::vector<int> chunk(model.layers_size(), 0);
  const bool explicit_stages =
      std::any_of(model.layers().begin(), model.layers().end(),
                  [](const v1::Layer& layer) { return layer.has_stage(); });
  if (explicit_stages) {
    std::set<int64_t> with_params;
    for (int i = 0; i < model.layers_size(); ++i) {
      const v1::Layer& layer = model.layers(i);
      const int64_t previous = i == 0 ? 0 : chunk[i - 1];
      const int64_t stage = layer.has_stage() ? layer.stage() : previous;
      if (stage < 0 || stage >= chunks) {
        return absl::InvalidArgumentError(absl::StrCat(
            LayerPath(layer, i), ".stage: ", stage, " is out of range for ",
            ChunksString(spec.pipeline(), pp), ": stages are 0..", chunks - 1));
      }
      if (i > 0 && stage < previous) {
        return absl::InvalidArgumentError(absl::StrCat(
            LayerPath(layer, i), ".stage: ", stage, " comes after stage ", previous, " of ",
            LayerPath(model.layers(i - 1), i - 1),
            "; stages must not decrease along the model"));
      }
      chunk[i] = static_cast<int>(stage);
      if (counts[i] > 0) with_params.insert(stage);
    }
    for (int64_t c = 0; c < chunks; ++c) {
      if (with_params.count(c) > 0) continue;
      std::vector<std::string> layers;
      for (int i = 0; i < model.layers_size(); ++i) {
        if (chunk[i] == c) layers.push_back(model.layers(i).name());
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers: stage ", c, " has no layer with parameters (",
          layers.empty() ? "no layers" : absl::StrCat("only ", absl::StrJoin(layers, ", ")),
          "); with stages given, each of the ", ChunksString(spec.pipeline(), pp),
          " needs at least one linear layer"));
    }
    return chunk;
  }
  std::vector<int64_t> weights;
  for (int64_t n : counts) {
    if (n > 0) weights.push_back(n);
  }
  if (static_cast<int64_t>(weights.size()) < chunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers: ", weights.size(), " linear layer(s) cannot fill ",
        ChunksString(spec.pipeline(), pp),
        "; each chunk needs at least one layer with parameters (or give each layer a stage)"));
  }
  const std::vector<int> groups = BalancedSplit(weights, chunks);
  size_t next = 0;
  for (int i = 0; i < model.layers_size(); ++i) {
    if (counts[i] > 0) {
      chunk[i] = groups[next++];
    } else {
      chunk[i] = i == 0 ? 0 : chunk[i - 1];
    }
  }
  return chunk;
}

// Index of the pipeline dim in the mesh, or an error naming pipeline.dim.
absl::StatusOr<int> PipelineDimIndex(const JobSpec& spec) {
  const v1::Mesh& mesh = spec.mesh();
  auto it = std::find(mesh.dim_names().begin(), mesh.dim_names().end(), spec.pipeline().dim());
  if (it == mesh.dim_names().end() || mesh.dim_names_size() != mesh.shape_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.dim: the mesh has no dim named \"", spec.pipeline().dim(),
                     "\" (dims: ", MeshDimList(mesh), ")"));
  }
  return static_cast<int>(it - mesh.dim_names().begin());
}

// The pipeline block, the layers' stages and what a pipeline asks of placements and the batch.
// Runs after the model, data and batch placements have passed.
absl::Status ValidatePipeline(const JobSpec& spec, const std::vector<int64_t>& sample_shape) {
  const v1::Pipeline& pipeline = spec.pipeline();
  const v1::Model& model = spec.model();
  if (pipeline.dim().empty()) {
    if (!pipeline.schedule().empty() || pipeline.micro_batches() != 0 ||
        pipeline.virtual_stages() != 0) {
      return absl::InvalidArgumentError(
          "pipeline.dim: is required: name the mesh dim the stages are laid along");
    }
    for (int i = 0; i < model.layers_size(); ++i) {
      if (model.layers(i).has_stage()) {
        return absl::InvalidArgumentError(absl::StrCat(
            LayerPath(model.layers(i), i),
            ".stage: stages need a pipeline block (pipeline: {dim: ..., schedule: ...})"));
      }
    }
    return absl::OkStatus();
  }
  const v1::Mesh& mesh = spec.mesh();
  ASSIGN_OR_RETURN(const int dim, PipelineDimIndex(spec));
  const int64_t pp = mesh.shape(dim);
  const std::string& schedule = pipeline.schedule();
  if (schedule != kFThenB && schedule != kOneFOneB && schedule != kVpp) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.schedule: unknown schedule \"", schedule, "\"; known: ", kFThenB,
                     ", ", kOneFOneB, ", ", kVpp));
  }
  const int64_t micro_batches = pipeline.micro_batches();
  const int64_t virtual_stages = pipeline.virtual_stages();
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.micro_batches: must be >= 1, got ", micro_batches));
  }
  if (virtual_stages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.virtual_stages: must be >= 1, got ", virtual_stages));
  }
  if (schedule == kVpp && virtual_stages == 1) {
    return absl::InvalidArgumentError(
        "pipeline.virtual_stages: VPP needs virtual_stages > 1 (chunks per rank), got 1; "
        "with one chunk per rank use 1F1B");
  }
  if (schedule != kVpp && virtual_stages > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.virtual_stages: ", virtual_stages,
                     " chunks per rank need schedule VPP; ", schedule,
                     " runs one chunk per rank (virtual_stages 1)"));
  }
  if (schedule == kOneFOneB && micro_batches < pp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.micro_batches: 1F1B needs at least pp micro-batches (", pipeline.dim(), " ", pp,
        "), got ", micro_batches, "; use more micro-batches or FThenB"));
  }
  if (schedule == kVpp && micro_batches % pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.micro_batches: VPP needs a multiple of pp micro-batches (", pipeline.dim(), " ",
        pp, "), got ", micro_batches));
  }
  RETURN_IF_ERROR(LayerChunks(spec, pp).status());

  // A stage's parameters live on its own ranks only: nothing to shard or reduce along pp.
  const std::map<std::string, v1::ParallelizeConfig> entries(spec.parallelize().begin(),
                                                            spec.parallelize().end());
  for (const auto& [name, entry] : entries) {
    if (entry.dim() == pipeline.dim()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallelize.", name, ".dim: ", entry.dim(),
          " is the pipeline dim (pipeline.dim); tensor parallelism needs another mesh dim"));
    }
  }
  for (int i = 0; i < model.layers_size(); ++i) {
    const v1::Layer& layer = model.layers(i);
    for (const char* param : {"weight", "bias"}) {
      auto it = layer.placements().find(param);
      if (it == layer.placements().end() || it->second.placements_size() <= dim) continue;
      const Placement& p = it->second.placements(dim);
      if (p.kind() == Placement::REPLICATE) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          LayerPath(layer, i), ".placements.", param, "[", dim, "]: ", FormatPlacement(p),
          " on mesh dim ", pipeline.dim(), ", the pipeline dim: a parameter lives on its "
          "stage's ranks only, so it must be Replicate() there"));
    }
  }
  const google::protobuf::RepeatedPtrField<Placement> data = EffectiveDataPlacements(spec);
  if (data.size() > dim && data[dim].kind() != Placement::REPLICATE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.placements[", dim, "]: ", FormatPlacement(data[dim]), " on mesh dim ",
        pipeline.dim(), ", the pipeline dim: the batch must be Replicate() there (every "
        "micro-batch passes through every stage)"));
  }

  // Micro-batches: N // M samples each, the last one the remainder; each is then split like the
  // batch (over dp, say) and every piece needs a sample.
  const int64_t batch = spec.data().batch_size();
  if (batch < micro_batches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.batch_size: ", batch, " cannot be split into ", micro_batches,
        " micro-batches (pipeline.micro_batches) without leaving some empty"));
  }
  const int64_t smallest = batch / micro_batches;
  const AxisSplit split =
      AxisSplits(data, mesh, 1 + static_cast<int>(sample_shape.size()))[0];
  if (smallest < split.shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.batch_size: ", batch, " in ", micro_batches,
        " micro-batches (pipeline.micro_batches) gives micro-batches of ",
        batch % micro_batches == 0 ? "" : "as few as ", smallest, " sample(s), fewer than the ",
        split.shards, " shards each is split into over mesh dim(s) ",
        absl::StrJoin(split.dims, ", "), " (data.placements ", FormatPlacements(data),
        "); every shard of a micro-batch needs at least one sample"));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptimizer(const v1::Optimizer& opt) {
  if (opt.type() != "sgd" && opt.type() != "adamw") {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.type: unknown optimizer \"",
                                                   opt.type(), "\"; known: sgd, adamw"));
  }
  if (!(opt.lr() > 0) || !std::isfinite(opt.lr())) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.lr: must be a finite number > 0, got ", opt.lr()));
  }
  if (!(opt.weight_decay() >= 0) || !std::isfinite(opt.weight_decay())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.weight_decay: must be a finite number >= 0, got ", opt.weight_decay()));
  }
  if (opt.type() == "adamw") {
    if (opt.betas_size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.betas: adamw needs two values [beta1, beta2], got ", opt.betas_size()));
    }
    for (int i = 0; i < 2; ++i) {
      if (!(opt.betas(i) >= 0 && opt.betas(i) < 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("optimizer.betas[", i, "]: must be in [0, 1), got ", opt.betas(i)));
      }
    }
    if (!(opt.eps() >= 0) || !std::isfinite(opt.eps())) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.eps: must be a finite number >= 0, got ", opt.eps()));
    }
  } else if (opt.betas_size() > 0) {
    return absl::InvalidArgumentError("optimizer.betas: only adamw takes betas");
  }
  return absl::OkStatus();
}

absl::Status ValidateInitFrom(const std::string& file, const std::vector<ParamShape>& params) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("init_from: ", file, ": no such file"));
  }
  absl::StatusOr<SafetensorsFile> st = SafetensorsFile::Open(file);
  if (!st.ok()) return AsInvalid(st.status(), "init_from");
  for (const ParamShape& p : params) {
    const SafetensorsFile::Entry* e = st->Find(p.name);
    if (e == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("init_from: ", file, ": has no tensor ",
                                                     p.name, " (shape ", ShapeString(p.shape),
                                                     ") that the model needs"));
    }
    if (e->dtype != "F32") {
      return absl::InvalidArgumentError(absl::StrCat("init_from: ", file, ": ", p.name,
                                                     " has dtype ", e->dtype, "; expected F32"));
    }
    if (e->shape != p.shape) {
      return absl::InvalidArgumentError(absl::StrCat("init_from: ", file, ": ", p.name,
                                                     " has shape ", ShapeString(e->shape),
                                                     ", the model needs ", ShapeString(p.shape)));
    }
  }
  return absl::OkStatus();
}

// The folder init_from names when it is a checkpoint (a directory): the step folder itself when
// it holds an index, else the newest committed step in it. Empty for a file.
absl::StatusOr<std::string> InitFromCheckpointFolder(const std::string& init_from) {
  std::error_code ec;
  if (!std::filesystem::is_directory(init_from, ec)) return std::string();
  absl::StatusOr<std::string> latest = checkpoint::ResolveStepDir(init_from);
  if (absl::IsNotFound(latest.status())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "init_from: ", init_from, " is a folder without a committed checkpoint (no step-<N> "
        "folder with a valid index.json)"));
  }
  if (!latest.ok()) return AsInvalid(latest.status(), "init_from");
  return *latest;
}

// The checkpoint's tensors cover what the model needs with the same shapes.
absl::Status CheckCheckpointTensors(const checkpoint::Index& index, const std::string& folder,
                                    const std::vector<ParamShape>& needed,
                                    const std::string& field) {
  for (const ParamShape& p : needed) {
    auto it = index.tensors.find(p.name);
    if (it == index.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": checkpoint ", folder,
                                                     " has no tensor ", p.name, " (shape ",
                                                     ShapeString(p.shape),
                                                     ") that the job needs"));
    }
    if (it->second.global_shape != p.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": checkpoint ", folder, ": ", p.name, " has shape ",
          ShapeString(it->second.global_shape), ", the model needs ", ShapeString(p.shape)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateCheckpointing(const JobSpec& spec, const std::vector<ParamShape>& params) {
  const v1::Checkpoint& ckpt = spec.checkpoint();
  if (!ckpt.dir().empty()) {
    if (!std::filesystem::path(ckpt.dir()).is_absolute()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint.dir: \"", ckpt.dir(), "\" must be absolute (weftctl resolves a relative "
          "one against the spec's folder)"));
    }
    if (ckpt.every() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint.every: must be >= 1, got ", ckpt.every()));
    }
    if (ckpt.keep() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint.keep: must be >= 1, got ", ckpt.keep()));
    }
  } else if (ckpt.every() != 0 || ckpt.keep() != 0) {
    return absl::InvalidArgumentError("checkpoint.dir: is required with checkpoint.every or keep");
  }
  if (spec.train().resume()) {
    if (ckpt.dir().empty()) {
      return absl::InvalidArgumentError(
          "train.resume: needs checkpoint.dir, the folder whose newest checkpoint it resumes from");
    }
    absl::StatusOr<std::string> latest = checkpoint::FindLatestReadOnly(ckpt.dir());
    if (absl::IsNotFound(latest.status())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train.resume: checkpoint.dir ", ckpt.dir(), " holds no committed checkpoint"));
    }
    if (!latest.ok()) return AsInvalid(latest.status(), "train.resume");
    absl::StatusOr<checkpoint::CheckpointReader> reader = checkpoint::CheckpointReader::Open(*latest);
    if (!reader.ok()) return AsInvalid(reader.status(), "train.resume");
    const checkpoint::Index& index = reader->index();
    if (index.step >= spec.train().steps()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train.steps: ", spec.train().steps(), " leaves nothing to resume: the newest checkpoint ",
          *latest, " is at step ", index.step));
    }
    std::vector<ParamShape> needed = params;
    for (const ParamShape& p : params) {
      for (const std::string& state : OptimizerStateNames(spec.optimizer().type())) {
        needed.push_back({CheckpointStateName(p.name, spec.optimizer().type(), state), p.shape});
      }
    }
    RETURN_IF_ERROR(CheckCheckpointTensors(index, *latest, needed, "train.resume"));
  }
  if (!spec.init_from().empty() && !spec.train().resume()) {
    ASSIGN_OR_RETURN(std::string folder, InitFromCheckpointFolder(spec.init_from()));
    if (!folder.empty()) {
      absl::StatusOr<checkpoint::CheckpointReader> reader =
          checkpoint::CheckpointReader::Open(folder);
      if (!reader.ok()) return AsInvalid(reader.status(), "init_from");
      RETURN_IF_ERROR(CheckCheckpointTensors(reader->index(), folder, params, "init_from"));
    }
  }
  return absl::OkStatus();
}

constexpr char kColWise[] = "ColWiseParallel";
constexpr char kRowWise[] = "RowWiseParallel";

Placement MakeShard(int axis) {
  Placement p;
  p.set_kind(Placement::SHARD);
  p.set_axis(axis);
  return p;
}

Placement MakeReplicate() {
  Placement p;
  p.set_kind(Placement::REPLICATE);
  return p;
}

// Equal on a tensor of `rank` axes: Shard(-1) of a weight is Shard(1).
bool SamePlacement(const Placement& a, const Placement& b, int rank) {
  if (a.kind() == Placement::SHARD && b.kind() == Placement::SHARD) {
    const int axis_a = a.axis() < 0 ? a.axis() + rank : a.axis();
    const int axis_b = b.axis() < 0 ? b.axis() + rank : b.axis();
    return axis_a == axis_b;
  }
  return FormatPlacement(a) == FormatPlacement(b);
}

// Writes each parallelize entry's placements into the layers, in entry-name then layer-name
// order (proto maps have none). A placement the user wrote on the same dim must agree; one the
// user left implicit (a named map's unnamed dim, or a parameter without placements) is set.
absl::Status ExpandParallelize(JobSpec* spec, const ImplicitDims& implicit) {
  if (spec->parallelize().empty()) return absl::OkStatus();
  const v1::Mesh& mesh = spec->mesh();
  RETURN_IF_ERROR(ValidateMesh(mesh));
  const int rank = mesh.shape_size();
  // Who set each (layer, parameter, dim) so far: "" for the implicit default, else the
  // parallelize entry's description; absent means the user wrote it.
  std::map<std::tuple<std::string, std::string, int>, std::string> setter;
  for (const auto& key : implicit) setter[key] = "";

  const std::map<std::string, v1::ParallelizeConfig> entries(spec->parallelize().begin(),
                                                            spec->parallelize().end());
  for (const auto& [entry_name, entry] : entries) {
    const std::string path = absl::StrCat("parallelize.", entry_name);
    auto dim_it = std::find(mesh.dim_names().begin(), mesh.dim_names().end(), entry.dim());
    if (dim_it == mesh.dim_names().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".dim: the mesh has no dim named \"", entry.dim(), "\" (dims: ",
                       MeshDimList(mesh), ")"));
    }
    const int dim = static_cast<int>(dim_it - mesh.dim_names().begin());
    if (entry.plan().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".plan: must name at least one layer"));
    }
    const std::map<std::string, std::string> plan(entry.plan().begin(), entry.plan().end());
    for (const auto& [layer_name, style] : plan) {
      const std::string layer_path = absl::StrCat(path, ".plan.", layer_name);
      v1::Layer* layer = nullptr;
      int index = -1;
      std::vector<std::string> names;
      for (int i = 0; i < spec->model().layers_size(); ++i) {
        names.push_back(spec->model().layers(i).name());
        if (layer == nullptr && spec->model().layers(i).name() == layer_name) {
          layer = spec->mutable_model()->mutable_layers(i);
          index = i;
        }
      }
      if (layer == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(layer_path, ": the model has no layer named \"", layer_name,
                         "\" (layers: ", absl::StrJoin(names, ", "), ")"));
      }
      std::vector<std::pair<std::string, Placement>> targets;
      if (style == kColWise) {
        targets = {{"weight", MakeShard(1)}, {"bias", MakeShard(0)}};
      } else if (style == kRowWise) {
        targets = {{"weight", MakeShard(0)}, {"bias", MakeReplicate()}};
      } else {
        return absl::InvalidArgumentError(absl::StrCat(layer_path, ": unknown style \"", style,
                                                       "\"; known: ", kColWise, ", ", kRowWise));
      }
      if (layer->type() != "linear") {
        return absl::InvalidArgumentError(absl::StrCat(
            layer_path, ": ", style, " applies to linear layers only; ", LayerPath(*layer, index),
            " is a ", layer->type().empty() ? "layer without a type" : layer->type() + " layer"));
      }
      const bool has_bias = !layer->has_bias() || layer->bias();
      const std::string by = absl::StrCat(path, " (", style, " on ", entry.dim(), ")");
      for (const auto& [param, target] : targets) {
        if (param == "bias" && !has_bias) continue;
        const std::string param_path =
            absl::StrCat(LayerPath(*layer, index), ".placements.", param);
        auto& lists = *layer->mutable_placements();
        if (lists.count(param) == 0) {
          v1::PlacementList& list = lists[param];
          for (int i = 0; i < rank; ++i) {
            *list.add_placements() = MakeReplicate();
            setter[{layer_name, param, i}] = "";
          }
        }
        auto& list = *lists[param].mutable_placements();
        if (list.size() != rank) {
          return absl::InvalidArgumentError(absl::StrCat(
              param_path, ": ", list.size(), " placement(s) ", FormatPlacements(list),
              " for a mesh of ", rank, " dim(s); give one per mesh dim (", MeshDimList(mesh),
              ") or leave it to ", path));
        }
        const auto key = std::make_tuple(layer_name, param, dim);
        if (SamePlacement(list[dim], target, param == "weight" ? 2 : 1)) {
          if (setter.count(key) > 0) setter[key] = by;
          continue;
        }
        auto set = setter.find(key);
        if (set == setter.end() || !set->second.empty()) {
          const std::string other =
              set == setter.end() ? param_path : set->second;
          return absl::InvalidArgumentError(absl::StrCat(
              layer_path, ": ", style, " puts ", layer_name, ".", param, " at ",
              FormatPlacement(target), " on mesh dim ", entry.dim(), ", but ", other, " gives ",
              FormatPlacement(list[dim]), " there"));
        }
        *list.Mutable(dim) = target;
        set->second = by;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyParallelize(JobSpec* spec) {
  DefaultMeshDimNames(spec->mutable_mesh());
  return ExpandParallelize(spec, {});
}

void ApplyJobSpecDefaults(JobSpec* spec) {
  v1::Mesh* mesh = spec->mutable_mesh();
  DefaultMeshDimNames(mesh);
  v1::Model* model = spec->mutable_model();
  for (v1::Layer& layer : *model->mutable_layers()) {
    if (layer.type() == "linear" && !layer.has_bias()) layer.set_bias(true);
  }
  if (model->loss().empty()) model->set_loss("mse");
  v1::Data* data = spec->mutable_data();
  if (data->placements_size() == 0 && mesh->dim_names_size() == mesh->shape_size()) {
    *data->mutable_placements() = EffectiveDataPlacements(*spec);
  }
  v1::Optimizer* opt = spec->mutable_optimizer();
  if (opt->type() == "adamw" && opt->betas_size() == 0) {
    opt->add_betas(0.9);
    opt->add_betas(0.999);
  }
  if (spec->device().empty()) spec->set_device("cpu");
  if (spec->precision().empty()) spec->set_precision("f32");
  if (!spec->checkpoint().dir().empty()) {
    v1::Checkpoint* checkpoint = spec->mutable_checkpoint();
    if (checkpoint->every() == 0) checkpoint->set_every(kDefaultCheckpointEvery);
    if (checkpoint->keep() == 0) checkpoint->set_keep(kDefaultCheckpointKeep);
  }
  // Pipeline counts default to 1; with stages given, a layer without one is in the previous
  // layer's stage (the first layer's is 0), so the planner reads a stage on every layer.
  if (!spec->pipeline().dim().empty()) {
    v1::Pipeline* pipeline = spec->mutable_pipeline();
    if (pipeline->micro_batches() == 0) pipeline->set_micro_batches(1);
    if (pipeline->virtual_stages() == 0) pipeline->set_virtual_stages(1);
    const bool any_stage = std::any_of(model->layers().begin(), model->layers().end(),
                                       [](const v1::Layer& layer) { return layer.has_stage(); });
    if (any_stage) {
      int32_t previous = 0;
      for (v1::Layer& layer : *model->mutable_layers()) {
        if (!layer.has_stage()) layer.set_stage(previous);
        previous = layer.stage();
      }
    }
  }
}

absl::StatusOr<JobSpec> ParseJobSpecYaml(absl::string_view yaml, const std::string& base_dir) {
  JobSpec spec;
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    RETURN_IF_ERROR(ParseRoot(root, base_dir, &spec));
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

absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a job spec"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(path, ": read error"));
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) abs = path;
  absl::StatusOr<JobSpec> spec = ParseJobSpecYaml(text.str(), abs.parent_path().string());
  if (!spec.ok()) return Annotate(spec.status(), path);
  return spec;
}

absl::Status ValidateJobSpec(const JobSpec& submitted) {
  // A spec that came over gRPC may leave the documented defaults implicit.
  JobSpec spec = submitted;
  ApplyJobSpecDefaults(&spec);
  if (spec.name().empty()) {
    return absl::InvalidArgumentError("name: must not be empty");
  }
  RETURN_IF_ERROR(ValidateMesh(spec.mesh()));
  RETURN_IF_ERROR(ApplyParallelize(&spec));
  std::vector<int64_t> sample_shape, label_shape;
  RETURN_IF_ERROR(ValidateData(spec, &sample_shape, &label_shape));
  int64_t output_width = -1;
  std::vector<ParamShape> params;
  RETURN_IF_ERROR(ValidateModel(spec.model(), spec.mesh(), sample_shape.back(), &output_width,
                                &params));
  std::vector<int64_t> expected_label(sample_shape.begin(), sample_shape.end() - 1);
  expected_label.push_back(output_width);
  if (label_shape != expected_label) {
    const std::string field = spec.data().source() == "npy" ? "data.label" : "data.label_shape";
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": samples of shape ", ShapeString(label_shape),
        " do not match the model's output ", ShapeString(expected_label), " (the last layer gives ",
        output_width, " features for inputs of shape ", ShapeString(sample_shape), ")"));
  }
  RETURN_IF_ERROR(ValidateBatchPlacements(spec, sample_shape, label_shape));
  RETURN_IF_ERROR(ValidatePipeline(spec, sample_shape));
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  if (spec.train().steps() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train.steps: must be > 0, got ", spec.train().steps()));
  }
  RETURN_IF_ERROR(ValidateCheckpointing(spec, params));
  if (!spec.init_from().empty() && !spec.train().resume()) {
    std::error_code ec;
    if (!std::filesystem::is_directory(spec.init_from(), ec)) {
      RETURN_IF_ERROR(ValidateInitFrom(spec.init_from(), params));
    }
  }
  if (!spec.device().empty() && spec.device() != "cpu" && spec.device() != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("device: unknown device \"", spec.device(), "\"; known: cpu, cuda"));
  }
  if (!spec.precision().empty() && spec.precision() != "f32" && spec.precision() != "bf16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "precision: unknown precision \"", spec.precision(), "\"; known: f32, bf16"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> PipelineLayerChunks(const JobSpec& spec) {
  if (spec.pipeline().dim().empty()) {
    return absl::InvalidArgumentError("pipeline.dim: the spec has no pipeline");
  }
  ASSIGN_OR_RETURN(const int dim, PipelineDimIndex(spec));
  if (spec.mesh().shape(dim) <= 0 || spec.mesh().shape(dim) > kMaxWorldSize ||
      spec.pipeline().virtual_stages() < 0) {
    return absl::InvalidArgumentError("pipeline: run ValidateJobSpec first");
  }
  return LayerChunks(spec, spec.mesh().shape(dim));
}

absl::Status PrepareJobSpec(JobSpec* spec) {
  ApplyJobSpecDefaults(spec);
  RETURN_IF_ERROR(ApplyParallelize(spec));
  RETURN_IF_ERROR(ResolveDataShapes(spec));
  return ValidateJobSpec(*spec);
}

absl::Status ResolveDataShapes(JobSpec* spec) {
  v1::Data* data = spec->mutable_data();
  if (data->source() != "npy") return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<int64_t> in, NpyShape(data->input(), "data.input"));
  ASSIGN_OR_RETURN(std::vector<int64_t> lb, NpyShape(data->label(), "data.label"));
  data->clear_sample_shape();
  data->clear_label_shape();
  for (size_t i = 1; i < in.size(); ++i) data->add_sample_shape(in[i]);
  for (size_t i = 1; i < lb.size(); ++i) data->add_label_shape(lb[i]);
  data->set_num_samples(in[0]);
  return absl::OkStatus();
}

absl::StatusOr<v1::Placement> ParsePlacement(absl::string_view text) {
  const absl::string_view original = text;
  text = absl::StripAsciiWhitespace(text);
  auto invalid = [&]() {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid placement \"", original,
        "\"; expected Replicate(), Shard(axis), Partial(), Partial(sum) or Partial(avg)"));
  };
  const size_t open = text.find('(');
  if (text.empty() || open == absl::string_view::npos || text.back() != ')') return invalid();
  const absl::string_view kind = absl::StripAsciiWhitespace(text.substr(0, open));
  const absl::string_view arg =
      absl::StripAsciiWhitespace(text.substr(open + 1, text.size() - open - 2));
  v1::Placement p;
  if (kind == "Replicate") {
    if (!arg.empty()) return invalid();
    p.set_kind(v1::Placement::REPLICATE);
  } else if (kind == "Shard") {
    int32_t axis;
    if (!absl::SimpleAtoi(arg, &axis)) return invalid();
    p.set_kind(v1::Placement::SHARD);
    p.set_axis(axis);
  } else if (kind == "Partial") {
    p.set_kind(v1::Placement::PARTIAL);
    if (arg.empty() || arg == "sum") {
      p.set_reduce(v1::Placement::SUM);
    } else if (arg == "avg") {
      p.set_reduce(v1::Placement::AVG);
    } else {
      return invalid();
    }
  } else {
    return invalid();
  }
  return p;
}

std::string FormatPlacement(const v1::Placement& placement) {
  // The spelling is dist_attr's; only a proto can lack a kind.
  absl::StatusOr<weft::Placement> p = weft::Placement::FromProto(placement);
  return p.ok() ? p->ToString() : "Unspecified()";
}

std::string FormatPlacements(const google::protobuf::RepeatedPtrField<v1::Placement>& placements) {
  std::vector<std::string> parts;
  for (const v1::Placement& p : placements) parts.push_back(FormatPlacement(p));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

std::vector<std::string> OptimizerStateNames(const std::string& optimizer) {
  if (optimizer == "adamw") return {"m", "v"};
  return {};
}

std::string CheckpointStateName(const std::string& param, const std::string& optimizer,
                                const std::string& state) {
  return absl::StrCat(param, "/", optimizer, ".", state);
}

absl::StatusOr<CheckpointLoad> ResolveCheckpointLoad(const JobSpec& spec) {
  CheckpointLoad load;
  if (spec.train().resume()) {
    if (spec.checkpoint().dir().empty()) {
      return absl::InvalidArgumentError("train.resume: needs checkpoint.dir");
    }
    absl::StatusOr<std::string> latest = checkpoint::FindLatest(spec.checkpoint().dir());
    if (!latest.ok()) return Annotate(latest.status(), "train.resume");
    absl::StatusOr<checkpoint::CheckpointReader> reader =
        checkpoint::CheckpointReader::Open(*latest);
    if (!reader.ok()) return Annotate(reader.status(), "train.resume");
    load.step = reader->index().step;
    load.step_dir = *latest;
    load.optimizer_states = true;
    return load;
  }
  if (!spec.init_from().empty()) {
    ASSIGN_OR_RETURN(load.step_dir, InitFromCheckpointFolder(spec.init_from()));
  }
  return load;
}

int64_t WorldSize(const JobSpec& spec) {
  int64_t world = 1;
  for (int64_t d : spec.mesh().shape()) {
    if (d <= 0 || d > kMaxWorldSize || world * d > kMaxWorldSize) return 0;
    world *= d;
  }
  return world;
}

}  // namespace weft
