// CheckFits checks one rank per role and decides as checking every rank would: the same
// refusals, naming the same rank, on a mesh whose ranks differ (uneven shards, Partial values,
// the gradient norm's first members); on a mesh of 16,384 ranks it emits a handful of Programs.
#include "coordinator/job_plan.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/jobspec/defaults.h"
#include "common/kernel_scratch.h"
#include "common/jobspec/parallelize.h"
#include "planner/test_util.h"

namespace weft::coordinator {
namespace {

using planner::testing::P;
using planner::testing::R;
using planner::testing::S;

// The planner's plan of `spec` with its defaults (no files are read); the test fails when it
// cannot be planned.
std::shared_ptr<const JobPlan> MustPlan(v1::JobSpec spec) {
  ApplyJobSpecDefaults(&spec);
  absl::Status parallelized = ApplyParallelize(&spec);
  EXPECT_TRUE(parallelized.ok()) << parallelized;
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanWithPlanner(spec, {});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : nullptr;
}

// `plan` seen through JobPlan's defaults (every rank its own role), counting the Programs it
// emits; or with the plan's roles when `roles`.
class Counted final : public JobPlan {
 public:
  Counted(std::shared_ptr<const JobPlan> plan, bool roles)
      : plan_(std::move(plan)), roles_(roles) {}
  int world_size() const override { return plan_->world_size(); }
  absl::StatusOr<v1::Program> Program(int rank, const planner::Attempt& attempt,
                                      const planner::StopCheck& stop) const override {
    ++emitted_;
    return plan_->Program(rank, attempt, stop);
  }
  std::vector<int> RoleRanks() const override {
    return roles_ ? plan_->RoleRanks() : JobPlan::RoleRanks();
  }
  int emitted() const { return emitted_; }

 private:
  const std::shared_ptr<const JobPlan> plan_;
  const bool roles_;
  mutable std::atomic<int> emitted_{0};
};

// dp 5 x mp 3: a batch of 324 (the last dp rank holds 68 rows, the others 64), a hidden width
// of 1003 split 334, 334, 335 over mp, a Partial(sum) weight (held on mp's first member), AdamW
// and clipping: ranks with different arenas.
v1::JobSpec Uneven() {
  v1::JobSpec spec = planner::testing::SpecBuilder({5, 3}, {"dp", "mp"})
                         .Batch(324, {64}, {64})
                         .Linear("fc0", 64, 1003)
                         .Place("weight", {R, S(1)})
                         .Place("bias", {R, S(0)})
                         .Act("a", "gelu")
                         .Linear("fc1", 1003, 64)
                         .Place("weight", {R, S(0)})
                         .Linear("fc2", 64, 64, /*bias=*/false)
                         .Place("weight", {R, P})
                         .DataPlacements({S(0), R})
                         .AdamW()
                         .Spec();
  spec.mutable_optimizer()->set_clip_grad_norm(1.0);
  return spec;
}

TEST(CheckFitsTest, OneRankPerRoleDecidesAsEveryRankWould) {
  std::shared_ptr<const JobPlan> plan = MustPlan(Uneven());
  ASSERT_NE(plan, nullptr);
  Counted every(plan, /*roles=*/false), roles(plan, /*roles=*/true);
  // Every peak any rank has, and around each the memory sizes that decide differently.
  std::set<int64_t> arenas;
  for (int r = 0; r < plan->world_size(); ++r) {
    absl::StatusOr<v1::Program> p = plan->Program(r, planner::Attempt{}, {});
    ASSERT_TRUE(p.ok()) << p.status();
    arenas.insert(PlannedPeakBytes(*p));
  }
  ASSERT_GE(arenas.size(), 3u);  // the ranks differ
  std::set<std::string> refused_ranks;
  for (int64_t arena : arenas) {
    for (int64_t largest : {arena - 1, arena, arena + 1}) {
      SCOPED_TRACE(largest);
      const absl::Status all = CheckFits(every, "cpu", largest, "worker-7");
      const absl::Status some = CheckFits(roles, "cpu", largest, "worker-7");
      EXPECT_EQ(some, all);
      if (!all.ok()) {
        EXPECT_EQ(all.code(), absl::StatusCode::kResourceExhausted);
        refused_ranks.insert(std::string(all.message().substr(0, all.message().find(" needs"))));
      }
    }
  }
  // Refusals name ranks other than the first: the roles' smallest ranks are the ones named.
  EXPECT_GE(refused_ranks.size(), 2u);
  EXPECT_EQ(refused_ranks.count("rank 0"), 1u);
  // The 15 ranks' roles: dp's first, second and last member, times mp's three.
  EXPECT_EQ(roles.RoleRanks(), (std::vector<int>{0, 1, 2, 3, 4, 5, 12, 13, 14}));
}

// GPT-2 (Megatron's plan on mp) on dp 8192 x mp 2: checked by 6 Programs, accepted when the
// worker is large enough and refused naming rank 0 when it is not.
TEST(CheckFitsTest, AMeshOf16kRanksIsCheckedByOneProgramPerRole) {
  v1::JobSpec spec = planner::testing::Gpt2Spec();
  spec.mutable_mesh()->set_shape(0, 8192);
  spec.mutable_mesh()->add_shape(2);
  spec.mutable_mesh()->add_dim_names("mp");
  spec.mutable_data()->set_batch_size(8192);
  spec.mutable_data()->set_num_samples(8192);
  spec.mutable_data()->clear_placements();
  *spec.mutable_data()->add_placements() = S(0).ToProto();
  *spec.mutable_data()->add_placements() = R.ToProto();
  v1::ParallelizeConfig& mp = (*spec.mutable_parallelize())["mp"];
  mp.set_dim("mp");
  mp.set_preset("megatron");
  std::shared_ptr<const JobPlan> plan = MustPlan(spec);
  ASSERT_NE(plan, nullptr);
  ASSERT_EQ(plan->world_size(), 16384);
  Counted roles(plan, /*roles=*/true);
  EXPECT_TRUE(CheckFits(roles, "cpu", int64_t{1} << 40, "worker-1").ok());
  EXPECT_EQ(roles.emitted(), 6);  // dp's first, second and last member, times mp's two
  const absl::Status refused = CheckFits(roles, "cpu", 1024, "worker-1");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message().rfind("rank 0 needs ", 0), 0u) << refused;
  EXPECT_NE(refused.message().find(
                "1.0 KiB of the largest registered cpu worker (worker-1)"),
            std::string::npos)
      << refused;
}

TEST(CheckFitsTest, StopsWhenItsCheckSaysSo) {
  std::shared_ptr<const JobPlan> plan = MustPlan(Uneven());
  ASSERT_NE(plan, nullptr);
  const absl::Status s =
      CheckFits(*plan, "cpu", int64_t{1} << 40, "worker-1",
                [] { return absl::DeadlineExceededError("the call's deadline passed"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "planning the job: emitting rank 0: stopped while emitting its instructions: the "
            "call's deadline passed");
}

}  // namespace
}  // namespace weft::coordinator
