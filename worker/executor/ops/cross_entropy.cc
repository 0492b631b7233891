// The cross-entropy over (vocabulary-sharded) logits, viewed [rows, cols], in parts that
// all-reduce across the shards: ROW_MAX (then an all-reduce MAX), CE_PARTS (then a sum), CE_LOSS,
// and their VJPs CE_LOSS_GRAD and CE_PARTS_GRAD. Targets are ids (I32 or I64), one per row; this
// rank's columns start at o = box.offsets[-1] (box: the logits' region). The outputs are
// written apart from the inputs.
#include <string>

#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// Each of `ids` (input or output buffers) holds one element per row of the logits.
absl::Status PerRow(Decoder& d, const Step& s, std::initializer_list<std::pair<int, const char*>> ids,
                    const std::string& why) {
  for (const auto& [id, role] : ids) RETURN_IF_ERROR(d.Holds(id, role, s.rows, why));
  return absl::OkStatus();
}

std::string RowsOfLogits(const Decoder& d, int logits) {
  return absl::StrCat("one per row of logits ", Dims(d.shape(logits)));
}

// rc -> r: out[r] = max_c logits[r, c].
absl::Status DecodeRowMax(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 1));
  d.RowView(s->in[0], &s->rows, &s->cols);
  RETURN_IF_ERROR(PerRow(d, *s, {{s->out, "output"}}, RowsOfLogits(d, s->in[0])));
  return d.Apart();
}

absl::Status RunRowMax(const Step& s, const RunContext& c) {
  c.kernels.RowMax(c.f32(s.in[0]), c.f32(s.out), s.rows, s.cols);
  return absl::OkStatus();
}

// logits [rows, cols], m [rows] and targets [rows]: rows, cols, the column offset.
absl::Status DecodeLogits(Decoder& d, Step* s) {
  d.RowView(s->in[0], &s->rows, &s->cols);
  RETURN_IF_ERROR(
      PerRow(d, *s, {{s->in[1], "m"}, {s->in[2], "targets"}}, RowsOfLogits(d, s->in[0])));
  GlobalBox region;
  RETURN_IF_ERROR(d.Region(s->in[0], "logits", false, &region));
  s->offset = region.offsets[region.rank - 1];
  return absl::OkStatus();
}

// logits, m, targets -> sumexp[r] = sum_c exp(logits[r, c] - m[r]), tlogit[r] = logits[r, t - o]
// (0 when the target t is in another shard).
absl::Status DecodeCeParts(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(3, 2));
  RETURN_IF_ERROR(DecodeLogits(d, s));
  RETURN_IF_ERROR(PerRow(d, *s, {{s->outs[0], "sumexp"}, {s->outs[1], "tlogit"}},
                         RowsOfLogits(d, s->in[0])));
  return d.Apart();
}

absl::Status RunCeParts(const Step& s, const RunContext& c) {
  c.kernels.CrossEntropyParts(c.f32(s.in[0]), c.f32(s.in[1]), c.data(s.in[2]), s.ids_dtype,
                              c.f32(s.outs[0]), c.f32(s.outs[1]), s.rows, s.cols, s.offset);
  return absl::OkStatus();
}

// logits, m, targets, d_sumexp, d_tlogit -> dlogits [rows, cols] = d_sumexp[r] exp(logits -
// m[r]), plus d_tlogit[r] at the target's column.
absl::Status DecodeCePartsGrad(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(5, 1));
  RETURN_IF_ERROR(DecodeLogits(d, s));
  RETURN_IF_ERROR(PerRow(d, *s, {{s->in[3], "d_sumexp"}, {s->in[4], "d_tlogit"}},
                         RowsOfLogits(d, s->in[0])));
  RETURN_IF_ERROR(d.SameNumel(s->in[0], s->out, "logits", "output"));
  return d.Apart();
}

absl::Status RunCePartsGrad(const Step& s, const RunContext& c) {
  c.kernels.CrossEntropyPartsGrad(c.f32(s.in[0]), c.f32(s.in[1]), c.data(s.in[2]), s.ids_dtype,
                                  c.f32(s.in[3]), c.f32(s.in[4]), c.f32(s.out), s.rows, s.cols,
                                  s.offset);
  return absl::OkStatus();
}

// sumexp, m, tlogit [rows] -> out[0] = scale * sum_r (log(sumexp[r]) + m[r] - tlogit[r]).
absl::Status DecodeCeLoss(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(3, 1));
  s->rows = d.numel(s->in[0]);
  s->scale = d.ins().scale();
  const std::string why = absl::StrCat("one per element of ", d.Named("sumexp", s->in[0]));
  RETURN_IF_ERROR(PerRow(d, *s, {{s->in[1], "m"}, {s->in[2], "tlogit"}}, why));
  RETURN_IF_ERROR(d.Holds(s->out, "output", 1, "the loss"));
  return d.Apart();
}

absl::Status RunCeLoss(const Step& s, const RunContext& c) {
  c.kernels.CrossEntropyLoss(c.f32(s.in[0]), c.f32(s.in[1]), c.f32(s.in[2]), c.f32(s.out), s.rows,
                             s.scale);
  return absl::OkStatus();
}

// sumexp [rows] -> d_sumexp = scale / sumexp, d_tlogit = -scale.
absl::Status DecodeCeLossGrad(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 2));
  s->rows = d.numel(s->in[0]);
  s->scale = d.ins().scale();
  const std::string why = absl::StrCat("one per element of ", d.Named("sumexp", s->in[0]));
  RETURN_IF_ERROR(PerRow(d, *s, {{s->outs[0], "d_sumexp"}, {s->outs[1], "d_tlogit"}}, why));
  return d.Apart();
}

absl::Status RunCeLossGrad(const Step& s, const RunContext& c) {
  c.kernels.CrossEntropyLossGrad(c.f32(s.in[0]), c.f32(s.outs[0]), c.f32(s.outs[1]), s.rows,
                                 s.scale);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterCrossEntropyOps(OpRegistry* registry) {
  const ElementTypes f32 = ElementTypes::F32();
  const ElementTypes targets = ElementTypes::F32WithIdsInput(2);
  RETURN_IF_ERROR(registry->Register(Instruction::ROW_MAX, {f32, DecodeRowMax, RunRowMax}));
  RETURN_IF_ERROR(
      registry->Register(Instruction::CE_PARTS, {targets, DecodeCeParts, RunCeParts}));
  RETURN_IF_ERROR(registry->Register(Instruction::CE_PARTS_GRAD,
                                     {targets, DecodeCePartsGrad, RunCePartsGrad}));
  RETURN_IF_ERROR(registry->Register(Instruction::CE_LOSS, {f32, DecodeCeLoss, RunCeLoss}));
  return registry->Register(Instruction::CE_LOSS_GRAD, {f32, DecodeCeLossGrad, RunCeLossGrad});
}

}  // namespace weft
