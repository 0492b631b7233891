// Everything about a job spec that can be checked before its model is built: name, mesh, data
// (source, files and their shapes), the batch's placements, the pipeline block, optimizer, train,
// checkpoint settings, device and precision. The model (layers, parameters and their placements,
// how the pipeline chunks it) is checked by building it: the planner's graph builder, the one
// reader of JobSpec.model. init_from and train.resume are checked against the built model's
// parameters (CheckStartingState, starting_state.h). Every error is INVALID_ARGUMENT (a missing
// file too) and names the field, e.g. "data.batch_size: must be > 0, got 0". Run at SubmitJob, so
// nothing here may crash on any input.
//
// E.g.
//   RETURN_IF_ERROR(PrepareJobSpec(&spec));   // then planner::PlanJob(spec)
#ifndef WEFT_COMMON_JOBSPEC_VALIDATE_H_
#define WEFT_COMMON_JOBSPEC_VALIDATE_H_

#include <cstddef>

#include "absl/status/status.h"
#include "weft/v1/job.pb.h"

namespace weft {

// Bounds on what a client may submit: a job's name and its whole spec (serialized).
inline constexpr size_t kMaxJobNameBytes = 256;
inline constexpr size_t kMaxJobSpecBytes = size_t{1} << 20;
// The deepest model a spec may describe: planning takes time and memory that grow faster than
// the depth (a 256-block GPT-2 plans in seconds, a 1024-block one in minutes), and SubmitJob
// plans before it answers. Layers of model.layers; transformer blocks (n_layer,
// num_hidden_layers; the largest open models have about 130).
inline constexpr int kMaxModelLayers = 1024;
// train.max_restarts: each restart holds the job's workers again from its last checkpoint.
inline constexpr int kMaxRestarts = 100;
inline constexpr int64_t kMaxTransformerBlocks = 256;
// The most elements a batch (its inputs, or its labels) may hold: far beyond any machine, and
// small enough that no size derived from it (bytes, activations) overflows int64.
inline constexpr int64_t kMaxBatchElements = int64_t{1} << 40;

// The checks above, on a copy with the defaults applied (a spec from gRPC may leave them
// implicit). Pipeline: its dim on the mesh, its schedule (FThenB | 1F1B | VPP) with
// micro_batches and virtual_stages that it can run (1F1B: micro_batches >= pp; VPP:
// virtual_stages > 1 and micro_batches a multiple of pp; others: virtual_stages 1), the batch
// Replicate() on the pipeline dim, parallelize not on it, and no micro-batch or shard of one left
// empty. A stage on a layer without a pipeline is an error. Batch: one placement per mesh dim,
// shard axes in range, every shard at least one sample. Checkpoint: dir absolute, every >= 1,
// keep >= 1; train.resume needs checkpoint.dir holding a committed checkpoint before train.steps.
// train.elastic: ValidateElastic (elastic.h).
// init_from must exist (a safetensors file, or a folder with a committed checkpoint). Data: npy
// files of float32, int32 or int64 (loaded in their dtype, cast to float32 for the model),
// synthetic data float32, tokens a valid token file holding at least one sample (data.vocab_size
// 0 or model.config.vocab_size).
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// For data.source npy: reads the .npy headers and fills data.sample_shape, data.label_shape,
// data.num_samples and the input and label dtypes (the planner does no I/O). For tokens: opens
// the token file and fills the same from it and data.seq_len ([seq_len], I32), and
// data.vocab_size from model.config (a transformer), so workers reject ids past the vocabulary.
// No-op for synthetic data.
absl::Status ResolveDataShapes(v1::JobSpec* spec);

// Everything SubmitJob does to a spec before planning, in one place for the coordinator,
// `weftctl plan` and tests: ApplyJobSpecDefaults (a spec from gRPC has none applied),
// ApplyParallelize, ResolveDataShapes, then ValidateJobSpec.
absl::Status PrepareJobSpec(v1::JobSpec* spec);

// The spec an evaluation reads (spec must have an eval block): `spec` with eval.data as its
// data, no eval block, and every dropout probability 0. ValidateJobSpec checks eval.data as
// this spec's data; the planner builds the evaluation's forward pass from it.
v1::JobSpec EvalJobSpec(const v1::JobSpec& spec);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_VALIDATE_H_
