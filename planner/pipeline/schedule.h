// Pipeline schedules: for each stage (a rank's coordinate along the pipeline mesh dim), the
// order in which it runs the forward (F) and backward (B) of each (micro-batch, chunk). One file
// per schedule over this base, as Paddle's and Megatron's schedules are:
//   FThenB (GPipe)          fthenb.cc
//   1F1B (PipeDream-flush)  one_f_one_b.cc
//   VPP (Megatron's interleaved 1F1B, v chunks per stage)  vpp.cc
// Chunk c runs on stage c mod stages. An order is a list of steps; the pipeline pass puts the
// point-to-point transfers of a step in one batch after it (the sends of what the step produced,
// the receives of what the next step consumes), as Megatron's batched p2p calls do, so a step
// of several items (VPP's steady state: [F, B]) defers its sends until all of them ran.
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<PipelineSchedule> s, ScheduleByName("1F1B"));
//   PipelineShape shape{/*stages=*/4, /*micro_batches=*/8, /*virtual_stages=*/1};
//   RETURN_IF_ERROR(s->Check(shape));
//   std::vector<ScheduleStep> stage0 = s->Order(shape, 0);  // F0 F1 F2 F3 B0 F4 B1 ...
#ifndef WEFT_PLANNER_PIPELINE_SCHEDULE_H_
#define WEFT_PLANNER_PIPELINE_SCHEDULE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weft::planner::pipeline {

struct WorkItem {
  enum Kind { kForward, kBackward };
  Kind kind = kForward;
  int micro_batch = 0;
  int chunk = 0;

  bool operator==(const WorkItem& o) const {
    return kind == o.kind && micro_batch == o.micro_batch && chunk == o.chunk;
  }
  bool operator!=(const WorkItem& o) const { return !(*this == o); }
  // "F3" (with_chunk false) or "F3.2": micro-batch 3 of chunk 2.
  std::string ToString(bool with_chunk = true) const;
};

using ScheduleStep = std::vector<WorkItem>;

struct PipelineShape {
  int stages = 1;          // size of the pipeline mesh dim
  int micro_batches = 1;
  int virtual_stages = 1;  // chunks per stage
  int chunks() const { return stages * virtual_stages; }
};

class PipelineSchedule {
 public:
  virtual ~PipelineSchedule() = default;
  virtual std::string name() const = 0;
  // OK when this schedule can order `shape`, else INVALID_ARGUMENT saying why not.
  virtual absl::Status Check(const PipelineShape& shape) const = 0;
  // The steps of `stage`; shape must pass Check.
  virtual std::vector<ScheduleStep> Order(const PipelineShape& shape, int stage) const = 0;
};

std::unique_ptr<PipelineSchedule> NewFThenBSchedule();
std::unique_ptr<PipelineSchedule> NewOneFOneBSchedule();
std::unique_ptr<PipelineSchedule> NewVppSchedule();

// FThenB | 1F1B | VPP; an unknown name is INVALID_ARGUMENT listing the known ones.
absl::StatusOr<std::unique_ptr<PipelineSchedule>> ScheduleByName(const std::string& name);

// Checks what every schedule must satisfy: `orders` (one per stage) run the F and the B of
// every (micro-batch, chunk) exactly once, on stage chunk mod stages, each B after its F and
// after the B of the next chunk's same micro-batch has been possible, i.e. the orders can run
// with unbounded buffering (a dependency cycle across stages is an error naming the items).
absl::Status CheckOrders(const PipelineShape& shape,
                         const std::vector<std::vector<ScheduleStep>>& orders);

// The items of an order, steps flattened.
std::vector<WorkItem> Flatten(const std::vector<ScheduleStep>& order);
// "F0 F1 B0 ..." (with chunks: "F0.0 F1.0 ..."); steps of several items in brackets.
std::string FormatOrder(const std::vector<ScheduleStep>& order, bool with_chunk);
// The most (micro-batch, chunk) forwards whose backward has not run yet, over the order: how
// many micro-batches' activations the stage holds at once.
int PeakActivations(const std::vector<ScheduleStep>& order);

}  // namespace weft::planner::pipeline

#endif  // WEFT_PLANNER_PIPELINE_SCHEDULE_H_
