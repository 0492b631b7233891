// DecodeInstruction (step.h) and the checks the ops' decode functions share (Decoder,
// op_registry.h).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/program.h"
#include "common/status.h"
#include "worker/executor/op_registry.h"
#include "worker/executor/step.h"

namespace weft {
namespace {

using v1::Instruction;

template <typename Repeated>
std::vector<int64_t> ToVector(const Repeated& r) {
  return std::vector<int64_t>(r.begin(), r.end());
}

bool IsIds(v1::DType dtype) { return dtype == v1::I32 || dtype == v1::I64; }

// "ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL": the ops that pack through a scratch buffer.
std::string Packers() {
  std::vector<std::string> names;
  for (Instruction::Op op : BuiltinOps().ops()) {
    if (BuiltinOps().Find(op)->packs) names.push_back(Instruction::Op_Name(op));
  }
  if (names.size() < 2) return absl::StrJoin(names, "");
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " and ", last);
}

}  // namespace

Decoder::Decoder(const DecodeContext& ctx, Step* s)
    : ctx_(ctx), buffers_(ctx.buffers), s_(s), ins_(ctx.program.instructions(s->index)) {}

std::string Decoder::Named(absl::string_view role, int id) const {
  return absl::StrCat(role, " (", buffers_.Describe(id), ")");
}

std::string Decoder::OpName() const { return Instruction::Op_Name(ins_.op()); }

absl::Status Decoder::CheckIds() const {
  const int nbuf = buffers_.size();
  for (int id : ins_.inputs()) {
    if (id < 0 || id >= nbuf) return Bad("input buffer id ", id, " out of range");
  }
  for (int id : ins_.outputs()) {
    if (id < 0 || id >= nbuf) return Bad("output buffer id ", id, " out of range");
  }
  if (ins_.has_scratch() && (ins_.scratch() < 0 || ins_.scratch() >= nbuf)) {
    return Bad("scratch buffer id ", ins_.scratch(), " out of range");
  }
  return absl::OkStatus();
}

absl::Status Decoder::CheckTypes(const ElementTypes& types) {
  struct Part {
    std::string what;  // "input 1"
    int id;
    bool output;
    bool ids;  // holds ids (ElementTypes::ids_input, ids_output)
  };
  std::vector<Part> all;
  for (int i = 0; i < ins_.inputs_size(); ++i) {
    all.push_back({absl::StrCat("input ", i), ins_.inputs(i), false, i == types.ids_input});
  }
  for (int i = 0; i < ins_.outputs_size(); ++i) {
    all.push_back(
        {absl::StrCat("output ", i), ins_.outputs(i), true, i == 0 && types.ids_output});
  }
  const std::string op = OpName();
  switch (types.rule) {
    case ElementTypes::kF32:
      s_->dtype = v1::F32;
      for (const Part& p : all) {
        const v1::DType t = buffers_.dtype(p.id);
        if (p.ids) {
          if (!IsIds(t)) {
            return Bad(Named(p.what, p.id), " is ", DTypeName(t), "; ", op, "'s ids are i32 or i64");
          }
          if (p.output) {
            s_->dtype = t;
          } else {
            s_->ids_dtype = t;
          }
        } else if (t != v1::F32 && t != v1::BF16) {
          return Bad(Named(p.what, p.id), " is ", DTypeName(t), "; ", op,
                     " computes in f32 (bf16 operands are widened)");
        }
      }
      break;
    case ElementTypes::kOne:
      if (all.empty()) break;
      s_->dtype = buffers_.dtype(all[0].id);
      for (const Part& p : all) {
        if (buffers_.dtype(p.id) != s_->dtype) {
          return Bad(op, " moves one dtype: ", Named(all[0].what, all[0].id), " is ",
                     DTypeName(s_->dtype), " but ", Named(p.what, p.id), " is ",
                     DTypeName(buffers_.dtype(p.id)));
        }
      }
      break;
    case ElementTypes::kOutput:
    case ElementTypes::kSource:
      if (ins_.outputs_size() > 0) s_->dtype = buffers_.dtype(ins_.outputs(0));
      break;
    case ElementTypes::kCast:
      if (ins_.inputs_size() > 0) s_->from = buffers_.dtype(ins_.inputs(0));
      if (ins_.outputs_size() > 0) s_->dtype = buffers_.dtype(ins_.outputs(0));
      break;
  }
  s_->element_bytes = DTypeSize(s_->dtype);
  return absl::OkStatus();
}

