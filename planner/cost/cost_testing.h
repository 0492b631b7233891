// Cost profiles with chosen figures, for tests: a kernel or link fit added in one line.
//
// E.g.
//   v1::CostProfile p;
//   AddKernel(&p, v1::KernelCost::MATMUL, /*alpha_s=*/1e-3, /*per_unit_s=*/1e-9);
//   AddLink(&p, v1::Instruction::ALL_REDUCE, v1::LinkCost::INTER_HOST, 5e-3, 1e-7);
#ifndef WEFT_PLANNER_COST_COST_TESTING_H_
#define WEFT_PLANNER_COST_COST_TESTING_H_

#include "weft/v1/profile.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner::cost {

inline v1::LinearFit Fit(double alpha_s, double per_unit_s, double tail_ratio = 1) {
  v1::LinearFit f;
  f.set_alpha_s(alpha_s);
  f.set_per_unit_s(per_unit_s);
  f.set_tail_ratio(tail_ratio);
  return f;
}

// An F32 kernel fit.
inline void AddKernel(v1::CostProfile* p, v1::KernelCost::Kind kind, double alpha_s,
                      double per_unit_s, double tail_ratio = 1) {
  v1::KernelCost* k = p->add_kernels();
  k->set_kind(kind);
  k->set_dtype(v1::F32);
  *k->mutable_fit() = Fit(alpha_s, per_unit_s, tail_ratio);
}

// A link fit measured over a group of `group_size`.
inline void AddLink(v1::CostProfile* p, v1::Instruction::Op op, v1::LinkCost::Scope scope,
                    double alpha_s, double per_unit_s, double tail_ratio = 1,
                    int group_size = 2) {
  v1::LinkCost* l = p->add_links();
  l->set_op(op);
  l->set_group_size(group_size);
  l->set_scope(scope);
  *l->mutable_fit() = Fit(alpha_s, per_unit_s, tail_ratio);
}

}  // namespace weft::planner::cost

#endif  // WEFT_PLANNER_COST_COST_TESTING_H_
