// Runs the planner's per-rank Programs with the real executor, every rank a thread of this
// process over in-process communicators (one shared LocalWorld), and returns what each rank saw:
// its status, its per-step losses, and its piece of every parameter after the last step. The
// harness of the simulated tests; the tests make their own assertions on the result.
//
// E.g.
//   ASSIGN_OR_RETURN(std::vector<v1::Program> programs, planner::PlanJob(spec, "sim", 0));
//   std::vector<RankRun> ranks = SimulateRanks(programs);
//   for (const RankRun& rank : ranks) EXPECT_TRUE(rank.status.ok()) << rank.status;
//   const ParamPiece& w = ranks[0].params.at("fc0.weight");  // w.offsets, w.lengths, w.values
//
//   JobSimulation sim = PlanAndSimulate(spec);  // the same from a JobSpec, checked as it runs
#ifndef WEFT_TESTS_RANK_SIMULATION_H_
#define WEFT_TESTS_RANK_SIMULATION_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::testing {

// One rank's piece of a parameter after training, and where it lies in the global tensor.
struct ParamPiece {
  std::vector<float> values;
  std::vector<int64_t> global_shape, offsets, lengths;
  bool zeros_init = false;  // a Partial(sum) parameter not held by this rank
};

// What one rank reported. On an error, status says where and losses / params hold what came
// before it.
struct RankRun {
  absl::Status status;
  std::vector<double> losses;                // one per step
  std::vector<double> grad_norms;            // one per step (NaN: the program has no norm)
  std::map<std::string, ParamPiece> params;  // by parameter name; PARAM buffers only
};

// Runs programs[r] as global rank r, all ranks at once, each to Program.steps; indexed by rank.
// Collectives that wait longer than 30 s fail with DEADLINE_EXCEEDED rather than hang.
std::vector<RankRun> SimulateRanks(const std::vector<v1::Program>& programs);

// A whole job simulated: rank 0's losses, every rank's parameter pieces, and the instruction
// counts of the plan (all ranks).
struct JobSimulation {
  std::vector<double> losses;
  std::vector<double> grad_norms;  // rank 0's; every rank's is the same
  std::vector<std::map<std::string, ParamPiece>> pieces;  // by rank
  std::map<v1::Instruction::Op, int> ops;
};

// PrepareJobSpec, PlanJob, then SimulateRanks; fails the calling test on any error or on ranks
// disagreeing about a loss or a gradient norm (what came before an error is returned).
JobSimulation PlanAndSimulate(v1::JobSpec spec);

// The box `piece` covers of a row-major tensor of piece.global_shape (1-d or 2-d), as float64.
template <typename T>
std::vector<double> SliceBox(const std::vector<T>& full, const ParamPiece& piece) {
  std::vector<double> out;
  if (piece.global_shape.size() == 1) {
    for (int64_t i = 0; i < piece.lengths[0]; ++i) out.push_back(full[piece.offsets[0] + i]);
    return out;
  }
  const int64_t cols = piece.global_shape[1];
  for (int64_t i = 0; i < piece.lengths[0]; ++i) {
    for (int64_t j = 0; j < piece.lengths[1]; ++j) {
      out.push_back(full[(piece.offsets[0] + i) * cols + piece.offsets[1] + j]);
    }
  }
  return out;
}

}  // namespace weft::testing

#endif  // WEFT_TESTS_RANK_SIMULATION_H_
