#include "planner/planner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/philox.h"
#include "planner/emit.h"
#include "planner/format.h"
#include "planner/plan_report.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

using testing::BufferName;
using testing::Collectives;
using testing::Count;
using testing::MustPlan;
using testing::R;
using testing::S;
using testing::SpecBuilder;

v1::JobSpec Mlp(std::vector<int64_t> mesh, std::vector<std::string> names, int64_t batch = 16) {
  return SpecBuilder(mesh, names)
      .Batch(batch, {6}, {2})
      .Linear("fc0", 6, 8)
      .Act("act0", "relu")
      .Linear("fc1", 8, 2)
      .Spec();
}

int Index(const v1::Program& p, v1::Instruction::Op op) {
  for (int i = 0; i < p.instructions_size(); ++i) {
    if (p.instructions(i).op() == op) return i;
  }
  return -1;
}

TEST(PlannerTest, DataParallelAllReducesEachGradientAndTheLoss) {
  std::vector<v1::Program> programs = MustPlan(Mlp({4}, {"dp"}), /*attempt=*/2);
  ASSERT_EQ(programs.size(), 4u);
  for (const v1::Program& p : programs) {
    SCOPED_TRACE(p.rank());
    std::multiset<std::string> reduced;
    for (const v1::Instruction* c : Collectives(p)) {
      EXPECT_EQ(c->op(), v1::Instruction::ALL_REDUCE);
      EXPECT_EQ(c->reduce(), v1::Placement::SUM);
      const v1::CommGroup* g = FindGroup(p, c->group());
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->mesh_dims(), "dp");
      EXPECT_EQ(std::vector<int>(g->ranks().begin(), g->ranks().end()),
                (std::vector<int>{0, 1, 2, 3}));
      reduced.insert(BufferName(p, c->inputs(0)));
    }
    EXPECT_EQ(reduced, (std::multiset<std::string>{"fc0.weight@grad", "fc0.bias@grad",
                                                   "fc1.weight@grad", "fc1.bias@grad", "loss"}));
    // Local batch B/4 at this rank's rows.
    ASSERT_EQ(p.instructions(0).op(), v1::Instruction::LOAD_INPUT);
    ASSERT_EQ(p.instructions(1).op(), v1::Instruction::LOAD_LABEL);
    EXPECT_EQ(p.instructions(0).box().offsets(0), 4 * p.rank());
    EXPECT_EQ(p.instructions(0).box().lengths(0), 4);
    EXPECT_EQ(p.buffers(p.instructions(0).outputs(0)).shape(0), 4);
    EXPECT_EQ(p.buffers(p.instructions(1).outputs(0)).shape(0), 4);
    // Order: loss, its all-reduce, backward, gradient all-reduces, updates.
    int mse = Index(p, v1::Instruction::MSE_LOSS);
    int grad = Index(p, v1::Instruction::MSE_GRAD);
    int sgd = Index(p, v1::Instruction::SGD);
    ASSERT_TRUE(mse > 0 && grad > mse && sgd > grad);
    EXPECT_EQ(p.instructions(mse + 1).op(), v1::Instruction::ALL_REDUCE);
    EXPECT_EQ(p.instructions(mse + 1).outputs(0), p.loss_buffer());
    EXPECT_FLOAT_EQ(p.instructions(mse).scale(), 1.0f / 32);
    EXPECT_FLOAT_EQ(p.instructions(grad).scale(), 2.0f / 32);
    EXPECT_EQ(Count(p, v1::Instruction::SGD), 4);
    for (int i = sgd; i < p.instructions_size(); ++i) EXPECT_EQ(p.instructions(i).op(), v1::Instruction::SGD);
    // Before the updates, the gradient norm: every gradient is whole and replicated on dp, so
    // each rank sums all four squares itself and the norm needs no collective.
    EXPECT_EQ(p.instructions(sgd - 1).op(), v1::Instruction::ADD);
    ASSERT_TRUE(p.has_grad_norm_buffer());
    EXPECT_EQ(p.instructions(sgd - 1).outputs(0), p.grad_norm_buffer());
    for (int i = sgd - 5; i < sgd - 1; ++i) {
      EXPECT_EQ(p.instructions(i).op(), v1::Instruction::SUM_SQUARES);
      EXPECT_EQ(p.instructions(i).scale(), 1.0f);
    }
    EXPECT_EQ(p.instructions(sgd - 6).op(), v1::Instruction::ALL_REDUCE);
    // Parameters are whole on every rank.
    for (const v1::ParamInit& init : p.init()) {
      EXPECT_EQ(std::vector<int64_t>(p.buffers(init.buffer()).shape().begin(),
                                     p.buffers(init.buffer()).shape().end()),
                std::vector<int64_t>(init.global_shape().begin(), init.global_shape().end()));
    }
    EXPECT_EQ(p.job_id(), "job-1");
    EXPECT_EQ(p.attempt(), 2);
    EXPECT_EQ(p.world_size(), 4);
    EXPECT_EQ(p.steps(), 3);
    EXPECT_EQ(p.seed(), 7u);
    EXPECT_EQ(p.device(), "cpu");
    EXPECT_EQ(p.mesh().dim_names(0), "dp");
    EXPECT_EQ(p.data().batch_size(), 16);
  }
}

