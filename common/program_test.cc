#include "common/program.h"

#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

v1::Program TwoByTwo(int rank) {
  v1::Program p;
  p.set_rank(rank);
  p.mutable_mesh()->add_shape(2);
  p.mutable_mesh()->add_shape(2);
  p.mutable_mesh()->add_dim_names("dp");
  p.mutable_mesh()->add_dim_names("mp");
  return p;
}

TEST(ResolveGroupRanksTest, FillsRanksFromMeshDims) {
  v1::Program p = TwoByTwo(3);
  v1::CommGroup* dp = p.add_groups();
  dp->set_id(1);
  dp->add_dims(0);
  v1::CommGroup* both = p.add_groups();
  both->set_id(4);
  both->add_dims(0);
  both->add_dims(1);
  v1::CommGroup* given = p.add_groups();
  given->set_id(7);
  given->add_ranks(3);
  ASSERT_TRUE(ResolveGroupRanks(&p).ok());
  EXPECT_EQ(std::vector<int>(p.groups(0).ranks().begin(), p.groups(0).ranks().end()),
            (std::vector<int>{1, 3}));
  EXPECT_EQ(p.groups(1).ranks_size(), 4);
  EXPECT_EQ(std::vector<int>(p.groups(2).ranks().begin(), p.groups(2).ranks().end()),
            (std::vector<int>{3}));
}

TEST(ResolveGroupRanksTest, RejectsBadGroups) {
  v1::Program p = TwoByTwo(0);
  p.add_groups()->set_id(2);
  absl::Status s = ResolveGroupRanks(&p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("group 2"), std::string::npos) << s;

  v1::Program q = TwoByTwo(0);
  q.add_groups()->add_dims(5);
  s = ResolveGroupRanks(&q);
  EXPECT_NE(s.message().find("mesh dim 5"), std::string::npos) << s;

  v1::Program r = TwoByTwo(9);
  r.add_groups()->add_dims(0);
  s = ResolveGroupRanks(&r);
  EXPECT_NE(s.message().find("rank 9"), std::string::npos) << s;
}

// Buffers 0..5: a parameter, an input read before it is written, an ACCUMULATE target zeroed
// first, an activation, the loss, a checkpointed buffer, and one no instruction touches.
TEST(BufferLivesTest, SpansAndCarriedBuffers) {
  v1::Program p;
  for (int i = 0; i < 7; ++i) {
    v1::Buffer* b = p.add_buffers();
    b->set_id(i);
    b->add_shape(4);
  }
  p.mutable_buffers(0)->set_role(v1::Buffer::PARAM);
  p.set_loss_buffer(4);
  p.add_checkpoint_items()->set_buffer(5);
  auto add = [&](v1::Instruction::Op op, std::vector<int> in, std::vector<int> out) {
    v1::Instruction* ins = p.add_instructions();
    ins->set_op(op);
    for (int b : in) ins->add_inputs(b);
    for (int b : out) ins->add_outputs(b);
    return ins;
  };
  add(v1::Instruction::FILL, {}, {2});                 // 0
  add(v1::Instruction::RELU, {1}, {3});                // 1: reads 1 before any write
  add(v1::Instruction::ACCUMULATE, {3}, {2});          // 2: reads 2, written at 0
  add(v1::Instruction::MSE_LOSS, {3, 0}, {4});         // 3
  add(v1::Instruction::SCALE, {5}, {5});               // 4
  add(v1::Instruction::ALL_GATHER, {0}, {2})->set_scratch(3);  // 5: scratch touches 3
  add(v1::Instruction::SGD, {0, 2}, {0});              // 6
  const std::vector<BufferLife> lives = BufferLives(p);
  ASSERT_EQ(lives.size(), 7u);
  EXPECT_TRUE(lives[0].carried);   // parameter
  EXPECT_TRUE(lives[1].carried);   // read before written
  EXPECT_FALSE(lives[2].carried);  // ACCUMULATE after FILL
  EXPECT_EQ(lives[2].first, 0);
  EXPECT_EQ(lives[2].last, 6);
  EXPECT_FALSE(lives[3].carried);
  EXPECT_EQ(lives[3].first, 1);
  EXPECT_EQ(lives[3].last, 5);     // the scratch use counts
  EXPECT_EQ(lives[4].first, 3);
  EXPECT_EQ(lives[4].last, 6);     // the loss lives to the end
  EXPECT_TRUE(lives[5].carried);   // checkpointed
  EXPECT_EQ(lives[6].first, -1);

  // Ranges that share an instruction overlap; carried and untouched buffers overlap everything.
  EXPECT_TRUE(AliveTogether(lives[2], lives[3]));
  BufferLife a{0, 1, false}, b{2, 3, false}, c{1, 2, false};
  EXPECT_FALSE(AliveTogether(a, b));
  EXPECT_TRUE(AliveTogether(a, c));
  EXPECT_TRUE(AliveTogether(c, b));
  EXPECT_TRUE(AliveTogether(a, lives[0]));
  EXPECT_TRUE(AliveTogether(b, lives[6]));
}

