#include "worker/data/batch_source.h"

#include <cmath>
#include <limits>
#include <vector>

#include "common/npy.h"
#include "common/philox.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

v1::TensorBox Box(std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
  v1::TensorBox box;
  for (int64_t o : offsets) box.add_offsets(o);
  for (int64_t l : lengths) box.add_lengths(l);
  return box;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

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
  ASSERT_TRUE(NpyFile::Write(path, {n, f}, all.data()).ok());
  v1::Data data;
  data.set_source("npy");
  data.set_input(path);
  data.set_batch_size(3);
  auto src = BatchSource::Create(data, BatchSource::kInput, 0);
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

// Labels as class ids: an int32 .npy [n, 2] read in its own dtype, whole rows across the wrap
// and a sub-box of one column, compared with the array written.
TEST(BatchSourceTest, Int32NpyBoxesInTheFilesDtype) {
  const std::string path = TempPath("ids.npy");
  const int64_t n = 5, f = 2;
  std::vector<int32_t> all(n * f);
  for (int64_t i = 0; i < n * f; ++i) all[i] = static_cast<int32_t>(1000000 * i - 7);
  ASSERT_TRUE(NpyFile::Write(path, {n, f}, all.data()).ok());
  v1::Data data;
  data.set_source("npy");
  data.set_label(path);
  data.set_batch_size(3);
  auto src = BatchSource::Create(data, BatchSource::kLabel, 0);
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
  ASSERT_TRUE(NpyFile::Write(path, {4}, all.data()).ok());
  v1::Data data;
  data.set_source("npy");
  data.set_input(path);
  data.set_batch_size(2);
  auto src = BatchSource::Create(data, BatchSource::kInput, 0);
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

}  // namespace
}  // namespace weft
