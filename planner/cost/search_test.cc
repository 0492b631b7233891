// The search: every candidate it ranks was planned and fits, a memory limit moves the pick to a
// plan that fits (and none fitting is an error naming the smallest peak), arithmetic refusals
// name their reason, the spec's own strategy is priced as the same enumerated strategy is, the
// same profile gives the same ranking, and the report shows the pick as spec keys.
#include "planner/cost/search.h"

#include <set>
#include <string>

#include "absl/strings/str_format.h"
#include "common/jobspec/yaml.h"
#include "common/kernel_scratch.h"
#include "gtest/gtest.h"
#include "planner/cost/cost_testing.h"
#include "planner/submit/submit.h"

namespace weft::planner::cost {
namespace {

constexpr char kMlp[] = R"(
name: mlp
mesh: {shape: [4], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 64, out_features: 256}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 256, out_features: 64}
    - {name: act1, type: relu}
    - {name: fc2, type: linear, in_features: 64, out_features: 256}
    - {name: act2, type: relu}
    - {name: fc3, type: linear, in_features: 256, out_features: 64}
  loss: mse
data: {source: synthetic, sample_shape: [64], label_shape: [64], num_samples: 64,
       batch_size: 16, placements: {dp: Shard(0)}}
optimizer: {type: adamw, lr: 1.0e-3}
train: {steps: 2, seed: 1}
)";

v1::CostProfile Profile() {
  v1::CostProfile p;
  p.set_kind("cpu");
  p.set_overlap_slowdown(1.1);
  AddKernel(&p, v1::KernelCost::MATMUL, 1e-5, 1e-10, 1.2);
  AddKernel(&p, v1::KernelCost::ATTENTION, 1e-5, 2e-10, 1.2);
  AddKernel(&p, v1::KernelCost::MEMORY, 1e-6, 1e-10, 1.2);
  AddLink(&p, v1::Instruction::ALL_REDUCE, v1::LinkCost::INTRA_HOST, 1e-4, 1e-9, 1.2);
  AddLink(&p, v1::Instruction::SEND, v1::LinkCost::INTRA_HOST, 5e-5, 1e-9, 1.2);
  AddLink(&p, v1::Instruction::ALL_REDUCE, v1::LinkCost::INTER_HOST, 1e-3, 1e-8, 1.2);
  AddLink(&p, v1::Instruction::SEND, v1::LinkCost::INTER_HOST, 5e-4, 1e-8, 1.2);
  return p;
}

v1::JobSpec Spec(const char* yaml = kMlp) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml, "/tmp");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

SearchOptions FourRanksOnTwoHosts() {
  SearchOptions o;
  o.ranks = 4;
  o.host_of_slot = {"a", "b", "a", "b"};  // registered alternately, as in the netns test bed
  return o;
}

// The planned peak of the strategy's spec, planned here again.
int64_t PlannedPeak(const v1::JobSpec& spec, const Strategy& s) {
  absl::StatusOr<v1::JobSpec> applied = ApplyStrategy(spec, s);
  EXPECT_TRUE(applied.ok()) << applied.status();
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PrepareAndPlan(&*applied, "t", 0);
  EXPECT_TRUE(plan.ok()) << plan.status();
  int64_t peak = 0;
  for (int r = 0; r < (*plan)->world_size(); ++r)
    peak = std::max(peak, PlannedPeakBytes(*(*plan)->Program(r)));
  return peak;
}

TEST(SearchTest, EveryRankedPlanWasPlannedAndItsPeakIsEveryRanksExactPeak) {
  const v1::JobSpec spec = Spec();
  absl::StatusOr<SearchResult> r = SearchStrategies(spec, FourRanksOnTwoHosts(), Profile());
  ASSERT_TRUE(r.ok()) << r.status();
  // Meshes of 4: dp4, mp4, dp2 x mp2, pp2 x dp2, pp2 x mp2, pp4, each with its options.
  std::set<std::string> meshes;
  for (const Candidate& c : r->ranked) {
    meshes.insert(absl::StrCat(c.strategy.pp, "x", c.strategy.dp, "x", c.strategy.mp));
    ASSERT_TRUE(c.prediction.has_value());
    EXPECT_GT(c.prediction->step_s, 0);
  }
  EXPECT_EQ(meshes, (std::set<std::string>{"1x4x1", "1x1x4", "1x2x2", "2x2x1", "2x1x2", "4x1x1"}));
  for (size_t i = 1; i < r->ranked.size(); ++i) {
    EXPECT_LE(r->ranked[i - 1].prediction->step_s, r->ranked[i].prediction->step_s);
  }
  // The peak the search compared is the largest over every rank, not only the role ranks.
  for (size_t i : {size_t{0}, r->ranked.size() / 2, r->ranked.size() - 1}) {
    EXPECT_EQ(r->ranked[i].peak_bytes, PlannedPeak(spec, r->ranked[i].strategy))
        << r->ranked[i].strategy.Label();
  }
  // The pick's hosts: a placement of 4 ranks on the 2 hosts, 2 each.
  ASSERT_EQ(r->host_of_rank.size(), 4u);
  EXPECT_EQ(std::count(r->host_of_rank.begin(), r->host_of_rank.end(), "a"), 2);
}

