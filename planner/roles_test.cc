// Plan::RoleRanks: one rank per role, and every rank's Program is its role's but for where the
// rank sits, brute-forced over every rank of meshes with uneven shards, Partial(sum) values,
// the gradient norm's first members, ZeRO and a pipeline.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/planner.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::P;
using testing::R;
using testing::S;
using testing::SpecBuilder;

std::shared_ptr<const Plan> MustPlanJob(v1::JobSpec spec) {
  absl::StatusOr<std::shared_ptr<const Plan>> plan = testing::PlanWithDefaults(std::move(spec));
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : nullptr;
}

// What decides a rank's memory: the arena, each buffer's size, dtype, role and offset, and each
// instruction's operands and the scalars that differ between first members and the others.
std::string MemorySignature(const v1::Program& p) {
  std::string out = absl::StrCat("arena ", p.arena_bytes(), "\n");
  for (const v1::Buffer& b : p.buffers()) {
    absl::StrAppend(&out, b.name(), " [", absl::StrJoin(b.shape(), ","), "] ", b.dtype(), " ",
                    b.role(), " @", b.offset(), "\n");
  }
  for (const v1::Instruction& ins : p.instructions()) {
    absl::StrAppend(&out, ins.op(), " (", absl::StrJoin(ins.inputs(), ","), ") -> (",
                    absl::StrJoin(ins.outputs(), ","), ") scratch ", ins.scratch(), " scale ",
                    ins.scale(), " lr ", ins.lr(), "\n");
  }
  for (const v1::Instruction& ins : p.eval().instructions()) {
    absl::StrAppend(&out, "eval ", ins.op(), " (", absl::StrJoin(ins.inputs(), ","), ") -> (",
                    absl::StrJoin(ins.outputs(), ","), ")\n");
  }
  return out;
}

// The smallest rank of `rank`'s role, by the rule RoleRanks states (the test's own reading).
int RoleOf(const Mesh& mesh, int pipeline_dim, int rank) {
  std::vector<int64_t> coord = mesh.Coordinate(rank);
  for (int d = 0; d < mesh.ndim(); ++d) {
    if (d == pipeline_dim) continue;
    const int64_t n = mesh.dim_size(d);
    if (coord[d] != 0 && coord[d] != n - 1) coord[d] = 1;
  }
  return mesh.RankAt(coord);
}

// Every rank's Program has its role's memory, and RoleRanks lists exactly the roles' smallest
// ranks, ascending.
void ExpectEveryRankIsItsRoles(const v1::JobSpec& spec) {
  std::shared_ptr<const Plan> plan = MustPlanJob(spec);
  ASSERT_NE(plan, nullptr);
  const Mesh& mesh = plan->planned().graph.mesh;
  const int pipeline_dim = plan->planned().graph.pipeline.dim;
  std::vector<int> expected;
  for (int r = 0; r < plan->world_size(); ++r) {
    if (RoleOf(mesh, pipeline_dim, r) == r) expected.push_back(r);
  }
  EXPECT_EQ(plan->RoleRanks(), expected);
  for (int r = 0; r < plan->world_size(); ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    absl::StatusOr<v1::Program> mine = plan->Program(r);
    absl::StatusOr<v1::Program> roles = plan->Program(RoleOf(mesh, pipeline_dim, r));
    ASSERT_TRUE(mine.ok() && roles.ok()) << mine.status() << roles.status();
    EXPECT_EQ(MemorySignature(*mine), MemorySignature(*roles));
  }
}

TEST(RoleRanksTest, OneRankPerFirstMiddleAndLastMemberOfEachDim) {
  std::shared_ptr<const Plan> plan =
      MustPlanJob(SpecBuilder({4, 3, 2}, {"a", "b", "c"}).Batch(8, {6}, {2}).Linear("fc0", 6, 2)
                      .Spec());
  ASSERT_NE(plan, nullptr);
  // a: 0, 1, 3; b: 0, 1, 2; c: 0, 1 (row-major, 6 ranks per a).
  EXPECT_EQ(plan->RoleRanks(), (std::vector<int>{0,  1,  2,  3,  4,  5,  6,  7,  8,
                                                 9,  10, 11, 18, 19, 20, 21, 22, 23}));
  plan = MustPlanJob(SpecBuilder({1}, {"dp"}).Batch(8, {6}, {2}).Linear("fc0", 6, 2).Spec());
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->RoleRanks(), (std::vector<int>{0}));
}

