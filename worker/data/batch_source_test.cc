#include "worker/data/batch_source.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/npy.h"
#include "common/philox.h"
#include "common/testing_files.h"
#include "common/token_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

v1::TensorBox Box(std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
  v1::TensorBox box;
  for (int64_t o : offsets) box.add_offsets(o);
  for (int64_t l : lengths) box.add_lengths(l);
  return box;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// `values` [shape] written to the .npy `path`, opened as `stream` in batches of `batch_size`.
template <typename T>
absl::StatusOr<std::unique_ptr<BatchSource>> OpenNpy(const std::string& path,
                                                     const std::vector<int64_t>& shape,
                                                     const std::vector<T>& values,
                                                     BatchSource::Stream stream,
                                                     int64_t batch_size) {
  EXPECT_TRUE(NpyFile::Write(path, shape, values.data()).ok());
  v1::Data data;
  data.set_source("npy");
  if (stream == BatchSource::kInput) {
    data.set_input(path);
  } else {
    data.set_label(path);
  }
  data.set_batch_size(batch_size);
  return BatchSource::Create(data, stream, 0);
}

TEST(BatchSourceTest, SyntheticFollowsThePhiloxMappingAndWraps) {
  v1::Data data;
  data.set_source("synthetic");
  data.set_batch_size(4);
  data.set_num_samples(6);
  data.add_sample_shape(3);
  data.add_sample_shape(2);
  data.add_label_shape(1);
  const uint64_t seed = 99;
  auto src = BatchSource::Create(data, BatchSource::kInput, seed);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->batch_shape(), (std::vector<int64_t>{4, 3, 2}));
  // Step 2: samples 4, 5, 0, 1. Box rows 1..2 (samples 5, 0), sample axes [1:3, 1:2].
  v1::TensorBox box = Box({1, 1, 1}, {2, 2, 1});
  ASSERT_TRUE((*src)->CheckBox(box).ok());
  std::vector<float> out(5, kNaN);
  ASSERT_TRUE((*src)->ReadBox(2, box, v1::F32, out.data()).ok());
  const uint64_t key = Fnv1a64("data.input");
  const int64_t samples[2] = {5, 0};
  int k = 0;
  for (int64_t s : samples)
    for (int64_t i = 1; i < 3; ++i) {
      const int64_t element = s * 6 + i * 2 + 1;
      EXPECT_EQ(out[k++], PhiloxUniform(seed, key, element, 1.0f)) << "sample " << s;
    }
  EXPECT_TRUE(std::isnan(out[4]));

  auto labels = BatchSource::Create(data, BatchSource::kLabel, seed);
  ASSERT_TRUE(labels.ok());
  float l = kNaN;
  ASSERT_TRUE((*labels)->ReadBox(1, Box({3, 0}, {1, 1}), v1::F32, &l).ok());
  EXPECT_EQ(l, PhiloxUniform(seed, Fnv1a64("data.label"), 3, 1.0f));
}

TEST(BatchSourceTest, NpyWholeRowsAndSubBoxesAcrossTheWrap) {
  const std::string path = TempPath("inputs.npy");
  const int64_t n = 5, f = 4;
  std::vector<float> all(n * f);
  for (int64_t i = 0; i < n * f; ++i) all[i] = 0.5f * i + 1.0f;
  auto src = OpenNpy(path, {n, f}, all, BatchSource::kInput, 3);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->num_samples(), 5);
  // Step 2: samples 3, 4, 0 (wraps). Whole rows.
  std::vector<float> out(3 * f + 1, kNaN);
  ASSERT_TRUE((*src)->ReadBox(2, Box({0, 0}, {3, f}), v1::F32, out.data()).ok());
  const int64_t rows[3] = {3, 4, 0};
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < f; ++j) EXPECT_EQ(out[r * f + j], all[rows[r] * f + j]);
  EXPECT_TRUE(std::isnan(out[3 * f]));
  // Step 4: samples 4, 0, 1; box rows 0..1, columns 1..2.
  std::vector<float> part(5, kNaN);
  ASSERT_TRUE((*src)->ReadBox(4, Box({0, 1}, {2, 2}), v1::F32, part.data()).ok());
  EXPECT_EQ(part[0], all[4 * f + 1]);
  EXPECT_EQ(part[1], all[4 * f + 2]);
  EXPECT_EQ(part[2], all[0 * f + 1]);
  EXPECT_EQ(part[3], all[0 * f + 2]);
  EXPECT_TRUE(std::isnan(part[4]));
}

