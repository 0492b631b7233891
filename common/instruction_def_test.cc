#include "common/instruction_def.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using I = v1::Instruction;

TEST(InstructionTableTest, EveryOpHasOneRowInNumberOrder) {
  const google::protobuf::EnumDescriptor* ops = I::Op_descriptor();
  ASSERT_EQ(InstructionTable().size(), static_cast<size_t>(ops->value_count()));
  std::set<int> seen;
  int previous = -1;
  for (const InstructionDef& def : InstructionTable()) {
    EXPECT_NE(ops->FindValueByNumber(def.op), nullptr) << def.op;
    EXPECT_TRUE(seen.insert(def.op).second) << I::Op_Name(def.op) << " has two rows";
    EXPECT_GT(static_cast<int>(def.op), previous) << I::Op_Name(def.op);
    previous = def.op;
  }
  for (int i = 0; i < ops->value_count(); ++i) {
    const I::Op op = static_cast<I::Op>(ops->value(i)->number());
    EXPECT_EQ(FindInstructionDef(op).op, op) << ops->value(i)->name();
  }
}

TEST(InstructionTableTest, AnOpTheTableLacksHasEveryPropertyOff) {
  const InstructionDef& none = FindInstructionDef(static_cast<I::Op>(9999));
  EXPECT_FALSE(none.collective);
  EXPECT_FALSE(none.computes_in_f32);
  EXPECT_FALSE(none.reads_outputs);
  EXPECT_THAT(none.writes_inputs, IsEmpty());
}

TEST(InstructionTableTest, Properties) {
  std::set<I::Op> collectives, reading_outputs;
  for (const InstructionDef& def : InstructionTable()) {
    if (def.collective) collectives.insert(def.op);
    if (def.reads_outputs) reading_outputs.insert(def.op);
    // A collective moves data; it computes nothing in float32.
    EXPECT_FALSE(def.collective && def.computes_in_f32) << I::Op_Name(def.op);
  }
  EXPECT_EQ(collectives,
            (std::set<I::Op>{I::ALL_REDUCE, I::ALL_GATHER, I::REDUCE_SCATTER, I::ALL_TO_ALL}));
  EXPECT_EQ(reading_outputs, std::set<I::Op>{I::ACCUMULATE});
  EXPECT_THAT(FindInstructionDef(I::SGD).writes_inputs, ElementsAre(0));
  EXPECT_THAT(FindInstructionDef(I::ADAMW).writes_inputs, ElementsAre(0, 2, 3));
  EXPECT_THAT(FindInstructionDef(I::MATMUL).writes_inputs, IsEmpty());
}

}  // namespace
}  // namespace weft