absl::Status Decoder::Need(int n_in, int n_out) {
  if (ins_.inputs_size() != n_in || ins_.outputs_size() != n_out) {
    return Bad("expects ", n_in, " inputs and ", n_out, " outputs, got ", ins_.inputs_size(),
               " and ", ins_.outputs_size());
  }
  s_->in.assign(ins_.inputs().begin(), ins_.inputs().end());
  s_->outs.assign(ins_.outputs().begin(), ins_.outputs().end());
  s_->out = n_out > 0 ? s_->outs[0] : -1;
  return absl::OkStatus();
}

absl::Status Decoder::Elementwise(int n_in) {
  RETURN_IF_ERROR(Need(n_in, 1));
  s_->numel = numel(s_->in[0]);
  s_->scale = ins_.scale();
  if (n_in == 2) RETURN_IF_ERROR(SameNumel(s_->in[0], s_->in[1], "a", "b"));
  return SameNumel(s_->in[0], s_->out, "input", "output");
}

absl::Status Decoder::SameNumel(int a, int b, absl::string_view an, absl::string_view bn) const {
  if (numel(a) != numel(b)) {
    return Bad(an, " (buffer ", a, " '", buffers_.name(a), "') is ", Dims(shape(a)), " but ", bn,
               " (buffer ", b, " '", buffers_.name(b), "') is ", Dims(shape(b)));
  }
  return absl::OkStatus();
}

absl::Status Decoder::SameShape(int a, int b, absl::string_view an, absl::string_view bn) const {
  if (shape(a) != shape(b)) {
    return Bad(Named(bn, b), " is not the shape of ", Named(an, a));
  }
  return absl::OkStatus();
}

absl::Status Decoder::Holds(int id, absl::string_view role, int64_t want,
                            absl::string_view expected) const {
  if (numel(id) != want) {
    return Bad(Named(role, id), " holds ", numel(id), " elements, expected ", want, " (",
               expected, ")");
  }
  return absl::OkStatus();
}

void Decoder::RowView(int id, int64_t* rows, int64_t* cols) const {
  const auto& sh = shape(id);
  *cols = sh.back();
  *rows = Product(sh, 0, sh.size() - 1);
}

