#include "planner/plan_report.h"

#include <gtest/gtest.h>

#include "planner/planner.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::R;
using testing::S;
using testing::SpecBuilder;

void AddBuffer(v1::Program* p, const std::string& name, std::vector<int64_t> shape,
               v1::Buffer::Role role) {
  v1::Buffer* b = p->add_buffers();
  b->set_id(p->buffers_size() - 1);
  b->set_name(name);
  for (int64_t d : shape) b->add_shape(d);
  b->set_role(role);
}

v1::Instruction* Add(v1::Program* p, v1::Instruction::Op op, std::vector<int> in,
                     std::vector<int> out) {
  v1::Instruction* ins = p->add_instructions();
  ins->set_op(op);
  for (int b : in) ins->add_inputs(b);
  for (int b : out) ins->add_outputs(b);
  return ins;
}

// A hand-written program small enough to check every number by hand.
v1::Program Tiny(int rank) {
  v1::Program p;
  p.set_rank(rank);
  p.set_world_size(2);
  AddBuffer(&p, "w", {4, 2}, v1::Buffer::PARAM);              // b0 32 B
  AddBuffer(&p, "w@grad", {4, 2}, v1::Buffer::GRAD);          // b1 32 B
  AddBuffer(&p, "w.m", {4, 2}, v1::Buffer::OPTIMIZER_STATE);  // b2 32 B
  AddBuffer(&p, "input", {3, 4}, v1::Buffer::DATA);           // b3 48 B
  AddBuffer(&p, "h", {3, 2}, v1::Buffer::ACTIVATION);         // b4 24 B
  AddBuffer(&p, "loss", {1}, v1::Buffer::LOSS);               // b5 4 B
  AddBuffer(&p, "r", {3, 2}, v1::Buffer::ACTIVATION);         // b6 24 B
  AddBuffer(&p, "t", {4, 2}, v1::Buffer::ACTIVATION);         // b7 32 B
  v1::CommGroup* g = p.add_groups();
  g->set_id(0);
  g->add_ranks(0);
  g->add_ranks(1);
  g->set_mesh_dims("dp");
  p.set_loss_buffer(5);
  Add(&p, v1::Instruction::LOAD_INPUT, {}, {3});        // 0: input           48
  Add(&p, v1::Instruction::MATMUL, {3, 0}, {4});        // 1: input, h        72 (peak)
  Add(&p, v1::Instruction::RELU, {4}, {6});             // 2: h, r            48
  Add(&p, v1::Instruction::MSE_LOSS, {6, 6}, {5});      // 3: r, loss         28
  Add(&p, v1::Instruction::ALL_REDUCE, {5}, {5});       // 4: loss             4; sends 4
  Add(&p, v1::Instruction::ALL_REDUCE, {1}, {1});       // 5: loss             4; sends 32
  v1::Instruction* a2a = Add(&p, v1::Instruction::ALL_TO_ALL, {1}, {7});  // 6: loss, t  36
  a2a->add_split_sizes(1);  // member 0 keeps 1 of 4 rows, member 1 keeps 3
  a2a->add_split_sizes(3);
  a2a->set_concat_axis(1);
  return p;
}

TEST(PlanReportTest, HandCheckedProgram) {
  PlanReport report = ReportPlan({Tiny(0), Tiny(1)});
  ASSERT_EQ(report.ranks.size(), 2u);
  for (const RankReport& r : report.ranks) {
    EXPECT_EQ(r.param_bytes, 32);
    EXPECT_EQ(r.grad_bytes, 32);
    EXPECT_EQ(r.optimizer_state_bytes, 32);
    EXPECT_EQ(r.peak_activation_bytes, 72);
    ASSERT_EQ(r.collectives.size(), 3u);
    EXPECT_EQ(r.collectives[0].instruction, 4);
    EXPECT_EQ(r.collectives[0].op, "ALL_REDUCE");
    EXPECT_EQ(r.collectives[0].tensor, "loss");
    EXPECT_EQ(r.collectives[0].ranks, (std::vector<int>{0, 1}));
    EXPECT_EQ(r.collectives[0].mesh_dims, "dp");
    EXPECT_EQ(r.collectives[0].bytes_sent, 4);   // ring: 2 (K-1)/K of 4 B
    EXPECT_EQ(r.collectives[1].bytes_sent, 32);  // 2 (K-1)/K of 32 B
    EXPECT_EQ(r.collectives[2].op, "ALL_TO_ALL");
    EXPECT_EQ(r.collectives[2].tensor, "w@grad");
  }
  // All-to-all: every row but the member's own leaves it: 3 of 4 rows on rank 0, 1 on rank 1.
  EXPECT_EQ(report.ranks[0].collectives[2].bytes_sent, 24);
  EXPECT_EQ(report.ranks[1].collectives[2].bytes_sent, 8);
  EXPECT_EQ(report.ranks[0].bytes_sent_per_step, 4 + 32 + 24);
  EXPECT_EQ(report.ranks[1].bytes_sent_per_step, 4 + 32 + 8);
  EXPECT_EQ(report.total_bytes_per_step, 60 + 44);
}

TEST(PlanReportTest, DataParallelPlan) {
  // fc0 6->2 with bias on dp 2, batch 4, SGD: per rank params 6*2+2 = 14 floats.
  v1::JobSpec spec = SpecBuilder({2}, {"dp"}).Batch(4, {6}, {2}).Linear("fc0", 6, 2).Spec();
  PlanReport report = ReportPlan(testing::MustPlan(spec));
  ASSERT_EQ(report.ranks.size(), 2u);
  for (const RankReport& r : report.ranks) {
    EXPECT_EQ(r.param_bytes, 4 * 14);
    EXPECT_EQ(r.optimizer_state_bytes, 0);
    // Gradient all-reduces (weight 48 B, bias 8 B) and the loss (4 B): ring 2 (K-1)/K = 1.
    ASSERT_EQ(r.collectives.size(), 3u);
    EXPECT_EQ(r.bytes_sent_per_step, 4 + 48 + 8);
    EXPECT_GT(r.peak_activation_bytes, 0);
  }
  EXPECT_EQ(report.total_bytes_per_step, 2 * 60);
}

}  // namespace
}  // namespace weft::planner