TEST(SearchTest, AMemoryLimitExcludesWhatDoesNotFitAndThePickFits) {
  const v1::JobSpec spec = Spec();
  absl::StatusOr<SearchResult> free = SearchStrategies(spec, FourRanksOnTwoHosts(), Profile());
  ASSERT_TRUE(free.ok()) << free.status();
  const Candidate& fastest = free->ranked.front();
  SearchOptions limited = FourRanksOnTwoHosts();
  limited.memory_bytes = fastest.peak_bytes - 1;
  absl::StatusOr<SearchResult> r = SearchStrategies(spec, limited, Profile());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->ranked.front().strategy.Label(), fastest.strategy.Label());
  for (const Candidate& c : r->ranked) EXPECT_LE(c.peak_bytes, limited.memory_bytes);
  ASSERT_FALSE(r->over_memory.empty());
  for (const Candidate& c : r->over_memory) EXPECT_GT(c.peak_bytes, limited.memory_bytes);
  EXPECT_EQ(r->ranked.size() + r->over_memory.size(), free->ranked.size());
  // Below every plan's peak: an error naming the smallest.
  int64_t smallest = free->ranked.front().peak_bytes;
  for (const Candidate& c : free->ranked) smallest = std::min(smallest, c.peak_bytes);
  limited.memory_bytes = smallest - 1;
  absl::StatusOr<SearchResult> none = SearchStrategies(spec, limited, Profile());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("smallest planned peak"), std::string::npos)
      << none.status();
}

TEST(SearchTest, TheSpecsOwnStrategyIsPricedAsTheSameEnumeratedOne) {
  const v1::JobSpec spec = Spec();  // mesh [4] dp, batch Shard(0): dp4 as written
  absl::StatusOr<SearchResult> r = SearchStrategies(spec, FourRanksOnTwoHosts(), Profile());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->given.has_value());
  const Candidate* dp4 = nullptr;
  for (const Candidate& c : r->ranked) {
    if (c.strategy.Label() == "dp4") dp4 = &c;
  }
  ASSERT_NE(dp4, nullptr);
  ASSERT_TRUE(r->given->prediction.has_value());
  EXPECT_DOUBLE_EQ(r->given->prediction->step_s, dp4->prediction->step_s);
  EXPECT_EQ(r->given->peak_bytes, dp4->peak_bytes);
  const std::string text = FormatSearch(*r);
  EXPECT_NE(text.find("the spec's own strategy: "), std::string::npos) << text;
}

TEST(SearchTest, TheSameProfileGivesTheSameRankingAndTheReportShowsThePickAsSpecKeys) {
  const v1::JobSpec spec = Spec();
  // On one thread and on three: candidates are planned in a different order and interleaved,
  // and read back in the enumeration's.
  SearchOptions one = FourRanksOnTwoHosts(), three = FourRanksOnTwoHosts();
  one.threads = 1;
  three.threads = 3;
  absl::StatusOr<SearchResult> a = SearchStrategies(spec, one, Profile());
  absl::StatusOr<SearchResult> b = SearchStrategies(spec, three, Profile());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->ranked.size(), b->ranked.size());
  for (size_t i = 0; i < a->ranked.size(); ++i) {
    EXPECT_EQ(a->ranked[i].strategy.Label(), b->ranked[i].strategy.Label());
    EXPECT_EQ(a->ranked[i].prediction->step_s, b->ranked[i].prediction->step_s);
    EXPECT_EQ(a->ranked[i].peak_bytes, b->ranked[i].peak_bytes);
  }
  ASSERT_EQ(a->over_memory.size(), b->over_memory.size());
  ASSERT_EQ(a->refused.size(), b->refused.size());
  for (size_t i = 0; i < a->refused.size(); ++i) {
    EXPECT_EQ(a->refused[i].strategy.Label(), b->refused[i].strategy.Label());
    EXPECT_EQ(a->refused[i].refused, b->refused[i].refused);
  }
  EXPECT_EQ(a->threads, 1);
  EXPECT_EQ(b->threads, 3);
  EXPECT_GT(a->search_s, 0);
  const std::string text = FormatSearch(*a);
  EXPECT_NE(text.find(absl::StrFormat("searched in %.1f s on 1 thread\n", a->search_s)),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("chosen: " + a->ranked.front().strategy.Label()), std::string::npos);
  EXPECT_NE(text.find("    mesh: {shape: ["), std::string::npos) << text;
  EXPECT_NE(text.find("runners-up:"), std::string::npos) << text;
}

TEST(SearchTest, ArithmeticRefusalsNameTheirReason) {
  v1::JobSpec spec = Spec();
  spec.mutable_data()->set_batch_size(6);  // 4 ranks of data parallelism cannot split 6
  absl::StatusOr<SearchResult> r = SearchStrategies(spec, FourRanksOnTwoHosts(), Profile());
  ASSERT_TRUE(r.ok()) << r.status();
  bool named = false;
  for (const Candidate& c : r->refused) {
    if (c.strategy.dp == 4) {
      EXPECT_NE(c.refused.find("data.batch_size 6"), std::string::npos) << c.refused;
      named = true;
    }
  }
  EXPECT_TRUE(named);
  for (const Candidate& c : r->ranked) EXPECT_NE(c.strategy.dp, 4);
  SearchOptions few = FourRanksOnTwoHosts();
  few.host_of_slot = {"a", "b"};
  EXPECT_EQ(SearchStrategies(spec, few, Profile()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weft::planner::cost
