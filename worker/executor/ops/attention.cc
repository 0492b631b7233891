// Attention's ops on [batch, seq, heads, head_dim] tensors: the rotary embedding (ROPE and its
// VJP ROPE_GRAD) and causal softmax attention (ATTENTION, ATTENTION_GRAD), with grouped kv heads
// and dropout on the probabilities. The outputs are written apart from the inputs.
#include <vector>

#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// bthd -> bthd: x rotated at positions o + t, o = box.offsets[1] (box: x's region, a sequence
// shard), frequencies from theta; ROPE_GRAD rotates back.
absl::Status DecodeRope(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 1));
  const std::vector<int64_t>& x = d.shape(s->in[0]);
  if (x.size() != 4) return d.Bad(d.Named("input", s->in[0]), " is not [batch, seq, heads, head_dim]");
  if (x[3] % 2 != 0) {
    return d.Bad(d.Named("input", s->in[0]), " has an odd head_dim; rotate-half needs pairs");
  }
  RETURN_IF_ERROR(d.SameShape(s->in[0], s->out, "the input", "output"));
  s->theta = d.ins().theta();
  if (!(s->theta > 0.0f)) return d.Bad("theta ", s->theta, " is not positive (rope_theta)");
  s->batch = x[0];
  s->seq = x[1];
  s->heads = x[2];
  s->head_dim = x[3];
  GlobalBox region;
  RETURN_IF_ERROR(d.Region(s->in[0], "input", false, &region));
  s->offset = region.offsets[1];
  return d.Apart();
}

absl::Status RunRope(const Step& s, const RunContext& c) {
  c.kernels.Rope(c.f32(s.in[0]), c.f32(s.out), s.batch, s.seq, s.heads, s.head_dim, s.offset,
                 s.theta, s.op == Instruction::ROPE_GRAD);
  return absl::OkStatus();
}

// q [B,T,H,D], k and v [B,T,KVH,D] -> Step::attention: the shapes, scale, dropout (its step set
// when run) and where q lies in the global [B, T, H, D] (box, global_shape: q's; absent: q is
// the whole tensor).
absl::Status DecodeAttentionShape(Decoder& d, Step* s) {
  const int q = s->in[0], k = s->in[1], v = s->in[2];
  const std::vector<int64_t>& qs = d.shape(q);
  const std::vector<int64_t>& ks = d.shape(k);
  if (qs.size() != 4) return d.Bad(d.Named("q", q), " is not [batch, seq, heads, head_dim]");
  if (ks.size() != 4) return d.Bad(d.Named("k", k), " is not [batch, seq, kv_heads, head_dim]");
  RETURN_IF_ERROR(d.SameShape(k, v, "k", "v"));
  if (ks[0] != qs[0] || ks[1] != qs[1] || ks[3] != qs[3]) {
    return d.Bad(d.Named("k", k), " and ", d.Named("q", q),
                 " differ in batch, seq or head_dim");
  }
  if (ks[2] < 1 || qs[2] % ks[2] != 0) {
    return d.Bad(d.Named("q", q), " has ", qs[2], " heads, not a multiple of the ", ks[2],
                 " kv heads of ", d.Named("k", k));
  }
  AttentionShape& a = s->attention;
  a.batch = qs[0];
  a.seq = qs[1];
  a.heads = qs[2];
  a.kv_heads = ks[2];
  a.head_dim = qs[3];
  a.scale = d.ins().scale();
  RETURN_IF_ERROR(d.Dropout(&a.dropout));
  GlobalBox region;
  RETURN_IF_ERROR(d.Region(q, "q", true, &region));
  if (region.global[1] != a.seq || region.global[3] != a.head_dim) {
    return d.Bad("global_shape ", Dims(std::vector<int64_t>(region.global, region.global + 4)),
                 " of ", d.Named("q", q),
                 ": causal attention needs every position and the whole head_dim");
  }
  a.global_batch = region.global[0];
  a.global_heads = region.global[2];
  a.batch_offset = region.offsets[0];
  a.head_offset = region.offsets[2];
  return absl::OkStatus();
}

// bihd, bjgd, bjgd -> bihd: softmax over j <= i of scale q.k (g = h / (H / KVH)), dropped out,
// times v.
absl::Status DecodeAttention(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(3, 1));
  RETURN_IF_ERROR(DecodeAttentionShape(d, s));
  RETURN_IF_ERROR(d.SameShape(s->in[0], s->out, "q", "output"));
  return d.Apart();
}

absl::Status RunAttention(const Step& s, const RunContext& c) {
  AttentionShape shape = s.attention;
  shape.dropout.step = c.step;
  c.kernels.Attention(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.in[2]), c.f32(s.out), shape);
  return absl::OkStatus();
}

// q, k, v, dout -> dq (q's shape), dk, dv (k's shape): the VJP, recomputing the probabilities.
absl::Status DecodeAttentionGrad(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(4, 3));
  RETURN_IF_ERROR(DecodeAttentionShape(d, s));
  RETURN_IF_ERROR(d.SameShape(s->in[0], s->in[3], "q", "dout"));
  RETURN_IF_ERROR(d.SameShape(s->in[0], s->outs[0], "q", "dq"));
  RETURN_IF_ERROR(d.SameShape(s->in[1], s->outs[1], "k", "dk"));
  RETURN_IF_ERROR(d.SameShape(s->in[1], s->outs[2], "k", "dv"));
  return d.Apart();
}

absl::Status RunAttentionGrad(const Step& s, const RunContext& c) {
  AttentionShape shape = s.attention;
  shape.dropout.step = c.step;
  c.kernels.AttentionGrad(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.in[2]), c.f32(s.in[3]),
                          c.f32(s.outs[0]), c.f32(s.outs[1]), c.f32(s.outs[2]), shape);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterAttentionOps(OpRegistry* registry) {
  const ElementTypes f32 = ElementTypes::F32();
  RETURN_IF_ERROR(registry->Register(Instruction::ROPE, {f32, DecodeRope, RunRope}));
  RETURN_IF_ERROR(registry->Register(Instruction::ROPE_GRAD, {f32, DecodeRope, RunRope}));
  RETURN_IF_ERROR(
      registry->Register(Instruction::ATTENTION, {f32, DecodeAttention, RunAttention}));
  return registry->Register(Instruction::ATTENTION_GRAD,
                            {f32, DecodeAttentionGrad, RunAttentionGrad});
}

}  // namespace weft
