// The global gradient norm as emit lowers it (grad_norm.h): which mesh dims it sums over, which
// rank counts which gradient (a copy once, shards everywhere), where it stands, and the clip
// coefficient every update reads.
#include "planner/grad_norm.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::BufferName;
using testing::Count;
using testing::Gpt2Spec;
using testing::MustPlan;
using testing::R;
using testing::S;
using testing::SpecBuilder;

// Each SUM_SQUARES's gradient and its scale (1: counted here, 0: a copy another member counts).
std::map<std::string, float> Squares(const v1::Program& p) {
  std::map<std::string, float> out;
  for (const v1::Instruction& ins : p.instructions()) {
    if (ins.op() == v1::Instruction::SUM_SQUARES) out[BufferName(p, ins.inputs(0))] = ins.scale();
  }
  return out;
}

int IndexOf(const v1::Program& p, v1::Instruction::Op op) {
  for (int i = 0; i < p.instructions_size(); ++i) {
    if (p.instructions(i).op() == op) return i;
  }
  return -1;
}

// The collectives summing grad_norm_sq, each as the mesh dims of its group.
std::vector<std::string> NormSums(const v1::Program& p) {
  std::vector<std::string> out;
  for (const v1::Instruction& ins : p.instructions()) {
    if (ins.op() != v1::Instruction::ALL_REDUCE) continue;
    for (int b : ins.inputs()) {
      if (BufferName(p, b) != "grad_norm_sq") continue;
      for (const v1::CommGroup& g : p.groups()) {
        if (g.id() == ins.group()) out.push_back(g.mesh_dims());
      }
    }
  }
  return out;
}

// Over all ranks, every element of every parameter's gradient is counted exactly once per copy
// of the sum: sum over ranks of (scale x local elements) = global elements x the ranks along the
// mesh dims the norm is not summed over (whose members each compute the whole total).
void ExpectEachElementCountedOnce(const std::vector<v1::Program>& programs) {
  ASSERT_FALSE(programs.empty());
  const v1::Mesh& mesh = programs[0].mesh();
  std::set<std::string> summed;
  for (const v1::Program& p : programs) {
    for (const std::string& dims : NormSums(p)) summed.insert(dims);
  }
  int64_t copies = 1;
  for (int d = 0; d < mesh.shape_size(); ++d) {
    if (summed.count(mesh.dim_names(d)) == 0) copies *= mesh.shape(d);
  }
  std::map<std::string, int64_t> global, counted;
  for (const v1::Program& p : programs) {
    for (const v1::ParamInit& init : p.init()) {
      if (p.buffers(init.buffer()).role() != v1::Buffer::PARAM) continue;
      int64_t n = 1;
      for (int64_t d : init.global_shape()) n *= d;
      global[init.name() + "@grad"] = n;
    }
    for (const v1::Instruction& ins : p.instructions()) {
      if (ins.op() != v1::Instruction::SUM_SQUARES) continue;
      counted[BufferName(p, ins.inputs(0))] +=
          static_cast<int64_t>(ins.scale()) * BufferElements(p.buffers(ins.inputs(0)));
    }
  }
  ASSERT_EQ(counted.size(), global.size());
  for (const auto& [grad, n] : global) {
    ASSERT_EQ(counted.count(grad), 1u) << grad << " is in no sum of squares";
    EXPECT_EQ(counted.at(grad), n * copies) << grad;
  }
}

TEST(GradNormTest, ReplicatedGradientsNeedNoCollective) {
  // Data parallel: every gradient is all-reduced whole, so each rank sums all of them itself.
  const std::vector<v1::Program> programs = MustPlan(SpecBuilder({4}, {"dp"})
                                                         .Batch(8, {6}, {2})
                                                         .Linear("fc0", 6, 4)
                                                         .Act("a", "relu")
                                                         .Linear("fc1", 4, 2)
                                                         .Spec());
  for (const v1::Program& p : programs) {
    SCOPED_TRACE(p.rank());
    EXPECT_EQ(Squares(p), (std::map<std::string, float>{{"fc0.weight@grad", 1.0f},
                                                        {"fc0.bias@grad", 1.0f},
                                                        {"fc1.weight@grad", 1.0f},
                                                        {"fc1.bias@grad", 1.0f}}));
    EXPECT_TRUE(NormSums(p).empty());
    ASSERT_TRUE(p.has_grad_norm_buffer());
    EXPECT_EQ(BufferName(p, p.grad_norm_buffer()), "grad_norm_sq");
    EXPECT_EQ(Count(p, v1::Instruction::CLIP_COEFFICIENT), 0);  // no clip_grad_norm
    // Before the first update, after the last gradient's all-reduce.
    EXPECT_LT(IndexOf(p, v1::Instruction::SUM_SQUARES), IndexOf(p, v1::Instruction::SGD));
  }
  ExpectEachElementCountedOnce(programs);
}

