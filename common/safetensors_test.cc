#include "common/safetensors.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "common/testing_files.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

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

template <typename T>
std::string Raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The four dtypes in one file: the header written as the format says (checked with a JSON
// parser, not Weft's reader), then every tensor read back in its own dtype, whole and a box.
TEST(SafetensorsTest, RoundTripEveryDtype) {
  const std::string path = TempPath("typed.safetensors");
  const std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, -0.5f, 7.0f};       // [2,3]
  const std::vector<uint16_t> b = {0x3f80, 0xc040, 0x7f80, 0x0001, 0x4049, 0x8000};  // [3,2]
  const std::vector<int32_t> i = {-2147483647 - 1, 2147483647, 0, -9};        // [4]
  const std::vector<int64_t> l = {int64_t{1} << 53 | 1, -(int64_t{1} << 62), 12};  // [3,1]
  ASSERT_TRUE(SafetensorsFile::Write(path, {{"f", {2, 3}, f.data()},
                                            {"b", {3, 2}, b.data(), v1::BF16},
                                            {"i", {4}, i.data(), v1::I32},
                                            {"l", {3, 1}, l.data(), v1::I64}})
                  .ok());
  const std::string bytes = ReadAll(path);
  uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<uint8_t>(bytes[k]);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  // Sorted by name: b, f, i, l back to back.
  EXPECT_EQ(header["b"], nlohmann::json::parse(R"({"dtype":"BF16","shape":[3,2],"data_offsets":[0,12]})"));
  EXPECT_EQ(header["f"], nlohmann::json::parse(R"({"dtype":"F32","shape":[2,3],"data_offsets":[12,36]})"));
  EXPECT_EQ(header["i"], nlohmann::json::parse(R"({"dtype":"I32","shape":[4],"data_offsets":[36,52]})"));
  EXPECT_EQ(header["l"], nlohmann::json::parse(R"({"dtype":"I64","shape":[3,1],"data_offsets":[52,76]})"));
  EXPECT_EQ(bytes.substr(8 + n), Raw(b) + Raw(f) + Raw(i) + Raw(l));

  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->Find("b")->dtype, "BF16");
  EXPECT_EQ(file->Find("l")->dtype, "I64");
  EXPECT_EQ(*file->DTypeOf("f"), v1::F32);
  EXPECT_EQ(*file->DTypeOf("b"), v1::BF16);
  EXPECT_EQ(*file->DTypeOf("i"), v1::I32);
  EXPECT_EQ(*file->DTypeOf("l"), v1::I64);
  EXPECT_EQ(file->DTypeOf("nope").status().code(), absl::StatusCode::kNotFound);

  std::vector<uint16_t> b_out(6);
  ASSERT_TRUE(file->ReadBox("b", {0, 0}, {3, 2}, v1::BF16, b_out.data()).ok());
  EXPECT_EQ(b_out, b);
  std::vector<uint16_t> b_col(3);
  ASSERT_TRUE(file->ReadBox("b", {0, 1}, {3, 1}, v1::BF16, b_col.data()).ok());
  EXPECT_EQ(b_col, (std::vector<uint16_t>{b[1], b[3], b[5]}));
  std::vector<int32_t> i_out(2);
  ASSERT_TRUE(file->ReadBox("i", {1}, {2}, v1::I32, i_out.data()).ok());
  EXPECT_EQ(i_out, (std::vector<int32_t>{2147483647, 0}));
  std::vector<int64_t> l_out(3);
  ASSERT_TRUE(file->ReadBox("l", {0, 0}, {3, 1}, v1::I64, l_out.data()).ok());
  EXPECT_EQ(l_out, l);
  std::vector<float> f_out(2);
  ASSERT_TRUE(file->ReadBox("f", {1, 1}, {1, 2}, v1::F32, f_out.data()).ok());
  EXPECT_EQ(f_out, (std::vector<float>{-0.5f, 7.0f}));
}

