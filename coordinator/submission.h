// What SubmitJob does before a job is stored, and Create for the jobs a previous coordinator left,
// all off the coordinator's lock: read the request, prepare the spec, plan it.
//
// SpecOfRequest: what a SubmitJobRequest asks to run: its spec, or its spec_yaml read as weftctl reads a spec
// file (ParseJobSpecYaml). A spec_yaml's relative paths are resolved against spec_dir when given
// (the client sees the cluster's files at the same paths), else as the cluster sees them: data
// paths, init_from and model.config_file against roots.data, checkpoint.dir against
// roots.checkpoint. A model.config_file is read only under roots.data.
//
// E.g.
//   ASSIGN_OR_RETURN(v1::JobSpec spec, SpecOfRequest(request, options.roots));
//   ASSIGN_OR_RETURN(Submission submission, PrepareSubmission(spec, options, stop));
#ifndef WEFT_COORDINATOR_SUBMISSION_H_
#define WEFT_COORDINATOR_SUBMISSION_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "common/path_roots.h"
#include "coordinator/coordinator_options.h"
#include "coordinator/job_plan.h"
#include "coordinator/job_store.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/profile.pb.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

// INVALID_ARGUMENT for both spec and spec_yaml, a spec_yaml over 1 MiB, a spec_dir that is not
// absolute (or given without spec_yaml), a relative path with no root to resolve it against
// (naming the field and the flag), or a YAML error (naming the field and the line).
absl::StatusOr<v1::JobSpec> SpecOfRequest(const v1::SubmitJobRequest& request,
                                          const PathRoots& roots);

// A submitted spec, prepared and planned.
struct Submission {
  v1::JobSpec spec;  // as prepared: what the job record keeps
  std::shared_ptr<const JobPlan> plan;
  int64_t world_size = 0;
  // For a `mesh: {auto: true}` spec: what the search chose, in one line (empty otherwise).
  std::string auto_parallel;
};

// What the search of a `mesh: {auto: true}` spec runs over: the registered workers of the
// spec's kind (each one's host, in registration order, and the least memory among them) and the
// coordinator's newest cost profile of that kind (nullopt: none stored).
struct AutoParallelInputs {
  std::vector<std::string> host_of_slot;
  int64_t memory_bytes = 0;
  std::optional<v1::CostProfile> profile;
};

// ApplyJobSpecDefaults, the spec's paths confined to options.roots (before any file is opened),
// options.prepare_spec, the mesh within options.max_ranks (a larger one is refused before
// planning, which would hold memory in proportion to it), then options.plan, once per job.
// `stop` (the call's deadline and cancellation, the coordinator's shutdown) ends the planning
// early with its status, "planning the job: ..." saying what it was doing.
// A `mesh: {auto: true}` spec is searched (planner/cost/search.h) after its paths are confined,
// polling `stop` as it plans each candidate, and the strategy picked replaces its mesh;
// FAILED_PRECONDITION when `auto_parallel` has no profile or no worker, INVALID_ARGUMENT when no
// strategy fits.
absl::StatusOr<Submission> PrepareSubmission(const v1::JobSpec& spec,
                                             const CoordinatorOptions& options,
                                             const planner::StopCheck& stop = {},
                                             const AutoParallelInputs& auto_parallel = {});

// A prepared spec planned by options.plan; INTERNAL when the plan's ranks are not the mesh's.
absl::StatusOr<std::shared_ptr<const JobPlan>> PlanSpec(const v1::JobSpec& spec,
                                                        const CoordinatorOptions& options,
                                                        const planner::StopCheck& stop = {});

// The plan of the job's current attempt: its prepared spec at its elastic size (AttemptSpec);
// what an elastic resize and a recovered job are planned with.
absl::StatusOr<std::shared_ptr<const JobPlan>> PlanAttempt(const v1::Job& job,
                                                           const CoordinatorOptions& options,
                                                           const planner::StopCheck& stop = {});

// The jobs a previous coordinator left in the store, planned again (a plan lives in memory only).
struct Recovered {
  // Running ones first, now RESTARTING as their next attempt (they resume from their newest
  // checkpoint), then the pending ones, in submit order.
  std::vector<v1::Job> queued;
  std::vector<std::shared_ptr<const JobPlan>> plans;  // by queued's index
};
// A job that can no longer be planned is stored FAILED and not queued.
absl::StatusOr<Recovered> RecoverJobs(JobStore* store, const CoordinatorOptions& options);

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_SUBMISSION_H_
