// Checkpoints through real files in TEST_TMPDIR: every rank of a mesh simulated in one process
// writes its shard, the coordinator's commit builds the index, and boxes of other meshes are read
// back and compared bit for bit with the slices of the whole tensors.
#include "common/checkpoint/checkpoint.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/safetensors.h"
#include "common/testing_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace weft::checkpoint {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string FreshDir(const std::string& name) {
  const std::string dir = TempPath(name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

int64_t Volume(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

// A global tensor whose every element is its own linear index, so any misplaced element shows.
struct Global {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

Global MakeGlobal(const std::string& name, std::vector<int64_t> shape, float base = 0) {
  Global g{name, std::move(shape), {}};
  g.values.resize(static_cast<size_t>(Volume(g.shape)));
  for (size_t i = 0; i < g.values.size(); ++i) g.values[i] = base + static_cast<float>(i);
  return g;
}

// The box [off, off+len) of g, row-major.
std::vector<float> Slice(const Global& g, const std::vector<int64_t>& off,
                         const std::vector<int64_t>& len) {
  std::vector<float> out;
  const size_t rank = g.shape.size();
  if (Volume(len) == 0) return out;
  std::vector<int64_t> idx(rank, 0);
  while (true) {
    int64_t linear = 0;
    for (size_t d = 0; d < rank; ++d) linear = linear * g.shape[d] + off[d] + idx[d];
    out.push_back(g.values[static_cast<size_t>(linear)]);
    int d = static_cast<int>(rank) - 1;
    while (d >= 0 && ++idx[d] == len[d]) idx[d--] = 0;
    if (d < 0) break;
  }
  return out;
}

// Paddle's uneven rule: n/k each, the last one n/k + n%k.
std::pair<int64_t, int64_t> Split(int64_t n, int64_t k, int64_t i) {
  const int64_t each = n / k;
  return {each * i, i == k - 1 ? n - each * (k - 1) : each};
}

struct Box {
  std::vector<int64_t> offsets, lengths;
};

// The box of part i of k along axis (whole along the others).
Box AxisBox(const std::vector<int64_t>& shape, int axis, int64_t k, int64_t i) {
  Box b{std::vector<int64_t>(shape.size(), 0), shape};
  if (axis >= 0) std::tie(b.offsets[axis], b.lengths[axis]) = Split(shape[axis], k, i);
  return b;
}

// What one rank writes: boxes of global tensors (slices kept alive for WriteShard).
struct RankWrite {
  std::vector<std::pair<const Global*, Box>> boxes;
};

// Every rank writes its shard into the staging folder, then the coordinator commits.
absl::Status Save(const std::string& dir, int64_t step, const std::vector<RankWrite>& ranks,
                  int keep = 0, std::map<std::string, std::string> metadata = {{"job", "test"}},
                  const std::string& started_from = "") {
  std::vector<IndexedChunk> all;
  for (size_t r = 0; r < ranks.size(); ++r) {
    std::vector<std::vector<float>> data;
    std::vector<ShardPiece> pieces;
    data.reserve(ranks[r].boxes.size());
    for (const auto& [g, box] : ranks[r].boxes) {
      data.push_back(Slice(*g, box.offsets, box.lengths));
      pieces.push_back({g->name, g->shape, box.offsets, box.lengths, data.back().data()});
    }
    absl::StatusOr<std::vector<IndexedChunk>> chunks =
        WriteShard(StagingDir(dir, step), static_cast<int>(r), pieces);
    if (!chunks.ok()) return chunks.status();
    all.insert(all.end(), chunks->begin(), chunks->end());
  }
  return CommitCheckpoint(dir, step, all, keep, metadata, started_from);
}

// Loads g's box and compares bit for bit.
void ExpectBox(const CheckpointReader& reader, const Global& g, const Box& box) {
  std::vector<float> got(static_cast<size_t>(Volume(box.lengths)), -1.0f);
  absl::Status s = reader.ReadBox(g.name, box.offsets, box.lengths, got.data());
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(got, Slice(g, box.offsets, box.lengths))
      << g.name << " box at [" << ::testing::PrintToString(box.offsets) << "] lengths "
      << ::testing::PrintToString(box.lengths);
}

// Loads every tensor whole, split k ways along each axis (even, uneven, more parts than
// elements), and one arbitrary inner box.
void ExpectEveryLayout(const CheckpointReader& reader, const std::vector<const Global*>& globals) {
  for (const Global* g : globals) {
    SCOPED_TRACE(g->name);
    ExpectBox(reader, *g, AxisBox(g->shape, -1, 1, 0));  // one rank, whole
    for (int axis = 0; axis < static_cast<int>(g->shape.size()); ++axis) {
      for (int64_t k : {2, 3, 4, 8}) {
        for (int64_t i = 0; i < k; ++i) ExpectBox(reader, *g, AxisBox(g->shape, axis, k, i));
      }
    }
    Box inner{std::vector<int64_t>(g->shape.size()), std::vector<int64_t>(g->shape.size())};
    for (size_t d = 0; d < g->shape.size(); ++d) {
      inner.offsets[d] = g->shape[d] / 3;
      inner.lengths[d] = g->shape[d] - g->shape[d] / 3 - g->shape[d] / 4;
    }
    ExpectBox(reader, *g, inner);
  }
}

// A safetensors reader written from the public format description (not Weft's): 8-byte
// little-endian header size N, N bytes of JSON, then the data section that the entries' data_offsets
// tile from 0 with no gap. Returns the data-section bytes of the file.
int64_t CheckSafetensorsByHand(const std::string& path) {
  const std::string bytes = ReadAll(path);
  EXPECT_GE(bytes.size(), 8u) << path;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_LE(8 + n, bytes.size()) << path;
  EXPECT_EQ((8 + n) % 8, 0u) << path << ": the data section starts 8-byte aligned";
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      EXPECT_EQ(it.value()["format_version"], "1");
      continue;
    }
    EXPECT_NE(it.key().find('@'), std::string::npos) << it.key();
    EXPECT_EQ(it.value()["dtype"], "F32");
    const int64_t begin = it.value()["data_offsets"][0], end = it.value()["data_offsets"][1];
    EXPECT_EQ(end - begin, 4 * Volume(it.value()["shape"].get<std::vector<int64_t>>()));
    ranges.push_back({begin, end});
  }
  std::sort(ranges.begin(), ranges.end());
  int64_t at = 0;
  for (const auto& [b, e] : ranges) {
    EXPECT_EQ(b, at) << path;
    at = e;
  }
  EXPECT_EQ(8 + static_cast<int64_t>(n) + at, static_cast<int64_t>(bytes.size())) << path;
  return at;
}

// ---- Reshard matrix

class ReshardTest : public ::testing::Test {
 protected:
  // Shapes not divisible by 3 or 4: uneven splits everywhere.
  Global w_ = MakeGlobal("fc0.weight", {6, 10});
  Global b_ = MakeGlobal("fc0.bias", {10}, 1000);
  Global e_ = MakeGlobal("emb", {3, 5, 7}, 5000);
  Global r_ = MakeGlobal("norm.scale", {5}, 9000);  // replicated everywhere
  std::vector<const Global*> all_ = {&w_, &b_, &e_, &r_};
  int64_t global_bytes_ = 4 * (60 + 10 + 105 + 5);
};

TEST_F(ReshardTest, SavedOnMp2LoadsOnAnyLayout) {
  const std::string dir = FreshDir("mp2");
  // mp=2: weight and bias column-sharded, emb on its last axis; the replicated scale written
  // by rank 0 only.
  std::vector<RankWrite> ranks(2);
  for (int m = 0; m < 2; ++m) {
    ranks[m].boxes.push_back({&w_, AxisBox(w_.shape, 1, 2, m)});
    ranks[m].boxes.push_back({&b_, AxisBox(b_.shape, 0, 2, m)});
    ranks[m].boxes.push_back({&e_, AxisBox(e_.shape, 2, 2, m)});
  }
  ranks[0].boxes.push_back({&r_, AxisBox(r_.shape, -1, 1, 0)});
  ASSERT_TRUE(Save(dir, 10, ranks).ok());

  absl::StatusOr<std::string> latest = FindLatest(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir + "/step-10");
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(*latest);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->index().step, 10);
  EXPECT_EQ(reader->index().metadata.at("job"), "test");
  EXPECT_EQ(reader->index().tensors.at("fc0.weight").chunks.size(), 2u);
  EXPECT_EQ(reader->index().tensors.at("norm.scale").chunks.size(), 1u);
  ExpectEveryLayout(*reader, all_);
  EXPECT_TRUE(reader->VerifyAll().ok());
  int64_t data = 0;
  for (int r = 0; r < 2; ++r) {
    const std::string shard = *latest + "/rank-" + std::to_string(r) + ".safetensors";
    data += CheckSafetensorsByHand(shard);
    EXPECT_TRUE(SafetensorsFile::Open(shard).ok());
  }
  EXPECT_EQ(data, global_bytes_);
}

