// The pipeline pass through PlanJob: programs that follow the schedule, transfers that match
// and cannot deadlock, accumulation and a single optimizer step, memory per schedule, and the
// specs it must reject.
#include "planner/pipeline/pipeline.h"

#include <gtest/gtest.h>

#include "planner/pipeline/deadlock.h"
#include "planner/pipeline/schedule.h"
#include "planner/plan_report.h"
#include "planner/planner.h"
#include "planner/test_util.h"

namespace weft::planner::pipeline {
namespace {

using planner::testing::Count;
using planner::testing::MustPlan;
using planner::testing::R;
using planner::testing::S;
using planner::testing::SpecBuilder;

// fc0..fc7 (width 8) with relu between, batch 16.
v1::JobSpec Mlp(std::vector<int64_t> mesh, std::vector<std::string> names,
                const std::string& schedule, int micro_batches, int virtual_stages = 1) {
  SpecBuilder b(std::move(mesh), std::move(names));
  b.Batch(16, {8}, {8});
  for (int i = 0; i < 8; ++i) {
    b.Linear("fc" + std::to_string(i), 8, 8);
    if (i < 7) b.Act("act" + std::to_string(i), "relu");
  }
  v1::JobSpec spec = b.Spec();
  spec.mutable_pipeline()->set_dim("pp");
  spec.mutable_pipeline()->set_schedule(schedule);
  spec.mutable_pipeline()->set_micro_batches(micro_batches);
  spec.mutable_pipeline()->set_virtual_stages(virtual_stages);
  return spec;
}

// The (F|B, micro-batch, chunk) order of a program's compute instructions, as FormatOrder
// writes a schedule (without step brackets).
std::string ComputeOrder(const v1::Program& p) {
  std::vector<ScheduleStep> order;
  WorkItem last{WorkItem::kForward, -1, -1};
  for (const v1::Instruction& ins : p.instructions()) {
    if (ins.op() == v1::Instruction::SEND || ins.op() == v1::Instruction::RECV) continue;
    if (ins.micro_batch() < 0) continue;
    WorkItem item{ins.phase() == v1::Instruction::BACKWARD ? WorkItem::kBackward
                                                           : WorkItem::kForward,
                  ins.micro_batch(), ins.chunk()};
    if (item != last) order.push_back({item});
    last = item;
  }
  return FormatOrder(order, true);
}

std::string ScheduleOrder(const std::string& name, PipelineShape shape, int stage) {
  std::vector<ScheduleStep> steps;
  for (const WorkItem& item : Flatten((*ScheduleByName(name))->Order(shape, stage))) {
    steps.push_back({item});
  }
  return FormatOrder(steps, true);
}

struct Case {
  std::string schedule;
  int pp, m, v;
};

TEST(PipelinePlanTest, ProgramsFollowTheScheduleAndTransfersMatch) {
  for (const Case& c : {Case{"FThenB", 4, 4, 1}, Case{"FThenB", 4, 8, 1}, Case{"1F1B", 4, 4, 1},
                        Case{"1F1B", 4, 8, 1}, Case{"1F1B", 2, 5, 1}, Case{"VPP", 2, 4, 2},
                        Case{"VPP", 4, 8, 2}, Case{"VPP", 2, 6, 4}}) {
    SCOPED_TRACE(c.schedule + " pp=" + std::to_string(c.pp) + " m=" + std::to_string(c.m) +
                 " v=" + std::to_string(c.v));
    std::vector<v1::Program> programs = MustPlan(Mlp({c.pp}, {"pp"}, c.schedule, c.m, c.v));
    ASSERT_EQ(programs.size(), static_cast<size_t>(c.pp));
    EXPECT_TRUE(CheckTransfersMatch(programs).ok()) << CheckTransfersMatch(programs);
    EXPECT_TRUE(CheckDeadlockFree(programs).ok()) << CheckDeadlockFree(programs);
    const int chunks = c.pp * c.v;
    for (int r = 0; r < c.pp; ++r) {
      const v1::Program& p = programs[r];
      EXPECT_EQ(ComputeOrder(p), ScheduleOrder(c.schedule, {c.pp, c.m, c.v}, r)) << "rank " << r;
      // Each chunk sends its activation forward and its input gradient back, per micro-batch.
      int sends = 0;
      for (int chunk = r; chunk < chunks; chunk += c.pp) {
        sends += (chunk < chunks - 1 ? c.m : 0) + (chunk > 0 ? c.m : 0);
      }
      EXPECT_EQ(Count(p, v1::Instruction::SEND), sends) << "rank " << r;
      EXPECT_EQ(Count(p, v1::Instruction::RECV), sends) << "rank " << r;
      // One optimizer step per parameter per global batch; one ACCUMULATE per micro-batch.
      const int params = 2 * 8 / chunks * c.v;
      EXPECT_EQ(Count(p, v1::Instruction::SGD), params) << "rank " << r;
      EXPECT_EQ(Count(p, v1::Instruction::FILL), params + 1) << "rank " << r;
      for (const v1::Instruction& ins : p.instructions()) {
        if (ins.op() == v1::Instruction::SEND || ins.op() == v1::Instruction::RECV) {
          EXPECT_GE(ins.micro_batch(), 0);
          EXPECT_NE(ins.phase(), v1::Instruction::PHASE_UNSPECIFIED);
        }
        if (ins.op() == v1::Instruction::SGD) {
          EXPECT_EQ(ins.phase(), v1::Instruction::OPTIMIZER);
        }
      }
      // The loss is summed over the pipeline dim, the last communication of the step (started
      // as soon as the last micro-batch's loss is in: before the optimizer's updates).
      int last_communication = -1;
      for (int i = 0; i < p.instructions_size(); ++i) {
        const v1::Instruction::Op op = p.instructions(i).op();
        if (op == v1::Instruction::SEND || op == v1::Instruction::RECV ||
            op == v1::Instruction::ALL_REDUCE) {
          last_communication = i;
        }
      }
      ASSERT_GE(last_communication, 0);
      const v1::Instruction& last = p.instructions(last_communication);
      EXPECT_EQ(last.op(), v1::Instruction::ALL_REDUCE);
      EXPECT_EQ(last.outputs(0), p.loss_buffer());
    }
  }
}

TEST(PipelinePlanTest, MicroBatchesLoadTheirRowsOfTheBatch) {
  // Batch 16 in 3 micro-batches: rows 0-4, 5-9, 10-15; then dp halves each.
  v1::JobSpec spec = Mlp({2, 2}, {"pp", "dp"}, "FThenB", 3);
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 4u);
  std::vector<std::pair<int64_t, int64_t>> rows;  // rank 1 (stage 0, dp 1)
  for (const v1::Instruction& ins : programs[1].instructions()) {
    if (ins.op() == v1::Instruction::LOAD_INPUT) {
      rows.emplace_back(ins.box().offsets(0), ins.box().lengths(0));
    }
  }
  EXPECT_EQ(rows, (std::vector<std::pair<int64_t, int64_t>>{{2, 3}, {7, 3}, {13, 3}}));
  // Labels on the last stage only.
  EXPECT_EQ(Count(programs[0], v1::Instruction::LOAD_LABEL), 0);
  EXPECT_EQ(Count(programs[2], v1::Instruction::LOAD_LABEL), 3);
}

TEST(PipelinePlanTest, DataParallelStagesAllReduceGradientsOncePerStep) {
  std::vector<v1::Program> programs = MustPlan(Mlp({2, 2}, {"pp", "dp"}, "1F1B", 4));
  ASSERT_EQ(programs.size(), 4u);
  for (const v1::Program& p : programs) {
    int dp_all_reduce = 0;
    for (const v1::Instruction& ins : p.instructions()) {
      if (ins.op() != v1::Instruction::ALL_REDUCE) continue;
      for (const v1::CommGroup& g : p.groups()) {
        if (g.id() == ins.group() && g.mesh_dims() == "dp") {
          ++dp_all_reduce;
          EXPECT_EQ(ins.micro_batch(), -1);
        }
      }
    }
    // 4 layers x (weight, bias) per stage, plus the loss on the last stage.
    EXPECT_EQ(dp_all_reduce, 8 + (p.rank() >= 2 ? 1 : 0)) << "rank " << p.rank();
  }
}

TEST(PipelinePlanTest, OneFOneBNeedsLessActivationMemoryThanFThenB) {
  PlanReport fthenb = ReportPlan(MustPlan(Mlp({4}, {"pp"}, "FThenB", 8)));
  PlanReport one = ReportPlan(MustPlan(Mlp({4}, {"pp"}, "1F1B", 8)));
  ASSERT_EQ(fthenb.ranks.size(), 4u);
  ASSERT_EQ(one.ranks.size(), 4u);
  // Stage 0 holds 8 micro-batches' activations with FThenB, at most 4 with 1F1B.
  const int64_t a = fthenb.ranks[0].peak_activation_bytes;
  const int64_t b = one.ranks[0].peak_activation_bytes;
  EXPECT_GT(a, b);
  EXPECT_GE(static_cast<double>(a) / b, 1.6) << a << " vs " << b;
  // The last stage runs F then B per micro-batch in 1F1B: about one micro-batch alive.
  EXPECT_LT(one.ranks[3].peak_activation_bytes, fthenb.ranks[3].peak_activation_bytes);
  // Sends are reported with their bytes: 2 rows x 8 floats per micro-batch boundary.
  int64_t sent = 0;
  for (const CollectiveReport& c : one.ranks[0].collectives) {
    if (c.op == "SEND") sent += c.bytes_sent;
  }
  EXPECT_EQ(sent, 8 * 2 * 8 * 4);
}

TEST(PipelinePlanTest, MegatronPlacementsInsideStages) {
  v1::JobSpec spec = Mlp({2, 2}, {"pp", "mp"}, "1F1B", 2);
  for (int i = 0; i < spec.model().layers_size(); ++i) {
    v1::Layer* l = spec.mutable_model()->mutable_layers(i);
    if (l->type() != "linear") continue;
    const int k = std::stoi(l->name().substr(2));
    v1::PlacementList& w = (*l->mutable_placements())["weight"];
    *w.add_placements() = R.ToProto();
    *w.add_placements() = (k % 2 == 0 ? S(1) : S(0)).ToProto();
    if (k % 2 == 0) {
      v1::PlacementList& b = (*l->mutable_placements())["bias"];
      *b.add_placements() = R.ToProto();
      *b.add_placements() = S(0).ToProto();
    }
  }
  std::vector<v1::Program> programs = MustPlan(spec);
  ASSERT_EQ(programs.size(), 4u);
  EXPECT_TRUE(CheckDeadlockFree(programs).ok());
  // Row-parallel outputs are all-reduced over mp inside each stage, per micro-batch.
  int mp_all_reduce = 0;
  for (const v1::Instruction& ins : programs[0].instructions()) {
    if (ins.op() == v1::Instruction::ALL_REDUCE && ins.micro_batch() >= 0) ++mp_all_reduce;
  }
  EXPECT_GT(mp_all_reduce, 0);
}

void ExpectRejected(const v1::JobSpec& spec, const std::string& why) {
  auto programs = PlanJob(spec, "t", 0);
  ASSERT_FALSE(programs.ok()) << why;
  EXPECT_EQ(programs.status().code(), absl::StatusCode::kInvalidArgument) << programs.status();
  EXPECT_NE(programs.status().message().find(why), std::string::npos) << programs.status();
}

TEST(PipelinePlanTest, RejectsUnschedulableSpecs) {
  v1::JobSpec spec = Mlp({4}, {"pp"}, "1F1B", 4);
  spec.mutable_pipeline()->set_dim("stages");
  ExpectRejected(spec, "pipeline.dim \"stages\" is not a dim of the mesh");
  ExpectRejected(Mlp({4}, {"pp"}, "1F1B", 2), "micro_batches 2 is fewer than the 4 stages");
  ExpectRejected(Mlp({4}, {"pp"}, "VPP", 4, 1), "virtual_stages must be >= 2");
  ExpectRejected(Mlp({4}, {"pp"}, "1F1B", 4, 2), "needs schedule VPP");
  ExpectRejected(Mlp({4}, {"pp"}, "VPP", 6, 2), "multiple of the 4 stages");
  ExpectRejected(Mlp({4}, {"pp"}, "VPP", 4, 4), "8 linear layer(s) cannot fill");
  ExpectRejected(Mlp({4}, {"pp"}, "FThenB", 32), "more than the data.batch_size 16");
  spec = Mlp({2}, {"pp"}, "FThenB", 2);
  for (int i = 0; i < spec.model().layers_size(); ++i) {
    spec.mutable_model()->mutable_layers(i)->set_stage(i == 0 ? 2 : 1);
  }
  ExpectRejected(spec, ".stage: 2 is out of range");
  for (int i = 0; i < spec.model().layers_size(); ++i) {
    spec.mutable_model()->mutable_layers(i)->set_stage(i < 3 ? 1 : 0);
  }
  ExpectRejected(spec, "stages must not decrease");
  spec = Mlp({2, 2}, {"pp", "dp"}, "FThenB", 2);
  v1::PlacementList& w = (*spec.mutable_model()->mutable_layers(0)->mutable_placements())["weight"];
  *w.add_placements() = S(0).ToProto();
  *w.add_placements() = R.ToProto();
  ExpectRejected(spec, "placement on the pipeline dim pp must be Replicate()");
}

}  // namespace
}  // namespace weft::planner::pipeline
