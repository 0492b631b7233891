#include "planner/early_collectives.h"

#include <algorithm>
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
  // An instruction with what it touches and its part in the prefetch limit below.
  struct Entry {
    Instruction ins;
    Access access;
    bool gathers = false;       // a collective that gathers a parameter
    bool first_reader = false;  // the first computation reading a gather's value
  };
  std::vector<Entry> order;
  order.reserve(program->instructions_size());
  for (const Instruction& ins : program->instructions()) order.push_back({ins, AccessOf(ins)});
  // A parameter gather starts at most one gather ahead: not before the first computation that
  // reads the previous gather's result (through any collectives that reshard it further).
  // Otherwise every gather, reading only parameters, would move to the top and all the
  // parameters would be whole at once.
  for (size_t i = 0; i < order.size(); ++i) {
    if (!IsCollective(order[i].ins.op()) || !GathersParameter(*program, order[i].access)) continue;
    order[i].gathers = true;
    std::set<int> value = order[i].access.writes;
    for (size_t j = i + 1; j < order.size(); ++j) {
      if (!Intersects(order[j].access.reads, value)) continue;
      if (IsCollective(order[j].ins.op())) {
        value.insert(order[j].access.writes.begin(), order[j].access.writes.end());
        continue;
      }
      order[j].first_reader = true;
      break;
    }
  }
  // Moves happen on positions, not on the entries (each holds an Instruction): a rotation of ints.
  std::vector<size_t> at(order.size());
  for (size_t i = 0; i < at.size(); ++i) at[i] = i;
  int moved = 0;
  for (size_t i = 0; i < at.size(); ++i) {
    const Entry& c = order[at[i]];
    if (!IsCollective(c.ins.op())) continue;
    size_t to = i;
    while (to > 0) {
      const Entry& before = order[at[to - 1]];
      if (MustFollow(c.ins, c.access, before.ins, before.access) ||
          (c.gathers && before.first_reader)) {
        break;
      }
      --to;
    }
    if (to == i) continue;
    // The collective lands at `to`, the instructions in between move down by one.
    std::rotate(at.begin() + static_cast<std::ptrdiff_t>(to),
                at.begin() + static_cast<std::ptrdiff_t>(i),
                at.begin() + static_cast<std::ptrdiff_t>(i) + 1);
    ++moved;
  }
  auto* instructions = program->mutable_instructions();
  instructions->Clear();
  for (size_t i : at) *instructions->Add() = std::move(order[i].ins);
  return moved;
}

}  // namespace weft::planner