TEST_F(ReshardTest, SavedOnDp2Mp2WithDedupLoadsOnAnyLayout) {
  const std::string dir = FreshDir("dp2mp2");
  // Mesh [2,2] (dp, mp), rank = 2*dp + mp. Replicated chunks are written by one rank of their
  // group, spread over the group: weight's mp column m by dp=m; bias (Shard(0) on dp,
  // Replicate on mp) part d by mp=1-d; the scale (replicated on both) by rank 3; emb is
  // sharded on both dims, so every rank writes its own.
  std::vector<RankWrite> ranks(4);
  for (int dp = 0; dp < 2; ++dp) {
    for (int mp = 0; mp < 2; ++mp) {
      RankWrite& rw = ranks[2 * dp + mp];
      if (dp == mp) rw.boxes.push_back({&w_, AxisBox(w_.shape, 1, 2, mp)});
      if (mp == 1 - dp) rw.boxes.push_back({&b_, AxisBox(b_.shape, 0, 2, dp)});
      Box eb = AxisBox(e_.shape, 0, 2, dp);
      std::tie(eb.offsets[2], eb.lengths[2]) = Split(e_.shape[2], 2, mp);
      rw.boxes.push_back({&e_, eb});
    }
  }
  ranks[3].boxes.push_back({&r_, AxisBox(r_.shape, -1, 1, 0)});
  ASSERT_TRUE(Save(dir, 20, ranks).ok());

  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir + "/step-20");
  ASSERT_TRUE(reader.ok()) << reader.status();
  ExpectEveryLayout(*reader, all_);
  EXPECT_TRUE(reader->VerifyAll().ok());
  // Dedup: the data sections together hold one copy of every tensor.
  int64_t data = 0;
  for (int r = 0; r < 4; ++r) {
    data += CheckSafetensorsByHand(dir + "/step-20/rank-" + std::to_string(r) + ".safetensors");
  }
  EXPECT_EQ(data, global_bytes_);
}

// Replicated chunks written by every replica are not silently deduplicated: the commit refuses
// overlapping chunks.
TEST_F(ReshardTest, ReplicasWrittenTwiceAreAnErrorNotDeduplicated) {
  const std::string dir = FreshDir("twice");
  std::vector<RankWrite> ranks(2);
  for (int r = 0; r < 2; ++r) ranks[r].boxes.push_back({&r_, AxisBox(r_.shape, -1, 1, 0)});
  absl::Status s = Save(dir, 1, ranks);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'norm.scale'"), HasSubstr("overlap"),
                                 HasSubstr("rank-0.safetensors"), HasSubstr("rank-1.safetensors")));
  EXPECT_FALSE(FindLatest(dir).ok());
}

TEST(SmallTensorTest, SixElementsOverFourAndEightRanks) {
  const Global g = MakeGlobal("v", {6}, 0.5f);
  for (int64_t k : {4, 8}) {
    SCOPED_TRACE(k);
    const std::string dir = FreshDir("six_" + std::to_string(k));
    std::vector<RankWrite> ranks(k);
    for (int64_t i = 0; i < k; ++i) ranks[i].boxes.push_back({&g, AxisBox(g.shape, 0, k, i)});
    absl::Status s = Save(dir, 3, ranks);
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir + "/step-3");
    ASSERT_TRUE(reader.ok()) << reader.status();
    const std::vector<Chunk>& chunks = reader->index().tensors.at("v").chunks;
    ASSERT_EQ(chunks.size(), static_cast<size_t>(k));  // empty chunks are stored too
    int empty = 0;
    for (const Chunk& c : chunks) {
      if (c.lengths[0] == 0) {
        ++empty;
        EXPECT_EQ(c.begin, c.end);
      }
    }
    EXPECT_EQ(empty, k == 4 ? 0 : 7);  // (1,1,1,3) and (0,...,0,6)
    ExpectEveryLayout(*reader, {&g});
    EXPECT_TRUE(reader->VerifyAll().ok());
    for (int64_t r = 0; r < k; ++r) {
      CheckSafetensorsByHand(dir + "/step-3/rank-" + std::to_string(r) + ".safetensors");
    }
  }
}

