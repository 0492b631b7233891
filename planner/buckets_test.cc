// FuseGradientAllReduces: the optimizer phase's gradient all-reduces of one group, reduce op and
// dtype become buckets of up to the cap, placed where their last gradient completes; nothing is
// fused across a transfer, a collective of another group or an instruction touching a member.
#include "planner/buckets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/program.h"
#include "planner/format.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using v1::Instruction;

std::vector<const Instruction*> GradientAllReduces(const v1::Program& p) {
  std::vector<const Instruction*> out;
  for (const Instruction& ins : p.instructions()) {
    if (ins.op() == Instruction::ALL_REDUCE && ins.phase() == Instruction::OPTIMIZER) {
      out.push_back(&ins);
    }
  }
  return out;
}

// fc0 (6 -> 8, bias) -> relu -> fc1 (8 -> 2, bias) on dp=2: four gradients, 90 floats.
v1::JobSpec Mlp(double bucket_mb, bool blocking) {
  v1::JobSpec spec = testing::SpecBuilder({2}, {"dp"})
                         .Batch(8, {6}, {2})
                         .Linear("fc0", 6, 8)
                         .Act("act0", "relu")
                         .Linear("fc1", 8, 2)
                         .Buckets(bucket_mb)
                         .Spec();
  spec.set_blocking_collectives(blocking);
  return spec;
}

TEST(BucketsTest, GradientsOfOneGroupShareABucketWhereTheLastCompletes) {
  for (bool blocking : {false, true}) {
    SCOPED_TRACE(blocking ? "blocking" : "overlapped");
    const std::vector<v1::Program> separate = testing::MustPlan(Mlp(0, blocking));
    const std::vector<v1::Program> bucketed = testing::MustPlan(Mlp(25, blocking));
    ASSERT_EQ(separate.size(), 2u);
    ASSERT_EQ(bucketed.size(), 2u);
    const v1::Program& p = bucketed[0];
    ASSERT_EQ(GradientAllReduces(separate[0]).size(), 4u);
    const std::vector<const Instruction*> fused = GradientAllReduces(p);
    ASSERT_EQ(fused.size(), 1u);
    const Instruction& bucket = *fused[0];
    ASSERT_EQ(bucket.inputs_size(), 4);
    ASSERT_EQ(bucket.outputs_size(), 4);
    int64_t elements = 0;
    std::vector<std::string> names;
    for (int i = 0; i < 4; ++i) {
      elements += BufferElements(p.buffers(bucket.inputs(i)));
      names.push_back(p.buffers(bucket.inputs(i)).name());
    }
    EXPECT_EQ(elements, 6 * 8 + 8 + 8 * 2 + 2);
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"fc0.bias@grad", "fc0.weight@grad",
                                               "fc1.bias@grad", "fc1.weight@grad"}));
    ASSERT_TRUE(bucket.has_scratch());
    EXPECT_EQ(p.buffers(bucket.scratch()).role(), v1::Buffer::SCRATCH);
    EXPECT_EQ(BufferElements(p.buffers(bucket.scratch())), elements);
    // Every member's gradient is written before the bucket, none is read before it.
    int at = -1;
    for (int i = 0; i < p.instructions_size(); ++i) {
      if (&p.instructions(i) == &bucket) at = i;
    }
    for (int i = 0; i < p.instructions_size(); ++i) {
      const BufferAccess access = InstructionAccess(p.instructions(i));
      for (int member : bucket.inputs()) {
        for (int w : access.writes) {
          if (w == member && i != at) EXPECT_LT(i, at) << p.instructions(i).comment();
        }
      }
      for (int member : bucket.outputs()) {
        for (int r : access.reads) {
          if (r == member && i != at) EXPECT_GT(i, at) << p.instructions(i).comment();
        }
      }
    }
    // The same bytes go over the wire, in one call.
    EXPECT_EQ(CollectiveBytes(p, bucket),
              2 * (2 - 1) * elements * 4 / 2);
  }
}

TEST(BucketsTest, AGradientOverTheCapIsABucketOfItsOwn) {
  // 0.0001 MiB = 104 bytes: the weight gradients (192 B, 64 B) and biases (32 B, 8 B) make
  // more than one bucket and fewer than four: every gradient reduced once, some together.
  const std::vector<v1::Program> programs = testing::MustPlan(Mlp(0.0001, false));
  ASSERT_EQ(programs.size(), 2u);
  int pairs = 0;
  for (const Instruction* ins : GradientAllReduces(programs[0])) pairs += ins->inputs_size();
  EXPECT_EQ(pairs, 4);
  EXPECT_GT(GradientAllReduces(programs[0]).size(), 1u);
  EXPECT_LT(GradientAllReduces(programs[0]).size(), 4u);
}

// Synthetic: buffers 0..5 gradients; a SEND, a collective of another group and a reader of a
// member's result each end the open bucket.
TEST(BucketsTest, NeverFusesAcrossWhatAMemberMayNotPass) {
  v1::Program p;
  for (int i = 0; i < 10; ++i) {
    v1::Buffer* b = p.add_buffers();
    b->set_id(i);
    b->set_name("g" + std::to_string(i));
    b->add_shape(4);
    b->set_role(v1::Buffer::GRAD);
  }
  auto all_reduce = [&](int buffer, int group) {
    Instruction* ins = p.add_instructions();
    ins->set_op(Instruction::ALL_REDUCE);
    ins->set_phase(Instruction::OPTIMIZER);
    ins->set_group(group);
    ins->add_inputs(buffer);
    ins->add_outputs(buffer);
    ins->set_comment("g" + std::to_string(buffer));
  };
  auto other = [&](Instruction::Op op, std::vector<int> in, const std::string& comment) {
    Instruction* ins = p.add_instructions();
    ins->set_op(op);
    for (int b : in) ins->add_inputs(b);
    ins->set_comment(comment);
    if (op == Instruction::ALL_REDUCE) {
      ins->set_group(1);
      ins->add_outputs(in[0]);
    }
    return ins;
  };
  all_reduce(0, 0);
  all_reduce(1, 0);
  other(Instruction::SEND, {8}, "send");
  all_reduce(2, 0);
  all_reduce(3, 0);
  other(Instruction::ALL_REDUCE, {9}, "group 1");
  all_reduce(4, 0);
  other(Instruction::SCALE, {4}, "reads g4")->add_outputs(7);
  all_reduce(5, 0);
  all_reduce(6, 0);
  EXPECT_EQ(FuseGradientAllReduces(&p, 1 << 20), 3);
  std::vector<std::string> order;
  for (const Instruction& ins : p.instructions()) {
    std::string what = ins.comment().rfind("bucket", 0) == 0 ? "" : ins.comment();
    for (int b : ins.inputs()) {
      if (what.empty()) what += "[";
      if (ins.comment().rfind("bucket", 0) == 0) what += "g" + std::to_string(b) + " ";
    }
    if (ins.comment().rfind("bucket", 0) == 0) what += "]";
    order.push_back(what);
  }
  EXPECT_EQ(order, (std::vector<std::string>{"[g0 g1 ]", "send", "[g2 g3 ]", "group 1", "g4",
                                             "reads g4", "[g5 g6 ]"}));
  EXPECT_EQ(FuseGradientAllReduces(&p, 0), 0);
}

}  // namespace
}  // namespace weft::planner
