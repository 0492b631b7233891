#include "coordinator/planner/spmd.h"

#include <limits>
#include <tuple>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft::planner {
namespace {

// How much communication an output placement still owes downstream, for tie-breaks.
int Debt(const Placement& p) { return p.is_replicate() ? 0 : p.is_shard() ? 1 : 2; }

std::string StrategyKey(const DimStrategy& s) {
  return absl::StrCat(FormatPlacements(s.inputs), "->", FormatPlacements(s.outputs));
}

}  // namespace

absl::Status RuleRegistry::Register(const std::string& op_type, OpRule rule) {
  if (!rule.strategies) {
    return absl::InvalidArgumentError(absl::StrCat("rule for op ", op_type, " has no strategies"));
  }
  if (!rules_.emplace(op_type, std::move(rule)).second) {
    return absl::AlreadyExistsError(absl::StrCat("a rule for op ", op_type, " is registered twice"));
  }
  return absl::OkStatus();
}

const OpRule* RuleRegistry::Find(absl::string_view op_type) const {
  auto it = rules_.find(op_type);
  return it == rules_.end() ? nullptr : &it->second;
}

std::vector<std::string> RuleRegistry::OpTypes() const {
  std::vector<std::string> types;
  for (const auto& [type, rule] : rules_) types.push_back(type);
  return types;
}

std::optional<double> SearchMoveCost(const Placement& from, const Placement& to, int64_t k,
                                     int64_t local_bytes) {
  if (from == to) return 0.0;
  double bytes = static_cast<double>(local_bytes);
  if (to.is_replicate()) {
    if (from.is_shard()) return (k - 1) * bytes;                // all-gather
    if (from.is_partial()) return 2.0 * (k - 1) / k * bytes;   // ring all-reduce
  }
  if (to.is_shard()) {
    if (from.is_replicate()) return 0.0;                         // local slice
    if (from.is_shard()) return static_cast<double>(k - 1) / k * bytes;  // all-to-all
  }
  // Partial(sum) <-> Partial(avg) is a local scale.
  if (to.is_partial() && from.is_partial()) return 0.0;
  // Partial->Shard (reduce-scatter) is cheaper than Partial->Replicate locally but changes the
  // sharding downstream ops see, which a greedy per-op search cannot price; it is reserved for
  // explicit targets (optimizer). Replicate->Partial is free but only moves the reduction
  // downstream, so the search never makes it.
  return std::nullopt;
}

std::string DescribeInputs(const Graph& g, const Op& op) {
  std::vector<std::string> parts;
  for (int id : op.inputs) {
    const Tensor& t = g.tensors[id];
    parts.push_back(absl::StrCat(t.name, " ", t.dist ? t.dist->ToString() : "[unplaced]"));
  }
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<SpmdDecision> InferSpmd(const RuleRegistry& registry, const Graph& g,
                                       const Op& op) {
  const OpRule* rule = registry.Find(op.type);
  if (rule == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no SPMD rule for ", OpLabel(op),
                                                   " with inputs ", DescribeInputs(g, op)));
  }
  OpSignature sig;
  sig.op = &op;
  for (int id : op.inputs) {
    if (!g.tensors[id].dist) {
      return absl::InternalError(absl::StrCat(OpLabel(op), ": input ", g.tensors[id].name,
                                              " has no placement yet"));
    }
    sig.input_shapes.push_back(g.tensors[id].shape);
  }
  for (int id : op.outputs) sig.output_shapes.push_back(g.tensors[id].shape);
  absl::StatusOr<std::vector<DimStrategy>> strategies = rule->strategies(sig);
  if (!strategies.ok()) {
    return absl::Status(strategies.status().code(),
                        absl::StrCat(OpLabel(op), " with inputs ", DescribeInputs(g, op), ": ",
                                     strategies.status().message()));
  }

  const Mesh& mesh = g.mesh;
  SpmdDecision decision;
  for (int id : op.inputs) decision.inputs.push_back(*g.tensors[id].dist);
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    decision.outputs.push_back(DistAttr::Replicated(mesh));
  }
  for (int d = 0; d < mesh.ndim(); ++d) {
    const DimStrategy* best = nullptr;
    std::tuple<double, int, int, std::string> best_key;
    for (const DimStrategy& s : *strategies) {
      if (s.inputs.size() != op.inputs.size() || s.outputs.size() != op.outputs.size()) {
        return absl::InternalError(absl::StrCat("rule for ", OpLabel(op),
                                                " returned a strategy of the wrong arity"));
      }
      double cost = 0;
      int moves = 0;
      bool reachable = true;
      for (size_t i = 0; i < op.inputs.size() && reachable; ++i) {
        const DistAttr& cur = *g.tensors[op.inputs[i]].dist;
        const bool in_place = absl::c_linear_search(rule->updates_in_place, static_cast<int>(i));
        if (in_place && cur.placement(d) != s.inputs[i]) {
          reachable = false;
          break;
        }
        int64_t local_bytes = 4 * cur.MaxLocalElements(g.tensors[op.inputs[i]].shape);
        std::optional<double> c =
            SearchMoveCost(cur.placement(d), s.inputs[i], mesh.dim_size(d), local_bytes);
        if (!c && !rule->updates_in_place.empty() && cur.placement(d).is_partial() &&
            s.inputs[i].is_shard()) {
          // A reduce-scatter; safe here because an update op has no downstream readers.
          c = static_cast<double>(mesh.dim_size(d) - 1) / mesh.dim_size(d) * local_bytes;
        }
        if (!c) {
          reachable = false;
          break;
        }
        cost += *c;
        moves += cur.placement(d) != s.inputs[i];
      }
      if (!reachable) continue;
      int debt = 0;
      for (const Placement& p : s.outputs) debt += Debt(p);
      auto key = std::make_tuple(cost, moves, debt, StrategyKey(s));
      if (best == nullptr || key < best_key) {
        best = &s;
        best_key = key;
      }
    }
    if (best == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no SPMD strategy for ", OpLabel(op), " on mesh dim ", mesh.dim_name(d),
          " with inputs ", DescribeInputs(g, op),
          rule->updates_in_place.empty() ? "" : " (inputs updated in place keep their placement)"));
    }
    decision.cost_bytes += std::get<0>(best_key);
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      decision.inputs[i] = decision.inputs[i].With(d, best->inputs[i]);
    }
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      decision.outputs[i] = decision.outputs[i].With(d, best->outputs[i]);
    }
  }
  return decision;
}

}  // namespace weft::planner