TEST(SmallTensorTest, ScalarAndEmptyTensors) {
  const Global scalar = MakeGlobal("step_scale", {}, 42);
  const Global empty = MakeGlobal("nothing", {0, 4});
  const std::string dir = FreshDir("scalar");
  std::vector<RankWrite> ranks(1);
  ranks[0].boxes.push_back({&scalar, Box{{}, {}}});
  ranks[0].boxes.push_back({&empty, AxisBox(empty.shape, -1, 1, 0)});
  ASSERT_TRUE(Save(dir, 0, ranks).ok());
  absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(dir + "/step-0");
  ASSERT_TRUE(reader.ok()) << reader.status();
  ExpectBox(*reader, scalar, Box{{}, {}});
  ExpectBox(*reader, empty, AxisBox(empty.shape, -1, 1, 0));
  EXPECT_TRUE(reader->VerifyAll().ok());
}

// ---- Commit errors

TEST(CommitTest, ChunksMustAgreeAndCoverTheTensor) {
  const Global g = MakeGlobal("w", {4, 4});
  const std::string dir = FreshDir("cover");
  {
    std::vector<RankWrite> ranks(2);
    ranks[0].boxes.push_back({&g, AxisBox(g.shape, 0, 2, 0)});  // rows 2:4 missing
    absl::Status s = Save(dir, 1, ranks);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("tensor 'w'"), HasSubstr("no chunk holds region [2:4,0:4]"),
                                   HasSubstr("cover 8 of 16")));
  }
  {
    const std::string dir2 = FreshDir("shape");
    std::vector<float> data(8, 1.0f);
    auto a = WriteShard(StagingDir(dir2, 1), 0, {{"w", {4, 4}, {0, 0}, {2, 4}, data.data()}});
    auto b = WriteShard(StagingDir(dir2, 1), 1, {{"w", {4, 8}, {2, 0}, {2, 4}, data.data()}});
    ASSERT_TRUE(a.ok() && b.ok());
    std::vector<IndexedChunk> all = *a;
    all.insert(all.end(), b->begin(), b->end());
    absl::Status s = CommitCheckpoint(dir2, 1, all, 0);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("tensor 'w'"), HasSubstr("disagree on the global shape"),
                                   HasSubstr("[4,4]"), HasSubstr("[4,8]")));
    // Nothing committed, and a box outside its shape is refused at write time.
    EXPECT_FALSE(FindLatest(dir2).ok());
    auto c = WriteShard(StagingDir(dir2, 1), 2, {{"w", {4, 4}, {3, 0}, {2, 4}, data.data()}});
    EXPECT_THAT(c.status().message(), AllOf(HasSubstr("'w'"), HasSubstr("outside shape [4,4]")));
  }
}

// A step committed before (a process killed between its rename and `latest`, then the step run
// again from an older one) stands: the second commit accepts it, drops its own staging folder and
// points `latest` at it. A step folder that is not a committed checkpoint is never overwritten.
TEST(CommitTest, AStepIsCommittedOnceAndASecondCommitAcceptsIt) {
  const Global g = MakeGlobal("w", {4});
  const std::string dir = FreshDir("once");
  std::vector<RankWrite> ranks(1);
  ranks[0].boxes.push_back({&g, AxisBox(g.shape, -1, 1, 0)});
  ASSERT_TRUE(Save(dir, 5, ranks).ok());
  const std::string index = ReadAll(dir + "/step-5/index.json");
  ASSERT_TRUE(Save(dir, 4, ranks).ok());  // `latest` now names step 4, as after the crash
  absl::Status s = Save(dir, 5, ranks);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(ReadAll(dir + "/step-5/index.json"), index) << "the committed step stands";
  EXPECT_FALSE(fs::exists(StagingDir(dir, 5)));
  EXPECT_EQ(*FindLatest(dir), dir + "/step-5");
  EXPECT_EQ(ReadAll(dir + "/latest"), "step-5\n");

  // A damaged step folder: refused, left as it is.
  WriteAll(dir + "/step-5/index.json", "{");
  s = Save(dir, 5, ranks);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(s.message()), HasSubstr("step-5 already exists and is not a committed "
                                                  "checkpoint"));
}

// A job's folder is its own: job B saving into job A's would repoint A's `latest` and B's `keep`
// would delete A's steps. B may follow A's newest checkpoint only when it started from it.
TEST(CommitTest, AnotherJobsFolderIsRefusedUnlessTheJobStartedFromIt) {
  const Global g = MakeGlobal("w", {4});
  const std::string dir = FreshDir("owned");
  std::vector<RankWrite> ranks(1);
  ranks[0].boxes.push_back({&g, AxisBox(g.shape, -1, 1, 0)});
  ASSERT_TRUE(Save(dir, 1, ranks, 1, {{"job_id", "job-a"}}).ok());
  ASSERT_TRUE(Save(dir, 2, ranks, 1, {{"job_id", "job-a"}}).ok());
  EXPECT_EQ(*CheckpointOwner(dir + "/step-2"), "job-a");

  absl::Status s = Save(dir, 3, ranks, 1, {{"job_id", "job-b"}});
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("its newest checkpoint, " + dir + "/step-2, is job job-a's: two jobs "
                        "cannot save into one folder"));
  EXPECT_TRUE(fs::exists(dir + "/step-2")) << "job a's steps are kept";
  EXPECT_EQ(ReadAll(dir + "/latest"), "step-2\n");

  // Resumed from step 2: B goes on in the folder, and from then on it is B's.
  s = Save(dir, 3, ranks, 1, {{"job_id", "job-b"}}, dir + "/step-2");
  EXPECT_TRUE(s.ok()) << s;
  s = Save(dir, 4, ranks, 1, {{"job_id", "job-b"}}, dir + "/step-2");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(*CheckpointOwner(dir + "/step-4"), "job-b");
  EXPECT_EQ(Save(dir, 5, ranks, 1, {{"job_id", "job-a"}}).code(),
            absl::StatusCode::kFailedPrecondition);
}

// ---- Commit protocol

class ProtocolTest : public ::testing::Test {
 protected:
  absl::Status SaveStep(const std::string& dir, int64_t step, int keep) {
    return Save(dir, step, {RankWrite{{{&g_, AxisBox(g_.shape, -1, 1, 0)}}}}, keep);
  }
  Global g_ = MakeGlobal("w", {3, 2});
};

