// Elementwise float32 ops, one element count throughout: the activations and their gradients
// (a = the forward input, b = the upstream gradient) and MUL. Outputs may alias inputs.
#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

absl::Status DecodeUnary(Decoder& d, Step* s) { return d.Elementwise(1); }
absl::Status DecodeBinary(Decoder& d, Step* s) { return d.Elementwise(2); }

// out = max(a, 0); out = b * (a > 0).
absl::Status RunRelu(const Step& s, const RunContext& c) {
  c.kernels.Relu(c.f32(s.in[0]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}
absl::Status RunReluGrad(const Step& s, const RunContext& c) {
  c.kernels.ReluGrad(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}

// out = a Phi(a) (erf); out = b d/da.
absl::Status RunGelu(const Step& s, const RunContext& c) {
  c.kernels.Gelu(c.f32(s.in[0]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}
absl::Status RunGeluGrad(const Step& s, const RunContext& c) {
  c.kernels.GeluGrad(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}

// out = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))); out = b d/da.
absl::Status RunGeluTanh(const Step& s, const RunContext& c) {
  c.kernels.GeluTanh(c.f32(s.in[0]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}
absl::Status RunGeluTanhGrad(const Step& s, const RunContext& c) {
  c.kernels.GeluTanhGrad(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}

// out = a sigmoid(a); out = b d/da.
absl::Status RunSilu(const Step& s, const RunContext& c) {
  c.kernels.Silu(c.f32(s.in[0]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}
absl::Status RunSiluGrad(const Step& s, const RunContext& c) {
  c.kernels.SiluGrad(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}

// out = a * b.
absl::Status RunMul(const Step& s, const RunContext& c) {
  c.kernels.Mul(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterElementwiseOps(OpRegistry* registry) {
  const ElementTypes f32 = ElementTypes::F32();
  RETURN_IF_ERROR(registry->Register(Instruction::RELU, {f32, DecodeUnary, RunRelu}));
  RETURN_IF_ERROR(registry->Register(Instruction::RELU_GRAD, {f32, DecodeBinary, RunReluGrad}));
  RETURN_IF_ERROR(registry->Register(Instruction::GELU, {f32, DecodeUnary, RunGelu}));
  RETURN_IF_ERROR(registry->Register(Instruction::GELU_GRAD, {f32, DecodeBinary, RunGeluGrad}));
  RETURN_IF_ERROR(registry->Register(Instruction::GELU_TANH, {f32, DecodeUnary, RunGeluTanh}));
  RETURN_IF_ERROR(
      registry->Register(Instruction::GELU_TANH_GRAD, {f32, DecodeBinary, RunGeluTanhGrad}));
  RETURN_IF_ERROR(registry->Register(Instruction::SILU, {f32, DecodeUnary, RunSilu}));
  RETURN_IF_ERROR(registry->Register(Instruction::SILU_GRAD, {f32, DecodeBinary, RunSiluGrad}));
  return registry->Register(Instruction::MUL, {f32, DecodeBinary, RunMul});
}

}  // namespace weft
