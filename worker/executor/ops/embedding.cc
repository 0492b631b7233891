// The embedding lookup and its gradient over a (vocabulary-sharded) table [rows, dim]: ids (I32
// or I64, any shape, n of them) name rows of the global table; this rank's shard starts at row
// o = box.offsets[0] (box: the table's region) and ids outside it give zeros.
#include <vector>

#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// The table [rows, dim] (`role`): Step::rows, cols and the shard's first row (Step::offset); the
// rows-by-dim buffer `values` (`values_role`) holds one row per id.
absl::Status DecodeTable(Decoder& d, Step* s, int table, const char* role, int values,
                         const char* values_role) {
  const std::vector<int64_t>& t = d.shape(table);
  if (t.size() != 2) return d.Bad(d.Named(role, table), " is not [rows, dim]");
  s->rows = t[0];
  s->cols = t[1];
  s->numel = d.numel(s->in[0]);  // the ids
  RETURN_IF_ERROR(d.Holds(values, values_role, s->numel * s->cols,
                          absl::StrCat(s->numel, " ids x dim ", s->cols)));
  if (d.shape(values).back() != s->cols) {
    return d.Bad(d.Named(values_role, values), " does not end in dim ", s->cols, " of ",
                 d.Named(role, table));
  }
  GlobalBox region;
  RETURN_IF_ERROR(d.Region(table, role, false, &region));
  s->offset = region.offsets[0];
  return d.Apart();
}

// n, [rows, dim] -> [n, dim]: out[r] = table[ids[r] - o], or zeros.
absl::Status DecodeEmbedding(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(2, 1));
  return DecodeTable(d, s, s->in[1], "table", s->out, "output");
}

absl::Status RunEmbedding(const Step& s, const RunContext& c) {
  c.kernels.Embedding(c.data(s.in[0]), s.ids_dtype, c.f32(s.in[1]), c.f32(s.out), s.numel,
                      s.rows, s.cols, s.offset);
  return absl::OkStatus();
}

// n, [n, dim] -> [rows, dim]: out[ids[r] - o] = sum of dy[r] over the r falling there.
absl::Status DecodeEmbeddingGrad(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(2, 1));
  return DecodeTable(d, s, s->out, "output", s->in[1], "dy");
}

absl::Status RunEmbeddingGrad(const Step& s, const RunContext& c) {
  c.kernels.EmbeddingGrad(c.data(s.in[0]), s.ids_dtype, c.f32(s.in[1]), c.f32(s.out), s.numel,
                          s.rows, s.cols, s.offset);
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterEmbeddingOps(OpRegistry* registry) {
  const ElementTypes ids_first = ElementTypes::F32WithIdsInput(0);
  RETURN_IF_ERROR(
      registry->Register(Instruction::EMBEDDING, {ids_first, DecodeEmbedding, RunEmbedding}));
  return registry->Register(Instruction::EMBEDDING_GRAD,
                            {ids_first, DecodeEmbeddingGrad, RunEmbeddingGrad});
}

}  // namespace weft
