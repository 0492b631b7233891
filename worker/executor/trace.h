// The step's timeline (Program.trace): one span per maximal run of consecutive compute
// instructions with the same phase, micro-batch and chunk ("F mb3 c0", "B mb3 c0", "optimizer",
// "load mb3"), and one per SEND, RECV and collective ("send fc3.out to r2",
// "all_reduce fc0.weight@grad"). Templates are built once at Create; RunTraced fills in the times.
// When collectives run asynchronously (async_collectives.h) they get no span of the executor's
// own: the executor's thread shows "wait" spans where it waited for them, and the collectives'
// own runs are added on lane 1 by the executor.
//
// E.g.
//   std::vector<v1::TraceSpan> templates = BuildSpanTemplates(program, &steps, nullptr);
//   RETURN_IF_ERROR(RunTraced(steps, templates, kernels, step, {run_one}, &spans));
#ifndef WEFT_WORKER_EXECUTOR_TRACE_H_
#define WEFT_WORKER_EXECUTOR_TRACE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "weft/v1/program.pb.h"
#include "weft/v1/service.pb.h"
#include "worker/executor/async_collectives.h"
#include "worker/executor/step.h"
#include "worker/kernels/kernels.h"

namespace weft {

// A collective's span name: "all_reduce fc0.weight@grad" (the op, lower case, and its input).
std::string CollectiveSpanName(const v1::Program& program, const Step& s);

// The spans of collectives that ran on their communicators' threads (lane 1), appended to *spans.
void AppendCollectiveSpans(const v1::Program& program, const std::vector<Step>& steps,
                           const std::vector<CollectiveTiming>& timings,
                           std::vector<v1::TraceSpan>* spans);

// One template per span of the step, in order (name, category, micro-batch, chunk); sets each
// step's span index into them. A step marked in `async_steps` (by index; null: none) is a
// collective started on its communicator's thread: it joins the span around it.
std::vector<v1::TraceSpan> BuildSpanTemplates(const v1::Program& program, std::vector<Step>* steps,
                                              const std::vector<bool>* async_steps);

// How RunTraced runs a step.
struct TracedRun {
  std::function<absl::Status(const Step&)> run;
  // Optional (asynchronous collectives): whether the executor must wait for started collectives
  // before the step, and that wait; it gets a "wait" span of its own.
  std::function<bool(const Step&)> must_wait;
  std::function<absl::Status(const Step&)> wait;
};

// Runs every step, timing the spans into *spans (wall clock, Unix microseconds). The kernels are
// synchronized at each span boundary so that an asynchronous backend's work lands in the span
// that issued it. Errors name `step` (the step number).
absl::Status RunTraced(const std::vector<Step>& steps,
                       const std::vector<v1::TraceSpan>& templates, Kernels& kernels, int64_t step,
                       const TracedRun& how, std::vector<v1::TraceSpan>* spans);

}  // namespace weft

#endif  // WEFT_WORKER_EXECUTOR_TRACE_H_
