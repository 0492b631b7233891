#include "coordinator/job_plan.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/byte_size.h"
#include "common/checkpoint/checkpoint.h"
#include "common/kernel_scratch.h"
#include "common/status.h"
#include "planner/arch/hf_export.h"
#include "planner/submit/submit.h"

namespace weft::coordinator {
namespace {

class PlannerJobPlan final : public JobPlan {
 public:
  PlannerJobPlan(std::shared_ptr<const planner::Plan> plan, planner::HfExportMetadata hf_export)
      : plan_(std::move(plan)), hf_export_(std::move(hf_export)) {}
  int world_size() const override { return plan_->world_size(); }
  std::vector<int64_t> mesh_shape() const override { return plan_->mesh_shape(); }
  absl::StatusOr<v1::Program> Program(int rank, const planner::Attempt& attempt,
                                      const planner::StopCheck& stop) const override {
    return plan_->Program(rank, attempt, stop);
  }
  std::vector<int> RoleRanks() const override { return plan_->RoleRanks(); }
  std::map<std::string, std::string> checkpoint_metadata() const override { return hf_export_; }

 private:
  const std::shared_ptr<const planner::Plan> plan_;
  const planner::HfExportMetadata hf_export_;  // computed once with the plan
};

}  // namespace

std::vector<int> JobPlan::RoleRanks() const {
  std::vector<int> ranks(world_size());
  for (int r = 0; r < world_size(); ++r) ranks[r] = r;
  return ranks;
}

absl::StatusOr<std::shared_ptr<const JobPlan>> PlanWithPlanner(const v1::JobSpec& spec,
                                                               const planner::StopCheck& stop) {
  ASSIGN_OR_RETURN(std::shared_ptr<const planner::Plan> plan,
                   planner::PlanPrepared(spec, "", 0, stop));
  ASSIGN_OR_RETURN(planner::HfExportMetadata hf_export, planner::HfExportMetadataOf(spec));
  return std::shared_ptr<const JobPlan>(
      std::make_shared<PlannerJobPlan>(std::move(plan), std::move(hf_export)));
}

absl::Status CheckFits(const JobPlan& plan, const std::string& kind, int64_t largest_bytes,
                       const std::string& largest_id, const planner::StopCheck& stop) {
  if (largest_bytes <= 0) return absl::OkStatus();
  // Each rank's planned peak is its Program's arena and its kernels' scratch (what its allocator
  // holds, PlannedPeakBytes), its role's. The
  // roles' ranks are each the smallest of its role, in order: the first that cannot fit is the
  // smallest rank that cannot.
  for (int r : plan.RoleRanks()) {
    absl::StatusOr<v1::Program> program = plan.Program(r, planner::Attempt{}, stop);
    if (!program.ok()) return Annotate(program.status(), "planning the job");
    if (PlannedPeakBytes(*program) > largest_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "rank ", r, " needs ", FormatByteSize(PlannedPeakBytes(*program)),
          " at its planned peak (`weftctl plan` shows it by role), more than the ",
          FormatByteSize(largest_bytes), " of the largest registered ", kind, " worker (",
          largest_id, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointLoad> AttemptStartingState(const v1::Job& job) {
  const std::string& dir = job.spec().checkpoint().dir();
  if (job.attempt() > 0 && !dir.empty()) {
    absl::StatusOr<std::string> latest = checkpoint::FindLatest(dir);
    absl::StatusOr<checkpoint::CheckpointReader> reader =
        latest.ok() ? checkpoint::CheckpointReader::Open(*latest)
                    : absl::StatusOr<checkpoint::CheckpointReader>(latest.status());
    if (reader.ok()) {
      auto owner = reader->index().metadata.find(checkpoint::kJobIdMetadata);
      if (owner != reader->index().metadata.end() && owner->second == job.id()) {
        v1::JobSpec resumed = job.spec();
        resumed.mutable_train()->set_resume(true);
        return ResolveCheckpointLoad(resumed);
      }
    }
  }
  return ResolveCheckpointLoad(job.spec());
}

}  // namespace weft::coordinator