TEST_F(ProtocolTest, StagingWithoutCommitIsIgnoredAndCleaned) {
  const std::string dir = FreshDir("staging");
  EXPECT_EQ(FindLatest(dir).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(SaveStep(dir, 1, 0).ok());
  // A save of step 2 whose coordinator died before the commit: shards, no index.
  std::vector<float> data = g_.values;
  ASSERT_TRUE(WriteShard(StagingDir(dir, 2), 0, {{"w", {3, 2}, {0, 0}, {3, 2}, data.data()}}).ok());
  ASSERT_TRUE(fs::exists(StagingDir(dir, 2)));
  absl::StatusOr<std::string> latest = FindLatestReadOnly(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, dir + "/step-1");
  EXPECT_TRUE(fs::exists(StagingDir(dir, 2)));  // the read-only lookup leaves it
  latest = FindLatest(dir);
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, dir + "/step-1");
  EXPECT_FALSE(fs::exists(StagingDir(dir, 2)));
  // Even a staging folder that holds an index (renamed never happened) is not a checkpoint.
  ASSERT_TRUE(fs::create_directories(StagingDir(dir, 3)));
  fs::copy_file(dir + "/step-1/index.json", StagingDir(dir, 3) + "/index.json");
  EXPECT_EQ(*FindLatest(dir), dir + "/step-1");
}

TEST_F(ProtocolTest, LatestPointsToTheNewestAndKeepRemovesOnlyAfterCommit) {
  const std::string dir = FreshDir("keep");
  ASSERT_TRUE(SaveStep(dir, 100, 2).ok());
  ASSERT_TRUE(SaveStep(dir, 200, 2).ok());
  EXPECT_EQ(ReadAll(dir + "/latest"), "step-200\n");
  for (const auto& e : fs::directory_iterator(dir)) {  // no temporary of latest is left
    EXPECT_FALSE(absl::StartsWith(e.path().filename().string(), "latest.tmp")) << e.path();
  }
  EXPECT_EQ(*FindLatest(dir), dir + "/step-200");
  // Step 300's shards are written: nothing old is removed yet.
  std::vector<float> data = g_.values;
  ASSERT_TRUE(WriteShard(StagingDir(dir, 300), 0, {{"w", {3, 2}, {0, 0}, {3, 2}, data.data()}}).ok());
  EXPECT_TRUE(fs::exists(dir + "/step-100"));
  EXPECT_TRUE(fs::exists(dir + "/step-200"));
  // Committed: step-100 goes, the two newest stay.
  ASSERT_TRUE(SaveStep(dir, 300, 2).ok());
  EXPECT_FALSE(fs::exists(dir + "/step-100"));
  EXPECT_TRUE(fs::exists(dir + "/step-200"));
  EXPECT_TRUE(fs::exists(dir + "/step-300"));
  EXPECT_EQ(ReadAll(dir + "/latest"), "step-300\n");
  EXPECT_EQ(*FindLatest(dir), dir + "/step-300");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-200", "step-300"}));
}

// A commit killed after it renamed step-200 into place, before it replaced `latest`: step-200 is
// the newest checkpoint (a resume from step-100 would save step 200 onto a folder that exists).
TEST_F(ProtocolTest, AValidStepNewerThanLatestIsTheNewest) {
  const std::string dir = FreshDir("lagging");
  ASSERT_TRUE(SaveStep(dir, 100, 3).ok());
  ASSERT_TRUE(SaveStep(dir, 200, 3).ok());
  WriteAll(dir + "/latest", "step-100\n");
  EXPECT_EQ(*FindLatest(dir), dir + "/step-200");
  EXPECT_EQ(*FindLatestReadOnly(dir), dir + "/step-200");
  // A newer folder without a valid index is not one: `latest` stands.
  fs::create_directories(dir + "/step-300");
  WriteAll(dir + "/latest", "step-200\n");
  EXPECT_EQ(*FindLatest(dir), dir + "/step-200");
}

TEST_F(ProtocolTest, OnlyAFolderOfWeftsOwnIsACheckpointFolder) {
  const std::string dir = FreshDir("owned");
  EXPECT_TRUE(CheckFolderIsWefts(dir + "/not-yet").ok());  // made by the first save
  EXPECT_TRUE(CheckFolderIsWefts(dir).ok());                 // empty
  ASSERT_TRUE(SaveStep(dir, 1, 0).ok());
  ASSERT_TRUE(fs::create_directories(StagingDir(dir, 2)));
  WriteAll(dir + "/latest.tmp-123", "step-1\n");
  EXPECT_TRUE(CheckFolderIsWefts(dir).ok());

  // A user's own `latest` (not a step name; its bytes are not quoted), and a stray file.
  const std::string home = FreshDir("home");
  WriteAll(home + "/latest", "my notes: password=hunter2");
  absl::Status s = CheckFolderIsWefts(home);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), home + ": holds 1 entry Weft did not write (latest); a checkpoint folder "
                                "holds only step-N folders and `latest`, and Weft never "
                                "overwrites another's files: name a new or empty folder");
  WriteAll(dir + "/notes.txt", "x");
  ASSERT_TRUE(fs::create_directories(dir + "/step-x"));
  fs::create_symlink(dir + "/step-1", dir + "/step-9");  // a link is not a step folder of Weft's
  WriteAll(dir + "/zz", "x");
  s = CheckFolderIsWefts(dir);
  EXPECT_THAT(s.message(), HasSubstr(": holds 4 entries Weft did not write (notes.txt, step-9, "
                                     "step-x, ...)"));
  // A file where the folder should be.
  EXPECT_EQ(CheckFolderIsWefts(home + "/latest").message(), home + "/latest: is not a folder");
  EXPECT_EQ(ReadAll(home + "/latest"), "my notes: password=hunter2");  // untouched
}

TEST_F(ProtocolTest, DamagedIndexFallsBackToThePreviousCheckpoint) {
  const std::string dir = FreshDir("damaged");
  ASSERT_TRUE(SaveStep(dir, 1, 0).ok());
  ASSERT_TRUE(SaveStep(dir, 2, 0).ok());
  std::string index = ReadAll(dir + "/step-2/index.json");
  index[index.find("\"step\": 2") + 8] = '7';  // valid JSON, wrong checksum
  WriteAll(dir + "/step-2/index.json", index);
  absl::StatusOr<std::string> latest = FindLatest(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, dir + "/step-1");
  // Without the latest pointer, the scan skips it too; with no valid index at all, NOT_FOUND
  // names why each folder was refused.
  fs::remove(dir + "/latest");
  EXPECT_EQ(*FindLatest(dir), dir + "/step-1");
  fs::remove(dir + "/step-1/index.json");
  absl::Status s = FindLatest(dir).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("step-2 ("), HasSubstr("checksum mismatch"),
                                 HasSubstr("step-1 ("), HasSubstr("no such file")));
}

