// Train.elastic in the coordinator, as decisions on counts: when a restarting job shrinks, when a
// running one grows, and the Resize event that says so. The Coordinator asks under its lock; the
// size is then the job's Job.elastic_size, its attempt's spec AttemptSpec(job), planned again off
// the lock before the attempt starts.
//
//   A worker is lost → the attempt restarts (a restart, JobRun) → the job waits RESTARTING.
//   wait_s later, still too few workers → ShrinkTo: the largest size whose ranks the workers of
//   its kind that are idle or winding down can take (never below min).
//   Running below its mesh, a checkpoint committed → GrowTo: the largest size its ranks plus the
//   idle workers of its kind can take; JobRun ends the attempt and the next resumes from that
//   checkpoint (not a restart).
//
// E.g.
//   if (std::optional<int> to = ShrinkTo(job, /*available=*/3, since_ms, now_ms)) { ... }  // 2
#ifndef WEFT_COORDINATOR_ELASTIC_H_
#define WEFT_COORDINATOR_ELASTIC_H_

#include <cstdint>
#include <optional>

#include "weft/v1/job.pb.h"

namespace weft::coordinator {

// The elastic dim's size the job's current attempt runs at: Job.elastic_size, or the spec's
// mesh; 0 without train.elastic.
int ElasticSize(const v1::Job& job);

// The size a job waiting to restart since `waiting_since_ms` shrinks to when `available` workers
// of its kind can take ranks: after train.elastic.wait_s, when its ranks do not fit them, the
// largest size that fits. nullopt: no train.elastic, the wait is not over, the ranks fit, or no
// smaller size does.
std::optional<int> ShrinkTo(const v1::Job& job, int64_t available, int64_t waiting_since_ms,
                            int64_t now_ms);

// The size a running job grows to at a checkpoint when `idle` workers of its kind are idle: the
// largest size above its current one, up to the spec's mesh, whose ranks its own and the idle
// workers can take. nullopt: none.
std::optional<int> GrowTo(const v1::Job& job, int64_t idle);

// The job's Resize event: its elastic dim from its current size to `to` (the next attempt's
// micro-batches and ranks), `step` the checkpoint a grow resumes from (0 for a shrink).
v1::JobEvent ResizeEvent(const v1::Job& job, int to, int64_t step, int64_t now_ms);

// The job at elastic size `to`, the resize added to its Job.resizes.
void ApplyResize(const v1::JobEvent& resize, v1::Job* job);

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_ELASTIC_H_
