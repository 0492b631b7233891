// `weftctl ckpt`: a sharded checkpoint looked at without any daemon. inspect lists its tensors,
// chunks and files; verify reads every chunk and checks its crc32c
// (CheckpointReader::VerifyEach); export writes one consolidated safetensors file that Hugging
// Face and PyTorch users load directly: the parameters (and, when asked, the optimizer states)
// under Weft's names, or a transformer as a Hugging Face model (safetensors + config.json).
//
// E.g.
//   ASSIGN_OR_RETURN(std::string step_dir, checkpoint::ResolveStepDir("ckpt"));  // ckpt/step-300
//   ASSIGN_OR_RETURN(checkpoint::CheckpointReader reader,
//                    checkpoint::CheckpointReader::Open(step_dir));
//   std::cout << FormatCheckpointText(reader);
//   ASSIGN_OR_RETURN(ExportSummary s, ExportCheckpoint(reader, "out/model.safetensors",
//                                                      {ExportOptions::Format::kHf}));
#ifndef WEFT_CLIENT_CKPT_H_
#define WEFT_CLIENT_CKPT_H_

#include <cstdint>
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

// What `weftctl ckpt export` writes.
struct ExportOptions {
  // weft: every tensor under its checkpoint name and shape. hf: a Hugging Face model of a
  // transformer job (model.arch gpt2 | llama): parameters only, in Hugging Face's layouts (the
  // index metadata "hf_shapes"), plus config.json (metadata "hf_config", with torch_dtype the
  // parameters' dtype) in the output's folder. The coordinator records that metadata at every
  // commit (planner/arch/hf_export.h); a checkpoint without it is an error naming it.
  enum class Format { kWeft, kHf };
  Format format = Format::kWeft;
  // weft: also the optimizer states ("fc0.weight/adamw.m", CheckpointStateName), which only
  // Weft's resume reads. hf never writes them.
  bool with_optimizer = false;
};

// What an export wrote, for its message.
struct ExportSummary {
  int64_t tensors = 0;
  int64_t optimizer_states_left_out = 0;
  std::string config_path;  // hf: the config.json written; else empty
};

// Writes the chosen tensors whole, in their dtypes, into one safetensors file (metadata
// {"format": "pt", "weft_step": N}), one tensor in memory at a time, to a temporary file in the
// same folder that is fsynced and renamed onto out_path. A damaged checkpoint (a chunk's crc32c,
// missing file, inconsistent metadata) writes nothing: hf's config.json is written only once every
// tensor has been read, just before the rename.
absl::StatusOr<ExportSummary> ExportCheckpoint(const checkpoint::CheckpointReader& reader,
                                               const std::string& out_path,
                                               const ExportOptions& options = {});

// Whether `name` is an optimizer state of the checkpoint: "<param>/<optimizer>.<state>" with
// <param> one of its tensors.
bool IsOptimizerState(const checkpoint::Index& index, const std::string& name);

}  // namespace weft::client

#endif  // WEFT_CLIENT_CKPT_H_
