#include "common/npy.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/testing_files.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

std::vector<float> Iota(int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.25f * i - 3.5f;
  return v;
}

TEST(NpyTest, WriteThenReadRoundTrip3d) {
  const std::string path = TempPath("a3.npy");
  std::vector<float> data = Iota(5 * 3 * 2);
  ASSERT_TRUE(NpyFile::Write(path, {5, 3, 2}, data.data()).ok());
  // NumPy requires the header (with the preamble) to be 64-byte aligned.
  const std::string bytes = ReadAll(path);
  ASSERT_EQ((bytes.size() - data.size() * 4) % 64, 0u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");

  auto f = NpyFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->shape(), (std::vector<int64_t>{5, 3, 2}));
  EXPECT_EQ(f->rows(), 5);
  EXPECT_EQ(f->row_elements(), 6);
  std::vector<float> rows(2 * 6, std::nanf(""));
  ASSERT_TRUE(f->ReadRows(2, 2, rows.data()).ok());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(rows[i], data[12 + i]) << i;
  std::vector<float> all(30, std::nanf(""));
  ASSERT_TRUE(f->ReadRows(0, 5, all.data()).ok());
  EXPECT_EQ(all, data);
}

TEST(NpyTest, OneDimensionalArray) {
  const std::string path = TempPath("a1.npy");
  std::vector<float> data = Iota(7);
  ASSERT_TRUE(NpyFile::Write(path, {7}, data.data()).ok());
  EXPECT_NE(ReadAll(path).find("(7,)"), std::string::npos);
  auto f = NpyFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->row_elements(), 1);
  float v[3];
  ASSERT_TRUE(f->ReadRows(4, 3, v).ok());
  EXPECT_EQ(v[0], data[4]);
  EXPECT_EQ(v[2], data[6]);
}

TEST(NpyTest, ReadsAVersion2HeaderAsNumpyWritesIt) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  dict.append(64 - (12 + dict.size() + 1) % 64, ' ');
  dict.push_back('\n');
  std::string bytes = std::string("\x93NUMPY\x02\x00", 8);
  uint32_t len = dict.size();
  bytes.append(reinterpret_cast<const char*>(&len), 4);
  bytes += dict;
  float data[4] = {1, 2, 3, 4};
  bytes.append(reinterpret_cast<const char*>(data), sizeof(data));
  const std::string path = TempPath("v2.npy");
  WriteAll(path, bytes);
  auto f = NpyFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  float out[2];
  ASSERT_TRUE(f->ReadRows(1, 1, out).ok());
  EXPECT_EQ(out[0], 3);
  EXPECT_EQ(out[1], 4);
}

TEST(NpyTest, MissingFileIsNotFound) {
  auto f = NpyFile::Open(TempPath("does-not-exist.npy"));
  EXPECT_EQ(f.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("does-not-exist.npy"), absl::string_view::npos);
}

TEST(NpyTest, RowsOutOfRange) {
  const std::string path = TempPath("r.npy");
  std::vector<float> data = Iota(6);
  ASSERT_TRUE(NpyFile::Write(path, {3, 2}, data.data()).ok());
  auto f = NpyFile::Open(path);
  ASSERT_TRUE(f.ok());
  float out[8];
  EXPECT_EQ(f->ReadRows(2, 2, out).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(f->ReadRows(-1, 1, out).code(), absl::StatusCode::kOutOfRange);
}

class NpyCorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = TempPath("good.npy");
    std::vector<float> data = Iota(12);
    ASSERT_TRUE(NpyFile::Write(path_, {4, 3}, data.data()).ok());
    good_ = ReadAll(path_);
  }
  // Writes `bytes` to a fresh file and expects Open to fail naming it and `what`.
  void ExpectInvalid(const std::string& bytes, const std::string& what) {
    const std::string bad = TempPath("bad.npy");
    WriteAll(bad, bytes);
    auto f = NpyFile::Open(bad);
    ASSERT_FALSE(f.ok()) << what;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
    EXPECT_NE(f.status().message().find(bad), absl::string_view::npos) << f.status();
    EXPECT_NE(f.status().message().find(what), absl::string_view::npos) << f.status();
  }
  std::string path_;
  std::string good_;
};

TEST_F(NpyCorruptionTest, BadMagic) {
  std::string b = good_;
  b[1] = 'X';
  ExpectInvalid(b, "magic");
}

TEST_F(NpyCorruptionTest, TruncatedData) { ExpectInvalid(good_.substr(0, good_.size() - 4), "truncated"); }

TEST_F(NpyCorruptionTest, TruncatedHeader) { ExpectInvalid(good_.substr(0, 40), "truncated"); }

TEST_F(NpyCorruptionTest, TrailingBytes) { ExpectInvalid(good_ + "xxxx", "size mismatch"); }

TEST_F(NpyCorruptionTest, WrongDtype) {
  std::string b = good_;
  b.replace(b.find("<f4"), 3, "<f8");
  ExpectInvalid(b, "<f8");
}

TEST_F(NpyCorruptionTest, FortranOrder) {
  std::string b = good_;
  b.replace(b.find("False"), 5, "True ");
  ExpectInvalid(b, "Fortran");
}

TEST_F(NpyCorruptionTest, MalformedShape) {
  std::string b = good_;
  b.replace(b.find("(4, 3)"), 6, "(4, x)");
  ExpectInvalid(b, "shape");
}

}  // namespace
}  // namespace weft
