// Sharded checkpoints with a metadata index (DESIGN.md "Checkpoints"). A checkpoint is
// <dir>/step-<N>/: one safetensors shard file per writing rank (rank-<R>.safetensors, tensor
// names carry the chunk's offsets, e.g. "fc0.weight@0,512", each chunk in its tensor's dtype)
// and index.json — format version, step, for each global tensor its dtype, global shape and
// chunks (offsets, lengths, file, byte range, crc32c), and a crc32c of the index itself.
// Loading needs no mesh: any box of any tensor is assembled from the chunks that intersect it,
// into a buffer of the caller's dtype.
//
// The library, one concern a file:
//   shard.h      ShardPiece, IndexedChunk, WriteShard: a rank's shard file.
//   directory.h  StagingDir, StepDir, CommitCheckpoint, FindLatest, ResolveStepDir: the folder
//                protocol (staging, commit, the latest pointer, retention).
//   index.h      Chunk, TensorEntry, Index, SerializeIndex, ParseIndex: index.json.
//   reader.h     CheckpointReader: reading boxes, verifying chunks.
//   crc32c.h     Crc32c, the checksum of chunks and of the index.
//   box_geometry.h  (internal) boxes, intersections, coverage, copying regions.
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
//   RETURN_IF_ERROR(reader.ReadBox("fc0.weight", offsets, lengths, v1::F32, buffer));
#ifndef WEFT_COMMON_CHECKPOINT_CHECKPOINT_H_
#define WEFT_COMMON_CHECKPOINT_CHECKPOINT_H_

#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/directory.h"
#include "common/checkpoint/index.h"
#include "common/checkpoint/reader.h"
#include "common/checkpoint/shard.h"

#endif  // WEFT_COMMON_CHECKPOINT_CHECKPOINT_H_
