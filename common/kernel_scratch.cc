#include "common/kernel_scratch.h"

#include <algorithm>
#include <vector>

#include "common/program.h"

namespace weft {

int64_t CpuAttentionScratchFloats(int64_t seq, bool grad) {
  return (grad ? 3 : 1) * std::min(kCpuAttentionBlock, seq) * seq;
}
int64_t CpuRopeScratchFloats(int64_t head_dim) { return 3 * (head_dim / 2); }
int64_t CpuLayerNormGradScratchDoubles(int64_t rows, int64_t dim) { return 2 * dim + 2 * rows; }
int64_t CpuRmsNormGradScratchDoubles(int64_t rows, int64_t dim) { return dim + rows; }
int64_t CpuEmbeddingGradScratchInt64s(int64_t n, int64_t table_rows) { return table_rows + n; }
int64_t CpuEmbeddingGradScratchDoubles(int64_t dim) { return dim; }

namespace {

// Elements each of the cpu backend's scratch vectors grows to.
struct CpuKernelScratch {
  int64_t f32 = 0;
  int64_t f64 = 0;
  int64_t i64 = 0;
  int64_t bf16_a = 0;  // float32 copies of a bf16 Matmul's a
  int64_t bf16_b = 0;  // and of its b
  int64_t Bytes() const {
    return static_cast<int64_t>(sizeof(float)) * (f32 + bf16_a + bf16_b) +
           static_cast<int64_t>(sizeof(double)) * f64 +
           static_cast<int64_t>(sizeof(int64_t)) * i64;
  }
};

// Reads the shapes of an instruction's operands as the executor's decoder does
// (worker/executor/ops/*.cc); an operand that is not there counts as empty (the decoder refuses
// the program before any kernel runs).
class ShapeReader {
 public:
  ShapeReader(const v1::Program& p, const v1::Instruction& ins) : p_(p), ins_(ins) {}

  const v1::Buffer* In(int i) const { return Get(ins_.inputs(), i); }
  const v1::Buffer* Out(int i) const { return Get(ins_.outputs(), i); }
  static int64_t Dim(const v1::Buffer* b, int axis) {
    if (b == nullptr || axis >= b->shape_size()) return 0;
    return b->shape(axis);
  }
  static int64_t Last(const v1::Buffer* b) {
    return b == nullptr || b->shape_size() == 0 ? 0 : b->shape(b->shape_size() - 1);
  }
  static int64_t Numel(const v1::Buffer* b) { return b == nullptr ? 0 : BufferElements(*b); }

 private:
  const v1::Buffer* Get(const google::protobuf::RepeatedField<int32_t>& ids, int i) const {
    if (i >= ids.size() || ids[i] < 0 || ids[i] >= p_.buffers_size()) return nullptr;
    return &p_.buffers(ids[i]);
  }
  const v1::Program& p_;
  const v1::Instruction& ins_;
};

void Note(const v1::Program& p, const v1::Instruction& ins, bool bf16, CpuKernelScratch* s) {
  const ShapeReader r(p, ins);
  auto grow = [](int64_t& to, int64_t n) { to = std::max(to, n); };
  switch (ins.op()) {
    case v1::Instruction::MATMUL:
      // CpuKernels::Matmul copies nothing for an empty product.
      if (bf16 && r.Numel(r.In(0)) > 0 && r.Numel(r.In(1)) > 0 && r.Numel(r.Out(0)) > 0) {
        grow(s->bf16_a, r.Numel(r.In(0)));
        grow(s->bf16_b, r.Numel(r.In(1)));
      }
      break;
    case v1::Instruction::ATTENTION:
    case v1::Instruction::ATTENTION_GRAD:
      grow(s->f32, CpuAttentionScratchFloats(r.Dim(r.In(0), 1),
                                             ins.op() == v1::Instruction::ATTENTION_GRAD));
      break;
    case v1::Instruction::ROPE:
    case v1::Instruction::ROPE_GRAD:
      grow(s->f32, CpuRopeScratchFloats(r.Dim(r.In(0), 3)));
      break;
    case v1::Instruction::LAYER_NORM_GRAD:
    case v1::Instruction::RMS_NORM_GRAD: {
      const int64_t cols = r.Last(r.In(0));
      const int64_t rows = cols > 0 ? r.Numel(r.In(0)) / cols : 0;
      grow(s->f64, ins.op() == v1::Instruction::LAYER_NORM_GRAD
                       ? CpuLayerNormGradScratchDoubles(rows, cols)
                       : CpuRmsNormGradScratchDoubles(rows, cols));
      break;
    }
    case v1::Instruction::EMBEDDING_GRAD:
      grow(s->i64, CpuEmbeddingGradScratchInt64s(r.Numel(r.In(0)), r.Dim(r.Out(0), 0)));
      grow(s->f64, CpuEmbeddingGradScratchDoubles(r.Dim(r.Out(0), 1)));
      break;
    default:
      break;
  }
}

}  // namespace

int64_t KernelScratchBytes(const v1::Program& program) {
  if (!program.device().empty() && program.device() != "cpu") return 0;
  CpuKernelScratch s;
  const bool bf16 = program.precision() == "bf16";
  for (const v1::Instruction& ins : program.instructions()) Note(program, ins, bf16, &s);
  for (const v1::Instruction& ins : program.eval().instructions()) Note(program, ins, bf16, &s);
  return s.Bytes();
}

}  // namespace weft
