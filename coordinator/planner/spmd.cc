#include "coordinator/planner/spmd.h"

#include <limits>
#include <optional>
#include <tuple>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/planner/lower.h"

namespace weft::planner {
namespace {

// How much communication an output placement still owes downstream, for tie-breaks.
int Debt(const Placement& p) { return p.is_replicate() ? 0 : p.is_shard() ? 1 : 2; }

std::string StrategyKey(const DimStrategy& s) {
  return absl::StrCat(FormatPlacements(s.inputs), "->", FormatPlacements(s.outputs));
}

// Whether the search moves an input from `from` to `to` on one mesh dim (lower can make every
// move but Shard->Partial). Replicate->Partial is free but only moves the reduction downstream,
// so the search never makes it. Partial->Shard (reduce-scatter) is cheaper than
// Partial->Replicate locally but changes the sharding downstream ops see, which a greedy per-op
// search cannot price; it is reserved for explicit targets, and for update ops (`update_op`),
// which have no downstream readers.
bool SearchMakes(const Placement& from, const Placement& to, bool update_op) {
  if (from == to) return true;
  if (to.is_partial()) return from.is_partial();  // Partial(sum) <-> Partial(avg): a local scale
  if (from.is_partial() && to.is_shard()) return update_op;
  return true;
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
        std::optional<double> c;
        if (SearchMakes(cur.placement(d), s.inputs[i], !rule->updates_in_place.empty())) {
          c = OneDimMoveBytes(cur.placement(d), s.inputs[i], mesh.dim_size(d),
                              4 * cur.MaxLocalElements(g.tensors[op.inputs[i]].shape));
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
