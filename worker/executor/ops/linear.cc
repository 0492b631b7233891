// The linear layer's ops: MATMUL, ADD_BIAS, BIAS_GRAD.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

std::vector<int64_t> Axes(const std::vector<int64_t>& v, size_t begin, size_t end) {
  return std::vector<int64_t>(v.begin() + begin, v.begin() + end);
}

// `tail` is one or more dims and the trailing dims of `shape`: the bias of ADD_BIAS, BIAS_GRAD.
bool IsTrailingDims(const std::vector<int64_t>& tail, const std::vector<int64_t>& shape) {
  return !tail.empty() && tail.size() <= shape.size() &&
         std::equal(tail.begin(), tail.end(),
                    shape.end() - static_cast<std::ptrdiff_t>(tail.size()));
}

// mk, kn -> mn, op() transposing when asked. contract 0: a and b viewed [prod(leading), last]
// (out [.., n]); contract c >= 1: a viewed [prod(a[:-c]), prod(a[-c:])] (transposed: the first c
// axes are k), b [prod(b[:c]), prod(b[c:])] (transposed: the last c axes are k), out holding m n
// elements in any shape.
absl::Status DecodeMatmul(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  RETURN_IF_ERROR(d.Need(2, 1));
  const std::vector<int64_t>& a = d.shape(s->in[0]);
  const std::vector<int64_t>& b = d.shape(s->in[1]);
  const std::vector<int64_t>& c = d.shape(s->out);
  s->trans_a = ins.transpose_a();
  s->trans_b = ins.transpose_b();
  const char* ta = s->trans_a ? "^T" : "";
  const char* tb = s->trans_b ? "^T" : "";
  if (ins.contract() == 0) {
    const int64_t a_rows = Product(a, 0, a.size() - 1), a_cols = a.back();
    const int64_t b_rows = Product(b, 0, b.size() - 1), b_cols = b.back();
    s->m = s->trans_a ? a_cols : a_rows;
    s->k = s->trans_a ? a_rows : a_cols;
    const int64_t kb = s->trans_b ? b_cols : b_rows;
    s->n = s->trans_b ? b_rows : b_cols;
    if (s->k != kb) {
      return d.Bad("inner dimensions differ: a ", Dims(a), ta, " @ b ", Dims(b), tb);
    }
    if (d.numel(s->out) != s->m * s->n || c.back() != s->n) {
      return d.Bad("output is ", Dims(c), ", expected [", s->m, ",", s->n, "]");
    }
  } else {
    const int contract = ins.contract();
    if (contract < 0) return d.Bad("contract ", contract, " is negative");
    if (contract > static_cast<int>(a.size()) || contract > static_cast<int>(b.size())) {
      return d.Bad("contract ", contract, " exceeds the rank of a ", Dims(a), " or b ", Dims(b));
    }
    // a's contracted axes are its last c, or its first c when transposed; b's the reverse.
    const size_t a_split = s->trans_a ? contract : a.size() - contract;
    const size_t b_split = s->trans_b ? b.size() - contract : contract;
    const int64_t a_lead = Product(a, 0, a_split), a_tail = Product(a, a_split);
    const int64_t b_lead = Product(b, 0, b_split), b_tail = Product(b, b_split);
    s->m = s->trans_a ? a_tail : a_lead;
    s->k = s->trans_a ? a_lead : a_tail;
    const int64_t kb = s->trans_b ? b_tail : b_lead;
    s->n = s->trans_b ? b_lead : b_tail;
    if (s->k != kb) {
      const std::vector<int64_t> ka =
          s->trans_a ? Axes(a, 0, a_split) : Axes(a, a_split, a.size());
      const std::vector<int64_t> kb_axes =
          s->trans_b ? Axes(b, b_split, b.size()) : Axes(b, 0, b_split);
      return d.Bad("contracted sizes differ (contract ", contract, "): a ", Dims(a), ta,
                   " contracts ", Dims(ka), " (", s->k, ") but b ", Dims(b), tb, " contracts ",
                   Dims(kb_axes), " (", kb, ")");
    }
    if (d.numel(s->out) != s->m * s->n) {
      return d.Bad("output is ", Dims(c), " (", d.numel(s->out), " elements), expected ", s->m,
                   " x ", s->n, " = ", s->m * s->n, " elements");
    }
  }
  if (s->out == s->in[0] || s->out == s->in[1]) return d.Bad("output aliases an input");
  return absl::OkStatus();
}

absl::Status RunMatmul(const Step& s, const RunContext& c) {
  c.kernels.Matmul(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.m, s.n, s.k, s.trans_a,
                   s.trans_b);
  return absl::OkStatus();
}

// [.., b dims], b -> the same shape: out = a + b broadcast over the leading axes (out may alias
// a). b has one or more dims (gpt2's c_attn bias is [3, H, D]); a's trailing dims are b's.
absl::Status DecodeAddBias(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(2, 1));
  const auto& a = d.shape(s->in[0]);
  const auto& b = d.shape(s->in[1]);
  if (!IsTrailingDims(b, a)) {
    return d.Bad("bias is ", Dims(b), ", expected the trailing dims of the input ", Dims(a));
  }
  s->cols = d.numel(s->in[1]);
  s->rows = s->cols == 0 ? 0 : d.numel(s->in[0]) / s->cols;
  return d.SameNumel(s->in[0], s->out, "input", "output");
}

absl::Status RunAddBias(const Step& s, const RunContext& c) {
  c.kernels.AddBias(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.out), s.rows, s.cols);
  return absl::OkStatus();
}

// [.., out dims] -> out: the sum over the leading axes.
absl::Status DecodeBiasGrad(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 1));
  const auto& a = d.shape(s->in[0]);
  const auto& out = d.shape(s->out);
  if (!IsTrailingDims(out, a)) {
    return d.Bad("output is ", Dims(out), ", expected the trailing dims of the input ", Dims(a));
  }
  s->cols = d.numel(s->out);
  s->rows = s->cols == 0 ? 0 : d.numel(s->in[0]) / s->cols;
  return absl::OkStatus();
}

absl::Status RunBiasGrad(const Step& s, const RunContext& c) {
  c.kernels.BiasGrad(c.f32(s.in[0]), c.f32(s.out), s.rows, s.cols);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterLinearOps(OpRegistry* registry) {
  RETURN_IF_ERROR(
      registry->Register(Instruction::MATMUL, {ElementTypes::F32(), DecodeMatmul, RunMatmul}));
  RETURN_IF_ERROR(registry->Register(Instruction::ADD_BIAS,
                                     {ElementTypes::F32(), DecodeAddBias, RunAddBias}));
  return registry->Register(Instruction::BIAS_GRAD,
                            {ElementTypes::F32(), DecodeBiasGrad, RunBiasGrad});
}

}  // namespace weft
