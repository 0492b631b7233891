// BatchSource: where LOAD_INPUT and LOAD_LABEL read the step's batch from. The global batch of
// step s (from 1) is samples (s-1)*B .. s*B-1 modulo num_samples (wrapping), a tensor
// [B, sample_shape...]; each rank reads only its box of it.
//
// Three sources:
//   npy:       samples are the rows of a .npy file [num_samples, ...] of float32, int32 or
//              int64 (class ids), read with pread and delivered in the file's dtype.
//   synthetic: float32; element j (row-major within the sample) of sample i is the Philox
//              uniform in [-1, 1) with seed = Program.seed, tensor_key = Fnv1a64("data.input") (or
//              "data.label"), element index i * sample_numel + j (see common/philox.h), so every
//              rank and the single-device reference see the same data.
//   tokens:    int32 [B, T] (T = data.seq_len) from one token file (common/token_file.h): sample
//              i is tokens [i*T, i*T + T) as input and [i*T + 1, i*T + T + 1) as label, so
//              num_samples = (token_count - 1) / T. A box is rows (samples) by a range of
//              positions; with data.vocab_size > 0 a token >= it is an error naming the file and
//              the token's position in the stream.
//
// E.g.
//   ASSIGN_OR_RETURN(auto inputs, BatchSource::Create(program.data(), BatchSource::kInput,
//                                                     program.seed()));
//   RETURN_IF_ERROR(inputs->ReadBox(step, instruction.box(), buffer_dtype, buffer));
#ifndef WEFT_WORKER_DATA_BATCH_SOURCE_H_
#define WEFT_WORKER_DATA_BATCH_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft {

class BatchSource {
 public:
  enum Stream { kInput, kLabel };

  // Opens the input or label stream of `data`. Errors name the stream and the file.
  static absl::StatusOr<std::unique_ptr<BatchSource>> Create(const v1::Data& data, Stream stream,
                                                             uint64_t seed);
  virtual ~BatchSource() = default;

  // The element type of the stream: the .npy file's, F32 for synthetic data, I32 for tokens.
  v1::DType dtype() const { return dtype_; }
  // Where the samples come from, for messages: the .npy or token file, or "synthetic data".
  const std::string& origin() const { return origin_; }
  const std::vector<int64_t>& sample_shape() const { return sample_shape_; }
  int64_t num_samples() const { return num_samples_; }
  int64_t batch_size() const { return batch_size_; }
  // [B, sample_shape...].
  std::vector<int64_t> batch_shape() const;

  // Checks that `box` lies inside batch_shape(); the message names the stream.
  absl::Status CheckBox(const v1::TensorBox& box) const;
  // Writes the box of step `step`'s global batch into out (prod(box.lengths) elements of
  // `dtype`, row-major). The box must have passed CheckBox. Nothing is converted: a `dtype`
  // other than dtype() is INVALID_ARGUMENT naming the stream, the file and both dtypes.
  absl::Status ReadBox(int64_t step, const v1::TensorBox& box, v1::DType dtype, void* out);

 protected:
  // ReadBox once the dtype matched: out holds prod(box.lengths) elements of dtype().
  virtual absl::Status Read(int64_t step, const v1::TensorBox& box, void* out) = 0;

  // Global sample index of row b of step `step`'s batch.
  int64_t SampleIndex(int64_t step, int64_t b) const;

  std::string what_;    // "data.input", "data.label"
  std::string origin_;  // the .npy path, the token file, or "synthetic data"
  v1::DType dtype_ = v1::F32;
  std::vector<int64_t> sample_shape_;
  int64_t sample_numel_ = 1;
  int64_t num_samples_ = 0;
  int64_t batch_size_ = 0;
};

}  // namespace weft

#endif  // WEFT_WORKER_DATA_BATCH_SOURCE_H_
