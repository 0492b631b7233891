#include "planner/pipeline/deadlock.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/program.h"
#include "common/status.h"
#include "planner/format.h"

namespace weft::planner::pipeline {
namespace {

using v1::Instruction;

bool IsTransfer(Instruction::Op op) { return op == Instruction::SEND || op == Instruction::RECV; }

std::string Describe(const Instruction& ins) {
  std::string s = Instruction::Op_Name(ins.op());
  if (IsTransfer(ins.op())) {
    absl::StrAppend(&s, ins.op() == Instruction::SEND ? " to" : " from", " member ", ins.peer(),
                    " of group ", ins.group(), " tag ", ins.tag());
  } else if (IsCollective(ins.op())) {
    absl::StrAppend(&s, " on group ", ins.group());
  }
  if (!ins.comment().empty()) absl::StrAppend(&s, " '", ins.comment(), "'");
  return s;
}

class Simulation {
 public:
  Simulation(const std::vector<std::vector<TransferBatch>>& ranks,
             const std::map<int, std::vector<int>>& groups)
      : ranks_(ranks), groups_(groups), next_(ranks.size(), 0), done_(ranks.size()),
        out_(ranks.size()) {
    for (size_t r = 0; r < ranks_.size(); ++r) StartBatch(r);
  }

  absl::Status Run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        absl::StatusOr<bool> p = Advance(static_cast<int>(r));
        if (!p.ok()) return p.status();
        progress = progress || *p;
      }
    }
    std::vector<std::string> stuck;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      if (Finished(r)) continue;
      std::vector<std::string> waits;
      const TransferBatch& batch = ranks_[r][next_[r]];
      for (size_t i = 0; i < batch.size(); ++i) {
        if (!done_[r][i]) waits.push_back(Describe(batch[i]));
      }
      stuck.push_back(absl::StrCat("rank ", r, " at instruction ", out_[r].size(), " (",
                                   absl::StrJoin(waits, " | "), ")"));
    }
    if (!stuck.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the plan deadlocks: ", absl::StrJoin(stuck, "; "),
          " (blocking send/recv and collectives in program order cannot all complete)"));
    }
    return absl::OkStatus();
  }

  std::vector<std::vector<Instruction>> TakeOrder() { return std::move(out_); }

 private:
  bool Finished(size_t r) const { return next_[r] >= ranks_[r].size(); }

  void StartBatch(size_t r) {
    while (!Finished(r) && ranks_[r][next_[r]].empty()) ++next_[r];
    if (!Finished(r)) done_[r].assign(ranks_[r][next_[r]].size(), false);
  }

  void Complete(size_t r, size_t i) {
    done_[r][i] = true;
    out_[r].push_back(ranks_[r][next_[r]][i]);
  }

  // The member index of `rank` in group `id`, or -1.
  int MemberIndex(int id, int rank) const {
    auto it = groups_.find(id);
    if (it == groups_.end()) return -1;
    auto at = std::find(it->second.begin(), it->second.end(), rank);
    return at == it->second.end() ? -1 : static_cast<int>(at - it->second.begin());
  }

  // Index in rank r's current batch of a pending instruction matching `want`, or -1.
  template <typename Pred>
  int FindPending(int r, Pred want) const {
    if (Finished(r)) return -1;
    const TransferBatch& batch = ranks_[r][next_[r]];
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!done_[r][i] && want(batch[i])) return static_cast<int>(i);
    }
    return -1;
  }

  // Completes whatever rank r can now; true if anything completed.
  absl::StatusOr<bool> Advance(int r) {
    bool progress = false;
    while (!Finished(r)) {
      const TransferBatch& batch = ranks_[r][next_[r]];
      for (size_t i = 0; i < batch.size(); ++i) {
        if (done_[r][i]) continue;
        const Instruction& ins = batch[i];
        if (IsTransfer(ins.op())) {
          auto it = groups_.find(ins.group());
          if (it == groups_.end() || ins.peer() < 0 ||
              ins.peer() >= static_cast<int>(it->second.size())) {
            return absl::FailedPreconditionError(absl::StrCat(
                "rank ", r, ": ", Describe(ins), " names no member of a known group"));
          }
          const int peer = it->second[ins.peer()];
          const int me = MemberIndex(ins.group(), r);
          const Instruction::Op want_op =
              ins.op() == Instruction::SEND ? Instruction::RECV : Instruction::SEND;
          int j = FindPending(peer, [&](const Instruction& o) {
            return o.op() == want_op && o.group() == ins.group() && o.peer() == me &&
                   o.tag() == ins.tag();
          });
          if (j < 0) continue;
          Complete(r, i);
          Complete(peer, j);
          progress = true;
          if (peer != r && AllDone(peer)) {
            ++next_[peer];
            StartBatch(peer);
          }
        } else if (IsCollective(ins.op())) {
          auto it = groups_.find(ins.group());
          if (it == groups_.end()) {
            return absl::FailedPreconditionError(
                absl::StrCat("rank ", r, ": ", Describe(ins), " names an unknown group"));
          }
          std::vector<std::pair<int, int>> members;
          bool all = true;
          for (int m : it->second) {
            int j = FindPending(m, [&](const Instruction& o) {
              return IsCollective(o.op()) && o.group() == ins.group();
            });
            if (j < 0) {
              all = false;
              break;
            }
            const Instruction& other = ranks_[m][next_[m]][j];
            if (other.op() != ins.op()) {
              return absl::FailedPreconditionError(absl::StrCat(
                  "the plan deadlocks: on group ", ins.group(), " rank ", r, " runs ",
                  Describe(ins), " while rank ", m, " runs ", Describe(other)));
            }
            members.emplace_back(m, j);
          }
          if (!all) continue;
          for (const auto& [m, j] : members) Complete(m, j);
          progress = true;
          for (const auto& [m, j] : members) {
            if (m != r && AllDone(m)) {
              ++next_[m];
              StartBatch(m);
            }
          }
        } else {
          Complete(r, i);
          progress = true;
        }
      }
      if (Finished(r) || !AllDone(r)) break;
      ++next_[r];
      StartBatch(r);
    }
    return progress;
  }

  bool AllDone(size_t r) const {
    if (Finished(r)) return false;
    return std::all_of(done_[r].begin(), done_[r].end(), [](bool b) { return b; });
  }

  const std::vector<std::vector<TransferBatch>>& ranks_;
  const std::map<int, std::vector<int>>& groups_;
  std::vector<size_t> next_;               // current batch per rank
  std::vector<std::vector<bool>> done_;    // per instruction of the current batch
  std::vector<std::vector<Instruction>> out_;
};