// Column -> row on mp = 2: fc0's weight and bias and fc1's weight are split over mp and counted
// on both members; fc1's bias is whole on both and counted by member 0 only, then the squares
// are summed over mp. Counting the copy on both would double its share of the norm.
TEST(GradNormTest, ACopyIsCountedByTheFirstMemberAndShardsEverywhere) {
  const std::vector<v1::Program> programs = MustPlan(SpecBuilder({2}, {"mp"})
                                                         .Batch(8, {6}, {2})
                                                         .Linear("fc0", 6, 4)
                                                         .Place("weight", {S(1)})
                                                         .Place("bias", {S(0)})
                                                         .Act("a", "relu")
                                                         .Linear("fc1", 4, 2)
                                                         .Place("weight", {S(0)})
                                                         .Spec());
  for (const v1::Program& p : programs) {
    SCOPED_TRACE(p.rank());
    EXPECT_EQ(Squares(p), (std::map<std::string, float>{
                              {"fc0.weight@grad", 1.0f},
                              {"fc0.bias@grad", 1.0f},
                              {"fc1.weight@grad", 1.0f},
                              {"fc1.bias@grad", p.rank() == 0 ? 1.0f : 0.0f}}));
    EXPECT_EQ(NormSums(p), (std::vector<std::string>{"mp"}));
  }
  ExpectEachElementCountedOnce(programs);
}

// Every element counted once on meshes of every kind: ZeRO at each level on dp x mp (the
// updates read dp shards, so the norm sums over dp too, in mesh order), Megatron's plan with
// and without sequence parallelism on gpt2, and pipelines (the stages' totals summed with the
// loss: gpt2's tied embedding lives on the first stage only).
TEST(GradNormTest, EveryElementIsCountedOnceOnEveryMesh) {
  for (int level : {1, 2, 3}) {
    SCOPED_TRACE(level);
    v1::JobSpec spec = SpecBuilder({2, 2}, {"dp", "mp"})
                           .Batch(8, {6}, {4})
                           .Linear("fc0", 6, 4)
                           .Place("weight", {R, S(1)})
                           .Place("bias", {R, S(0)})
                           .Act("a", "relu")
                           .Linear("fc1", 4, 4)
                           .Place("weight", {R, S(0)})
                           .DataPlacements({S(0), R})
                           .AdamW()
                           .Spec();
    spec.mutable_sharding()->set_dim("dp");
    spec.mutable_sharding()->set_level(level);
    const std::vector<v1::Program> programs = MustPlan(spec);
    for (const v1::Program& p : programs) {
      EXPECT_EQ(NormSums(p), (std::vector<std::string>{"dp", "mp"})) << p.rank();
    }
    ExpectEachElementCountedOnce(programs);
  }
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp);
    v1::JobSpec spec = Gpt2Spec();
    spec.mutable_mesh()->set_shape(0, 2);
    spec.mutable_mesh()->set_dim_names(0, "mp");
    spec.mutable_data()->clear_placements();  // Gpt2Spec's dp: Shard(0); Replicate here
    v1::ParallelizeConfig& mp = (*spec.mutable_parallelize())["mp"];
    mp.set_dim("mp");
    mp.set_preset("megatron");
    mp.set_sequence_parallel(sp);
    const std::vector<v1::Program> programs = MustPlan(spec);
    // The norm gains and the row-parallel biases are copies; the column weights are split.
    const std::map<std::string, float> member1 = Squares(programs[1]);
    EXPECT_EQ(member1.at("h.0.ln_1.weight@grad"), 0.0f);
    EXPECT_EQ(member1.at("h.0.attn.c_proj.bias@grad"), 0.0f);
    EXPECT_EQ(member1.at("h.0.attn.c_attn.weight@grad"), 1.0f);
    EXPECT_EQ(Squares(programs[0]).at("h.0.ln_1.weight@grad"), 1.0f);
    ExpectEachElementCountedOnce(programs);
  }
  v1::JobSpec pipelined = Gpt2Spec();
  pipelined.mutable_mesh()->set_shape(0, 2);
  pipelined.mutable_mesh()->set_dim_names(0, "pp");
  pipelined.mutable_data()->clear_placements();
  pipelined.mutable_pipeline()->set_dim("pp");
  pipelined.mutable_pipeline()->set_schedule("1F1B");
  pipelined.mutable_pipeline()->set_micro_batches(2);
  const std::vector<v1::Program> programs = MustPlan(pipelined);
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(Squares(programs[0]).count("wte.weight@grad"), 1u);
  EXPECT_EQ(Squares(programs[1]).count("wte.weight@grad"), 0u);
  for (const v1::Program& p : programs) {
    SCOPED_TRACE(p.rank());
    // One collective on the pipeline group sums the loss and the norm's stage totals.
    EXPECT_EQ(NormSums(p), (std::vector<std::string>{"pp"}));
    int over_pp = 0;
    for (const v1::Instruction& ins : p.instructions()) {
      if (ins.op() != v1::Instruction::ALL_REDUCE) continue;
      std::set<std::string> names;
      for (int b : ins.inputs()) names.insert(BufferName(p, b));
      if (names.count("loss") > 0) {
        ++over_pp;
        EXPECT_EQ(names, (std::set<std::string>{"loss", "grad_norm_sq"}));
      }
    }
    EXPECT_EQ(over_pp, 1);
    // ... before the updates, which need the norm.
    EXPECT_LT(IndexOf(p, v1::Instruction::SUM_SQUARES), IndexOf(p, v1::Instruction::ADAMW));
  }
  ExpectEachElementCountedOnce(programs);
}

