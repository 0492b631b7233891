// `weftctl ckpt` on checkpoints written here through common/checkpoint (two ranks, a column-
// sharded weight, a bias written by one rank, a tensor with empty chunks): the library
// functions, then the binary as a process (exit codes, stdout, stderr).
#include "client/ckpt.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/checkpoint/checkpoint.h"
#include "common/safetensors.h"
#include "common/testing_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace weft::client {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string g_weftctl;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

Result RunWeftctl(const std::string& args) {
  const std::string base = TestTmpDir() + "/weftctl_ckpt_" + std::to_string(getpid());
  const std::string command = g_weftctl + " " + args + " > " + base + ".out 2> " + base + ".err";
  const int status = std::system(command.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(base + ".out");
  r.err = ReadAll(base + ".err");
  return r;
}

// Values: weight[i][j] = 6i + j, bias[j] = 100 + j, v = {7, 8}.
std::vector<float> Weight() {
  std::vector<float> w(24);
  for (int i = 0; i < 24; ++i) w[i] = static_cast<float>(i);
  return w;
}
std::vector<float> Bias() {
  std::vector<float> b(6);
  for (int i = 0; i < 6; ++i) b[i] = 100.0f + i;
  return b;
}

class CkptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestTmpDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    Save(1);
    Save(2);
    step_ = dir_ + "/step-2";
  }

  // Two ranks: weight [4,6] by columns (3 each), bias written by rank 0 only, v [2] an empty
  // chunk on rank 0 and the whole on rank 1.
  void Save(int64_t step) {
    const std::vector<float> w = Weight(), b = Bias();
    std::vector<float> left, right;
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 6; ++j) (j < 3 ? left : right).push_back(w[6 * i + j]);
    }
    const std::vector<float> v = {7, 8};
    std::vector<checkpoint::IndexedChunk> all;
    auto r0 = checkpoint::WriteShard(checkpoint::StagingDir(dir_, step), 0,
                                     {{"fc0.weight", {4, 6}, {0, 0}, {4, 3}, left.data()},
                                      {"fc0.bias", {6}, {0}, {6}, b.data()},
                                      {"v", {2}, {0}, {0}, nullptr}});
    auto r1 = checkpoint::WriteShard(checkpoint::StagingDir(dir_, step), 1,
                                     {{"fc0.weight", {4, 6}, {0, 3}, {4, 3}, right.data()},
                                      {"v", {2}, {0}, {2}, v.data()}});
    ASSERT_TRUE(r0.ok() && r1.ok());
    all = *r0;
    all.insert(all.end(), r1->begin(), r1->end());
    ASSERT_TRUE(checkpoint::CommitCheckpoint(dir_, step, all, 3, {{"job", "ckpt-test"}}).ok());
  }

  // Flips one byte inside fc0.weight's chunk in rank-1.safetensors.
  void Corrupt() {
    auto reader = checkpoint::CheckpointReader::Open(step_);
    ASSERT_TRUE(reader.ok());
    for (const checkpoint::Chunk& c : reader->index().tensors.at("fc0.weight").chunks) {
      if (c.file != "rank-1.safetensors") continue;
      const std::string path = step_ + "/" + c.file;
      std::string bytes = ReadAll(path);
      bytes[c.begin + 9] ^= 0x01;
      WriteAll(path, bytes);
    }
  }

  std::string dir_, step_;
};

