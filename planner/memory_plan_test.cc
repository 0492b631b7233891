#include "planner/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <vector>

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

// The layout of a program of 5,000 instructions over buffers of random sizes and lifetimes (some
// living across most of the list, as gradient accumulators do) is the best fit worked out here
// the plain way: buffers largest first (then earliest), each at the smallest gap left by every
// buffer already placed that is alive at the same time. The planner finds those neighbours
// through an index over the instruction list; this checks it finds the same ones, and that no two
// buffers alive together share a byte.
TEST(MemoryPlanTest, TheLayoutIsTheBestFitOverEveryBufferAliveAtTheSameTime) {
  std::mt19937 random(7);
  v1::Program p;
  AddBuffer(&p, "param", 1000);  // carried, at the bottom
  const int instructions = 5000;
  std::vector<int> written;
  for (int i = 0; i < instructions; ++i) {
    const int64_t scale = random() % 8 == 0 ? 64 : 1;
    v1::Buffer* out = AddBuffer(&p, "t" + std::to_string(i),
                                1 + static_cast<int64_t>(random() % 4096) * scale);
    out->set_role(v1::Buffer::ACTIVATION);
    v1::Instruction* ins = p.add_instructions();
    ins->set_op(v1::Instruction::ADD);
    // Mostly recent inputs; one in ten reaches far back.
    for (int k = 0; k < 2; ++k) {
      int input = 0;
      if (!written.empty()) {
        const size_t back = random() % 10 == 0 ? random() % written.size()
                                                : random() % std::min<size_t>(written.size(), 8);
        input = written[written.size() - 1 - back];
      }
      ins->add_inputs(input);
    }
    ins->add_outputs(out->id());
    written.push_back(out->id());
  }
  MemoryPlanner planner;
  ASSERT_TRUE(planner.Plan(&p).ok());

  const int n = p.buffers_size();
  const std::vector<BufferLife> lives = BufferLives(p);
  std::vector<int64_t> size(n), want(n, 0);
  for (int b = 0; b < n; ++b) size[b] = ArenaAligned(BufferBytes(p.buffers(b)));
  int64_t base = 0;
  for (int b = 0; b < n; ++b) {
    if (lives[b].carried) {
      want[b] = base;
      base += size[b];
    }
  }
  std::vector<int> order;
  for (int b = 0; b < n; ++b) {
    if (!lives[b].carried && lives[b].first >= 0) order.push_back(b);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return size[a] != size[b] ? size[a] > size[b] : lives[a].first < lives[b].first;
  });
  int64_t end = base;
  std::vector<int> placed;
  for (int b : order) {
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (int q : placed) {
      const bool apart = lives[q].last < lives[b].first || lives[b].last < lives[q].first;
      if (!apart) taken.emplace_back(want[q], want[q] + size[q]);
    }
    std::sort(taken.begin(), taken.end());
    int64_t best = -1, best_gap = 0, cursor = base;
    for (const auto& [from, to] : taken) {
      if (from - cursor >= size[b] && (best < 0 || from - cursor < best_gap)) {
        best = cursor;
        best_gap = from - cursor;
      }
      cursor = std::max(cursor, to);
    }
    want[b] = best >= 0 ? best : cursor;
    end = std::max(end, want[b] + size[b]);
    placed.push_back(b);
  }
  ASSERT_EQ(p.arena_bytes(), end);
  for (int b = 0; b < n; ++b) ASSERT_EQ(p.buffers(b).offset(), want[b]) << p.buffers(b).name();

  // The index files buffers living across more than 64 blocks of 32 instructions apart: both
  // kinds are here.
  int long_lived = 0;
  for (int b : order) long_lived += lives[b].last - lives[b].first > 64 * 32 ? 1 : 0;
  EXPECT_GT(long_lived, 10);
  EXPECT_LT(long_lived, static_cast<int>(order.size()) / 2);
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      if (!AliveTogether(lives[a], lives[b])) continue;
      const v1::Buffer& x = p.buffers(a);
      const v1::Buffer& y = p.buffers(b);
      ASSERT_TRUE(x.offset() + size[a] <= y.offset() || y.offset() + size[b] <= x.offset())
          << x.name() << " and " << y.name() << " are alive together and share bytes";
    }
  }
}

}  // namespace
}  // namespace weft::planner
