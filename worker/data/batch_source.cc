#include "worker/data/batch_source.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/box.h"
#include "common/checked_math.h"
#include "common/dtype.h"
#include "common/npy.h"
#include "common/philox.h"
#include "common/status.h"
#include "common/token_file.h"

namespace weft {
namespace {

std::string Dims(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }

// A box's offsets or lengths over the sample's axes (all but the batch axis).
absl::Span<const int64_t> SampleAxes(const google::protobuf::RepeatedField<int64_t>& v) {
  return absl::MakeConstSpan(v.data(), v.size()).subspan(1);
}

class SyntheticSource final : public BatchSource {
 public:
  SyntheticSource(uint64_t seed, uint64_t key) : seed_(seed), key_(key) {}

  absl::Status Read(int64_t step, const v1::TensorBox& box, void* out) override {
    const int64_t b0 = box.offsets(0), nb = box.lengths(0);
    const int64_t per_row = BoxRowElements(box);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t base = SampleIndex(step, b0 + b) * sample_numel_;
      float* row = static_cast<float*>(out) + b * per_row;
      ForEachBoxRun(sample_shape_, SampleAxes(box.offsets()), SampleAxes(box.lengths()),
                    [&](int64_t src, int64_t dst, int64_t n) {
                      for (int64_t j = 0; j < n; ++j) {
                        row[dst + j] = PhiloxUniform(seed_, key_, base + src + j, 1.0f);
                      }
                    });
    }
    return absl::OkStatus();
  }

  static int64_t BoxRowElements(const v1::TensorBox& box) {
    int64_t n = 1;
    for (int d = 1; d < box.lengths_size(); ++d) n *= box.lengths(d);
    return n;
  }

 private:
  const uint64_t seed_;
  const uint64_t key_;
};

class NpySource final : public BatchSource {
 public:
  explicit NpySource(NpyFile file) : file_(std::move(file)) {}

  absl::Status Read(int64_t step, const v1::TensorBox& box, void* out) override {
    const int64_t elem = DTypeSize(dtype_);
    char* out_bytes = static_cast<char*>(out);
    const int64_t b0 = box.offsets(0), nb = box.lengths(0);
    bool whole_samples = true;
    int64_t per_row = 1;
    for (int d = 1; d < box.lengths_size(); ++d) {
      per_row *= box.lengths(d);
      if (box.lengths(d) != sample_shape_[d - 1]) whole_samples = false;
    }
    int64_t b = 0;
    while (b < nb) {
      // One pread per stretch of consecutive samples (a batch wraps at most once per pass).
      const int64_t first = SampleIndex(step, b0 + b);
      const int64_t count = std::min(nb - b, num_samples_ - first);
      if (whole_samples) {
        char* rows = out_bytes + b * per_row * elem;
        RETURN_IF_ERROR(Annotate(file_.ReadRows(first, count, rows), what_));
        RETURN_IF_ERROR(CheckFinite(rows, first, count));
      } else {
        scratch_.resize(static_cast<size_t>(count * sample_numel_ * elem));
        RETURN_IF_ERROR(Annotate(file_.ReadRows(first, count, scratch_.data()), what_));
        RETURN_IF_ERROR(CheckFinite(scratch_.data(), first, count));
        for (int64_t k = 0; k < count; ++k) {
          const char* sample = scratch_.data() + k * sample_numel_ * elem;
          char* row = out_bytes + (b + k) * per_row * elem;
          ForEachBoxRun(sample_shape_, SampleAxes(box.offsets()), SampleAxes(box.lengths()),
                        [&](int64_t src, int64_t dst, int64_t n) {
                          std::memcpy(row + dst * elem, sample + src * elem, n * elem);
                        });
        }
      }
      b += count;
    }
    return absl::OkStatus();
  }

 private:
  // A NaN or an infinity among `count` whole float32 samples read from sample `first` on is an
  // error naming the file, the sample and the element: the model would carry it to the loss (a
  // ReLU even maps NaN to 0, so the job would succeed with other numbers).
  absl::Status CheckFinite(const char* samples, int64_t first, int64_t count) const {
    if (dtype_ != v1::F32) return absl::OkStatus();
    const float* values = reinterpret_cast<const float*>(samples);
    for (int64_t i = 0; i < count * sample_numel_; ++i) {
      if (std::isfinite(values[i])) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          what_, ": ", origin_, ": sample ", first + i / sample_numel_, " element ",
          i % sample_numel_, " is ", std::isnan(values[i]) ? "NaN" : "infinite",
          "; non-finite inputs are refused"));
    }
    return absl::OkStatus();
  }

  NpyFile file_;
  std::vector<char> scratch_;  // whole samples, as stored, when the box takes part of each
};

