// Ops that load, write, convert, move or sum data: LOAD_INPUT, LOAD_LABEL, POSITIONS, FILL,
// CAST, SLICE, UNSTACK, STACK, ACCUMULATE, ADD, SCALE.
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// out = this rank's box of the step's global batch, in the data source's dtype.
absl::Status DecodeLoad(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  RETURN_IF_ERROR(d.Need(0, 1));
  const bool input = ins.op() == Instruction::LOAD_INPUT;
  s->source = input ? d.ctx().inputs : d.ctx().labels;
  if (s->source == nullptr) return absl::InternalError("no data source was opened");
  s->box = &ins.box();
  s->staging_bytes = d.buffers().bytes(s->out);
  RETURN_IF_ERROR(s->source->CheckBox(ins.box()));
  const std::vector<int64_t> lengths(ins.box().lengths().begin(), ins.box().lengths().end());
  if (Product(lengths) != d.numel(s->out)) {
    return d.Bad("box lengths ", Dims(lengths), " do not fill output ", Dims(d.shape(s->out)));
  }
  // The source delivers its own dtype; a conversion is a CAST after the load.
  if (s->dtype != s->source->dtype()) {
    return d.Bad("output (", d.buffers().Describe(s->out), ") is ", DTypeName(s->dtype), " but ",
                 input ? "data.input" : "data.label", " (", s->source->origin(), ") holds ",
                 DTypeName(s->source->dtype()));
  }
  return absl::OkStatus();
}

absl::Status RunLoad(const Step& s, const RunContext& c) {
  void* out = c.data(s.out);
  if (c.kernels.host_accessible()) return s.source->ReadBox(c.step, *s.box, s.dtype, out);
  RETURN_IF_ERROR(s.source->ReadBox(c.step, *s.box, s.dtype, c.host_staging));
  c.kernels.CopyFromHost(c.host_staging, out, s.staging_bytes);
  return absl::OkStatus();
}

// out [.., T] (ids) = o + t, o = box.offsets[-1] (box: out's region, e.g. a sequence shard).
absl::Status DecodePositions(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(0, 1));
  d.RowView(s->out, &s->rows, &s->cols);
  GlobalBox region;
  RETURN_IF_ERROR(d.Region(s->out, "output", false, &region));
  s->offset = region.offsets[region.rank - 1];
  return absl::OkStatus();
}

absl::Status RunPositions(const Step& s, const RunContext& c) {
  c.kernels.Positions(c.data(s.out), s.dtype, s.rows, s.cols, s.offset);
  return absl::OkStatus();
}

// out = scale, every element, in out's dtype.
absl::Status DecodeFill(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(0, 1));
  s->numel = d.numel(s->out);
  s->scale = d.ins().scale();
  return absl::OkStatus();
}

absl::Status RunFill(const Step& s, const RunContext& c) {
  c.kernels.Fill(c.data(s.out), s.numel, s.dtype, s.scale);
  return absl::OkStatus();
}

// out = a converted to out's dtype.
absl::Status DecodeCast(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 1));
  s->numel = d.numel(s->out);
  return d.SameNumel(s->in[0], s->out, "input", "output");
}

absl::Status RunCast(const Step& s, const RunContext& c) {
  c.kernels.Cast(c.data(s.in[0]), s.from, c.data(s.out), s.dtype, s.numel);
  return absl::OkStatus();
}

// out = a[offset : offset + length] along axis.
absl::Status DecodeSlice(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  RETURN_IF_ERROR(d.Need(1, 1));
  RETURN_IF_ERROR(d.AxisView(s->in[0]));
  s->offset = ins.offset();
  s->length = ins.length();
  if (s->offset < 0 || s->length < 0 || s->offset + s->length > s->axis_len) {
    return d.Bad("slice [", s->offset, ", ", s->offset + s->length, ") outside ",
                 Dims(d.shape(s->in[0])), " along axis ", ins.axis());
  }
  if (s->out == s->in[0]) return d.Bad("output aliases the input");
  return d.SameButAxis(s->in[0], s->out, s->length);
}

