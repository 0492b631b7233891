#include "common/box.h"

#include <cstdint>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

using BoxRun = std::tuple<int64_t, int64_t, int64_t>;  // src, dst, n

std::vector<BoxRun> Runs(const std::vector<int64_t>& shape, const std::vector<int64_t>& offsets,
                      const std::vector<int64_t>& lengths) {
  std::vector<BoxRun> runs;
  ForEachBoxRun(shape, offsets, lengths,
                [&](int64_t src, int64_t dst, int64_t n) { runs.push_back({src, dst, n}); });
  return runs;
}

TEST(ForEachBoxRunTest, WholeTrailingDimsMergeIntoOneRun) {
  EXPECT_EQ(Runs({4, 4}, {1, 0}, {2, 4}), (std::vector<BoxRun>{{4, 0, 8}}));
  EXPECT_EQ(Runs({2, 3, 4}, {0, 0, 0}, {2, 3, 4}), (std::vector<BoxRun>{{0, 0, 24}}));
}

TEST(ForEachBoxRunTest, PartialInnerDimGivesOneRunPerRow) {
  EXPECT_EQ(Runs({3, 5}, {1, 2}, {2, 3}), (std::vector<BoxRun>{{7, 0, 3}, {12, 3, 3}}));
  // [0:2, 1:2, 0:4] of 2x3x4: dim 1 partial, so each run covers one row of 4.
  EXPECT_EQ(Runs({2, 3, 4}, {0, 1, 0}, {2, 1, 4}), (std::vector<BoxRun>{{4, 0, 4}, {16, 4, 4}}));
}

TEST(ForEachBoxRunTest, RunsMatchBruteForce) {
  const std::vector<int64_t> shape = {3, 4, 5};
  const std::vector<int64_t> offsets = {1, 1, 2}, lengths = {2, 3, 2};
  std::vector<int64_t> expected;  // element index of each box element, row-major
  for (int64_t i = 0; i < lengths[0]; ++i) {
    for (int64_t j = 0; j < lengths[1]; ++j) {
      for (int64_t k = 0; k < lengths[2]; ++k) {
        expected.push_back(((offsets[0] + i) * 4 + offsets[1] + j) * 5 + offsets[2] + k);
      }
    }
  }
  std::vector<int64_t> got(expected.size(), -1);
  for (const auto& [src, dst, n] : Runs(shape, offsets, lengths)) {
    for (int64_t e = 0; e < n; ++e) got[dst + e] = src + e;
  }
  EXPECT_EQ(got, expected);
}

TEST(ForEachBoxRunTest, EmptyBoxHasNoRunsAndScalarHasOne) {
  EXPECT_TRUE(Runs({3, 5}, {1, 2}, {0, 3}).empty());
  EXPECT_EQ(Runs({}, {}, {}), (std::vector<BoxRun>{{0, 0, 1}}));
}

TEST(ForEachBoxRunTest, TheFirstErrorStopsTheWalk) {
  int calls = 0;
  absl::Status s = ForEachBoxRun(std::vector<int64_t>{3, 5}, std::vector<int64_t>{0, 0},
                                 std::vector<int64_t>{3, 2},
                                 [&](int64_t, int64_t, int64_t) -> absl::Status {
                                   return ++calls == 2 ? absl::DataLossError("bad run")
                                                       : absl::OkStatus();
                                 });
  EXPECT_EQ(s, absl::DataLossError("bad run"));
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace weft
