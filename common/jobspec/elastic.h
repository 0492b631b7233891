// Train.elastic: the sizes an elastic mesh dim may take, and the spec an attempt runs at one of
// them. Resizing keeps the math: the global batch stays, and so does each micro-batch, because
// size x micro_batches stays as submitted (dp 4 x 1 micro-batch = dp 2 x 2 = dp 1 x 4).
//
// E.g.
//   std::vector<int> sizes = ElasticSizes(spec);              // {1, 2, 4}: dp 4, min 1, 1 mb
//   ASSIGN_OR_RETURN(v1::JobSpec at2, ResizedSpec(spec, 2));  // mesh dp 2, micro_batches 2
//   ASSIGN_OR_RETURN(v1::JobSpec now, AttemptSpec(job));      // at job.elastic_size()
#ifndef WEFT_COMMON_JOBSPEC_ELASTIC_H_
#define WEFT_COMMON_JOBSPEC_ELASTIC_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"

namespace weft {

// The index of train.elastic.dim in the mesh; -1 without train.elastic or for an unknown dim.
int ElasticDimIndex(const v1::JobSpec& spec);

// The elastic dim's size in the spec's mesh (the largest it runs at); 0 without train.elastic.
int ElasticSubmittedSize(const v1::JobSpec& spec);

// The sizes the elastic dim may take, ascending: from train.elastic.min up to the submitted size,
// each dividing submitted size x micro_batches, with at most kMaxMicroBatches micro-batches.
// Empty without train.elastic.
std::vector<int> ElasticSizes(const v1::JobSpec& spec);

// The micro-batches of a step at elastic size `size`: submitted size x micro_batches / size.
int32_t ElasticMicroBatches(const v1::JobSpec& spec, int size);

// The ranks of one unit of the elastic dim (the product of the other dims): an attempt at size s
// has s times this many.
int64_t ElasticRanksPerUnit(const v1::JobSpec& spec);

// `spec` with the elastic dim at `size` and the micro-batches (train's, and the pipeline's when
// it has one) raised or lowered to keep size x micro_batches, and without train.elastic: one
// attempt's fixed mesh, which the planner plans. INVALID_ARGUMENT for a size not in
// ElasticSizes.
absl::StatusOr<v1::JobSpec> ResizedSpec(const v1::JobSpec& spec, int size);

// The spec the job's current attempt runs: its spec at Job.elastic_size (0: as submitted).
absl::StatusOr<v1::JobSpec> AttemptSpec(const v1::Job& job);

// train.elastic on a spec with its defaults applied and its mesh, batch placements and pipeline
// checked: dim a mesh dim the batch is Shard(0) over, not the pipeline's, no parameter sharded
// and no parallelize plan on it (ZeRO may shard over it); min in 1..size with a size below the
// submitted one to shrink to; wait_s in 0..86400; train.max_restarts >= 1 (a shrink is a
// restart); checkpoint.dir set (a resize resumes from the newest checkpoint).
absl::Status ValidateElastic(const v1::JobSpec& spec);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_ELASTIC_H_
