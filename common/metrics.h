// Metrics: a process's counters, gauges and histograms, with labels, rendered in Prometheus's
// text exposition format (version 0.0.4) for a scrape of /metrics (common/metrics_server.h).
//
// A family is one metric name with fixed label names; each distinct tuple of label values is a
// series, made on first use. Updates take the family's lock (a few per step or per message, not
// per element). Collectors run before each render, to set gauges that are cheaper to compute at
// scrape time (jobs by state) than to keep current.
//
// E.g.
//   MetricsRegistry registry;
//   CounterFamily* steps = registry.AddCounter("weft_steps_total", "Steps completed.", {"job"});
//   HistogramFamily* step_seconds = registry.AddHistogram(
//       "weft_step_seconds", "Step time.", {"job"}, ExponentialBuckets(0.001, 2, 16));
//   steps->Add({"job-000001"});
//   step_seconds->Observe({"job-000001"}, 0.12);
//   std::string text = registry.Render();  // "# HELP weft_steps_total ...\n..."
#ifndef WEFT_COMMON_METRICS_H_
#define WEFT_COMMON_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace weft {

using LabelValues = std::vector<std::string>;

// `count` upper bounds from `start`, each `factor` times the last.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// What a family is, series aside: MetricsRegistry::Families lists them (docs/docs_test holds the
// operations guide's metrics table to them).
struct MetricFamilyInfo {
  std::string name;
  std::string type;  // counter | gauge | histogram, as the text format's TYPE line says
  std::vector<std::string> label_names;
};

// What every family shares: its name, help, label names and series.
class MetricFamily {
 public:
  enum class Kind { kCounter, kGauge, kHistogram };

  MetricFamily(std::string name, std::string help, std::vector<std::string> label_names,
               Kind kind, std::vector<double> bounds = {});
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  // Forgets one series, or all (a job's series once it is gone).
  void Remove(const LabelValues& labels);
  void Clear();
  // The number of series, for tests and bounds.
  int SeriesCount();
  MetricFamilyInfo Info() const;

  // Appends the family in the text format (nothing when it has no series).
  void Render(std::string* out);

 protected:
  struct Series {
    double value = 0;              // a counter's or a gauge's
    std::vector<uint64_t> counts;  // a histogram's, per bucket (not cumulative), +Inf last
    double sum = 0;
  };
  // The series of `labels`, made on first use. A wrong number of values is a programming error:
  // it is fixed up (cut or padded with "") rather than crash a daemon over a metric.
  Series& SeriesOf(const LabelValues& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string name_;
  const std::string help_;
  const std::vector<std::string> label_names_;
  const Kind kind_;
  const std::vector<double> bounds_;  // histograms: bucket upper bounds, ascending
  absl::Mutex mu_;
  std::map<LabelValues, Series> series_ ABSL_GUARDED_BY(mu_);
};

class CounterFamily : public MetricFamily {
 public:
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names)
      : MetricFamily(std::move(name), std::move(help), std::move(label_names), Kind::kCounter) {}
  // Adds `amount` (negative amounts are ignored: a counter only goes up).
  void Add(const LabelValues& labels, double amount = 1);
  double Value(const LabelValues& labels);
};

class GaugeFamily : public MetricFamily {
 public:
  GaugeFamily(std::string name, std::string help, std::vector<std::string> label_names)
      : MetricFamily(std::move(name), std::move(help), std::move(label_names), Kind::kGauge) {}
  void Set(const LabelValues& labels, double value);
  double Value(const LabelValues& labels);
};

class HistogramFamily : public MetricFamily {
 public:
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> bounds);
  void Observe(const LabelValues& labels, double value);
  // Observations so far, for tests.
  uint64_t Count(const LabelValues& labels);
};

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Families live as long as the registry. Names and label names must be valid Prometheus names
  // ([a-zA-Z_:][a-zA-Z0-9_:]*); a family's name is registered once.
  CounterFamily* AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> label_names = {});
  GaugeFamily* AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names = {});
  HistogramFamily* AddHistogram(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names, std::vector<double> bounds);
  // Runs before every Render, in the order added (e.g. sets gauges from the current state).
  void AddCollector(std::function<void()> collect);

  // Every family with series, in the order added. One render at a time: two scrapes never run
  // their collectors interleaved (a collector that clears and refills a family).
  std::string Render() ABSL_LOCKS_EXCLUDED(render_mu_, mu_);
  // Every family, with series or not, in the order added.
  std::vector<MetricFamilyInfo> Families() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  absl::Mutex render_mu_;  // taken before mu_
  absl::Mutex mu_;
  std::vector<std::unique_ptr<MetricFamily>> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void()>> collectors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_COMMON_METRICS_H_
