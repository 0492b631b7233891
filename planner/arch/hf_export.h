// What `weftctl ckpt export --format hf` needs to turn a transformer checkpoint into a Hugging
// Face model (model.safetensors + config.json), recorded by the coordinator in every checkpoint's
// index metadata: the client depends on proto and common only, so it cannot build the model to
// learn its layouts. Checkpoints store tensors in the shape the graph computes with; these keys
// say which parameters Hugging Face lays out otherwise (Parameter::file_shape: the same row-major
// elements in another shape) and what config.json holds.
//
//   "arch"       model.arch (gpt2, llama, ...)
//   "hf_config"  config.json, as one line of JSON: model_type, architectures and the
//                TransformerConfig keys of the arch under Hugging Face's names, plus the fixed
//                keys Weft's math implies (ArchDef::hf_config: gpt2 activation_function
//                gelu_new, llama hidden_act silu, ...), so that GPT2Config / LlamaConfig and
//                Weft's own `model.config_file` read it back (the client adds torch_dtype)
//   "hf_shapes"  JSON {name: [dims]}: the Hugging Face shape of each parameter whose graph shape
//                differs (gpt2 h.N.attn.c_attn.weight [C, 3C], stored [C, 3, H, D])
//
// A spec without model.arch (a layers model) gets no keys. Building the graph costs time linear
// in the layers, so the coordinator computes this once per job, when it plans it.
//
// E.g.
//   ASSIGN_OR_RETURN(HfExportMetadata m, HfExportMetadataOf(spec));
//   commit.metadata.insert(m.begin(), m.end());
#ifndef WEFT_PLANNER_ARCH_HF_EXPORT_H_
#define WEFT_PLANNER_ARCH_HF_EXPORT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/checkpoint/index.h"
#include "weft/v1/job.pb.h"

namespace weft::planner {

// Its keys: checkpoint::kHfArchKey, kHfConfigKey, kHfShapesKey (common/checkpoint/index.h).
using checkpoint::kHfArchKey;
using checkpoint::kHfConfigKey;
using checkpoint::kHfShapesKey;

using HfExportMetadata = std::map<std::string, std::string>;

// For a prepared spec (PrepareJobSpec); errors are the model builder's (INVALID_ARGUMENT naming
// the field).
absl::StatusOr<HfExportMetadata> HfExportMetadataOf(const v1::JobSpec& spec);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_ARCH_HF_EXPORT_H_
