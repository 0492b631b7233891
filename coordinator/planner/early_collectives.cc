#include "coordinator/planner/early_collectives.h"

#include <set>
#include <utility>
#include <vector>

#include "common/program.h"

namespace weft::planner {
namespace {

using v1::Instruction;

// The buffers an instruction reads and writes (common/program.h), as sets.
struct Access {
  std::set<int> reads, writes;
};

Access AccessOf(const Instruction& ins) {
  const BufferAccess a = InstructionAccess(ins);
  return {std::set<int>(a.reads.begin(), a.reads.end()),
          std::set<int>(a.writes.begin(), a.writes.end())};
}

bool Intersects(const std::set<int>& a, const std::set<int>& b) {
  for (int x : a) {
    if (b.count(x) > 0) return true;
  }
  return false;
}

// True when the collective `c` must stay after instruction `other`: other writes what c reads,
// or touches what c writes, or is a SEND, a RECV or a collective on another group.
bool MustFollow(const Instruction& c_ins, const Access& c, const Instruction& other_ins,
                const Access& other) {
  if (other_ins.op() == Instruction::SEND || other_ins.op() == Instruction::RECV) return true;
  if (IsCollective(other_ins.op()) && other_ins.group() != c_ins.group()) return true;
  return Intersects(other.writes, c.reads) || Intersects(other.writes, c.writes) ||
         Intersects(other.reads, c.writes);
}

// Whether collective `ins` gathers a parameter for use (ZeRO-3, or a placement a layer needs): it
// reads a PARAM buffer.
bool GathersParameter(const v1::Program& program, const Access& access) {
  for (int b : access.reads) {
    if (b >= 0 && b < program.buffers_size() &&
        program.buffers(b).role() == v1::Buffer::PARAM) {
      return true;
    }
  }
  return false;
}

}  // namespace

int StartCollectivesEarly(v1::Program* program) {
  auto* instructions = program->mutable_instructions();
  std::vector<Instruction> order(instructions->begin(), instructions->end());
  std::vector<Access> access;
  access.reserve(order.size());
  for (const Instruction& ins : order) access.push_back(AccessOf(ins));
  // A parameter gather starts at most one gather ahead: not before the first computation that
  // reads the previous gather's result (through any collectives that reshard it further).
  // Otherwise every gather, reading only parameters, would move to the top and all the
  // parameters would be whole at once.
  std::vector<bool> gathers(order.size(), false), first_reader(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    if (!IsCollective(order[i].op()) || !GathersParameter(*program, access[i])) continue;
    gathers[i] = true;
    std::set<int> value = access[i].writes;
    for (size_t j = i + 1; j < order.size(); ++j) {
      if (!Intersects(access[j].reads, value)) continue;
      if (IsCollective(order[j].op())) {
        value.insert(access[j].writes.begin(), access[j].writes.end());
        continue;
      }
      first_reader[j] = true;
      break;
    }
  }
  int moved = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    if (!IsCollective(order[i].op())) continue;
    size_t to = i;
    while (to > 0 && !MustFollow(order[i], access[i], order[to - 1], access[to - 1]) &&
           !(gathers[i] && first_reader[to - 1])) {
      --to;
    }
    if (to == i) continue;
    // Rotate [to, i] right by one: the collective lands at `to`.
    Instruction collective = std::move(order[i]);
    Access collective_access = std::move(access[i]);
    const bool collective_gathers = gathers[i];
    const bool collective_first = first_reader[i];
    for (size_t j = i; j > to; --j) {
      order[j] = std::move(order[j - 1]);
      access[j] = std::move(access[j - 1]);
      gathers[j] = gathers[j - 1];
      first_reader[j] = first_reader[j - 1];
    }
    order[to] = std::move(collective);
    access[to] = std::move(collective_access);
    gathers[to] = collective_gathers;
    first_reader[to] = collective_first;
    ++moved;
  }
  instructions->Clear();
  for (Instruction& ins : order) *instructions->Add() = std::move(ins);
  return moved;
}

}  // namespace weft::planner
