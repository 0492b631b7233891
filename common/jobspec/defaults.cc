#include "common/jobspec/defaults.h"

#include <algorithm>

#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/transformer_config.h"

namespace weft {

using v1::JobSpec;
using v1::Placement;

int32_t EffectiveMicroBatches(const JobSpec& spec) {
  if (spec.train().micro_batches() > 0) return spec.train().micro_batches();
  return std::max(1, spec.pipeline().micro_batches());
}

PlacementList EffectiveDataPlacements(const JobSpec& spec) {
  if (spec.data().placements_size() > 0) return spec.data().placements();
  PlacementList out;
  for (int i = 0; i < spec.mesh().shape_size(); ++i) {
    Placement* p = out.Add();
    if (i < spec.mesh().dim_names_size() && spec.mesh().dim_names(i) == "dp") {
      p->set_kind(Placement::SHARD);
      p->set_axis(0);
    } else {
      p->set_kind(Placement::REPLICATE);
    }
  }
  return out;
}

void ApplyJobSpecDefaults(JobSpec* spec) {
  v1::Mesh* mesh = spec->mutable_mesh();
  DefaultMeshDimNames(mesh);
  v1::Model* model = spec->mutable_model();
  for (v1::Layer& layer : *model->mutable_layers()) {
    if (layer.type() == "linear" && !layer.has_bias()) layer.set_bias(true);
  }
  // A transformer (model.arch) predicts tokens; a layers model regresses.
  if (model->loss().empty()) model->set_loss(model->arch().empty() ? "mse" : "cross_entropy");
  if (!model->arch().empty()) ResolveTransformerConfig(model->arch(), model->mutable_config());
  v1::Data* data = spec->mutable_data();
  if (data->placements_size() == 0 && mesh->dim_names_size() == mesh->shape_size()) {
    *data->mutable_placements() = EffectiveDataPlacements(*spec);
  }
  v1::Optimizer* opt = spec->mutable_optimizer();
  if (opt->type() == "adamw" && opt->betas_size() == 0) {
    opt->add_betas(0.9);
    opt->add_betas(0.999);
  }
  if (opt->weight_decay_params().empty()) opt->set_weight_decay_params("all");
  if (opt->has_schedule()) {
    v1::LrSchedule* schedule = opt->mutable_schedule();
    if (schedule->decay().empty()) schedule->set_decay("constant");
    if (schedule->decay_steps() == 0) schedule->set_decay_steps(spec->train().steps());
  }
  if (spec->has_eval()) {
    v1::Data* eval = spec->mutable_eval()->mutable_data();
    if (eval->batch_size() == 0) eval->set_batch_size(data->batch_size());
    if (eval->seq_len() == 0 && eval->source() == "tokens") eval->set_seq_len(data->seq_len());
    if (eval->placements_size() == 0) *eval->mutable_placements() = data->placements();
    if (spec->eval().batches() == 0) spec->mutable_eval()->set_batches(1);
  }
  if (spec->device().empty()) spec->set_device("cpu");
  if (spec->precision().empty()) spec->set_precision("f32");
  if (spec->storage().empty()) spec->set_storage("f32");
  if (!spec->has_bucket_mb()) spec->set_bucket_mb(kDefaultBucketMb);
  if (spec->train().has_elastic()) {
    v1::Elastic* elastic = spec->mutable_train()->mutable_elastic();
    if (elastic->min() == 0) elastic->set_min(1);
    if (!elastic->has_wait_s()) elastic->set_wait_s(kDefaultElasticWaitSeconds);
  }
  if (!spec->checkpoint().dir().empty()) {
    v1::Checkpoint* checkpoint = spec->mutable_checkpoint();
    if (checkpoint->every() == 0) checkpoint->set_every(kDefaultCheckpointEvery);
    if (checkpoint->keep() == 0) checkpoint->set_keep(kDefaultCheckpointKeep);
  }
  // Pipeline counts default to 1; with stages given, a layer without one is in the previous
  // layer's stage (the first layer's is 0), so the planner reads a stage on every layer.
  if (!spec->pipeline().dim().empty()) {
    v1::Pipeline* pipeline = spec->mutable_pipeline();
    // One setting under two names (EffectiveMicroBatches): a pipeline reads train's; two
    // different values stay for ValidateJobSpec to name.
    if (pipeline->micro_batches() == 0) pipeline->set_micro_batches(EffectiveMicroBatches(*spec));
    if (pipeline->virtual_stages() == 0) pipeline->set_virtual_stages(1);
    const bool any_stage = std::any_of(model->layers().begin(), model->layers().end(),
                                       [](const v1::Layer& layer) { return layer.has_stage(); });
    if (any_stage) {
      int32_t previous = 0;
      for (v1::Layer& layer : *model->mutable_layers()) {
        if (!layer.has_stage()) layer.set_stage(previous);
        previous = layer.stage();
      }
    }
  }
}

}  // namespace weft
