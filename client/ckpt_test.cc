// `weftctl ckpt` on checkpoints written here through common/checkpoint (two ranks, a column-
// sharded weight, a bias written by one rank, a tensor with empty chunks): the library
// functions, then the binary as a process (exit codes, stdout, stderr).
#include "client/ckpt.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "client/weftctl_runner.h"
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
    dir_ = FreshTestDir();
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
  absl::Status s = ExportCheckpoint(*reader, bad).status();
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
    dir_ = FreshTestDir("typed_");
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

  WeftctlResult r = RunWeftctl("ckpt inspect " + dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nemb  BF16 [2,3]  12 bytes, 2 chunk(s)\n"));
  r = RunWeftctl("ckpt inspect --json " + dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"][1]["dtype"], "I64");
}

TEST_F(TypedCkptTest, ExportWritesEachTensorInItsDtype) {
  const std::string out = TestTmpDir() + "/typed_export.safetensors";
  WeftctlResult r = RunWeftctl("ckpt export " + dir_ + " " + out);
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

// A gpt2-shaped checkpoint as the coordinator commits one (C = 2, H = 2, D = 1, V = 4, one
// block): parameters in the graph's shapes, AdamW states beside them, and the index metadata of
// planner/arch/hf_export.h. c_attn.weight [C, 3, H, D] is [C, 3C] in Hugging Face's
// layout, c_attn.bias [3, H, D] is [3C].
constexpr char kGpt2Config[] = R"({
  "architectures": ["GPT2LMHeadModel"],
  "model_type": "gpt2",
  "vocab_size": 4,
  "n_positions": 8,
  "n_embd": 2,
  "n_layer": 1,
  "n_head": 2,
  "n_inner": 8,
  "activation_function": "gelu_new",
  "layer_norm_epsilon": 1e-05,
  "embd_pdrop": 0.0,
  "attn_pdrop": 0.0,
  "resid_pdrop": 0.0
}
)";

class HfCkptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestTmpDir() + "/hf_" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    out_dir_ = dir_ + "_out";
    fs::remove_all(dir_);
    fs::remove_all(out_dir_);
    fs::create_directories(out_dir_);
    for (int i = 0; i < 12; ++i) attn_w_.push_back(0.5f * i);
    for (int i = 0; i < 6; ++i) attn_b_.push_back(-1.0f * i);
    for (int i = 0; i < 8; ++i) wte_.push_back(10.0f + i);
    const std::vector<float> m(12, 0.25f);
    // Rank 0 holds the attention (split along its first dim with rank 1) and the states, rank 1
    // the embedding.
    auto r0 = checkpoint::WriteShard(
        checkpoint::StagingDir(dir_, 3), 0,
        {{"h.0.attn.c_attn.weight", {2, 3, 2, 1}, {0, 0, 0, 0}, {1, 3, 2, 1}, attn_w_.data()},
         {"h.0.attn.c_attn.bias", {3, 2, 1}, {0, 0, 0}, {3, 2, 1}, attn_b_.data()},
         {"h.0.attn.c_attn.weight/adamw.m", {2, 3, 2, 1}, {0, 0, 0, 0}, {2, 3, 2, 1}, m.data()},
         {"wte.weight/adamw.m", {4, 2}, {0, 0}, {4, 2}, m.data()},
         {"wte.weight/adamw.v", {4, 2}, {0, 0}, {4, 2}, m.data()}});
    auto r1 = checkpoint::WriteShard(
        checkpoint::StagingDir(dir_, 3), 1,
        {{"h.0.attn.c_attn.weight", {2, 3, 2, 1}, {1, 0, 0, 0}, {1, 3, 2, 1}, attn_w_.data() + 6},
         {"wte.weight", {4, 2}, {0, 0}, {4, 2}, wte_.data()}});
    ASSERT_TRUE(r0.ok() && r1.ok());
    std::vector<checkpoint::IndexedChunk> all = *r0;
    all.insert(all.end(), r1->begin(), r1->end());
    metadata_ = {{"job_name", "tiny-gpt2"},
                 {"optimizer", "adamw"},
                 {"arch", "gpt2"},
                 {"hf_config", kGpt2Config},
                 {"hf_shapes", R"({"h.0.attn.c_attn.bias":[6],"h.0.attn.c_attn.weight":[2,6]})"}};
    ASSERT_TRUE(checkpoint::CommitCheckpoint(dir_, 3, all, 1, metadata_).ok());
    step_ = dir_ + "/step-3";
  }

  // Commits the next step with the same tensors as the last and `metadata`.
  void RecommitWith(const std::map<std::string, std::string>& metadata) {
    const int64_t step = next_step_++;
    auto reader = checkpoint::CheckpointReader::Open(step_);
    ASSERT_TRUE(reader.ok()) << reader.status();
    fs::create_directories(checkpoint::StagingDir(dir_, step));
    for (const std::string file : {"rank-0.safetensors", "rank-1.safetensors"}) {
      fs::copy_file(step_ + "/" + file, checkpoint::StagingDir(dir_, step) + "/" + file);
    }
    std::vector<checkpoint::IndexedChunk> all;
    for (const auto& [name, e] : reader->index().tensors) {
      for (const checkpoint::Chunk& c : e.chunks) all.push_back({name, e.global_shape, c, e.dtype});
    }
    const absl::Status s = checkpoint::CommitCheckpoint(dir_, step, all, 100, metadata);
    ASSERT_TRUE(s.ok()) << s;
    step_ = checkpoint::StepDir(dir_, step);
  }

  std::vector<std::string> Names(const SafetensorsFile& f) {
    std::vector<std::string> names;
    for (const auto& [name, entry] : f.entries()) names.push_back(name);
    return names;
  }

  std::vector<float> attn_w_, attn_b_, wte_;
  std::map<std::string, std::string> metadata_;
  std::string dir_, out_dir_, step_;
  int64_t next_step_ = 4;
};