// Tokens: sample i is T consecutive tokens from position i*T (+1 for labels). Consecutive
// samples are consecutive in the stream, so a box of whole samples is one read per stretch.
class TokenSource final : public BatchSource {
 public:
  TokenSource(TokenFile file, int64_t shift, int64_t vocab_size)
      : file_(std::move(file)), shift_(shift), vocab_size_(vocab_size) {}

  absl::Status Read(int64_t step, const v1::TensorBox& box, void* out) override {
    int32_t* ids = static_cast<int32_t*>(out);
    const int64_t seq_len = sample_shape_[0];
    const int64_t b0 = box.offsets(0), nb = box.lengths(0);
    const int64_t c0 = box.offsets(1), nc = box.lengths(1);
    int64_t b = 0;
    while (b < nb) {
      const int64_t first = SampleIndex(step, b0 + b);
      const int64_t count = std::min(nb - b, num_samples_ - first);
      if (c0 == 0 && nc == seq_len) {
        RETURN_IF_ERROR(ReadTokens(first * seq_len + shift_, count * seq_len, ids + b * nc));
      } else {
        for (int64_t k = 0; k < count; ++k) {
          RETURN_IF_ERROR(
              ReadTokens((first + k) * seq_len + shift_ + c0, nc, ids + (b + k) * nc));
        }
      }
      b += count;
    }
    return absl::OkStatus();
  }

 private:
  // Tokens [position, position + n) into out, each checked against the vocabulary.
  absl::Status ReadTokens(int64_t position, int64_t n, int32_t* out) const {
    RETURN_IF_ERROR(Annotate(file_.Read(position, n, out), what_));
    if (vocab_size_ <= 0) return absl::OkStatus();
    for (int64_t j = 0; j < n; ++j) {
      if (out[j] >= vocab_size_) {
        return absl::InvalidArgumentError(
            absl::StrCat(what_, ": ", file_.data_path(), ": token at position ", position + j,
                         " is ", out[j], ", not below vocab_size ", vocab_size_));
      }
    }
    return absl::OkStatus();
  }

  TokenFile file_;
  const int64_t shift_;       // 0 for inputs, 1 for labels (the next token)
  const int64_t vocab_size_;  // 0: unchecked
};

}  // namespace

std::vector<int64_t> BatchSource::batch_shape() const {
  std::vector<int64_t> shape = {batch_size_};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  return shape;
}

absl::Status BatchSource::ReadBox(int64_t step, const v1::TensorBox& box, v1::DType dtype,
                                  void* out) {
  if (dtype != dtype_) {
    return absl::InvalidArgumentError(absl::StrCat(what_, ": ", origin_, " holds ",
                                                   DTypeName(dtype_), " elements, the buffer is ",
                                                   DTypeName(dtype)));
  }
  return Read(step, box, out);
}

int64_t BatchSource::SampleIndex(int64_t step, int64_t b) const {
  // In 128 bits: train.steps × data.batch_size is bounded by nothing (the batches wrap around
  // the samples), and a wrapped product would be a negative sample.
  const absl::int128 sample = absl::int128(step - 1) * batch_size_ + b;
  return static_cast<int64_t>(sample % num_samples_);
}

