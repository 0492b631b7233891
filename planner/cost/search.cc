#include "planner/cost/search.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/transformer_config.h"
#include "common/kernel_scratch.h"
#include "common/jobspec/validate.h"
#include "common/rank_placement.h"
#include "common/status.h"
#include "nlohmann/json.hpp"
#include "planner/submit/submit.h"

namespace weft::planner::cost {
namespace {

bool IsTransformer(const v1::JobSpec& spec) { return !spec.model().arch().empty(); }

// A layers model's column -> row pairs: a linear, then only activations, then a linear that
// reads it, neither with inputs of its own. Empty: no tensor-parallel plan.
std::vector<std::pair<std::string, std::string>> ColumnRowPairs(const v1::JobSpec& spec) {
  std::vector<std::pair<std::string, std::string>> pairs;
  const auto& layers = spec.model().layers();
  for (int i = 0; i < layers.size(); ++i) {
    if (layers[i].type() != "linear" || layers[i].inputs_size() > 0) continue;
    int j = i + 1;
    while (j < layers.size() && (layers[j].type() == "relu" || layers[j].type() == "gelu") &&
           layers[j].inputs_size() == 0) {
      ++j;
    }
    if (j < layers.size() && layers[j].type() == "linear" && layers[j].inputs_size() == 0) {
      pairs.emplace_back(layers[i].name(), layers[j].name());
      i = j;
    }
  }
  return pairs;
}

// The layers pipeline chunks are cut from: a layers model's linear layers, a transformer's blocks.
int Layers(const v1::JobSpec& spec) {
  if (!IsTransformer(spec)) {
    int linear = 0;
    for (const v1::Layer& l : spec.model().layers()) linear += l.type() == "linear";
    return linear;
  }
  return static_cast<int>(TransformerBlocks(spec.model().arch(), spec.model().config()));
}

// The search's own refusals (search.h), by arithmetic alone; empty when `s` goes to the planner.
std::string Indivisible(const v1::JobSpec& spec, const Strategy& s) {
  const int64_t batch = spec.data().batch_size();
  if (batch % (static_cast<int64_t>(s.dp) * s.micro_batches) != 0) {
    return absl::StrCat("data.batch_size ", batch, " does not split evenly into ", s.micro_batches,
                        " micro-batches over dp ", s.dp);
  }
  if (s.pp * s.virtual_stages > Layers(spec)) {
    return absl::StrCat(Layers(spec), " layers cannot fill ", s.pp * s.virtual_stages,
                        " pipeline chunks");
  }
  return "";
}

// The mesh dims of `s`, outermost first: pp, dp, mp, those of size 1 left out (one dim of 1 for
// a single rank).
std::vector<std::pair<std::string, int>> MeshDims(const Strategy& s) {
  std::vector<std::pair<std::string, int>> dims;
  if (s.pp > 1) dims.emplace_back("pp", s.pp);
  if (s.dp > 1) dims.emplace_back("dp", s.dp);
  if (s.mp > 1) dims.emplace_back("mp", s.mp);
  if (dims.empty()) dims.emplace_back("dp", 1);
  return dims;
}

std::vector<int> Divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i) {
    if (n % i == 0) d.push_back(i);
  }
  return d;
}