// A NaN or an infinity in a float .npy fails the read naming the file, the sample and the
// element, for whole rows and for a sub-box alike (a ReLU would map NaN to 0 and hide it).
TEST(BatchSourceTest, NonFiniteNpyValuesAreErrorsNamingTheSample) {
  const std::string path = TempPath("nan.npy");
  const int64_t n = 4, f = 3;
  std::vector<float> all(n * f, 0.25f);
  all[2 * f + 1] = kNaN;
  all[3 * f + 2] = std::numeric_limits<float>::infinity();
  auto src = OpenNpy(path, {n, f}, all, BatchSource::kInput, 2);
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<float> out(2 * f);
  EXPECT_TRUE((*src)->ReadBox(1, Box({0, 0}, {2, f}), v1::F32, out.data()).ok()) << "samples 0, 1";
  absl::Status nan = (*src)->ReadBox(2, Box({0, 0}, {2, f}), v1::F32, out.data());
  EXPECT_EQ(nan.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(nan.message(), absl::StrCat("data.input: ", path,
                                        ": sample 2 element 1 is NaN; non-finite inputs are "
                                        "refused"));
  absl::Status inf = (*src)->ReadBox(2, Box({1, 2}, {1, 1}), v1::F32, out.data());
  EXPECT_EQ(inf.message(), absl::StrCat("data.input: ", path,
                                        ": sample 3 element 2 is infinite; non-finite inputs are "
                                        "refused"));
}

// Labels as class ids: an int32 .npy [n, 2] read in its own dtype, whole rows across the wrap
// and a sub-box of one column, compared with the array written.
TEST(BatchSourceTest, Int32NpyBoxesInTheFilesDtype) {
  const std::string path = TempPath("ids.npy");
  const int64_t n = 5, f = 2;
  std::vector<int32_t> all(n * f);
  for (int64_t i = 0; i < n * f; ++i) all[i] = static_cast<int32_t>(1000000 * i - 7);
  auto src = OpenNpy(path, {n, f}, all, BatchSource::kLabel, 3);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->dtype(), v1::I32);
  // Step 2: samples 3, 4, 0.
  std::vector<int32_t> out(3 * f + 1, -1);
  ASSERT_TRUE((*src)->ReadBox(2, Box({0, 0}, {3, f}), v1::I32, out.data()).ok());
  EXPECT_EQ(out, (std::vector<int32_t>{all[6], all[7], all[8], all[9], all[0], all[1], -1}));
  // Step 4: samples 4, 0, 1; rows 1..2, column 1.
  std::vector<int32_t> part(3, -1);
  ASSERT_TRUE((*src)->ReadBox(4, Box({1, 1}, {2, 1}), v1::I32, part.data()).ok());
  EXPECT_EQ(part, (std::vector<int32_t>{all[1], all[3], -1}));

  // Nothing is converted: a float buffer is an error naming the file and both dtypes.
  std::vector<float> wrong(6);
  absl::Status s = (*src)->ReadBox(2, Box({0, 0}, {3, f}), v1::F32, wrong.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("data.label: " + path + " holds i32 elements, the buffer is f32"),
            absl::string_view::npos)
      << s;
}

TEST(BatchSourceTest, Int64NpyAndSyntheticDtypes) {
  const std::string path = TempPath("ids64.npy");
  const std::vector<int64_t> all = {int64_t{1} << 40, -3, (int64_t{1} << 33) + 5, 9};
  auto src = OpenNpy(path, {4}, all, BatchSource::kInput, 2);
  ASSERT_TRUE(src.ok()) << src.status();
  EXPECT_EQ((*src)->dtype(), v1::I64);
  std::vector<int64_t> out(2);
  ASSERT_TRUE((*src)->ReadBox(1, Box({0}, {2}), v1::I64, out.data()).ok());
  EXPECT_EQ(out, (std::vector<int64_t>{all[0], all[1]}));
  int32_t narrow[2];
  EXPECT_EQ((*src)->ReadBox(1, Box({0}, {2}), v1::I32, narrow).code(),
            absl::StatusCode::kInvalidArgument);

  // Synthetic data is float32 only.
  v1::Data synthetic;
  synthetic.set_source("synthetic");
  synthetic.set_batch_size(2);
  synthetic.set_num_samples(4);
  synthetic.add_sample_shape(1);
  auto syn = BatchSource::Create(synthetic, BatchSource::kInput, 1);
  ASSERT_TRUE(syn.ok());
  EXPECT_EQ((*syn)->dtype(), v1::F32);
  absl::Status s = (*syn)->ReadBox(1, Box({0, 0}, {2, 1}), v1::BF16, narrow);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("synthetic data holds f32 elements, the buffer is bf16"),
            absl::string_view::npos)
      << s;
}

