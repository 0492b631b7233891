// The transformer architectures (model.arch) as a table: one ArchDef per architecture, each in
// its own file (gpt2.cc, llama.cc, qwen2.cc), listed once in arch.cc. An entry holds what the
// planner does per architecture: the single-device graph with Hugging Face's names (build), the
// Megatron tensor-parallel plan by parameter name (megatron) and the config.json a Hugging Face
// export writes (hf_config). Its config half (keys, Hugging Face's defaults, value checks) is
// common/jobspec's ArchConfig of the same name, which the spec reader needs before any planning
// (transformer_config.h); planner/arch_test checks that the two tables name the same
// architectures.
//
// Adding an architecture: its file here, one line in arch.cc's table, one ArchConfig entry.
//
// E.g.
//   ASSIGN_OR_RETURN(const ArchDef* arch, FindArch("llama"));
//   Placement p = MegatronPlacement(arch->megatron, "model.layers.0.self_attn.q_proj.weight");
#ifndef WEFT_PLANNER_ARCH_ARCH_H_
#define WEFT_PLANNER_ARCH_ARCH_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json_fwd.hpp"
#include "planner/arch/transformer.h"
#include "common/dist_attr.h"
#include "weft/v1/job.pb.h"

namespace weft::planner {

// One row of a Megatron plan: a parameter whose Hugging Face name ends with `suffix` is split
// along `axis` of its graph shape (transformer.h) on the mp dim. The column-parallel layers
// split their output features (and their biases with them), the row-parallel ones their input
// features, the embeddings their vocabulary; a parameter no rule names is whole (Replicate).
struct MegatronRule {
  const char* suffix;
  int axis;
};

struct ArchDef {
  // model.arch; common/jobspec's ArchConfig of this name reads and checks its config.
  absl::string_view name;
  // The single-device model through `b` (Prepare first, Finish is the caller's).
  absl::Status (*build)(TransformerBuilder& b);
  // Where each parameter lives on the mp dim under `plan: megatron`.
  absl::Span<const MegatronRule> megatron;
  // config.json for a Hugging Face export: model_type, architectures and the config keys under
  // Hugging Face's names, plus the fixed keys Weft's math implies (hf_export.h).
  nlohmann::ordered_json (*hf_config)(const v1::TransformerConfig& c);
};

// The entry named `name`; an unknown name is INVALID_ARGUMENT naming model.arch and the known
// ones.
absl::StatusOr<const ArchDef*> FindArch(absl::string_view name);

// Every entry, in table order.
const std::vector<const ArchDef*>& ArchTable();

// The placement on the mp dim of parameter `name` under `plan` (Replicate where no rule names
// it).
Placement MegatronPlacement(absl::Span<const MegatronRule> plan, absl::string_view name);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_ARCH_ARCH_H_
