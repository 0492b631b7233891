// The simulator against step times worked out by hand: compute priced by flops and bytes (bf16
// products by their own fit), a
// collective hidden behind compute or exposed, a pipeline transfer and the bubble it leaves, a
// collective across stages that waits for the later one, the link's scope by host, and a planned
// job whose flops are counted from its model here.
#include "planner/cost/simulate.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/jobspec/yaml.h"
#include "gtest/gtest.h"
#include "planner/cost/cost_testing.h"
#include "planner/submit/submit.h"

namespace weft::planner::cost {
namespace {

#define TEST_CONCAT_INNER_(a, b) a##b
#define TEST_CONCAT_(a, b) TEST_CONCAT_INNER_(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(TEST_CONCAT_(result_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  ASSERT_TRUE(tmp.ok()) << tmp.status();           \
  lhs = std::move(*tmp)

// matmul: 1 ms + 1 ns per flop; memory: 0.1 ms + 1 ns per byte; links: 2 ms + 10 ns per byte
// inside a host (any op), 5 ms + 100 ns across hosts (all-reduce only).
v1::CostProfile Profile(bool inter_host = true) {
  v1::CostProfile p;
  p.set_kind("cpu");
  p.set_overlap_slowdown(1.5);
  AddKernel(&p, v1::KernelCost::MATMUL, 1e-3, 1e-9, /*tail_ratio=*/2.0);
  AddKernel(&p, v1::KernelCost::MEMORY, 1e-4, 1e-9);
  AddLink(&p, v1::Instruction::ALL_REDUCE, v1::LinkCost::INTRA_HOST, 2e-3, 1e-8);
  AddLink(&p, v1::Instruction::SEND, v1::LinkCost::INTRA_HOST, 3e-3, 2e-8);
  if (inter_host) AddLink(&p, v1::Instruction::ALL_REDUCE, v1::LinkCost::INTER_HOST, 5e-3, 1e-7);
  return p;
}

// A program of rank `rank` on a mesh of `shape` (dims d0, d1, ...), one group per entry of
// `group_dims` (ids 0, 1, ...), buffers of f32 with the given shapes, no arena.
v1::Program Program(int rank, const std::vector<int64_t>& shape,
                    const std::vector<std::vector<int>>& group_dims,
                    const std::vector<std::vector<int64_t>>& buffers) {
  v1::Program p;
  p.set_rank(rank);
  for (size_t d = 0; d < shape.size(); ++d) {
    p.mutable_mesh()->add_shape(shape[d]);
    p.mutable_mesh()->add_dim_names("d" + std::to_string(d));
  }
  for (size_t g = 0; g < group_dims.size(); ++g) {
    v1::CommGroup* group = p.add_groups();
    group->set_id(static_cast<int>(g));
    for (int d : group_dims[g]) group->add_dims(d);
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    v1::Buffer* buffer = p.add_buffers();
    buffer->set_id(static_cast<int>(b));
    buffer->set_dtype(v1::F32);
    for (int64_t n : buffers[b]) buffer->add_shape(n);
  }
  return p;
}

v1::Instruction* Add(v1::Program* p, v1::Instruction::Op op, std::vector<int> in,
                     std::vector<int> out) {
  v1::Instruction* ins = p->add_instructions();
  ins->set_op(op);
  for (int id : in) ins->add_inputs(id);
  for (int id : out) ins->add_outputs(id);
  ins->set_phase(v1::Instruction::FORWARD);
  return ins;
}

TEST(SimulateTest, ComputeIsPricedByFlopsAndBytes) {
  // [4, 8] @ [8, 16] -> [4, 16]: 2 * 4 * 16 * 8 = 1024 flops; RELU of [4, 16] into another
  // buffer: 256 bytes read, 256 written.
  v1::Program p = Program(0, {1}, {}, {{4, 8}, {8, 16}, {4, 16}, {4, 16}});
  Add(&p, v1::Instruction::MATMUL, {0, 1}, {2});
  Add(&p, v1::Instruction::RELU, {2}, {3})->set_phase(v1::Instruction::OPTIMIZER);
  ASSERT_OK_AND_ASSIGN(StepPrediction s, SimulateStep({p}, {"a"}, Profile()));
  EXPECT_NEAR(s.split.compute_s, 1e-3 + 1024e-9, 1e-12);
  EXPECT_NEAR(s.split.optimizer_s, 1e-4 + 512e-9, 1e-12);
  EXPECT_NEAR(s.step_s, 1e-3 + 1024e-9 + 1e-4 + 512e-9, 1e-12);
  // The tail doubles the matmul (its fit's tail ratio is 2) and leaves the rest.
  EXPECT_NEAR(s.tail_step_s, 2 * (1e-3 + 1024e-9) + 1e-4 + 512e-9, 1e-12);
}

TEST(SimulateTest, UnderBf16PrecisionAMatmulTakesTheFitTimedSo) {
  // The same 1024-flop matmul; the profile also holds a fit timed under `precision: bf16`
  // (0.1 ms + 0.1 ns a flop), which prices it only in a program under that precision.
  v1::CostProfile profile = Profile();
  v1::KernelCost* bf16 = profile.add_kernels();
  bf16->set_kind(v1::KernelCost::MATMUL);
  bf16->set_dtype(v1::F32);
  bf16->set_precision("bf16");
  *bf16->mutable_fit() = Fit(1e-4, 1e-10);
  v1::Program p = Program(0, {1}, {}, {{4, 8}, {8, 16}, {4, 16}});
  Add(&p, v1::Instruction::MATMUL, {0, 1}, {2});
  ASSERT_OK_AND_ASSIGN(StepPrediction f32, SimulateStep({p}, {"a"}, profile));
  EXPECT_NEAR(f32.split.compute_s, 1e-3 + 1024e-9, 1e-12);
  p.set_precision("bf16");
  ASSERT_OK_AND_ASSIGN(StepPrediction products, SimulateStep({p}, {"a"}, profile));
  EXPECT_NEAR(products.split.compute_s, 1e-4 + 1024e-10, 1e-12);
  // Without such a fit, bf16 products are priced as f32 ones.
  ASSERT_OK_AND_ASSIGN(StepPrediction fallback, SimulateStep({p}, {"a"}, Profile()));
  EXPECT_NEAR(fallback.split.compute_s, 1e-3 + 1024e-9, 1e-12);
}

TEST(SimulateTest, AnAsyncCollectiveHidesBehindComputeThatDoesNotTouchIt) {
  // All-reduce of buffer 0 (1 MiB) over d0 (2 ranks, one host): 2 ms + 1 MiB * 10 ns.
  // Meanwhile a matmul of 2 * 64 * 64 * 64 flops on other buffers, slowed 1.5x; then a RELU
  // reads buffer 0 and must wait.
  v1::Program p = Program(0, {2}, {{0}}, {{262144}, {64, 64}, {64, 64}, {64, 64}, {262144}});
  Add(&p, v1::Instruction::ALL_REDUCE, {0}, {0})->set_group(0);
  Add(&p, v1::Instruction::MATMUL, {1, 2}, {3});
  Add(&p, v1::Instruction::RELU, {0}, {4});
  const double link = 2e-3 + 1048576 * 1e-8;  // bytes sent: 2 (K-1)/K of 1 MiB = 1 MiB
  const double matmul = 1.5 * (1e-3 + 2.0 * 64 * 64 * 64 * 1e-9);
  const double relu = 1e-4 + 2 * 1048576 * 1e-9;
  ASSERT_OK_AND_ASSIGN(StepPrediction s, SimulateStep({p}, {"a", "a"}, Profile()));
  ASSERT_GT(link, matmul);
  EXPECT_NEAR(s.step_s, link + relu, 1e-12);
  EXPECT_NEAR(s.split.exposed_comm_s, link - matmul, 1e-12);
  EXPECT_NEAR(s.split.compute_s, matmul + relu, 1e-12);
  EXPECT_NEAR(s.ranks[0].link_s, link, 1e-12);

  // Blocking (overlap: false), the same collective is all exposed and the matmul not slowed.
  p.set_blocking_collectives(true);
  ASSERT_OK_AND_ASSIGN(StepPrediction b, SimulateStep({p}, {"a", "a"}, Profile()));
  EXPECT_NEAR(b.step_s, link + matmul / 1.5 + relu, 1e-12);
  EXPECT_NEAR(b.split.exposed_comm_s, link, 1e-12);
}

TEST(SimulateTest, AcrossHostsTheInterHostLinkPricesTheGroup) {
  v1::Program p = Program(0, {2}, {{0}}, {{262144}});
  Add(&p, v1::Instruction::ALL_REDUCE, {0}, {0})->set_group(0);
  ASSERT_OK_AND_ASSIGN(StepPrediction s, SimulateStep({p}, {"a", "b"}, Profile()));
  EXPECT_NEAR(s.step_s, 5e-3 + 1048576 * 1e-7, 1e-12);
  // An all-gather the profile lacks takes its all-reduce fit, by the bytes it sends: (K-1)/K of
  // the 2 MiB it gathers, over 4 ranks (alpha for the ring's 3 steps, against 1 measured).
  v1::Program g = Program(1, {4}, {{0}}, {{131072}, {524288}});
  Add(&g, v1::Instruction::ALL_GATHER, {0}, {1})->set_group(0);
  ASSERT_OK_AND_ASSIGN(StepPrediction a, SimulateStep({g}, {"a", "a", "b", "b"}, Profile()));
  EXPECT_NEAR(a.step_s, 3 * 5e-3 + 2097152 * 3 / 4 * 1e-7, 1e-12);
  // Without an inter-host fit, the error names what is missing.
  absl::StatusOr<StepPrediction> missing = SimulateStep({p}, {"a", "b"}, Profile(false));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("INTER_HOST"), std::string::npos)
      << missing.status();
}

TEST(SimulateTest, CopiesOfAGroupCrossingHostsShareTheLink) {
  // Mesh [2, 2] on hosts a a b b: the groups over d0 ({0, 2} and {1, 3}) both cross between the
  // hosts at once, so each gets half of host a's link: twice the bytes' time. The groups over d1
  // ({0, 1}) stay inside host a.
  v1::Program p = Program(0, {2, 2}, {{0}, {1}}, {{262144}});
  Add(&p, v1::Instruction::ALL_REDUCE, {0}, {0})->set_group(0);
  ASSERT_OK_AND_ASSIGN(StepPrediction s, SimulateStep({p}, {"a", "a", "b", "b"}, Profile()));
  EXPECT_NEAR(s.step_s, 5e-3 + 2 * 1048576 * 1e-7, 1e-12);
  v1::Program q = Program(0, {2, 2}, {{0}, {1}}, {{262144}});
  Add(&q, v1::Instruction::ALL_REDUCE, {0}, {0})->set_group(1);
  ASSERT_OK_AND_ASSIGN(StepPrediction t, SimulateStep({q}, {"a", "a", "b", "b"}, Profile()));
  EXPECT_NEAR(t.step_s, 2e-3 + 1048576 * 1e-8, 1e-12);
  // One host per rank: each group is alone on its links.
  ASSERT_OK_AND_ASSIGN(StepPrediction u, SimulateStep({p}, {"a", "b", "c", "d"}, Profile()));
  EXPECT_NEAR(u.step_s, 5e-3 + 1048576 * 1e-7, 1e-12);
}

TEST(SimulateTest, APipelineTransferLeavesTheLaterStageABubble) {
  // Stage 0 computes (1 ms + 2 * 32^3 ns) and sends 4 KiB; stage 1 receives and computes.
  const std::vector<std::vector<int64_t>> buffers = {{32, 32}, {32, 32}, {32, 32}, {32, 32}};
  v1::Program s0 = Program(0, {2}, {{0}}, buffers);
  Add(&s0, v1::Instruction::MATMUL, {0, 1}, {2});
  v1::Instruction* send = Add(&s0, v1::Instruction::SEND, {2}, {});
  send->set_group(0);
  send->set_peer(1);
  send->set_tag(7);
  v1::Program s1 = Program(1, {2}, {{0}}, buffers);
  v1::Instruction* recv = Add(&s1, v1::Instruction::RECV, {}, {2});
  recv->set_group(0);
  recv->set_peer(0);
  recv->set_tag(7);
  Add(&s1, v1::Instruction::MATMUL, {2, 1}, {3});
  const double matmul = 1e-3 + 2.0 * 32 * 32 * 32 * 1e-9;
  const double transfer = 3e-3 + 4096 * 2e-8;
  ASSERT_OK_AND_ASSIGN(StepPrediction s, SimulateStep({s0, s1}, {"a", "a"}, Profile()));
  EXPECT_EQ(s.critical_rank, 1);
  EXPECT_NEAR(s.step_s, matmul + transfer + matmul, 1e-12);
  EXPECT_NEAR(s.ranks[0].step_s, matmul + transfer, 1e-12);
  EXPECT_NEAR(s.split.bubble_s, matmul, 1e-12);
  EXPECT_NEAR(s.split.exposed_comm_s, transfer, 1e-12);
  // The order of the programs does not matter.
  ASSERT_OK_AND_ASSIGN(StepPrediction r, SimulateStep({s1, s0}, {"a", "a"}, Profile()));
  EXPECT_NEAR(r.step_s, s.step_s, 1e-15);
}

TEST(SimulateTest, ACollectiveAcrossStagesStartsWhenTheLastMemberReachesIt) {
  // Both ranks all-reduce a scalar over d0 in place (blocking); rank 1 computes a matmul first.
  const std::vector<std::vector<int64_t>> buffers = {{1}, {32, 32}, {32, 32}, {32, 32}};
  v1::Program r0 = Program(0, {2}, {{0}}, buffers);
  Add(&r0, v1::Instruction::ALL_REDUCE, {0}, {0})->set_group(0);
  v1::Program r1 = Program(1, {2}, {{0}}, buffers);
  Add(&r1, v1::Instruction::MATMUL, {1, 2}, {3});
  Add(&r1, v1::Instruction::ALL_REDUCE, {0}, {0})->set_group(0);
  r0.set_blocking_collectives(true);
  r1.set_blocking_collectives(true);
  const double matmul = 1e-3 + 2.0 * 32 * 32 * 32 * 1e-9;
  const double link = 2e-3 + 4 * 1e-8;
  ASSERT_OK_AND_ASSIGN(StepPrediction s, SimulateStep({r0, r1}, {"a", "a"}, Profile()));
  ASSERT_EQ(s.ranks.size(), 2u);
  EXPECT_NEAR(s.ranks[0].step_s, matmul + link, 1e-12);
  EXPECT_NEAR(s.ranks[0].split.bubble_s, matmul, 1e-12);
  EXPECT_NEAR(s.ranks[0].split.exposed_comm_s, link, 1e-12);
  EXPECT_NEAR(s.ranks[1].step_s, matmul + link, 1e-12);
  EXPECT_NEAR(s.ranks[1].split.bubble_s, 0, 1e-15);
}

TEST(SimulateTest, ABadProgramIsRefusedNamingTheInstruction) {
  v1::Program p = Program(0, {1}, {}, {{4, 4}});
  Add(&p, v1::Instruction::MATMUL, {0, 3}, {0});
  absl::StatusOr<StepPrediction> s = SimulateStep({p}, {"a"}, Profile());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("instruction 0: input buffer 3"), std::string::npos)
      << s.status();
}

