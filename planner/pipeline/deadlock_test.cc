#include "planner/pipeline/deadlock.h"

#include <gtest/gtest.h>

namespace weft::planner::pipeline {
namespace {

v1::Instruction Transfer(v1::Instruction::Op op, int buffer, int peer, uint32_t tag) {
  v1::Instruction ins;
  ins.set_op(op);
  if (op == v1::Instruction::SEND) {
    ins.add_inputs(buffer);
  } else {
    ins.add_outputs(buffer);
  }
  ins.set_group(0);
  ins.set_peer(peer);
  ins.set_tag(tag);
  return ins;
}

v1::Instruction Collective(v1::Instruction::Op op) {
  v1::Instruction ins;
  ins.set_op(op);
  ins.add_inputs(0);
  ins.add_outputs(0);
  ins.set_group(0);
  return ins;
}

// Two ranks on one group, one [4] buffer each.
std::vector<v1::Program> TwoRanks(std::vector<v1::Instruction> r0, std::vector<v1::Instruction> r1) {
  std::vector<v1::Program> programs(2);
  for (int r = 0; r < 2; ++r) {
    v1::Program& p = programs[r];
    p.set_rank(r);
    v1::CommGroup* g = p.add_groups();
    g->set_id(0);
    g->add_ranks(0);
    g->add_ranks(1);
    v1::Buffer* b = p.add_buffers();
    b->set_id(0);
    b->add_shape(4);
    for (const v1::Instruction& ins : r == 0 ? r0 : r1) *p.add_instructions() = ins;
  }
  return programs;
}

TEST(DeadlockTest, MatchedSendAndRecvComplete) {
  auto programs = TwoRanks({Transfer(v1::Instruction::SEND, 0, 1, 5)},
                           {Transfer(v1::Instruction::RECV, 0, 0, 5)});
  EXPECT_TRUE(CheckDeadlockFree(programs).ok());
  EXPECT_TRUE(CheckTransfersMatch(programs).ok());
}

TEST(DeadlockTest, BothSendingFirstIsADeadlockNamingRanksAndInstructions) {
  auto programs = TwoRanks(
      {Transfer(v1::Instruction::SEND, 0, 1, 1), Transfer(v1::Instruction::RECV, 0, 1, 2)},
      {Transfer(v1::Instruction::SEND, 0, 0, 2), Transfer(v1::Instruction::RECV, 0, 0, 1)});
  EXPECT_TRUE(CheckTransfersMatch(programs).ok());
  absl::Status s = CheckDeadlockFree(programs);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("rank 0 at instruction 0 (SEND to member 1 of group 0 tag 1"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("rank 1 at instruction 0 (SEND to member 0 of group 0 tag 2"),
            std::string::npos)
      << s;
}

TEST(DeadlockTest, CollectivesInDifferentOrderAreReported) {
  auto programs = TwoRanks({Collective(v1::Instruction::ALL_REDUCE)},
                           {Collective(v1::Instruction::ALL_GATHER)});
  absl::Status s = CheckDeadlockFree(programs);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ALL_REDUCE"), std::string::npos) << s;
  EXPECT_NE(s.message().find("ALL_GATHER"), std::string::npos) << s;
  // A collective one member never reaches.
  programs = TwoRanks({Collective(v1::Instruction::ALL_REDUCE)}, {});
  s = CheckDeadlockFree(programs);
  EXPECT_NE(s.message().find("rank 0 at instruction 0 (ALL_REDUCE"), std::string::npos) << s;
}

TEST(DeadlockTest, OrderTransfersResolvesABatch) {
  // Each rank sends and receives in one batch: the simulation finds an order that completes.
  std::vector<std::vector<TransferBatch>> ranks = {
      {{Transfer(v1::Instruction::SEND, 0, 1, 1), Transfer(v1::Instruction::RECV, 0, 1, 2)}},
      {{Transfer(v1::Instruction::SEND, 0, 0, 2), Transfer(v1::Instruction::RECV, 0, 0, 1)}}};
  std::map<int, std::vector<int>> groups = {{0, {0, 1}}};
  auto ordered = OrderTransfers(ranks, groups);
  ASSERT_TRUE(ordered.ok()) << ordered.status();
  auto programs = TwoRanks((*ordered)[0], (*ordered)[1]);
  EXPECT_TRUE(CheckDeadlockFree(programs).ok()) << CheckDeadlockFree(programs);
}

TEST(DeadlockTest, UnmatchedOrMisSizedTransfersAreRejected) {
  auto programs = TwoRanks({Transfer(v1::Instruction::SEND, 0, 1, 3)}, {});
  absl::Status s = CheckTransfersMatch(programs);
  EXPECT_NE(s.message().find("rank 0 -> rank 1 tag 3"), std::string::npos) << s;
  programs = TwoRanks({Transfer(v1::Instruction::SEND, 0, 1, 3)},
                      {Transfer(v1::Instruction::RECV, 0, 0, 3)});
  programs[1].mutable_buffers(0)->set_shape(0, 5);
  s = CheckTransfersMatch(programs);
  EXPECT_NE(s.message().find("sends 4 elements, receives 5"), std::string::npos) << s;
}

}  // namespace
}  // namespace weft::planner::pipeline