TEST_F(CkptTest, ResolvesAStepFolderOrTheLatest) {
  EXPECT_EQ(*checkpoint::ResolveStepDir(dir_), step_);
  EXPECT_EQ(*checkpoint::ResolveStepDir(dir_ + "/"), step_);
  EXPECT_EQ(*checkpoint::ResolveStepDir(dir_ + "/step-1"), dir_ + "/step-1");
  // A save in progress is ignored and left alone.
  ASSERT_TRUE(fs::create_directories(checkpoint::StagingDir(dir_, 3)));
  EXPECT_EQ(*checkpoint::ResolveStepDir(dir_), step_);
  EXPECT_TRUE(fs::exists(checkpoint::StagingDir(dir_, 3)));
  EXPECT_EQ(checkpoint::ResolveStepDir(dir_ + "/nope").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CkptTest, InspectTextAndJson) {
  auto reader = checkpoint::CheckpointReader::Open(step_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const std::string text = FormatCheckpointText(*reader);
  EXPECT_THAT(text, HasSubstr("checkpoint " + step_ + ": step 2, format version 1, 3 tensor(s), 5 chunk(s)"));
  EXPECT_THAT(text, HasSubstr("metadata: job=ckpt-test"));
  EXPECT_THAT(text, HasSubstr("fc0.weight  F32 [4,6]  96 bytes, 2 chunk(s)"));
  EXPECT_THAT(text, HasSubstr("  offsets [0,3] lengths [4,3]  rank-1.safetensors bytes ["));
  EXPECT_THAT(text, HasSubstr("offsets [0] lengths [0]  rank-0.safetensors"));
  EXPECT_THAT(text, HasSubstr("  rank-0.safetensors  " +
                              std::to_string(fs::file_size(step_ + "/rank-0.safetensors")) + " bytes"));
  EXPECT_THAT(text, HasSubstr("total: 128 bytes of tensors, "));

  const nlohmann::json j = nlohmann::json::parse(FormatCheckpointJson(*reader));
  EXPECT_EQ(j["step"], 2);
  EXPECT_EQ(j["tensor_bytes"], 128);
  ASSERT_EQ(j["tensors"].size(), 3u);
  EXPECT_EQ(j["tensors"][1]["name"], "fc0.weight");
  EXPECT_EQ(j["tensors"][1]["shape"], nlohmann::json({4, 6}));
  EXPECT_EQ(j["tensors"][1]["chunks"][1]["file"], "rank-1.safetensors");
  EXPECT_EQ(j["tensors"][1]["chunks"][1]["bytes"], 48);
  EXPECT_EQ(j["files"].size(), 3u);  // index.json and two shards
  int64_t on_disk = 0;
  for (const auto& f : j["files"]) on_disk += f["bytes"].get<int64_t>();
  EXPECT_EQ(j["file_bytes"], on_disk);
}

TEST_F(CkptTest, VerifyFindsEveryBadChunk) {
  auto reader = checkpoint::CheckpointReader::Open(step_);
  int64_t bytes = 0;
  EXPECT_TRUE(reader->VerifyEach(&bytes).empty());
  EXPECT_EQ(bytes, 128);
  Corrupt();
  std::vector<absl::Status> problems = reader->VerifyEach(&bytes);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0].message(),
              AllOf(HasSubstr("tensor 'fc0.weight' from " + step_ + "/rank-1.safetensors"),
                    HasSubstr("checksum mismatch")));
}

TEST_F(CkptTest, ExportRoundTrip) {
  auto reader = checkpoint::CheckpointReader::Open(step_);
  const std::string out = TestTmpDir() + "/export_round_trip.safetensors";
  ASSERT_TRUE(ExportCheckpoint(*reader, out).ok());
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->entries().size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("weft_step"), "2");
  std::vector<float> w(24), b(6), v(2);
  ASSERT_TRUE(f->ReadBox("fc0.weight", {0, 0}, {4, 6}, w.data()).ok());
  ASSERT_TRUE(f->ReadBox("fc0.bias", {0}, {6}, b.data()).ok());
  ASSERT_TRUE(f->ReadBox("v", {0}, {2}, v.data()).ok());
  EXPECT_EQ(w, Weight());
  EXPECT_EQ(b, Bias());
  EXPECT_EQ(v, (std::vector<float>{7, 8}));
  for (const auto& e : fs::directory_iterator(TestTmpDir())) {
    EXPECT_EQ(e.path().filename().string().find("export_round_trip.safetensors.tmp"),
              std::string::npos);
  }
  // A damaged checkpoint exports nothing, and leaves no temporary file.
  Corrupt();
  const std::string bad = TestTmpDir() + "/export_bad.safetensors";
  absl::Status s = ExportCheckpoint(*reader, bad);
  EXPECT_THAT(s.message(), HasSubstr("checksum mismatch"));
  EXPECT_FALSE(fs::exists(bad));
  for (const auto& e : fs::directory_iterator(TestTmpDir())) {
    EXPECT_EQ(e.path().filename().string().find("export_bad"), std::string::npos);
  }
}

