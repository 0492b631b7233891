#include "coordinator/planner/propagate.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace weft::planner {
namespace {

absl::StatusOr<DistAttr> AttrFromProto(const Mesh& mesh,
                                       const google::protobuf::RepeatedPtrField<v1::Placement>& list,
                                       int ndim, const std::string& what) {
  std::vector<Placement> placements;
  for (const v1::Placement& p : list) {
    absl::StatusOr<Placement> placement = Placement::FromProto(p);
    if (!placement.ok()) return Annotate(placement.status(), what);
    placements.push_back(*placement);
  }
  absl::StatusOr<DistAttr> attr = DistAttr::Create(mesh, std::move(placements), ndim);
  if (!attr.ok()) return Annotate(attr.status(), what);
  return attr;
}

}  // namespace

absl::StatusOr<DistAttr> BatchAttr(const v1::JobSpec& spec, const Mesh& mesh, int ndim) {
  if (spec.data().placements_size() > 0) {
    return AttrFromProto(mesh, spec.data().placements(), ndim, "data.placements");
  }
  DistAttr attr = DistAttr::Replicated(mesh);
  if (std::optional<int> dp = mesh.FindDim("dp")) attr = attr.With(*dp, Placement::Shard(0));
  return attr;
}

int AppendReshard(Graph* g, int id, const DistAttr& target, Phase phase,
                  const std::string& layer) {
  if (g->tensors[id].dist && *g->tensors[id].dist == target) return id;
  Tensor t = g->tensors[id];
  const std::string from = t.dist ? t.dist->ToString() : "[unplaced]";
  t.dist = target;
  int out = g->AddTensor(std::move(t));
  Op op;
  op.type = "reshard";
  op.inputs = {id};
  op.outputs = {out};
  op.layer = layer;
  op.phase = phase;
  op.comment = absl::StrCat(g->tensors[id].name, ": ", from, "->", target.ToString());
  g->ops.push_back(std::move(op));
  return out;
}

absl::Status AppendPlacedOp(const RuleRegistry& registry, Graph* g, Op op) {
  ASSIGN_OR_RETURN(SpmdDecision decision, InferSpmd(registry, *g, op));
  for (size_t i = 0; i < op.inputs.size(); ++i) {
    op.inputs[i] = AppendReshard(g, op.inputs[i], decision.inputs[i], op.phase, op.layer);
  }
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    g->tensors[op.outputs[i]].dist = decision.outputs[i];
  }
  g->ops.push_back(std::move(op));
  return absl::OkStatus();
}

absl::Status PlaceParameters(const v1::JobSpec& spec, Graph* graph) {
  Graph& g = *graph;
  // Parameters: the layer's placements by parameter kind.
  std::map<std::string, const v1::Layer*> layers;
  for (const v1::Layer& layer : spec.model().layers()) layers[layer.name()] = &layer;
  for (int id : g.params) {
    Tensor& t = g.tensors[id];
    const std::string kind = t.name.substr(t.name.rfind('.') + 1);  // weight | bias
    auto layer = layers.find(t.layer);
    const v1::Layer* spec_layer = layer == layers.end() ? nullptr : layer->second;
    if (spec_layer != nullptr) {
      for (const auto& [key, unused] : spec_layer->placements()) {
        if (key != "weight" && key != "bias") {
          return absl::InvalidArgumentError(absl::StrCat(
              "layer ", t.layer, ": placements has unknown parameter \"", key, "\""));
        }
      }
    }
    if (spec_layer != nullptr && spec_layer->placements().count(kind) > 0) {
      ASSIGN_OR_RETURN(t.dist, AttrFromProto(g.mesh, spec_layer->placements().at(kind).placements(),
                                             static_cast<int>(t.shape.size()),
                                             absl::StrCat("layer ", t.layer, " ", t.name)));
    } else {
      t.dist = DistAttr::Replicated(g.mesh);
    }
  }
  return absl::OkStatus();
}

absl::Status PlaceOps(const RuleRegistry& registry, Graph* g) {
  std::vector<Op> ops = std::move(g->ops);
  g->ops.clear();
  for (Op& op : ops) {
    if (op.type == "load_input" || op.type == "load_label") {
      g->ops.push_back(std::move(op));
      continue;
    }
    RETURN_IF_ERROR(AppendPlacedOp(registry, g, std::move(op)));
  }
  return absl::OkStatus();
}

absl::StatusOr<Graph> Propagate(const v1::JobSpec& spec, const RuleRegistry& registry, Graph g) {
  RETURN_IF_ERROR(PlaceParameters(spec, &g));
  ASSIGN_OR_RETURN(g.tensors[g.input].dist,
                   BatchAttr(spec, g.mesh, static_cast<int>(g.tensors[g.input].shape.size())));
  ASSIGN_OR_RETURN(g.tensors[g.label].dist,
                   BatchAttr(spec, g.mesh, static_cast<int>(g.tensors[g.label].shape.size())));

  RETURN_IF_ERROR(PlaceOps(registry, &g));
  g.loss = AppendReshard(&g, g.loss, DistAttr::Replicated(g.mesh), Phase::kForward, "");
  return g;
}

}  // namespace weft::planner