TEST(BatchSourceTest, Errors) {
  v1::Data data;
  data.set_source("npy");
  data.set_input(TempPath("missing.npy"));
  data.set_batch_size(2);
  auto missing = BatchSource::Create(data, BatchSource::kInput, 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("data.input"), absl::string_view::npos);

  const std::string path = TempPath("small.npy");
  std::vector<float> v(6, 1.0f);
  ASSERT_TRUE(NpyFile::Write(path, {3, 2}, v.data()).ok());
  data.set_input(path);
  data.add_sample_shape(3);
  auto wrong_shape = BatchSource::Create(data, BatchSource::kInput, 0);
  EXPECT_EQ(wrong_shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_shape.status().message().find("[2]"), absl::string_view::npos)
      << wrong_shape.status();

  data.clear_sample_shape();
  auto ok = BatchSource::Create(data, BatchSource::kInput, 0);
  ASSERT_TRUE(ok.ok());
  EXPECT_FALSE((*ok)->CheckBox(Box({1, 0}, {2, 2})).ok());
  EXPECT_FALSE((*ok)->CheckBox(Box({0}, {2})).ok());

  data.set_source("csv");
  EXPECT_FALSE(BatchSource::Create(data, BatchSource::kInput, 0).ok());
  data.set_source("synthetic");
  data.set_num_samples(0);
  EXPECT_FALSE(BatchSource::Create(data, BatchSource::kInput, 0).ok());
}

// A Program's sizes are a client's numbers. Issue 30's batch of 2^61 samples of 8 (2^64
// elements, 0 when wrapped) crashed SyntheticSource::Read; it is refused when the source opens,
// as are samples the synthetic numbering (i * sample_numel + j) cannot count.
TEST(BatchSourceTest, SizesThatOverflowInt64AreRefused) {
  v1::Data data;
  data.set_source("synthetic");
  data.set_batch_size(int64_t{1} << 61);
  data.set_num_samples(int64_t{1} << 61);
  data.add_sample_shape(8);
  data.add_label_shape(1);
  auto huge = BatchSource::Create(data, BatchSource::kInput, 0);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(huge.status().message()),
            "data.input: data.batch_size × data.sample_shape [2305843009213693952,8] overflows "
            "int64");
  data.set_batch_size(4);
  auto samples = BatchSource::Create(data, BatchSource::kInput, 0);
  EXPECT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(samples.status().message()),
              ::testing::HasSubstr("data.num_samples × data.sample_shape"));
  // The labels' samples of 1 element are countable.
  EXPECT_TRUE(BatchSource::Create(data, BatchSource::kLabel, 0).ok());
}

// train.steps is bounded by nothing: the batch of step 2^62 is samples (2^62 - 1) * 4 .. + 3
// modulo the samples, computed without wrapping. With 3 samples that is 0, 1, 2, 0, as in step 1
// (2^62 = 4^31 is 1 modulo 3); a wrapped product was a negative sample.
TEST(BatchSourceTest, AStepFarPastTheDataWrapsWithoutOverflow) {
  v1::Data data;
  data.set_source("synthetic");
  data.set_batch_size(4);
  data.set_num_samples(3);
  data.add_sample_shape(2);
  auto src = BatchSource::Create(data, BatchSource::kInput, 5);
  ASSERT_TRUE(src.ok()) << src.status();
  std::vector<float> first(8), far(8);
  ASSERT_TRUE((*src)->ReadBox(1, Box({0, 0}, {4, 2}), v1::F32, first.data()).ok());
  ASSERT_TRUE((*src)->ReadBox(int64_t{1} << 62, Box({0, 0}, {4, 2}), v1::F32, far.data()).ok());
  EXPECT_EQ(far, first);
}

// ---- Tokens: one stream, written here in each format byte by byte.

