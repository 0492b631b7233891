// embedding: out[.., C] = table[ids[..], :], ids integer [..] (tokens or positions), table
// [V, C]. Per mesh dim, for any axis i of ids (of rank r):
//   ids[R],    table[R]    -> out[R]
//   ids[S(i)], table[R]    -> out[S(i)]        the batch (or sequence) split
//   ids[R],    table[S(0)] -> out[Partial(sum)]  vocabulary-parallel (Megatron): each rank looks
//                                              up the ids in its rows, zeros for the others
//   ids[R],    table[S(1)] -> out[S(r)]        the embedding dim split
//   ids[R],    table[P]    -> out[P]           linear in the table
// embedding_grad: dtable[V, C] = sum of dy rows at their ids:
//   ids[R],    dy[R]    -> dtable[R]  or  dtable[S(0)]  (each rank sums into its rows only)
//   ids[S(i)], dy[S(i)] -> dtable[Partial(sum)]   each rank's samples give a term
//   ids[R],    dy[S(r)] -> dtable[S(1)]
//   ids[R],    dy[P]    -> dtable[P]
// VJP: dtable = embedding_grad(ids, dy); ids get none.
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

absl::StatusOr<std::vector<DimStrategy>> EmbeddingStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 2 || sig.output_shapes.size() != 1 ||
      sig.input_shapes[1].size() != 2) {
    return absl::InvalidArgumentError("embedding takes ids and a table [V, C]");
  }
  const int r = static_cast<int>(sig.input_shapes[0].size());
  const Placement R = Placement::Replicate();
  std::vector<DimStrategy> out = {{{R, R}, {R}}};
  for (int i = 0; i < r; ++i) out.push_back({{Placement::Shard(i), R}, {Placement::Shard(i)}});
  out.push_back({{R, Placement::Shard(0)}, {Placement::Partial()}});
  out.push_back({{R, Placement::Shard(1)}, {Placement::Shard(r)}});
  for (const Placement& P : LinearPartials()) out.push_back({{R, P}, {P}});
  return out;
}

absl::StatusOr<std::vector<DimStrategy>> EmbeddingGradStrategies(const OpSignature& sig) {
  if (sig.input_shapes.size() != 2 || sig.output_shapes.size() != 1 ||
      sig.output_shapes[0].size() != 2) {
    return absl::InvalidArgumentError("embedding_grad takes ids and dy, gives a table [V, C]");
  }
  const int r = static_cast<int>(sig.input_shapes[0].size());
  const Placement R = Placement::Replicate();
  std::vector<DimStrategy> out = {{{R, R}, {R}}, {{R, R}, {Placement::Shard(0)}}};
  for (int i = 0; i < r; ++i) {
    out.push_back({{Placement::Shard(i), Placement::Shard(i)}, {Placement::Partial()}});
  }
  out.push_back({{R, Placement::Shard(r)}, {Placement::Shard(1)}});
  for (const Placement& P : LinearPartials()) out.push_back({{R, P}, {P}});
  return out;
}

absl::Status EmbeddingVjp(GradBuilder& b) {
  const int table = b.op().inputs[1];
  if (b.needs_grad(0)) b.set_no_gradient(0);  // integer ids
  if (b.needs_grad(1)) {
    ASSIGN_OR_RETURN(const int read, b.input(0));
    ASSIGN_OR_RETURN(int dtable, b.Emit("embedding_grad", {read, b.out_grad(0)}, table));
    b.set_input_grad(1, dtable);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RegisterEmbeddingRules(RuleRegistry* registry) {
  RETURN_IF_ERROR(registry->Register("embedding", {EmbeddingStrategies, EmbeddingVjp}));
  return registry->Register("embedding_grad", {EmbeddingGradStrategies, nullptr});
}

}  // namespace weft::planner