// Group id -> its global ranks, from the ranks the programs give or (the planner sends mesh dims)
// from their meshes.
absl::StatusOr<std::map<int, std::vector<int>>> Groups(const std::vector<v1::Program>& programs) {
  std::map<int, std::vector<int>> groups;
  for (const v1::Program& p : programs) {
    v1::Program resolved;
    *resolved.mutable_mesh() = p.mesh();
    resolved.set_rank(p.rank());
    *resolved.mutable_groups() = p.groups();
    RETURN_IF_ERROR(ResolveGroupRanks(&resolved));
    for (const v1::CommGroup& g : resolved.groups()) {
      groups[g.id()].assign(g.ranks().begin(), g.ranks().end());
    }
  }
  return groups;
}

// -1 for an index that names no buffer, so such a transfer matches no well-formed peer.
int64_t Elements(const v1::Program& p, int buffer) {
  if (buffer < 0 || buffer >= p.buffers_size()) return -1;
  return BufferElements(p.buffers(buffer));
}

}  // namespace

absl::StatusOr<std::vector<std::vector<v1::Instruction>>> OrderTransfers(
    const std::vector<std::vector<TransferBatch>>& ranks,
    const std::map<int, std::vector<int>>& groups) {
  Simulation sim(ranks, groups);
  absl::Status s = sim.Run();
  if (!s.ok()) return s;
  return sim.TakeOrder();
}

absl::Status CheckDeadlockFree(const std::vector<v1::Program>& programs) {
  std::vector<std::vector<TransferBatch>> ranks(programs.size());
  for (size_t r = 0; r < programs.size(); ++r) {
    if (programs[r].rank() != static_cast<int>(r)) {
      return absl::InternalError(absl::StrCat("program ", r, " is for rank ", programs[r].rank()));
    }
    for (const v1::Instruction& ins : programs[r].instructions()) ranks[r].push_back({ins});
  }
  ASSIGN_OR_RETURN(const auto groups, Groups(programs));
  Simulation sim(ranks, groups);
  return sim.Run();
}

