#include "coordinator/coordinator_metrics.h"

#include <algorithm>

namespace weft::coordinator {
namespace {

// Ended jobs whose series are kept (see the header).
constexpr size_t kEndedJobsKept = 64;

LabelValues JobLabels(const v1::Job& job) { return {job.id(), job.spec().name()}; }

}  // namespace

CoordinatorMetrics::CoordinatorMetrics()
    : jobs_(registry_.AddGauge("weft_jobs", "Jobs in the job store, by state.", {"state"})),
      workers_(registry_.AddGauge("weft_workers", "Registered workers, by state and device kind.",
                                  {"state", "device"})),
      steps_(registry_.AddCounter("weft_steps_total", "Steps completed, over every job.")),
      restarts_(registry_.AddCounter("weft_restarts_total", "Job restarts, over every job.")),
      job_steps_(registry_.AddCounter("weft_job_steps_total",
                                      "Steps the job completed, over its attempts.",
                                      {"job", "name"})),
      job_step_seconds_(registry_.AddHistogram(
          "weft_job_step_seconds", "Step time of the job (its slowest rank's), seconds.",
          {"job", "name"}, ExponentialBuckets(0.001, 2, 18))),
      job_samples_per_second_(registry_.AddGauge(
          "weft_job_samples_per_second", "Samples per second in the job's last step.",
          {"job", "name"})),
      job_tokens_per_second_(registry_.AddGauge(
          "weft_job_tokens_per_second",
          "Tokens per second in the job's last step (jobs on token data).", {"job", "name"})),
      job_bytes_sent_(registry_.AddGauge(
          "weft_job_bytes_sent_per_step",
          "Payload bytes all ranks' communicators sent in the job's last step.", {"job", "name"})),
      job_loss_(registry_.AddGauge("weft_job_loss", "The job's loss in its last step.",
                                   {"job", "name"})),
      job_lr_(registry_.AddGauge("weft_job_learning_rate",
                                 "The learning rate the job's last step applied.",
                                 {"job", "name"})),
      job_grad_norm_(registry_.AddGauge(
          "weft_job_grad_norm", "The global gradient norm of the job's last step, before clipping.",
          {"job", "name"})),
      job_eval_loss_(registry_.AddGauge("weft_job_eval_loss",
                                        "The job's latest held-out loss (its eval block).",
                                        {"job", "name"})),
      job_peak_bytes_(registry_.AddGauge(
          "weft_job_peak_bytes",
          "The most bytes any rank's allocator held in the job's last step.", {"job", "name"})),
      job_restarts_(registry_.AddCounter("weft_job_restarts_total", "Restarts of the job.",
                                         {"job", "name"})),
      job_resizes_(registry_.AddCounter(
          "weft_job_resizes_total", "Elastic resizes of the job (train.elastic): shrinks and grows.",
          {"job", "name"})),
      job_elastic_size_(registry_.AddGauge(
          "weft_job_elastic_size",
          "The size the job's elastic mesh dim (train.elastic) was last resized to.",
          {"job", "name"})),
      checkpoint_seconds_(registry_.AddHistogram(
          "weft_checkpoint_seconds",
          "Checkpoint time (the slowest rank's write plus the commit), seconds.", {"job", "name"},
          ExponentialBuckets(0.01, 2, 16))),
      checkpoint_bytes_(registry_.AddCounter(
          "weft_checkpoint_bytes_total", "Tensor bytes of the job's committed checkpoints.",
          {"job", "name"})) {}

void CoordinatorMetrics::Step(const v1::Job& job, const v1::StepMetrics& step) {
  const LabelValues labels = JobLabels(job);
  steps_->Add({});
  job_steps_->Add(labels);
  job_step_seconds_->Observe(labels, step.step_seconds());
  job_samples_per_second_->Set(labels, step.samples_per_second());
  if (job.spec().data().source() == "tokens" && job.spec().data().seq_len() > 0) {
    job_tokens_per_second_->Set(
        labels, step.samples_per_second() * static_cast<double>(job.spec().data().seq_len()));
  }
  job_bytes_sent_->Set(labels, static_cast<double>(step.bytes_sent()));
  job_loss_->Set(labels, step.loss());
  job_lr_->Set(labels, step.lr());
  job_grad_norm_->Set(labels, step.grad_norm());
  job_peak_bytes_->Set(labels, static_cast<double>(step.peak_bytes()));
}

void CoordinatorMetrics::Eval(const v1::Job& job, const v1::EvalMetrics& eval) {
  job_eval_loss_->Set(JobLabels(job), eval.loss());
}

void CoordinatorMetrics::Checkpoint(const v1::Job& job, const v1::CheckpointSaved& saved) {
  const LabelValues labels = JobLabels(job);
  checkpoint_seconds_->Observe(labels, saved.seconds());
  checkpoint_bytes_->Add(labels, static_cast<double>(saved.bytes()));
}

void CoordinatorMetrics::Restart(const v1::Job& job) {
  restarts_->Add({});
  job_restarts_->Add(JobLabels(job));
}

void CoordinatorMetrics::Resize(const v1::Job& job, const v1::Resize& resize) {
  const LabelValues labels = JobLabels(job);
  job_resizes_->Add(labels);
  job_elastic_size_->Set(labels, resize.to_size());
}

void CoordinatorMetrics::Ended(const v1::Job& job) {
  LabelValues gone;
  {
    absl::MutexLock lock(&mu_);
    const LabelValues labels = JobLabels(job);
    if (std::find(ended_.begin(), ended_.end(), labels) == ended_.end()) ended_.push_back(labels);
    if (ended_.size() <= kEndedJobsKept) return;
    gone = std::move(ended_.front());
    ended_.pop_front();
  }
  RemoveJobSeries(gone);
}

void CoordinatorMetrics::Forget(const v1::Job& job) {
  const LabelValues labels = JobLabels(job);
  {
    absl::MutexLock lock(&mu_);
    ended_.erase(std::remove(ended_.begin(), ended_.end(), labels), ended_.end());
  }
  RemoveJobSeries(labels);
}

void CoordinatorMetrics::RemoveJobSeries(const LabelValues& labels) {
  for (MetricFamily* f : std::initializer_list<MetricFamily*>{
           job_steps_, job_step_seconds_, job_samples_per_second_, job_tokens_per_second_,
           job_bytes_sent_, job_loss_, job_lr_, job_grad_norm_, job_eval_loss_, job_peak_bytes_,
           job_restarts_, job_resizes_, job_elastic_size_, checkpoint_seconds_,
           checkpoint_bytes_}) {
    f->Remove(labels);
  }
}

void CoordinatorMetrics::CountAtScrape(
    std::function<absl::StatusOr<std::map<v1::JobState, int64_t>>()> jobs_by_state,
    std::function<std::vector<v1::WorkerInfo>()> workers) {
  registry_.AddCollector([this, jobs_by_state = std::move(jobs_by_state)] {
    absl::StatusOr<std::map<v1::JobState, int64_t>> counts = jobs_by_state();
    if (!counts.ok()) return;
    for (int s = v1::PENDING; s <= v1::JobState_MAX; ++s) {
      if (!v1::JobState_IsValid(s)) continue;
      auto it = counts->find(static_cast<v1::JobState>(s));
      jobs_->Set({v1::JobState_Name(s)}, it == counts->end() ? 0 : it->second);
    }
  });
  registry_.AddCollector([this, workers = std::move(workers)] {
    std::map<LabelValues, int> counts;
    for (const v1::WorkerInfo& w : workers()) counts[{w.state(), w.device().kind()}]++;
    workers_->Clear();
    for (const auto& [labels, n] : counts) workers_->Set(labels, n);
  });
}

}  // namespace weft::coordinator
