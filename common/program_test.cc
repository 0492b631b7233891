#include "common/program.h"

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

}  // namespace
}  // namespace weft