TEST_F(HfCkptTest, HfExportWritesParametersInHuggingFacesLayoutAndConfig) {
  auto reader = checkpoint::CheckpointReader::Open(step_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const std::string out = out_dir_ + "/model.safetensors";
  absl::StatusOr<ExportSummary> summary =
      ExportCheckpoint(*reader, out, {ExportOptions::Format::kHf});
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->tensors, 3);
  EXPECT_EQ(summary->optimizer_states_left_out, 3);
  EXPECT_EQ(summary->config_path, out_dir_ + "/config.json");

  // The header as any safetensors reader sees it: Hugging Face's shapes, float32, no states.
  const std::string bytes = ReadAll(out);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header.size(), 4u);  // three tensors and __metadata__
  EXPECT_EQ(header["h.0.attn.c_attn.weight"]["shape"], nlohmann::json({2, 6}));
  EXPECT_EQ(header["h.0.attn.c_attn.bias"]["shape"], nlohmann::json({6}));
  EXPECT_EQ(header["wte.weight"]["shape"], nlohmann::json({4, 2}));
  for (const char* name : {"h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias", "wte.weight"}) {
    EXPECT_EQ(header[name]["dtype"], "F32") << name;
  }
  EXPECT_EQ(header["__metadata__"]["format"], "pt");

  // The same row-major elements.
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT(Names(*f), ::testing::UnorderedElementsAre("h.0.attn.c_attn.weight",
                                                         "h.0.attn.c_attn.bias", "wte.weight"));
  std::vector<float> w(12), b(6), e(8);
  ASSERT_TRUE(f->ReadBox("h.0.attn.c_attn.weight", {0, 0}, {2, 6}, w.data()).ok());
  ASSERT_TRUE(f->ReadBox("h.0.attn.c_attn.bias", {0}, {6}, b.data()).ok());
  ASSERT_TRUE(f->ReadBox("wte.weight", {0, 0}, {4, 2}, e.data()).ok());
  EXPECT_EQ(w, attn_w_);
  EXPECT_EQ(b, attn_b_);
  EXPECT_EQ(e, wte_);

  // config.json: the recorded config with the parameters' dtype.
  const nlohmann::json config = nlohmann::json::parse(ReadAll(out_dir_ + "/config.json"));
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["architectures"], nlohmann::json({"GPT2LMHeadModel"}));
  EXPECT_EQ(config["n_embd"], 2);
  EXPECT_EQ(config["n_head"], 2);
  EXPECT_EQ(config["n_layer"], 1);
  EXPECT_EQ(config["vocab_size"], 4);
  EXPECT_EQ(config["n_positions"], 8);
  EXPECT_DOUBLE_EQ(config["layer_norm_epsilon"].get<double>(), 1e-5);
  EXPECT_EQ(config["torch_dtype"], "float32");
  for (const auto& entry : fs::directory_iterator(out_dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST_F(HfCkptTest, DefaultExportLeavesOptimizerStatesOutUnlessAsked) {
  auto reader = checkpoint::CheckpointReader::Open(step_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE(IsOptimizerState(reader->index(), "wte.weight/adamw.m"));
  EXPECT_FALSE(IsOptimizerState(reader->index(), "wte.weight"));
  EXPECT_FALSE(IsOptimizerState(reader->index(), "nothing/adamw.m"));

  const std::string out = out_dir_ + "/weft.safetensors";
  absl::StatusOr<ExportSummary> summary = ExportCheckpoint(*reader, out);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->tensors, 3);
  EXPECT_EQ(summary->optimizer_states_left_out, 3);
  EXPECT_TRUE(summary->config_path.empty());
  EXPECT_FALSE(fs::exists(out_dir_ + "/config.json"));
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  // Weft's names and the graph's shapes.
  EXPECT_THAT(Names(*f), ::testing::UnorderedElementsAre("h.0.attn.c_attn.weight",
                                                         "h.0.attn.c_attn.bias", "wte.weight"));
  std::vector<float> w(12);
  ASSERT_TRUE(f->ReadBox("h.0.attn.c_attn.weight", {0, 0, 0, 0}, {2, 3, 2, 1}, w.data()).ok());
  EXPECT_EQ(w, attn_w_);

  ExportOptions with;
  with.with_optimizer = true;
  summary = ExportCheckpoint(*reader, out, with);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->tensors, 6);
  EXPECT_EQ(summary->optimizer_states_left_out, 0);
  f = SafetensorsFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->entries().size(), 6u);
  std::vector<float> m(8);
  ASSERT_TRUE(f->ReadBox("wte.weight/adamw.v", {0, 0}, {4, 2}, m.data()).ok());
  EXPECT_EQ(m, std::vector<float>(8, 0.25f));
}

