#include "common/safetensors.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "common/testing_files.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

std::vector<float> Values(int64_t n, float base) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = base + 0.5f * i;
  return v;
}

// A file assembled by hand from a header string and data bytes.
std::string Assemble(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

TEST(SafetensorsTest, RoundTripWithMetadata) {
  const std::string path = TempPath("rt.safetensors");
  std::vector<float> w = Values(4 * 3, 1.0f);
  std::vector<float> b = Values(3, -2.0f);
  float s = 42.0f;
  ASSERT_TRUE(SafetensorsFile::Write(path,
                                     {{"fc0.weight", {4, 3}, w.data()},
                                      {"fc0.bias", {3}, b.data()},
                                      {"scalar", {}, &s}},
                                     {{"format", "pt"}})
                  .ok());
  const std::string bytes = ReadAll(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_len + (12 + 3 + 1) * 4);

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->entries().size(), 3u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const SafetensorsFile::Entry* e = f->Find("fc0.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, "F32");
  EXPECT_EQ(e->shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(e->end - e->begin, 48);
  // Sorted by name: fc0.bias first.
  EXPECT_EQ(f->Find("fc0.bias")->begin, 0);
  EXPECT_EQ(f->Find("missing"), nullptr);

  std::vector<float> out(12, std::nanf(""));
  ASSERT_TRUE(f->ReadBox("fc0.weight", {0, 0}, {4, 3}, out.data()).ok());
  EXPECT_EQ(out, w);
  float sc = std::nanf("");
  ASSERT_TRUE(f->ReadBox("scalar", {}, {}, &sc).ok());
  EXPECT_EQ(sc, 42.0f);
  EXPECT_EQ(f->ReadBox("nope", {0}, {1}, out.data()).code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, PartialBoxes2d) {
  const std::string path = TempPath("box2.safetensors");
  const int R = 5, C = 7;
  std::vector<float> t = Values(R * C, 0.0f);
  ASSERT_TRUE(SafetensorsFile::Write(path, {{"t", {R, C}, t.data()}}).ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  struct Box { std::vector<int64_t> off, len; };
  for (const Box& box : std::vector<Box>{{{1, 2}, {3, 4}},   // interior
                                         {{0, 3}, {5, 4}},   // column shard
                                         {{2, 0}, {2, 7}},   // row shard (one run)
                                         {{4, 6}, {1, 1}},   // one element
                                         {{0, 0}, {0, 7}}}) {  // empty
    std::vector<float> out(box.len[0] * box.len[1] + 1, std::nanf(""));
    ASSERT_TRUE(f->ReadBox("t", box.off, box.len, out.data()).ok());
    int k = 0;
    for (int r = 0; r < box.len[0]; ++r)
      for (int c = 0; c < box.len[1]; ++c)
        EXPECT_EQ(out[k++], t[(box.off[0] + r) * C + box.off[1] + c]) << r << "," << c;
    EXPECT_TRUE(std::isnan(out[k])) << "wrote past the box";
  }
  std::vector<float> out(64);
  EXPECT_EQ(f->ReadBox("t", {3, 0}, {3, 7}, out.data()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(f->ReadBox("t", {0}, {3}, out.data()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsTest, PartialBoxes3d) {
  const std::string path = TempPath("box3.safetensors");
  const int A = 3, B = 4, C = 5;
  std::vector<float> t = Values(A * B * C, 10.0f);
  ASSERT_TRUE(SafetensorsFile::Write(path, {{"other", {2}, t.data()}, {"t", {A, B, C}, t.data()}})
                  .ok());
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  struct Box { std::vector<int64_t> off, len; };
  for (const Box& box : std::vector<Box>{{{1, 1, 2}, {2, 2, 3}},
                                         {{0, 1, 0}, {3, 2, 5}},
                                         {{1, 0, 0}, {1, 4, 5}},
                                         {{0, 0, 4}, {3, 4, 1}},
                                         {{2, 3, 0}, {1, 1, 5}}}) {
    const int64_t n = box.len[0] * box.len[1] * box.len[2];
    std::vector<float> out(n + 1, std::nanf(""));
    ASSERT_TRUE(f->ReadBox("t", box.off, box.len, out.data()).ok());
    int k = 0;
    for (int a = 0; a < box.len[0]; ++a)
      for (int b = 0; b < box.len[1]; ++b)
        for (int c = 0; c < box.len[2]; ++c)
          EXPECT_EQ(out[k++],
                    t[((box.off[0] + a) * B + box.off[1] + b) * C + box.off[2] + c]);
    EXPECT_TRUE(std::isnan(out[k]));
  }
}

TEST(SafetensorsTest, OtherDtypesParseButReadBoxRejectsThem) {
  const std::string path = TempPath("f16.safetensors");
  WriteAll(path, Assemble(R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "abcd"));
  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  float out[2];
  absl::Status s = f->ReadBox("h", {0}, {2}, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("F16"), absl::string_view::npos) << s;
}

struct CorruptCase {
  std::string name;
  std::string bytes;
  std::string what;  // expected in the message
};

class SafetensorsCorruptionTest : public ::testing::TestWithParam<CorruptCase> {};

TEST_P(SafetensorsCorruptionTest, OpenFailsNamingFileAndProblem) {
  const std::string path = TempPath("bad-" + GetParam().name + ".safetensors");
  WriteAll(path, GetParam().bytes);
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
  EXPECT_NE(f.status().message().find(path), absl::string_view::npos) << f.status();
  EXPECT_NE(f.status().message().find(GetParam().what), absl::string_view::npos) << f.status();
}

const std::string kData16(16, '\x01');

INSTANTIATE_TEST_SUITE_P(
    Cases, SafetensorsCorruptionTest,
    ::testing::Values(
        CorruptCase{"short", std::string("\x05\x00\x00", 3), "truncated"},
        CorruptCase{"header_past_end", Assemble("{}", "").substr(0, 9), "truncated"},
        CorruptCase{"huge_header", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}",
                    "implausibly large"},
        CorruptCase{"bad_json", Assemble(R"({"t":{"dtype":"F32",)", kData16), "not valid JSON"},
        CorruptCase{"not_object", Assemble("[1,2]", kData16), "not a JSON object"},
        CorruptCase{"unknown_dtype",
                    Assemble(R"({"t":{"dtype":"Q7","shape":[4],"data_offsets":[0,16]}})", kData16),
                    "unknown dtype Q7"},
        CorruptCase{"missing_shape",
                    Assemble(R"({"t":{"dtype":"F32","data_offsets":[0,16]}})", kData16), "shape"},
        CorruptCase{"negative_dim",
                    Assemble(R"({"t":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", kData16),
                    "negative"},
        CorruptCase{"offsets_out_of_range",
                    Assemble(R"({"t":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", kData16),
                    "out of range"},
        CorruptCase{"size_mismatch",
                    Assemble(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", kData16),
                    "size mismatch"},
        CorruptCase{"reversed",
                    Assemble(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", kData16),
                    "reversed"},
        CorruptCase{"overlap",
                    Assemble(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                             kData16),
                    "overlap"},
        CorruptCase{"bad_metadata", Assemble(R"({"__metadata__":{"k":3}})", kData16),
                    "__metadata__"}),
    [](const ::testing::TestParamInfo<CorruptCase>& info) { return info.param.name; });

TEST(SafetensorsTest, TruncatedDataSectionIsCaught) {
  const std::string path = TempPath("trunc.safetensors");
  std::vector<float> t = Values(8, 1.0f);
  ASSERT_TRUE(SafetensorsFile::Write(path, {{"t", {8}, t.data()}}).ok());
  std::string bytes = ReadAll(path);
  WriteAll(path, bytes.substr(0, bytes.size() - 4));
  auto f = SafetensorsFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("out of range"), absl::string_view::npos) << f.status();
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  EXPECT_EQ(SafetensorsFile::Open(TempPath("nothing.safetensors")).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace weft
