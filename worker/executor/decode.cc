// DecodeInstruction: the one switch over the ops (step.h).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/status.h"
#include "worker/executor/step.h"

namespace weft {
namespace {

using v1::Instruction;

int64_t Aligned(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// How an op constrains the element types of its buffers.
enum class Types {
  kF32,     // every input and output is float32 (the compute kernels)
  kOne,     // inputs and outputs share one dtype, any (data movement)
  kOutput,  // FILL: its output's, any
  kCast,    // any input dtype, any output dtype
  kSource,  // LOAD_INPUT / LOAD_LABEL: the data source's (checked in the decoder)
};

Types TypesOf(Instruction::Op op) {
  switch (op) {
    case Instruction::ALL_REDUCE:
    case Instruction::ALL_GATHER:
    case Instruction::REDUCE_SCATTER:
    case Instruction::ALL_TO_ALL:
    case Instruction::SEND:
    case Instruction::RECV:
    case Instruction::SLICE:
      return Types::kOne;
    case Instruction::FILL:
      return Types::kOutput;
    case Instruction::CAST:
      return Types::kCast;
    case Instruction::LOAD_INPUT:
    case Instruction::LOAD_LABEL:
      return Types::kSource;
    default:
      return Types::kF32;
  }
}

class Decoder {
 public:
  Decoder(const DecodeContext& ctx, Step* s)
      : ctx_(ctx), buffers_(ctx.buffers), s_(s), ins_(ctx.program.instructions(s->index)) {}

  absl::Status Decode();

 private:
  template <typename... Parts>
  static absl::Status Bad(const Parts&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  }
  const std::vector<int64_t>& shape(int id) const { return buffers_.shape(id); }
  int64_t numel(int id) const { return buffers_.numel(id); }

  absl::Status CheckIds() const;
  absl::Status CheckTypes();
  absl::Status Need(int n_in, int n_out);
  absl::Status SameNumel(int a, int b, absl::string_view an, absl::string_view bn) const;
  absl::Status AxisView(int id);
  absl::Status SameButAxis(int a, int out, int64_t len) const;
  absl::Status Group();
  absl::Status Splits();
  absl::Status Reduce();
  absl::Status Packing(int64_t elements);
  absl::Status DecodeOp();

  const DecodeContext& ctx_;
  const Buffers& buffers_;
  Step* const s_;
  const Instruction& ins_;
};

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

absl::Status Decoder::CheckTypes() {
  std::vector<std::pair<std::string, int>> all;  // ("input 1", id)
  for (int i = 0; i < ins_.inputs_size(); ++i) {
    all.emplace_back(absl::StrCat("input ", i), ins_.inputs(i));
  }
  for (int i = 0; i < ins_.outputs_size(); ++i) {
    all.emplace_back(absl::StrCat("output ", i), ins_.outputs(i));
  }
  const std::string op = Instruction::Op_Name(ins_.op());
  switch (TypesOf(ins_.op())) {
    case Types::kF32:
      for (const auto& [what, id] : all) {
        if (buffers_.dtype(id) != v1::F32) {
          return Bad(what, " (", buffers_.Describe(id), ") is ", DTypeName(buffers_.dtype(id)),
                     "; ", op, " computes in f32");
        }
      }
      s_->dtype = v1::F32;
      break;
    case Types::kOne:
      if (all.empty()) break;
      s_->dtype = buffers_.dtype(all[0].second);
      for (const auto& [what, id] : all) {
        if (buffers_.dtype(id) != s_->dtype) {
          return Bad(op, " moves one dtype: ", all[0].first, " (", buffers_.Describe(all[0].second),
                     ") is ", DTypeName(s_->dtype), " but ", what, " (", buffers_.Describe(id),
                     ") is ", DTypeName(buffers_.dtype(id)));
        }
      }
      break;
    case Types::kOutput:
    case Types::kSource:
      if (ins_.outputs_size() > 0) s_->dtype = buffers_.dtype(ins_.outputs(0));
      break;
    case Types::kCast:
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
  if (n_out > 0) s_->out = ins_.outputs(0);
  return absl::OkStatus();
}

absl::Status Decoder::SameNumel(int a, int b, absl::string_view an, absl::string_view bn) const {
  if (numel(a) != numel(b)) {
    return Bad(an, " (buffer ", a, " '", buffers_.name(a), "') is ", Dims(shape(a)), " but ", bn,
               " (buffer ", b, " '", buffers_.name(b), "') is ", Dims(shape(b)));
  }
  return absl::OkStatus();
}

// [outer, axis_len, inner] view of buffer `id` along ins.axis (negative counts from the end).
absl::Status Decoder::AxisView(int id) {
  const auto& sh = shape(id);
  const int axis = ins_.axis() < 0 ? ins_.axis() + static_cast<int>(sh.size()) : ins_.axis();
  if (axis < 0 || axis >= static_cast<int>(sh.size())) {
    return Bad("axis ", ins_.axis(), " out of range for ", Dims(sh));
  }
  s_->outer = Product(sh, 0, axis);
  s_->axis_len = sh[axis];
  s_->inner = Product(sh, axis + 1);
  return absl::OkStatus();
}

// `out` must equal `a` except along the axis, where it is `len`.
absl::Status Decoder::SameButAxis(int a, int out, int64_t len) const {
  std::vector<int64_t> want = shape(a);
  const int axis = ins_.axis() < 0 ? ins_.axis() + static_cast<int>(want.size()) : ins_.axis();
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

// ALL_REDUCE / REDUCE_SCATTER: sum, or avg of a floating type.
absl::Status Decoder::Reduce() {
  s_->reduce = ins_.reduce() == v1::Placement::AVG ? ReduceOp::kAvg : ReduceOp::kSum;
  if (s_->reduce == ReduceOp::kAvg && !IsFloatingPoint(s_->dtype)) {
    return Bad("avg of ", buffers_.Describe(s_->in[0]),
               ": a mean of integers needs a rounding rule; reduce with sum");
  }
  return absl::OkStatus();
}

// The op packs `elements` of its dtype: in its planned scratch buffer, checked to hold them, or
// in the executor's own.
absl::Status Decoder::Packing(int64_t elements) {
  s_->pack_bytes = elements * s_->element_bytes;
  if (!ins_.has_scratch()) {
    s_->own_scratch_bytes = s_->pack_bytes;
    return absl::OkStatus();
  }
  const int id = ins_.scratch();
  if (id == s_->in[0] || id == s_->out) {
    return Bad("scratch ", buffers_.Describe(id), " is also the instruction's ",
               id == s_->out ? "output" : "input");
  }
  if (buffers_.bytes(id) < s_->pack_bytes) {
    return Bad("scratch ", buffers_.Describe(id), " holds ", buffers_.bytes(id), " bytes; ",
               Instruction::Op_Name(ins_.op()), " packs ", elements, " elements of ",
               DTypeName(s_->dtype), " (", s_->pack_bytes, " bytes) there");
  }
  s_->scratch = id;
  return absl::OkStatus();
}

absl::Status Decoder::Decode() {
  s_->op = ins_.op();
  RETURN_IF_ERROR(CheckIds());
  RETURN_IF_ERROR(CheckTypes());
  RETURN_IF_ERROR(DecodeOp());
  const bool packs = s_->op == Instruction::ALL_GATHER || s_->op == Instruction::REDUCE_SCATTER ||
                     s_->op == Instruction::ALL_TO_ALL;
  if (ins_.has_scratch() && !packs) {
    return Bad("has scratch buffer ", ins_.scratch(),
               "; only ALL_GATHER, REDUCE_SCATTER and ALL_TO_ALL pack through one");
  }
  return absl::OkStatus();
}

absl::Status Decoder::DecodeOp() {
  Step* s = s_;
  const Instruction& ins = ins_;
  switch (ins.op()) {
    // mk, kn -> mn (op() transposes when asked).
    case Instruction::MATMUL: {
      RETURN_IF_ERROR(Need(2, 1));
      const auto& a = shape(s->in[0]);
      const auto& b = shape(s->in[1]);
      const int64_t a_rows = Product(a, 0, a.size() - 1), a_cols = a.back();
      const int64_t b_rows = Product(b, 0, b.size() - 1), b_cols = b.back();
      s->trans_a = ins.transpose_a();
      s->trans_b = ins.transpose_b();
      s->m = s->trans_a ? a_cols : a_rows;
      s->k = s->trans_a ? a_rows : a_cols;
      const int64_t kb = s->trans_b ? b_cols : b_rows;
      s->n = s->trans_b ? b_rows : b_cols;
      if (s->k != kb) {
        return Bad("inner dimensions differ: a ", Dims(a), (s->trans_a ? "^T" : ""), " @ b ",
                   Dims(b), (s->trans_b ? "^T" : ""));
      }
      const auto& c = shape(s->out);
      if (numel(s->out) != s->m * s->n || c.back() != s->n) {
        return Bad("output is ", Dims(c), ", expected [", s->m, ",", s->n, "]");
      }
      if (s->out == s->in[0] || s->out == s->in[1]) return Bad("output aliases an input");
      return absl::OkStatus();
    }
    case Instruction::ADD_BIAS: {
      RETURN_IF_ERROR(Need(2, 1));
      const auto& a = shape(s->in[0]);
      s->cols = a.back();
      s->rows = Product(a, 0, a.size() - 1);
      if (numel(s->in[1]) != s->cols) {
        return Bad("bias is ", Dims(shape(s->in[1])), ", expected [", s->cols, "] for input ",
                   Dims(a));
      }
      return SameNumel(s->in[0], s->out, "input", "output");
    }
    case Instruction::BIAS_GRAD: {
      RETURN_IF_ERROR(Need(1, 1));
      const auto& a = shape(s->in[0]);
      s->cols = a.back();
      s->rows = Product(a, 0, a.size() - 1);
      if (numel(s->out) != s->cols) {
        return Bad("output is ", Dims(shape(s->out)), ", expected [", s->cols, "]");
      }
      return absl::OkStatus();
    }
    case Instruction::RELU:
    case Instruction::GELU:
    case Instruction::SCALE:
      RETURN_IF_ERROR(Need(1, 1));
      s->numel = numel(s->in[0]);
      s->scale = ins.scale();
      return SameNumel(s->in[0], s->out, "input", "output");
    case Instruction::RELU_GRAD:
    case Instruction::GELU_GRAD:
    case Instruction::MSE_GRAD:
      RETURN_IF_ERROR(Need(2, 1));
      s->numel = numel(s->in[0]);
      s->scale = ins.scale();
      RETURN_IF_ERROR(SameNumel(s->in[0], s->in[1], "a", "b"));
      return SameNumel(s->in[0], s->out, "input", "output");
    case Instruction::MSE_LOSS:
      RETURN_IF_ERROR(Need(2, 1));
      s->numel = numel(s->in[0]);
      s->scale = ins.scale();
      RETURN_IF_ERROR(SameNumel(s->in[0], s->in[1], "prediction", "label"));
      if (numel(s->out) != 1) return Bad("output is ", Dims(shape(s->out)), ", expected [1]");
      return absl::OkStatus();
    // out = in[0] + in[1] + ...: the first sum written to out, each further input added to it, so
    // out may be in[0] or in[1] (read before out is written) but no later input.
    case Instruction::ADD: {
      if (ins.inputs_size() < 2) return Bad("expects 2 or more inputs, got ", ins.inputs_size());
      RETURN_IF_ERROR(Need(ins.inputs_size(), 1));
      for (size_t i = 1; i < s->in.size(); ++i) {
        if (shape(s->in[i]) != shape(s->in[0])) {
          return Bad("input ", i, " (", buffers_.Describe(s->in[i]),
                     ") is not the shape of input 0 (", buffers_.Describe(s->in[0]), ")");
        }
        if (i >= 2 && s->in[i] == s->out) {
          return Bad("output aliases input ", i, " (", buffers_.Describe(s->out),
                     "), which is read after the output is written; only inputs 0 and 1 may be "
                     "updated in place");
        }
      }
      if (shape(s->out) != shape(s->in[0])) {
        return Bad("output (", buffers_.Describe(s->out), ") is not the shape of the inputs (",
                   Dims(shape(s->in[0])), ")");
      }
      s->numel = numel(s->out);
      return absl::OkStatus();
    }
    case Instruction::CAST:
      RETURN_IF_ERROR(Need(1, 1));
      s->numel = numel(s->out);
      return SameNumel(s->in[0], s->out, "input", "output");
    case Instruction::ALL_REDUCE:
      RETURN_IF_ERROR(Need(1, 1));
      RETURN_IF_ERROR(Group());
      s->numel = numel(s->in[0]);
      RETURN_IF_ERROR(Reduce());
      return SameNumel(s->in[0], s->out, "input", "output");
    case Instruction::ALL_GATHER: {
      RETURN_IF_ERROR(Need(1, 1));
      RETURN_IF_ERROR(Group());
      RETURN_IF_ERROR(Splits());
      RETURN_IF_ERROR(AxisView(s->in[0]));
      if (s->axis_len != s->member_lengths[s->member]) {
        return Bad("input ", Dims(shape(s->in[0])), " has ", s->axis_len,
                   " along the axis, this member's split size is ", s->member_lengths[s->member]);
      }
      const int64_t total = s->member_offsets.back() + s->member_lengths.back();
      RETURN_IF_ERROR(SameButAxis(s->in[0], s->out, total));
      if (s->out == s->in[0]) return Bad("output aliases the input");
      for (int64_t len : s->member_lengths) s->counts.push_back(s->outer * len * s->inner);
      s->axis_len = total;  // Unslice views the output
      // Gathered back to back, then placed along the axis: the whole output passes the packing.
      if (s->outer > 1) RETURN_IF_ERROR(Packing(numel(s->out)));
      return absl::OkStatus();
    }
    case Instruction::REDUCE_SCATTER: {
      RETURN_IF_ERROR(Need(1, 1));
      RETURN_IF_ERROR(Group());
      RETURN_IF_ERROR(Splits());
      RETURN_IF_ERROR(AxisView(s->in[0]));
      const int64_t total = s->member_offsets.back() + s->member_lengths.back();
      if (s->axis_len != total) {
        return Bad("input ", Dims(shape(s->in[0])), " has ", s->axis_len,
                   " along the axis, split sizes sum to ", total);
      }
      RETURN_IF_ERROR(SameButAxis(s->in[0], s->out, s->member_lengths[s->member]));
      if (s->out == s->in[0]) return Bad("output aliases the input");
      for (int64_t len : s->member_lengths) s->counts.push_back(s->outer * len * s->inner);
      s->numel = numel(s->out);
      RETURN_IF_ERROR(Reduce());
      s->scale = 1.0f / static_cast<float>(s->member_lengths.size());
      // The pieces of the whole input, member by member, pass the packing.
      if (s->outer > 1) RETURN_IF_ERROR(Packing(numel(s->in[0])));
      // The communicator only sums; a bf16 average is divided in float32 and rounded once.
      if (s->reduce == ReduceOp::kAvg && s->dtype != v1::F32) {
        s->avg_f32_offset = Aligned(s->own_scratch_bytes);
        s->own_scratch_bytes = s->avg_f32_offset + s->numel * DTypeSize(v1::F32);
      }
      return absl::OkStatus();
    }
    case Instruction::SLICE: {
      RETURN_IF_ERROR(Need(1, 1));
      RETURN_IF_ERROR(AxisView(s->in[0]));
      s->offset = ins.offset();
      s->length = ins.length();
      if (s->offset < 0 || s->length < 0 || s->offset + s->length > s->axis_len) {
        return Bad("slice [", s->offset, ", ", s->offset + s->length, ") outside ",
                   Dims(shape(s->in[0])), " along axis ", ins.axis());
      }
      if (s->out == s->in[0]) return Bad("output aliases the input");
      return SameButAxis(s->in[0], s->out, s->length);
    }
    case Instruction::SGD: {
      if (ins.outputs_size() == 1 && ins.inputs_size() == 2 && ins.outputs(0) != ins.inputs(0)) {
        return Bad("output must be the parameter (updated in place)");
      }
      RETURN_IF_ERROR(Need(2, ins.outputs_size() == 1 ? 1 : 0));
      s->numel = numel(s->in[0]);
      s->lr = ins.lr();
      s->weight_decay = ins.weight_decay();
      return SameNumel(s->in[0], s->in[1], "param", "grad");
    }
    case Instruction::ADAMW: {
      if (ins.inputs_size() != 4) return Bad("expects 4 inputs (param, grad, m, v)");
      for (int id : ins.outputs()) {
        if (id != ins.inputs(0) && id != ins.inputs(2) && id != ins.inputs(3)) {
          return Bad("outputs must be among param, m, v (updated in place)");
        }
      }
      RETURN_IF_ERROR(Need(4, ins.outputs_size()));
      s->numel = numel(s->in[0]);
      for (int i = 1; i < 4; ++i) {
        RETURN_IF_ERROR(SameNumel(s->in[0], s->in[i], "param", i == 1 ? "grad" : "state"));
      }
      if (s->in[0] == s->in[2] || s->in[0] == s->in[3] || s->in[2] == s->in[3]) {
        return Bad("param, m and v must be distinct buffers");
      }
      s->adamw.lr = ins.lr();
      s->adamw.beta1 = ins.beta1();
      s->adamw.beta2 = ins.beta2();
      s->adamw.eps = ins.eps();
      s->adamw.weight_decay = ins.weight_decay();
      return absl::OkStatus();
    }
    case Instruction::LOAD_INPUT:
    case Instruction::LOAD_LABEL: {
      RETURN_IF_ERROR(Need(0, 1));
      const bool input = ins.op() == Instruction::LOAD_INPUT;
      s->source = input ? ctx_.inputs : ctx_.labels;
      if (s->source == nullptr) return absl::InternalError("no data source was opened");
      s->box = &ins.box();
      RETURN_IF_ERROR(s->source->CheckBox(ins.box()));
      const std::vector<int64_t> lengths(ins.box().lengths().begin(), ins.box().lengths().end());
      if (Product(lengths) != numel(s->out)) {
        return Bad("box lengths ", Dims(lengths), " do not fill output ", Dims(shape(s->out)));
      }
      // The source delivers its own dtype; a conversion is a CAST after the load.
      if (s->dtype != s->source->dtype()) {
        const v1::Data& data = ctx_.program.data();
        const std::string& file = input ? data.input() : data.label();
        return Bad("output (", buffers_.Describe(s->out), ") is ", DTypeName(s->dtype), " but ",
                   input ? "data.input" : "data.label", " (",
                   data.source() == "npy" ? file : std::string("synthetic data"), ") holds ",
                   DTypeName(s->source->dtype()));
      }
      return absl::OkStatus();
    }
    case Instruction::ALL_TO_ALL: {
      // Pieces of a along `axis` go to the members; what comes back is concatenated along
      // concat_axis. Both sides pass the packing ([send | receive]).
      RETURN_IF_ERROR(Need(1, 1));
      RETURN_IF_ERROR(Group());
      RETURN_IF_ERROR(Splits());
      RETURN_IF_ERROR(AxisView(s->in[0]));
      if (s->out == s->in[0]) return Bad("output aliases the input");
      const std::vector<int64_t>& in = shape(s->in[0]);
      const int rank = static_cast<int>(in.size());
      const int axis = ins.axis() < 0 ? ins.axis() + rank : ins.axis();
      const int caxis = ins.concat_axis() < 0 ? ins.concat_axis() + rank : ins.concat_axis();
      if (caxis < 0 || caxis >= rank) {
        return Bad("concat_axis ", ins.concat_axis(), " out of range for ", Dims(in));
      }
      if (caxis == axis) return Bad("axis and concat_axis are both ", axis);
      const int64_t total = s->member_offsets.back() + s->member_lengths.back();
      if (s->axis_len != total) {
        return Bad("input ", Dims(in), " has ", s->axis_len, " along axis ", axis,
                   ", split sizes sum to ", total);
      }
      if (ins.concat_split_sizes_size() != static_cast<int>(s->member_lengths.size())) {
        return Bad(ins.concat_split_sizes_size(), " concat_split_sizes for a group of ",
                   s->member_lengths.size());
      }
      int64_t concat_total = 0;
      for (int64_t len : ins.concat_split_sizes()) {
        if (len < 0) return Bad("negative concat split size");
        s->concat_offsets.push_back(concat_total);
        s->concat_lengths.push_back(len);
        concat_total += len;
      }
      if (in[caxis] != s->concat_lengths[s->member]) {
        return Bad("input ", Dims(in), " has ", in[caxis], " along concat_axis ", caxis,
                   ", this member's concat split size is ", s->concat_lengths[s->member]);
      }
      std::vector<int64_t> want = in;
      want[axis] = s->member_lengths[s->member];
      want[caxis] = concat_total;
      if (shape(s->out) != want) {
        return Bad("output is ", Dims(shape(s->out)), ", expected ", Dims(want));
      }
      for (int64_t len : s->member_lengths) s->counts.push_back(s->outer * len * s->inner);
      s->c_outer = Product(want, 0, caxis);
      s->c_len = concat_total;
      s->c_inner = Product(want, caxis + 1);
      for (int64_t len : s->concat_lengths) {
        s->recv_counts.push_back(s->c_outer * len * s->c_inner);
      }
      return Packing(numel(s->in[0]) + numel(s->out));
    }
    case Instruction::SEND:
    case Instruction::RECV: {
      const bool send = ins.op() == Instruction::SEND;
      RETURN_IF_ERROR(send ? Need(1, 0) : Need(0, 1));
      RETURN_IF_ERROR(Group());
      const v1::CommGroup& group = ctx_.program.groups(s->comm);
      if (ins.peer() < 0 || ins.peer() >= group.ranks_size()) {
        return Bad("peer ", ins.peer(), " is not a member of ", GroupName(group));
      }
      if (ins.peer() == s->member) return Bad("peer ", ins.peer(), " is this rank itself");
      s->peer = ins.peer();
      s->tag = ins.tag();
      s->numel = numel(send ? s->in[0] : s->out);
      return absl::OkStatus();
    }
    case Instruction::ACCUMULATE:
      RETURN_IF_ERROR(Need(1, 1));
      if (s->out == s->in[0]) return Bad("output aliases the input");
      s->numel = numel(s->out);
      return SameNumel(s->in[0], s->out, "input", "output");
    case Instruction::FILL:
      RETURN_IF_ERROR(Need(0, 1));
      s->numel = numel(s->out);
      s->scale = ins.scale();
      return absl::OkStatus();
    default:
      return Bad("unknown op ", static_cast<int>(ins.op()));
  }
}

}  // namespace

bool IsCommunication(Instruction::Op op) {
  switch (op) {
    case Instruction::SEND:
    case Instruction::RECV:
    case Instruction::ALL_REDUCE:
    case Instruction::ALL_GATHER:
    case Instruction::REDUCE_SCATTER:
    case Instruction::ALL_TO_ALL:
      return true;
    default:
      return false;
  }
}

absl::Status DecodeInstruction(const DecodeContext& ctx, Step* step) {
  return Decoder(ctx, step).Decode();
}

}  // namespace weft