TEST_F(HfCkptTest, DamagedCheckpointExportsNothing) {
  // A flipped byte in rank-1's shard.
  const std::string path = step_ + "/rank-1.safetensors";
  std::string bytes = ReadAll(path);
  bytes[bytes.size() - 3] ^= 0x01;
  WriteAll(path, bytes);
  auto reader = checkpoint::CheckpointReader::Open(step_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const std::string out = out_dir_ + "/model.safetensors";
  absl::StatusOr<ExportSummary> summary =
      ExportCheckpoint(*reader, out, {ExportOptions::Format::kHf});
  EXPECT_THAT(summary.status().message(),
              AllOf(HasSubstr("exporting " + step_), HasSubstr("checksum mismatch")));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out_dir_ + "/config.json"));
  EXPECT_TRUE(fs::is_empty(out_dir_));
}

TEST_F(HfCkptTest, InconsistentMetadataExportsNothing) {
  const std::string out = out_dir_ + "/model.safetensors";
  struct Case {
    std::string key, value, error;
  };
  for (const Case& c : std::vector<Case>{
           {"hf_shapes", R"({"h.0.attn.c_attn.weight":[2,5]})", "does not hold its [2,3,2,1]"},
           {"hf_shapes", R"({"h.9.attn.c_attn.weight":[2,6]})",
            "which the checkpoint does not hold"},
           {"hf_shapes", R"({"wte.weight":"4x2"})", "'wte.weight' is not a list of dimensions"},
           {"hf_shapes", "[", "hf_shapes is not a JSON object"},
           {"hf_config", "{\"model_type\": ", "hf_config is not a JSON object"}}) {
    std::map<std::string, std::string> metadata = metadata_;
    metadata[c.key] = c.value;
    RecommitWith(metadata);
    auto reader = checkpoint::CheckpointReader::Open(step_);
    ASSERT_TRUE(reader.ok()) << reader.status();
    absl::StatusOr<ExportSummary> summary =
        ExportCheckpoint(*reader, out, {ExportOptions::Format::kHf});
    EXPECT_EQ(summary.status().code(), absl::StatusCode::kDataLoss) << c.value;
    EXPECT_THAT(summary.status().message(), AllOf(HasSubstr(step_), HasSubstr(c.error))) << c.value;
    EXPECT_TRUE(fs::is_empty(out_dir_)) << c.value;
  }
}