// The quickstart MLP (fc0 1024 -> 4096, relu, fc1 4096 -> 1024, batch 32) on one rank: five
// products of 2 * 32 * 1024 * 4096 flops (two forward, the backward's two weight gradients and
// fc1's input gradient; fc0's input gets none). With memory and links free, the step is theirs.
TEST(SimulateTest, APlannedJobsStepIsItsModelsProducts) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(R"(
name: mlp
mesh: {shape: [1], dim_names: [dp]}
model:
  layers:
    - {name: fc0, type: linear, in_features: 1024, out_features: 4096, bias: false}
    - {name: act0, type: relu}
    - {name: fc1, type: linear, in_features: 4096, out_features: 1024, bias: false}
  loss: mse
data: {source: synthetic, sample_shape: [1024], label_shape: [1024], num_samples: 512,
       batch_size: 32, placements: [Shard(0)]}
optimizer: {type: adamw, lr: 1.0e-3}
train: {steps: 1, seed: 1}
)",
                                                      "/tmp");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<const Plan> plan, PrepareAndPlan(&*spec, "job-1", 0));
  v1::CostProfile profile;
  AddKernel(&profile, v1::KernelCost::MATMUL, 1e-3, 1e-10);
  AddKernel(&profile, v1::KernelCost::MEMORY, 0, 0);
  ASSERT_OK_AND_ASSIGN(StepPrediction s, SimulatePlan(*plan, {"a"}, profile));
  const double flops = 5 * 2.0 * 32 * 1024 * 4096;
  EXPECT_NEAR(s.step_s, 5 * 1e-3 + flops * 1e-10, 1e-9);
  const StepSplit& x = s.split;
  EXPECT_NEAR(x.compute_s + x.optimizer_s + x.exposed_comm_s + x.bubble_s, s.step_s, 1e-12);
}

}  // namespace
}  // namespace weft::planner::cost
