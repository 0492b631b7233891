#include "coordinator/checkpoint_aggregator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace weft::coordinator {

absl::StatusOr<std::optional<CompleteSave>> CheckpointAggregator::Add(
    const v1::CheckpointReport& report) {
  if (report.rank() < 0 || report.rank() >= world_size_) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint report from rank ", report.rank(),
                                                   ", world size is ", world_size_));
  }
  if (report.step() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint report of rank ", report.rank(),
                                                   " for step ", report.step(),
                                                   "; steps count from 1"));
  }
  if (complete_.count(report.step()) > 0) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", report.rank(),
                                                   " reported the checkpoint of step ",
                                                   report.step(), " after it was complete"));
  }
  Partial& partial = partial_[report.step()];
  if (!partial.by_rank.emplace(report.rank(), report).second) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", report.rank(), " reported the checkpoint of step ", report.step(), " twice"));
  }
  if (static_cast<int>(partial.by_rank.size()) < world_size_) {
    return std::optional<CompleteSave>();
  }
  CompleteSave save;
  save.step = report.step();
  for (const auto& [rank, r] : partial.by_rank) {
    for (const v1::CheckpointChunk& c : r.chunks()) {
      save.chunks.push_back(checkpoint::ChunkFromProto(c));
    }
    save.bytes += r.bytes();
    save.write_seconds = std::max(save.write_seconds, r.seconds());
  }
  partial_.erase(report.step());
  complete_.insert(save.step);
  return std::optional<CompleteSave>(std::move(save));
}

}  // namespace weft::coordinator
