// The mean-squared-error loss and its gradient (a = prediction, b = label).
#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// out[0] = scale * sum((a - b)^2).
absl::Status DecodeMseLoss(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(2, 1));
  s->numel = d.numel(s->in[0]);
  s->scale = d.ins().scale();
  RETURN_IF_ERROR(d.SameNumel(s->in[0], s->in[1], "prediction", "label"));
  if (d.numel(s->out) != 1) return d.Bad("output is ", Dims(d.shape(s->out)), ", expected [1]");
  return absl::OkStatus();
}

absl::Status RunMseLoss(const Step& s, const RunContext& c) {
  c.kernels.MseLoss(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.numel, s.scale);
  return absl::OkStatus();
}

// out = scale * (a - b).
absl::Status DecodeMseGrad(Decoder& d, Step* s) { return d.Elementwise(2); }

absl::Status RunMseGrad(const Step& s, const RunContext& c) {
  c.kernels.MseGrad(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.numel, s.scale);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterMseOps(OpRegistry* registry) {
  RETURN_IF_ERROR(registry->Register(Instruction::MSE_LOSS,
                                     {ElementTypes::F32(), DecodeMseLoss, RunMseLoss}));
  return registry->Register(Instruction::MSE_GRAD,
                            {ElementTypes::F32(), DecodeMseGrad, RunMseGrad});
}

}  // namespace weft
