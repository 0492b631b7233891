#include "coordinator/checkpoint_aggregator.h"

#include <gtest/gtest.h>

namespace weft::coordinator {
namespace {

v1::CheckpointReport Report(int rank, int64_t step, int chunks, double seconds = 0.1) {
  v1::CheckpointReport r;
  r.set_job_id("job-1");
  r.set_rank(rank);
  r.set_step(step);
  for (int i = 0; i < chunks; ++i) {
    v1::CheckpointChunk* c = r.add_chunks();
    c->set_tensor("fc0.weight");
    c->add_global_shape(4);
    c->add_offsets(rank * 2 + i);
    c->add_lengths(1);
    c->set_file("rank-" + std::to_string(rank) + ".safetensors");
    c->set_begin(100 + 4 * i);
    c->set_end(104 + 4 * i);
    c->set_crc32c(7);
  }
  r.set_bytes(4 * chunks);
  r.set_seconds(seconds);
  return r;
}

TEST(CheckpointAggregatorTest, CompletesWhenEveryRankReported) {
  CheckpointAggregator saves(3);
  auto a = saves.Add(Report(0, 10, 2, 0.5));
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());
  ASSERT_TRUE(saves.Add(Report(2, 10, 0)).ok());  // writes nothing
  auto done = saves.Add(Report(1, 10, 1, 0.25));
  ASSERT_TRUE(done.ok()) << done.status();
  ASSERT_TRUE(done->has_value());
  const CompleteSave& save = **done;
  EXPECT_EQ(save.step, 10);
  ASSERT_EQ(save.chunks.size(), 3u);
  EXPECT_EQ(save.chunks[0].chunk.file, "rank-0.safetensors");
  EXPECT_EQ(save.chunks[2].chunk.offsets, (std::vector<int64_t>{2}));
  EXPECT_EQ(save.chunks[2].chunk.begin, 100);
  EXPECT_EQ(save.chunks[2].chunk.end, 104);
  EXPECT_EQ(save.chunks[2].chunk.crc32c, 7u);
  EXPECT_EQ(save.chunks[2].global_shape, (std::vector<int64_t>{4}));
  EXPECT_EQ(save.bytes, 12);
  EXPECT_DOUBLE_EQ(save.write_seconds, 0.5);
}

TEST(CheckpointAggregatorTest, AMissingRankNeverCompletes) {
  CheckpointAggregator saves(2);
  ASSERT_TRUE(saves.Add(Report(0, 1, 1)).ok());
  ASSERT_TRUE(saves.Add(Report(0, 2, 1)).ok());
  auto one = saves.Add(Report(1, 1, 1));
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(one->has_value());
  // Rank 1 died before reporting step 2: nothing for it.
}

TEST(CheckpointAggregatorTest, RejectsBadReports) {
  CheckpointAggregator saves(2);
  EXPECT_FALSE(saves.Add(Report(2, 1, 0)).ok());
  EXPECT_FALSE(saves.Add(Report(0, 0, 0)).ok());
  ASSERT_TRUE(saves.Add(Report(0, 1, 0)).ok());
  EXPECT_FALSE(saves.Add(Report(0, 1, 0)).ok());
  ASSERT_TRUE(saves.Add(Report(1, 1, 0)).ok());
  EXPECT_FALSE(saves.Add(Report(1, 1, 0)).ok()) << "after it was complete";
}

}  // namespace
}  // namespace weft::coordinator
