#include "common/program.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
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

bool IsCollective(v1::Instruction::Op op) {
  return op == v1::Instruction::ALL_REDUCE || op == v1::Instruction::ALL_GATHER ||
         op == v1::Instruction::REDUCE_SCATTER || op == v1::Instruction::ALL_TO_ALL;
}

BufferAccess InstructionAccess(const v1::Instruction& ins) {
  BufferAccess a;
  a.reads.assign(ins.inputs().begin(), ins.inputs().end());
  a.writes.assign(ins.outputs().begin(), ins.outputs().end());
  if (ins.op() == v1::Instruction::ACCUMULATE) {
    a.reads.insert(a.reads.end(), ins.outputs().begin(), ins.outputs().end());
  }
  auto updates = [&](std::initializer_list<int> positions) {
    for (int i : positions) {
      if (i < ins.inputs_size()) a.writes.push_back(ins.inputs(i));
    }
  };
  if (ins.op() == v1::Instruction::SGD) updates({0});
  if (ins.op() == v1::Instruction::ADAMW) updates({0, 2, 3});
  if (ins.has_scratch()) a.writes.push_back(ins.scratch());
  return a;
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
  for (int i = 0; i < program.instructions_size(); ++i) {
    const BufferAccess access = InstructionAccess(program.instructions(i));
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
  // The worker reads the loss after the last instruction.
  const int loss = program.loss_buffer();
  if (loss >= 0 && loss < n && lives[loss].first >= 0) {
    lives[loss].last = program.instructions_size() - 1;
  }
  return lives;
}

bool AliveTogether(const BufferLife& a, const BufferLife& b) {
  if (a.carried || b.carried || a.first < 0 || b.first < 0) return true;
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace weft
