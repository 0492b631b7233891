// The auto-parallel search: from a job spec and a number of ranks, every strategy the planner can
// run (mesh factorization pp x dp x mp, ZeRO level, micro-batches under the spec's global batch,
// the pipeline schedule and its virtual stages, recompute, sequence parallelism), each planned for
// real: a strategy the planner refuses is dropped with its reason, one whose exact planned peak
// (the arena of every role rank, what the worker allocates) exceeds a worker's memory is dropped
// as not fitting, and the rest are ranked by the simulator's step time over a calibrated profile,
// their ranks placed on the hosts as the scheduler would place them (common/rank_placement.h).
// The strategy never changes the math: every candidate is a plan the planner makes from the same
// model, data and optimizer, whose losses equal the 1-rank run's.
//
// Two refusals are the search's own and cost no planning: a batch that does not split evenly
// over dp and the micro-batches, and more pipeline chunks than layers. Everything else (heads or
// a sequence that do not split over mp, ...) is the planner's to refuse, with its message; the
// rest are planned in full.
//
// E.g.
//   SearchOptions options{.ranks = 4, .host_of_slot = {"a", "a", "b", "b"}};
//   ASSIGN_OR_RETURN(SearchResult r, SearchStrategies(spec, options, profile));
//   std::cout << FormatSearch(r);   // the pick as spec keys, its split, the runners-up
#ifndef WEFT_PLANNER_COST_SEARCH_H_
#define WEFT_PLANNER_COST_SEARCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/cost/simulate.h"
#include "planner/stop.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/profile.pb.h"

namespace weft::planner::cost {

// One strategy: what a user would write in the spec to pin it.
struct Strategy {
  int pp = 1;
  int dp = 1;
  int mp = 1;
  int zero = 0;                 // sharding.level over dp (0: none)
  int micro_batches = 1;
  std::string schedule;         // 1F1B | VPP with pp > 1
  int virtual_stages = 1;
  std::string recompute;        // "" | selective | full
  bool sequence_parallel = false;

  std::string Label() const;    // e.g. "pp2 dp2 zero1 mb4 1F1B"
};

struct Candidate {
  Strategy strategy;
  bool as_written = false;         // the spec's own strategy (SearchResult::given), not enumerated
  std::string refused;             // why the planner refused it (empty: planned)
  int64_t peak_bytes = 0;          // the largest role rank's planned arena
  bool fits = false;
  std::optional<StepPrediction> prediction;  // planned and fitting
};

struct SearchOptions {
  int ranks = 1;
  // The host of each worker the job may run on, at least `ranks` of them (empty: all on one
  // host). Ranks are placed on them as the scheduler places a job's.
  std::vector<std::string> host_of_slot;
  int64_t memory_bytes = 0;        // per worker; 0: the profile's memory_bytes, 0 there: no limit
  int runners_up = 3;
  // Polled as each candidate is planned (stop.h): the coordinator's shutdown, a call's deadline.
  // Its status ends the search, code and all. The search's threads call it at once, so it must
  // be safe to call from several threads.
  StopCheck stop;
  // Candidates are planned and simulated on this many threads (0: one per core). The result
  // does not depend on it.
  int threads = 0;
};

struct SearchResult {
  v1::JobSpec base;                       // the spec searched, as given
  SearchOptions options;
  int64_t memory_limit = 0;               // the limit applied (0: none)
  std::vector<Candidate> ranked;          // planned, fitting, fastest first
  std::vector<Candidate> over_memory;     // planned, peak over the limit, smallest peak first
  std::vector<Candidate> refused;         // divisibility or the planner said no
  std::optional<Candidate> given;         // the spec's own strategy, when it wrote one
  std::vector<std::string> host_of_rank;  // the pick's placement
  double tokens_per_step = 0;             // samples x seq_len (tokens data), else samples
  double flops_per_step = 0;              // 6 x parameters x tokens, for MFU
  v1::CostProfile profile;
  double search_s = 0;                    // wall time of the search
  int threads = 0;                        // the threads it planned on

  // Every strategy the search looked at.
  int considered() const {
    return static_cast<int>(ranked.size() + over_memory.size() + refused.size());
  }
};

// INVALID_ARGUMENT when no candidate fits (naming the smallest peak and the limit) or the spec
// cannot be searched (ranks < 1, fewer slots than ranks); the profile's NOT_FOUND when it cannot
// price a candidate.
absl::StatusOr<SearchResult> SearchStrategies(const v1::JobSpec& spec,
                                              const SearchOptions& options,
                                              const v1::CostProfile& profile);

// The spec with `strategy` applied: mesh, batch placements, parallelize, pipeline, sharding,
// recompute and micro-batches (the model, data, optimizer and train otherwise as given; any
// placements the spec wrote are dropped). INVALID_ARGUMENT for a tensor-parallel strategy on a
// layers model without a column -> row pair of linear layers.
absl::StatusOr<v1::JobSpec> ApplyStrategy(const v1::JobSpec& spec, const Strategy& strategy);

// The strategy as the YAML keys that pin it (mesh, data.placements, parallelize, pipeline,
// sharding, model.recompute, train.micro_batches).
std::string StrategyYaml(const v1::JobSpec& spec, const Strategy& strategy);

// What `weftctl plan --auto` prints: the pick (its keys, predicted step and p90, tokens/s, MFU
// where the profile knows the peak, memory per rank against the limit, the split), the runners-up
// with why each lost, what did not fit or was refused (counts and the nearest ones), and how the
// spec's own strategy compares.
std::string FormatSearch(const SearchResult& result);
std::string FormatSearchJson(const SearchResult& result);

}  // namespace weft::planner::cost

#endif  // WEFT_PLANNER_COST_SEARCH_H_