absl::Status Decoder::Apart() const {
  for (size_t i = 0; i < s_->outs.size(); ++i) {
    for (size_t j = 0; j < s_->in.size(); ++j) {
      if (s_->outs[i] == s_->in[j]) {
        return Bad("output ", i, " (", buffers_.Describe(s_->outs[i]), ") is also input ", j,
                   "; ", OpName(), " writes its outputs apart from its inputs");
      }
    }
    for (size_t j = 0; j < i; ++j) {
      if (s_->outs[i] == s_->outs[j]) {
        return Bad("outputs ", j, " and ", i, " are both ", buffers_.Describe(s_->outs[i]));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Decoder::AxisView(int id) {
  const auto& sh = shape(id);
  const int axis = NormalizeAxis(ins_.axis(), static_cast<int>(sh.size()));
  if (axis < 0 || axis >= static_cast<int>(sh.size())) {
    return Bad("axis ", ins_.axis(), " out of range for ", Dims(sh));
  }
  s_->outer = Product(sh, 0, axis);
  s_->axis_len = sh[axis];
  s_->inner = Product(sh, axis + 1);
  return absl::OkStatus();
}

absl::Status Decoder::SameButAxis(int a, int out, int64_t len) const {
  std::vector<int64_t> want = shape(a);
  const int axis = NormalizeAxis(ins_.axis(), static_cast<int>(want.size()));
  want[axis] = len;
  if (shape(out) != want) return Bad("output is ", Dims(shape(out)), ", expected ", Dims(want));
  return absl::OkStatus();
}

absl::Status Decoder::Group() {
  auto it = ctx_.group_index.find(ins_.group());
  if (it == ctx_.group_index.end()) return Bad("group ", ins_.group(), " is not in the program");
  s_->comm = it->second;
  s_->member = ctx_.group_member[it->second];
  return absl::OkStatus();
}

absl::Status Decoder::Splits() {
  const v1::CommGroup& g = ctx_.program.groups(s_->comm);
  if (ins_.split_sizes_size() != g.ranks_size()) {
    return Bad(ins_.split_sizes_size(), " split_sizes for a group of ", g.ranks_size());
  }
  int64_t off = 0;
  for (int64_t len : ins_.split_sizes()) {
    if (len < 0) return Bad("negative split size");
    s_->member_offsets.push_back(off);
    s_->member_lengths.push_back(len);
    off += len;
  }
  return absl::OkStatus();
}

absl::Status Decoder::Reduce(bool max_ok) {
  switch (ins_.reduce()) {
    case v1::Placement::SUM:
      s_->reduce = ReduceOp::kSum;
      return absl::OkStatus();
    case v1::Placement::AVG:
      s_->reduce = ReduceOp::kAvg;
      if (!IsFloatingPoint(s_->dtype)) {
        return Bad("avg of ", buffers_.Describe(s_->in[0]),
                   ": a mean of integers needs a rounding rule; reduce with sum");
      }
      return absl::OkStatus();
    case v1::Placement::MAX:
      if (!max_ok) return Bad(OpName(), " reduces with sum or avg, not max");
      s_->reduce = ReduceOp::kMax;
      return absl::OkStatus();
    default:
      return Bad("unknown reduce ", static_cast<int>(ins_.reduce()));
  }
}

absl::Status Decoder::Packing(int64_t elements) {
  const int64_t bytes = elements * s_->element_bytes;
  return UseScratch(bytes, absl::StrCat(OpName(), " packs ", elements, " elements of ",
                                        DTypeName(s_->dtype), " (", bytes, " bytes) there"));
}

absl::Status Decoder::Widening() {
  s_->widened = WidenedOperands(ctx_.program, ins_);
  if (s_->widened.empty()) return absl::OkStatus();
  const int64_t bytes = WidenedBytes(s_->widened);
  // No compute op packs, so the copies are all the step keeps in its scratch.
  return UseScratch(bytes, absl::StrCat(OpName(), " widens ", s_->widened.size(), " bf16 operand",
                                        s_->widened.size() == 1 ? "" : "s", " to float32 (",
                                        bytes, " bytes) there"));
}

absl::Status Decoder::UseScratch(int64_t bytes, const std::string& use) {
  if (!ins_.has_scratch()) {
    s_->own_scratch_bytes = bytes;
    return absl::OkStatus();
  }
  const int id = ins_.scratch();
  RETURN_IF_ERROR(ScratchApart(id));
  if (buffers_.bytes(id) < bytes) {
    return Bad("scratch ", buffers_.Describe(id), " holds ", buffers_.bytes(id), " bytes; ", use);
  }
  s_->scratch = id;
  return absl::OkStatus();
}

absl::Status Decoder::ScratchApart(int id) const {
  for (const auto* operands : {&ins_.inputs(), &ins_.outputs()}) {
    for (int i = 0; i < operands->size(); ++i) {
      if (operands->Get(i) != id) continue;
      return Bad("scratch ", buffers_.Describe(id), " is also the instruction's ",
                 operands == &ins_.outputs() ? "output " : "input ", i);
    }
  }
  return absl::OkStatus();
}

absl::Status Decoder::Region(int id, absl::string_view role, bool need_global,
                             GlobalBox* box) const {
  const std::vector<int64_t>& sh = shape(id);
  const int rank = static_cast<int>(sh.size());
  if (rank > GlobalBox::kMaxAxes) {
    return Bad(Named(role, id), " has ", rank, " axes; a region has at most ",
               GlobalBox::kMaxAxes);
  }
  const std::vector<int64_t> offsets = ToVector(ins_.box().offsets());
  const std::vector<int64_t> lengths = ToVector(ins_.box().lengths());
  const std::vector<int64_t> global = ToVector(ins_.global_shape());
  const bool has_box = !offsets.empty() || !lengths.empty();
  if (has_box) {
    if (static_cast<int>(offsets.size()) != rank ||
        (!lengths.empty() && static_cast<int>(lengths.size()) != rank)) {
      return Bad("box (offsets ", Dims(offsets), ", lengths ", Dims(lengths),
                 ") is not a region of ", Named(role, id), ": it needs ", rank, " offsets");
    }
    if (!lengths.empty() && lengths != sh) {
      return Bad("box lengths ", Dims(lengths), " are not the shape of ", Named(role, id));
    }
    for (int64_t o : offsets) {
      if (o < 0) return Bad("box offsets ", Dims(offsets), " of ", Named(role, id), " are negative");
    }
  }
  if (!global.empty() && static_cast<int>(global.size()) != rank) {
    return Bad("global_shape ", Dims(global), " has ", global.size(), " axes but ",
               Named(role, id), " has ", rank);
  }
  if (global.empty() && has_box && need_global) {
    return Bad("box at offsets ", Dims(offsets), " of ", Named(role, id),
               " has no global_shape to index");
  }
  const std::vector<int64_t> at = has_box ? offsets : std::vector<int64_t>(rank, 0);
  *box = GlobalBox();
  box->rank = rank;
  for (int a = 0; a < rank; ++a) {
    box->offsets[a] = at[a];
    box->lengths[a] = sh[a];
    box->global[a] = global.empty() ? at[a] + sh[a] : global[a];
    if (at[a] + sh[a] > box->global[a]) {
      return Bad(Named(role, id), " at offsets ", Dims(at), " leaves global_shape ",
                 Dims(global));
    }
  }
  return absl::OkStatus();
}

absl::Status Decoder::Dropout(DropoutSpec* spec) const {
  const float p = ins_.dropout_p();
  if (!(p >= 0.0f && p < 1.0f)) return Bad("dropout_p ", p, " is outside [0, 1)");
  spec->p = p;
  spec->seed = ctx_.program.seed();
  spec->key = ins_.dropout_key();
  spec->step = 0;
  return absl::OkStatus();
}

bool IsCommunication(Instruction::Op op) {
  const OpHandler* h = BuiltinOps().Find(op);
  return h != nullptr && h->communicates;
}

absl::Status DecodeInstruction(const DecodeContext& ctx, Step* step) {
  const Instruction& ins = ctx.program.instructions(step->index);
  step->op = ins.op();
  const OpHandler* handler = BuiltinOps().Find(ins.op());
  if (handler == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown op ", static_cast<int>(ins.op())));
  }
  Decoder d(ctx, step);
  RETURN_IF_ERROR(d.CheckIds());
  RETURN_IF_ERROR(d.CheckTypes(handler->types));
  RETURN_IF_ERROR(handler->decode(d, step));
  if (handler->types.rule == ElementTypes::kF32) RETURN_IF_ERROR(d.Widening());
  if (ins.has_scratch() && !handler->packs && step->widened.empty()) {
    std::string why = absl::StrCat("has scratch buffer ", ins.scratch(), "; only ", Packers(),
                                   " pack through one");
    if (handler->types.rule == ElementTypes::kF32) {
      absl::StrAppend(&why, ", and ", d.OpName(), " has no bf16 operand to widen there");
    }
    return absl::InvalidArgumentError(why);
  }
  step->run = handler->run;
  return absl::OkStatus();
}

}  // namespace weft