TEST_F(ProtocolTest, ALatestPointerToAMissingFolderIsIgnored) {
  const std::string dir = FreshDir("pointer");
  ASSERT_TRUE(SaveStep(dir, 4, 0).ok());
  WriteAll(dir + "/latest", "step-9\n");
  EXPECT_EQ(*FindLatest(dir), dir + "/step-4");
  WriteAll(dir + "/latest", "../elsewhere\n");
  EXPECT_EQ(*FindLatest(dir), dir + "/step-4");
}

// ---- Corruption: each a precise error, never wrong numbers

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::vector<RankWrite> ranks(2);
    for (int m = 0; m < 2; ++m) {
      ranks[m].boxes.push_back({&w_, AxisBox(w_.shape, 1, 2, m)});
      ranks[m].boxes.push_back({&b_, AxisBox(b_.shape, 0, 2, m)});
    }
    ASSERT_TRUE(Save(dir_, 7, ranks).ok());
    step_ = dir_ + "/step-7";
  }
  // The byte range of w's chunk in rank-1.safetensors.
  Chunk WChunk1() {
    auto r = CheckpointReader::Open(step_);
    for (const Chunk& c : r->index().tensors.at("w").chunks) {
      if (c.file == "rank-1.safetensors") return c;
    }
    return {};
  }
  absl::Status ReadWhole(const CheckpointReader& r, const Global& g) {
    std::vector<float> out(g.values.size());
    return r.ReadBox(g.name, std::vector<int64_t>(g.shape.size(), 0), g.shape, out.data());
  }

  Global w_ = MakeGlobal("w", {4, 6});
  Global b_ = MakeGlobal("b", {6}, 100);
  std::string dir_, step_;
};

TEST_F(CorruptionTest, FlippedByteIsAChecksumMismatchNamingTensorAndFile) {
  const Chunk c = WChunk1();
  const std::string file = step_ + "/rank-1.safetensors";
  std::string bytes = ReadAll(file);
  bytes[c.begin + 5] ^= 0x10;
  WriteAll(file, bytes);
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(step_);
  ASSERT_TRUE(r.ok()) << r.status();
  for (absl::Status s : {ReadWhole(*r, w_), r->VerifyAll()}) {
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), AllOf(HasSubstr("loading tensor 'w' from " + file),
                                   HasSubstr("checksum mismatch")));
  }
  // A box that does not touch the damaged chunk still loads; the bias is unharmed.
  std::vector<float> left(12);
  EXPECT_TRUE(r->ReadBox("w", {0, 0}, {4, 3}, left.data()).ok());
  EXPECT_TRUE(ReadWhole(*r, b_).ok());
}

TEST_F(CorruptionTest, TruncatedShard) {
  const std::string file = step_ + "/rank-1.safetensors";
  std::string bytes = ReadAll(file);
  WriteAll(file, bytes.substr(0, bytes.size() - 3));
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(step_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(),
              AllOf(HasSubstr("from " + file), HasSubstr("truncated"), HasSubstr("tensor '")));
}

TEST_F(CorruptionTest, MissingShard) {
  const std::string file = step_ + "/rank-0.safetensors";
  fs::remove(file);
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(step_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), AllOf(HasSubstr(file), HasSubstr("no such file"), HasSubstr("tensor '")));
}

TEST_F(CorruptionTest, DamagedIndex) {
  const std::string path = step_ + "/index.json";
  const std::string good = ReadAll(path);
  {
    WriteAll(path, good.substr(0, good.size() / 2));
    absl::Status s = CheckpointReader::Open(step_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), AllOf(HasSubstr(path), HasSubstr("not valid JSON")));
  }
  {
    std::string bad = good;
    const size_t at = bad.find("\"crc32c\":") + 9;
    bad[at] = bad[at] == '1' ? '2' : '1';
    WriteAll(path, bad);
    absl::Status s = CheckpointReader::Open(step_).status();
    EXPECT_THAT(s.message(), AllOf(HasSubstr(path), HasSubstr("checksum mismatch")));
  }
  {
    std::string bad = good;
    bad.erase(bad.find(",\n  \"checksum\""), bad.rfind('}') - bad.find(",\n  \"checksum\""));
    WriteAll(path, bad);
    EXPECT_THAT(CheckpointReader::Open(step_).status().message(), HasSubstr("no checksum"));
  }
  {
    Index index = *ParseIndex(good, path);
    index.format_version = 2;
    WriteAll(path, SerializeIndex(index));
    absl::Status s = CheckpointReader::Open(step_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("unsupported format version 2"));
  }
  {
    // An index that lies about its step: moved from another folder.
    Index index = *ParseIndex(good, path);
    index.step = 8;
    WriteAll(path, SerializeIndex(index));
    EXPECT_THAT(CheckpointReader::Open(step_).status().message(),
                HasSubstr("index is for step 8 but lies in the folder of step 7"));
  }
  // Layout does not matter to the checksum: the same index compacted still opens.
  WriteAll(path, nlohmann::json::parse(good).dump());
  EXPECT_TRUE(CheckpointReader::Open(step_).ok());
}

TEST_F(CorruptionTest, AnIndexWithAHoleNamesTheMissingRegion) {
  const std::string path = step_ + "/index.json";
  Index index = *ParseIndex(ReadAll(path), path);
  std::vector<Chunk>& chunks = index.tensors.at("w").chunks;
  chunks.erase(chunks.begin() + 1);  // columns 3:6
  WriteAll(path, SerializeIndex(index));
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(step_);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<float> out(8);
  absl::Status s = r->ReadBox("w", {1, 2}, {2, 4}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("tensor 'w'"), HasSubstr("no chunk holds region [1:3,3:6]"),
                                 HasSubstr("cover 2 of 8")));
  EXPECT_THAT(r->VerifyAll().message(), HasSubstr("no chunk holds region [0:4,3:6]"));
  // Unknown tensors and boxes outside the shape are errors too.
  EXPECT_EQ(r->ReadBox("nope", {0}, {1}, out.data()).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r->ReadBox("b", {4}, {3}, out.data()).message(), HasSubstr("outside the saved shape [6]"));
  EXPECT_THAT(r->ReadBox("b", {0, 0}, {1, 1}, out.data()).message(), HasSubstr("shape mismatch"));
}

// ---- Typed tensors: each chunk in its tensor's dtype, read in the caller's

