// `weftctl ckpt`: a sharded checkpoint looked at without any daemon. inspect lists its tensors,
// chunks and files; verify reads every chunk and checks its crc32c; export writes one
// consolidated safetensors file that Hugging Face and PyTorch users load directly.
//
// E.g.
//   ASSIGN_OR_RETURN(std::string step_dir, ResolveCheckpoint("ckpt"));  // ckpt/step-300
//   ASSIGN_OR_RETURN(checkpoint::CheckpointReader reader,
//                    checkpoint::CheckpointReader::Open(step_dir));
//   std::cout << FormatCheckpointText(reader);
//   RETURN_IF_ERROR(ExportCheckpoint(reader, "model.safetensors"));
#ifndef WEFT_CLIENT_CKPT_H_
#define WEFT_CLIENT_CKPT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint/checkpoint.h"

namespace weft::client {

// DIR itself when it holds index.json (a step folder), else the newest committed checkpoint in
// DIR, found without removing anything (a save may be in progress beside us).
absl::StatusOr<std::string> ResolveCheckpoint(const std::string& dir);

// Step, metadata, per tensor its dtype, global shape, bytes and chunks (offsets, lengths, file,
// byte range, crc32c), then the files with their sizes and the totals.
std::string FormatCheckpointText(const checkpoint::CheckpointReader& reader);

// {"step_dir", "step", "format_version", "metadata": {...},
//  "tensors": [{"name", "dtype", "shape", "bytes",
//               "chunks": [{"offsets", "lengths", "file", "byte_range": [b, e], "bytes",
//                           "crc32c"}]}],
//  "files": [{"name", "bytes"}], "tensor_bytes", "file_bytes"}
std::string FormatCheckpointJson(const checkpoint::CheckpointReader& reader);

// Every problem found, one error each: tensors whose chunks do not cover them, chunks whose
// bytes fail their crc32c (naming tensor and file). Empty when the checkpoint is sound.
std::vector<absl::Status> VerifyCheckpoint(const checkpoint::CheckpointReader& reader,
                                           int64_t* bytes_checked);

// Writes every tensor whole, by its global name, as F32 into one safetensors file (metadata
// {"format": "pt", "weft_step": N}), one tensor in memory at a time, to a temporary file in
// the same folder that is fsynced and renamed onto out_path.
absl::Status ExportCheckpoint(const checkpoint::CheckpointReader& reader,
                              const std::string& out_path);

}  // namespace weft::client

#endif  // WEFT_CLIENT_CKPT_H_
