#include "planner/memory_plan.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "absl/strings/match.h"
#include "common/dtype.h"
#include "common/program.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

v1::Buffer* AddBuffer(v1::Program* p, const std::string& name, int64_t elements) {
  v1::Buffer* b = p->add_buffers();
  b->set_id(p->buffers_size() - 1);
  b->set_name(name);
  b->set_dtype(v1::F32);
  b->add_shape(elements);
  b->set_role(v1::Buffer::PARAM);  // carried: laid out one after another
  return b;
}

TEST(MemoryPlanTest, LaysOutTheArenaOfAPlannedJob) {
  v1::Program p =
      testing::MustPlan(testing::SpecBuilder({1}, {"dp"}).Batch(4, {6}, {2}).Linear("fc0", 6, 2).Spec())
          .at(0);
  int64_t carried = 0;
  for (const v1::Buffer& b : p.buffers()) {
    EXPECT_EQ(b.offset() % kArenaAlignment, 0) << b.name();
    EXPECT_LE(b.offset() + BufferBytes(b), p.arena_bytes()) << b.name();
    if (b.role() == v1::Buffer::PARAM) carried += ArenaAligned(BufferBytes(b));
  }
  EXPECT_GE(p.arena_bytes(), carried);
}

// Two buffers of 2^62 bytes each fit int64 alone, their arena does not: it is refused, not laid
// out at a wrapped (negative or tiny) size.
TEST(MemoryPlanTest, AnArenaPastInt64IsRefused) {
  v1::Program p;
  AddBuffer(&p, "a", int64_t{1} << 60);
  AddBuffer(&p, "b", int64_t{1} << 60);
  MemoryPlanner planner;
  absl::Status planned = planner.Plan(&p);
  EXPECT_EQ(planned.code(), absl::StatusCode::kInvalidArgument) << planned;
  EXPECT_TRUE(absl::StrContains(planned.message(), "the arena's bytes overflows int64")) << planned;
  EXPECT_EQ(p.arena_bytes(), 0);

  // One buffer whose bytes alone overflow is named.
  v1::Program one;
  AddBuffer(&one, "huge", int64_t{1} << 62);
  planned = planner.Plan(&one);
  EXPECT_EQ(planned.code(), absl::StatusCode::kInvalidArgument) << planned;
  EXPECT_TRUE(absl::StrContains(planned.message(), "buffer 0 'huge' elements × f32 bytes overflows"))
      << planned;

  // Just under: 2^62 and 2^62 - 1024 bytes lay out.
  v1::Program fits;
  AddBuffer(&fits, "a", int64_t{1} << 60);
  AddBuffer(&fits, "b", (int64_t{1} << 60) - 256);
  ASSERT_TRUE(planner.Plan(&fits).ok());
  EXPECT_EQ(fits.arena_bytes(), std::numeric_limits<int64_t>::max() - 1023);  // 2^63 - 1024
}

}  // namespace
}  // namespace weft::planner
