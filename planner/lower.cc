#include "planner/lower.h"

#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status.h"
#include "planner/reshard_cost.h"

namespace weft::planner {
namespace {

struct Move {
  int mesh_dim;
  Placement to;
};

// A one-dim move as the step it lowers to; nullopt for a move that changes no data.
std::optional<ReshardStep> StepOf(const DistAttr& before, const Move& move) {
  const int d = move.mesh_dim;
  const int64_t k = before.mesh().dim_size(d);
  const Placement c = before.placement(d);
  const Placement& t = move.to;
  if (k == 1 || c == t) return std::nullopt;
  ReshardStep s;
  s.mesh_dim = d;
  s.before = before;
  s.after = before.With(d, t);
  if (c.is_partial() && t.is_replicate()) {
    s.kind = v1::Instruction::ALL_REDUCE;
    s.reduce = c.reduce;
  } else if (c.is_partial() && t.is_shard()) {
    s.kind = v1::Instruction::REDUCE_SCATTER;
    s.axis = t.axis;
    s.reduce = c.reduce;
  } else if (c.is_partial() && t.is_partial()) {
    // sum_i v_i = mean_i (K v_i);  mean_i v_i = sum_i (v_i / K).
    s.kind = v1::Instruction::SCALE;
    s.scale = c.reduce == Placement::Reduce::kSum ? static_cast<float>(k)
                                                  : 1.0f / static_cast<float>(k);
  } else if (c.is_shard() && t.is_replicate()) {
    s.kind = v1::Instruction::ALL_GATHER;
    s.axis = c.axis;
  } else if (c.is_shard() && t.is_shard()) {
    s.kind = v1::Instruction::ALL_TO_ALL;
    s.axis = t.axis;
    s.concat_axis = c.axis;
  } else if (c.is_replicate() && t.is_shard()) {
    s.kind = v1::Instruction::SLICE;
    s.axis = t.axis;
  } else if (c.is_replicate() && t.is_partial()) {
    // The mean, or the largest, of equal terms.
    if (t.reduce != Placement::Reduce::kSum) return std::nullopt;
    s.kind = v1::Instruction::SCALE;
    s.first_member_only = true;
  } else {
    return std::nullopt;
  }
  return s;
}

}  // namespace

absl::StatusOr<std::vector<ReshardStep>> LowerReshard(const DistAttr& from, const DistAttr& to,
                                                      const std::vector<int64_t>& shape,
                                                      int64_t element_bytes,
                                                      const std::string& tensor) {
  const Mesh& mesh = from.mesh();
  if (mesh != to.mesh()) {
    return absl::UnimplementedError(absl::StrCat("reshard of ", tensor, " across meshes ",
                                                 mesh.ToString(), " -> ", to.mesh().ToString(),
                                                 " (send/recv) is not lowered yet"));
  }
  const int n = mesh.ndim();
  std::vector<std::vector<Placement>> candidates(n);
  for (int d = 0; d < n; ++d) {
    for (const Placement& p : {from.placement(d), to.placement(d), Placement::Replicate()}) {
      bool seen = false;
      for (const Placement& q : candidates[d]) seen = seen || q == p;
      if (!seen) candidates[d].push_back(p);
    }
  }
  // Dijkstra over placements; a path is ranked by (bytes, steps, its spelling) so that equal
  // costs resolve the same way on every run.
  struct Path {
    double bytes = 0;
    int steps = 0;
    std::string key;
    DistAttr attr;
    std::vector<Move> moves;
  };
  auto rank = [](const Path& p) { return std::make_tuple(p.bytes, p.steps, p.key); };
  auto cmp = [&](const Path& a, const Path& b) { return rank(a) < rank(b); };
  std::multiset<Path, decltype(cmp)> frontier(cmp);
  std::set<std::string> done;
  frontier.insert(Path{0, 0, "", from, {}});
  while (!frontier.empty()) {
    Path cur = *frontier.begin();
    frontier.erase(frontier.begin());
    const std::string state = cur.attr.ToString();
    if (!done.insert(state).second) continue;
    if (cur.attr == to) {
      std::vector<ReshardStep> steps;
      DistAttr attr = from;
      for (const Move& m : cur.moves) {
        if (std::optional<ReshardStep> s = StepOf(attr, m)) steps.push_back(*s);
        attr = attr.With(m.mesh_dim, m.to);
      }
      return steps;
    }
    for (int d = 0; d < n; ++d) {
      for (const Placement& p : candidates[d]) {
        if (p == cur.attr.placement(d)) continue;
        std::optional<double> bytes = MoveBytes(cur.attr, d, p, shape, element_bytes);
        if (!bytes) continue;
        Path next = cur;
        next.bytes += *bytes;
        next.steps += StepOf(cur.attr, Move{d, p}).has_value() ? 1 : 0;
        absl::StrAppend(&next.key, d, ":", p.ToString(), ";");
        next.attr = cur.attr.With(d, p);
        next.moves.push_back(Move{d, p});
        if (done.count(next.attr.ToString()) == 0) frontier.insert(std::move(next));
      }
    }
  }
  return absl::UnimplementedError(absl::StrCat("reshard of ", tensor, " from ", from.ToString(),
                                               " to ", to.ToString(), " on mesh ",
                                               mesh.ToString(), " has no lowering"));
}

absl::StatusOr<LoweredGraph> Lower(const Graph& g, const std::vector<int>& extra_dims,
                                   const LoweredGraph* numbering) {
  LoweredGraph lowered;
  lowered.steps.resize(g.ops.size());
  if (numbering != nullptr) lowered.next_group_id = numbering->next_group_id;
  auto add_dim = [&](int d) {
    if (lowered.group_base.count(d) > 0) return;
    lowered.group_dims.push_back(d);
    if (numbering != nullptr && numbering->group_base.count(d) > 0) {
      lowered.group_base[d] = numbering->group_base.at(d);
      return;
    }
    lowered.group_base[d] = lowered.next_group_id;
    lowered.next_group_id += g.mesh.size() / static_cast<int>(g.mesh.dim_size(d));
  };
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    if (op.type != "reshard") continue;
    const Tensor& in = g.tensors[op.inputs[0]];
    const Tensor& out = g.tensors[op.outputs[0]];
    ASSIGN_OR_RETURN(lowered.steps[i], LowerReshard(*in.dist, *out.dist, in.shape,
                                                    DTypeSize(in.dtype), in.name));
    for (const ReshardStep& step : lowered.steps[i]) {
      if (step.kind == v1::Instruction::SLICE || step.kind == v1::Instruction::SCALE) continue;
      add_dim(step.mesh_dim);
    }
  }
  for (int d : extra_dims) add_dim(d);
  return lowered;
}

}  // namespace weft::planner