TEST(PlannerTest, UnevenBatchGivesTheRemainderToTheLastRank) {
  std::vector<v1::Program> programs = MustPlan(Mlp({4}, {"dp"}, /*batch=*/10));
  ASSERT_EQ(programs.size(), 4u);
  std::vector<int64_t> offsets, lengths;
  for (const v1::Program& p : programs) {
    offsets.push_back(p.instructions(1).box().offsets(0));
    lengths.push_back(p.instructions(1).box().lengths(0));
  }
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 2, 4, 6}));
  EXPECT_EQ(lengths, (std::vector<int64_t>{2, 2, 2, 4}));
}

TEST(PlannerTest, SingleRankHasNoCollectives) {
  std::vector<v1::Program> programs = MustPlan(Mlp({1}, {"dp"}));
  ASSERT_EQ(programs.size(), 1u);
  const v1::Program& p = programs[0];
  EXPECT_TRUE(Collectives(p).empty());
  EXPECT_EQ(p.groups_size(), 0);
  EXPECT_EQ(Count(p, v1::Instruction::SLICE), 0);
  EXPECT_EQ(p.buffers(p.loss_buffer()).name(), "loss");
  EXPECT_EQ(p.buffers(p.instructions(0).outputs(0)).shape(0), 16);
}

TEST(PlannerTest, TwoDimMeshReducesOverDpGroupsOnly) {
  std::vector<v1::Program> programs = MustPlan(Mlp({2, 2}, {"dp", "mp"}));
  ASSERT_EQ(programs.size(), 4u);
  std::map<int, std::vector<int>> group_of_id;
  for (const v1::Program& p : programs) {
    SCOPED_TRACE(p.rank());
    std::vector<const v1::Instruction*> cs = Collectives(p);
    EXPECT_EQ(cs.size(), 5u);
    for (const v1::Instruction* c : cs) {
      EXPECT_EQ(c->op(), v1::Instruction::ALL_REDUCE);
      const v1::CommGroup* g = FindGroup(p, c->group());
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->mesh_dims(), "dp");
      std::vector<int> ranks(g->ranks().begin(), g->ranks().end());
      // dp groups of a [2,2] mesh: {0,2} and {1,3}.
      EXPECT_EQ(ranks, p.rank() % 2 == 0 ? (std::vector<int>{0, 2}) : (std::vector<int>{1, 3}));
      // The same id means the same group on every rank.
      auto [it, fresh] = group_of_id.emplace(g->id(), ranks);
      EXPECT_EQ(it->second, ranks);
    }
    EXPECT_EQ(p.buffers(p.instructions(0).outputs(0)).shape(0), 8);  // batch 16 over dp 2
  }
  EXPECT_EQ(group_of_id.size(), 2u);
}

TEST(PlannerTest, MegatronMlpReducesActivationsOnceEachWay) {
  // fc_in replicated, then column-parallel fc0 and row-parallel fc1 on mp.
  v1::JobSpec spec = SpecBuilder({2}, {"mp"})
                         .Batch(4, {6}, {8})
                         .Linear("fc_in", 6, 8)
                         .Act("r0", "relu")
                         .Linear("fc0", 8, 16)
                         .Place("weight", {S(1)})
                         .Place("bias", {S(0)})
                         .Act("r1", "relu")
                         .Linear("fc1", 16, 8)
                         .Place("weight", {S(0)})
                         .Spec();
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 2u);
  for (const v1::Program& p : programs) {
    SCOPED_TRACE(p.rank());
    std::vector<const v1::Instruction*> cs = Collectives(p);
    ASSERT_EQ(cs.size(), 3u);
    EXPECT_EQ(cs[0]->op(), v1::Instruction::ALL_REDUCE);
    EXPECT_EQ(BufferName(p, cs[0]->inputs(0)), "fc1.xw");  // row-parallel output, forward
    EXPECT_EQ(cs[1]->op(), v1::Instruction::ALL_REDUCE);
    EXPECT_EQ(BufferName(p, cs[1]->inputs(0)), "r0.out@grad");  // fc0's input gradient
    // The gradient norm: fc0's and fc1's weights are split over mp.
    EXPECT_EQ(BufferName(p, cs[2]->inputs(0)), "grad_norm_sq");
    std::vector<int> at;
    for (int i = 0; i < p.instructions_size(); ++i) {
      if (IsCollective(p.instructions(i).op())) at.push_back(i);
    }
    EXPECT_LT(at[0], Index(p, v1::Instruction::MSE_LOSS));
    EXPECT_GT(at[1], Index(p, v1::Instruction::MSE_GRAD));
    EXPECT_LT(at[1], Index(p, v1::Instruction::SGD));
    for (const v1::ParamInit& init : p.init()) {
      std::vector<int64_t> shape(p.buffers(init.buffer()).shape().begin(),
                                 p.buffers(init.buffer()).shape().end());
      if (init.name() == "fc0.weight") {
        EXPECT_EQ(shape, (std::vector<int64_t>{8, 8}));
        EXPECT_EQ(init.box().offsets(1), 8 * p.rank());
      }
      if (init.name() == "fc0.bias") {
        EXPECT_EQ(shape, (std::vector<int64_t>{8}));
      }
      if (init.name() == "fc1.weight") {
        EXPECT_EQ(shape, (std::vector<int64_t>{8, 8}));
        EXPECT_EQ(init.box().offsets(0), 8 * p.rank());
      }
      if (init.name() == "fc1.bias") {
        EXPECT_EQ(shape, (std::vector<int64_t>{8}));
      }
    }
  }
}

