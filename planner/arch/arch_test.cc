// The architecture table (arch.h): lookups by name, an unknown name an error naming the known
// ones wherever the planner meets model.arch, the planner's table and common/jobspec's config
// table naming the same architectures, and every Megatron rule naming parameters of its graph.
#include "planner/arch/arch.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/transformer_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/arch/hf_export.h"
#include "planner/arch/transformer.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using ::testing::HasSubstr;

// A 2-block model of `arch`, 8 wide with 4 heads (2 kv heads where the arch has them).
v1::JobSpec TinySpec(const std::string& arch) {
  if (arch == "gpt2") return testing::Gpt2Spec();
  v1::JobSpec spec = testing::TokenSpec(arch);
  v1::TransformerConfig* c = spec.mutable_model()->mutable_config();
  c->set_vocab_size(16);
  c->set_hidden_size(8);
  c->set_intermediate_size(12);
  c->set_num_hidden_layers(2);
  c->set_num_attention_heads(4);
  c->set_num_key_value_heads(2);
  c->set_rms_norm_eps(1e-6);
  c->set_rope_theta(10000);
  c->set_max_position_embeddings(8);
  c->set_tie_word_embeddings(false);
  return spec;
}

TEST(ArchTest, FindsEveryEntryByName) {
  for (const ArchDef* arch : ArchTable()) {
    absl::StatusOr<const ArchDef*> found = FindArch(arch->name);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(*found, arch);
  }
}

TEST(ArchTest, AnUnknownArchNamesTheKnownOnes) {
  absl::StatusOr<const ArchDef*> found = FindArch("mistral");
  ASSERT_FALSE(found.ok());
  EXPECT_EQ(found.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(found.status().message(), HasSubstr("model.arch"));
  EXPECT_THAT(found.status().message(), HasSubstr("\"mistral\""));
  EXPECT_THAT(found.status().message(), HasSubstr("known: gpt2, llama, qwen2"));

  // No silent fallback where the planner meets the name: the graph and the export metadata.
  v1::JobSpec spec = TinySpec("llama");
  spec.mutable_model()->set_arch("mistral");
  absl::StatusOr<Graph> g = BuildTransformerGraph(spec);
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("known: gpt2, llama, qwen2"));
  absl::StatusOr<HfExportMetadata> m = HfExportMetadataOf(spec);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("known: gpt2, llama, qwen2"));
}

// The config half of each architecture lives in common/jobspec (the spec reader needs it before
// any planning); the two tables must not drift apart.
TEST(ArchTest, TheConfigTableNamesTheSameArchitectures) {
  std::vector<std::string> names;
  for (const ArchDef* arch : ArchTable()) names.emplace_back(arch->name);
  EXPECT_EQ(absl::StrJoin(names, ", "), KnownArchs());
}

// A rule that names no parameter is a typo that would leave that parameter whole.
TEST(ArchTest, EveryMegatronRuleNamesAParameter) {
  for (const ArchDef* arch : ArchTable()) {
    SCOPED_TRACE(arch->name);
    absl::StatusOr<Graph> g = BuildTransformerGraph(TinySpec(std::string(arch->name)));
    ASSERT_TRUE(g.ok()) << g.status();
    for (const MegatronRule& rule : arch->megatron) {
      int matched = 0;
      for (const Parameter& p : g->params) {
        matched += absl::EndsWith(g->tensors[p.tensor].name, rule.suffix) ? 1 : 0;
      }
      EXPECT_GT(matched, 0) << rule.suffix;
    }
  }
}

}  // namespace
}  // namespace weft::planner
