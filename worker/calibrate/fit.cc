// Timing calls and fitting a line through them (calibrate.h).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <utility>

#include "worker/calibrate/calibrate.h"

namespace weft::calibrate {
namespace {

// The q-quantile of `v` (sorted here), the nearest rank.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

Timing TimeCalls(std::string what, double units, const std::function<void()>& call, int reps,
                 double budget_s) {
  using Clock = std::chrono::steady_clock;
  call();  // warm-up: first-touch page faults, OpenBLAS's thread start, caches
  std::vector<double> seconds;
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < std::max(reps, 1); ++i) {
    const Clock::time_point t0 = Clock::now();
    call();
    const Clock::time_point t1 = Clock::now();
    seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
    if (seconds.size() >= 3 && std::chrono::duration<double>(t1 - start).count() > budget_s) break;
  }
  return TimingOf(std::move(what), units, seconds);
}

Timing TimingOf(std::string what, double units, const std::vector<double>& seconds) {
  return {.what = std::move(what),
          .units = units,
          .mean_s = seconds.empty() ? 0.0
                                    : std::accumulate(seconds.begin(), seconds.end(), 0.0) /
                                          static_cast<double>(seconds.size()),
          .median_s = Quantile(seconds, 0.5),
          .p90_s = Quantile(seconds, 0.9),
          .samples = static_cast<int>(seconds.size())};
}

v1::LinearFit FitLinear(absl::Span<const Timing> timings) {
  // Weighted least squares, w = 1 / y (see calibrate.h).
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  std::vector<double> tails;
  int samples = 0;
  for (const Timing& t : timings) {
    samples += t.samples;
    if (t.mean_s <= 0) continue;
    const double w = 1 / t.mean_s;
    sw += w;
    sx += w * t.units;
    sy += w * t.mean_s;
    sxx += w * t.units * t.units;
    sxy += w * t.units * t.mean_s;
    if (t.median_s > 0) tails.push_back(std::max(1.0, t.p90_s / t.median_s));
  }
  double alpha = 0, per_unit = 0;
  const double det = sw * sxx - sx * sx;
  if (det > 0) {
    per_unit = (sw * sxy - sx * sy) / det;
    alpha = (sy - per_unit * sx) / sw;
  }
  if (alpha < 0 || per_unit <= 0) {
    // Through the origin: y = per_unit x.
    alpha = 0;
    per_unit = sxx > 0 ? sxy / sxx : 0;
  }
  v1::LinearFit fit;
  fit.set_alpha_s(alpha);
  fit.set_per_unit_s(per_unit);
  fit.set_tail_ratio(tails.empty() ? 1.0 : Quantile(tails, 0.5));
  fit.set_samples(samples);
  return fit;
}

}  // namespace weft::calibrate
