// StartCollectivesEarly: each collective moves up to just after what it depends on, keeps the
// order of all communication, and never passes an instruction that touches its outputs; and on
// a planned data-parallel MLP, every gradient's all-reduce starts right after the instruction
// that completes the gradient, before the rest of the backward pass (with `overlap: false`, the
// programs are as before: all-reduces at the optimizer phase).
#include "planner/early_collectives.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/test_util.h"

namespace weft::planner {
namespace {

using v1::Instruction;

class Program {
 public:
  Program& Op(Instruction::Op op, std::vector<int> in, std::vector<int> out,
              const std::string& comment) {
    Instruction* ins = p_.add_instructions();
    ins->set_op(op);
    for (int i : in) ins->add_inputs(i);
    for (int o : out) ins->add_outputs(o);
    ins->set_comment(comment);
    return *this;
  }
  // Declares buffer id (the next one) with `role`.
  Program& Buffer(v1::Buffer::Role role) {
    v1::Buffer* b = p_.add_buffers();
    b->set_id(p_.buffers_size() - 1);
    b->set_role(role);
    return *this;
  }
  Program& Scratch(int buffer) {
    p_.mutable_instructions(p_.instructions_size() - 1)->set_scratch(buffer);
    return *this;
  }
  v1::Program& proto() { return p_; }

