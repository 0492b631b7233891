// Shard files: what each writing rank puts into a checkpoint's staging folder. One safetensors
// file per rank, rank-<R>.safetensors, with one entry per chunk named by its tensor and offsets
// ("fc0.weight@0,512") in the chunk's real dtype, and format version and rank in __metadata__,
// so any safetensors reader can open a shard. WriteShard returns the chunks for the index.
//
// E.g.
//   std::vector<ShardPiece> pieces = {
//       {"fc0.weight", {8, 4}, {0, 2}, {8, 2}, weight_bf16, v1::BF16},
//       {"step_count", {1}, {0}, {1}, &count, v1::I64}};
//   ASSIGN_OR_RETURN(std::vector<IndexedChunk> chunks,
//                    WriteShard(StagingDir(dir, step), rank, pieces));
#ifndef WEFT_COMMON_CHECKPOINT_SHARD_H_
#define WEFT_COMMON_CHECKPOINT_SHARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint/index.h"
#include "common/safetensors.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/service.pb.h"

namespace weft::checkpoint {

// One piece of a global tensor that a rank writes.
struct ShardPiece {
  std::string name;
  std::vector<int64_t> global_shape;
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  const void* data = nullptr;  // prod(lengths) elements of dtype, row-major
  v1::DType dtype = v1::F32;
};

// A chunk together with the tensor it belongs to, as a rank reports it to the coordinator.
struct IndexedChunk {
  std::string tensor;
  std::vector<int64_t> global_shape;
  Chunk chunk;
  v1::DType dtype = v1::F32;  // of the tensor, as the shard stores it
};

// Writes <staging_dir>/rank-<rank>.safetensors (created with the folder if needed, fsynced) and
// returns its chunks with dtype, byte ranges and crc32c. Errors name the file and the tensor.
absl::StatusOr<std::vector<IndexedChunk>> WriteShard(const std::string& staging_dir, int rank,
                                                     const std::vector<ShardPiece>& pieces);

// A chunk as a CheckpointReport carries it from the worker to the coordinator, and back.
void ChunkToProto(const IndexedChunk& chunk, v1::CheckpointChunk* out);
IndexedChunk ChunkFromProto(const v1::CheckpointChunk& chunk);

namespace internal {

// The shard entry name of a chunk: "fc0.weight@0,512" (a scalar's is "name@").
std::string ShardEntryName(const std::string& tensor, const std::vector<int64_t>& offsets);

// The shard's entry for `chunk` of `tensor` stores it as the index does: in `dtype`, with the
// chunk's lengths as shape, at the chunk's byte range. DATA_LOSS naming the chunk, its entry and
// what differs (callers add the tensor and the file).
absl::Status CheckShardEntry(const SafetensorsFile& shard, const std::string& tensor,
                             v1::DType dtype, const Chunk& chunk);

}  // namespace internal
}  // namespace weft::checkpoint

#endif  // WEFT_COMMON_CHECKPOINT_SHARD_H_
