#include "planner/cost/profile.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/program.h"
#include "common/status.h"

namespace weft::planner::cost {
namespace {

double Elements(const v1::Program& p, int buffer) {
  return static_cast<double>(BufferElements(p.buffers(buffer)));
}

bool ValidBuffer(const v1::Program& p, int id) { return id >= 0 && id < p.buffers_size(); }

// The fit's time for `units`, its fixed cost paid `calls` times (a ring's steps); its 90th
// percentile with `tail`.
double Seconds(const v1::LinearFit& fit, double units, bool tail, double calls = 1) {
  const double median = fit.alpha_s() * calls + fit.per_unit_s() * units;
  return tail ? median * std::max(1.0, fit.tail_ratio()) : median;
}

}  // namespace

KernelWork ComputeWork(const v1::Program& p, const v1::Instruction& ins) {
  KernelWork work;
  for (int id : ins.inputs()) {
    if (ValidBuffer(p, id)) {
      work.dtype = p.buffers(id).dtype();
      break;
    }
  }
  switch (ins.op()) {
    case v1::Instruction::MATMUL:
      if (ins.inputs_size() >= 2 && ins.outputs_size() >= 1 && ValidBuffer(p, ins.inputs(0)) &&
          ValidBuffer(p, ins.inputs(1)) && ValidBuffer(p, ins.outputs(0))) {
        const double out = Elements(p, ins.outputs(0));
        const double k =
            out > 0 ? std::sqrt(Elements(p, ins.inputs(0)) * Elements(p, ins.inputs(1)) / out) : 0;
        work.kind = v1::KernelCost::MATMUL;
        work.bf16_products = p.precision() == "bf16";
        work.units = 2 * out * k;
        return work;
      }
      break;
    case v1::Instruction::ATTENTION:
    case v1::Instruction::ATTENTION_GRAD:
      if (ins.inputs_size() >= 1 && ValidBuffer(p, ins.inputs(0)) &&
          p.buffers(ins.inputs(0)).shape_size() == 4) {
        const auto& q = p.buffers(ins.inputs(0)).shape();  // [B, T, H, D]
        const double t = static_cast<double>(q[1]);
        work.kind = v1::KernelCost::ATTENTION;
        work.units = 4 * static_cast<double>(q[0]) * static_cast<double>(q[2]) * t * t *
                     static_cast<double>(q[3]) * (ins.op() == v1::Instruction::ATTENTION ? 1 : 2);
        return work;
      }
      break;
    default:
      break;
  }
  std::set<int> touched;
  const BufferAccess access = InstructionAccess(ins);
  touched.insert(access.reads.begin(), access.reads.end());
  touched.insert(access.writes.begin(), access.writes.end());
  work.kind = v1::KernelCost::MEMORY;
  for (int id : touched) {
    if (ValidBuffer(p, id)) work.units += static_cast<double>(BufferBytes(p.buffers(id)));
  }
  return work;
}

absl::StatusOr<double> KernelSeconds(const v1::CostProfile& profile, const KernelWork& work,
                                     bool tail) {
  // Best first: the products' precision and the dtype both as the work's (3), the precision with
  // the F32 fit (2), an f32-precision fit of the dtype (1), of F32 (0).
  const bool want_bf16 = work.kind == v1::KernelCost::MATMUL && work.bf16_products;
  const v1::KernelCost* best = nullptr;
  int best_score = -1;
  for (const v1::KernelCost& k : profile.kernels()) {
    if (k.kind() != work.kind) continue;
    const bool bf16 = k.precision() == "bf16";
    if (bf16 && !want_bf16) continue;
    if (k.dtype() != work.dtype && k.dtype() != v1::F32) continue;
    const int score = (bf16 == want_bf16 ? 2 : 0) + (k.dtype() == work.dtype ? 1 : 0);
    if (score > best_score) {
      best = &k;
      best_score = score;
    }
  }
  if (best != nullptr) return Seconds(best->fit(), work.units, tail);
  return absl::NotFoundError(absl::StrCat("cost profile (", profile.kind(), " on ",
                                          profile.host().empty() ? "any host" : profile.host(),
                                          ") has no ", v1::KernelCost::Kind_Name(work.kind),
                                          " kernel cost; calibrate it again"));
}

absl::StatusOr<double> LinkSeconds(const v1::CostProfile& profile, v1::Instruction::Op op,
                                   int group_size, v1::LinkCost::Scope scope, int64_t bytes_sent,
                                   bool tail) {
  if (group_size <= 1) return 0.0;
  // The nearest measured size of `want` at this scope, or null.
  auto nearest = [&](v1::Instruction::Op want) -> const v1::LinkCost* {
    const v1::LinkCost* best = nullptr;
    for (const v1::LinkCost& l : profile.links()) {
      if (l.op() != want || l.scope() != scope || l.group_size() < 2) continue;
      if (best == nullptr || std::abs(l.group_size() - group_size) <
                                 std::abs(best->group_size() - group_size)) {
        best = &l;
      }
    }
    return best;
  };
  const v1::LinkCost* link = nearest(op);
  if (link == nullptr) link = nearest(v1::Instruction::ALL_REDUCE);
  if (link == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "cost profile (", profile.kind(), ") has no ", v1::LinkCost::Scope_Name(scope),
        " link costs, which a group of ", group_size, " ranks needs; calibrate with workers ",
        scope == v1::LinkCost::INTER_HOST ? "on more than one host" : "sharing a host"));
  }
  const double steps = static_cast<double>(group_size - 1) / (link->group_size() - 1);
  return Seconds(link->fit(), static_cast<double>(bytes_sent), tail, steps);
}

}  // namespace weft::planner::cost