TEST(PlannerTest, InitKindsAndAdamW) {
  v1::JobSpec spec = SpecBuilder({2}, {"dp"}).Batch(4, {6}, {2}).Linear("fc0", 6, 2).AdamW().Spec();
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 2u);
  const v1::Program& p = programs[1];
  int uniform = 0, zeros = 0;
  for (const v1::ParamInit& init : p.init()) {
    if (init.kind() == v1::ParamInit::UNIFORM) {
      ++uniform;
      EXPECT_FLOAT_EQ(init.bound(), static_cast<float>(1.0 / std::sqrt(6.0))) << init.name();
      EXPECT_EQ(init.tensor_key(), Fnv1a64(init.name()));
    }
    if (init.kind() == v1::ParamInit::ZEROS) {
      ++zeros;
      EXPECT_EQ(p.buffers(init.buffer()).role(), v1::Buffer::OPTIMIZER_STATE);
    }
  }
  EXPECT_EQ(uniform, 2);
  EXPECT_EQ(zeros, 4);
  ASSERT_EQ(Count(p, v1::Instruction::ADAMW), 2);
  const v1::Instruction& adam = p.instructions(Index(p, v1::Instruction::ADAMW));
  EXPECT_EQ(adam.inputs_size(), 4);
  EXPECT_FLOAT_EQ(adam.beta2(), 0.999f);
  EXPECT_FLOAT_EQ(adam.weight_decay(), 0.01f);

  spec.set_init_from("/tmp/init.safetensors");
  programs = MustPlan(spec);
  ASSERT_FALSE(programs.empty());
  for (const v1::ParamInit& init : programs[0].init()) {
    EXPECT_NE(init.kind(), v1::ParamInit::UNIFORM);
  }
  EXPECT_EQ(programs[0].init_from(), "/tmp/init.safetensors");
}

TEST(PlannerTest, ProgramsAreWellFormedOnManyMeshes) {
  std::vector<v1::JobSpec> specs = {
      Mlp({1}, {"dp"}), Mlp({4}, {"dp"}, 10), Mlp({2, 2}, {"dp", "mp"}),
      SpecBuilder({2, 2}, {"dp", "mp"})
          .Batch(8, {6}, {6})
          .Linear("fc0", 6, 8)
          .Place("weight", {R, S(1)})
          .Place("bias", {R, S(0)})
          .Act("a", "gelu")
          .Linear("fc1", 8, 6)
          .Place("weight", {R, S(0)})
          .AdamW()
          .Spec(),
      // Weight sharded on the batch dim: a conflict the search resolves by a gather.
      SpecBuilder({4}, {"dp"}).Batch(8, {6}, {4}).Linear("fc0", 6, 4).Place("weight", {S(1)}).Spec(),
  };
  for (const v1::JobSpec& spec : specs) {
    for (const v1::Program& p : MustPlan(spec)) {
      std::set<int> defined;
      for (const v1::ParamInit& init : p.init()) defined.insert(init.buffer());
      for (const v1::Instruction& ins : p.instructions()) {
        for (int b : ins.inputs()) {
          ASSERT_TRUE(b >= 0 && b < p.buffers_size());
          EXPECT_TRUE(defined.count(b)) << ins.comment() << " reads " << p.buffers(b).name();
        }
        for (int b : ins.outputs()) defined.insert(b);
        if (IsCollective(ins.op())) {
          const v1::CommGroup* g = FindGroup(p, ins.group());
          ASSERT_NE(g, nullptr) << ins.comment();
        }
      }
      EXPECT_EQ(p.buffers(p.loss_buffer()).role(), v1::Buffer::LOSS);
      EXPECT_EQ(p.buffers(p.loss_buffer()).shape_size(), 1);
    }
  }
}

