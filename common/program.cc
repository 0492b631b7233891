#include "common/program.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checked_math.h"
#include "common/dtype.h"
#include "common/instruction_def.h"
#include "common/mesh.h"
#include "common/status.h"

namespace weft {

absl::Status ResolveGroupRanks(v1::Program* program) {
  bool any = false;
  for (const v1::CommGroup& group : program->groups()) any = any || group.ranks_size() == 0;
  if (!any) return absl::OkStatus();
  ASSIGN_OR_RETURN(Mesh mesh, Mesh::FromProto(program->mesh()));
  if (program->rank() < 0 || program->rank() >= mesh.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", program->rank(), " is not in mesh ",
                                                   mesh.ToString()));
  }
  for (v1::CommGroup& group : *program->mutable_groups()) {
    if (group.ranks_size() > 0) continue;
    if (group.dims_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("group ", group.id(), " gives neither ranks nor mesh dims"));
    }
    std::vector<int> dims;
    for (int d : group.dims()) {
      if (d < 0 || d >= mesh.ndim()) {
        return absl::InvalidArgumentError(absl::StrCat("group ", group.id(), ": mesh dim ", d,
                                                       " is not in mesh ", mesh.ToString()));
      }
      dims.push_back(d);
    }
    for (int r : mesh.GroupRanks(program->rank(), dims)) group.add_ranks(r);
  }
  return absl::OkStatus();
}

std::vector<int> GroupMembers(const v1::Program& program, const v1::CommGroup& group) {
  if (group.ranks_size() > 0) return std::vector<int>(group.ranks().begin(), group.ranks().end());
  absl::StatusOr<Mesh> mesh = Mesh::FromProto(program.mesh());
  if (!mesh.ok() || program.rank() < 0 || program.rank() >= mesh->size()) return {};
  std::vector<int> dims;
  for (int d : group.dims()) {
    if (d < 0 || d >= mesh->ndim()) return {};
    dims.push_back(d);
  }
  if (dims.empty()) return {};
  return mesh->GroupRanks(program.rank(), dims);
}

int64_t BufferElements(const v1::Buffer& buffer) {
  int64_t n = 1;
  for (int64_t d : buffer.shape()) n *= d;
  return n;
}

int64_t BufferBytes(const v1::Buffer& buffer) {
  return DTypeSize(buffer.dtype()) * BufferElements(buffer);
}

absl::StatusOr<int64_t> CheckedBufferBytes(const v1::Buffer& buffer) {
  // Named only on overflow: the memory planner checks every buffer of every Program it lays out.
  auto what = [&] { return absl::StrCat("buffer ", buffer.id(), " '", buffer.name(), "'"); };
  ASSIGN_OR_RETURN(const int64_t elements, CheckedProduct(buffer.shape(), what));
  return CheckedMul(elements, DTypeSize(buffer.dtype()), [&] {
    return absl::StrCat(what(), " elements × ", DTypeName(buffer.dtype()), " bytes");
  });
}

bool IsCollective(v1::Instruction::Op op) { return FindInstructionDef(op).collective; }

BufferAccess InstructionAccess(const v1::Instruction& ins) {
  const InstructionDef& def = FindInstructionDef(ins.op());
  BufferAccess a;
  a.reads.assign(ins.inputs().begin(), ins.inputs().end());
  a.writes.assign(ins.outputs().begin(), ins.outputs().end());
  if (def.reads_outputs) a.reads.insert(a.reads.end(), ins.outputs().begin(), ins.outputs().end());
  for (int i : def.writes_inputs) {
    if (i < ins.inputs_size()) a.writes.push_back(ins.inputs(i));
  }
  if (ins.has_scratch()) a.writes.push_back(ins.scratch());
  return a;
}

bool ComputesInF32(v1::Instruction::Op op) { return FindInstructionDef(op).computes_in_f32; }

std::vector<WidenedOperand> WidenedOperands(
    const google::protobuf::RepeatedPtrField<v1::Buffer>& buffers, const v1::Instruction& ins) {
  std::vector<WidenedOperand> widened;
  if (!ComputesInF32(ins.op())) return widened;
  const BufferAccess access = InstructionAccess(ins);
  auto in = [](const std::vector<int>& ids, int id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  auto widen = [&](int id) {
    if (id < 0 || id >= buffers.size() || buffers.Get(id).dtype() != v1::BF16) return;
    for (const WidenedOperand& w : widened) {
      if (w.buffer == id) return;
    }
    WidenedOperand w;
    w.buffer = id;
    w.offset = ArenaAligned(WidenedBytes(widened));
    w.elements = BufferElements(buffers.Get(id));
    w.read = in(access.reads, id);
    w.written = in(access.writes, id);
    widened.push_back(w);
  };
  for (int id : ins.inputs()) widen(id);
  for (int id : ins.outputs()) widen(id);
  return widened;
}

std::vector<WidenedOperand> WidenedOperands(const v1::Program& program,
                                            const v1::Instruction& ins) {
  return WidenedOperands(program.buffers(), ins);
}

int64_t WidenedBytes(const std::vector<WidenedOperand>& widened) {
  if (widened.empty()) return 0;
  return widened.back().offset + widened.back().elements * DTypeSize(v1::F32);
}

std::vector<BufferLife> BufferLives(const v1::Program& program) {
  const int n = program.buffers_size();
  std::vector<BufferLife> lives(n);
  std::vector<bool> written(n, false);
  auto touch = [&](int b, int i, bool read) {
    if (b < 0 || b >= n) return;
    if (lives[b].first < 0) lives[b].first = i;
    lives[b].last = i;
    if (read && !written[b]) lives[b].carried = true;
  };
  // The evaluation's instructions run after the step's, numbered on from them.
  const int steps = program.instructions_size();
  const int total = steps + program.eval().instructions_size();
  for (int i = 0; i < total; ++i) {
    const BufferAccess access = InstructionAccess(
        i < steps ? program.instructions(i) : program.eval().instructions(i - steps));
    for (int b : access.reads) touch(b, i, true);
    for (int b : access.writes) touch(b, i, false);
    for (int b : access.writes) {
      if (b >= 0 && b < n) written[b] = true;
    }
  }
  for (int b = 0; b < n; ++b) {
    const v1::Buffer::Role role = program.buffers(b).role();
    if (role == v1::Buffer::PARAM || role == v1::Buffer::OPTIMIZER_STATE) lives[b].carried = true;
  }
  // Checkpoints read and write these between steps.
  for (const v1::CheckpointItem& item : program.checkpoint_items()) {
    if (item.buffer() >= 0 && item.buffer() < n) lives[item.buffer()].carried = true;
  }
  // The worker reads the loss and the gradient norm after the step's last instruction, the eval
  // loss after the evaluation's.
  auto read_after = [&](int b, int last) {
    if (b >= 0 && b < n && lives[b].first >= 0) lives[b].last = std::max(lives[b].last, last);
  };
  read_after(program.loss_buffer(), steps - 1);
  if (program.has_grad_norm_buffer()) read_after(program.grad_norm_buffer(), steps - 1);
  if (program.has_eval()) read_after(program.eval().loss_buffer(), total - 1);
  return lives;
}

bool AliveTogether(const BufferLife& a, const BufferLife& b) {
  if (a.carried || b.carried || a.first < 0 || b.first < 0) return true;
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace weft
