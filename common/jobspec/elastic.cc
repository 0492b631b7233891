#include "common/jobspec/elastic.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/placements.h"

namespace weft {
namespace {

// Far above any wait a person would choose; keeps a typo from parking a job for years.
constexpr int32_t kMaxElasticWaitSeconds = 86400;

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("train.elastic.", message));
}

// The first placement list of a parameter that is not Replicate() on mesh dim `dim`, as
// "<where> <placement>"; empty when none.
std::string ParameterShardedOn(const v1::JobSpec& spec, int dim) {
  auto sharded = [&](const v1::PlacementList& list) {
    return list.placements_size() > dim &&
           list.placements(dim).kind() != v1::Placement::REPLICATE;
  };
  for (int i = 0; i < spec.model().layers_size(); ++i) {
    const v1::Layer& layer = spec.model().layers(i);
    for (const auto& [param, list] : layer.placements()) {
      if (sharded(list)) {
        return absl::StrCat("model.layers[", i, "] (", layer.name(), ").placements.", param, " ",
                            FormatPlacements(list.placements()));
      }
    }
  }
  for (const auto& [pattern, list] : spec.model().placements()) {
    if (sharded(list)) {
      return absl::StrCat("model.placements[\"", pattern, "\"] ",
                          FormatPlacements(list.placements()));
    }
  }
  return "";
}

}  // namespace

int ElasticDimIndex(const v1::JobSpec& spec) {
  if (!spec.train().has_elastic()) return -1;
  const auto& names = spec.mesh().dim_names();
  auto it = std::find(names.begin(), names.end(), spec.train().elastic().dim());
  if (it == names.end()) return -1;
  const int dim = static_cast<int>(it - names.begin());
  return dim < spec.mesh().shape_size() ? dim : -1;
}

int ElasticSubmittedSize(const v1::JobSpec& spec) {
  const int dim = ElasticDimIndex(spec);
  return dim < 0 ? 0 : static_cast<int>(spec.mesh().shape(dim));
}

int32_t ElasticMicroBatches(const v1::JobSpec& spec, int size) {
  return static_cast<int32_t>(int64_t{ElasticSubmittedSize(spec)} * EffectiveMicroBatches(spec) /
                              size);
}

int64_t ElasticRanksPerUnit(const v1::JobSpec& spec) {
  const int submitted = ElasticSubmittedSize(spec);
  return submitted == 0 ? 0 : WorldSize(spec) / submitted;
}

std::vector<int> ElasticSizes(const v1::JobSpec& spec) {
  const int submitted = ElasticSubmittedSize(spec);
  const int64_t slices = int64_t{submitted} * EffectiveMicroBatches(spec);
  std::vector<int> sizes;
  for (int s = std::max(1, spec.train().elastic().min()); s <= submitted; ++s) {
    if (slices % s == 0 && slices / s <= kMaxMicroBatches) sizes.push_back(s);
  }
  return sizes;
}

absl::StatusOr<v1::JobSpec> ResizedSpec(const v1::JobSpec& spec, int size) {
  const std::vector<int> sizes = ElasticSizes(spec);
  if (std::find(sizes.begin(), sizes.end(), size) == sizes.end()) {
    return Invalid(absl::StrCat("dim: ", spec.train().elastic().dim(), " cannot run at size ",
                                size, "; its sizes: ", absl::StrJoin(sizes, ", ")));
  }
  v1::JobSpec out = spec;
  out.mutable_mesh()->set_shape(ElasticDimIndex(spec), size);
  const int32_t micro_batches = ElasticMicroBatches(spec, size);
  out.mutable_train()->set_micro_batches(micro_batches);
  if (!out.pipeline().dim().empty()) out.mutable_pipeline()->set_micro_batches(micro_batches);
  // One attempt's fixed mesh: its sizes are the submitted spec's, not this one's.
  out.mutable_train()->clear_elastic();
  return out;
}

absl::StatusOr<v1::JobSpec> AttemptSpec(const v1::Job& job) {
  if (job.elastic_size() == 0 || job.elastic_size() == ElasticSubmittedSize(job.spec())) {
    return job.spec();
  }
  return ResizedSpec(job.spec(), job.elastic_size());
}

absl::Status ValidateElastic(const v1::JobSpec& spec) {
  if (!spec.train().has_elastic()) return absl::OkStatus();
  const v1::Elastic& elastic = spec.train().elastic();
  const int dim = ElasticDimIndex(spec);
  if (dim < 0) {
    return Invalid(absl::StrCat("dim: the mesh has no dim named \"", elastic.dim(),
                                "\" (dims: ", MeshDimList(spec.mesh()), ")"));
  }
  if (elastic.dim() == spec.pipeline().dim()) {
    return Invalid(absl::StrCat("dim: ", elastic.dim(),
                                " is the pipeline's dim; only a data-parallel dim can be resized"));
  }
  const PlacementList batch = EffectiveDataPlacements(spec);
  if (batch.size() <= dim || batch[dim].kind() != v1::Placement::SHARD || batch[dim].axis() != 0) {
    return Invalid(absl::StrCat(
        "dim: ", elastic.dim(), " is not data parallel: the batch is ",
        batch.size() > dim ? FormatPlacement(batch[dim]) : "Replicate()",
        " there (data.placements); resizing needs it Shard(0), each rank a part of the batch"));
  }
  for (const auto& [name, plan] : spec.parallelize()) {
    if (plan.dim() == elastic.dim()) {
      return Invalid(absl::StrCat("dim: ", elastic.dim(), " carries parallelize.", name,
                                  " (tensor parallelism); only a data-parallel dim is resized"));
    }
  }
  if (const std::string where = ParameterShardedOn(spec, dim); !where.empty()) {
    return Invalid(absl::StrCat("dim: ", elastic.dim(), " shards a parameter (", where,
                                "); only a data-parallel dim, over which parameters are "
                                "replicated (or ZeRO-sharded), is resized"));
  }
  const int submitted = ElasticSubmittedSize(spec);
  if (elastic.min() < 1 || elastic.min() > submitted) {
    return Invalid(absl::StrCat("min: must be in 1..", submitted, " (the mesh's ", elastic.dim(),
                                "), got ", elastic.min()));
  }
  const std::vector<int> sizes = ElasticSizes(spec);
  if (sizes.size() < 2) {
    return Invalid(absl::StrCat(
        "min: ", elastic.dim(), " ", submitted, " can shrink to no size >= ", elastic.min(),
        ": a size must divide ", elastic.dim(), " x micro_batches = ",
        int64_t{submitted} * EffectiveMicroBatches(spec), ", so that the global batch stays"));
  }
  if (elastic.wait_s() < 0 || elastic.wait_s() > kMaxElasticWaitSeconds) {
    return Invalid(absl::StrCat("wait_s: must be in 0..", kMaxElasticWaitSeconds, ", got ",
                                elastic.wait_s()));
  }
  if (spec.train().max_restarts() < 1) {
    return absl::InvalidArgumentError(
        "train.max_restarts: train.elastic needs >= 1: a shrink restarts the job from its newest "
        "checkpoint, and counts as a restart");
  }
  if (spec.checkpoint().dir().empty()) {
    return absl::InvalidArgumentError(
        "checkpoint.dir: train.elastic needs checkpoints: a resize resumes from the newest one");
  }
  return absl::OkStatus();
}

}  // namespace weft
