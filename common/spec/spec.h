// The job spec: YAML (the user's file) <-> weft.v1.JobSpec, and validation shared by weftctl and
// the coordinator's SubmitJob. Every validation error is INVALID_ARGUMENT (a missing file too)
// and names the field, e.g. "model.layers[2] (fc1).in_features: 4096 does not match the
// previous layer's output 1024".
#ifndef WEFT_COMMON_SPEC_SPEC_H_
#define WEFT_COMMON_SPEC_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "weft/v1/job.pb.h"

namespace weft {

// Parses YAML text. Relative paths (data.input, data.label, init_from, checkpoint.dir) are
// resolved against base_dir. Applies the documented defaults (bias true, data placements,
// optimizer betas/eps, device cpu, ...) and the parallelize shortcut (ApplyParallelize).
// Placements given by mesh dim name (`{mp: Shard(1)}`, unnamed dims Replicate()) become the
// positional list, the one representation in JobSpec. Checks structure and types only, not files.
absl::StatusOr<v1::JobSpec> ParseJobSpecYaml(absl::string_view yaml, const std::string& base_dir);

// Fills the documented defaults that proto3 leaves implicit: mesh dim names d0, d1, ...;
// linear bias true; loss mse; data placements Shard(0) on a dim named dp, Replicate elsewhere;
// adamw betas [0.9, 0.999]; device cpu; precision f32; checkpoint every 100 and keep 3 when it
// has a dir; with a pipeline (pipeline.dim set), micro_batches and virtual_stages 1 and, when any
// layer gives a stage, the stage of every layer that gives none: the previous layer's (the first
// layer's is 0).
// ParseJobSpecYaml calls it; the coordinator calls it on specs that arrive over gRPC without
// going through the YAML parser. Idempotent.
void ApplyJobSpecDefaults(v1::JobSpec* spec);

// Writes the `parallelize` shortcut into plain placements, so that the planner never reads it:
// on the entry's mesh dim, ColWiseParallel sets weight Shard(1) and bias Shard(0),
// RowWiseParallel weight Shard(0) and bias Replicate(); the other dims of a parameter without
// placements are Replicate(). A placement already on that dim must agree (an error names the
// layer and both placements). A missing layer, a non-linear layer, an unknown style or mesh dim:
// INVALID_ARGUMENT naming it. Idempotent; the parallelize field is kept. ParseJobSpecYaml,
// PrepareJobSpec and ValidateJobSpec call it.
absl::Status ApplyParallelize(v1::JobSpec* spec);

// Reads and parses a spec file; base_dir is the file's folder.
absl::StatusOr<v1::JobSpec> LoadJobSpecFile(const std::string& path);

// Everything that can be checked before planning: mesh, layer chain (in/out features), layer
// types, loss, optimizer, data (source, files exist and are float32 npy of matching shapes),
// init_from (a valid safetensors file, or a checkpoint folder with a committed checkpoint, whose
// tensors match every parameter's shape), checkpoint (dir absolute, every >= 1, keep >= 1),
// train.resume (needs checkpoint.dir holding a committed checkpoint before train.steps with every
// parameter and optimizer state of the model; init_from is then not read), parallelize,
// placements of parameters and of the batch (one per mesh dim, shard axes in range, no empty
// shards: uneven splits are fine, the last shard takes the remainder, but a global batch smaller
// than the number of shards it is split into is not), and the pipeline: its dim on the mesh, its
// schedule (FThenB | 1F1B | VPP) with micro_batches and virtual_stages that it can run (1F1B:
// micro_batches >= pp; VPP: virtual_stages > 1 and micro_batches a multiple of pp; others:
// virtual_stages 1), layer stages in [0, pp x virtual_stages) and non-decreasing with a linear
// layer in every stage (or, without stages, at least one linear layer per chunk), parameters and
// the batch Replicate() on the pipeline dim, and no micro-batch or shard of one left empty.
// A stage on a layer without a pipeline is an error. Run by the coordinator at SubmitJob, so it
// must not crash on anything.
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// For data.source npy: reads the .npy headers and fills data.sample_shape, data.label_shape and
// data.num_samples (the planner does no I/O). No-op for synthetic data.
absl::Status ResolveDataShapes(v1::JobSpec* spec);

// For a spec with a pipeline that passes ValidateJobSpec: the pipeline chunk of each model layer,
// in order, in [0, pp x virtual_stages). With stages given, they are the layers' stages (a layer
// without one takes the previous layer's); without, the linear layers are split into that many
// contiguous chunks with the smallest possible largest parameter count (ties: earlier chunks
// fuller), and a layer without parameters (relu, gelu) goes with the layer before it. Chunk c
// runs on position c mod pp along the pipeline dim (VPP's interleaved placement; with one chunk
// per rank, chunk c is on position c). The one definition of the split, for the planner and tests.
absl::StatusOr<std::vector<int>> PipelineLayerChunks(const v1::JobSpec& spec);

// Everything SubmitJob does to a spec before planning, in one place for the coordinator,
// `weftctl plan` and tests: ApplyJobSpecDefaults (a spec from gRPC has none applied),
// ApplyParallelize, ResolveDataShapes, then ValidateJobSpec. The result is what PlanJob takes.
absl::Status PrepareJobSpec(v1::JobSpec* spec);

// "Replicate()", "Shard(1)", "Shard(-1)", "Partial()", "Partial(sum)", "Partial(avg)".
absl::StatusOr<v1::Placement> ParsePlacement(absl::string_view text);
std::string FormatPlacement(const v1::Placement& placement);
std::string FormatPlacements(const google::protobuf::RepeatedPtrField<v1::Placement>& placements);

// Number of ranks the spec's mesh needs (product of mesh.shape).
int64_t WorldSize(const v1::JobSpec& spec);

// checkpoint.every and checkpoint.keep when the spec gives a checkpoint.dir without them.
inline constexpr int64_t kDefaultCheckpointEvery = 100;
inline constexpr int32_t kDefaultCheckpointKeep = 3;

// The states an optimizer keeps per parameter, in checkpoint order: adamw {"m", "v"}, sgd none.
std::vector<std::string> OptimizerStateNames(const std::string& optimizer);
// A state's tensor name in checkpoints: CheckpointStateName("fc0.weight", "adamw", "m") is
// "fc0.weight/adamw.m". Parameters keep their own name (fc0.weight).
std::string CheckpointStateName(const std::string& param, const std::string& optimizer,
                                const std::string& state);

// Where a job's starting state comes from besides its Programs' ParamInit.
struct CheckpointLoad {
  std::string step_dir;           // a committed step folder; empty: none
  int64_t step = 0;               // resume: the checkpoint's step (training goes on at step + 1)
  bool optimizer_states = false;  // resume: optimizer states too; init_from: parameters only
};
// train.resume: the newest committed checkpoint in checkpoint.dir (leftover staging folders there
// are removed). init_from naming a folder: that step folder, or the newest committed step of that
// checkpoint dir. Otherwise none. For a spec that passed ValidateJobSpec; errors name the field.
absl::StatusOr<CheckpointLoad> ResolveCheckpointLoad(const v1::JobSpec& spec);

}  // namespace weft

#endif  // WEFT_COMMON_SPEC_SPEC_H_