// A global tensor of any dtype as its little-endian bytes, row-major; every element distinct.
struct TypedGlobal {
  std::string name;
  std::vector<int64_t> shape;
  v1::DType dtype;
  std::string bytes;
};

int ElementBytes(v1::DType dtype) {
  switch (dtype) {
    case v1::BF16:
      return 2;
    case v1::I64:
      return 8;
    default:
      return 4;
  }
}

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

TypedGlobal MakeTyped(const std::string& name, std::vector<int64_t> shape, v1::DType dtype) {
  TypedGlobal g{name, std::move(shape), dtype, {}};
  const int64_t n = Volume(g.shape);
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case v1::F32:
        Append(&g.bytes, 0.5f * static_cast<float>(i) - 3.0f);  // exact in bfloat16 too
        break;
      case v1::BF16:
        Append(&g.bytes, static_cast<uint16_t>(0x3f80 + 3 * i));  // 1.0, 1.0234375, ...
        break;
      case v1::I32:
        Append(&g.bytes, static_cast<int32_t>(0x80000000u + 123457u * static_cast<uint32_t>(i)));
        break;
      default:
        Append(&g.bytes, (i % 2 ? -1 : 1) * (int64_t{1} << 40) + i);
        break;
    }
  }
  return g;
}

// The box [off, off+len) of g, row-major, as bytes.
std::string TypedSlice(const TypedGlobal& g, const std::vector<int64_t>& off,
                       const std::vector<int64_t>& len) {
  std::string out;
  const size_t rank = g.shape.size();
  const int size = ElementBytes(g.dtype);
  if (Volume(len) == 0) return out;
  std::vector<int64_t> idx(rank, 0);
  while (true) {
    int64_t linear = 0;
    for (size_t d = 0; d < rank; ++d) linear = linear * g.shape[d] + off[d] + idx[d];
    out += g.bytes.substr(static_cast<size_t>(linear * size), size);
    int d = static_cast<int>(rank) - 1;
    while (d >= 0 && ++idx[d] == len[d]) idx[d--] = 0;
    if (d < 0) break;
  }
  return out;
}

// Every rank writes its boxes (each piece in its tensor's dtype), then the coordinator commits.
absl::Status SaveTyped(const std::string& dir, int64_t step,
                       const std::vector<std::vector<std::pair<const TypedGlobal*, Box>>>& ranks) {
  std::vector<IndexedChunk> all;
  for (size_t r = 0; r < ranks.size(); ++r) {
    std::vector<std::string> data;
    std::vector<ShardPiece> pieces;
    data.reserve(ranks[r].size());
    for (const auto& [g, box] : ranks[r]) {
      data.push_back(TypedSlice(*g, box.offsets, box.lengths));
      pieces.push_back({g->name, g->shape, box.offsets, box.lengths, data.back().data(), g->dtype});
    }
    absl::StatusOr<std::vector<IndexedChunk>> chunks =
        WriteShard(StagingDir(dir, step), static_cast<int>(r), pieces);
    if (!chunks.ok()) return chunks.status();
    all.insert(all.end(), chunks->begin(), chunks->end());
  }
  return CommitCheckpoint(dir, step, all, 0);
}

// index.json with its checksum recomputed as the format defines it, after an edit.
std::string ResealIndex(nlohmann::json j) {
  j.erase("checksum");
  const std::string canonical = j.dump();
  j["checksum"] = Crc32c(canonical.data(), canonical.size());
  return j.dump(2);
}

class TypedCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    // mp=2: w by columns, e on its last axis, ids by halves; steps written by rank 1 alone.
    std::vector<std::vector<std::pair<const TypedGlobal*, Box>>> ranks(2);
    for (int m = 0; m < 2; ++m) {
      ranks[m].push_back({&w_, AxisBox(w_.shape, 1, 2, m)});
      ranks[m].push_back({&e_, AxisBox(e_.shape, 2, 2, m)});
      ranks[m].push_back({&ids_, AxisBox(ids_.shape, 0, 2, m)});
    }
    ranks[1].push_back({&steps_, AxisBox(steps_.shape, -1, 1, 0)});
    absl::Status s = SaveTyped(dir_, 4, ranks);
    ASSERT_TRUE(s.ok()) << s;
    step_ = dir_ + "/step-4";
  }

  // Reads g's box in dtype `as` into bytes.
  absl::StatusOr<std::string> Read(const CheckpointReader& r, const TypedGlobal& g, const Box& box,
                                   v1::DType as) {
    std::string out(static_cast<size_t>(Volume(box.lengths) * ElementBytes(as)), '\xee');
    absl::Status s = r.ReadBox(g.name, box.offsets, box.lengths, as, out.data());
    if (!s.ok()) return s;
    return out;
  }

  // Every tensor on other layouts: whole, split k ways along each axis, an inner box; each
  // element converted by `expect` from the saved bytes.
  void ExpectEveryLayout(const CheckpointReader& r, const TypedGlobal& g, v1::DType as,
                         const std::function<std::string(const std::string&)>& expect) {
    SCOPED_TRACE(g.name);
    std::vector<Box> boxes = {AxisBox(g.shape, -1, 1, 0)};
    for (int axis = 0; axis < static_cast<int>(g.shape.size()); ++axis) {
      for (int64_t k : {2, 3, 4}) {
        for (int64_t i = 0; i < k; ++i) boxes.push_back(AxisBox(g.shape, axis, k, i));
      }
    }
    Box inner{std::vector<int64_t>(g.shape.size()), std::vector<int64_t>(g.shape.size())};
    for (size_t d = 0; d < g.shape.size(); ++d) {
      inner.offsets[d] = g.shape[d] / 3;
      inner.lengths[d] = g.shape[d] - g.shape[d] / 3 - g.shape[d] / 4;
    }
    boxes.push_back(inner);
    for (const Box& box : boxes) {
      absl::StatusOr<std::string> got = Read(r, g, box, as);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(*got, expect(TypedSlice(g, box.offsets, box.lengths)))
          << "box at " << ::testing::PrintToString(box.offsets) << " lengths "
          << ::testing::PrintToString(box.lengths);
    }
  }

  TypedGlobal w_ = MakeTyped("w", {6, 10}, v1::F32);
  TypedGlobal e_ = MakeTyped("e", {3, 5, 7}, v1::BF16);
  TypedGlobal ids_ = MakeTyped("ids", {10}, v1::I32);
  TypedGlobal steps_ = MakeTyped("steps", {5, 3}, v1::I64);
  std::string dir_, step_;
};

std::string Same(const std::string& bytes) { return bytes; }

