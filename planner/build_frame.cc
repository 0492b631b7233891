#include "planner/build_frame.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/jobspec/defaults.h"
#include "common/status.h"

namespace weft::planner {
namespace {

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

absl::Status ReadOptimizer(const v1::JobSpec& spec, Graph* g) {
  const v1::Optimizer& opt = spec.optimizer();
  g->optimizer.type = opt.type();
  g->optimizer.lr = opt.lr();
  g->optimizer.eps = opt.eps();
  g->optimizer.weight_decay = opt.weight_decay();
  g->optimizer.decay_matrices_only = opt.weight_decay_params() == "matrices";
  g->optimizer.clip_grad_norm = opt.clip_grad_norm();
  if (opt.type() == "adamw") {
    if (opt.betas_size() != 2) return Invalid("optimizer.betas: adamw needs [beta1, beta2]");
    g->optimizer.beta1 = opt.betas(0);
    g->optimizer.beta2 = opt.betas(1);
  } else if (opt.type() != "sgd") {
    return Invalid(absl::StrCat("optimizer.type: unknown \"", opt.type(), "\""));
  }
  return absl::OkStatus();
}

absl::Status ReadPipeline(const v1::JobSpec& spec, Graph* g) {
  const v1::Pipeline& p = spec.pipeline();
  // Micro-batches are a setting of every job (gradient accumulation); a pipeline runs them.
  g->pipeline.micro_batches = EffectiveMicroBatches(spec);
  if (g->pipeline.micro_batches > spec.data().batch_size()) {
    return Invalid(absl::StrCat("train.micro_batches ", g->pipeline.micro_batches,
                                " is more than the data.batch_size ", spec.data().batch_size(),
                                ": a micro-batch would be empty"));
  }
  if (p.dim().empty()) return absl::OkStatus();
  std::optional<int> dim = g->mesh.FindDim(p.dim());
  if (!dim) {
    return Invalid(absl::StrCat("pipeline.dim \"", p.dim(), "\" is not a dim of the mesh ",
                                g->mesh.ToString()));
  }
  g->pipeline.dim = *dim;
  g->pipeline.schedule = p.schedule();
  g->pipeline.virtual_stages = std::max(1, p.virtual_stages());
  return absl::OkStatus();
}

absl::Status ReadSharding(const v1::JobSpec& spec, Graph* g) {
  const v1::Sharding& s = spec.sharding();
  if (s.dim().empty()) return absl::OkStatus();
  std::optional<int> dim = g->mesh.FindDim(s.dim());
  if (!dim) {
    return Invalid(absl::StrCat("sharding.dim \"", s.dim(), "\" is not a dim of the mesh ",
                                g->mesh.ToString()));
  }
  g->sharding.dim = *dim;  // the level was checked with the spec (ValidateJobSpec)
  g->sharding.level = s.level();
  return absl::OkStatus();
}

}  // namespace

absl::Status PrepareGraph(const v1::JobSpec& spec, Graph* g,
                          std::vector<Placement>* batch_placements) {
  ASSIGN_OR_RETURN(g->mesh, Mesh::FromProto(spec.mesh()));
  batch_placements->clear();
  for (const v1::Placement& p : EffectiveDataPlacements(spec)) {
    ASSIGN_OR_RETURN(Placement placement, Placement::FromProto(p));
    batch_placements->push_back(placement);
  }
  RETURN_IF_ERROR(ReadOptimizer(spec, g));
  RETURN_IF_ERROR(ReadSharding(spec, g));
  g->bucket_bytes = static_cast<int64_t>(spec.bucket_mb() * (1 << 20));  // defaulted with the spec
  g->storage = spec.storage() == "bf16" ? v1::BF16 : v1::F32;  // checked with the spec
  return ReadPipeline(spec, g);
}

Recompute ModelRecompute(const v1::Model& model) {
  if (model.recompute() == "full") return Recompute::kFull;
  if (model.recompute() == "selective") return Recompute::kSelective;
  return Recompute::kNone;
}

Recompute LayerRecompute(const v1::Model& model, const v1::Layer& layer) {
  const Recompute mode = ModelRecompute(model);
  if (!layer.has_recompute()) return mode;
  if (!layer.recompute()) return Recompute::kNone;
  return mode == Recompute::kNone ? Recompute::kFull : mode;
}

absl::StatusOr<int> AddLoadedBatch(Graph* g, const std::string& name, const Shape& shape,
                                   v1::DType dtype,
                                   const std::vector<Placement>& batch_placements,
                                   const std::string& load_op, const std::string& layer) {
  Tensor t{name, shape, dtype, v1::Buffer::DATA, layer};
  ASSIGN_OR_RETURN(t.dist, DistAttr::Create(g->mesh, batch_placements, shape.size()));
  if (g->micro_batches() > 1) t.micro = Placement::Shard(0);
  const int loaded = g->AddTensor(std::move(t));
  RETURN_IF_ERROR(g->AddOp(Op{load_op, {}, {loaded}, layer}));
  return loaded;
}

}  // namespace weft::planner
