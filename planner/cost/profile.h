// Pricing one instruction with a CostProfile (proto/weft/v1/profile.proto): the work it does
// (flops of a product, bytes of everything else, bytes sent on a link) times what the profile
// measured for that work on this kind of worker. The one place a cost is looked up: the
// simulator prices programs with it and calibration (worker/calibrate) fits in these units. A
// profile's file is common/cost_profile_json.h's.
//
// E.g.
//   KernelWork w = ComputeWork(program, program.instructions(7));    // MATMUL: 2 m n k flops
//   ASSIGN_OR_RETURN(double s, KernelSeconds(profile, w));
//   ASSIGN_OR_RETURN(double c, LinkSeconds(profile, v1::Instruction::ALL_REDUCE, /*group_size=*/4,
//                                          v1::LinkCost::INTER_HOST, /*bytes_sent=*/1 << 20));
#ifndef WEFT_PLANNER_COST_PROFILE_H_
#define WEFT_PLANNER_COST_PROFILE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "weft/v1/profile.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner::cost {

// The work of a local instruction: MATMUL 2 m n k flops (k from the operands' sizes, whatever
// their transposes: |a| |b| / |out| = k^2); ATTENTION 4 B H T^2 D flops and ATTENTION_GRAD twice
// that; every other op the bytes of the distinct buffers it reads and writes. dtype: the first
// input's storage dtype.
struct KernelWork {
  v1::KernelCost::Kind kind = v1::KernelCost::MEMORY;
  double units = 0;
  v1::DType dtype = v1::F32;
  bool bf16_products = false;  // a MATMUL of a program under `precision: bf16`
};
KernelWork ComputeWork(const v1::Program& program, const v1::Instruction& instruction);

// The fit for the work's kind and dtype (a dtype the profile lacks takes its F32 fit: bf16
// storage computes in float32); a MATMUL with bf16 products takes a fit timed under
// `precision: bf16` (KernelCost.precision) first, then the f32 ones. `tail`: the fit's 90th
// percentile rather than its median.
// NOT_FOUND names the kind the profile lacks.
absl::StatusOr<double> KernelSeconds(const v1::CostProfile& profile, const KernelWork& work,
                                     bool tail = false);

// One collective (or SEND) of `bytes_sent` (CollectiveBytes; a SEND its buffer) over a group of
// `group_size` ranks, 0 for a group of one. The profile's fit for the op, scope and size; for a
// size it lacks, the nearest one measured with alpha scaled by the ring's steps (K - 1); for an
// op it lacks, its ALL_REDUCE fit at that scope (bytes sent already count what each op moves).
// NOT_FOUND names the scope the profile has no link at.
absl::StatusOr<double> LinkSeconds(const v1::CostProfile& profile, v1::Instruction::Op op,
                                   int group_size, v1::LinkCost::Scope scope, int64_t bytes_sent,
                                   bool tail = false);

}  // namespace weft::planner::cost

#endif  // WEFT_PLANNER_COST_PROFILE_H_