// optimizer.clip_grad_norm: the coefficient right after the norm, before the first update, and
// every update (the state-only one of a Partial(sum) parameter's other members too) reads it as
// its last input.
TEST(GradNormTest, EveryUpdateReadsTheClipCoefficient) {
  v1::JobSpec spec = SpecBuilder({2}, {"mp"})
                         .Batch(4, {6}, {2})
                         .Linear("fc0", 6, 2, /*bias=*/false)
                         .Place("weight", {testing::P})
                         .Linear("fc1", 2, 2)
                         .AdamW()
                         .Spec();
  spec.mutable_optimizer()->set_clip_grad_norm(0.5);
  for (const v1::Program& p : MustPlan(spec)) {
    SCOPED_TRACE(p.rank());
    const int clip = IndexOf(p, v1::Instruction::CLIP_COEFFICIENT);
    ASSERT_GE(clip, 0);
    const v1::Instruction& coefficient = p.instructions(clip);
    EXPECT_FLOAT_EQ(coefficient.max_norm(), 0.5f);
    EXPECT_EQ(coefficient.inputs(0), p.grad_norm_buffer());
    EXPECT_LT(clip, IndexOf(p, v1::Instruction::ADAMW));
    int updates = 0;
    for (const v1::Instruction& ins : p.instructions()) {
      if (ins.op() != v1::Instruction::ADAMW) continue;
      ++updates;
      ASSERT_EQ(ins.inputs_size(), 5);
      EXPECT_EQ(ins.inputs(4), coefficient.outputs(0));
    }
    EXPECT_EQ(updates, 3);
  }
}

TEST(GradNormDimsTest, ShardedDimsButThePipelines) {
  v1::JobSpec spec = SpecBuilder({2, 2}, {"pp", "mp"})
                         .Batch(8, {6}, {2})
                         .Linear("fc0", 6, 4)
                         .Place("weight", {R, S(1)})
                         .Act("a", "relu")
                         .Linear("fc1", 4, 2)
                         .Spec();
  spec.mutable_pipeline()->set_dim("pp");
  spec.mutable_pipeline()->set_schedule("FThenB");
  spec.mutable_pipeline()->set_micro_batches(2);
  ApplyJobSpecDefaults(&spec);
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanJob(spec, "job-1", 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  absl::StatusOr<std::optional<std::vector<int>>> dims =
      GradientNormDims((*plan)->planned().graph);
  ASSERT_TRUE(dims.ok()) << dims.status();
  EXPECT_EQ(*dims, (std::vector<int>{1}));  // mp; never pp
  EXPECT_EQ((*plan)->planned().grad_norm_dims, *dims);
}

}  // namespace
}  // namespace weft::planner
