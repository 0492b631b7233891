#include "planner/cost/simulate.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/program.h"
#include "common/status.h"
#include "planner/cost/profile.h"
#include "planner/format.h"

namespace weft::planner::cost {
namespace {

// One collective as its simulated members share it: it starts when each has started it (ready)
// and each one's communicator has finished the collective before it there (after).
struct Instance {
  int expected = 0;  // simulated members
  std::map<int, double> ready;                  // by simulated index
  std::map<int, Instance*> after;               // by simulated index; null: none
  double seconds = 0;                           // the slowest member's price
  bool resolved = false;
  double start = 0;
  double end = 0;
};

// Resolves `x` when it can: every member has started it and the collectives before it on each
// member's communicator can resolve.
bool Resolve(Instance* x) {
  if (x->resolved) return true;
  if (static_cast<int>(x->ready.size()) < x->expected) return false;
  double start = 0;
  for (const auto& [member, t] : x->ready) {
    double free = 0;
    Instance* before = x->after.at(member);
    if (before != nullptr) {
      if (!Resolve(before)) return false;
      free = before->end;
    }
    start = std::max(start, std::max(t, free));
  }
  x->start = start;
  x->end = start + x->seconds;
  x->resolved = true;
  return true;
}

struct ByteSpan {
  int64_t begin = 0;
  int64_t end = 0;
  bool Overlaps(const ByteSpan& o) const { return begin < o.end && o.begin < end; }
};

struct Pending {
  Instance* instance = nullptr;
  int group = 0;
  std::vector<ByteSpan> spans;
};

// A SEND and its RECV: each side's arrival, and when both have, the transfer.
struct Transfer {
  std::optional<double> send_at;
  std::optional<double> recv_at;
  double seconds = 0;
};

struct RankState {
  const v1::Program* program = nullptr;
  int index = 0;  // in the simulated set
  bool blocking = false;
  size_t pc = 0;
  double t = 0;
  bool issued = false;  // the instruction at pc has started its collective or posted its transfer
  bool done = false;
  std::map<int, int> started;                  // by group id: collectives started on it
  std::map<int, Instance*> last_on;            // by group id: the last one started on it
  std::vector<Pending> pending;
  StepSplit split;
  double link_s = 0;
};

class Simulation {
 public:
  Simulation(absl::Span<const v1::Program> programs, absl::Span<const std::string> hosts,
             const v1::CostProfile& profile, bool tail)
      : programs_(programs), hosts_(hosts), profile_(profile), tail_(tail) {}

  absl::StatusOr<StepPrediction> Run() {
    world_ = 1;  // every program's mesh is the plan's
    for (int64_t n : programs_[0].mesh().shape()) world_ *= static_cast<int>(n);
    for (size_t i = 0; i < programs_.size(); ++i) {
      const v1::Program& p = programs_[i];
      RETURN_IF_ERROR(Check(p));
      RankState s;
      s.program = &p;
      s.index = static_cast<int>(i);
      s.blocking = p.blocking_collectives() || absl::StartsWith(p.device(), "cuda");
      index_of_rank_[p.rank()] = s.index;
      ranks_.push_back(std::move(s));
    }
    for (int r = 0; r < world_; ++r) ++ranks_on_host_[hosts_[r]];
    while (true) {
      bool progressed = false;
      bool all_done = true;
      for (RankState& s : ranks_) {
        if (s.done) continue;
        ASSIGN_OR_RETURN(bool moved, Advance(s));
        progressed |= moved;
        all_done &= s.done;
      }
      if (all_done) break;
      if (!progressed) {
        std::vector<std::string> at;
        for (const RankState& s : ranks_) {
          if (s.done) continue;
          const v1::Instruction& ins = s.program->instructions(static_cast<int>(s.pc));
          at.push_back(absl::StrCat("rank ", s.program->rank(), " at instruction ", s.pc, " (",
                                    v1::Instruction::Op_Name(ins.op()), " g", ins.group(), ")"));
        }
        return absl::InternalError(absl::StrCat(
            "simulation stuck, each rank waiting for another: ", absl::StrJoin(at, "; ")));
      }
    }
    StepPrediction out;
    for (const RankState& s : ranks_) {
      RankPrediction r;
      r.rank = s.program->rank();
      r.step_s = s.t;
      r.split = s.split;
      r.link_s = s.link_s;
      if (out.ranks.empty() || r.step_s > out.step_s) {
        out.step_s = r.step_s;
        out.critical_rank = r.rank;
        out.split = r.split;
      }
      out.ranks.push_back(r);
    }
    return out;
  }

