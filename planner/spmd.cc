#include "planner/spmd.h"

#include <functional>
#include <optional>
#include <tuple>

#include "absl/algorithm/container.h"
#include "common/dtype.h"
#include "planner/op_table.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"
#include "planner/reshard_cost.h"

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
  if (from.is_partial_max() || to.is_partial_max()) {
    return from.is_partial_max() && to.is_replicate();
  }
  if (to.is_partial()) return from.is_partial();  // Partial(sum) <-> Partial(avg): a local scale
  if (from.is_partial() && to.is_shard()) return update_op;
  return true;
}

// Whether an op of op's phase and layer already resharded tensor `id` to `to` on mesh dim d: that
// move is free for op (AppendReshard reuses the result when its placements all match).
bool ReshardedOnDim(const Graph& g, const Op& op, int id, int d, const Placement& to) {
  auto made = g.resharded.find(id);
  if (made == g.resharded.end()) return false;
  for (const Graph::Resharded& r : made->second) {
    if (r.phase == op.phase && r.layer == op.layer && g.tensors[r.tensor].dist->placement(d) == to) {
      return true;
    }
  }
  return false;
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
    std::string micro;
    if (g.micro_batches() > 1 && !t.micro.is_replicate()) {
      micro = absl::StrCat(" (", t.micro.ToString(), " over micro-batches)");
    }
    parts.push_back(absl::StrCat(t.name, " ", t.dist ? t.dist->ToString() : "[unplaced]", micro));
  }
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<SpmdDecision> InferSpmd(const RuleRegistry& registry, const Graph& g,
                                       const Op& unfilled) {
  Op op = unfilled;
  FillDefaultAttrs(&op);  // rules read every declared attribute
  const OpRule* rule = registry.Find(op.type);
  if (rule == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no SPMD rule for ", OpLabel(op),
                                                   " with inputs ", DescribeInputs(g, op)));
  }
  const OpDef* def = FindOpDef(op.type);
  const std::vector<int> in_place = def != nullptr ? def->updates_in_place() : std::vector<int>{};
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
  // The rule's strategies for a mesh dim of dim_size members (or the micro-batches).
  std::vector<DimStrategy> strategies;
  auto load_strategies = [&](int64_t dim_size) -> absl::Status {
    sig.dim_size = dim_size;
    absl::StatusOr<std::vector<DimStrategy>> listed = rule->strategies(sig);
    if (!listed.ok()) {
      return absl::Status(listed.status().code(),
                          absl::StrCat(OpLabel(op), " with inputs ", DescribeInputs(g, op), ": ",
                                       listed.status().message()));
    }
    for (const DimStrategy& s : *listed) {
      if (s.inputs.size() != op.inputs.size() || s.outputs.size() != op.outputs.size()) {
        return absl::InternalError(
            absl::StrCat("rule for ", OpLabel(op), " returned a strategy of the wrong arity"));
      }
    }
    strategies = *std::move(listed);
    return absl::OkStatus();
  };
  auto is_in_place = [&](size_t i) { return absl::c_linear_search(in_place, static_cast<int>(i)); };
  // The strategy with the smallest key among those whose moves `cost` allows (nullopt: not).
  using Key = std::tuple<double, int, int, std::string>;
  auto pick = [&](const std::function<std::optional<double>(size_t, const Placement&,
                                                            const Placement&)>& cost,
                  const std::function<Placement(size_t)>& current) -> std::pair<const DimStrategy*, Key> {
    const DimStrategy* best = nullptr;
    Key best_key;
    for (const DimStrategy& s : strategies) {
      double bytes = 0;
      int moves = 0;
      bool reachable = true;
      for (size_t i = 0; i < op.inputs.size() && reachable; ++i) {
        const Placement cur = current(i);
        if (is_in_place(i) && cur != s.inputs[i]) {
          reachable = false;
          break;
        }
        std::optional<double> c = cost(i, cur, s.inputs[i]);
        if (!c) {
          reachable = false;
          break;
        }
        bytes += *c;
        moves += cur != s.inputs[i];
      }
      if (!reachable) continue;
      int debt = 0;
      for (const Placement& p : s.outputs) debt += Debt(p);
      Key key = std::make_tuple(bytes, moves, debt, StrategyKey(s));
      if (best == nullptr || key < best_key) {
        best = &s;
        best_key = key;
      }
    }
    return {best, best_key};
  };

  const Mesh& mesh = g.mesh;
  SpmdDecision decision;
  for (int id : op.inputs) {
    decision.inputs.push_back(*g.tensors[id].dist);
    decision.inputs_micro.push_back(g.tensors[id].micro);
  }
  for (size_t i = 0; i < op.outputs.size(); ++i) {
    decision.outputs.push_back(DistAttr::Replicated(mesh));
    decision.outputs_micro.push_back(Placement::Replicate());
  }
  for (int id : op.inputs) sig.input_splits.push_back(Shape(g.tensors[id].shape.size(), 1));
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (d > 0) {
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const Placement& p = decision.inputs[i].placement(d - 1);
        if (p.is_shard()) sig.input_splits[i][p.axis] *= mesh.dim_size(d - 1);
      }
    }
    RETURN_IF_ERROR(load_strategies(mesh.dim_size(d)));
    auto [best, key] = pick(
        [&](size_t i, const Placement& from, const Placement& to) -> std::optional<double> {
          if (!SearchMakes(from, to, !in_place.empty())) return std::nullopt;
          if (from != to && ReshardedOnDim(g, op, op.inputs[i], d, to)) return 0.0;
          const Tensor& t = g.tensors[op.inputs[i]];
          const int64_t bytes =
              DTypeSize(t.dtype) * t.dist->MaxLocalElements(MicroShape(g, t, g.micro_batches() - 1));
          return OneDimMoveBytes(from, to, mesh.dim_size(d), bytes);
        },
        [&](size_t i) { return g.tensors[op.inputs[i]].dist->placement(d); });
    if (best == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no SPMD strategy for ", OpLabel(op), " on mesh dim ", mesh.dim_name(d),
          " with inputs ", DescribeInputs(g, op),
          in_place.empty() ? "" : " (inputs updated in place keep their placement)"));
    }
    decision.cost_bytes += std::get<0>(key);
    for (size_t i = 0; i < op.inputs.size(); ++i) {
      decision.inputs[i] = decision.inputs[i].With(d, best->inputs[i]);
    }
    for (size_t i = 0; i < op.outputs.size(); ++i) {
      decision.outputs[i] = decision.outputs[i].With(d, best->outputs[i]);
    }
  }
  if (g.micro_batches() > 1) {
    // Micro-batches run one after another: nothing moves between them but accumulation.
    RETURN_IF_ERROR(load_strategies(g.micro_batches()));
    auto [best, key] = pick(
        [&](size_t, const Placement& from, const Placement& to) -> std::optional<double> {
          if (from == to || (from.is_partial() && (to.is_replicate() || to.is_partial()))) {
            return 0.0;
          }
          return std::nullopt;
        },
        [&](size_t i) { return g.tensors[op.inputs[i]].micro; });
    if (best == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "no SPMD strategy for ", OpLabel(op), " over the ", g.micro_batches(),
          " micro-batches with inputs ", DescribeInputs(g, op),
          ": an op that needs the whole batch cannot run per micro-batch"));
    }
    decision.inputs_micro = best->inputs;
    decision.outputs_micro = best->outputs;
  }
  return decision;
}

}  // namespace weft::planner
