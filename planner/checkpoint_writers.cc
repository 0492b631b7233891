#include "planner/checkpoint_writers.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/jobspec/starting_state.h"
#include "common/status.h"

namespace weft::planner {

int StageOfTensor(const Graph& g, const pipeline::PipelinePlan& plan, const Tensor& t) {
  const int chunk = g.ChunkOf(t.layer);
  return chunk < 0 ? 0 : chunk % plan.stages;
}

bool HoldsValue(const DistAttr& attr, int rank) {
  std::vector<int64_t> coord = attr.mesh().Coordinate(rank);
  for (int d = 0; d < attr.mesh().ndim(); ++d) {
    const Placement& p = attr.placement(d);
    if (p.is_partial() && p.reduce == Placement::Reduce::kSum && coord[d] != 0) return false;
  }
  return true;
}

std::string CheckpointName(const Graph& g, int id) {
  const Tensor& t = g.tensors[id];
  if (const Parameter* p = g.FindParamOfMaster(id)) return g.tensors[p->tensor].name;
  if (t.role != v1::Buffer::OPTIMIZER_STATE) return t.name;
  // The optimizer pass names a state <param>.<state> (fc0.weight.m).
  const size_t dot = t.name.rfind('.');
  return CheckpointStateName(t.name.substr(0, dot), g.optimizer.type, t.name.substr(dot + 1));
}

absl::StatusOr<CheckpointWriters> CheckpointWriters::Assign(const Graph& g,
                                                            const pipeline::PipelinePlan& plan,
                                                            const StopCheck& stop) {
  struct Copies {
    std::string name;
    std::vector<int64_t> offsets, lengths;
    std::vector<int> holders;  // ascending
    int64_t bytes = 0;
    int tensor = -1;
  };
  const Mesh& mesh = g.mesh;
  const int pp = g.pipeline.dim;
  std::vector<Copies> groups;
  for (size_t id = 0; id < g.tensors.size(); ++id) {
    const Tensor& t = g.tensors[id];
    const Parameter* param = t.role == v1::Buffer::PARAM ? g.FindParam(id) : nullptr;
    if (t.role != v1::Buffer::OPTIMIZER_STATE && param == nullptr) continue;
    // A bf16 parameter is written as its float32 master weight.
    if (param != nullptr && param->master >= 0) continue;
    RETURN_IF_ERROR(CheckStopDoing(
        stop, [&] { return absl::StrCat("choosing who writes ", t.name, " to checkpoints"); }));
    const DistAttr& attr = *t.dist;
    // Identical copies: along the dims where the tensor is whole (Replicate, or Partial(avg) of
    // equal pieces) other than the pipeline dim, where only its own stage holds it.
    std::vector<int> dims;
    for (int d = 0; d < mesh.ndim(); ++d) {
      const Placement& p = attr.placement(d);
      if (d != pp && (p.is_replicate() || (p.is_partial() && p.reduce == Placement::Reduce::kAvg))) {
        dims.push_back(d);
      }
    }
    const int stage = StageOfTensor(g, plan, t);
    for (int r = 0; r < mesh.size(); ++r) {
      const std::vector<int64_t> coord = mesh.Coordinate(r);
      bool first = pp < 0 || coord[pp] == stage;
      for (int d : dims) first = first && coord[d] == 0;
      if (!first || !HoldsValue(attr, r)) continue;
      const v1::TensorBox box = attr.Box(t.shape, r);
      Copies c;
      c.name = CheckpointName(g, static_cast<int>(id));
      c.offsets.assign(box.offsets().begin(), box.offsets().end());
      c.lengths.assign(box.lengths().begin(), box.lengths().end());
      c.holders = mesh.GroupRanks(r, dims);
      std::sort(c.holders.begin(), c.holders.end());
      c.bytes = DTypeSize(t.dtype);
      for (int64_t d : c.lengths) c.bytes *= d;
      c.tensor = static_cast<int>(id);
      groups.push_back(std::move(c));
    }
  }
  std::sort(groups.begin(), groups.end(), [](const Copies& a, const Copies& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return std::tie(a.name, a.offsets, a.lengths, a.holders) <
           std::tie(b.name, b.offsets, b.lengths, b.holders);
  });
  CheckpointWriters writers;
  std::vector<int64_t> load(mesh.size(), 0);
  for (const Copies& c : groups) {
    int writer = c.holders.front();
    for (int q : c.holders) {
      if (load[q] < load[writer]) writer = q;
    }
    load[writer] += c.bytes;
    writers.writes_.insert({c.tensor, writer});
  }
  return writers;
}

}  // namespace weft::planner