// A checkpoint of every dtype: inspect shows each tensor's, export writes each in its own.
class TypedCkptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestTmpDir() + "/typed_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // emb [2,3] bf16 split by rows over two ranks; ids [4] int64 and w [2] float32 on rank 0,
    // n [3] int32 on rank 1.
    auto r0 = checkpoint::WriteShard(checkpoint::StagingDir(dir_, 5), 0,
                                     {{"emb", {2, 3}, {0, 0}, {1, 3}, emb_.data(), v1::BF16},
                                      {"ids", {4}, {0}, {4}, ids_.data(), v1::I64},
                                      {"w", {2}, {0}, {2}, w_.data()}});
    auto r1 = checkpoint::WriteShard(checkpoint::StagingDir(dir_, 5), 1,
                                     {{"emb", {2, 3}, {1, 0}, {1, 3}, emb_.data() + 3, v1::BF16},
                                      {"n", {3}, {0}, {3}, n_.data(), v1::I32}});
    ASSERT_TRUE(r0.ok() && r1.ok());
    std::vector<checkpoint::IndexedChunk> all = *r0;
    all.insert(all.end(), r1->begin(), r1->end());
    ASSERT_TRUE(checkpoint::CommitCheckpoint(dir_, 5, all, 1).ok());
    step_ = dir_ + "/step-5";
  }

  const std::vector<uint16_t> emb_ = {0x3f80, 0x4000, 0x4040, 0xbf80, 0xc000, 0x0000};
  const std::vector<int64_t> ids_ = {int64_t{1} << 40, -1, 7, 0};
  const std::vector<float> w_ = {0.5f, -0.25f};
  const std::vector<int32_t> n_ = {-3, 2147483647, 11};
  std::string dir_, step_;
};