// Every strategy for `ranks`, in a fixed order.
std::vector<Strategy> Enumerate(const v1::JobSpec& spec, int ranks) {
  const bool transformer = IsTransformer(spec);
  const bool has_tp = transformer || !ColumnRowPairs(spec).empty();
  const std::vector<std::string> recomputes =
      transformer ? std::vector<std::string>{"", "selective", "full"}
                  : std::vector<std::string>{"", "full"};
  const int64_t batch = spec.data().batch_size();
  std::vector<Strategy> out;
  for (int pp : Divisors(ranks)) {
    for (int mp : Divisors(ranks / pp)) {
      if (mp > 1 && !has_tp) continue;
      const int dp = ranks / pp / mp;
      // Micro-batches: powers of two up to what the batch allows per dp rank; a pipeline needs
      // at least pp of them.
      std::vector<int> micro;
      for (int64_t m = 1; m <= batch / dp && m <= 64; m *= 2) {
        if (m >= pp) micro.push_back(static_cast<int>(m));
      }
      for (int m : micro) {
        std::vector<std::pair<std::string, int>> schedules;
        if (pp == 1) {
          schedules.emplace_back("", 1);
        } else {
          schedules.emplace_back("1F1B", 1);
          if (m % pp == 0) {
            for (int v = 2; pp * v <= Layers(spec); ++v) schedules.emplace_back("VPP", v);
          }
        }
        for (const auto& [schedule, v] : schedules) {
          for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
            for (const std::string& recompute : recomputes) {
              for (bool sp : {false, true}) {
                if (sp && (mp == 1 || !transformer)) continue;
                Strategy s{.pp = pp,
                           .dp = dp,
                           .mp = mp,
                           .zero = zero,
                           .micro_batches = m,
                           .schedule = schedule,
                           .virtual_stages = v,
                           .recompute = recompute,
                           .sequence_parallel = sp};
                out.push_back(s);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

v1::Placement Replicate() {
  v1::Placement p;
  p.set_kind(v1::Placement::REPLICATE);
  return p;
}

std::string Seconds(double s) {
  if (s < 1e-3) return absl::StrFormat("%.1f us", s * 1e6);
  if (s < 1) return absl::StrFormat("%.2f ms", s * 1e3);
  return absl::StrFormat("%.3f s", s);
}

// Why `c` lost to `best`: the part of the step that grew most.
std::string WhyLost(const Candidate& c, const Candidate& best) {
  const StepSplit& a = c.prediction->split;
  const StepSplit& b = best.prediction->split;
  const std::vector<std::pair<std::string, double>> grew = {
      {"compute", a.compute_s - b.compute_s},
      {"exposed communication", a.exposed_comm_s - b.exposed_comm_s},
      {"pipeline bubble", a.bubble_s - b.bubble_s},
      {"optimizer", a.optimizer_s - b.optimizer_s}};
  auto most = std::max_element(grew.begin(), grew.end(),
                               [](const auto& x, const auto& y) { return x.second < y.second; });
  if (most->second <= 0) return "no part larger; ties broken by memory";
  return absl::StrCat("more ", most->first, " (+", Seconds(most->second), ")");
}

}  // namespace

std::string Strategy::Label() const {
  std::vector<std::string> parts;
  if (pp > 1) parts.push_back(absl::StrCat("pp", pp));
  if (dp > 1 || (pp == 1 && mp == 1)) parts.push_back(absl::StrCat("dp", dp));
  if (mp > 1) parts.push_back(absl::StrCat("mp", mp, sequence_parallel ? "+sp" : ""));
  if (zero > 0) parts.push_back(absl::StrCat("zero", zero));
  if (micro_batches > 1) parts.push_back(absl::StrCat("mb", micro_batches));
  if (!schedule.empty()) {
    parts.push_back(schedule == "VPP" ? absl::StrCat("VPP", virtual_stages) : schedule);
  }
  if (!recompute.empty()) parts.push_back(absl::StrCat("recompute:", recompute));
  return absl::StrJoin(parts, " ");
}

absl::StatusOr<v1::JobSpec> ApplyStrategy(const v1::JobSpec& given, const Strategy& s) {
  v1::JobSpec spec = given;
  const std::vector<std::pair<std::string, int>> dims = MeshDims(s);
  spec.clear_mesh();
  for (const auto& [name, size] : dims) {
    spec.mutable_mesh()->add_shape(size);
    spec.mutable_mesh()->add_dim_names(name);
  }
  // The batch: Shard(0) on dp, Replicate() elsewhere.
  spec.mutable_data()->clear_placements();
  for (const auto& [name, size] : dims) {
    v1::Placement p = Replicate();
    if (name == "dp") {
      p.set_kind(v1::Placement::SHARD);
      p.set_axis(0);
    }
    *spec.mutable_data()->add_placements() = p;
  }
  spec.clear_parallelize();
  spec.mutable_model()->clear_placements();
  for (v1::Layer& layer : *spec.mutable_model()->mutable_layers()) {
    layer.clear_placements();
    layer.clear_stage();
  }
  if (s.mp > 1) {
    v1::ParallelizeConfig& tp = (*spec.mutable_parallelize())["mp"];
    tp.set_dim("mp");
    if (IsTransformer(spec)) {
      tp.set_preset("megatron");
      tp.set_sequence_parallel(s.sequence_parallel);
    } else {
      const auto pairs = ColumnRowPairs(spec);
      if (pairs.empty()) {
        return absl::InvalidArgumentError(
            "tensor parallelism: the model has no linear layer followed (through activations "
            "only) by another");
      }
      for (const auto& [column, row] : pairs) {
        (*tp.mutable_plan())[column] = "ColWiseParallel";
        (*tp.mutable_plan())[row] = "RowWiseParallel";
      }
    }
  }
  spec.clear_pipeline();
  if (s.pp > 1) {
    spec.mutable_pipeline()->set_dim("pp");
    spec.mutable_pipeline()->set_schedule(s.schedule);
    spec.mutable_pipeline()->set_micro_batches(s.micro_batches);
    spec.mutable_pipeline()->set_virtual_stages(s.virtual_stages);
  }
  spec.mutable_train()->set_micro_batches(s.micro_batches);
  spec.clear_sharding();
  if (s.zero > 0) {
    spec.mutable_sharding()->set_dim("dp");
    spec.mutable_sharding()->set_level(s.zero);
  }
  spec.mutable_model()->set_recompute(s.recompute);
  for (v1::Layer& layer : *spec.mutable_model()->mutable_layers()) layer.clear_recompute();
  return spec;
}

std::string StrategyYaml(const v1::JobSpec& spec, const Strategy& s) {
  const std::vector<std::pair<std::string, int>> dims = MeshDims(s);
  std::vector<std::string> shape, names;
  for (const auto& [name, size] : dims) {
    shape.push_back(absl::StrCat(size));
    names.push_back(name);
  }
  std::string y = absl::StrCat("mesh: {shape: [", absl::StrJoin(shape, ", "), "], dim_names: [",
                               absl::StrJoin(names, ", "), "]}\n");
  absl::StrAppend(&y, "data: {placements: {", s.dp > 1 ? "dp: Shard(0)" : "", "}}\n");
  if (s.mp > 1) {
    if (IsTransformer(spec)) {
      absl::StrAppend(&y, "parallelize: {mp: {dim: mp, plan: megatron",
                      s.sequence_parallel ? ", sequence_parallel: true" : "", "}}\n");
    } else {
      std::vector<std::string> plan;
      for (const auto& [column, row] : ColumnRowPairs(spec)) {
        plan.push_back(absl::StrCat(column, ": ColWiseParallel"));
        plan.push_back(absl::StrCat(row, ": RowWiseParallel"));
      }
      absl::StrAppend(&y, "parallelize: {mp: {dim: mp, plan: {", absl::StrJoin(plan, ", "),
                      "}}}\n");
    }
  }
  if (s.pp > 1) {
    absl::StrAppend(&y, "pipeline: {dim: pp, schedule: ", s.schedule,
                    ", micro_batches: ", s.micro_batches);
    if (s.virtual_stages > 1) absl::StrAppend(&y, ", virtual_stages: ", s.virtual_stages);
    absl::StrAppend(&y, "}\n");
  } else if (s.micro_batches > 1) {
    absl::StrAppend(&y, "train: {micro_batches: ", s.micro_batches, "}\n");
  }
  if (s.zero > 0) absl::StrAppend(&y, "sharding: {dim: dp, level: ", s.zero, "}\n");
  if (!s.recompute.empty()) absl::StrAppend(&y, "model: {recompute: ", s.recompute, "}\n");
  return y;
}

namespace {

// The strategy's hosts: each rank's slot as the scheduler would place it.
std::vector<std::string> HostsOfRanks(const std::vector<int64_t>& mesh_shape,
                                      const std::vector<std::string>& slots) {
  std::vector<std::string> hosts;
  for (int slot : PlaceRanksOnSlots(mesh_shape, slots)) hosts.push_back(slots[slot]);
  return hosts;
}

// Plans `spec` and, when it fits, simulates it: fills everything of `c` but the strategy. Each
// role rank's Program is emitted once, for its peak, and the simulated ones (one per stage, all
// role ranks) are replayed from those. `parameters`: the model's, counted from the first plan
// made (0 until then; every plan holds the same global parameters).
absl::Status Evaluate(v1::JobSpec spec, const std::vector<std::string>& slots, int64_t limit,
                      const v1::CostProfile& profile, const StopCheck& stop, Candidate* c,
                      double* parameters) {
  absl::Status prepared = PrepareJobSpec(&spec);
  absl::StatusOr<std::shared_ptr<const Plan>> plan =
      prepared.ok() ? PlanPrepared(spec, "auto", 0, stop) : prepared;
  if (!plan.ok()) {
    if (stop) RETURN_IF_ERROR(stop());  // the search stops; the candidate was not refused
    c->refused = std::string(plan.status().message());
    return absl::OkStatus();
  }
  if (*parameters == 0) {
    for (const ParameterShape& p : (*plan)->Parameters()) {
      double n = 1;
      for (int64_t d : p.shape) n *= static_cast<double>(d);
      *parameters += n;
    }
  }
  std::map<int, v1::Program> programs;  // by role rank
  for (int rank : (*plan)->RoleRanks()) {
    ASSIGN_OR_RETURN(v1::Program p, (*plan)->Program(rank, Attempt{}, stop));
    c->peak_bytes = std::max(c->peak_bytes, PlannedPeakBytes(p));
    programs.emplace(rank, std::move(p));
  }
  c->fits = limit <= 0 || c->peak_bytes <= limit;
  if (!c->fits) return absl::OkStatus();
  std::vector<v1::Program> simulated;
  for (int rank : SimulatedRanks(**plan)) simulated.push_back(std::move(programs.at(rank)));
  ASSIGN_OR_RETURN(StepPrediction p,
                   SimulateStep(simulated, HostsOfRanks((*plan)->mesh_shape(), slots), profile));
  c->prediction = std::move(p);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SearchResult> SearchStrategies(const v1::JobSpec& spec, const SearchOptions& options,
                                              const v1::CostProfile& profile) {
  if (options.ranks < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ranks: ", options.ranks, " (at least 1)"));
  }
  std::vector<std::string> slots = options.host_of_slot;
  if (slots.empty()) slots.assign(options.ranks, "localhost");
  if (static_cast<int>(slots.size()) < options.ranks) {
    return absl::InvalidArgumentError(absl::StrCat(options.ranks, " ranks, but only ", slots.size(),
                                                   " workers to place them on"));
  }
  SearchResult result;
  result.base = spec;
  result.options = options;
  result.profile = profile;
  result.memory_limit = options.memory_bytes > 0 ? options.memory_bytes : profile.memory_bytes();
  // Every candidate planned and simulated on a pool of threads, each taking the next in the
  // enumeration's order; the results are read back in that order, so the ranking is the same on
  // any number of threads. The first error (by that order) ends the search.
  const absl::Time started = absl::Now();
  const std::vector<Strategy> strategies = Enumerate(spec, options.ranks);
  const size_t n = strategies.size();
  std::vector<Candidate> candidates(n);
  std::vector<double> parameters_of(n, 0.0);
  std::vector<absl::Status> errors(n);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto evaluate_some = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      Candidate& c = candidates[i];
      c.strategy = strategies[i];
      c.refused = Indivisible(spec, c.strategy);
      if (!c.refused.empty()) continue;
      absl::StatusOr<v1::JobSpec> applied = ApplyStrategy(spec, c.strategy);
      if (!applied.ok()) {
        c.refused = std::string(applied.status().message());
        continue;
      }
      errors[i] = Evaluate(*applied, slots, result.memory_limit, profile, options.stop, &c,
                           &parameters_of[i]);
      if (!errors[i].ok()) failed = true;
    }
  };
  const size_t threads = std::min<size_t>(
      n, options.threads > 0 ? static_cast<size_t>(options.threads)
                             : std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(evaluate_some);
  evaluate_some();
  for (std::thread& t : pool) t.join();
  for (const absl::Status& error : errors) RETURN_IF_ERROR(error);
  result.threads = static_cast<int>(threads);
  double parameters = 0;
  for (double p : parameters_of) parameters = std::max(parameters, p);
  for (Candidate& c : candidates) {
    if (!c.refused.empty()) {
      result.refused.push_back(std::move(c));
    } else if (!c.fits) {
      result.over_memory.push_back(std::move(c));
    } else {
      result.ranked.push_back(std::move(c));
    }
  }
  // Fastest first; ties to the smaller peak, then the enumeration's order (stable).
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.prediction->step_s != b.prediction->step_s) {
                       return a.prediction->step_s < b.prediction->step_s;
                     }
                     return a.peak_bytes < b.peak_bytes;
                   });
  std::stable_sort(
      result.over_memory.begin(), result.over_memory.end(),
      [](const Candidate& a, const Candidate& b) { return a.peak_bytes < b.peak_bytes; });
  if (result.ranked.empty()) {
    if (!result.over_memory.empty()) {
      const Candidate& smallest = result.over_memory.front();
      return absl::InvalidArgumentError(absl::StrCat(
          "no strategy on ", options.ranks, " ranks fits ", FormatByteSize(result.memory_limit),
          " per worker: the smallest planned peak is ", FormatByteSize(smallest.peak_bytes), " (",
          smallest.strategy.Label(), ")"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "no strategy on ", options.ranks, " ranks can be planned",
        result.refused.empty() ? ""
                               : absl::StrCat(": e.g. ", result.refused.front().strategy.Label(),
                                              ": ", result.refused.front().refused)));
  }
  ASSIGN_OR_RETURN(v1::JobSpec picked, ApplyStrategy(spec, result.ranked.front().strategy));
  std::vector<int64_t> picked_shape(picked.mesh().shape().begin(), picked.mesh().shape().end());
  result.host_of_rank = HostsOfRanks(picked_shape, slots);
  if (WorldSize(spec) > 1) {  // the spec wrote a strategy of its own
    Candidate given;
    given.as_written = true;
    RETURN_IF_ERROR(Evaluate(spec, slots, /*limit=*/0, profile, options.stop, &given, &parameters));
    given.fits = result.memory_limit <= 0 || given.peak_bytes <= result.memory_limit;
    result.given = std::move(given);
  }
  // Work per step, for tokens/s and MFU.
  const double samples = static_cast<double>(spec.data().batch_size());
  result.tokens_per_step = spec.data().source() == "tokens"
                               ? samples * static_cast<double>(spec.data().seq_len())
                               : samples;
  result.flops_per_step = 6 * parameters * result.tokens_per_step;
  result.search_s = absl::ToDoubleSeconds(absl::Now() - started);
  return result;
}

std::string FormatSearch(const SearchResult& r) {
  const Candidate& best = r.ranked.front();
  const StepPrediction& p = *best.prediction;
  std::map<std::string, int> per_host;
  for (const std::string& h : r.host_of_rank) ++per_host[h];
  std::vector<std::string> hosts;
  for (const auto& [h, n] : per_host) hosts.push_back(absl::StrCat(h, " (", n, ")"));
  std::string s = absl::StrCat(
      "auto: ", r.options.ranks, " ranks on ", absl::StrJoin(hosts, ", "), "; ",
      r.ranked.size() + r.over_memory.size() + r.refused.size(), " strategies: ", r.ranked.size(),
      " ranked, ", r.over_memory.size(), " over the memory limit (",
      r.memory_limit > 0 ? absl::StrCat(FormatByteSize(r.memory_limit), " per worker") : "none",
      "), ", r.refused.size(), " refused; searched in ", absl::StrFormat("%.1f", r.search_s),
      " s on ", r.threads, " thread", r.threads == 1 ? "" : "s", "\n\n");
  absl::StrAppend(&s, "chosen: ", best.strategy.Label(), "\n");
  absl::StrAppend(&s, "  predicted step ", Seconds(p.step_s), " (p90 ", Seconds(p.tail_step_s),
                  "), ", absl::StrFormat("%.0f", r.tokens_per_step / p.step_s), " ",
                  r.base.data().source() == "tokens" ? "tokens" : "samples", "/s");
  if (r.profile.peak_flops() > 0 && r.flops_per_step > 0) {
    absl::StrAppend(
        &s, absl::StrFormat(", MFU %.1f%%", 100 * r.flops_per_step / p.step_s /
                                                (r.options.ranks * r.profile.peak_flops())));
  }
  absl::StrAppend(&s, "\n  step split (rank ", p.critical_rank, "): compute ",
                  Seconds(p.split.compute_s), ", exposed communication ",
                  Seconds(p.split.exposed_comm_s), ", bubble ", Seconds(p.split.bubble_s),
                  ", optimizer ", Seconds(p.split.optimizer_s), "\n");
  absl::StrAppend(
      &s, "  memory per rank: ", FormatByteSize(best.peak_bytes), " planned peak",
      r.memory_limit > 0 ? absl::StrCat(" (limit ", FormatByteSize(r.memory_limit), ")") : "",
      "\n");
  absl::StrAppend(&s, "  spec keys (copy them into the spec to pin this plan):\n");
  for (absl::string_view line : absl::StrSplit(StrategyYaml(r.base, best.strategy), '\n')) {
    if (!line.empty()) absl::StrAppend(&s, "    ", line, "\n");
  }
  const int runners = std::min<int>(r.options.runners_up, static_cast<int>(r.ranked.size()) - 1);
  if (runners > 0) absl::StrAppend(&s, "\nrunners-up:\n");
  for (int i = 1; i <= runners; ++i) {
    const Candidate& c = r.ranked[i];
    absl::StrAppend(&s, "  ", i + 1, ". ", c.strategy.Label(), ": ", Seconds(c.prediction->step_s),
                    absl::StrFormat(" (+%.1f%%)", 100 * (c.prediction->step_s / p.step_s - 1)),
                    ", ", FormatByteSize(c.peak_bytes), "; ", WhyLost(c, best), "\n");
  }
  if (!r.over_memory.empty()) {
    absl::StrAppend(&s, "\nover the memory limit (", r.over_memory.size(),
                    "), nearest: ", r.over_memory.front().strategy.Label(), " needs ",
                    FormatByteSize(r.over_memory.front().peak_bytes), "\n");
  }
  if (!r.refused.empty()) {
    absl::StrAppend(&s, "refused (", r.refused.size(), "), e.g. ",
                    r.refused.front().strategy.Label(), ": ", r.refused.front().refused, "\n");
  }
  if (r.given.has_value()) {
    const Candidate& g = *r.given;
    if (!g.refused.empty()) {
      absl::StrAppend(&s, "\nthe spec's own strategy cannot be planned: ", g.refused, "\n");
    } else if (!g.prediction.has_value()) {
      absl::StrAppend(&s, "\nthe spec's own strategy: ", FormatByteSize(g.peak_bytes),
                      " per rank\n");
    } else {
      const double ratio = g.prediction->step_s / p.step_s - 1;
      absl::StrAppend(&s, "\nthe spec's own strategy: ", Seconds(g.prediction->step_s), ", ",
                      absl::StrFormat("%.1f%% %s than the pick", 100 * std::abs(ratio),
                                      ratio >= 0 ? "slower" : "faster"),
                      ", ", FormatByteSize(g.peak_bytes), " per rank",
                      g.fits ? "" : " (over the memory limit: it would not run)", "\n");
    }
  }
  return s;
}

std::string FormatSearchJson(const SearchResult& r) {
  auto candidate = [&](const Candidate& c) {
    nlohmann::json j = {{"strategy", c.as_written ? "as written" : c.strategy.Label()},
                        {"peak_bytes", c.peak_bytes},
                        {"fits", c.fits}};
    if (!c.as_written) j["spec_keys"] = StrategyYaml(r.base, c.strategy);
    if (!c.refused.empty()) j["refused"] = c.refused;
    if (c.prediction.has_value()) {
      const StepPrediction& p = *c.prediction;
      j["predicted"] = {{"step_s", p.step_s},
                        {"tail_step_s", p.tail_step_s},
                        {"critical_rank", p.critical_rank},
                        {"compute_s", p.split.compute_s},
                        {"exposed_comm_s", p.split.exposed_comm_s},
                        {"bubble_s", p.split.bubble_s},
                        {"optimizer_s", p.split.optimizer_s}};
    }
    return j;
  };
  nlohmann::json out = {{"ranks", r.options.ranks},
                        {"memory_limit_bytes", r.memory_limit},
                        {"host_of_rank", r.host_of_rank},
                        {"tokens_per_step", r.tokens_per_step},
                        {"flops_per_step", r.flops_per_step},
                        {"search_s", r.search_s},
                        {"threads", r.threads}};
  out["ranked"] = nlohmann::json::array();
  for (const Candidate& c : r.ranked) out["ranked"].push_back(candidate(c));
  out["over_memory"] = nlohmann::json::array();
  for (const Candidate& c : r.over_memory) out["over_memory"].push_back(candidate(c));
  out["refused"] = nlohmann::json::array();
  for (const Candidate& c : r.refused) out["refused"].push_back(candidate(c));
  if (r.given.has_value()) out["given"] = candidate(*r.given);
  return out.dump(2) + "\n";
}

}  // namespace weft::planner::cost
