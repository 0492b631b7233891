// layer_norm (x, gamma, beta) and rms_norm (x, gamma): each row of x [.., C] normalized over its
// last axis, then scaled (and shifted) per column. A row needs all of its C values, so the last
// axis is never split; any other axis i may be. Per mesh dim:
//   x[R],    gamma[R], (beta[R]) -> y[R]
//   x[S(i)], gamma[R], (beta[R]) -> y[S(i)]       i < last (sequence parallelism: i = 1)
// Not linear in x: a Partial x is reduced first.
// Gradients: (x, gamma, dy) -> (dx, dgamma[, dbeta]):
//   x[R],    gamma[R], dy[R]    -> dx[R],    dgamma[R], dbeta[R]
//   x[S(i)], gamma[R], dy[S(i)] -> dx[S(i)], dgamma[P], dbeta[P]   each rank's rows give a term
//   x[R],    gamma[R], dy[P]    -> dx[P],    dgamma[P], dbeta[P]   linear in dy
// VJP: layer_norm -> layer_norm_grad(x, gamma, dy); rms_norm -> rms_norm_grad(x, gamma, dy).
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "planner/autodiff.h"
#include "planner/rules/rules.h"

namespace weft::planner {
namespace {

// params: how many per-column parameters follow x (gamma; gamma and beta).
absl::Status CheckNorm(const OpSignature& sig, size_t params) {
  if (sig.input_shapes.size() != 1 + params || sig.output_shapes.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("takes x and ", params, " parameter(s)"));
  }
  const Shape& x = sig.input_shapes[0];
  for (size_t p = 1; p <= params; ++p) {
    if (sig.input_shapes[p] != Shape{x.back()}) {
      return absl::InvalidArgumentError("a norm's parameters are [C], C = x's last axis");
    }
  }
  return absl::OkStatus();
}

std::function<absl::StatusOr<std::vector<DimStrategy>>(const OpSignature&)> NormStrategies(
    size_t params) {
  return [params](const OpSignature& sig) -> absl::StatusOr<std::vector<DimStrategy>> {
    RETURN_IF_ERROR(CheckNorm(sig, params));
    const int r = static_cast<int>(sig.input_shapes[0].size());
    const Placement R = Placement::Replicate();
    std::vector<DimStrategy> out;
    std::vector<Placement> in(1 + params, R);
    out.push_back({in, {R}});
    for (int i = 0; i + 1 < r; ++i) {
      in[0] = Placement::Shard(i);
      out.push_back({in, {Placement::Shard(i)}});
    }
    return out;
  };
}

// Inputs x, gamma, dy; outputs dx and `params` parameter gradients.
std::function<absl::StatusOr<std::vector<DimStrategy>>(const OpSignature&)> NormGradStrategies(
    size_t params) {
  return [params](const OpSignature& sig) -> absl::StatusOr<std::vector<DimStrategy>> {
    if (sig.input_shapes.size() != 3 || sig.output_shapes.size() != 1 + params ||
        sig.input_shapes[0] != sig.input_shapes[2]) {
      return absl::InvalidArgumentError("takes x, gamma and dy of x's shape");
    }
    const int r = static_cast<int>(sig.input_shapes[0].size());
    const Placement R = Placement::Replicate(), P = Placement::Partial();
    std::vector<DimStrategy> out;
    auto outputs = [&](Placement dx, Placement dparam) {
      std::vector<Placement> o = {dx};
      for (size_t p = 0; p < params; ++p) o.push_back(dparam);
      return o;
    };
    out.push_back({{R, R, R}, outputs(R, R)});
    for (int i = 0; i + 1 < r; ++i) {
      const Placement s = Placement::Shard(i);
      out.push_back({{s, R, s}, outputs(s, P)});
    }
    out.push_back({{R, R, P}, outputs(P, P)});
    return out;
  };
}

VjpFn NormVjp(std::string grad_op) {
  return [grad_op](GradBuilder& b) -> absl::Status {
    const Op& op = b.op();
    const std::vector<int>& in = op.inputs;  // x, gamma[, beta]
    ASSIGN_OR_RETURN(const int x, b.input(0));
    ASSIGN_OR_RETURN(const int gamma, b.input(1));
    ASSIGN_OR_RETURN(std::vector<int> grads,
                     b.EmitMulti(grad_op, {x, gamma, b.out_grad(0)}, in,
                                 {{"eps", op.attrs.Float("eps")}}));
    for (size_t i = 0; i < in.size(); ++i) {
      if (b.needs_grad(static_cast<int>(i))) b.set_input_grad(static_cast<int>(i), grads[i]);
    }
    return absl::OkStatus();
  };
}

}  // namespace

absl::Status RegisterNormRules(RuleRegistry* registry) {
  RETURN_IF_ERROR(
      registry->Register("layer_norm", {NormStrategies(2), NormVjp("layer_norm_grad")}));
  RETURN_IF_ERROR(registry->Register("layer_norm_grad", {NormGradStrategies(2), nullptr}));
  RETURN_IF_ERROR(registry->Register("rms_norm", {NormStrategies(1), NormVjp("rms_norm_grad")}));
  return registry->Register("rms_norm_grad", {NormGradStrategies(1), nullptr});
}

}  // namespace weft::planner