TEST_F(TypedCheckpointTest, EveryDtypeRoundTripsOntoOtherLayouts) {
  // The index and the shard headers, read as plain JSON, record each tensor's dtype.
  const nlohmann::json index = nlohmann::json::parse(ReadAll(step_ + "/index.json"));
  EXPECT_EQ(index["tensors"]["w"]["dtype"], "F32");
  EXPECT_EQ(index["tensors"]["e"]["dtype"], "BF16");
  EXPECT_EQ(index["tensors"]["ids"]["dtype"], "I32");
  EXPECT_EQ(index["tensors"]["steps"]["dtype"], "I64");
  for (const nlohmann::json& c : index["tensors"]["e"]["chunks"]) {
    const int64_t elements = Volume(c["lengths"].get<std::vector<int64_t>>());
    EXPECT_EQ(c["byte_range"][1].get<int64_t>() - c["byte_range"][0].get<int64_t>(), 2 * elements);
  }
  const std::string shard = ReadAll(step_ + "/rank-1.safetensors");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(shard[i]);
  const nlohmann::json header = nlohmann::json::parse(shard.substr(8, n));
  EXPECT_EQ(header["e@0,0,3"]["dtype"], "BF16");
  EXPECT_EQ(header["e@0,0,3"]["shape"], nlohmann::json({3, 5, 4}));
  EXPECT_EQ(header["ids@5"]["dtype"], "I32");
  EXPECT_EQ(header["steps@0,0"]["dtype"], "I64");
  EXPECT_EQ(header["w@0,5"]["dtype"], "F32");
  EXPECT_EQ(shard.size(), 8 + n + 4 * 30 + 2 * 60 + 4 * 5 + 8 * 15);
  // Another safetensors reader sees the same bytes.
  auto as_safetensors = SafetensorsFile::Open(step_ + "/rank-1.safetensors");
  ASSERT_TRUE(as_safetensors.ok()) << as_safetensors.status();
  std::string steps(8 * 15, '\0');
  ASSERT_TRUE(as_safetensors->ReadBox("steps@0,0", {0, 0}, {5, 3}, v1::I64, steps.data()).ok());
  EXPECT_EQ(steps, steps_.bytes);

  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(step_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->index().tensors.at("w").dtype, v1::F32);
  EXPECT_EQ(r->index().tensors.at("e").dtype, v1::BF16);
  EXPECT_EQ(r->index().tensors.at("ids").dtype, v1::I32);
  EXPECT_EQ(r->index().tensors.at("steps").dtype, v1::I64);
  for (const TypedGlobal* g : {&w_, &e_, &ids_, &steps_}) ExpectEveryLayout(*r, *g, g->dtype, Same);
  EXPECT_TRUE(r->VerifyAll().ok());
}

// bfloat16 is the upper half of a float32: a bf16 value b is the float with bits b << 16, and
// the saved floats (multiples of 0.5 below 32) are exact in bfloat16: their upper halves.
TEST_F(TypedCheckpointTest, FloatingDtypesConvertOnRead) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(step_);
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectEveryLayout(*r, e_, v1::F32, [](const std::string& bf16) {
    std::string out;
    for (size_t i = 0; i < bf16.size(); i += 2) {
      uint16_t b;
      std::memcpy(&b, bf16.data() + i, 2);
      Append(&out, static_cast<uint32_t>(b) << 16);
    }
    return out;
  });
  ExpectEveryLayout(*r, w_, v1::BF16, [](const std::string& f32) {
    std::string out;
    for (size_t i = 0; i < f32.size(); i += 4) {
      uint32_t bits;
      std::memcpy(&bits, f32.data() + i, 4);
      EXPECT_EQ(bits & 0xffff, 0u) << "test data not exact in bfloat16";
      Append(&out, static_cast<uint16_t>(bits >> 16));
    }
    return out;
  });
}

TEST_F(TypedCheckpointTest, IntegerTensorsReadOnlyAsTheirOwnDtype) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(step_);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::Status s = Read(*r, ids_, AxisBox(ids_.shape, -1, 1, 0), v1::F32).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "loading tensor 'ids' from " + step_ +
                             ": the checkpoint holds I32, the destination is F32: only floating "
                             "dtypes convert on read (F32 <-> BF16)");
  s = Read(*r, steps_, AxisBox(steps_.shape, 0, 2, 1), v1::I32).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'steps'"), HasSubstr("holds I64, the destination is I32")));
  s = Read(*r, w_, AxisBox(w_.shape, -1, 1, 0), v1::I32).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'w'"), HasSubstr("holds F32, the destination is I32")));
  s = Read(*r, e_, AxisBox(e_.shape, -1, 1, 0), v1::I64).status();
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'e'"), HasSubstr("holds BF16, the destination is I64")));
}

TEST(TypedCommitTest, ChunksThatDisagreeOnTheDtypeAreRefused) {
  const std::string dir = FreshDir("dtype_disagree");
  const TypedGlobal f = MakeTyped("w", {4, 4}, v1::F32);
  const TypedGlobal b = MakeTyped("w", {4, 4}, v1::BF16);
  absl::Status s = SaveTyped(dir, 1, {{{&f, AxisBox(f.shape, 0, 2, 0)}},
                                      {{&b, AxisBox(b.shape, 0, 2, 1)}}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w': chunks disagree on the dtype: F32 from "
                                     "rank-0.safetensors, BF16 from rank-1.safetensors"));
  EXPECT_FALSE(FindLatest(dir).ok());
}

// A chunk reported in one dtype but stored in another of the same size (I32 as F32) would load
// as wrong numbers: the commit compares the report with the shard's own header.
TEST(TypedCommitTest, AReportThatDisagreesWithItsShardIsRefused) {
  const std::string dir = FreshDir("dtype_report");
  const TypedGlobal ids = MakeTyped("ids", {6}, v1::I32);
  auto chunks = WriteShard(StagingDir(dir, 1), 0,
                           {{"ids", {6}, {0}, {6}, ids.bytes.data(), v1::I32}});
  ASSERT_TRUE(chunks.ok()) << chunks.status();
  ASSERT_EQ(chunks->size(), 1u);
  EXPECT_EQ((*chunks)[0].dtype, v1::I32);
  (*chunks)[0].dtype = v1::F32;
  absl::Status s = CommitCheckpoint(dir, 1, *chunks, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("tensor 'ids' in " + StagingDir(dir, 1) + "/rank-0.safetensors"),
                                 HasSubstr("chunk [0:6] (entry 'ids@0') is I32 in the shard but F32 in the index")));
  EXPECT_FALSE(FindLatest(dir).ok());
  // A dtype outside the enum is refused when the shard is written.
  auto bad = WriteShard(StagingDir(dir, 2), 0,
                        {{"ids", {6}, {0}, {6}, ids.bytes.data(), static_cast<v1::DType>(7)}});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), AllOf(HasSubstr("tensor 'ids'"), HasSubstr("unknown dtype 7")));
}