 private:
  v1::Program p_;
};

std::vector<std::string> Order(const v1::Program& p) {
  std::vector<std::string> out;
  for (const Instruction& ins : p.instructions()) out.push_back(ins.comment());
  return out;
}

TEST(EarlyCollectivesTest, MovesUpToItsDependencies) {
  Program p;
  p.Op(Instruction::MATMUL, {0, 1}, {2}, "dx")          // writes the all-reduced buffer 2
      .Op(Instruction::SCALE, {2}, {3}, "reads dx")    // reads its pre-reduction value
      .Op(Instruction::MATMUL, {0, 4}, {5}, "dw")
      .Op(Instruction::BIAS_GRAD, {4}, {6}, "db")
      .Op(Instruction::ALL_REDUCE, {2}, {2}, "all_reduce dx")
      .Op(Instruction::ALL_REDUCE, {5}, {5}, "all_reduce dw")
      .Op(Instruction::LAYER_NORM_GRAD, {2, 7, 8}, {9}, "ln grad");
  EXPECT_EQ(StartCollectivesEarly(&p.proto()), 2);
  EXPECT_EQ(Order(p.proto()),
            (std::vector<std::string>{"dx", "reads dx", "all_reduce dx", "dw", "all_reduce dw",
                                      "db", "ln grad"}));
}

// An update writes its inputs in place (it has no outputs): the gather of the updated shard stays
// after it.
TEST(EarlyCollectivesTest, NeverPassesAnUpdateOfItsInput) {
  Program p;
  p.Op(Instruction::SLICE, {0}, {1}, "shard of the parameter")
      .Op(Instruction::ADAMW, {1, 2, 3, 4}, {}, "update the shard")
      .Op(Instruction::ALL_GATHER, {1}, {0}, "gather it back");
  EXPECT_EQ(StartCollectivesEarly(&p.proto()), 0);
  EXPECT_EQ(Order(p.proto()), (std::vector<std::string>{"shard of the parameter",
                                                        "update the shard", "gather it back"}));
}

TEST(EarlyCollectivesTest, KeepsTheOrderOfTransfersAndOfOtherGroups) {
  Program p;
  p.Op(Instruction::MATMUL, {0, 1}, {2}, "a")
      .Op(Instruction::MATMUL, {0, 3}, {4}, "b")
      .Op(Instruction::SEND, {5}, {}, "send")
      .Op(Instruction::MATMUL, {0, 6}, {7}, "c")
      .Op(Instruction::ALL_REDUCE, {2}, {2}, "all_reduce a")  // stays after the SEND
      .Op(Instruction::RECV, {}, {8}, "recv")
      .Op(Instruction::MATMUL, {0, 9}, {10}, "d")
      .Op(Instruction::ALL_REDUCE, {10}, {10}, "all_reduce d on group 1")
      .Op(Instruction::ALL_REDUCE, {4}, {4}, "all_reduce b");  // stays after group 1's
  p.proto().mutable_instructions(7)->set_group(1);
  EXPECT_EQ(StartCollectivesEarly(&p.proto()), 1);
  EXPECT_EQ(Order(p.proto()),
            (std::vector<std::string>{"a", "b", "send", "all_reduce a", "c", "recv", "d",
                                      "all_reduce d on group 1", "all_reduce b"}));
}

// A gradient completed later in program order but earlier in the backward is all-reduced first.
TEST(EarlyCollectivesTest, CollectivesOfOneGroupPassEachOther) {
  Program p;
  p.Op(Instruction::MATMUL, {0, 1}, {2}, "dw1")
      .Op(Instruction::MATMUL, {0, 3}, {4}, "dw0")
      .Op(Instruction::ALL_REDUCE, {4}, {5}, "all_reduce dw0")
      .Op(Instruction::ALL_REDUCE, {2}, {6}, "all_reduce dw1");
  EXPECT_EQ(StartCollectivesEarly(&p.proto()), 1);
  EXPECT_EQ(Order(p.proto()),
            (std::vector<std::string>{"dw1", "all_reduce dw1", "dw0", "all_reduce dw0"}));
}

TEST(EarlyCollectivesTest, NeverPassesAnInstructionTouchingItsOutputOrScratch) {
  Program p;
  p.Op(Instruction::MATMUL, {0, 1}, {2}, "x")
      .Op(Instruction::SCALE, {9}, {3}, "writes into what the gather writes next")
      .Op(Instruction::ADD, {3}, {10}, "reads it")
      .Op(Instruction::MATMUL, {0, 1}, {11}, "unrelated")
      .Op(Instruction::ALL_GATHER, {2}, {3}, "gather x")
      .Op(Instruction::MATMUL, {0, 1}, {12}, "writes the scratch")
      .Op(Instruction::MATMUL, {0, 1}, {13}, "unrelated 2")
      .Op(Instruction::REDUCE_SCATTER, {2}, {14}, "scatter x")
      .Scratch(12);
  EXPECT_EQ(StartCollectivesEarly(&p.proto()), 2);
  EXPECT_EQ(Order(p.proto()),
            (std::vector<std::string>{"x", "writes into what the gather writes next", "reads it",
                                      "gather x", "unrelated", "writes the scratch",
                                      "scatter x", "unrelated 2"}));
}

// Gathers of parameters (ZeRO-3) read nothing the step writes: each starts one gather ahead, after
// the first reader of the previous gather's result, not all at the top.
TEST(EarlyCollectivesTest, ParameterGathersStartOneGatherAhead) {
  Program p;
  for (int i = 0; i < 3; ++i) p.Buffer(v1::Buffer::PARAM);  // b0..b2: the shards
  for (int i = 3; i < 12; ++i) p.Buffer(v1::Buffer::ACTIVATION);
  p.Op(Instruction::LOAD_INPUT, {}, {3}, "load")
      .Op(Instruction::ALL_GATHER, {0}, {4}, "gather w0")
      .Op(Instruction::MATMUL, {3, 4}, {5}, "layer 0")
      .Op(Instruction::RELU, {5}, {6}, "layer 0 relu")
      .Op(Instruction::ALL_GATHER, {1}, {7}, "gather w1")
      .Op(Instruction::MATMUL, {6, 7}, {8}, "layer 1")
      .Op(Instruction::RELU, {8}, {9}, "layer 1 relu")
      .Op(Instruction::ALL_GATHER, {2}, {10}, "gather w2")
      .Op(Instruction::MATMUL, {9, 10}, {11}, "layer 2");
  EXPECT_EQ(StartCollectivesEarly(&p.proto()), 3);
  EXPECT_EQ(Order(p.proto()),
            (std::vector<std::string>{"gather w0", "load", "layer 0", "gather w1", "layer 0 relu",
                                      "layer 1", "gather w2", "layer 1 relu", "layer 2"}));
}

// A gather whose result another collective reshards before any computation reads it: the next
// gather waits for that computation, not for the second collective.
TEST(EarlyCollectivesTest, TheNextGatherWaitsForAComputationThroughReshards) {
  Program p;
  for (int i = 0; i < 2; ++i) p.Buffer(v1::Buffer::PARAM);
  for (int i = 2; i < 9; ++i) p.Buffer(v1::Buffer::ACTIVATION);
  p.Op(Instruction::LOAD_INPUT, {}, {2}, "load")
      .Op(Instruction::MATMUL, {2, 2}, {8}, "unrelated")
      .Op(Instruction::ALL_GATHER, {0}, {3}, "gather w0")
      .Op(Instruction::ALL_TO_ALL, {3}, {4}, "reshard w0")
      .Op(Instruction::MATMUL, {2, 4}, {5}, "layer 0")
      .Op(Instruction::RELU, {5}, {6}, "layer 0 relu")
      .Op(Instruction::ALL_GATHER, {1}, {7}, "gather w1")
      .Op(Instruction::MATMUL, {6, 7}, {5}, "layer 1");
  StartCollectivesEarly(&p.proto());
  EXPECT_EQ(Order(p.proto()),
            (std::vector<std::string>{"gather w0", "reshard w0", "load", "unrelated", "layer 0",
                                      "gather w1", "layer 0 relu", "layer 1"}));
}

// fc0 -> relu -> fc1 on dp=2: the gradients' all-reduces.
v1::JobSpec DataParallelMlp() {
  return testing::SpecBuilder({2}, {"dp"})
      .Batch(8, {6}, {2})
      .Linear("fc0", 6, 8)
      .Act("act0", "relu")
      .Linear("fc1", 8, 2)
      .Spec();
}

// Index of the first instruction whose comment starts with `prefix`, or -1.
int Find(const v1::Program& p, const std::string& prefix) {
  for (int i = 0; i < p.instructions_size(); ++i) {
    if (p.instructions(i).comment().rfind(prefix, 0) == 0) return i;
  }
  return -1;
}

TEST(EarlyCollectivesTest, GradientAllReducesStartDuringTheBackwardPass) {
  v1::JobSpec spec = DataParallelMlp();
  const v1::Program overlapped = testing::MustPlan(spec)[0];
  spec.set_blocking_collectives(true);
  const v1::Program blocking = testing::MustPlan(spec)[0];
  ASSERT_EQ(overlapped.instructions_size(), blocking.instructions_size());
  EXPECT_TRUE(overlapped.blocking_collectives() == false && blocking.blocking_collectives());

  const int w1 = Find(overlapped, "fc1.weight@grad:");
  const int w0_matmul = Find(overlapped, "fc0 matmul -> fc0.weight@grad");
  ASSERT_GE(w1, 0);
  ASSERT_GE(w0_matmul, 0);
  // fc1's weight gradient is all-reduced before fc0's is computed, right after fc1's is.
  EXPECT_LT(w1, w0_matmul);
  EXPECT_EQ(overlapped.instructions(w1 - 1).outputs(0), overlapped.instructions(w1).inputs(0));
  // Blocking: every all-reduce of a gradient after the last backward matmul.
  const int blocking_w1 = Find(blocking, "fc1.weight@grad:");
  EXPECT_GT(blocking_w1, Find(blocking, "fc0 matmul -> fc0.weight@grad"));
}

}  // namespace
}  // namespace weft::planner