TEST(ComputesInF32Test, ComputeOpsButNotDataMovement) {
  for (v1::Instruction::Op op :
       {v1::Instruction::MATMUL, v1::Instruction::ADD, v1::Instruction::ACCUMULATE,
        v1::Instruction::SCALE, v1::Instruction::ADAMW, v1::Instruction::SGD,
        v1::Instruction::EMBEDDING, v1::Instruction::CE_PARTS, v1::Instruction::ATTENTION_GRAD,
        v1::Instruction::DROPOUT, v1::Instruction::POSITIONS}) {
    EXPECT_TRUE(ComputesInF32(op)) << v1::Instruction::Op_Name(op);
  }
  for (v1::Instruction::Op op :
       {v1::Instruction::OP_UNSPECIFIED, v1::Instruction::ALL_REDUCE, v1::Instruction::ALL_GATHER,
        v1::Instruction::REDUCE_SCATTER, v1::Instruction::ALL_TO_ALL, v1::Instruction::SEND,
        v1::Instruction::RECV, v1::Instruction::SLICE, v1::Instruction::STACK,
        v1::Instruction::UNSTACK, v1::Instruction::CAST, v1::Instruction::FILL,
        v1::Instruction::LOAD_INPUT, v1::Instruction::LOAD_LABEL}) {
    EXPECT_FALSE(ComputesInF32(op)) << v1::Instruction::Op_Name(op);
  }
}

// Buffers: 0 x bf16[3,5], 1 w f32[5,4], 2 y bf16[3,4], 3 t bf16[100], 4 u bf16[100],
// 5 ids i32[6], 6 s bf16 (a scalar), 7 f f32[3,4].
v1::Program WideningProgram() {
  v1::Program p;
  auto buffer = [&](v1::DType dtype, std::vector<int64_t> shape) {
    v1::Buffer* b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_dtype(dtype);
    for (int64_t d : shape) b->add_shape(d);
  };
  buffer(v1::BF16, {3, 5});
  buffer(v1::F32, {5, 4});
  buffer(v1::BF16, {3, 4});
  buffer(v1::BF16, {100});
  buffer(v1::BF16, {100});
  buffer(v1::I32, {6});
  buffer(v1::BF16, {});
  buffer(v1::F32, {3, 4});
  return p;
}

v1::Instruction Ins(v1::Instruction::Op op, std::vector<int> in, std::vector<int> out) {
  v1::Instruction ins;
  ins.set_op(op);
  for (int b : in) ins.add_inputs(b);
  for (int b : out) ins.add_outputs(b);
  return ins;
}

// buffer, offset, elements, read, written.
using Row = std::tuple<int, int64_t, int64_t, bool, bool>;
std::vector<Row> Rows(const std::vector<WidenedOperand>& widened) {
  std::vector<Row> rows;
  for (const WidenedOperand& w : widened) {
    rows.emplace_back(w.buffer, w.offset, w.elements, w.read, w.written);
  }
  return rows;
}

TEST(WidenedOperandsTest, EachBf16OperandOnceAtAlignedOffsets) {
  const v1::Program p = WideningProgram();
  using v1::Instruction;
  // x read, w f32, y written: x's 60 bytes at 0, y's 48 at 256.
  std::vector<WidenedOperand> w = WidenedOperands(p, Ins(Instruction::MATMUL, {0, 1}, {2}));
  EXPECT_EQ(Rows(w), (std::vector<Row>{{0, 0, 15, true, false}, {2, 256, 12, false, true}}));
  EXPECT_EQ(WidenedBytes(w), 304);
  // In place: t once, read and written; u's 400 bytes after t's 400, at 512.
  w = WidenedOperands(p, Ins(Instruction::ADD, {3, 4}, {3}));
  EXPECT_EQ(Rows(w), (std::vector<Row>{{3, 0, 100, true, true}, {4, 512, 100, true, false}}));
  EXPECT_EQ(WidenedBytes(w), 912);
  // ACCUMULATE reads its output.
  w = WidenedOperands(p, Ins(Instruction::ACCUMULATE, {0}, {2}));
  EXPECT_EQ(Rows(w), (std::vector<Row>{{0, 0, 15, true, false}, {2, 256, 12, true, true}}));
  // ADAMW writes param and states (inputs 0, 2, 3), not the gradient; SGD its parameter.
  w = WidenedOperands(p, Ins(Instruction::ADAMW, {7, 2, 3, 4}, {}));
  EXPECT_EQ(Rows(w), (std::vector<Row>{{2, 0, 12, true, false},
                                       {3, 256, 100, true, true},
                                       {4, 768, 100, true, true}}));
  EXPECT_EQ(WidenedBytes(w), 1168);
  w = WidenedOperands(p, Ins(Instruction::SGD, {3, 4}, {3}));
  EXPECT_EQ(Rows(w), (std::vector<Row>{{3, 0, 100, true, true}, {4, 512, 100, true, false}}));
  // Ids are never widened; a scalar is one element.
  w = WidenedOperands(p.buffers(), Ins(Instruction::EMBEDDING, {5, 3}, {6}));
  EXPECT_EQ(Rows(w), (std::vector<Row>{{3, 0, 100, true, false}, {6, 512, 1, false, true}}));
  EXPECT_EQ(WidenedBytes(w), 516);
  // Nothing for float32 operands, data movement, or ids out of range.
  EXPECT_TRUE(WidenedOperands(p, Ins(Instruction::SCALE, {7}, {7})).empty());
  EXPECT_TRUE(WidenedOperands(p, Ins(Instruction::CAST, {0}, {7})).empty());
  EXPECT_TRUE(WidenedOperands(p, Ins(Instruction::ALL_REDUCE, {3}, {3})).empty());
  EXPECT_TRUE(WidenedOperands(p, Ins(Instruction::RELU, {-1}, {42})).empty());
  EXPECT_EQ(WidenedBytes({}), 0);
  // The instruction's scratch is not an operand: it is the area, never widened.
  v1::Instruction with_scratch = Ins(Instruction::RELU, {0}, {2});
  with_scratch.set_scratch(4);
  EXPECT_EQ(Rows(WidenedOperands(p, with_scratch)),
            (std::vector<Row>{{0, 0, 15, true, false}, {2, 256, 12, false, true}}));
}

}  // namespace
}  // namespace weft