// bfloat16 is the upper half of a float32: the float bits of a bf16 value b are b << 16, and a
// float becomes bf16 rounded to nearest, ties to even.
TEST(SafetensorsTest, FloatingDtypesConvertOnRead) {
  const std::string path = TempPath("convert.safetensors");
  const std::vector<uint16_t> b = {0x3f80, 0xc040, 0x3fc0, 0x4049};  // 1, -3, 1.5, 3.140625
  // 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties to even give 1 (0x3f80); 1 + 3*2^-8
  // is halfway between 0x3f81 and 0x3f82: 0x3f82; just above the first half rounds up: 0x3f81.
  const std::vector<float> f = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256,
                                1.0f + 1.0f / 256 + 1.0f / (1 << 20), -2.0f};
  ASSERT_TRUE(SafetensorsFile::Write(path, {{"b", {2, 2}, b.data(), v1::BF16},
                                            {"f", {4}, f.data(), v1::F32}})
                  .ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<float> as_float(4, std::nanf(""));
  ASSERT_TRUE(file->ReadBox("b", {0, 0}, {2, 2}, v1::F32, as_float.data()).ok());
  EXPECT_EQ(as_float, (std::vector<float>{1.0f, -3.0f, 1.5f, 3.140625f}));
  // A box of the second column only.
  std::vector<float> col(2);
  ASSERT_TRUE(file->ReadBox("b", {0, 1}, {2, 1}, v1::F32, col.data()).ok());
  EXPECT_EQ(col, (std::vector<float>{-3.0f, 3.140625f}));
  std::vector<uint16_t> as_bf16(4);
  ASSERT_TRUE(file->ReadBox("f", {0}, {4}, v1::BF16, as_bf16.data()).ok());
  EXPECT_EQ(as_bf16, (std::vector<uint16_t>{0x3f80, 0x3f82, 0x3f81, 0xc000}));
}

TEST(SafetensorsTest, IntegerTensorsReadOnlyAsTheirOwnDtype) {
  const std::string path = TempPath("ints.safetensors");
  const std::vector<int32_t> i = {1, 2, 3};
  const std::vector<float> f = {1, 2, 3};
  ASSERT_TRUE(SafetensorsFile::Write(path, {{"labels", {3}, i.data(), v1::I32},
                                            {"w", {3}, f.data()}})
                  .ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<float> out_f(3);
  absl::Status s = file->ReadBox("labels", {0}, {3}, v1::F32, out_f.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": tensor 'labels' has dtype I32, the destination is F32: only "
                                "floating dtypes convert on read (F32 <-> BF16)");
  std::vector<int64_t> out_l(3);
  s = file->ReadBox("labels", {0}, {3}, v1::I64, out_l.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'labels' has dtype I32, the destination is I64"), std::string::npos);
  std::vector<int32_t> out_i(3);
  s = file->ReadBox("w", {0}, {3}, v1::I32, out_i.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'w' has dtype F32, the destination is I32"), std::string::npos);
}

// Dtypes Weft does not hold are listed with their names and skipped; reading one names it.
TEST(SafetensorsTest, UnsupportedDtypesAreListedAndNamedOnRead) {
  const std::string path = TempPath("foreign.safetensors");
  WriteAll(path, Assemble(R"({"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},)"
                          R"("u":{"dtype":"U8","shape":[4],"data_offsets":[8,12]},)"
                          R"("w":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                          std::string(12, '\0') + std::string("\x00\x00\x80\x3f", 4)));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->entries().size(), 3u);
  EXPECT_EQ(file->Find("d")->dtype, "F64");
  EXPECT_EQ(file->Find("u")->dtype, "U8");
  float w = 0;
  ASSERT_TRUE(file->ReadBox("w", {0}, {1}, v1::F32, &w).ok());
  EXPECT_EQ(w, 1.0f);
  double d;
  absl::Status s = file->ReadBox("d", {0}, {1}, v1::F32, &d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), path + ": tensor 'd': dtype F64 is not supported (F32, BF16, I32 and I64 are)");
  EXPECT_EQ(file->DTypeOf("u").status().message(),
            path + ": tensor 'u': dtype U8 is not supported (F32, BF16, I32 and I64 are)");
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
                    "header length over the"},
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