TEST_F(TypedCkptTest, InspectShowsEachTensorsDtype) {
  auto reader = checkpoint::CheckpointReader::Open(step_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const std::string text = FormatCheckpointText(*reader);
  EXPECT_THAT(text, HasSubstr("\nemb  BF16 [2,3]  12 bytes, 2 chunk(s)\n"));
  EXPECT_THAT(text, HasSubstr("\nids  I64 [4]  32 bytes, 1 chunk(s)\n"));
  EXPECT_THAT(text, HasSubstr("\nn  I32 [3]  12 bytes, 1 chunk(s)\n"));
  EXPECT_THAT(text, HasSubstr("\nw  F32 [2]  8 bytes, 1 chunk(s)\n"));
  EXPECT_THAT(text, HasSubstr("offsets [1,0] lengths [1,3]  rank-1.safetensors bytes ["));
  EXPECT_THAT(text, HasSubstr("total: 64 bytes of tensors, "));

  const nlohmann::json j = nlohmann::json::parse(FormatCheckpointJson(*reader));
  ASSERT_EQ(j["tensors"].size(), 4u);
  std::map<std::string, std::pair<std::string, int64_t>> got;
  for (const auto& t : j["tensors"]) got[t["name"]] = {t["dtype"], t["bytes"]};
  EXPECT_EQ(got["emb"], (std::pair<std::string, int64_t>{"BF16", 12}));
  EXPECT_EQ(got["ids"], (std::pair<std::string, int64_t>{"I64", 32}));
  EXPECT_EQ(got["n"], (std::pair<std::string, int64_t>{"I32", 12}));
  EXPECT_EQ(got["w"], (std::pair<std::string, int64_t>{"F32", 8}));
  EXPECT_EQ(j["tensors"][0]["chunks"][1]["bytes"], 6);  // one bf16 row of emb
  EXPECT_EQ(j["tensor_bytes"], 64);

  int64_t bytes = 0;
  EXPECT_TRUE(reader->VerifyEach(&bytes).empty());
  EXPECT_EQ(bytes, 64);

  Result r = RunWeftctl("ckpt inspect " + dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nemb  BF16 [2,3]  12 bytes, 2 chunk(s)\n"));
  r = RunWeftctl("ckpt inspect --json " + dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"][1]["dtype"], "I64");
}

TEST_F(TypedCkptTest, ExportWritesEachTensorInItsDtype) {
  const std::string out = TestTmpDir() + "/typed_export.safetensors";
  Result r = RunWeftctl("ckpt export " + dir_ + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The header as any safetensors reader sees it.
  const std::string bytes = ReadAll(out);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["emb"], nlohmann::json::parse(R"({"dtype":"BF16","shape":[2,3],"data_offsets":[0,12]})"));
  EXPECT_EQ(header["ids"], nlohmann::json::parse(R"({"dtype":"I64","shape":[4],"data_offsets":[12,44]})"));
  EXPECT_EQ(header["n"], nlohmann::json::parse(R"({"dtype":"I32","shape":[3],"data_offsets":[44,56]})"));
  EXPECT_EQ(header["w"], nlohmann::json::parse(R"({"dtype":"F32","shape":[2],"data_offsets":[56,64]})"));
  EXPECT_EQ(bytes.size(), 8 + n + 64);

  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<uint16_t> emb(6);
  std::vector<int64_t> ids(4);
  std::vector<int32_t> nn(3);
  std::vector<float> w(2);
  ASSERT_TRUE(f->ReadBox("emb", {0, 0}, {2, 3}, v1::BF16, emb.data()).ok());
  ASSERT_TRUE(f->ReadBox("ids", {0}, {4}, v1::I64, ids.data()).ok());
  ASSERT_TRUE(f->ReadBox("n", {0}, {3}, v1::I32, nn.data()).ok());
  ASSERT_TRUE(f->ReadBox("w", {0}, {2}, v1::F32, w.data()).ok());
  EXPECT_EQ(emb, emb_);
  EXPECT_EQ(ids, ids_);
  EXPECT_EQ(nn, n_);
  EXPECT_EQ(w, w_);
}

// ---- The binary

TEST_F(CkptTest, WeftctlInspect) {
  Result r = RunWeftctl("ckpt inspect " + dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("checkpoint " + step_ + ": step 2"));
  EXPECT_THAT(r.out, HasSubstr("fc0.bias  F32 [6]  24 bytes, 1 chunk(s)"));
  r = RunWeftctl("ckpt inspect --json " + dir_ + "/step-1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["step"], 1);
  r = RunWeftctl("ckpt inspect " + dir_ + "/nope");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("weftctl: NOT_FOUND: " + dir_ + "/nope: no such checkpoint folder"));
}

TEST_F(CkptTest, WeftctlVerify) {
  Result r = RunWeftctl("ckpt verify " + dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, step_ + ": OK: 3 tensor(s), 128 bytes checked\n");
  Corrupt();
  r = RunWeftctl("ckpt verify " + dir_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("weftctl: DATA_LOSS: loading tensor 'fc0.weight' from " + step_ +
                                     "/rank-1.safetensors"),
                           HasSubstr("checksum mismatch"), HasSubstr("1 problem(s)")));
  // A missing shard is named at open.
  fs::remove(step_ + "/rank-0.safetensors");
  r = RunWeftctl("ckpt verify " + step_);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("rank-0.safetensors: no such file"), HasSubstr("tensor '")));
}

TEST_F(CkptTest, WeftctlExport) {
  const std::string out = TestTmpDir() + "/weftctl_export.safetensors";
  Result r = RunWeftctl("ckpt export " + dir_ + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("wrote " + out + ": 3 tensor(s) from " + step_));
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> w(24);
  ASSERT_TRUE(f->ReadBox("fc0.weight", {0, 0}, {4, 6}, w.data()).ok());
  EXPECT_EQ(w, Weight());
}

TEST_F(CkptTest, WeftctlUsageErrors) {
  for (const std::string& args : {"ckpt frob " + dir_, "ckpt verify " + dir_ + " --json",
                                  "ckpt export " + dir_, "ckpt inspect " + dir_ + " extra"}) {
    const Result r = RunWeftctl(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_THAT(r.err, HasSubstr("ckpt")) << args;
  }
}

}  // namespace
}  // namespace weft::client

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2) {
    std::fprintf(stderr, "usage: ckpt_test WEFTCTL\n");
    return 2;
  }
  weft::client::g_weftctl = std::filesystem::absolute(argv[1]).string();
  return RUN_ALL_TESTS();
}
