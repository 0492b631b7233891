// DROPOUT: out = a * keep / (1 - p), the mask drawn by Philox at each element's index in the
// global tensor (Kernels::Dropout), so every mesh drops the same elements; also the VJP (the same
// mask on the gradient). out may alias a.
#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// The mask's spec (p, the program's seed, dropout_key) and a's region: box and global_shape,
// absent when a is the whole tensor.
absl::Status DecodeDropout(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Elementwise(1));
  RETURN_IF_ERROR(d.Dropout(&s->dropout));
  return d.Region(s->in[0], "input", true, &s->global_box);
}

absl::Status RunDropout(const Step& s, const RunContext& c) {
  DropoutSpec spec = s.dropout;
  spec.step = c.step;
  c.kernels.Dropout(c.f32(s.in[0]), c.f32(s.out), s.numel, spec, s.global_box);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterDropoutOps(OpRegistry* registry) {
  return registry->Register(Instruction::DROPOUT,
                            {ElementTypes::F32(), DecodeDropout, RunDropout});
}

}  // namespace weft
