// Elementwise float32 ops, one element count throughout: the activations and their gradients
// (a = the forward input, b = the upstream gradient) and MUL. Outputs may alias inputs.
#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

absl::Status DecodeUnary(Decoder& d, Step* s) { return d.Elementwise(1); }
absl::Status DecodeBinary(Decoder& d, Step* s) { return d.Elementwise(2); }

// out = f(a), or out = f(a, b): the kernel on the step's element count.
template <void (Kernels::*kKernel)(const float*, float*, int64_t)>
absl::Status RunUnary(const Step& s, const RunContext& c) {
  (c.kernels.*kKernel)(c.f32(s.in[0]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}
template <void (Kernels::*kKernel)(const float*, const float*, float*, int64_t)>
absl::Status RunBinary(const Step& s, const RunContext& c) {
  (c.kernels.*kKernel)(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.numel);
  return absl::OkStatus();
}

OpHandler Unary(RunFn run) { return {ElementTypes::F32(), DecodeUnary, run}; }
OpHandler Binary(RunFn run) { return {ElementTypes::F32(), DecodeBinary, run}; }

}  // namespace

absl::Status RegisterElementwiseOps(OpRegistry* registry) {
  // out = max(a, 0); out = b * (a > 0).
  RETURN_IF_ERROR(registry->Register(Instruction::RELU, Unary(RunUnary<&Kernels::Relu>)));
  RETURN_IF_ERROR(
      registry->Register(Instruction::RELU_GRAD, Binary(RunBinary<&Kernels::ReluGrad>)));
  // out = a Phi(a) (erf); out = b d/da.
  RETURN_IF_ERROR(registry->Register(Instruction::GELU, Unary(RunUnary<&Kernels::Gelu>)));
  RETURN_IF_ERROR(
      registry->Register(Instruction::GELU_GRAD, Binary(RunBinary<&Kernels::GeluGrad>)));
  // out = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))); out = b d/da.
  RETURN_IF_ERROR(
      registry->Register(Instruction::GELU_TANH, Unary(RunUnary<&Kernels::GeluTanh>)));
  RETURN_IF_ERROR(registry->Register(Instruction::GELU_TANH_GRAD,
                                     Binary(RunBinary<&Kernels::GeluTanhGrad>)));
  // out = a sigmoid(a); out = b d/da.
  RETURN_IF_ERROR(registry->Register(Instruction::SILU, Unary(RunUnary<&Kernels::Silu>)));
  RETURN_IF_ERROR(
      registry->Register(Instruction::SILU_GRAD, Binary(RunBinary<&Kernels::SiluGrad>)));
  // out = a * b.
  return registry->Register(Instruction::MUL, Binary(RunBinary<&Kernels::Mul>));
}

}  // namespace weft
