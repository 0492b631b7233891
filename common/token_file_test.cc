// The three token formats on files written here byte by byte (not through the code under test):
// the streams read back, ranges across Megatron sequences, a sparse file past 4 GiB, and every
// validation error naming its file.
#include "common/token_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/testing_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

using ::testing::HasSubstr;

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

template <typename T>
std::string Pack(const std::vector<T>& values) {
  std::string out;
  for (T v : values) Put(&out, v);
  return out;
}

std::string LlmcBytes(int32_t magic, int32_t version, int32_t count, const std::string& body) {
  std::string out;
  Put(&out, magic);
  Put(&out, version);
  Put(&out, count);
  out.resize(1024, '\0');
  return out + body;
}

// A Megatron .idx: header, lengths, pointers, document indices.
std::string MegatronIdx(uint8_t code, const std::vector<int32_t>& lengths,
                        const std::vector<int64_t>& pointers, const std::vector<int64_t>& docs,
                        uint64_t version = 1) {
  std::string out("MMIDIDX\0\0", 9);
  Put(&out, version);
  Put(&out, code);
  Put(&out, static_cast<uint64_t>(lengths.size()));
  Put(&out, static_cast<uint64_t>(docs.size()));
  return out + Pack(lengths) + Pack(pointers) + Pack(docs);
}

std::vector<int32_t> ReadAllTokens(const TokenFile& f) {
  std::vector<int32_t> out(f.token_count(), -1);
  absl::Status s = f.Read(0, f.token_count(), out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

absl::Status StatusOf(const absl::Status& s) { return s; }
template <typename T>
absl::Status StatusOf(const absl::StatusOr<T>& s) {
  return s.status();
}

#define EXPECT_ERROR(expr, code_, text)                               \
  do {                                                                \
    const absl::Status s_ = StatusOf(expr);                           \
    EXPECT_EQ(s_.code(), code_) << s_;                                \
    EXPECT_THAT(std::string(s_.message()), HasSubstr(text)) << s_;    \
  } while (0)

TEST(TokenFormatTest, NamesAndTheDefault) {
  EXPECT_EQ(*ParseTokenFormat(""), TokenFormat::kLlmc);
  for (TokenFormat f : {TokenFormat::kLlmc, TokenFormat::kRawU16, TokenFormat::kMegatron}) {
    EXPECT_EQ(*ParseTokenFormat(TokenFormatName(f)), f);
  }
  EXPECT_EQ(ParseTokenFormat("npy").status().message(),
            "unknown format \"npy\"; known: llmc, raw_u16, megatron");
}

TEST(TokenFileTest, LlmcUint16) {
  const std::string path = TempPath("llmc16.bin");
  const std::vector<uint16_t> tokens = {50256, 0, 1, 65535, 7};
  WriteAll(path, LlmcBytes(20240520, 1, 5, Pack(tokens)));
  absl::StatusOr<TokenFile> f = TokenFile::Open(path, TokenFormat::kLlmc);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->token_count(), 5);
  EXPECT_EQ(f->token_bytes(), 2);
  EXPECT_EQ(f->token_type(), "uint16");
  EXPECT_EQ(ReadAllTokens(*f), (std::vector<int32_t>{50256, 0, 1, 65535, 7}));
  std::vector<int32_t> mid(2);
  ASSERT_TRUE(f->Read(2, 2, mid.data()).ok());
  EXPECT_EQ(mid, (std::vector<int32_t>{1, 65535}));
  EXPECT_ERROR(f->Read(4, 2, mid.data()), absl::StatusCode::kOutOfRange,
               path + ": tokens [4, 6) fall outside the 5 tokens of the stream");
  // LlmcHeader writes the same header.
  EXPECT_EQ(*LlmcHeader(5), LlmcBytes(20240520, 1, 5, ""));
  EXPECT_EQ(*LlmcHeader(3, /*u32=*/true), LlmcBytes(20240801, 7, 3, ""));
  EXPECT_FALSE(LlmcHeader(int64_t{1} << 31).ok());
}

TEST(TokenFileTest, LlmcUint32LlamaThree) {
  const std::string path = TempPath("llmc32.bin");
  WriteAll(path, LlmcBytes(20240801, 7, 3, Pack(std::vector<uint32_t>{128000, 5, 128255})));
  absl::StatusOr<TokenFile> f = TokenFile::Open(path, TokenFormat::kLlmc);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->token_type(), "uint32");
  EXPECT_EQ(ReadAllTokens(*f), (std::vector<int32_t>{128000, 5, 128255}));

  WriteAll(path, LlmcBytes(20240801, 7, 2, Pack(std::vector<uint32_t>{1, 0x80000000u})));
  f = TokenFile::Open(path, TokenFormat::kLlmc);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<int32_t> out(2);
  EXPECT_ERROR(f->Read(0, 2, out.data()), absl::StatusCode::kInvalidArgument,
               path + ": token at position 1 is 2147483648, not a token id (uint32 stored");
}