 private:
  absl::Status Check(const v1::Program& p) const {
    if (p.mesh().shape_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat("rank ", p.rank(), ": program has no mesh"));
    }
    if (static_cast<int64_t>(hosts_.size()) < world_) {
      return absl::InvalidArgumentError(absl::StrCat("hosts given for ", hosts_.size(),
                                                     " ranks, the mesh has ", world_));
    }
    for (int i = 0; i < p.instructions_size(); ++i) {
      const v1::Instruction& ins = p.instructions(i);
      auto bad = [&](int id) { return id < 0 || id >= p.buffers_size(); };
      for (int id : ins.inputs()) {
        if (bad(id)) return BadInstruction(p, i, absl::StrCat("input buffer ", id));
      }
      for (int id : ins.outputs()) {
        if (bad(id)) return BadInstruction(p, i, absl::StrCat("output buffer ", id));
      }
      if (ins.has_scratch() && bad(ins.scratch())) {
        return BadInstruction(p, i, absl::StrCat("scratch buffer ", ins.scratch()));
      }
      const bool grouped = IsCollective(ins.op()) || ins.op() == v1::Instruction::SEND ||
                           ins.op() == v1::Instruction::RECV;
      if (grouped && FindGroup(p, ins.group()) == nullptr) {
        return BadInstruction(p, i, absl::StrCat("group ", ins.group()));
      }
    }
    return absl::OkStatus();
  }

  static absl::Status BadInstruction(const v1::Program& p, int i, const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", p.rank(), " instruction ", i, ": ", what, " is not in the program"));
  }

  ByteSpan SpanOf(const v1::Program& p, int id) const {
    if (p.arena_bytes() > 0) {
      const v1::Buffer& b = p.buffers(id);
      return {b.offset(), b.offset() + std::max<int64_t>(1, BufferBytes(b))};
    }
    return {id, id + 1};  // no arena: buffers never share bytes
  }

  std::vector<ByteSpan> Spans(const v1::Program& p, const v1::Instruction& ins) const {
    std::vector<ByteSpan> spans;
    for (int id : ins.inputs()) spans.push_back(SpanOf(p, id));
    for (int id : ins.outputs()) spans.push_back(SpanOf(p, id));
    if (ins.has_scratch()) spans.push_back(SpanOf(p, ins.scratch()));
    return spans;
  }

  // How many copies of a group across hosts share its members' host links at once: every copy of
  // an SPMD group (the same dims at the other coordinates) runs the same collective at the same
  // time, so a host whose `rank` holds m of the group's members among its H ranks carries H / m
  // such flows, each at that share of the link calibration measured one flow on. 1 inside a
  // host.
  int64_t Sharing(int rank, const std::vector<int>& members) const {
    if (ScopeOf(members) != v1::LinkCost::INTER_HOST) return 1;
    const std::string& host = hosts_[rank];
    int64_t members_on_host = 0;
    for (int m : members) members_on_host += hosts_[m] == host;
    return std::max<int64_t>(1, ranks_on_host_.at(host) / std::max<int64_t>(1, members_on_host));
  }

  v1::LinkCost::Scope ScopeOf(const std::vector<int>& members) const {
    for (int m : members) {
      if (m < 0 || m >= static_cast<int>(hosts_.size()) || hosts_[m] != hosts_[members[0]]) {
        return v1::LinkCost::INTER_HOST;
      }
    }
    return v1::LinkCost::INTRA_HOST;
  }

  // Waits (in s's clock) for the pending collective `x`; false while it cannot resolve.
  bool WaitFor(RankState& s, const Pending& x) {
    if (!Resolve(x.instance)) return false;
    const Instance& c = *x.instance;
    if (c.end <= s.t) return true;
    // What s itself allowed the start to be; a later start is another member's lateness.
    double own = c.ready.at(s.index);
    const Instance* before = c.after.at(s.index);
    if (before != nullptr) own = std::max(own, before->end);
    const double bubble = std::max(0.0, c.start - std::max(s.t, own));
    s.split.bubble_s += bubble;
    s.split.exposed_comm_s += c.end - s.t - bubble;
    s.t = c.end;
    return true;
  }

