// A worker's metrics, served by `weft-worker --metrics_listen` (common/metrics_server.h), taken
// from the messages it sends the coordinator (Observe), so that they say what the worker did
// whether or not the coordinator got it:
//   weft_worker_steps_total                   steps run
//   weft_worker_step_seconds                  histogram of step time
//   weft_worker_step_phase_seconds{phase}     histogram of each step's time in compute,
//                                             collective_wait and data (StepReport's split)
//   weft_worker_bytes_sent_total              payload bytes its communicators sent
//   weft_worker_allocator_peak_bytes          the most bytes its allocator held in the last step
//   weft_worker_checkpoint_seconds            histogram of its shard writes
//   weft_worker_checkpoint_bytes_total
//   weft_worker_tasks_total{result}           tasks ended: ok | failed | cancelled
//   weft_worker_info{worker, device}          1, once registered (its id and device kind)
//
// E.g.
//   auto metrics = std::make_shared<WorkerMetrics>("cuda");
//   options.metrics = metrics;          // the Worker calls Observe on every message it sends
//   std::string text = metrics->registry().Render();
#ifndef WEFT_WORKER_WORKER_METRICS_H_
#define WEFT_WORKER_WORKER_METRICS_H_

#include <string>

#include "common/metrics.h"
#include "weft/v1/service.pb.h"

namespace weft {

// The TaskDone message of a cancelled task starts with this (Task::Run, and a task abandoned in a
// collective): its result counts as "cancelled".
inline constexpr char kCancelledPrefix[] = "cancelled: ";

class WorkerMetrics {
 public:
  explicit WorkerMetrics(std::string device_kind);
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  MetricsRegistry& registry() { return registry_; }
  // A message the worker sends: StepReport, CheckpointReport and TaskDone count; others not.
  void Observe(const v1::WorkerMessage& msg);
  // The id the coordinator gave it (weft_worker_info).
  void Registered(const std::string& worker_id);

 private:
  MetricsRegistry registry_;
  const std::string device_kind_;
  CounterFamily* const steps_;
  HistogramFamily* const step_seconds_;
  HistogramFamily* const phase_seconds_;
  CounterFamily* const bytes_sent_;
  GaugeFamily* const peak_bytes_;
  HistogramFamily* const checkpoint_seconds_;
  CounterFamily* const checkpoint_bytes_;
  CounterFamily* const tasks_;
  GaugeFamily* const info_;
};

}  // namespace weft

#endif  // WEFT_WORKER_WORKER_METRICS_H_
