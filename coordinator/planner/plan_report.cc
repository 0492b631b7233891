#include "coordinator/planner/plan_report.h"

#include <algorithm>

#include "coordinator/planner/format.h"

namespace weft::planner {
namespace {

int64_t Bytes(const v1::Buffer& b) {
  int64_t n = 4;
  for (int64_t d : b.shape()) n *= d;
  return n;
}

const v1::CommGroup* FindGroup(const v1::Program& p, int id) {
  for (const v1::CommGroup& g : p.groups()) {
    if (g.id() == id) return &g;
  }
  return nullptr;
}

bool Transient(v1::Buffer::Role role) {
  return role == v1::Buffer::ACTIVATION || role == v1::Buffer::DATA || role == v1::Buffer::LOSS;
}

// Peak bytes of activation, data and loss buffers alive at once: a buffer lives from the
// first instruction that touches it to the last that reads it (the loss to the end of the step,
// where the worker reads it).
int64_t PeakTransientBytes(const v1::Program& p) {
  const int n = p.step_size();
  std::vector<int> first(p.buffers_size(), -1), last(p.buffers_size(), -1);
  auto touch = [&](int b, int i, bool read) {
    if (b < 0 || b >= p.buffers_size()) return;
    if (first[b] < 0) first[b] = i;
    if (read || last[b] < 0) last[b] = std::max(last[b], i);
  };
  for (int i = 0; i < n; ++i) {
    for (int b : p.step(i).inputs()) touch(b, i, true);
    for (int b : p.step(i).outputs()) touch(b, i, false);
  }
  if (p.loss_buffer() >= 0 && p.loss_buffer() < p.buffers_size() && first[p.loss_buffer()] >= 0) {
    last[p.loss_buffer()] = n - 1;
  }
  // Sweep: +bytes at first, -bytes after last.
  std::vector<int64_t> delta(n + 1, 0);
  for (int b = 0; b < p.buffers_size(); ++b) {
    if (!Transient(p.buffers(b).role()) || first[b] < 0) continue;
    delta[first[b]] += Bytes(p.buffers(b));
    delta[last[b] + 1] -= Bytes(p.buffers(b));
  }
  int64_t live = 0, peak = 0;
  for (int i = 0; i < n; ++i) {
    live += delta[i];
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

PlanReport ReportPlan(const std::vector<v1::Program>& programs) {
  PlanReport report;
  for (const v1::Program& p : programs) {
    RankReport r;
    r.rank = p.rank();
    for (const v1::Buffer& b : p.buffers()) {
      switch (b.role()) {
        case v1::Buffer::PARAM:
          r.param_bytes += Bytes(b);
          break;
        case v1::Buffer::GRAD:
          r.grad_bytes += Bytes(b);
          break;
        case v1::Buffer::OPTIMIZER_STATE:
          r.optimizer_state_bytes += Bytes(b);
          break;
        default:
          break;
      }
    }
    r.peak_activation_bytes = PeakTransientBytes(p);
    for (int i = 0; i < p.step_size(); ++i) {
      const v1::Instruction& ins = p.step(i);
      const v1::CommGroup* group = FindGroup(p, ins.group());
      const bool collective =
          ins.op() == v1::Instruction::ALL_REDUCE || ins.op() == v1::Instruction::ALL_GATHER ||
          ins.op() == v1::Instruction::REDUCE_SCATTER || ins.op() == v1::Instruction::ALL_TO_ALL;
      if (!collective || group == nullptr) continue;
      CollectiveReport c;
      c.instruction = i;
      c.op = v1::Instruction::Op_Name(ins.op());
      if (ins.inputs_size() > 0 && ins.inputs(0) >= 0 && ins.inputs(0) < p.buffers_size()) {
        c.tensor = p.buffers(ins.inputs(0)).name();
      }
      c.ranks.assign(group->ranks().begin(), group->ranks().end());
      c.mesh_dims = group->mesh_dims();
      c.bytes_sent = CollectiveBytes(p, ins);
      r.bytes_sent_per_step += c.bytes_sent;
      r.collectives.push_back(std::move(c));
    }
    report.total_bytes_per_step += r.bytes_sent_per_step;
    report.ranks.push_back(std::move(r));
  }
  return report;
}

}  // namespace weft::planner
