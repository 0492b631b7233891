#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace weft {
namespace {

// A sample value as the text format writes it: integers without a fraction, +Inf, -Inf, NaN.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrFormat("%.0f", v);
  return absl::StrFormat("%.17g", v);
}

// Text escaped as the text format asks: backslash and newline, and in a label value (`quotes`)
// the double quote too; HELP text keeps its quotes.
std::string Escape(const std::string& text, bool quotes) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"' && quotes) {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// The TYPE line's word for a family's kind.
const char* TypeName(MetricFamily::Kind kind) {
  return kind == MetricFamily::Kind::kCounter ? "counter"
         : kind == MetricFamily::Kind::kGauge ? "gauge"
                                              : "histogram";
}

// {a="x",b="y"} with `extra` (a histogram's le) last; empty when there are no labels at all.
std::string LabelSet(const std::vector<std::string>& names, const LabelValues& values,
                     const std::string& extra = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "" : ",", names[i], "=\"",
                    Escape(values[i], /*quotes=*/true), "\"");
  }
  if (!extra.empty()) absl::StrAppend(&out, out.empty() ? "" : ",", extra);
  return out.empty() ? "" : absl::StrCat("{", out, "}");
}

}  // namespace

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  std::vector<double> bounds;
  double b = start;
  for (int i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

MetricFamily::MetricFamily(std::string name, std::string help,
                           std::vector<std::string> label_names, Kind kind,
                           std::vector<double> bounds)
    : name_(std::move(name)),
      help_(std::move(help)),
      label_names_(std::move(label_names)),
      kind_(kind),
      bounds_(std::move(bounds)) {}

MetricFamily::Series& MetricFamily::SeriesOf(const LabelValues& labels) {
  LabelValues key = labels;
  key.resize(label_names_.size());
  auto [it, made] = series_.try_emplace(std::move(key));
  if (made && kind_ == Kind::kHistogram) it->second.counts.assign(bounds_.size() + 1, 0);
  return it->second;
}

void MetricFamily::Remove(const LabelValues& labels) {
  LabelValues key = labels;
  key.resize(label_names_.size());
  absl::MutexLock lock(&mu_);
  series_.erase(key);
}

void MetricFamily::Clear() {
  absl::MutexLock lock(&mu_);
  series_.clear();
}

int MetricFamily::SeriesCount() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(series_.size());
}

MetricFamilyInfo MetricFamily::Info() const {
  return MetricFamilyInfo{name_, TypeName(kind_), label_names_};
}

void MetricFamily::Render(std::string* out) {
  absl::MutexLock lock(&mu_);
  if (series_.empty()) return;
  absl::StrAppend(out, "# HELP ", name_, " ", Escape(help_, /*quotes=*/false), "\n# TYPE ",
                  name_, " ", TypeName(kind_), "\n");
  for (const auto& [labels, s] : series_) {
    if (kind_ != Kind::kHistogram) {
      absl::StrAppend(out, name_, LabelSet(label_names_, labels), " ", FormatValue(s.value), "\n");
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= bounds_.size(); ++b) {
      cumulative += s.counts[b];
      const std::string le = b < bounds_.size() ? FormatValue(bounds_[b]) : "+Inf";
      absl::StrAppend(out, name_, "_bucket",
                      LabelSet(label_names_, labels, absl::StrCat("le=\"", le, "\"")), " ",
                      cumulative, "\n");
    }
    absl::StrAppend(out, name_, "_sum", LabelSet(label_names_, labels), " ", FormatValue(s.sum),
                    "\n", name_, "_count", LabelSet(label_names_, labels), " ", cumulative, "\n");
  }
}

void CounterFamily::Add(const LabelValues& labels, double amount) {
  if (!(amount >= 0)) return;
  absl::MutexLock lock(&mu_);
  SeriesOf(labels).value += amount;
}

double CounterFamily::Value(const LabelValues& labels) {
  absl::MutexLock lock(&mu_);
  return SeriesOf(labels).value;
}

void GaugeFamily::Set(const LabelValues& labels, double value) {
  absl::MutexLock lock(&mu_);
  SeriesOf(labels).value = value;
}

double GaugeFamily::Value(const LabelValues& labels) {
  absl::MutexLock lock(&mu_);
  return SeriesOf(labels).value;
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names, std::vector<double> bounds)
    : MetricFamily(std::move(name), std::move(help), std::move(label_names), Kind::kHistogram,
                   [&] {
                     std::sort(bounds.begin(), bounds.end());
                     bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
                     return bounds;
                   }()) {}

void HistogramFamily::Observe(const LabelValues& labels, double value) {
  if (std::isnan(value)) return;
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();  // le: <=
  absl::MutexLock lock(&mu_);
  Series& s = SeriesOf(labels);
  ++s.counts[bucket];
  s.sum += value;
}

uint64_t HistogramFamily::Count(const LabelValues& labels) {
  absl::MutexLock lock(&mu_);
  uint64_t total = 0;
  for (uint64_t c : SeriesOf(labels).counts) total += c;
  return total;
}

CounterFamily* MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                           std::vector<std::string> label_names) {
  auto family = std::make_unique<CounterFamily>(name, help, std::move(label_names));
  CounterFamily* raw = family.get();
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(family));
  return raw;
}

GaugeFamily* MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names) {
  auto family = std::make_unique<GaugeFamily>(name, help, std::move(label_names));
  GaugeFamily* raw = family.get();
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(family));
  return raw;
}

HistogramFamily* MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                               std::vector<std::string> label_names,
                                               std::vector<double> bounds) {
  auto family =
      std::make_unique<HistogramFamily>(name, help, std::move(label_names), std::move(bounds));
  HistogramFamily* raw = family.get();
  absl::MutexLock lock(&mu_);
  families_.push_back(std::move(family));
  return raw;
}

void MetricsRegistry::AddCollector(std::function<void()> collect) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collect));
}

std::string MetricsRegistry::Render() {
  absl::MutexLock rendering(&render_mu_);
  std::vector<std::function<void()>> collectors;
  std::vector<MetricFamily*> families;
  {
    absl::MutexLock lock(&mu_);
    collectors = collectors_;
    for (const auto& f : families_) families.push_back(f.get());
  }
  // Outside mu_ (render_mu_ only serializes renders): a collector may take its owner's locks.
  for (const auto& collect : collectors) collect();
  std::string out;
  for (MetricFamily* f : families) f->Render(&out);
  return out;
}

std::vector<MetricFamilyInfo> MetricsRegistry::Families() {
  absl::MutexLock lock(&mu_);
  std::vector<MetricFamilyInfo> infos;
  for (const auto& f : families_) infos.push_back(f->Info());
  return infos;
}

}  // namespace weft
