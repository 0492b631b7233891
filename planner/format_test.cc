#include "planner/format.h"

#include <gtest/gtest.h>

#include "planner/planner.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

TEST(FormatTest, ListsCollectivesWithGroupAndBytes) {
  v1::JobSpec spec =
      testing::SpecBuilder({4}, {"dp"}).Batch(16, {6}, {2}).Linear("fc0", 6, 2).Spec();
  std::vector<v1::Program> programs = testing::MustPlan(spec);
  ASSERT_EQ(programs.size(), 4u);
  const v1::Program& p = programs[1];
  std::string text = FormatProgram(p);
  EXPECT_NE(text.find("rank 1/4"), std::string::npos) << text;
  EXPECT_NE(text.find("g0 over dp: ranks [0,1,2,3]"), std::string::npos) << text;
  EXPECT_NE(text.find("LOAD_INPUT"), std::string::npos) << text;
  EXPECT_NE(text.find("input[4,6]"), std::string::npos) << text;
  // fc0.weight@grad [6,2] = 48 bytes; ring all-reduce over 4 sends 2*3/4 of it.
  EXPECT_NE(text.find("fc0.weight@grad: Partial(sum)->Replicate() over dp"), std::string::npos)
      << text;
  EXPECT_NE(text.find("[g0 dp, 72 B sent]"), std::string::npos) << text;
  EXPECT_NE(text.find("3 collectives"), std::string::npos) << text;
  for (const v1::Instruction& ins : p.instructions()) {
    if (ins.op() == v1::Instruction::ALL_REDUCE &&
        p.buffers(ins.inputs(0)).name() == "fc0.weight@grad") {
      EXPECT_EQ(CollectiveBytes(p, ins), 72);
    }
  }
}

}  // namespace
}  // namespace weft::planner
