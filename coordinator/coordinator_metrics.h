// The coordinator's metrics, served by --metrics_listen (common/metrics_server.h) in Prometheus's
// text format:
//   weft_jobs{state}                      jobs in the store by state (at scrape time)
//   weft_workers{state, device}           registered workers: idle | busy | lost | drained, by device kind
//   weft_steps_total                      steps completed over every job
//   weft_restarts_total                   restarts over every job
//   weft_job_steps_total{job, name}       a job's steps completed (every attempt's)
//   weft_job_step_seconds{job, name}      histogram of its steps' time (the slowest rank's)
//   weft_job_samples_per_second{job, name}, weft_job_tokens_per_second{job, name} (token data)
//   weft_job_bytes_sent_per_step{job, name}  payload bytes all ranks sent in its last step
//   weft_job_loss{job, name}, weft_job_peak_bytes{job, name}  of its last step
//   weft_job_learning_rate{job, name}, weft_job_grad_norm{job, name}  of its last step
//   weft_job_eval_loss{job, name}         its latest held-out loss (eval)
//   weft_job_restarts_total{job, name}
//   weft_job_resizes_total{job, name}     its elastic resizes (train.elastic), shrinks and grows
//   weft_job_elastic_size{job, name}      the size its elastic dim was last resized to
//   weft_checkpoint_seconds{job, name}    histogram of its checkpoints' write + commit time
//   weft_checkpoint_bytes_total{job, name}
// A job's series stay while it runs and for the 64 jobs that ended last (a final scrape sees its
// last step), then go, so that the series do not grow with every job ever run; a deleted job's go
// at once.
//
// E.g.
//   CoordinatorMetrics metrics;
//   metrics.Step(job, step_metrics);           // per aggregated step, under the coordinator's lock
//   std::string text = metrics.registry().Render();
#ifndef WEFT_COORDINATOR_COORDINATOR_METRICS_H_
#define WEFT_COORDINATOR_COORDINATOR_METRICS_H_

#include <deque>
#include <functional>
#include <map>
#include <vector>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

class CoordinatorMetrics {
 public:
  CoordinatorMetrics();
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  MetricsRegistry& registry() { return registry_; }
  GaugeFamily* jobs() { return jobs_; }
  GaugeFamily* workers() { return workers_; }

  // Jobs by state and workers by state and kind are counted at scrape time, from these: every
  // job state is listed, 0 included.
  void CountAtScrape(
      std::function<absl::StatusOr<std::map<v1::JobState, int64_t>>()> jobs_by_state,
      std::function<std::vector<v1::WorkerInfo>()> workers);

  // One aggregated step of `job`.
  void Step(const v1::Job& job, const v1::StepMetrics& step);
  // A held-out evaluation of `job` (its eval block).
  void Eval(const v1::Job& job, const v1::EvalMetrics& eval);
  // A committed checkpoint.
  void Checkpoint(const v1::Job& job, const v1::CheckpointSaved& saved);
  void Restart(const v1::Job& job);
  // An elastic resize (train.elastic).
  void Resize(const v1::Job& job, const v1::Resize& resize);
  // The job reached a final state: its series go once 64 later jobs have ended too.
  void Ended(const v1::Job& job);
  // The job was deleted: its series go now.
  void Forget(const v1::Job& job);

 private:
  void RemoveJobSeries(const LabelValues& labels);

  MetricsRegistry registry_;
  GaugeFamily* const jobs_;
  GaugeFamily* const workers_;
  CounterFamily* const steps_;
  CounterFamily* const restarts_;
  CounterFamily* const job_steps_;
  HistogramFamily* const job_step_seconds_;
  GaugeFamily* const job_samples_per_second_;
  GaugeFamily* const job_tokens_per_second_;
  GaugeFamily* const job_bytes_sent_;
  GaugeFamily* const job_loss_;
  GaugeFamily* const job_lr_;
  GaugeFamily* const job_grad_norm_;
  GaugeFamily* const job_eval_loss_;
  GaugeFamily* const job_peak_bytes_;
  CounterFamily* const job_restarts_;
  CounterFamily* const job_resizes_;
  GaugeFamily* const job_elastic_size_;
  HistogramFamily* const checkpoint_seconds_;
  CounterFamily* const checkpoint_bytes_;

  absl::Mutex mu_;
  std::deque<LabelValues> ended_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_COORDINATOR_METRICS_H_