TEST(PlannerTest, ErrorsNameTheJobLayerAndPlacements) {
  v1::JobSpec spec = SpecBuilder({4}, {"dp"})
                         .Batch(8, {6}, {2})
                         .Linear("fc0", 6, 2)
                         .Place("weight", {S(2)})
                         .Spec();
  absl::Status s = PlanJob(spec, "job-1", 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("planning job test: ", 0), 0u) << s;
  EXPECT_NE(s.message().find("fc0.weight"), std::string::npos) << s;
  EXPECT_NE(s.message().find("Shard(2)"), std::string::npos) << s;
}

// {kind, mesh dims of the group, buffer name} of each collective, in program order.
using Coll = std::tuple<v1::Instruction::Op, std::string, std::string>;
std::vector<Coll> Colls(const v1::Program& p) {
  std::vector<Coll> out;
  for (const v1::Instruction* c : Collectives(p)) {
    const v1::CommGroup* g = FindGroup(p, c->group());
    out.push_back({c->op(), g ? g->mesh_dims() : "?", BufferName(p, c->inputs(0))});
  }
  return out;
}

std::vector<int> Ranks(const v1::Program& p, const v1::Instruction& c) {
  const v1::CommGroup* g = FindGroup(p, c.group());
  return g ? std::vector<int>(g->ranks().begin(), g->ranks().end()) : std::vector<int>{};
}

TEST(PlannerTest, DataParallelOnFourOneAllReducePerWeightGradientAndTheLoss) {
  v1::JobSpec spec = SpecBuilder({4}, {"dp"})
                         .Batch(16, {6}, {2})
                         .Linear("fc0", 6, 8, /*bias=*/false)
                         .Act("a", "relu")
                         .Linear("fc1", 8, 2, /*bias=*/false)
                         .Spec();
  for (const v1::Program& p : MustPlan(spec)) {
    const auto AR = v1::Instruction::ALL_REDUCE;
    // Each gradient's all-reduce starts as the backward completes it: fc1's first.
    EXPECT_EQ(Colls(p), (std::vector<Coll>{{AR, "dp", "loss"},
                                           {AR, "dp", "fc1.weight@grad"},
                                           {AR, "dp", "fc0.weight@grad"}}));
    for (const v1::Instruction* c : Collectives(p)) {
      EXPECT_EQ(Ranks(p, *c), (std::vector<int>{0, 1, 2, 3}));
    }
  }
}

v1::JobSpec ColRowMlp(std::vector<int64_t> mesh, std::vector<std::string> names,
                      std::vector<Placement> w0, std::vector<Placement> b0,
                      std::vector<Placement> w1, std::vector<Placement> data = {},
                      int64_t hidden = 16) {
  SpecBuilder b(mesh, names);
  b.Batch(8, {6}, {6}).Linear("fc0", 6, hidden).Place("weight", w0);
  if (!b0.empty()) b.Place("bias", b0);
  b.Act("a", "relu").Linear("fc1", hidden, 6).Place("weight", w1);
  if (!data.empty()) b.DataPlacements(data);
  return b.Spec();
}

TEST(PlannerTest, ColumnThenRowOnMpReducesOnceForwardAndOnceBackward) {
  for (int64_t mp : {2, 4}) {
    SCOPED_TRACE(mp);
    std::vector<v1::Program> programs =
        MustPlan(ColRowMlp({mp}, {"mp"}, {S(1)}, {S(0)}, {S(0)}, {R}));
    ASSERT_EQ(programs.size(), static_cast<size_t>(mp));
    for (const v1::Program& p : programs) {
      const auto AR = v1::Instruction::ALL_REDUCE;
      // fc1's row-parallel product before its bias; the gradient of fc0's (replicated) input
      // is never needed, so the backward reduce is absent here; see the Megatron test above
      // for the case with a layer before fc0.
      EXPECT_EQ(Colls(p), (std::vector<Coll>{{AR, "mp", "fc1.xw"}, {AR, "mp", "grad_norm_sq"}}));
      std::vector<int> all;
      for (int r = 0; r < mp; ++r) all.push_back(r);
      EXPECT_EQ(Ranks(p, *Collectives(p)[0]), all);
      EXPECT_EQ(Count(p, v1::Instruction::ALL_GATHER), 0);
      EXPECT_EQ(Count(p, v1::Instruction::ALL_TO_ALL), 0);
    }
  }
}