absl::Status CheckTransfersMatch(const std::vector<v1::Program>& programs) {
  ASSIGN_OR_RETURN(const auto groups, Groups(programs));
  // (sender, receiver, group, tag) -> elements of each side's transfers.
  using Key = std::tuple<int, int, int, uint32_t>;
  std::map<Key, std::vector<int64_t>> sends, recvs;
  for (const v1::Program& p : programs) {
    for (int i = 0; i < p.instructions_size(); ++i) {
      const v1::Instruction& ins = p.instructions(i);
      if (!IsTransfer(ins.op())) continue;
      auto it = groups.find(ins.group());
      if (it == groups.end() || ins.peer() < 0 ||
          ins.peer() >= static_cast<int>(it->second.size())) {
        return absl::FailedPreconditionError(absl::StrCat("rank ", p.rank(), " instruction ", i,
                                                          ": ", Describe(ins),
                                                          " names no member of its group"));
      }
      const int peer = it->second[ins.peer()];
      if (ins.op() == v1::Instruction::SEND) {
        sends[Key{p.rank(), peer, ins.group(), ins.tag()}].push_back(
            Elements(p, ins.inputs_size() > 0 ? ins.inputs(0) : -1));
      } else {
        recvs[Key{peer, p.rank(), ins.group(), ins.tag()}].push_back(
            Elements(p, ins.outputs_size() > 0 ? ins.outputs(0) : -1));
      }
    }
  }
  auto name = [](const Key& k) {
    return absl::StrCat("rank ", std::get<0>(k), " -> rank ", std::get<1>(k), " tag ",
                        std::get<3>(k), " on group ", std::get<2>(k));
  };
  for (const auto& [key, sizes] : sends) {
    auto it = recvs.find(key);
    if (sizes.size() != 1 || it == recvs.end() || it->second.size() != 1) {
      return absl::FailedPreconditionError(
          absl::StrCat(name(key), ": ", sizes.size(), " sends and ",
                       it == recvs.end() ? 0 : it->second.size(), " receives (want 1 and 1)"));
    }
    if (sizes[0] != it->second[0]) {
      return absl::FailedPreconditionError(absl::StrCat(name(key), ": sends ", sizes[0],
                                                        " elements, receives ", it->second[0]));
    }
  }
  for (const auto& [key, sizes] : recvs) {
    if (sends.count(key) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(name(key), ": a receive with no send"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckStages(const std::vector<v1::Program>& stages, int pipeline_dim) {
  // The stages as ranks 0..n-1 of one group along the pipeline dim (a member's index in it is its
  // stage); every other collective completes where it stands.
  std::vector<v1::Program> renumbered = stages;
  std::vector<int> members;
  int pipe_group = -1;
  for (size_t s = 0; s < stages.size(); ++s) {
    members.push_back(static_cast<int>(s));
    v1::Program& p = renumbered[s];
    std::set<int> pipe;
    for (const v1::CommGroup& g : p.groups()) {
      if (pipeline_dim >= 0 && g.dims_size() == 1 && g.dims(0) == pipeline_dim) pipe.insert(g.id());
    }
    if (!pipe.empty()) pipe_group = *pipe.begin();
    for (v1::Instruction& ins : *p.mutable_instructions()) {
      if (IsCollective(ins.op()) && pipe.count(ins.group()) == 0) ins.set_op(Instruction::FILL);
    }
    p.clear_groups();
    p.set_rank(static_cast<int>(s));
    p.mutable_mesh()->clear_shape();
    p.mutable_mesh()->add_shape(static_cast<int64_t>(stages.size()));
    p.mutable_mesh()->clear_dim_names();
    p.mutable_mesh()->add_dim_names("stage");
  }
  for (v1::Program& p : renumbered) {
    v1::CommGroup* g = p.add_groups();
    g->set_id(pipe_group);
    for (int m : members) g->add_ranks(m);
  }
  RETURN_IF_ERROR(CheckTransfersMatch(renumbered));
  return CheckDeadlockFree(renumbered);
}

}  // namespace weft::planner::pipeline
