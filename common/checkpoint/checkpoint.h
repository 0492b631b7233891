// Sharded checkpoints with a metadata index (DESIGN.md "Checkpoints"). A checkpoint is
// <dir>/step-<N>/: one safetensors shard file per writing rank (rank-<R>.safetensors, tensor
// names carry the chunk's offsets, e.g. "fc0.weight@0,512") and index.json — format version,
// step, for each global tensor its dtype, global shape and chunks (offsets, lengths, file, byte
// range, crc32c), and a crc32c of the index itself. Loading needs no mesh: any box of any tensor
// is assembled from the chunks that intersect it.
//
// Commit protocol: shards are written into <dir>/.tmp-step-<N>/ and fsynced; CommitCheckpoint
// writes index.json last, fsyncs it and the folder, renames the folder to step-<N>, fsyncs
// <dir>, then replaces <dir>/latest by write-then-rename, and only then removes checkpoints
// beyond `keep`. A reader never sees a half checkpoint: a folder without a valid index is never
// loaded, and leftover .tmp-step-* folders are ignored (and removed by FindLatest).
//
// E.g.
//   // On each writing rank:
//   ASSIGN_OR_RETURN(std::vector<IndexedChunk> chunks,
//                    WriteShard(StagingDir(dir, step), rank, pieces));
//   // On the coordinator, once every writing rank reported its chunks:
//   RETURN_IF_ERROR(CommitCheckpoint(dir, step, all_chunks, /*keep=*/3));
//   // Anywhere, on any mesh:
//   ASSIGN_OR_RETURN(std::string latest, FindLatest(dir));
//   ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(latest));
//   RETURN_IF_ERROR(reader.ReadBox("fc0.weight", offsets, lengths, buffer));
#ifndef WEFT_COMMON_CHECKPOINT_CHECKPOINT_H_
#define WEFT_COMMON_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_io.h"
#include "common/safetensors.h"

namespace weft::checkpoint {

inline constexpr int kFormatVersion = 1;

struct Chunk {
  std::vector<int64_t> offsets;  // into the global tensor
  std::vector<int64_t> lengths;  // a zero length is allowed (an empty shard) and stored as such
  std::string file;              // relative to the step folder, e.g. rank-3.safetensors
  int64_t begin = 0;             // byte range in `file` (absolute file offsets)
  int64_t end = 0;
  uint32_t crc32c = 0;           // of the bytes [begin, end)
};

struct TensorEntry {
  std::string dtype = "F32";
  std::vector<int64_t> global_shape;
  std::vector<Chunk> chunks;
};

struct Index {
  int format_version = kFormatVersion;
  int64_t step = 0;
  std::map<std::string, TensorEntry> tensors;
  std::map<std::string, std::string> metadata;  // free-form, e.g. job name
};

// One piece of a global tensor that a rank writes.
struct ShardPiece {
  std::string name;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  const float* data = nullptr;  // prod(lengths) floats, row-major
};

// A chunk together with the tensor it belongs to, as a rank reports it to the coordinator.
struct IndexedChunk {
  std::string tensor;
  std::vector<int64_t> global_shape;
  Chunk chunk;
};

// <dir>/.tmp-step-<N>
std::string StagingDir(const std::string& dir, int64_t step);
// <dir>/step-<N>
std::string StepDir(const std::string& dir, int64_t step);

// Writes <staging_dir>/rank-<rank>.safetensors (created with the folder if needed, fsynced) and
// returns its chunks with byte ranges and crc32c. `__metadata__` carries format version and rank.
absl::StatusOr<std::vector<IndexedChunk>> WriteShard(const std::string& staging_dir, int rank,
                                                     const std::vector<ShardPiece>& pieces);

// Builds the index from every rank's chunks (errors name a tensor whose chunks disagree on the
// global shape or do not cover it exactly), then runs the commit protocol above.
absl::Status CommitCheckpoint(const std::string& dir, int64_t step,
                              const std::vector<IndexedChunk>& chunks, int keep,
                              const std::map<std::string, std::string>& metadata = {});

// The newest committed checkpoint folder in dir (by <dir>/latest if it names a valid one, else
// the highest step-<N> with a valid index). NOT_FOUND when there is none. Removes leftover
// staging folders.
absl::StatusOr<std::string> FindLatest(const std::string& dir);

// FindLatest without removing anything, for readers that may run beside a save in progress
// (weftctl ckpt): staging folders are only ignored.
absl::StatusOr<std::string> FindLatestReadOnly(const std::string& dir);

// `dir` itself when it holds index.json (a step folder), else FindLatestReadOnly(dir): what a
// user means by naming a checkpoint (weftctl ckpt, a spec's init_from).
absl::StatusOr<std::string> ResolveStepDir(const std::string& dir);

class CheckpointReader {
 public:
  // Reads and checks index.json (its own crc32c, format version, chunk files present).
  static absl::StatusOr<CheckpointReader> Open(const std::string& step_dir);

  const Index& index() const { return index_; }
  const std::string& step_dir() const { return step_dir_; }

  // Fills out (prod(lengths) floats) with the region [offsets, offsets+lengths) of tensor
  // `name`, from the chunks that intersect it. Each chunk read is checked against its crc32c
  // (a chunk is read whole to be verified). Errors name the tensor, the file and the problem:
  // unknown tensor, shape mismatch, missing region (the covered volume does not add up to the
  // box), checksum mismatch, truncated file.
  absl::Status ReadBox(const std::string& name, const std::vector<int64_t>& offsets,
                       const std::vector<int64_t>& lengths, float* out) const;

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
  std::string step_dir_;
  Index index_;
  std::map<std::string, ReadOnlyFile> files_;  // by Chunk::file, opened once by Open
};

// index.json text <-> Index (the text's own crc32c is checked on parse). The text is one JSON
// object {"format_version", "step", "metadata": {k: v}, "tensors": {name: {"dtype", "shape",
// "chunks": [{"offsets", "lengths", "file", "byte_range": [begin, end], "crc32c"}]}},
// "checksum"}. "checksum" is the crc32c of the object without the "checksum" member, serialized
// compactly with keys sorted and strings as UTF-8 (nlohmann's dump(); in Python
// json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)), so the file may be
// laid out with any whitespace. ParseIndex also checks the structure: version, F32 dtype, chunk
// ranks and bounds, byte ranges of 4 bytes per element, no overlapping chunks.
std::string SerializeIndex(const Index& index);
absl::StatusOr<Index> ParseIndex(const std::string& text, const std::string& path);

// CRC-32C (Castagnoli) of data, continuing from crc (0 to start).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace weft::checkpoint

#endif  // WEFT_COMMON_CHECKPOINT_CHECKPOINT_H_