TEST_F(TypedCheckpointTest, AnIndexThatMislabelsADtypeIsCorrupt) {
  const std::string path = step_ + "/index.json";
  const std::string good = ReadAll(path);
  {
    // I32 relabelled F32 (same byte ranges): the shard headers disagree.
    nlohmann::json j = nlohmann::json::parse(good);
    j["tensors"]["ids"]["dtype"] = "F32";
    WriteAll(path, ResealIndex(j));
    absl::Status s = CheckpointReader::Open(step_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(s.message(), "loading tensor 'ids' from " + step_ +
                               "/rank-0.safetensors: chunk [0:5] (entry 'ids@0') is I32 in the "
                               "shard but F32 in the index");
  }
  {
    // BF16 relabelled F32: the byte ranges no longer hold the elements.
    nlohmann::json j = nlohmann::json::parse(good);
    j["tensors"]["e"]["dtype"] = "F32";
    WriteAll(path, ResealIndex(j));
    absl::Status s = CheckpointReader::Open(step_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), AllOf(HasSubstr(path), HasSubstr("tensor 'e'"),
                                   HasSubstr("does not hold 45 F32 elements")));
  }
  {
    nlohmann::json j = nlohmann::json::parse(good);
    j["tensors"]["w"]["dtype"] = "F16";
    WriteAll(path, ResealIndex(j));
    absl::Status s = CheckpointReader::Open(step_).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), AllOf(HasSubstr(path), HasSubstr("tensor 'w'"),
                                   HasSubstr("dtype F16 is not supported")));
  }
  WriteAll(path, good);
  EXPECT_TRUE(CheckpointReader::Open(step_).ok());
}

// A shard whose own header was damaged is refused at Open, naming the file.
TEST_F(TypedCheckpointTest, ADamagedShardHeaderIsCorrupt) {
  const std::string file = step_ + "/rank-0.safetensors";
  std::string bytes = ReadAll(file);
  bytes.replace(bytes.find("\"BF16\""), 6, "\"XF16\"");
  WriteAll(file, bytes);
  absl::Status s = CheckpointReader::Open(step_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("loading tensor '"), HasSubstr(file),
                                 HasSubstr("unknown dtype XF16")));
}

// Checkpoints written before tensors were typed have no dtype in their index: they are F32.
TEST(TypedIndexTest, AnIndexWithoutDtypeLoadsAsF32) {
  const std::string dir = FreshDir("untyped");
  const Global w = MakeGlobal("fc0.weight", {6, 10});
  const Global b = MakeGlobal("fc0.bias", {10}, 1000);
  std::vector<RankWrite> ranks(2);
  for (int m = 0; m < 2; ++m) {
    ranks[m].boxes.push_back({&w, AxisBox(w.shape, 1, 2, m)});
    ranks[m].boxes.push_back({&b, AxisBox(b.shape, 0, 2, m)});
  }
  ASSERT_TRUE(Save(dir, 3, ranks).ok());
  const std::string path = dir + "/step-3/index.json";
  nlohmann::json j = nlohmann::json::parse(ReadAll(path));
  for (auto& [name, t] : j["tensors"].items()) t.erase("dtype");
  WriteAll(path, ResealIndex(j));
  ASSERT_EQ(ReadAll(path).find("dtype"), std::string::npos);

  EXPECT_EQ(*FindLatest(dir), dir + "/step-3");
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(dir + "/step-3");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->index().tensors.at("fc0.weight").dtype, v1::F32);
  EXPECT_EQ(r->index().tensors.at("fc0.bias").dtype, v1::F32);
  ExpectEveryLayout(*r, {&w, &b});
  EXPECT_TRUE(r->VerifyAll().ok());
}

TEST(IndexTest, SerializeParseRoundTrip) {
  Index index;
  index.step = 12;
  index.metadata = {{"job", "j\"1"}, {"ünïcode", "ok"}};
  index.tensors["a.b"].global_shape = {2, 3};
  index.tensors["a.b"].chunks.push_back({{0, 0}, {2, 3}, "rank-0.safetensors", 64, 88, 0xdeadbeef});
  index.tensors["e"].global_shape = {0};
  index.tensors["e"].chunks.push_back({{0}, {0}, "rank-1.safetensors", 8, 8, 0});
  const std::string text = SerializeIndex(index);
  absl::StatusOr<Index> back = ParseIndex(text, "index.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SerializeIndex(*back), text);
  EXPECT_EQ(back->metadata, index.metadata);
  EXPECT_EQ(back->tensors.at("a.b").chunks[0].crc32c, 0xdeadbeefu);
  // The checksum is the crc32c of the compact, key-sorted serialization without it.
  nlohmann::json j = nlohmann::json::parse(text);
  const uint32_t stored = j["checksum"];
  j.erase("checksum");
  const std::string canonical = j.dump();
  EXPECT_EQ(Crc32c(canonical.data(), canonical.size()), stored);
}

TEST(ChunkProtoTest, EveryFieldSurvivesTheReport) {
  IndexedChunk chunk;
  chunk.tensor = "fc0.weight";
  chunk.global_shape = {6, 8};
  chunk.chunk = {{3, 0}, {3, 8}, "rank-1.safetensors", 96, 144, 0x89abcdefu};
  chunk.dtype = v1::BF16;
  v1::CheckpointChunk proto;
  ChunkToProto(chunk, &proto);
  EXPECT_EQ(proto.dtype(), v1::BF16);
  EXPECT_EQ(proto.end(), 144);
  const IndexedChunk back = ChunkFromProto(proto);
  EXPECT_EQ(back.tensor, chunk.tensor);
  EXPECT_EQ(back.global_shape, chunk.global_shape);
  EXPECT_EQ(back.chunk.offsets, chunk.chunk.offsets);
  EXPECT_EQ(back.chunk.lengths, chunk.chunk.lengths);
  EXPECT_EQ(back.chunk.file, chunk.chunk.file);
  EXPECT_EQ(back.chunk.begin, chunk.chunk.begin);
  EXPECT_EQ(back.chunk.end, chunk.chunk.end);
  EXPECT_EQ(back.chunk.crc32c, chunk.chunk.crc32c);
  EXPECT_EQ(back.dtype, chunk.dtype);
}

}  // namespace
}  // namespace weft::checkpoint
