#include "common/jobspec/parallelize.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/field_path.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/placements.h"
#include "common/jobspec/transformer_config.h"
#include "common/status.h"

namespace weft {
namespace {

using v1::JobSpec;
using v1::Placement;

constexpr char kColWise[] = "ColWiseParallel";
constexpr char kRowWise[] = "RowWiseParallel";
constexpr char kMegatron[] = "megatron";

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

// A named plan (preset) or sequence_parallel: megatron, on a transformer, once per model, with
// no per-layer styles beside it. The planner applies it from the graph's parameter names.
// `megatron_entry` is the entry that applied it so far ("" for none).
absl::Status CheckPreset(const JobSpec& spec, const std::string& entry_name,
                         const v1::ParallelizeConfig& entry, std::string* megatron_entry) {
  const std::string path = absl::StrCat("parallelize.", entry_name);
  if (entry.preset().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".sequence_parallel: only with plan: megatron (per-layer styles have no "
        "sequence-parallel regions)"));
  }
  if (entry.preset() != kMegatron) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".plan: unknown plan \"", entry.preset(), "\"; known: ", kMegatron,
                     ", or a mapping {layer: ", kColWise, " | ", kRowWise, "}"));
  }
  if (!entry.plan().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".plan: megatron and per-layer styles together; give one or the other"));
  }
  if (spec.model().arch().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".plan: megatron needs a transformer (model.arch: ", KnownArchs(),
        "); a layers model names its layers: {layer: ", kColWise, " | ", kRowWise, "}"));
  }
  if (!megatron_entry->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".plan: megatron again; parallelize.", *megatron_entry,
        " already applies it (on mesh dim ", spec.parallelize().at(*megatron_entry).dim(),
        "): a model takes one tensor-parallel plan"));
  }
  *megatron_entry = entry_name;
  return absl::OkStatus();
}

}  // namespace

// Each entry's placements are written in entry-name then layer-name order (proto maps have none).
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
  std::string megatron_entry;
  for (const auto& [entry_name, entry] : entries) {
    const std::string path = absl::StrCat("parallelize.", entry_name);
    auto dim_it = std::find(mesh.dim_names().begin(), mesh.dim_names().end(), entry.dim());
    if (dim_it == mesh.dim_names().end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".dim: the mesh has no dim named \"", entry.dim(), "\" (dims: ",
                       MeshDimList(mesh), ")"));
    }
    const int dim = static_cast<int>(dim_it - mesh.dim_names().begin());
    // A named plan is left to the planner, which applies it from the graph's parameter names.
    if (!entry.preset().empty() || entry.sequence_parallel()) {
      RETURN_IF_ERROR(CheckPreset(*spec, entry_name, entry, &megatron_entry));
      continue;
    }
    if (!spec->model().arch().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ".plan: per-layer styles name layers of model.layers; a transformer (model.arch ",
          spec->model().arch(), ") takes plan: megatron, or model.placements by parameter "
          "name pattern"));
    }
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

absl::Status ApplyParallelize(JobSpec* spec) {
  DefaultMeshDimNames(spec->mutable_mesh());
  return ExpandParallelize(spec, {});
}

}  // namespace weft