TEST(TokenFileTest, LlmcErrorsNameTheFile) {
  const std::string path = TempPath("bad_llmc.bin");
  const std::string two = Pack(std::vector<uint16_t>{1, 2});
  struct Case {
    std::string bytes;
    std::string error;
  };
  const std::vector<Case> cases = {
      {LlmcBytes(20240520, 1, 1000, Pack(std::vector<uint16_t>(998, 3))),
       "header says 1000 tokens but the file holds 998"},
      {LlmcBytes(20240520, 1, 2, two + "x"),
       "header says 2 tokens but the file holds 2 and 1 byte"},
      {LlmcBytes(20240520, 1, -1, ""), "header says -1 tokens"},
      {LlmcBytes(12345, 1, 2, two), "not an llm.c token file: its first 4 bytes are not the magic (20240520"},
      {LlmcBytes(20240520, 7, 2, two), "llm.c header version 7 is not supported with magic "
                                       "20240520 (expected 1)"},
      {LlmcBytes(20240801, 1, 1, two),
       "llm.c header version 1 is not supported with magic 20240801 (expected 7)"},
      {std::string(100, '\0'), "holds 100 bytes, shorter than llm.c's 1024-byte header"},
  };
  for (const Case& c : cases) {
    WriteAll(path, c.bytes);
    EXPECT_ERROR(TokenFile::Open(path, TokenFormat::kLlmc), absl::StatusCode::kInvalidArgument,
                 path + ": " + c.error);
  }
  EXPECT_ERROR(TokenFile::Open(TempPath("nope.bin"), TokenFormat::kLlmc),
               absl::StatusCode::kNotFound, TempPath("nope.bin") + ": no such file");
}

TEST(TokenFileTest, RawUint16) {
  const std::string path = TempPath("train.bin");
  WriteAll(path, Pack(std::vector<uint16_t>{9, 8, 7, 60000}));
  absl::StatusOr<TokenFile> f = TokenFile::Open(path, TokenFormat::kRawU16);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(ReadAllTokens(*f), (std::vector<int32_t>{9, 8, 7, 60000}));
  WriteAll(path, "abc");
  EXPECT_ERROR(TokenFile::Open(path, TokenFormat::kRawU16), absl::StatusCode::kInvalidArgument,
               path + ": holds 3 bytes, not a whole number of uint16 tokens (raw_u16)");
}

// Megatron's builder writes sequences back to back: 3 sequences (2, 3, 1 tokens) in 2 documents
// ([0, 2) and [2, 3)), read across sequence boundaries.
TEST(TokenFileTest, MegatronBackToBack) {
  const std::string prefix = TempPath("megatron_u16");
  WriteAll(prefix + ".bin", Pack(std::vector<uint16_t>{10, 11, 20, 21, 22, 30}));
  WriteAll(prefix + ".idx", MegatronIdx(8, {2, 3, 1}, {0, 4, 10}, {0, 2, 3}));
  absl::StatusOr<TokenFile> f = TokenFile::Open(prefix, TokenFormat::kMegatron);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->token_count(), 6);
  EXPECT_EQ(f->data_path(), prefix + ".bin");
  EXPECT_EQ(ReadAllTokens(*f), (std::vector<int32_t>{10, 11, 20, 21, 22, 30}));
  std::vector<int32_t> part(3);
  ASSERT_TRUE(f->Read(1, 3, part.data()).ok());
  EXPECT_EQ(part, (std::vector<int32_t>{11, 20, 21}));

  // With int8 sequence_modes after the document indices (multimodal indices), as well.
  WriteAll(prefix + ".idx",
           MegatronIdx(8, {2, 3, 1}, {0, 4, 10}, {0, 2, 3}) + std::string(3, '\0'));
  EXPECT_TRUE(TokenFile::Open(prefix, TokenFormat::kMegatron).ok());
}

