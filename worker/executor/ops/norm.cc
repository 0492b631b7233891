// The normalizations over a row's last dim, x viewed [rows, dim]: LAYER_NORM, RMS_NORM and their
// gradients (dgamma, dbeta summed over rows). gamma and beta hold dim elements; eps from
// Instruction.eps. The outputs are written apart from the inputs.
#include <string>

#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// What a per-column buffer (gamma, beta and their gradients) holds, for messages.
std::string LastDimOfX(const Decoder& d, const Step& s) {
  return absl::StrCat("the last dim of x ", Dims(d.shape(s.in[0])));
}

// x [rows, dim] and the per-column parameters (inputs 1 .. n_params): rows, cols, eps.
absl::Status RowsAndParams(Decoder& d, Step* s, int n_params) {
  d.RowView(s->in[0], &s->rows, &s->cols);
  const char* names[] = {"x", "gamma", "beta"};
  for (int i = 1; i <= n_params; ++i) {
    RETURN_IF_ERROR(d.Holds(s->in[i], names[i], s->cols, LastDimOfX(d, *s)));
  }
  s->eps = d.ins().eps();
  if (!(s->eps >= 0.0f)) return d.Bad("eps ", s->eps, " is negative");
  return absl::OkStatus();
}

// x, gamma, beta -> (x - mean) / sqrt(var + eps) * gamma + beta.
absl::Status DecodeLayerNorm(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(3, 1));
  RETURN_IF_ERROR(RowsAndParams(d, s, 2));
  RETURN_IF_ERROR(d.SameNumel(s->in[0], s->out, "input", "output"));
  return d.Apart();
}

absl::Status RunLayerNorm(const Step& s, const RunContext& c) {
  c.kernels.LayerNorm(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.in[2]), c.f32(s.out), s.rows,
                      s.cols, s.eps);
  return absl::OkStatus();
}

// x, gamma, dy -> dx [rows, dim], dgamma [dim], dbeta [dim].
absl::Status DecodeLayerNormGrad(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(3, 3));
  RETURN_IF_ERROR(RowsAndParams(d, s, 1));
  RETURN_IF_ERROR(d.SameNumel(s->in[0], s->in[2], "x", "dy"));
  RETURN_IF_ERROR(d.SameNumel(s->in[0], s->outs[0], "x", "dx"));
  RETURN_IF_ERROR(d.Holds(s->outs[1], "dgamma", s->cols, LastDimOfX(d, *s)));
  RETURN_IF_ERROR(d.Holds(s->outs[2], "dbeta", s->cols, LastDimOfX(d, *s)));
  return d.Apart();
}

absl::Status RunLayerNormGrad(const Step& s, const RunContext& c) {
  c.kernels.LayerNormGrad(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.in[2]), c.f32(s.outs[0]),
                          c.f32(s.outs[1]), c.f32(s.outs[2]), s.rows, s.cols, s.eps);
  return absl::OkStatus();
}

// x, gamma -> x / sqrt(mean(x^2) + eps) * gamma.
absl::Status DecodeRmsNorm(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(2, 1));
  RETURN_IF_ERROR(RowsAndParams(d, s, 1));
  RETURN_IF_ERROR(d.SameNumel(s->in[0], s->out, "input", "output"));
  return d.Apart();
}

absl::Status RunRmsNorm(const Step& s, const RunContext& c) {
  c.kernels.RmsNorm(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.rows, s.cols, s.eps);
  return absl::OkStatus();
}

// x, gamma, dy -> dx [rows, dim], dgamma [dim].
absl::Status DecodeRmsNormGrad(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(3, 2));
  RETURN_IF_ERROR(RowsAndParams(d, s, 1));
  RETURN_IF_ERROR(d.SameNumel(s->in[0], s->in[2], "x", "dy"));
  RETURN_IF_ERROR(d.SameNumel(s->in[0], s->outs[0], "x", "dx"));
  RETURN_IF_ERROR(d.Holds(s->outs[1], "dgamma", s->cols, LastDimOfX(d, *s)));
  return d.Apart();
}

absl::Status RunRmsNormGrad(const Step& s, const RunContext& c) {
  c.kernels.RmsNormGrad(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.in[2]), c.f32(s.outs[0]),
                        c.f32(s.outs[1]), s.rows, s.cols, s.eps);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterNormOps(OpRegistry* registry) {
  const ElementTypes f32 = ElementTypes::F32();
  RETURN_IF_ERROR(
      registry->Register(Instruction::LAYER_NORM, {f32, DecodeLayerNorm, RunLayerNorm}));
  RETURN_IF_ERROR(registry->Register(Instruction::LAYER_NORM_GRAD,
                                     {f32, DecodeLayerNormGrad, RunLayerNormGrad}));
  RETURN_IF_ERROR(registry->Register(Instruction::RMS_NORM, {f32, DecodeRmsNorm, RunRmsNorm}));
  return registry->Register(Instruction::RMS_NORM_GRAD,
                            {f32, DecodeRmsNormGrad, RunRmsNormGrad});
}

}  // namespace weft
