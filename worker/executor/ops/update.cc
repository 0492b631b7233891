// The optimizer updates, in place: SGD and ADAMW.
#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// param -= lr * (grad + weight_decay * param); inputs param, grad; the output, if any, is param.
absl::Status DecodeSgd(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  if (ins.outputs_size() == 1 && ins.inputs_size() == 2 && ins.outputs(0) != ins.inputs(0)) {
    return d.Bad("output must be the parameter (updated in place)");
  }
  RETURN_IF_ERROR(d.Need(2, ins.outputs_size() == 1 ? 1 : 0));
  s->numel = d.numel(s->in[0]);
  s->lr = ins.lr();
  s->weight_decay = ins.weight_decay();
  return d.SameNumel(s->in[0], s->in[1], "param", "grad");
}

absl::Status RunSgd(const Step& s, const RunContext& c) {
  c.kernels.Sgd(c.f32(s.in[0]), c.f32(s.in[1]), s.numel, s.lr, s.weight_decay);
  return absl::OkStatus();
}

// PyTorch's AdamW at the step being run; inputs param, grad, m, v; outputs among param, m, v.
absl::Status DecodeAdamW(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  if (ins.inputs_size() != 4) return d.Bad("expects 4 inputs (param, grad, m, v)");
  for (int id : ins.outputs()) {
    if (id != ins.inputs(0) && id != ins.inputs(2) && id != ins.inputs(3)) {
      return d.Bad("outputs must be among param, m, v (updated in place)");
    }
  }
  RETURN_IF_ERROR(d.Need(4, ins.outputs_size()));
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
  c.kernels.AdamW(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.in[2]), c.f32(s.in[3]), s.numel,
                  s.adamw, c.step);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterUpdateOps(OpRegistry* registry) {
  RETURN_IF_ERROR(registry->Register(Instruction::SGD, {ElementTypes::F32(), DecodeSgd, RunSgd}));
  return registry->Register(Instruction::ADAMW, {ElementTypes::F32(), DecodeAdamW, RunAdamW});
}

}  // namespace weft
