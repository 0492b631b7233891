// Collects the CheckpointReports of one job attempt and yields each checkpoint save once every
// rank has reported it: the chunks of the ranks that wrote (the others report none), the bytes
// written and the slowest rank's write time. A save some rank never reported (it died, the job
// failed) is simply never complete, so nothing is committed for it.
//
// E.g.
//   CheckpointAggregator saves(/*world_size=*/2);
//   saves.Add(report_rank0_step10);   // std::nullopt: rank 1 still missing
//   ASSIGN_OR_RETURN(std::optional<CompleteSave> save, saves.Add(report_rank1_step10));
//   // save->chunks go to checkpoint::CommitCheckpoint(dir, save->step, save->chunks, keep)
#ifndef WEFT_COORDINATOR_CHECKPOINT_AGGREGATOR_H_
#define WEFT_COORDINATOR_CHECKPOINT_AGGREGATOR_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/checkpoint.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

struct CompleteSave {
  int64_t step = 0;
  std::vector<checkpoint::IndexedChunk> chunks;  // every writing rank's, in rank order
  int64_t bytes = 0;                             // tensor bytes written by all ranks
  double write_seconds = 0;                      // the slowest rank's
};

class CheckpointAggregator {
 public:
  explicit CheckpointAggregator(int world_size) : world_size_(world_size) {}

  // The save when this report completes it, std::nullopt while ranks are missing.
  // INVALID_ARGUMENT for a rank out of range, a step below 1 or a duplicate report.
  absl::StatusOr<std::optional<CompleteSave>> Add(const v1::CheckpointReport& report);

 private:
  struct Partial {
    std::map<int, v1::CheckpointReport> by_rank;
  };
  const int world_size_;
  std::map<int64_t, Partial> partial_;  // by step
  std::set<int64_t> complete_;          // steps already yielded
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_CHECKPOINT_AGGREGATOR_H_