TEST(PlannerTest, RowThenColumnReadsTheAllReducedGradientOnce) {
  // col -> row -> col on mp=2: fc1's output gradient (from fc2's column-parallel dX) is
  // Partial(sum). fc1's dX needs it Replicate; fc1's weight gradient then reads that same
  // all-reduced tensor (x^T dy with x Shard(1) gives Shard(0), fc1.weight's own placement)
  // rather than all-gathering fc1's input and reduce-scattering a full weight gradient, as
  // Megatron's row-parallel layer does.
  SpecBuilder b({2}, {"mp"});
  // Weights larger than the activations (32 x 32 against a batch of 8), so that fc1's dX
  // all-reduces its output gradient rather than all-gathering its weight.
  b.Batch(8, {6}, {6}).Linear("fc0", 6, 32).Place("weight", {S(1)}).Place("bias", {S(0)});
  b.Act("a0", "relu").Linear("fc1", 32, 32).Place("weight", {S(0)});
  b.Linear("fc2", 32, 6).Place("weight", {S(1)}).Place("bias", {S(0)});
  for (const v1::Program& p : MustPlan(b.Spec())) {
    SCOPED_TRACE(p.rank());
    for (const v1::Instruction* c : Collectives(p)) {
      EXPECT_NE(p.buffers(c->inputs(0)).name(), "a0.out") << "fc1's input gathered again";
      EXPECT_NE(c->op(), v1::Instruction::REDUCE_SCATTER) << c->comment();
    }
    int reads_of_reduced = 0, dy_reduces = 0;
    for (int i = 0; i < p.instructions_size(); ++i) {
      const v1::Instruction& ins = p.instructions(i);
      if (ins.op() != v1::Instruction::ALL_REDUCE) continue;
      if (p.buffers(ins.inputs(0)).name() != "fc1.out@grad") continue;
      ++dy_reduces;
      for (int j = i + 1; j < p.instructions_size(); ++j) {
        if (p.instructions(j).op() != v1::Instruction::MATMUL) continue;
        for (int in : p.instructions(j).inputs()) reads_of_reduced += in == ins.outputs(0);
      }
    }
    EXPECT_EQ(dy_reduces, 1);
    EXPECT_EQ(reads_of_reduced, 2) << "fc1's dX and dW both read the all-reduced gradient";
  }
}

TEST(PlannerTest, DpTwoByMpTwoWithTheSeedPlacements) {
  // mesh [2,2](dp,mp); fc0.weight [R, S(1)] (bias [R, S(0)]), fc1.weight [R, S(0)], batch
  // [S(0), R]: the seed's hybrid data x tensor parallel MLP.
  std::vector<v1::Program> programs =
      MustPlan(ColRowMlp({2, 2}, {"dp", "mp"}, {R, S(1)}, {R, S(0)}, {R, S(0)}, {S(0), R}));
  ASSERT_EQ(programs.size(), 4u);
  for (const v1::Program& p : programs) {
    SCOPED_TRACE(p.rank());
    const auto AR = v1::Instruction::ALL_REDUCE;
    // The gradients' all-reduces in the order the backward completes them.
    EXPECT_EQ(Colls(p), (std::vector<Coll>{{AR, "mp", "fc1.xw"},
                                           {AR, "dp", "loss"},
                                           {AR, "dp", "fc1.bias@grad"},
                                           {AR, "dp", "fc1.weight@grad"},
                                           {AR, "dp", "fc0.bias@grad"},
                                           {AR, "dp", "fc0.weight@grad"},
                                           {AR, "mp", "grad_norm_sq"}}));

    const int row = p.rank() / 2, col = p.rank() % 2;
    for (const v1::Instruction* c : Collectives(p)) {
      const v1::CommGroup* g = FindGroup(p, c->group());
      ASSERT_NE(g, nullptr);
      std::vector<int> want = g->mesh_dims() == "mp" ? std::vector<int>{2 * row, 2 * row + 1}
                                                     : std::vector<int>{col, col + 2};
      EXPECT_EQ(Ranks(p, *c), want);
    }
    // Local shapes: batch 8 over dp, hidden 16 over mp.
    EXPECT_EQ(p.buffers(p.instructions(0).outputs(0)).shape(0), 4);
    for (const v1::ParamInit& init : p.init()) {
      std::vector<int64_t> shape(p.buffers(init.buffer()).shape().begin(),
                                 p.buffers(init.buffer()).shape().end());
      const std::map<std::string, std::vector<int64_t>> want = {
          {"fc0.weight", {6, 8}}, {"fc0.bias", {8}}, {"fc1.weight", {8, 6}}, {"fc1.bias", {6}}};
      auto it = want.find(init.name());  // parameters (optimizer states are not checked here)
      if (it != want.end()) {
        EXPECT_EQ(shape, it->second) << init.name();
      }
    }
  }
}