  // Waits for every pending collective touching `spans` or (group >= 0) on that communicator.
  bool WaitTouching(RankState& s, const std::vector<ByteSpan>& spans, int group) {
    for (const Pending& x : s.pending) {
      bool touches = x.group == group;
      for (const ByteSpan& a : x.spans) {
        for (const ByteSpan& b : spans) touches |= a.Overlaps(b);
      }
      if (touches && !WaitFor(s, x)) return false;
    }
    // Drop what has ended.
    s.pending.erase(std::remove_if(s.pending.begin(), s.pending.end(),
                                   [&](const Pending& x) {
                                     return x.instance->resolved && x.instance->end <= s.t;
                                   }),
                    s.pending.end());
    return true;
  }

  bool InFlight(const RankState& s, double from, double to) const {
    for (const Pending& x : s.pending) {
      if (!x.instance->resolved) return true;  // started, or about to
      if (x.instance->start < to && x.instance->end > from) return true;
    }
    return false;
  }

  // Runs s's instructions until it must wait for another rank. True if anything changed.
  absl::StatusOr<bool> Advance(RankState& s) {
    const v1::Program& p = *s.program;
    bool moved = false;
    while (s.pc < static_cast<size_t>(p.instructions_size())) {
      const v1::Instruction& ins = p.instructions(static_cast<int>(s.pc));
      const std::vector<ByteSpan> spans = Spans(p, ins);
      const bool transfer =
          ins.op() == v1::Instruction::SEND || ins.op() == v1::Instruction::RECV;
      if (!s.issued && !WaitTouching(s, spans, transfer ? ins.group() : -1)) return moved;
      if (IsCollective(ins.op())) {
        ASSIGN_OR_RETURN(std::optional<bool> finished, Collective(s, ins, spans));
        if (!finished.has_value()) return moved;
        if (!*finished) return true;
      } else if (transfer) {
        ASSIGN_OR_RETURN(std::optional<bool> finished, PointToPoint(s, ins));
        if (!finished.has_value()) return moved;
        if (!*finished) return true;
      } else {
        ASSIGN_OR_RETURN(double seconds, KernelSeconds(profile_, ComputeWork(p, ins), tail_));
        if (InFlight(s, s.t, s.t + seconds)) seconds *= std::max(1.0, profile_.overlap_slowdown());
        (ins.phase() == v1::Instruction::OPTIMIZER ? s.split.optimizer_s : s.split.compute_s) +=
            seconds;
        s.t += seconds;
      }
      s.t += profile_.instruction_overhead_s();  // the executor's own, per instruction
      s.issued = false;
      ++s.pc;
      moved = true;
    }
    // The end of the step waits for every collective.
    for (const Pending& x : s.pending) {
      if (!WaitFor(s, x)) return moved;
    }
    s.pending.clear();
    s.done = true;
    return true;
  }

  // Starts the collective at s.pc (once) and, when it runs in place, waits for it. nullopt:
  // nothing changed (started before, waiting for another member); false: started now, waiting.
  absl::StatusOr<std::optional<bool>> Collective(RankState& s, const v1::Instruction& ins,
                                  const std::vector<ByteSpan>& spans) {
    const v1::Program& p = *s.program;
    const v1::CommGroup& group = *FindGroup(p, ins.group());
    const std::vector<int> members = GroupMembers(p, group);
    bool changed = false;
    if (!s.issued) {
      const int seq = s.started[ins.group()]++;
      auto key = std::make_tuple(ins.group(), members, seq);
      std::unique_ptr<Instance>& slot = instances_[key];
      if (slot == nullptr) {
        slot = std::make_unique<Instance>();
        for (int m : members) slot->expected += index_of_rank_.count(m);
      }
      Instance* x = slot.get();
      ASSIGN_OR_RETURN(double seconds,
                       LinkSeconds(profile_, ins.op(), static_cast<int>(members.size()),
                                   ScopeOf(members),
                                   CollectiveBytes(p, ins, members) * Sharing(p.rank(), members),
                                   tail_));
      x->seconds = std::max(x->seconds, seconds);
      x->ready[s.index] = s.t;
      auto last = s.last_on.find(ins.group());
      x->after[s.index] = last == s.last_on.end() ? nullptr : last->second;
      s.last_on[ins.group()] = x;
      s.link_s += seconds;
      s.pending.push_back({x, ins.group(), spans});
      s.issued = true;
      changed = true;
    }
    if (!s.blocking) return std::optional<bool>(true);
    // In place: the executor waits for it here.
    if (!WaitFor(s, s.pending.back())) {
      return changed ? std::optional<bool>(false) : std::nullopt;
    }
    s.pending.pop_back();
    return std::optional<bool>(true);
  }

