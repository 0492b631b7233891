#include "coordinator/submission.h"

#include <filesystem>
#include <initializer_list>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/byte_size.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/elastic.h"
#include "common/jobspec/validate.h"
#include "common/jobspec/yaml.h"
#include "common/status.h"
#include "coordinator/job_run.h"
#include "coordinator/scheduler.h"
#include "planner/cost/search.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {
namespace {

constexpr char kRestartMessage[] =
    "restarting: the coordinator restarted while the job ran; it resumes from its newest "
    "checkpoint once enough workers are connected";

// A path of a spec_yaml after its relative paths were resolved (against spec_dir, or the roots):
// one still relative had no root to resolve against.
absl::Status CheckResolved(absl::string_view field, const std::string& path,
                           absl::string_view root) {
  if (std::filesystem::path(path).is_absolute()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": \"", path, "\" is relative, and this coordinator has no --", root,
      "_root to resolve it against: name it as an absolute path, as the cluster's machines see "
      "it, or resolve it on the client (weftctl submit --check-local-files; a gRPC client sends "
      "spec_dir, the folder to resolve it against)"));
}

}  // namespace

absl::StatusOr<v1::JobSpec> SpecOfRequest(const v1::SubmitJobRequest& request,
                                          const PathRoots& roots) {
  if (request.spec_yaml().empty()) {
    if (!request.spec_dir().empty()) {
      return absl::InvalidArgumentError("spec_dir: only with spec_yaml");
    }
    return request.spec();
  }
  if (request.has_spec()) {
    return absl::InvalidArgumentError("spec_yaml: give the job as spec or as spec_yaml, not both");
  }
  if (request.spec_yaml().size() > kMaxJobSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat("spec_yaml: ", request.spec_yaml().size(),
                                                   " bytes; at most ", kMaxJobSpecBytes,
                                                   " (1 MiB)"));
  }
  JobSpecYamlOptions reading;
  std::string base_dir;
  if (!request.spec_dir().empty()) {
    // A relative spec_dir would resolve against wherever the coordinator runs.
    if (!std::filesystem::path(request.spec_dir()).is_absolute()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec_dir: \"", request.spec_dir(),
          "\" must be the absolute folder the spec_yaml's relative paths are resolved against"));
    }
    base_dir = request.spec_dir();
  } else {
    // Paths as the cluster sees them: relative ones under its roots.
    base_dir = roots.data;
    reading.checkpoint_base_dir = roots.checkpoint;
  }
  reading.before_reading = [&roots](absl::string_view field, const std::string& path) {
    RETURN_IF_ERROR(CheckResolved(field, path, "data"));
    return CheckDataFile(path, field, roots);
  };
  ASSIGN_OR_RETURN(v1::JobSpec spec, ParseJobSpecYaml(request.spec_yaml(), base_dir, reading));
  for (const auto& [field, path, root] :
       std::initializer_list<std::tuple<const char*, const std::string&, const char*>>{
           {"data.input", spec.data().input(), "data"},
           {"data.label", spec.data().label(), "data"},
           {"data.path", spec.data().path(), "data"},
           {"eval.data.input", spec.eval().data().input(), "data"},
           {"eval.data.label", spec.eval().data().label(), "data"},
           {"eval.data.path", spec.eval().data().path(), "data"},
           {"init_from", spec.init_from(), "data"},
           {"checkpoint.dir", spec.checkpoint().dir(), "checkpoint"}}) {
    if (!path.empty()) RETURN_IF_ERROR(CheckResolved(field, path, root));
  }
  return spec;
}

absl::StatusOr<std::shared_ptr<const JobPlan>> PlanSpec(const v1::JobSpec& spec,
                                                        const CoordinatorOptions& options,
                                                        const planner::StopCheck& stop) {
  ASSIGN_OR_RETURN(std::shared_ptr<const JobPlan> plan, options.plan(spec, stop));
  if (plan->world_size() != options.world_size(spec)) {
    return absl::InternalError(absl::StrCat("the planner made ", plan->world_size(),
                                            " ranks for ", options.world_size(spec)));
  }
  return plan;
}