absl::Status RunSlice(const Step& s, const RunContext& c) {
  c.kernels.Slice(c.data(s.in[0]), c.data(s.out), s.outer, s.axis_len, s.inner, s.offset,
                  s.length, s.element_bytes);
  return absl::OkStatus();
}

// The shape of `stacked` without `axis`: what each piece of a STACK or UNSTACK holds.
std::vector<int64_t> Unstacked(std::vector<int64_t> stacked, int axis) {
  stacked.erase(stacked.begin() + NormalizeAxis(axis, static_cast<int>(stacked.size())));
  return stacked;
}

// a viewed [outer, n, inner] along axis -> n outputs [outer, inner] (output i = a[:, i, :]).
absl::Status DecodeUnstack(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  if (ins.outputs_size() < 1) return d.Bad("expects 1 or more outputs, got 0");
  RETURN_IF_ERROR(d.Need(1, ins.outputs_size()));
  RETURN_IF_ERROR(d.AxisView(s->in[0]));
  const int n = ins.outputs_size();
  if (s->axis_len != n) {
    return d.Bad(d.Named("input", s->in[0]), " has ", s->axis_len, " along axis ", ins.axis(),
                 " but the instruction has ", n, " outputs");
  }
  const std::string piece = Dims(Unstacked(d.shape(s->in[0]), ins.axis()));
  for (int i = 0; i < n; ++i) {
    RETURN_IF_ERROR(d.Holds(s->outs[i], absl::StrCat("output ", i), s->outer * s->inner,
                            absl::StrCat(piece, ": the input without axis ", ins.axis())));
  }
  return d.Apart();
}

absl::Status RunUnstack(const Step& s, const RunContext& c) {
  const void* a = c.data(s.in[0]);
  for (size_t i = 0; i < s.outs.size(); ++i) {
    c.kernels.Slice(a, c.data(s.outs[i]), s.outer, s.axis_len, s.inner, static_cast<int64_t>(i),
                    1, s.element_bytes);
  }
  return absl::OkStatus();
}

// n inputs [outer, inner] -> out viewed [outer, n, inner] along axis (out[:, i, :] = input i).
absl::Status DecodeStack(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  if (ins.inputs_size() < 1) return d.Bad("expects 1 or more inputs, got 0");
  RETURN_IF_ERROR(d.Need(ins.inputs_size(), 1));
  RETURN_IF_ERROR(d.AxisView(s->out));
  const int n = ins.inputs_size();
  if (s->axis_len != n) {
    return d.Bad(d.Named("output", s->out), " has ", s->axis_len, " along axis ", ins.axis(),
                 " but the instruction has ", n, " inputs");
  }
  const std::string piece = Dims(Unstacked(d.shape(s->out), ins.axis()));
  for (int i = 0; i < n; ++i) {
    RETURN_IF_ERROR(d.Holds(s->in[i], absl::StrCat("input ", i), s->outer * s->inner,
                            absl::StrCat(piece, ": the output without axis ", ins.axis())));
  }
  return d.Apart();
}

absl::Status RunStack(const Step& s, const RunContext& c) {
  void* out = c.data(s.out);
  for (size_t i = 0; i < s.in.size(); ++i) {
    c.kernels.Unslice(c.data(s.in[i]), out, s.outer, s.axis_len, s.inner, static_cast<int64_t>(i),
                      1, s.element_bytes);
  }
  return absl::OkStatus();
}

// out += a.
absl::Status DecodeAccumulate(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 1));
  if (s->out == s->in[0]) return d.Bad("output aliases the input");
  s->numel = d.numel(s->out);
  return d.SameNumel(s->in[0], s->out, "input", "output");
}