  // Posts the SEND or RECV at s.pc (once); when its other side has posted, both take the
  // transfer. nullopt: nothing changed (already posted, other side absent); false: posted now.
  absl::StatusOr<std::optional<bool>> PointToPoint(RankState& s, const v1::Instruction& ins) {
    const v1::Program& p = *s.program;
    const v1::CommGroup& group = *FindGroup(p, ins.group());
    const std::vector<int> members = GroupMembers(p, group);
    if (ins.peer() < 0 || ins.peer() >= static_cast<int>(members.size())) {
      return BadInstruction(p, static_cast<int>(s.pc), absl::StrCat("peer ", ins.peer()));
    }
    const int peer = members[ins.peer()];
    const bool send = ins.op() == v1::Instruction::SEND;
    const int from = send ? p.rank() : peer;
    const int to = send ? peer : p.rank();
    Transfer& x = transfers_[std::make_tuple(from, to, ins.tag())];
    bool changed = false;
    if (!s.issued) {
      const int buffer = send ? ins.inputs(0) : ins.outputs(0);
      ASSIGN_OR_RETURN(double seconds,
                       LinkSeconds(profile_, v1::Instruction::SEND, 2,
                                   ScopeOf({from, to}),
                                   BufferBytes(p.buffers(buffer)) * Sharing(p.rank(), {from, to}),
                                   tail_));
      x.seconds = std::max(x.seconds, seconds);
      (send ? x.send_at : x.recv_at) = s.t;
      // A peer outside the simulated set is there when this side is.
      if (!index_of_rank_.count(peer)) (send ? x.recv_at : x.send_at) = s.t;
      s.link_s += seconds;
      s.issued = true;
      changed = true;
    }
    if (!x.send_at.has_value() || !x.recv_at.has_value()) {
      return changed ? std::optional<bool>(false) : std::nullopt;
    }
    const double start = std::max(*x.send_at, *x.recv_at);
    s.split.bubble_s += start - s.t;
    s.split.exposed_comm_s += x.seconds;
    s.t = start + x.seconds;
    return std::optional<bool>(true);
  }

  absl::Span<const v1::Program> programs_;
  absl::Span<const std::string> hosts_;
  const v1::CostProfile& profile_;
  const bool tail_;
  std::vector<RankState> ranks_;
  int world_ = 0;  // the mesh's ranks (hosts_ covers them)
  std::map<std::string, int64_t> ranks_on_host_;  // over the mesh's ranks
  std::map<int, int> index_of_rank_;
  std::map<std::tuple<int, std::vector<int>, int>, std::unique_ptr<Instance>> instances_;
  std::map<std::tuple<int, int, uint32_t>, Transfer> transfers_;
};

}  // namespace

absl::StatusOr<StepPrediction> SimulateStep(absl::Span<const v1::Program> programs,
                                            absl::Span<const std::string> host_of_rank,
                                            const v1::CostProfile& profile) {
  if (programs.empty()) return absl::InvalidArgumentError("no programs to simulate");
  ASSIGN_OR_RETURN(StepPrediction median,
                   Simulation(programs, host_of_rank, profile, /*tail=*/false).Run());
  ASSIGN_OR_RETURN(StepPrediction tail,
                   Simulation(programs, host_of_rank, profile, /*tail=*/true).Run());
  median.tail_step_s = tail.step_s;
  return median;
}

std::vector<int> SimulatedRanks(const Plan& plan) {
  const Mesh& mesh = plan.planned().graph.mesh;
  const int pipeline_dim = plan.planned().graph.pipeline.dim;
  std::vector<int> ranks;
  const int64_t stages = pipeline_dim >= 0 ? mesh.dim_size(pipeline_dim) : 1;
  for (int64_t stage = 0; stage < stages; ++stage) {
    std::vector<int64_t> coord(mesh.ndim(), 0);
    if (pipeline_dim >= 0) coord[pipeline_dim] = stage;
    ranks.push_back(mesh.RankAt(coord));
  }
  return ranks;
}

absl::StatusOr<StepPrediction> SimulatePlan(const Plan& plan,
                                            absl::Span<const std::string> host_of_rank,
                                            const v1::CostProfile& profile) {
  std::vector<v1::Program> programs;
  for (int rank : SimulatedRanks(plan)) {
    ASSIGN_OR_RETURN(v1::Program p, plan.Program(rank));
    programs.push_back(std::move(p));
  }
  return SimulateStep(programs, host_of_rank, profile);
}

}  // namespace weft::planner::cost