namespace {

// The spec with the strategy the search picks, and what it picked in one line.
absl::Status ChooseStrategy(const AutoParallelInputs& in, const planner::StopCheck& stop,
                            Submission* out) {
  const std::string kind = DeviceKind(out->spec.device());
  if (!in.profile.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mesh.auto: the coordinator holds no cost profile of ", kind, " workers to price plans "
        "with; measure one (weft-calibrate --out FILE on the workers' hosts) and store it "
        "(weftctl calibrate FILE)"));
  }
  if (in.host_of_slot.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("mesh.auto: no ", kind, " worker is registered to search a mesh for"));
  }
  planner::cost::SearchOptions search;
  search.ranks = out->spec.mesh().ranks() > 0 ? static_cast<int>(out->spec.mesh().ranks())
                                              : static_cast<int>(in.host_of_slot.size());
  search.host_of_slot = in.host_of_slot;
  search.memory_bytes = in.memory_bytes;
  search.stop = stop;
  if (search.ranks > static_cast<int>(in.host_of_slot.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mesh.ranks: ", search.ranks, ", but ", in.host_of_slot.size(), " ", kind,
        " workers are registered to place them on"));
  }
  absl::StatusOr<planner::cost::SearchResult> searched =
      planner::cost::SearchStrategies(out->spec, search, *in.profile);
  if (!searched.ok()) return Annotate(searched.status(), "mesh.auto");
  const planner::cost::SearchResult& result = *searched;
  const planner::cost::Candidate& pick = result.ranked.front();
  ASSIGN_OR_RETURN(out->spec, planner::cost::ApplyStrategy(out->spec, pick.strategy));
  out->auto_parallel = absl::StrFormat(
      "auto-parallel chose %s of %d strategies (predicted %.4f s a step, %s per rank%s; searched "
      "in %.1f s)",
      pick.strategy.Label(), result.considered(), pick.prediction->step_s,
      FormatByteSize(pick.peak_bytes),
      result.memory_limit > 0 ? absl::StrCat(" of ", FormatByteSize(result.memory_limit)) : "",
      result.search_s);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Submission> PrepareSubmission(const v1::JobSpec& spec,
                                             const CoordinatorOptions& options,
                                             const planner::StopCheck& stop,
                                             const AutoParallelInputs& auto_parallel) {
  Submission out;
  out.spec = spec;
  ApplyJobSpecDefaults(&out.spec);  // also when prepare_spec (a test's) does not
  RETURN_IF_ERROR(ConfineSpecPaths(&out.spec, options.roots));  // before any file is opened
  if (out.spec.mesh().auto_parallel()) RETURN_IF_ERROR(ChooseStrategy(auto_parallel, stop, &out));
  RETURN_IF_ERROR(options.prepare_spec(&out.spec));
  out.world_size = options.world_size(out.spec);
  if (out.world_size > options.max_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh: ", out.world_size, " ranks; this coordinator plans at most ", options.max_ranks,
        " (--max_ranks)"));
  }
  // Planned once, here: the job's attempts only emit each rank's Program from it.
  absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanSpec(out.spec, options, stop);
  if (!plan.ok()) return Annotate(plan.status(), "planning the job");
  out.plan = *std::move(plan);
  return out;
}

absl::StatusOr<std::shared_ptr<const JobPlan>> PlanAttempt(const v1::Job& job,
                                                           const CoordinatorOptions& options,
                                                           const planner::StopCheck& stop) {
  ASSIGN_OR_RETURN(const v1::JobSpec spec, AttemptSpec(job));
  return PlanSpec(spec, options, stop);
}

absl::StatusOr<Recovered> RecoverJobs(JobStore* store, const CoordinatorOptions& options) {
  ASSIGN_OR_RETURN(std::vector<v1::Job> left,
                   store->RestartInterruptedJobs(options.now_ms(), kRestartMessage));
  for (const v1::Job& job : left) {
    spdlog::warn("job {}: RESTARTING as attempt {} (the coordinator restarted)", job.id(),
                 job.attempt());
  }
  ASSIGN_OR_RETURN(std::vector<v1::Job> pending, store->ListJobsInState(v1::PENDING));
  for (v1::Job& job : pending) left.push_back(std::move(job));
  Recovered out;
  for (v1::Job& job : left) {
    absl::StatusOr<std::shared_ptr<const JobPlan>> plan = PlanAttempt(job, options);
    if (plan.ok()) {
      out.queued.push_back(std::move(job));
      out.plans.push_back(*std::move(plan));
      continue;
    }
    job.set_state(v1::FAILED);
    job.set_message(absl::StrCat("planning failed after a coordinator restart: ",
                                 plan.status().message()));
    job.set_end_time_ms(options.now_ms());
    const v1::JobEvent event = StateEventOf(job, job.end_time_ms());
    RETURN_IF_ERROR(store->UpdateJob(job, &event));
  }
  if (!out.queued.empty()) spdlog::info("{} job(s) queued again", out.queued.size());
  return out;
}

}  // namespace weft::coordinator
