#include "planner/format.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/kernel_scratch.h"

namespace weft::planner {
namespace {

std::string BufferRef(const v1::Program& p, int id) {
  if (id < 0 || id >= p.buffers_size()) return absl::StrCat("b", id, "?");
  const v1::Buffer& b = p.buffers(id);
  return absl::StrCat("b", id, " ", b.name(), "[", absl::StrJoin(b.shape(), ","), "]",
                      b.dtype() == v1::F32 ? "" : absl::StrCat(" ", DTypeName(b.dtype())));
}

std::string Bytes(int64_t n) {
  if (n >= (int64_t{1} << 20)) return absl::StrFormat("%.1f MiB", n / 1048576.0);
  if (n >= 1024) return absl::StrFormat("%.1f KiB", n / 1024.0);
  return absl::StrCat(n, " B");
}

// One line per instruction of `list` (the step's or the evaluation's), adding their collectives'
// bytes and count to the totals.
void AppendInstructions(const v1::Program& p,
                        const google::protobuf::RepeatedPtrField<v1::Instruction>& list,
                        std::string* out, int64_t* total_bytes, int* collectives) {
  std::string& s = *out;
  for (int i = 0; i < list.size(); ++i) {
    const v1::Instruction& ins = list.Get(i);
    std::vector<std::string> ins_refs, out_refs;
    for (int b : ins.inputs()) ins_refs.push_back(BufferRef(p, b));
    for (int b : ins.outputs()) out_refs.push_back(BufferRef(p, b));
    std::string name = v1::Instruction::Op_Name(ins.op());
    if (ins.transpose_a()) absl::StrAppend(&name, "(T,)");
    if (ins.transpose_b()) absl::StrAppend(&name, "(,T)");
    absl::StrAppend(&s, absl::StrFormat("  %3d %-15s %s", i, name, absl::StrJoin(ins_refs, ", ")));
    if (!out_refs.empty()) absl::StrAppend(&s, " -> ", absl::StrJoin(out_refs, ", "));
    if (IsCollective(ins.op())) {
      const int64_t bytes = CollectiveBytes(p, ins);
      const v1::CommGroup* g = FindGroup(p, ins.group());
      absl::StrAppend(&s, "  [g", ins.group(), " ", g ? g->mesh_dims() : "?", ", ",
                      Bytes(bytes), " sent]");
      *total_bytes += bytes;
      ++*collectives;
    }
    if (ins.op() == v1::Instruction::SEND || ins.op() == v1::Instruction::RECV) {
      const v1::CommGroup* g = FindGroup(p, ins.group());
      const std::vector<int> members = g != nullptr ? GroupMembers(p, *g) : std::vector<int>();
      const int peer = ins.peer() >= 0 && ins.peer() < static_cast<int>(members.size())
                           ? members[ins.peer()]
                           : -1;
      absl::StrAppend(&s, "  [g", ins.group(), " ", ins.op() == v1::Instruction::SEND ? "to" : "from",
                      " rank ", peer, " tag ", ins.tag(), "]");
    }
    if (ins.micro_batch() >= 0) {
      absl::StrAppend(&s, "  [mb", ins.micro_batch(), " c", ins.chunk(), "]");
    }
    if (ins.op() == v1::Instruction::SLICE) {
      absl::StrAppend(&s, "  [axis ", ins.axis(), " ", ins.offset(), "+", ins.length(), "]");
    }
    if (!ins.comment().empty()) absl::StrAppend(&s, "  # ", ins.comment());
    absl::StrAppend(&s, "\n");
  }
}

}  // namespace

const v1::CommGroup* FindGroup(const v1::Program& program, int group_id) {
  for (const v1::CommGroup& g : program.groups()) {
    if (g.id() == group_id) return &g;
  }
  return nullptr;
}

int64_t CollectiveBytes(const v1::Program& p, const v1::Instruction& ins) {
  const v1::CommGroup* group = FindGroup(p, ins.group());
  if (group == nullptr) return 0;
  return CollectiveBytes(p, ins, GroupMembers(p, *group));
}

int64_t CollectiveBytes(const v1::Program& p, const v1::Instruction& ins,
                        const std::vector<int>& members) {
  if (!IsCollective(ins.op()) || ins.inputs_size() == 0 || ins.outputs_size() == 0) return 0;
  const int64_t k = static_cast<int64_t>(members.size());
  if (k == 0) return 0;
  const int64_t in = BufferBytes(p.buffers(ins.inputs(0)));
  const int64_t out = BufferBytes(p.buffers(ins.outputs(0)));
  switch (ins.op()) {
    case v1::Instruction::ALL_REDUCE: {
      // A bucket reduces all its inputs at once.
      int64_t all = 0;
      for (int id : ins.inputs()) all += BufferBytes(p.buffers(id));
      return 2 * (k - 1) * all / k;
    }
    case v1::Instruction::ALL_GATHER:
      return out * (k - 1) / k;
    case v1::Instruction::REDUCE_SCATTER:
      return in * (k - 1) / k;
    case v1::Instruction::ALL_TO_ALL: {
      // Every piece but this member's own leaves the rank.
      int64_t total = 0;
      for (int64_t len : ins.split_sizes()) total += len;
      auto me = std::find(members.begin(), members.end(), p.rank());
      const int index = static_cast<int>(me - members.begin());
      if (ins.split_sizes_size() != k || total == 0 || index >= k) return in * (k - 1) / k;
      return in * (total - ins.split_sizes(index)) / total;
    }
    default:
      return in * (k - 1) / k;
  }
}

std::string FormatProgram(const v1::Program& p) {
  std::string s;
  absl::StrAppend(&s, "rank ", p.rank(), "/", p.world_size(), "  job ", p.job_id(), " attempt ",
                  p.attempt(), "  mesh [", absl::StrJoin(p.mesh().shape(), ","), "](",
                  absl::StrJoin(p.mesh().dim_names(), ","), ")  device ",
                  p.device().empty() ? "cpu" : p.device(),
                  p.precision() == "bf16" ? "  precision bf16" : "",
                  p.allow_tf32() ? "  tf32" : "", "\n");
  absl::StrAppend(&s, "groups:\n");
  for (const v1::CommGroup& g : p.groups()) {
    absl::StrAppend(&s, "  g", g.id(), " over ", g.mesh_dims(), ": ranks [",
                    absl::StrJoin(GroupMembers(p, g), ","), "]\n");
  }
  absl::StrAppend(&s, "init:\n");
  for (const v1::ParamInit& init : p.init()) {
    absl::StrAppend(&s, "  ", BufferRef(p, init.buffer()), " ",
                    v1::ParamInit::Kind_Name(init.kind()));
    if (init.kind() == v1::ParamInit::UNIFORM) absl::StrAppend(&s, "(bound ", init.bound(), ")");
    absl::StrAppend(&s, " of global [", absl::StrJoin(init.global_shape(), ","), "] at [",
                    absl::StrJoin(init.box().offsets(), ","), "]\n");
  }
  absl::StrAppend(&s, "step:\n");
  int64_t total_bytes = 0;
  int collectives = 0;
  AppendInstructions(p, p.instructions(), &s, &total_bytes, &collectives);
  if (p.has_eval()) {
    const v1::EvalProgram& eval = p.eval();
    const std::string when = eval.every() > 0
                                 ? absl::StrCat("every ", eval.every(), " steps and the last")
                                 : std::string("the last step");
    absl::StrAppend(&s, "eval, after ", when, ", ", eval.batches(),
                    " batch(es) each, loss in b", eval.loss_buffer(), ":\n");
    int64_t eval_bytes = 0;
    int eval_collectives = 0;
    AppendInstructions(p, eval.instructions(), &s, &eval_bytes, &eval_collectives);
  }
  std::map<std::string, int64_t> by_role;
  for (const v1::Buffer& b : p.buffers()) by_role[v1::Buffer::Role_Name(b.role())] += BufferBytes(b);
  absl::StrAppend(&s, "totals: ", p.instructions_size(), " instructions, ", collectives,
                  " collectives, ", Bytes(total_bytes), " sent per step; memory ",
                  Bytes(PlannedPeakBytes(p)), " at the peak (an arena of ", Bytes(p.arena_bytes()),
                  " whose buffers share bytes by liveness, and the kernels' scratch of ",
                  Bytes(p.kernel_scratch_bytes()), "; buffers by role: ");
  std::vector<std::string> parts;
  for (const auto& [role, bytes] : by_role) parts.push_back(absl::StrCat(role, " ", Bytes(bytes)));
  absl::StrAppend(&s, absl::StrJoin(parts, ", "), "), loss in b", p.loss_buffer(), "\n");
  return s;
}

}  // namespace weft::planner
