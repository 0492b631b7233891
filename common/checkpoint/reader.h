// Reading a committed checkpoint on any mesh: any box of any tensor is assembled from the
// chunks that intersect it, each checked against its crc32c, into a buffer of the caller's
// dtype (floating dtypes convert, integers must match).
//
// E.g.
//   ASSIGN_OR_RETURN(std::string latest, FindLatest(dir));
//   ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(latest));
//   RETURN_IF_ERROR(reader.ReadBox("fc0.weight", offsets, lengths, v1::BF16, buffer));
#ifndef WEFT_COMMON_CHECKPOINT_READER_H_
#define WEFT_COMMON_CHECKPOINT_READER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint/index.h"
#include "common/file_io.h"
#include "weft/v1/job.pb.h"

namespace weft::checkpoint {

class CheckpointReader {
 public:
  // Reads and checks index.json (its own crc32c, format version, structure), then opens every
  // chunk file and checks that it is long enough and that its safetensors header stores each
  // chunk as the index says (dtype, shape, byte range): a shard that disagrees with the index on
  // a chunk's dtype is DATA_LOSS naming the tensor, the file and both dtypes.
  static absl::StatusOr<CheckpointReader> Open(const std::string& step_dir);

  const Index& index() const { return index_; }
  const std::string& step_dir() const { return step_dir_; }

  // Fills out (prod(lengths) elements of `dtype`, row-major) with the region
  // [offsets, offsets+lengths) of tensor `name`, from the chunks that intersect it. A floating
  // tensor converts to the other floating dtype (F32 <-> BF16, rounded to nearest even); an
  // integer tensor is read only as its own dtype, else INVALID_ARGUMENT naming the tensor and
  // both dtypes. Each chunk read is checked against its crc32c (a chunk is read whole to be
  // verified). Errors name the tensor, the file and the problem: unknown tensor, shape
  // mismatch, missing region (the covered volume does not add up to the box), checksum
  // mismatch, truncated file.
  absl::Status ReadBox(const std::string& name, const std::vector<int64_t>& offsets,
                       const std::vector<int64_t>& lengths, v1::DType dtype, void* out) const;
  // Into float32: ReadBox(name, offsets, lengths, v1::F32, out).
  absl::Status ReadBox(const std::string& name, const std::vector<int64_t>& offsets,
                       const std::vector<int64_t>& lengths, float* out) const {
    return ReadBox(name, offsets, lengths, v1::F32, out);
  }

  // Reads every chunk of every tensor and checks its crc32c, and that each tensor's chunks
  // cover it. The first problem VerifyEach finds.
  absl::Status VerifyAll() const;

  // Every problem found, one error each, tensor by tensor: chunks that do not cover the tensor
  // (CheckCoverage), then each chunk that fails VerifyChunk. Empty when the checkpoint is sound.
  // bytes_checked, if given, is set to the bytes of the chunks that verified.
  std::vector<absl::Status> VerifyEach(int64_t* bytes_checked = nullptr) const;

  // Checks that the chunks of tensor `name` cover its global shape; the error names the tensor
  // and a region no chunk holds. Reads no data.
  absl::Status CheckCoverage(const std::string& name) const;

  // Reads one chunk of tensor `name` (in blocks, whatever its size) and checks its crc32c.
  absl::Status VerifyChunk(const std::string& name, const Chunk& chunk) const;

 private:
  // The index entry of tensor `name`; NOT_FOUND naming the checkpoint when it has none.
  absl::StatusOr<const TensorEntry*> FindTensor(const std::string& name) const;
  // "loading tensor 'fc0.weight' from <step_dir>/<file>: chunk [...]": how errors about a chunk
  // start.
  std::string ChunkContext(const std::string& name, const Chunk& chunk) const;
  // The file holding `chunk`, opened by Open.
  absl::StatusOr<const ReadOnlyFile*> ChunkFile(const Chunk& chunk,
                                                const std::string& context) const;
  // DATA_LOSS "checksum mismatch" unless `crc`, computed over the chunk's bytes, is the index's.
  static absl::Status CheckCrc(const Chunk& chunk, uint32_t crc, const std::string& context);

  std::string step_dir_;
  Index index_;
  std::map<std::string, ReadOnlyFile> files_;  // by Chunk::file, opened once by Open
};

}  // namespace weft::checkpoint

#endif  // WEFT_COMMON_CHECKPOINT_READER_H_
