// `weftctl ckpt`: a sharded checkpoint looked at without any daemon. inspect lists its tensors,
// chunks and files; verify reads every chunk and checks its crc32c
// (CheckpointReader::VerifyEach); export writes one consolidated safetensors file that Hugging
// Face and PyTorch users load directly.
//
// E.g.
//   ASSIGN_OR_RETURN(std::string step_dir, checkpoint::ResolveStepDir("ckpt"));  // ckpt/step-300
//   ASSIGN_OR_RETURN(checkpoint::CheckpointReader reader,
//                    checkpoint::CheckpointReader::Open(step_dir));
//   std::cout << FormatCheckpointText(reader);
//   RETURN_IF_ERROR(ExportCheckpoint(reader, "model.safetensors"));
#ifndef WEFT_CLIENT_CKPT_H_
#define WEFT_CLIENT_CKPT_H_

#include <string>

#include "absl/status/status.h"
#include "common/checkpoint/checkpoint.h"

namespace weft::client {

// Step, metadata, per tensor its dtype (F32, BF16, I32, I64), global shape, bytes and chunks
// (offsets, lengths, file, byte range, crc32c), then the files with their sizes and the totals.
std::string FormatCheckpointText(const checkpoint::CheckpointReader& reader);

// {"step_dir", "step", "format_version", "metadata": {...},
//  "tensors": [{"name", "dtype", "shape", "bytes",
//               "chunks": [{"offsets", "lengths", "file", "byte_range": [b, e], "bytes",
//                           "crc32c"}]}],
//  "files": [{"name", "bytes"}], "tensor_bytes", "file_bytes"}
std::string FormatCheckpointJson(const checkpoint::CheckpointReader& reader);

// Writes every tensor whole, by its global name and in its dtype, into one safetensors file
// (metadata {"format": "pt", "weft_step": N}), one tensor in memory at a time, to a temporary
// file in the same folder that is fsynced and renamed onto out_path.
absl::Status ExportCheckpoint(const checkpoint::CheckpointReader& reader,
                              const std::string& out_path);

}  // namespace weft::client

#endif  // WEFT_CLIENT_CKPT_H_
