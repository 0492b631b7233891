#include "planner/arch/arch.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft::planner {

// The entries, one file each.
const ArchDef& Gpt2Arch();
const ArchDef& LlamaArch();
const ArchDef& Qwen2Arch();

const std::vector<const ArchDef*>& ArchTable() {
  static const auto* table = new std::vector<const ArchDef*>{&Gpt2Arch(), &LlamaArch(),
                                                                    &Qwen2Arch()};
  return *table;
}

absl::StatusOr<const ArchDef*> FindArch(absl::string_view name) {
  std::vector<absl::string_view> known;
  for (const ArchDef* arch : ArchTable()) {
    if (arch->name == name) return arch;
    known.push_back(arch->name);
  }
  return absl::InvalidArgumentError(absl::StrCat("model.arch: unknown architecture \"", name,
                                                 "\"; known: ", absl::StrJoin(known, ", ")));
}

Placement MegatronPlacement(absl::Span<const MegatronRule> plan, absl::string_view name) {
  for (const MegatronRule& rule : plan) {
    if (absl::EndsWith(name, rule.suffix)) return Placement::Shard(rule.axis);
  }
  return Placement::Replicate();
}

}  // namespace weft::planner
