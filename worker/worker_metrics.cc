#include "worker/worker_metrics.h"

#include <algorithm>
#include <utility>

#include "absl/strings/match.h"

namespace weft {

WorkerMetrics::WorkerMetrics(std::string device_kind)
    : device_kind_(std::move(device_kind)),
      steps_(registry_.AddCounter("weft_worker_steps_total", "Steps this worker ran.")),
      step_seconds_(registry_.AddHistogram("weft_worker_step_seconds", "Step time, seconds.", {},
                                           ExponentialBuckets(0.001, 2, 18))),
      phase_seconds_(registry_.AddHistogram(
          "weft_worker_step_phase_seconds",
          "Each step's time by phase: compute, collective_wait (collectives, sends and receives "
          "the executor waited for) and data (loading the batch), seconds.",
          {"phase"}, ExponentialBuckets(0.0001, 2, 21))),
      bytes_sent_(registry_.AddCounter("weft_worker_bytes_sent_total",
                                       "Payload bytes this worker's communicators sent.")),
      peak_bytes_(registry_.AddGauge(
          "weft_worker_allocator_peak_bytes",
          "The most bytes the worker's kernel allocator held during its last step.")),
      checkpoint_seconds_(registry_.AddHistogram(
          "weft_worker_checkpoint_seconds", "Writing this worker's checkpoint shards, seconds.",
          {}, ExponentialBuckets(0.001, 2, 20))),
      checkpoint_bytes_(registry_.AddCounter("weft_worker_checkpoint_bytes_total",
                                             "Tensor bytes of the checkpoint shards it wrote.")),
      tasks_(registry_.AddCounter("weft_worker_tasks_total",
                                  "Tasks (a job attempt's rank) this worker ended, by result: ok, "
                                  "failed or cancelled.",
                                  {"result"})),
      info_(registry_.AddGauge("weft_worker_info", "1: the worker's id and device kind.",
                               {"worker", "device"})) {}

void WorkerMetrics::Observe(const v1::WorkerMessage& msg) {
  if (msg.has_step()) {
    const v1::StepReport& step = msg.step();
    steps_->Add({});
    step_seconds_->Observe({}, step.step_seconds());
    const double waited = step.communication_seconds(), data = step.data_seconds();
    phase_seconds_->Observe({"compute"}, std::max(0.0, step.step_seconds() - waited - data));
    phase_seconds_->Observe({"collective_wait"}, waited);
    phase_seconds_->Observe({"data"}, data);
    bytes_sent_->Add({}, static_cast<double>(step.bytes_sent()));
    peak_bytes_->Set({}, static_cast<double>(step.peak_bytes()));
  } else if (msg.has_checkpoint()) {
    checkpoint_seconds_->Observe({}, msg.checkpoint().seconds());
    checkpoint_bytes_->Add({}, static_cast<double>(msg.checkpoint().bytes()));
  } else if (msg.has_done()) {
    const v1::TaskDone& done = msg.done();
    tasks_->Add({done.ok()                                              ? "ok"
                 : absl::StartsWith(done.message(), kCancelledPrefix) ? "cancelled"
                                                                      : "failed"});
  }
}

void WorkerMetrics::Registered(const std::string& worker_id) {
  info_->Clear();
  info_->Set({worker_id, device_kind_}, 1);
}

}  // namespace weft
