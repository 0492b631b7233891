#include "coordinator/checkpoint_aggregator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/testing_files.h"

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

// A rank's report of the chunks WriteShard returned, as the worker sends it (worker.cc).
v1::CheckpointReport ReportOf(int rank, int64_t step,
                              const std::vector<checkpoint::IndexedChunk>& chunks) {
  v1::CheckpointReport r;
  r.set_job_id("job-1");
  r.set_rank(rank);
  r.set_step(step);
  for (const checkpoint::IndexedChunk& c : chunks) {
    checkpoint::ChunkToProto(c, r.add_chunks());
    r.set_bytes(r.bytes() + c.chunk.end - c.chunk.begin);
  }
  return r;
}

// Two ranks save the row halves of a bf16 [4, 2] tensor; the chunks' dtype travels through the
// reports, so the coordinator's commit (which checks each shard entry against it) succeeds and
// the tensor reads back.
TEST(CheckpointAggregatorTest, ABf16CheckpointCommits) {
  const std::string dir = TempPath("bf16_ckpt");
  const int64_t step = 3;
  // Values exact in bf16: k / 4.
  std::vector<uint16_t> rows[2];
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 4; ++i) rows[r].push_back(FloatToBf16Bits((r * 4 + i) / 4.0f - 1.0f));
  }
  CheckpointAggregator saves(2);
  std::optional<CompleteSave> save;
  for (int rank = 0; rank < 2; ++rank) {
    const checkpoint::ShardPiece piece{"fc0.weight", {4, 2}, {2 * rank, 0}, {2, 2},
                                       rows[rank].data(), v1::BF16};
    auto chunks = checkpoint::WriteShard(checkpoint::StagingDir(dir, step), rank, {piece});
    ASSERT_TRUE(chunks.ok()) << chunks.status();
    auto added = saves.Add(ReportOf(rank, step, *chunks));
    ASSERT_TRUE(added.ok()) << added.status();
    if (rank == 1) save = **added;
  }
  ASSERT_TRUE(save.has_value());
  ASSERT_EQ(save->chunks.size(), 2u);
  for (const checkpoint::IndexedChunk& c : save->chunks) EXPECT_EQ(c.dtype, v1::BF16);
  EXPECT_EQ(save->bytes, 16);  // 8 elements of 2 bytes

  // The dtype matters: the same chunks reported as f32 (the proto's zero value) do not match
  // the shards.
  std::vector<checkpoint::IndexedChunk> as_f32 = save->chunks;
  for (checkpoint::IndexedChunk& c : as_f32) c.dtype = v1::F32;
  EXPECT_FALSE(checkpoint::CommitCheckpoint(dir, step, as_f32, /*keep=*/1).ok());

  ASSERT_TRUE(checkpoint::CommitCheckpoint(dir, step, save->chunks, /*keep=*/1).ok());
  auto reader = checkpoint::CheckpointReader::Open(checkpoint::StepDir(dir, step));
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<float> all(8);
  ASSERT_TRUE(reader->ReadBox("fc0.weight", {0, 0}, {4, 2}, v1::F32, all.data()).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(all[i], i / 4.0f - 1.0f) << i;
}

}  // namespace
}  // namespace weft::coordinator