absl::Status RunAccumulate(const Step& s, const RunContext& c) {
  c.kernels.Add(c.f32(s.out), c.f32(s.in[0]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}

// out = in[0] + in[1] + ...: the first sum written to out, each further input added to it, so
// out may be in[0] or in[1] (read before out is written) but no later input.
absl::Status DecodeAdd(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  if (ins.inputs_size() < 1) return d.Bad("expects 1 or more inputs, got 0");
  RETURN_IF_ERROR(d.Need(ins.inputs_size(), 1));
  const Buffers& b = d.buffers();
  for (size_t i = 1; i < s->in.size(); ++i) {
    if (d.shape(s->in[i]) != d.shape(s->in[0])) {
      return d.Bad("input ", i, " (", b.Describe(s->in[i]), ") is not the shape of input 0 (",
                   b.Describe(s->in[0]), ")");
    }
    if (i >= 2 && s->in[i] == s->out) {
      return d.Bad("output aliases input ", i, " (", b.Describe(s->out),
                   "), which is read after the output is written; only inputs 0 and 1 may be "
                   "updated in place");
    }
  }
  if (d.shape(s->out) != d.shape(s->in[0])) {
    return d.Bad("output (", b.Describe(s->out), ") is not the shape of the inputs (",
                 Dims(d.shape(s->in[0])), ")");
  }
  s->numel = d.numel(s->out);
  return absl::OkStatus();
}

// One input: a copy (of float32 values: either side may be a widened bf16 buffer).
absl::Status RunAdd(const Step& s, const RunContext& c) {
  if (s.in.size() == 1) {
    c.kernels.Copy(c.f32(s.in[0]), c.f32(s.out), s.numel * static_cast<int64_t>(sizeof(float)));
    return absl::OkStatus();
  }
  c.kernels.Add(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.numel);
  for (size_t j = 2; j < s.in.size(); ++j) {
    c.kernels.Add(c.f32(s.out), c.f32(s.in[j]), c.f32(s.out), s.numel);
  }
  return absl::OkStatus();
}

// out = scale * a.
absl::Status DecodeScale(Decoder& d, Step* s) { return d.Elementwise(1); }

absl::Status RunScale(const Step& s, const RunContext& c) {
  c.kernels.Scale(c.f32(s.in[0]), c.f32(s.out), s.numel, s.scale);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterDataOps(OpRegistry* registry) {
  const ElementTypes f32 = ElementTypes::F32(), one = ElementTypes::One();
  RETURN_IF_ERROR(
      registry->Register(Instruction::LOAD_INPUT, {ElementTypes::Source(), DecodeLoad, RunLoad}));
  RETURN_IF_ERROR(
      registry->Register(Instruction::LOAD_LABEL, {ElementTypes::Source(), DecodeLoad, RunLoad}));
  RETURN_IF_ERROR(registry->Register(Instruction::POSITIONS,
                                     {ElementTypes::IdsOutput(), DecodePositions, RunPositions}));
  RETURN_IF_ERROR(
      registry->Register(Instruction::FILL, {ElementTypes::Output(), DecodeFill, RunFill}));
  RETURN_IF_ERROR(
      registry->Register(Instruction::CAST, {ElementTypes::Cast(), DecodeCast, RunCast}));
  RETURN_IF_ERROR(registry->Register(Instruction::SLICE, {one, DecodeSlice, RunSlice}));
  RETURN_IF_ERROR(registry->Register(Instruction::UNSTACK, {one, DecodeUnstack, RunUnstack}));
  RETURN_IF_ERROR(registry->Register(Instruction::STACK, {one, DecodeStack, RunStack}));
  RETURN_IF_ERROR(
      registry->Register(Instruction::ACCUMULATE, {f32, DecodeAccumulate, RunAccumulate}));
  RETURN_IF_ERROR(registry->Register(Instruction::ADD, {f32, DecodeAdd, RunAdd}));
  return registry->Register(Instruction::SCALE, {f32, DecodeScale, RunScale});
}

}  // namespace weft