TEST(PlannerTest, UnevenMpShards) {
  std::vector<v1::Program> programs =
      MustPlan(ColRowMlp({3}, {"mp"}, {S(1)}, {S(0)}, {S(0)}, {R}, /*hidden=*/16));
  ASSERT_EQ(programs.size(), 3u);
  std::vector<int64_t> cols;
  for (const v1::Program& p : programs) {
    for (const v1::ParamInit& init : p.init()) {
      if (init.name() == "fc0.weight") cols.push_back(init.box().lengths(1));
    }
  }
  EXPECT_EQ(cols, (std::vector<int64_t>{5, 5, 6}));
}

TEST(PlannerTest, ConflictingShardsUseAnAllToAll) {
  // The weight split by rows on the batch dim: moving the small input to Shard(1) (an
  // all-to-all) beats gathering the weight.
  v1::JobSpec spec = SpecBuilder({2}, {"dp"})
                         .Batch(8, {8}, {16})
                         .Linear("fc0", 8, 16, /*bias=*/false)
                         .Place("weight", {S(0)})
                         .Spec();
  for (const v1::Program& p : MustPlan(spec)) {
    ASSERT_EQ(Count(p, v1::Instruction::ALL_TO_ALL), 1);
    // The weight is never gathered (only the label, to meet the reduced product).
    for (const v1::Instruction* c : Collectives(p)) {
      EXPECT_NE(BufferName(p, c->inputs(0)), "fc0.weight") << c->comment();
    }
    const v1::Instruction& a2a = p.instructions(Index(p, v1::Instruction::ALL_TO_ALL));
    EXPECT_EQ(BufferName(p, a2a.inputs(0)), "input");
    EXPECT_EQ(a2a.axis(), 1);
    EXPECT_EQ(a2a.concat_axis(), 0);
    EXPECT_EQ(std::vector<int64_t>(a2a.split_sizes().begin(), a2a.split_sizes().end()),
              (std::vector<int64_t>{4, 4}));
    EXPECT_EQ(std::vector<int64_t>(a2a.concat_split_sizes().begin(),
                                   a2a.concat_split_sizes().end()),
              (std::vector<int64_t>{4, 4}));
  }
}

TEST(PlannerTest, PartialSumParameterLivesOnMemberZero) {
  v1::JobSpec spec = SpecBuilder({2}, {"mp"})
                         .Batch(4, {6}, {2})
                         .Linear("fc0", 6, 2, /*bias=*/false)
                         .Place("weight", {testing::P})
                         .AdamW()
                         .Spec();
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 2u);
  for (const v1::Program& p : programs) {
    SCOPED_TRACE(p.rank());
    for (const v1::ParamInit& init : p.init()) {
      if (init.name() != "fc0.weight") continue;
      EXPECT_EQ(init.kind(), p.rank() == 0 ? v1::ParamInit::UNIFORM : v1::ParamInit::ZEROS);
      EXPECT_EQ(init.box().lengths(0), 6);
    }
    // The product is Partial and reduced before the loss; the gradient is whole already, so the
    // norm needs no collective.
    const auto AR = v1::Instruction::ALL_REDUCE;
    EXPECT_EQ(Colls(p), (std::vector<Coll>{{AR, "mp", "fc0.out"}}));
    // Member 0 takes the AdamW step; member 1 advances m and v (lr 0) and decays its zeros at the
    // step's lr (a WEIGHT_DECAY, which the worker schedules as the updates).
    ASSERT_EQ(Count(p, v1::Instruction::ADAMW), 1);
    const v1::Instruction& adam = p.instructions(Index(p, v1::Instruction::ADAMW));
    if (p.rank() == 0) {
      EXPECT_GT(adam.lr(), 0.0f);
    } else {
      EXPECT_EQ(adam.lr(), 0.0f);
      const v1::Instruction& decay = p.instructions(p.instructions_size() - 1);
      EXPECT_EQ(decay.op(), v1::Instruction::WEIGHT_DECAY);
      EXPECT_FLOAT_EQ(decay.lr(), 0.1f);
      EXPECT_FLOAT_EQ(decay.weight_decay(), 0.01f);
    }
  }
}

TEST(PlannerTest, PartialSumBatchIsLoadedByMemberZero) {
  v1::JobSpec spec = SpecBuilder({2}, {"dp"})
                         .Batch(4, {6}, {2})
                         .Linear("fc0", 6, 2)
                         .DataPlacements({testing::P})
                         .Spec();
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 2u);
  EXPECT_EQ(Count(programs[0], v1::Instruction::LOAD_INPUT), 1);
  EXPECT_EQ(Count(programs[1], v1::Instruction::LOAD_INPUT), 0);
  EXPECT_EQ(programs[1].instructions(0).op(), v1::Instruction::SCALE);
  EXPECT_EQ(programs[1].instructions(0).scale(), 0.0f);
  // Partial(avg): everyone loads.
  spec = SpecBuilder({2}, {"dp"})
             .Batch(4, {6}, {2})
             .Linear("fc0", 6, 2)
             .DataPlacements({Placement::Partial(Placement::Reduce::kAvg)})
             .Spec();
  for (const v1::Program& p : MustPlan(spec)) EXPECT_EQ(Count(p, v1::Instruction::LOAD_INPUT), 1);
}

}  // namespace
}  // namespace weft::planner

