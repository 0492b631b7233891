// The documented defaults a spec leaves implicit, applied in one place: to a spec read from YAML
// (ParseJobSpecYaml) and to one that arrives over gRPC (the coordinator's SubmitJob).
//
// E.g.
//   ApplyJobSpecDefaults(&spec);   // idempotent
#ifndef WEFT_COMMON_JOBSPEC_DEFAULTS_H_
#define WEFT_COMMON_JOBSPEC_DEFAULTS_H_

#include <cstdint>

#include "common/jobspec/placements.h"
#include "weft/v1/job.pb.h"

namespace weft {

// checkpoint.every and checkpoint.keep when the spec gives a checkpoint.dir without them.
inline constexpr int64_t kDefaultCheckpointEvery = 100;
inline constexpr int32_t kDefaultCheckpointKeep = 3;
inline constexpr double kDefaultBucketMb = 25;  // DDP's bucket_cap_mb
// train.elastic.wait_s: how long a restarting elastic job waits for a replacement worker.
inline constexpr int32_t kDefaultElasticWaitSeconds = 30;

// Fills the documented defaults that proto3 leaves implicit: mesh dim names d0, d1, ...;
// linear bias true; loss mse (cross_entropy for a transformer, model.arch); gpt2 n_inner
// 4 * n_embd; data placements Shard(0) on a dim named dp, Replicate elsewhere;
// adamw betas [0.9, 0.999]; optimizer.weight_decay_params all; a schedule's decay constant and
// decay_steps train.steps; device cpu; precision and storage f32; checkpoint every 100 and keep
// 3 when it has a dir; train.elastic's min 1 and wait_s 30; with a pipeline (pipeline.dim set), micro_batches train.micro_batches
// (else 1), virtual_stages 1 and, when any layer gives a stage, the stage of every layer that
// gives none: the previous layer's (the first layer's is 0); eval's data.batch_size, seq_len
// (tokens) and placements the job data's, and eval.batches 1. Idempotent.
void ApplyJobSpecDefaults(v1::JobSpec* spec);

// The most micro-batches a step may have: planning time and memory grow faster than the
// micro-batches (a 4-stage MLP pipeline plans 256 in 0.7 s, 1024 in 4.4 s, 4096 in 36 s and
// 780 MB on 2 cores), and SubmitJob plans before it answers.
inline constexpr int32_t kMaxMicroBatches = 1024;

// The micro-batches of a step: train.micro_batches, or (none given) pipeline.micro_batches, else
// 1: one setting under two names (ValidateJobSpec refuses two different values).
int32_t EffectiveMicroBatches(const v1::JobSpec& spec);

// The batch's placements: data.placements, or (none given) Shard(0) on a mesh dim named dp and
// Replicate() elsewhere.
PlacementList EffectiveDataPlacements(const v1::JobSpec& spec);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_DEFAULTS_H_