// Sequences anywhere in .bin (here in reverse order, with gaps and an empty one), of each
// integer dtype: the stream follows the index's order.
TEST(TokenFileTest, MegatronScatteredSequencesEveryIntegerDtype) {
  const std::string prefix = TempPath("megatron_scattered");
  const std::vector<int64_t> want = {1, 2, 3, 4, 5, 6};
  // Sequence 0: {1, 2} at element 6, sequence 1: {} , sequence 2: {3, 4, 5} at element 2,
  // sequence 3: {6} at element 0; elements 1 and 5 are gaps.
  const std::vector<int64_t> elements = {6, 99, 3, 4, 5, 99, 1, 2};
  auto bin = [&](auto type_tag) {
    using T = decltype(type_tag);
    std::vector<T> v;
    for (int64_t e : elements) v.push_back(static_cast<T>(e));
    return Pack(v);
  };
  struct Dtype {
    uint8_t code;
    int bytes;
    std::string data;
  };
  const std::vector<Dtype> dtypes = {{1, 1, bin(uint8_t{})},  {2, 1, bin(int8_t{})},
                                     {3, 2, bin(int16_t{})},  {4, 4, bin(int32_t{})},
                                     {5, 8, bin(int64_t{})},  {8, 2, bin(uint16_t{})}};
  for (const Dtype& d : dtypes) {
    WriteAll(prefix + ".bin", d.data);
    WriteAll(prefix + ".idx", MegatronIdx(d.code, {2, 0, 3, 1},
                                          {6 * d.bytes, 0, 2 * d.bytes, 0}, {0, 1, 4}));
    absl::StatusOr<TokenFile> f = TokenFile::Open(prefix, TokenFormat::kMegatron);
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(f->token_bytes(), d.bytes);
    const std::vector<int32_t> got = ReadAllTokens(*f);
    EXPECT_EQ(std::vector<int64_t>(got.begin(), got.end()), want) << int{d.code};
    for (int64_t first = 0; first < 6; ++first) {
      std::vector<int32_t> one(1);
      ASSERT_TRUE(f->Read(first, 1, one.data()).ok());
      EXPECT_EQ(one[0], want[first]) << int{d.code} << " position " << first;
    }
  }
  // A negative token is named with its position in the stream.
  WriteAll(prefix + ".bin", Pack(std::vector<int16_t>{6, 99, 3, -4, 5, 99, 1, 2}));
  WriteAll(prefix + ".idx", MegatronIdx(3, {2, 0, 3, 1}, {12, 0, 4, 0}, {0, 1, 4}));
  absl::StatusOr<TokenFile> f = TokenFile::Open(prefix, TokenFormat::kMegatron);
  ASSERT_TRUE(f.ok()) << f.status();
  std::vector<int32_t> out(6);
  EXPECT_ERROR(f->Read(0, 6, out.data()), absl::StatusCode::kInvalidArgument,
               prefix + ".bin: token at position 3 is -4, not a token id (int16 stored");
}