namespace weft::planner {
namespace {

// dp x pp x mp with a pipeline and tensor parallelism from parallelize, 16 linear layers: every
// pass on a 3-d mesh at once. (The optimizer pass once kept a reference into the graph's tensors
// across adding one, which crashed planning of this shape.)
TEST(PlannerTest, ThreeDimMeshWithPipelineAndParallelize) {
  testing::SpecBuilder b({2, 2, 2}, {"dp", "pp", "mp"});
  b.Batch(8, {16}, {16}).AdamW();
  v1::JobSpec spec;
  for (int i = 0; i < 16; ++i) {
    b.Linear(absl::StrCat("fc", i), 16, 16);
    if (i < 15) b.Act(absl::StrCat("act", i), "relu");
  }
  spec = b.Spec();
  spec.mutable_pipeline()->set_dim("pp");
  spec.mutable_pipeline()->set_schedule("1F1B");
  spec.mutable_pipeline()->set_micro_batches(2);
  v1::ParallelizeConfig& mp = (*spec.mutable_parallelize())["mp"];
  mp.set_dim("mp");
  for (int i = 0; i < 16; ++i) {
    (*mp.mutable_plan())[absl::StrCat("fc", i)] = i % 2 == 0 ? "ColWiseParallel" : "RowWiseParallel";
  }
  std::vector<v1::Program> programs = testing::MustPlan(spec);
  ASSERT_EQ(programs.size(), 8u);
  // Stage 0 (pp coordinate 0) holds fc0..fc7, stage 1 fc8..fc15; both do mp all-reduces per
  // micro-batch and dp all-reduces of the gradients once per step.
  for (const v1::Program& p : programs) {
    const bool first = (p.rank() / 2) % 2 == 0;
    std::set<std::string> layers;
    for (const v1::ParamInit& init : p.init()) layers.insert(init.name().substr(0, init.name().find('.')));
    EXPECT_EQ(layers.count(first ? "fc0" : "fc8"), 1u) << "rank " << p.rank();
    EXPECT_EQ(layers.count(first ? "fc8" : "fc0"), 0u) << "rank " << p.rank();
    int per_micro_batch = 0, per_step = 0;
    for (const v1::Instruction& ins : p.instructions()) {
      if (ins.op() != v1::Instruction::ALL_REDUCE) continue;
      (ins.micro_batch() >= 0 ? per_micro_batch : per_step)++;
    }
    EXPECT_GT(per_micro_batch, 0) << "rank " << p.rank();
    EXPECT_GT(per_step, 0) << "rank " << p.rank();
  }
}

// train.micro_batches without a pipeline: gradient accumulation, each micro-batch's backward
// right after its forward, so that the plan holds one micro-batch's activations at a time; the
// loss and the gradients are the whole batch's (scales of 1/B, summed over micro-batches).
TEST(PlannerTest, MicroBatchesWithoutAPipelineAccumulateOneAtATime) {
  auto spec = [](int micro_batches) {
    // Activations (64 x 256 a layer) far larger than the weights (8 x 256), as in a transformer
    // at any real batch: accumulation holds a second copy of the gradients.
    v1::JobSpec s = SpecBuilder({1}, {"dp"})
                        .Batch(64, {8}, {8})
                        .Linear("fc0", 8, 256)
                        .Act("a", "relu")
                        .Linear("fc1", 256, 8)
                        .Spec();
    s.mutable_train()->set_micro_batches(micro_batches);
    return s;
  };
  const v1::Program whole = MustPlan(spec(1)).at(0);
  const v1::Program p = MustPlan(spec(4)).at(0);
  EXPECT_EQ(Count(p, v1::Instruction::LOAD_INPUT), 4);
  EXPECT_EQ(Count(p, v1::Instruction::MSE_LOSS), 4);
  EXPECT_EQ(Count(p, v1::Instruction::SGD), 4);  // once per step
  // F0 B0 F1 B1 ...: the micro-batch of each forward and backward instruction, in order.
  std::string order;
  for (const v1::Instruction& ins : p.instructions()) {
    if (ins.micro_batch() < 0) continue;
    const std::string item = absl::StrCat(
        ins.phase() == v1::Instruction::BACKWARD ? "B" : "F", ins.micro_batch());
    if (order.size() < item.size() || order.substr(order.size() - item.size()) != item) {
      absl::StrAppend(&order, order.empty() ? "" : " ", item);
    }
  }
  EXPECT_EQ(order, "F0 B0 F1 B1 F2 B2 F3 B3");
  for (const v1::Instruction& ins : p.instructions()) {
    if (ins.op() == v1::Instruction::MSE_LOSS) {
      EXPECT_FLOAT_EQ(ins.scale(), 1.0f / (64 * 8));
    }
  }
  // A quarter of the batch's activations at a time.
  EXPECT_LT(ReportRank(p).peak_activation_bytes, ReportRank(whole).peak_activation_bytes / 2);
  EXPECT_LT(p.arena_bytes(), whole.arena_bytes());
}

// The learning rate and its schedule reach every program as the spec gives them (the worker
// scales the updates' peak lr by it).
TEST(PlannerTest, ProgramsCarryTheLearningRateSchedule) {
  v1::JobSpec spec = SpecBuilder({2}, {"dp"}).Batch(4, {6}, {2}).Linear("fc0", 6, 2).Spec();
  v1::LrSchedule* schedule = spec.mutable_optimizer()->mutable_schedule();
  schedule->set_warmup_steps(1);
  schedule->set_decay("cosine");
  schedule->set_decay_steps(3);
  schedule->set_min_lr(0.01);
  for (const v1::Program& p : MustPlan(spec)) {
    EXPECT_DOUBLE_EQ(p.lr(), 0.1);
    ASSERT_TRUE(p.has_lr_schedule());
    EXPECT_EQ(p.lr_schedule().decay(), "cosine");
    EXPECT_EQ(p.lr_schedule().decay_steps(), 3);
    EXPECT_FLOAT_EQ(p.instructions(Index(p, v1::Instruction::SGD)).lr(), 0.1f);  // the peak
  }
  spec.mutable_optimizer()->clear_schedule();
  EXPECT_FALSE(MustPlan(spec).at(0).has_lr_schedule());
}

// With an eval block, every program carries the evaluation's forward pass over the eval data:
// no dropout (gpt2's three sites at 0.1 in training), no backward, no update, over the training
// program's parameter buffers; its loss buffer is read after each eval batch.
TEST(PlannerTest, EvalIsAForwardPassOverTheTrainingParameters) {
  v1::JobSpec spec = testing::Gpt2Spec();
  v1::TransformerConfig* c = spec.mutable_model()->mutable_config();
  c->set_embd_pdrop(0.1);
  c->set_attn_pdrop(0.1);
  c->set_resid_pdrop(0.1);
  v1::Eval* eval = spec.mutable_eval();
  *eval->mutable_data() = spec.data();
  eval->mutable_data()->set_path("/nonexistent/val.bin");
  eval->mutable_data()->set_batch_size(4);
  eval->set_every(2);
  eval->set_batches(3);
  const v1::Program p = MustPlan(spec).at(0);
  ASSERT_TRUE(p.has_eval());
  EXPECT_EQ(p.eval().every(), 2);
  EXPECT_EQ(p.eval().batches(), 3);
  EXPECT_EQ(p.eval().data().path(), "/nonexistent/val.bin");
  EXPECT_GT(Count(p, v1::Instruction::DROPOUT), 0) << "training keeps its dropout";
  std::set<int> params;
  for (const v1::ParamInit& init : p.init()) {
    if (p.buffers(init.buffer()).role() == v1::Buffer::PARAM) params.insert(init.buffer());
  }
  std::set<int> read_params;
  int loads = 0;
  for (const v1::Instruction& ins : p.eval().instructions()) {
    EXPECT_NE(ins.op(), v1::Instruction::DROPOUT);
    EXPECT_NE(ins.phase(), v1::Instruction::BACKWARD);
    EXPECT_NE(ins.op(), v1::Instruction::ADAMW);
    EXPECT_NE(ins.op(), v1::Instruction::SUM_SQUARES);
    if (ins.op() == v1::Instruction::ATTENTION) {
      EXPECT_EQ(ins.dropout_p(), 0.0f);
    }
    if (ins.op() == v1::Instruction::LOAD_INPUT) {
      ++loads;
      EXPECT_EQ(p.buffers(ins.outputs(0)).shape(0), 4);  // the eval batch
    }
    for (int b : ins.inputs()) {
      if (p.buffers(b).role() == v1::Buffer::PARAM) {
        EXPECT_EQ(params.count(b), 1u) << "eval reads " << BufferName(p, b)
                                       << ", not the training program's parameter";
        read_params.insert(b);
      }
    }
  }
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(read_params.size(), params.size()) << "eval reads every parameter";
  EXPECT_EQ(p.buffers(p.eval().loss_buffer()).role(), v1::Buffer::LOSS);
  // Its activations share the arena with the training step's: far less than the two apart.
  spec.clear_eval();
  const v1::Program without = MustPlan(spec).at(0);
  EXPECT_EQ(p.instructions_size(), without.instructions_size());
  EXPECT_LT(p.arena_bytes(), without.arena_bytes() + ReportRank(p).peak_activation_bytes / 2);
}

}  // namespace
}  // namespace weft::planner
