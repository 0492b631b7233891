#include "planner/buckets.h"

#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/program.h"

namespace weft::planner {
namespace {

using v1::Instruction;

// A small parameter gradient's all-reduce: one input and one output, no packing of its own.
bool Candidate(const v1::Program& p, const Instruction& ins) {
  return ins.op() == Instruction::ALL_REDUCE && ins.phase() == Instruction::OPTIMIZER &&
         ins.inputs_size() == 1 && ins.outputs_size() == 1 && !ins.has_scratch() &&
         ins.inputs(0) >= 0 && ins.inputs(0) < p.buffers_size() && ins.outputs(0) >= 0 &&
         ins.outputs(0) < p.buffers_size() &&
         p.buffers(ins.inputs(0)).role() == v1::Buffer::GRAD &&
         BufferBytes(p.buffers(ins.inputs(0))) < kAloneBytes;
}

using Key = std::tuple<int, int, int>;  // group, reduce, dtype

struct Bucket {
  std::vector<int> members;  // instruction indexes, in order
  std::set<int> buffers;     // the members' inputs and outputs
  int64_t bytes = 0;
};

}  // namespace

int FuseGradientAllReduces(v1::Program* program, int64_t bucket_bytes) {
  if (bucket_bytes <= 0) return 0;
  const v1::Program& p = *program;
  const int n = p.instructions_size();
  std::map<Key, Bucket> open;
  std::vector<Bucket> closed;
  auto close = [&](std::map<Key, Bucket>::iterator it) {
    closed.push_back(std::move(it->second));
    return open.erase(it);
  };
  for (int i = 0; i < n; ++i) {
    const Instruction& ins = p.instructions(i);
    const bool candidate = Candidate(p, ins);
    const Key key = candidate ? Key{ins.group(), ins.reduce(), p.buffers(ins.inputs(0)).dtype()}
                              : Key{-1, -1, -1};
    // Buckets whose later members would pass this instruction close before it.
    const bool transfer = ins.op() == Instruction::SEND || ins.op() == Instruction::RECV;
    const BufferAccess access = InstructionAccess(ins);
    for (auto it = open.begin(); it != open.end();) {
      if (candidate && it->first == key) {
        ++it;
        continue;
      }
      bool stop = transfer || (IsCollective(ins.op()) && ins.group() != std::get<0>(it->first));
      for (const std::vector<int>* ids : {&access.reads, &access.writes}) {
        for (int id : *ids) stop = stop || it->second.buffers.count(id) > 0;
      }
      it = stop ? close(it) : std::next(it);
    }
    if (!candidate) continue;
    Bucket& b = open[key];
    b.members.push_back(i);
    b.buffers.insert(ins.inputs(0));
    b.buffers.insert(ins.outputs(0));
    b.bytes += BufferBytes(p.buffers(ins.inputs(0)));
    if (b.bytes >= bucket_bytes) close(open.find(key));
  }
  for (auto it = open.begin(); it != open.end();) it = close(it);

  // Each bucket of two or more becomes one instruction where its last member stands.
  std::map<int, const Bucket*> at_last;
  std::set<int> dropped;
  for (const Bucket& b : closed) {
    if (b.members.size() < 2) continue;
    at_last[b.members.back()] = &b;
    dropped.insert(b.members.begin(), b.members.end() - 1);
  }
  if (at_last.empty()) return 0;
  std::vector<Instruction> order;
  order.reserve(n);
  int fused = 0;
  for (int i = 0; i < n; ++i) {
    if (dropped.count(i) > 0) continue;
    auto bucket = at_last.find(i);
    if (bucket == at_last.end()) {
      order.push_back(p.instructions(i));
      continue;
    }
    Instruction ins = p.instructions(i);
    ins.clear_inputs();
    ins.clear_outputs();
    std::vector<std::string> names;
    int64_t elements = 0;
    for (int m : bucket->second->members) {
      const Instruction& member = p.instructions(m);
      ins.add_inputs(member.inputs(0));
      ins.add_outputs(member.outputs(0));
      names.push_back(p.buffers(member.inputs(0)).name());
      elements += BufferElements(p.buffers(member.inputs(0)));
    }
    v1::Buffer* pack = program->add_buffers();
    pack->set_id(program->buffers_size() - 1);
    pack->set_name(absl::StrCat("bucket", fused, ".scratch"));
    pack->add_shape(elements);
    pack->set_role(v1::Buffer::SCRATCH);
    pack->set_dtype(program->buffers(ins.inputs(0)).dtype());
    ins.set_scratch(pack->id());
    // The first and last gradients name the bucket; the instruction lists them all.
    ins.set_comment(absl::StrCat("bucket ", fused, " of ", names.size(), " gradients: ",
                                 names.front(), names.size() > 2 ? " ... " : ", ",
                                 names.back()));
    order.push_back(std::move(ins));
    ++fused;
  }
  program->clear_instructions();
  for (Instruction& ins : order) *program->add_instructions() = std::move(ins);
  return fused;
}

}  // namespace weft::planner