absl::Status BatchSource::CheckBox(const v1::TensorBox& box) const {
  const std::vector<int64_t> shape = batch_shape();
  const std::vector<int64_t> offsets(box.offsets().begin(), box.offsets().end());
  const std::vector<int64_t> lengths(box.lengths().begin(), box.lengths().end());
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(what_, " box offsets ", Dims(offsets),
                                                   " lengths ", Dims(lengths), " ", why,
                                                   " of the global batch ", Dims(shape)));
  };
  if (offsets.size() != shape.size() || lengths.size() != shape.size()) {
    return bad("does not match the rank");
  }
  if (shape.size() > 16) return bad("has too many axes");
  for (size_t d = 0; d < shape.size(); ++d) {
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] + lengths[d] > shape[d]) {
      return bad("falls outside");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BatchSource>> BatchSource::Create(const v1::Data& data,
                                                                 Stream stream, uint64_t seed) {
  const std::string what = stream == kInput ? "data.input" : "data.label";
  if (data.batch_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": batch_size must be > 0, got ", data.batch_size()));
  }
  std::unique_ptr<BatchSource> source;
  const auto& declared = stream == kInput ? data.sample_shape() : data.label_shape();
  std::vector<int64_t> shape(declared.begin(), declared.end());
  int64_t num_samples = data.num_samples();
  if (data.source() == "synthetic") {
    if (num_samples <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": synthetic data needs num_samples > 0, got ", num_samples));
    }
    source = std::make_unique<SyntheticSource>(seed, Fnv1a64(what));
    source->origin_ = "synthetic data";
    source->dtype_ = v1::F32;
  } else if (data.source() == "npy") {
    const std::string& path = stream == kInput ? data.input() : data.label();
    if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": no .npy path"));
    absl::StatusOr<NpyFile> file = NpyFile::Open(path);
    if (!file.ok()) return Annotate(file.status(), absl::StrCat("opening ", what));
    std::vector<int64_t> file_sample(file->shape().begin() + (file->shape().empty() ? 0 : 1),
                                     file->shape().end());
    if (file->shape().empty() || file->rows() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("opening ", what, ": ", path, " holds no samples"));
    }
    if (!shape.empty() && shape != file_sample) {
      return absl::InvalidArgumentError(
          absl::StrCat("opening ", what, ": ", path, " has samples of shape ", Dims(file_sample),
                       ", the program expects ", Dims(shape)));
    }
    if (num_samples > 0 && num_samples != file->rows()) {
      return absl::InvalidArgumentError(
          absl::StrCat("opening ", what, ": ", path, " holds ", file->rows(),
                       " samples, the program expects ", num_samples));
    }
    shape = file_sample;
    num_samples = file->rows();
    const v1::DType dtype = file->dtype();
    source = std::make_unique<NpySource>(*std::move(file));
    source->origin_ = path;
    source->dtype_ = dtype;
  } else if (data.source() == "tokens") {
    const int64_t seq_len = data.seq_len();
    if (seq_len <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": seq_len must be > 0, got ", seq_len));
    }
    absl::StatusOr<TokenFormat> format = ParseTokenFormat(data.format());
    if (!format.ok()) return Annotate(format.status(), absl::StrCat(what, ": data.format"));
    absl::StatusOr<TokenFile> file = TokenFile::Open(data.path(), *format);
    if (!file.ok()) return Annotate(file.status(), absl::StrCat("opening ", what));
    const int64_t file_samples = (file->token_count() - 1) / seq_len;
    if (file_samples <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("opening ", what, ": ", data.path(), " holds ", file->token_count(),
                       " tokens, too few for one sample of seq_len ", seq_len, " (needs ",
                       seq_len + 1, ")"));
    }
    const std::vector<int64_t> token_shape = {seq_len};
    if (!shape.empty() && shape != token_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("opening ", what, ": ", data.path(), " has samples of shape ",
                       Dims(token_shape), " (seq_len), the program expects ", Dims(shape)));
    }
    if (num_samples > 0 && num_samples != file_samples) {
      return absl::InvalidArgumentError(
          absl::StrCat("opening ", what, ": ", data.path(), " holds ", file_samples,
                       " samples of seq_len ", seq_len, ", the program expects ", num_samples));
    }
    shape = token_shape;
    num_samples = file_samples;
    source = std::make_unique<TokenSource>(*std::move(file), stream == kInput ? 0 : 1,
                                           data.vocab_size());
    source->origin_ = data.path();
    source->dtype_ = v1::I32;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": unknown data source '", data.source(), "' (npy | synthetic | tokens)"));
  }
  source->what_ = what;
  source->sample_shape_ = shape;
  // A Program's numbers are a client's: the elements of a batch and of all the samples (the
  // synthetic source numbers them i * sample_numel + j) must fit int64, so that no offset a read
  // computes wraps. Every box lies inside the batch (CheckBox), so its products fit too.
  const std::string samples = stream == kInput ? "sample_shape" : "label_shape";
  std::vector<int64_t> batch = {data.batch_size()}, all = {num_samples};
  batch.insert(batch.end(), shape.begin(), shape.end());
  all.insert(all.end(), shape.begin(), shape.end());
  for (const auto& [dims, name] :
       {std::make_pair(&batch, absl::StrCat("data.batch_size × data.", samples)),
        std::make_pair(&all, absl::StrCat("data.num_samples × data.", samples))}) {
    RETURN_IF_ERROR(Annotate(CheckedProduct(*dims, name).status(), what));
  }
  source->sample_numel_ = 1;
  for (int64_t d : shape) source->sample_numel_ *= d;
  source->num_samples_ = num_samples;
  source->batch_size_ = data.batch_size();
  return source;
}

}  // namespace weft
