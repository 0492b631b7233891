#include "planner/plan_report.h"

#include <algorithm>
#include <map>

#include "common/kernel_scratch.h"
#include "common/program.h"
#include "planner/format.h"

namespace weft::planner {
namespace {

bool Transient(v1::Buffer::Role role) {
  return role == v1::Buffer::ACTIVATION || role == v1::Buffer::DATA || role == v1::Buffer::LOSS;
}

// Peak bytes of activation, data and loss buffers alive at once, by the lifetimes the memory
// plan shares bytes by (common/program.h BufferLives): over the step's instructions and then the
// evaluation's.
int64_t PeakTransientBytes(const v1::Program& p) {
  const int n = p.instructions_size() + p.eval().instructions_size();
  std::vector<int64_t> delta(n + 1, 0);
  const std::vector<BufferLife> lives = BufferLives(p);
  int64_t carried = 0;
  for (int b = 0; b < p.buffers_size(); ++b) {
    if (!Transient(p.buffers(b).role()) || lives[b].first < 0) continue;
    if (lives[b].carried) {
      carried += BufferBytes(p.buffers(b));
      continue;
    }
    delta[lives[b].first] += BufferBytes(p.buffers(b));
    delta[lives[b].last + 1] -= BufferBytes(p.buffers(b));
  }
  int64_t live = carried, peak = carried;
  for (int i = 0; i < n; ++i) {
    live += delta[i];
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

RankReport ReportRank(const v1::Program& p, bool collectives) {
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
  r.peak_bytes = PlannedPeakBytes(p);
  // Group members once per group: a program names a handful of groups and many collectives.
  std::map<int, std::vector<int>> members;
  for (const v1::CommGroup& g : p.groups()) members[g.id()] = GroupMembers(p, g);
  for (int i = 0; i < p.instructions_size(); ++i) {
    const v1::Instruction& ins = p.instructions(i);
    const v1::CommGroup* group = FindGroup(p, ins.group());
    const bool collective = IsCollective(ins.op());
    const bool send = ins.op() == v1::Instruction::SEND && ins.inputs_size() > 0 &&
                      ins.inputs(0) >= 0 && ins.inputs(0) < p.buffers_size();
    if ((!collective && !send) || group == nullptr) continue;
    const int64_t bytes = send ? BufferBytes(p.buffers(ins.inputs(0)))
                               : CollectiveBytes(p, ins, members.at(group->id()));
    r.bytes_sent_per_step += bytes;
    if (!collectives) continue;
    CollectiveReport c;
    c.instruction = i;
    c.op = v1::Instruction::Op_Name(ins.op());
    if (ins.inputs_size() > 0 && ins.inputs(0) >= 0 && ins.inputs(0) < p.buffers_size()) {
      c.tensor = p.buffers(ins.inputs(0)).name();
    }
    c.ranks = members.at(group->id());
    c.mesh_dims = group->mesh_dims();
    c.bytes_sent = bytes;
    r.collectives.push_back(std::move(c));
  }
  return r;
}

PlanReport ReportPlan(const std::vector<v1::Program>& programs) {
  PlanReport report;
  for (const v1::Program& p : programs) {
    report.ranks.push_back(ReportRank(p));
    report.total_bytes_per_step += report.ranks.back().bytes_sent_per_step;
  }
  return report;
}

}  // namespace weft::planner