template <typename T>
std::string Pack(const std::vector<T>& values) {
  std::string out(values.size() * sizeof(T), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// The file (or Megatron prefix) holding `tokens` in `format`.
std::string WriteTokens(const std::string& name, const std::string& format,
                        const std::vector<uint16_t>& tokens) {
  const std::string path = TempPath(name);
  if (format == "raw_u16") {
    WriteAll(path, Pack(tokens));
  } else if (format == "megatron") {
    // Sequences of 5, 0 and the rest, back to back; one document each.
    const int64_t n = static_cast<int64_t>(tokens.size());
    const std::vector<int32_t> lengths = {5, 0, static_cast<int32_t>(n - 5)};
    const std::vector<int64_t> pointers = {0, 10, 10};
    const std::vector<int64_t> docs = {0, 1, 2, 3};
    std::string idx("MMIDIDX\0\0", 9);
    idx += Pack(std::vector<uint64_t>{1});
    idx += '\x08';  // uint16
    idx += Pack(std::vector<uint64_t>{lengths.size(), docs.size()});
    WriteAll(path + ".idx", idx + Pack(lengths) + Pack(pointers) + Pack(docs));
    WriteAll(path + ".bin", Pack(tokens));
  } else {
    std::vector<int32_t> header(256, 0);
    header[0] = 20240520;
    header[1] = 1;
    header[2] = static_cast<int32_t>(tokens.size());
    WriteAll(path, Pack(header) + Pack(tokens));
  }
  return path;
}

v1::Data TokenData(const std::string& path, const std::string& format, int64_t seq_len,
                   int64_t batch_size) {
  v1::Data data;
  data.set_source("tokens");
  data.set_path(path);
  data.set_format(format);
  data.set_seq_len(seq_len);
  data.set_batch_size(batch_size);
  return data;
}

// The tokens 100, 101, ..., 122.
std::vector<uint16_t> Stream23() {
  std::vector<uint16_t> stream(23);
  for (int i = 0; i < 23; ++i) stream[i] = static_cast<uint16_t>(100 + i);
  return stream;
}

// 23 tokens 100, 101, ..., 122 with seq_len 4: (23 - 1) / 4 = 5 samples; sample i is tokens
// [4i, 4i + 4) as input and [4i + 1, 4i + 5) as label. Batches of 3: step 2 is samples 3, 4, 0.
TEST(TokenSourceTest, EveryFormatGivesTheSameBatchesAcrossTheWrap) {
  const std::vector<uint16_t> stream = Stream23();
  for (const std::string format : {"", "llmc", "raw_u16", "megatron"}) {
    SCOPED_TRACE("format " + format);
    const std::string path = WriteTokens("stream_" + format, format, stream);
    const v1::Data data = TokenData(path, format, 4, 3);
    auto inputs = BatchSource::Create(data, BatchSource::kInput, 0);
    ASSERT_TRUE(inputs.ok()) << inputs.status();
    auto labels = BatchSource::Create(data, BatchSource::kLabel, 0);
    ASSERT_TRUE(labels.ok()) << labels.status();
    EXPECT_EQ((*inputs)->dtype(), v1::I32);
    EXPECT_EQ((*inputs)->num_samples(), 5);
    EXPECT_EQ((*inputs)->batch_shape(), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ((*labels)->batch_shape(), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ((*inputs)->origin(), path);

    const v1::TensorBox whole = Box({0, 0}, {3, 4});
    ASSERT_TRUE((*inputs)->CheckBox(whole).ok());
    std::vector<int32_t> out(13, -1);
    ASSERT_TRUE((*inputs)->ReadBox(2, whole, v1::I32, out.data()).ok());
    EXPECT_EQ(out, (std::vector<int32_t>{112, 113, 114, 115, 116, 117, 118, 119, 100, 101, 102,
                                         103, -1}));
    ASSERT_TRUE((*labels)->ReadBox(2, whole, v1::I32, out.data()).ok());
    EXPECT_EQ(out, (std::vector<int32_t>{113, 114, 115, 116, 117, 118, 119, 120, 101, 102, 103,
                                         104, -1}));

    // Rows 1..2 (samples 4, 0), positions 1..2: a box of a dp x sequence split.
    std::vector<int32_t> part(5, -1);
    const v1::TensorBox box = Box({1, 1}, {2, 2});
    ASSERT_TRUE((*inputs)->ReadBox(2, box, v1::I32, part.data()).ok());
    EXPECT_EQ(part, (std::vector<int32_t>{117, 118, 101, 102, -1}));
    ASSERT_TRUE((*labels)->ReadBox(2, box, v1::I32, part.data()).ok());
    EXPECT_EQ(part, (std::vector<int32_t>{118, 119, 102, 103, -1}));

    // Step 5: samples 2, 3, 4 (12, 13, 14 mod 5); the last label ends on token 20.
    ASSERT_TRUE((*labels)->ReadBox(5, Box({2, 3}, {1, 1}), v1::I32, part.data()).ok());
    EXPECT_EQ(part[0], 120);

    // Tokens are int32; nothing is converted.
    std::vector<float> wrong(12);
    EXPECT_THAT(std::string((*inputs)->ReadBox(2, whole, v1::F32, wrong.data()).message()),
                ::testing::HasSubstr("data.input: " + path + " holds i32 elements, the buffer "
                                     "is f32"));
    EXPECT_FALSE((*inputs)->CheckBox(Box({0, 2}, {3, 3})).ok());
    EXPECT_FALSE((*inputs)->CheckBox(Box({0}, {3})).ok());
  }
}

TEST(TokenSourceTest, TokensAtOrAboveTheVocabularyAreErrorsNamingThePosition) {
  const std::vector<uint16_t> stream = Stream23();
  const std::string path = WriteTokens("vocab.bin", "llmc", stream);
  v1::Data data = TokenData(path, "llmc", 4, 3);
  data.set_vocab_size(110);
  auto inputs = BatchSource::Create(data, BatchSource::kInput, 0);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  std::vector<int32_t> out(12);
  // Step 1: samples 0..2, tokens 0..11; the first at or above 110 is at position 10.
  absl::Status s = (*inputs)->ReadBox(1, Box({0, 0}, {3, 4}), v1::I32, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "data.input: " + path + ": token at position 10 is 110, not below vocab_size 110");
  // Sample 0 alone is below it; the label of sample 1, positions 2..3, reads tokens 7 and 8.
  ASSERT_TRUE((*inputs)->ReadBox(1, Box({0, 0}, {1, 4}), v1::I32, out.data()).ok());
  data.set_vocab_size(108);
  auto labels = BatchSource::Create(data, BatchSource::kLabel, 0);
  ASSERT_TRUE(labels.ok());
  s = (*labels)->ReadBox(1, Box({1, 2}, {1, 2}), v1::I32, out.data());
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("data.label: " + path + ": token at position 8 is 108"));
}

TEST(TokenSourceTest, Errors) {
  using ::testing::HasSubstr;
  const std::string path = WriteTokens("four.bin", "llmc", {1, 2, 3, 4});
  auto message = [](const v1::Data& data) {
    auto src = BatchSource::Create(data, BatchSource::kInput, 0);
    EXPECT_FALSE(src.ok());
    return std::string(src.status().message());
  };
  // 4 tokens: one sample of seq_len 3, none of seq_len 4.
  EXPECT_TRUE(BatchSource::Create(TokenData(path, "llmc", 3, 1), BatchSource::kLabel, 0).ok());
  EXPECT_EQ(message(TokenData(path, "llmc", 4, 1)),
            "opening data.input: " + path + " holds 4 tokens, too few for one sample of seq_len "
            "4 (needs 5)");
  EXPECT_THAT(message(TokenData(path, "llmc", 0, 1)), HasSubstr("seq_len must be > 0, got 0"));
  EXPECT_THAT(message(TokenData(path, "csv", 2, 1)),
              HasSubstr("unknown format \"csv\"; known: llmc, raw_u16, megatron"));
  EXPECT_THAT(message(TokenData(path, "megatron", 2, 1)), HasSubstr(path + ".idx: no such file"));
  WriteAll(TempPath("odd.bin"), "abc");
  EXPECT_THAT(message(TokenData(TempPath("odd.bin"), "raw_u16", 1, 1)),
              HasSubstr("odd.bin: holds 3 bytes, not a whole number of uint16 tokens"));
  v1::Data data = TokenData(path, "llmc", 1, 1);
  data.set_num_samples(2);
  EXPECT_THAT(message(data),
              HasSubstr(path + " holds 3 samples of seq_len 1, the program expects 2"));
  data.set_num_samples(3);
  data.add_sample_shape(2);
  EXPECT_THAT(message(data), HasSubstr("has samples of shape [1] (seq_len), the program "
                                       "expects [2]"));
  auto missing = BatchSource::Create(TokenData(TempPath("none.bin"), "", 2, 1),
                                     BatchSource::kInput, 0);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("none.bin: no such file"));
}

}  // namespace
}  // namespace weft