TEST_F(CkptTest, HfExportOfANonTransformerCheckpointNamesIt) {
  auto reader = checkpoint::CheckpointReader::Open(step_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  const std::string out = TestTmpDir() + "/not_hf/model.safetensors";
  fs::create_directories(TestTmpDir() + "/not_hf");
  absl::StatusOr<ExportSummary> summary =
      ExportCheckpoint(*reader, out, {ExportOptions::Format::kHf});
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(summary.status().message(),
              AllOf(HasSubstr(step_ + " is not a checkpoint of a transformer job"),
                    HasSubstr("model.arch is one of gpt2, llama, qwen2")));
  EXPECT_TRUE(fs::is_empty(TestTmpDir() + "/not_hf"));
}

// ---- The binary

TEST_F(CkptTest, WeftctlInspect) {
  WeftctlResult r = RunWeftctl("ckpt inspect " + dir_);
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
  WeftctlResult r = RunWeftctl("ckpt verify " + dir_);
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
  WeftctlResult r = RunWeftctl("ckpt export " + dir_ + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("wrote " + out + ": 3 tensor(s) from " + step_));
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<float> w(24);
  ASSERT_TRUE(f->ReadBox("fc0.weight", {0, 0}, {4, 6}, w.data()).ok());
  EXPECT_EQ(w, Weight());
}

TEST_F(HfCkptTest, WeftctlExportHf) {
  const std::string out = out_dir_ + "/model.safetensors";
  WeftctlResult r = RunWeftctl("ckpt export --format hf " + dir_ + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "wrote " + out + ": 3 tensor(s) from " + step_ +
                       " in Hugging Face's layout, and " + out_dir_ +
                       "/config.json (3 optimizer state(s) left out)\n");
  absl::StatusOr<SafetensorsFile> f = SafetensorsFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->entries().size(), 3u);
  EXPECT_EQ(nlohmann::json::parse(ReadAll(out_dir_ + "/config.json"))["model_type"], "gpt2");

  r = RunWeftctl("ckpt export " + dir_ + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("3 tensor(s) from " + step_ +
                               " (3 optimizer state(s) left out; --with-optimizer writes them)"));
  r = RunWeftctl("ckpt export --with-optimizer " + dir_ + " " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "wrote " + out + ": 6 tensor(s) from " + step_ + "\n");
}

TEST_F(CkptTest, WeftctlExportHfOfANonTransformerCheckpoint) {
  const std::string out = TestTmpDir() + "/weftctl_not_hf.safetensors";
  WeftctlResult r = RunWeftctl("ckpt export --format hf " + dir_ + " " + out);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, AllOf(HasSubstr("weftctl: FAILED_PRECONDITION: exporting " + step_),
                           HasSubstr(step_ + " is not a checkpoint of a transformer job")));
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CkptTest, WeftctlUsageErrors) {
  for (const std::string& args :
       {"ckpt frob " + dir_, "ckpt verify " + dir_ + " --json", "ckpt export " + dir_,
        "ckpt inspect " + dir_ + " extra", "ckpt export --format onnx " + dir_ + " o.safetensors",
        "ckpt export --format hf --with-optimizer " + dir_ + " o.safetensors",
        "ckpt inspect --format hf " + dir_, "ckpt verify --with-optimizer " + dir_}) {
    const WeftctlResult r = RunWeftctl(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_THAT(r.err, HasSubstr("ckpt")) << args;
  }
}

}  // namespace
}  // namespace weft::client

int main(int argc, char** argv) { return weft::client::RunWeftctlTests(argc, argv); }
