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

// A file as numpy.save writes it (format 1.0, header padded to 64 bytes), assembled by hand.
std::string NumpyBytes(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  dict.append(64 - (10 + dict.size() + 1) % 64, ' ');
  dict.push_back('\n');
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(dict.size() & 0xff));
  bytes.push_back(static_cast<char>(dict.size() >> 8));
  return bytes + dict + data;
}

template <typename T>
std::string Raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

TEST(NpyTest, ReadsInt32AndInt64AsNumpyWritesThem) {
  const std::vector<int32_t> i32 = {-2147483647 - 1, -1, 0, 7, 2147483647, 42};
  const std::vector<int64_t> i64 = {int64_t{1} << 62, -(int64_t{1} << 40) - 3, 5};
  const std::string p32 = TempPath("i32.npy"), p64 = TempPath("i64.npy");
  WriteAll(p32, NumpyBytes("<i4", "(3, 2)", Raw(i32)));
  WriteAll(p64, NumpyBytes("<i8", "(3,)", Raw(i64)));

  auto h32 = NpyFile::ReadHeader(p32);
  ASSERT_TRUE(h32.ok()) << h32.status();
  EXPECT_EQ(h32->dtype, v1::I32);
  EXPECT_EQ(h32->shape, (std::vector<int64_t>{3, 2}));
  auto f32 = NpyFile::Open(p32);
  ASSERT_TRUE(f32.ok()) << f32.status();
  EXPECT_EQ(f32->dtype(), v1::I32);
  EXPECT_EQ(f32->row_bytes(), 8);
  std::vector<int32_t> rows(4, 99);
  ASSERT_TRUE(f32->ReadRows(1, 2, rows.data()).ok());
  EXPECT_EQ(rows, (std::vector<int32_t>{0, 7, 2147483647, 42}));

  auto f64 = NpyFile::Open(p64);
  ASSERT_TRUE(f64.ok()) << f64.status();
  EXPECT_EQ(f64->dtype(), v1::I64);
  EXPECT_EQ(f64->row_bytes(), 8);
  std::vector<int64_t> all(3);
  ASSERT_TRUE(f64->ReadRows(0, 3, all.data()).ok());
  EXPECT_EQ(all, i64);
  // The data size follows the dtype: 3 int64 are 24 bytes, not 12.
  WriteAll(p64, NumpyBytes("<i8", "(3,)", Raw(i64).substr(0, 12)));
  EXPECT_NE(NpyFile::Open(p64).status().message().find("needs 24 data bytes"), std::string::npos);
}

TEST(NpyTest, WriteRoundTripsEveryDtype) {
  const std::vector<float> f = {1.5f, -0.25f, 3e38f, -0.0f};
  const std::vector<int32_t> i = {-5, 6, -2147483647 - 1, 2147483647};
  const std::vector<int64_t> l = {-(int64_t{1} << 50), 1, 2, int64_t{1} << 33};
  const std::string pf = TempPath("wf.npy"), pi = TempPath("wi.npy"), pl = TempPath("wl.npy");
  ASSERT_TRUE(NpyFile::Write(pf, {2, 2}, f.data()).ok());
  ASSERT_TRUE(NpyFile::Write(pi, {2, 2}, i.data()).ok());
  ASSERT_TRUE(NpyFile::Write(pl, {4}, v1::I64, l.data()).ok());
  // Byte for byte what numpy.save writes.
  EXPECT_EQ(ReadAll(pf), NumpyBytes("<f4", "(2, 2)", Raw(f)));
  EXPECT_EQ(ReadAll(pi), NumpyBytes("<i4", "(2, 2)", Raw(i)));
  EXPECT_EQ(ReadAll(pl), NumpyBytes("<i8", "(4,)", Raw(l)));
  auto hf = NpyFile::ReadHeader(pf);
  ASSERT_TRUE(hf.ok());
  EXPECT_EQ(hf->dtype, v1::F32);
  std::vector<int64_t> back(4);
  auto fl = NpyFile::Open(pl);
  ASSERT_TRUE(fl.ok());
  ASSERT_TRUE(fl->ReadRows(0, 4, back.data()).ok());
  EXPECT_EQ(back, l);
  // numpy has no bfloat16.
  const uint16_t bf[2] = {0x3f80, 0x4000};
  absl::Status s = NpyFile::Write(TempPath("bf.npy"), {2}, v1::BF16, bf);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("bf16"), std::string::npos) << s;
}

TEST(NpyTest, UnsupportedDtypesAreNamed) {
  for (const std::string descr : {"<f2", "<f8", ">f4", "|u1", "<u4", "|b1"}) {
    const std::string path = TempPath("x.npy");
    WriteAll(path, NumpyBytes(descr, "(2,)", std::string(16, '\0')));
    absl::Status s = NpyFile::ReadHeader(path).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << descr;
    EXPECT_EQ(s.message(), path + ": dtype '" + descr +
                               "' is not supported (float32, int32 and int64 are)");
  }
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