TEST(TokenFileTest, MegatronErrorsNameTheFile) {
  const std::string prefix = TempPath("megatron_bad");
  const std::string idx = prefix + ".idx";
  WriteAll(prefix + ".bin", Pack(std::vector<uint16_t>{1, 2, 3, 4}));
  struct Case {
    std::string bytes;
    std::string error;
  };
  const std::string good = MegatronIdx(8, {2, 2}, {0, 4}, {0, 2});
  std::string bad_magic = good;
  bad_magic[0] = 'X';
  const std::vector<Case> cases = {
      {bad_magic, "not a Megatron index"},
      {good.substr(0, 20), "holds 20 bytes, shorter than the 34-byte Megatron index header"},
      {MegatronIdx(8, {2, 2}, {0, 4}, {0, 2}, 2), "index version 2 is not supported (1 is)"},
      {MegatronIdx(6, {2, 2}, {0, 4}, {0, 2}), "dtype code 6 (float64) cannot hold token ids"},
      {MegatronIdx(9, {2, 2}, {0, 4}, {0, 2}), "unknown dtype code 9"},
      {good + "x", "header says 2 sequences and 2 document indices, which need 74 bytes, but "
                   "the file holds 75 bytes"},
      {good.substr(0, 60), "header says 2 sequences and 2 document indices, which need 74 "
                          "bytes, but the file holds 60 bytes"},
      {MegatronIdx(8, {2, 3}, {0, 4}, {0, 2}), "sequence 1 (3 uint16 tokens at byte 4) lies "
                                               "outside " + prefix + ".bin (8 bytes)"},
      {MegatronIdx(8, {2, 2}, {0, -2}, {0, 2}), "sequence 1 (2 uint16 tokens at byte -2) lies "
                                                "outside"},
      {MegatronIdx(8, {2, -1}, {0, 4}, {0, 2}), "sequence 1 has length -1"},
      {MegatronIdx(8, {2, 2}, {0, 4}, {1, 2}), "document_indices[0] is 1; the first must be 0"},
      {MegatronIdx(8, {2, 2}, {0, 4}, {0, 2, 1}), "document_indices[2] is 1; expected 2..2"},
      {MegatronIdx(8, {2, 2}, {0, 4}, {0, 1}), "document_indices ends at 1, not at the sequence "
                                               "count 2"},
  };
  for (const Case& c : cases) {
    WriteAll(idx, c.bytes);
    EXPECT_ERROR(TokenFile::Open(prefix, TokenFormat::kMegatron),
                 absl::StatusCode::kInvalidArgument, idx + ": " + c.error);
  }
  // A corrupt count must not allocate: 2^60 sequences in a small file.
  std::string huge = good;
  const uint64_t many = uint64_t{1} << 60;
  std::memcpy(&huge[18], &many, 8);
  WriteAll(idx, huge);
  EXPECT_ERROR(TokenFile::Open(prefix, TokenFormat::kMegatron),
               absl::StatusCode::kInvalidArgument, "which need over 2^56 bytes");

  WriteAll(idx, good);
  EXPECT_TRUE(TokenFile::Open(prefix, TokenFormat::kMegatron).ok());
  EXPECT_ERROR(TokenFile::Open(TempPath("megatron_none"), TokenFormat::kMegatron),
               absl::StatusCode::kNotFound, TempPath("megatron_none") + ".idx: no such file");
  // The .bin or .idx given where the prefix belongs: the message says what to write.
  EXPECT_ERROR(TokenFile::Open(prefix + ".bin", TokenFormat::kMegatron),
               absl::StatusCode::kNotFound,
               prefix + ".bin.idx: no such file; format megatron takes the prefix of the .idx and "
               ".bin: " + prefix);
  EXPECT_ERROR(TokenFile::Open(idx, TokenFormat::kMegatron), absl::StatusCode::kNotFound,
               "takes the prefix of the .idx and .bin: " + prefix);
  WriteAll(TempPath("megatron_idx_only.idx"), good);
  EXPECT_ERROR(TokenFile::Open(TempPath("megatron_idx_only"), TokenFormat::kMegatron),
               absl::StatusCode::kNotFound, "megatron_idx_only.bin: no such file");
}

// Positions past 2^31 tokens and offsets past 4 GiB: a sparse raw_u16 file of 6 GiB with tokens
// written near its end.
TEST(TokenFileTest, LargeSparseFile) {
  const std::string path = TempPath("large.bin");
  const int64_t tokens = int64_t{3} << 30;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  if (::ftruncate(fd, tokens * 2) != 0) {
    ::close(fd);
    GTEST_SKIP() << "no sparse 6 GiB file here";
  }
  const std::vector<uint16_t> tail = {4, 5, 6};
  ASSERT_EQ(::pwrite(fd, tail.data(), 6, (tokens - 3) * 2), 6);
  ::close(fd);
  absl::StatusOr<TokenFile> f = TokenFile::Open(path, TokenFormat::kRawU16);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->token_count(), tokens);
  std::vector<int32_t> out(4);
  ASSERT_TRUE(f->Read(tokens - 4, 4, out.data()).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{0, 4, 5, 6}));
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace weft
