#include "coordinator/planner/plan_report.h"

#include <algorithm>

#include "coordinator/planner/format.h"

namespace weft::planner {
namespace {

bool Transient(v1::Buffer::Role role) {
  return role == v1::Buffer::ACTIVATION || role == v1::Buffer::DATA || role == v1::Buffer::LOSS;
}

// Peak bytes of activation, data and loss buffers alive at once. A buffer is alive from a write
// to the last read of what it wrote (the loss to the end of the step, where the worker reads
// it); a write that does not read the buffer (every op but ACCUMULATE, and those whose output
// aliases an input) starts a new lifetime, so a buffer that pipeline micro-batches share
// counts only while one of them holds it.
int64_t PeakTransientBytes(const v1::Program& p) {
  const int n = p.instructions_size();
  std::vector<int64_t> delta(n + 1, 0);
  std::vector<int> start(p.buffers_size(), -1), last(p.buffers_size(), -1);
  auto close = [&](int b) {
    if (start[b] < 0) return;
    if (Transient(p.buffers(b).role())) {
      delta[start[b]] += BufferBytes(p.buffers(b));
      delta[std::max(last[b], start[b]) + 1] -= BufferBytes(p.buffers(b));
    }
    start[b] = -1;
  };
  for (int i = 0; i < n; ++i) {
    const v1::Instruction& ins = p.instructions(i);
    for (int b : ins.inputs()) {
      if (b < 0 || b >= p.buffers_size()) continue;
      if (start[b] < 0) start[b] = i;
      last[b] = i;
    }
    for (int b : ins.outputs()) {
      if (b < 0 || b >= p.buffers_size()) continue;
      const bool reads = ins.op() == v1::Instruction::ACCUMULATE ||
                         std::find(ins.inputs().begin(), ins.inputs().end(), b) !=
                             ins.inputs().end();
      if (!reads) close(b);
      if (start[b] < 0) start[b] = i;
      last[b] = i;
    }
  }
  if (p.loss_buffer() >= 0 && p.loss_buffer() < p.buffers_size() &&
      start[p.loss_buffer()] >= 0) {
    last[p.loss_buffer()] = n - 1;
  }
  for (int b = 0; b < p.buffers_size(); ++b) close(b);
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
          r.param_bytes += BufferBytes(b);
          break;
        case v1::Buffer::GRAD:
          r.grad_bytes += BufferBytes(b);
          break;
        case v1::Buffer::OPTIMIZER_STATE:
          r.optimizer_state_bytes += BufferBytes(b);
          break;
        default:
          break;
      }
    }
    r.peak_activation_bytes = PeakTransientBytes(p);
    for (int i = 0; i < p.instructions_size(); ++i) {
      const v1::Instruction& ins = p.instructions(i);
      const v1::CommGroup* group = FindGroup(p, ins.group());
      const bool collective = IsCollective(ins.op());
      const bool send = ins.op() == v1::Instruction::SEND && ins.inputs_size() > 0 &&
                        ins.inputs(0) >= 0 && ins.inputs(0) < p.buffers_size();
      if ((!collective && !send) || group == nullptr) continue;
      CollectiveReport c;
      c.instruction = i;
      c.op = v1::Instruction::Op_Name(ins.op());
      if (ins.inputs_size() > 0 && ins.inputs(0) >= 0 && ins.inputs(0) < p.buffers_size()) {
        c.tensor = p.buffers(ins.inputs(0)).name();
      }
      c.ranks.assign(group->ranks().begin(), group->ranks().end());
      c.mesh_dims = group->mesh_dims();
      c.bytes_sent = send ? BufferBytes(p.buffers(ins.inputs(0))) : CollectiveBytes(p, ins);
      r.bytes_sent_per_step += c.bytes_sent;
      r.collectives.push_back(std::move(c));
    }
    report.total_bytes_per_step += r.bytes_sent_per_step;
    report.ranks.push_back(std::move(r));
  }
  return report;
}

}  // namespace weft::planner
