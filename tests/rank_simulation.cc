#include "tests/rank_simulation.h"

#include <functional>
#include <limits>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "planner/pipeline/deadlock.h"
#include "planner/submit/submit.h"
#include "planner/planner.h"
#include "gtest/gtest.h"
#include "worker/comm/local/local_communicator.h"
#include "worker/executor/executor.h"

namespace weft::testing {
namespace {

// Rank `rank`'s whole run: create, initialize, every step, then read back its parameters.
void RunRank(const v1::Program& program, const std::shared_ptr<LocalWorld>& world, int rank,
             RankRun* out) {
  LocalCommunicatorFactory factory(world, rank);
  auto exec = Executor::Create(program, &factory);
  if (!exec.ok()) {
    out->status = exec.status();
    return;
  }
  out->status = (*exec)->Initialize();
  for (int64_t s = 1; out->status.ok() && s <= program.steps(); ++s) {
    auto loss = (*exec)->RunStep(s);
    if (!loss.ok()) {
      out->status = loss.status();
      break;
    }
    out->losses.push_back(*loss);
    out->grad_norms.push_back(
        (*exec)->last_step_grad_norm().value_or(std::numeric_limits<double>::quiet_NaN()));
  }
  if (!out->status.ok()) return;
  for (const v1::ParamInit& init : program.init()) {
    if (program.buffers(init.buffer()).role() != v1::Buffer::PARAM) continue;
    auto values = (*exec)->ReadBuffer(init.name());
    if (!values.ok()) {
      // Keep reading the others; the first failure is the rank's status.
      if (out->status.ok()) {
        out->status = absl::Status(values.status().code(),
                                   absl::StrCat("reading ", init.name(), " after the last step: ",
                                                values.status().message()));
      }
      continue;
    }
    ParamPiece piece;
    piece.values = *std::move(values);
    piece.global_shape.assign(init.global_shape().begin(), init.global_shape().end());
    piece.offsets.assign(init.box().offsets().begin(), init.box().offsets().end());
    piece.lengths.assign(init.box().lengths().begin(), init.box().lengths().end());
    piece.zeros_init = init.kind() == v1::ParamInit::ZEROS;
    out->params[init.name()] = std::move(piece);
  }
}

}  // namespace

std::vector<RankRun> SimulateRanks(const std::vector<v1::Program>& programs) {
  const int world_size = static_cast<int>(programs.size());
  auto world = std::make_shared<LocalWorld>(world_size, absl::Seconds(30));
  std::vector<RankRun> ranks(world_size);
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back(RunRank, std::cref(programs[r]), std::cref(world), r, &ranks[r]);
  }
  for (std::thread& t : threads) t.join();
  return ranks;
}

JobSimulation PlanAndSimulate(v1::JobSpec spec) {
  JobSimulation out;
  auto plan = planner::PrepareAndPlan(&spec, "sim", 0);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return out;
  auto programs = (*plan)->AllPrograms();
  EXPECT_TRUE(programs.ok()) << programs.status();
  if (!programs.ok()) return out;
  // Every rank against every other (PlanJob checked one rank per pipeline stage).
  EXPECT_TRUE(planner::pipeline::CheckTransfersMatch(*programs).ok());
  EXPECT_TRUE(planner::pipeline::CheckDeadlockFree(*programs).ok());
  for (const v1::Program& p : *programs) {
    for (const v1::Instruction& ins : p.instructions()) ++out.ops[ins.op()];
  }
  std::vector<RankRun> ranks = SimulateRanks(*programs);
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_TRUE(ranks[r].status.ok()) << "rank " << r << ": " << ranks[r].status;
    EXPECT_EQ(ranks[r].losses, ranks[0].losses)
        << "rank " << r << " reports a different loss than rank 0";
    // Bit for bit: the replicated parameters' updates depend on it (the clip coefficient).
    EXPECT_EQ(ranks[r].grad_norms, ranks[0].grad_norms)
        << "rank " << r << " reports a different gradient norm than rank 0";
    out.pieces.push_back(std::move(ranks[r].params));
  }
  if (!ranks.empty()) {
    out.losses = ranks[0].losses;
    out.grad_norms = ranks[0].grad_norms;
  }
  return out;
}

}  // namespace weft::testing
