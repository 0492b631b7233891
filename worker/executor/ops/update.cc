// The optimizer updates, in place (SGD, ADAMW, WEIGHT_DECAY), and the global gradient norm they
// clip by (SUM_SQUARES, CLIP_COEFFICIENT). An update's lr is the step's: the instruction's times
// the schedule's factor (RunContext::lr_scale).
#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// The step's learning rate for an instruction's lr (0 stays 0: a member's state-only update).
float StepLr(float lr, const RunContext& c) {
  return static_cast<float>(static_cast<double>(lr) * c.lr_scale);
}

// An update's optional last input: the clip coefficient, one float32 element.
absl::Status ClipInput(Decoder& d, int position, Step* s) {
  const Instruction& ins = d.ins();
  if (ins.inputs_size() <= position) return absl::OkStatus();
  s->clip = ins.inputs(position);
  return d.Holds(s->clip, "clip coefficient", 1, "one element");
}

const float* ClipOf(const Step& s, const RunContext& c) {
  return s.clip >= 0 ? c.f32(s.clip) : nullptr;
}

// param -= lr * (grad * clip + weight_decay * param); inputs param, grad[, clip]; the output, if
// any, is param.
absl::Status DecodeSgd(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  if (ins.inputs_size() != 2 && ins.inputs_size() != 3) {
    return d.Bad("expects 2 or 3 inputs (param, grad[, clip coefficient])");
  }
  if (ins.outputs_size() == 1 && ins.outputs(0) != ins.inputs(0)) {
    return d.Bad("output must be the parameter (updated in place)");
  }
  RETURN_IF_ERROR(d.Need(ins.inputs_size(), ins.outputs_size() == 1 ? 1 : 0));
  RETURN_IF_ERROR(ClipInput(d, 2, s));
  s->numel = d.numel(s->in[0]);
  s->lr = ins.lr();
  s->weight_decay = ins.weight_decay();
  return d.SameNumel(s->in[0], s->in[1], "param", "grad");
}

absl::Status RunSgd(const Step& s, const RunContext& c) {
  c.kernels.Sgd(c.f32(s.in[0]), c.f32(s.in[1]), s.numel, StepLr(s.lr, c), s.weight_decay,
                ClipOf(s, c));
  return absl::OkStatus();
}

// PyTorch's AdamW at the step being run; inputs param, grad, m, v[, clip]; outputs among param,
// m, v.
absl::Status DecodeAdamW(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  if (ins.inputs_size() != 4 && ins.inputs_size() != 5) {
    return d.Bad("expects 4 or 5 inputs (param, grad, m, v[, clip coefficient])");
  }
  for (int id : ins.outputs()) {
    if (id != ins.inputs(0) && id != ins.inputs(2) && id != ins.inputs(3)) {
      return d.Bad("outputs must be among param, m, v (updated in place)");
    }
  }
  RETURN_IF_ERROR(d.Need(ins.inputs_size(), ins.outputs_size()));
  RETURN_IF_ERROR(ClipInput(d, 4, s));
  s->numel = d.numel(s->in[0]);
  for (int i = 1; i < 4; ++i) {
    RETURN_IF_ERROR(d.SameNumel(s->in[0], s->in[i], "param", i == 1 ? "grad" : "state"));
  }
  if (s->in[0] == s->in[2] || s->in[0] == s->in[3] || s->in[2] == s->in[3]) {
    return d.Bad("param, m and v must be distinct buffers");
  }
  s->adamw.lr = ins.lr();
  s->adamw.beta1 = ins.beta1();
  s->adamw.beta2 = ins.beta2();
  s->adamw.eps = ins.eps();
  s->adamw.weight_decay = ins.weight_decay();
  return absl::OkStatus();
}

absl::Status RunAdamW(const Step& s, const RunContext& c) {
  AdamWHyper hyper = s.adamw;
  hyper.lr = StepLr(hyper.lr, c);
  c.kernels.AdamW(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.in[2]), c.f32(s.in[3]), s.numel, hyper,
                  c.step, ClipOf(s, c));
  return absl::OkStatus();
}

// param *= 1 - lr * weight_decay, in place.
absl::Status DecodeWeightDecay(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  RETURN_IF_ERROR(d.Need(1, 1));
  if (ins.outputs(0) != ins.inputs(0)) {
    return d.Bad("output must be the parameter (decayed in place)");
  }
  s->numel = d.numel(s->in[0]);
  s->lr = ins.lr();
  s->weight_decay = ins.weight_decay();
  return absl::OkStatus();
}

absl::Status RunWeightDecay(const Step& s, const RunContext& c) {
  c.kernels.Scale(c.f32(s.in[0]), c.f32(s.in[0]), s.numel, 1.0f - StepLr(s.lr, c) * s.weight_decay);
  return absl::OkStatus();
}

// out[0] = scale * sum(a^2); scale is 1 (the rank counts its piece) or 0 (a copy another member
// counts: nothing is read).
absl::Status DecodeSumSquares(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 1));
  const float scale = d.ins().scale();
  if (scale != 0.0f && scale != 1.0f) {
    return d.Bad("scale must be 1 (counted) or 0 (not counted), got ", scale);
  }
  s->scale = scale;
  s->numel = d.numel(s->in[0]);
  return d.Holds(s->out, "sum", 1, "one element");
}

absl::Status RunSumSquares(const Step& s, const RunContext& c) {
  if (s.scale == 0.0f) {
    c.kernels.Fill(c.f32(s.out), 1, v1::F32, 0.0);
  } else {
    c.kernels.SumSquares(c.f32(s.in[0]), s.numel, c.f32(s.out));
  }
  return absl::OkStatus();
}

absl::Status DecodeClipCoefficient(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 1));
  RETURN_IF_ERROR(d.Holds(s->in[0], "squared norm", 1, "one element"));
  RETURN_IF_ERROR(d.Holds(s->out, "coefficient", 1, "one element"));
  if (!(d.ins().max_norm() > 0)) {
    return d.Bad("max_norm must be > 0, got ", d.ins().max_norm());
  }
  s->scale = d.ins().max_norm();
  return absl::OkStatus();
}

absl::Status RunClipCoefficient(const Step& s, const RunContext& c) {
  c.kernels.ClipCoefficient(c.f32(s.in[0]), s.scale, c.f32(s.out));
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterUpdateOps(OpRegistry* registry) {
  RETURN_IF_ERROR(registry->Register(Instruction::SGD, {ElementTypes::F32(), DecodeSgd, RunSgd}));
  RETURN_IF_ERROR(
      registry->Register(Instruction::ADAMW, {ElementTypes::F32(), DecodeAdamW, RunAdamW}));
  RETURN_IF_ERROR(registry->Register(Instruction::WEIGHT_DECAY,
                                     {ElementTypes::F32(), DecodeWeightDecay, RunWeightDecay}));
  RETURN_IF_ERROR(registry->Register(Instruction::SUM_SQUARES,
                                     {ElementTypes::F32(), DecodeSumSquares, RunSumSquares}));
  return registry->Register(Instruction::CLIP_COEFFICIENT,
                            {ElementTypes::F32(), DecodeClipCoefficient, RunClipCoefficient});
}

}  // namespace weft