// Uneven shards (batch 11 over dp 5, hidden 16 over mp 3), a Partial(sum) weight, AdamW and
// clipping (the norm counts a replicated gradient on first members only).
TEST(RoleRanksTest, UnevenShardsPartialValuesAndTheNorm) {
  v1::JobSpec spec = SpecBuilder({5, 3}, {"dp", "mp"})
                         .Batch(11, {6}, {6})
                         .Linear("fc0", 6, 16)
                         .Place("weight", {R, S(1)})
                         .Place("bias", {R, S(0)})
                         .Act("a", "gelu")
                         .Linear("fc1", 16, 6)
                         .Place("weight", {R, S(0)})
                         .Linear("fc2", 6, 6, /*bias=*/false)
                         .Place("weight", {R, P})
                         .DataPlacements({S(0), R})
                         .AdamW()
                         .Spec();
  spec.mutable_optimizer()->set_clip_grad_norm(1.0);
  ExpectEveryRankIsItsRoles(spec);
}

// ZeRO-3 over an uneven dp: parameters, gradients and states sharded, gathered and scattered.
TEST(RoleRanksTest, ZeroOverAnUnevenDp) {
  v1::JobSpec spec = SpecBuilder({5, 2}, {"dp", "mp"})
                         .Batch(10, {7}, {7})
                         .Linear("fc0", 7, 9)
                         .Act("a", "relu")
                         .Linear("fc1", 9, 7)
                         .AdamW()
                         .Spec();
  spec.mutable_sharding()->set_dim("dp");
  spec.mutable_sharding()->set_level(3);
  ExpectEveryRankIsItsRoles(spec);
}

// A pipeline of 3 stages (each its own role) between dp 4 and an mp of 3 from parallelize, 3
// micro-batches.
TEST(RoleRanksTest, EveryPipelineStageIsARole) {
  SpecBuilder b({4, 3, 3}, {"dp", "pp", "mp"});
  b.Batch(12, {12}, {12}).AdamW();
  for (int i = 0; i < 6; ++i) {
    b.Linear(absl::StrCat("fc", i), 12, 12);
    if (i < 5) b.Act(absl::StrCat("act", i), "relu");
  }
  v1::JobSpec spec = b.Spec();
  spec.mutable_pipeline()->set_dim("pp");
  spec.mutable_pipeline()->set_schedule("1F1B");
  spec.mutable_pipeline()->set_micro_batches(3);
  v1::ParallelizeConfig& mp = (*spec.mutable_parallelize())["mp"];
  mp.set_dim("mp");
  for (int i = 0; i < 6; ++i) {
    (*mp.mutable_plan())[absl::StrCat("fc", i)] =
        i % 2 == 0 ? "ColWiseParallel" : "RowWiseParallel";
  }
  ExpectEveryRankIsItsRoles(spec);
}

// GPT-2 with Megatron's plan on mp and its evaluation, over dp 3 (the batch Shard(0)).
TEST(RoleRanksTest, Gpt2WithMegatronAndEvaluation) {
  v1::JobSpec spec = testing::Gpt2Spec();
  spec.mutable_mesh()->clear_shape();
  spec.mutable_mesh()->clear_dim_names();
  for (auto [size, name] : {std::pair<int, const char*>{3, "dp"}, {2, "mp"}}) {
    spec.mutable_mesh()->add_shape(size);
    spec.mutable_mesh()->add_dim_names(name);
  }
  spec.mutable_data()->set_batch_size(6);
  spec.mutable_data()->clear_placements();
  *spec.mutable_data()->add_placements() = S(0).ToProto();
  *spec.mutable_data()->add_placements() = R.ToProto();
  v1::ParallelizeConfig& mp = (*spec.mutable_parallelize())["mp"];
  mp.set_dim("mp");
  mp.set_preset("megatron");
  *spec.mutable_eval()->mutable_data() = spec.data();
  spec.mutable_eval()->set_every(1);
  spec.mutable_eval()->set_batches(1);
  ExpectEveryRankIsItsRoles(spec);
}

}  // namespace
}  // namespace weft::planner
