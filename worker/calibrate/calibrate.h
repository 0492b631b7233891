// Calibration: measuring the CostProfile (proto/weft/v1/profile.proto) that the planner's
// simulator prices Programs with, on the worker's own code paths: the Kernels the executor calls
// for a MATMUL, an ATTENTION and the memory-bound ops, and the Communicator its collectives go
// through. Every figure is a linear fit, seconds = alpha + per_unit * units, in the units
// planner/cost/profile.h's ComputeWork and LinkSeconds price with:
//   MATMUL     2 m n k flops
//   ATTENTION  4 B H T^2 D flops of q [B, T, H, D]
//   MEMORY     bytes of the distinct buffers an op reads and writes, at their storage dtype
//   links      bytes this rank sends, as planner/format.h CollectiveBytes counts them (a ring
//              all-reduce 2 (K-1)/K of the tensor, all-gather and reduce-scatter (K-1)/K of the
//              full tensor, a SEND its whole buffer)
// Each shape is called once to warm up, then timed several times; the fit runs over the mean
// times (a step is a sum of many calls: its expected time is the sum of their means, which on a
// CPU its workers share includes the calls descheduled behind another's; the median would leave
// those out), and its tail_ratio is the median over shapes of p90 / p50.
//
// E.g.
//   ASSIGN_OR_RETURN(std::vector<v1::KernelCost> kernels, MeasureKernels({.quick = true}));
//   // on every member of a group, in the same order:
//   ASSIGN_OR_RETURN(std::vector<v1::LinkCost> links,
//                    MeasureLinks(*comm, {.scope = v1::LinkCost::INTRA_HOST}));
#ifndef WEFT_WORKER_CALIBRATE_CALIBRATE_H_
#define WEFT_WORKER_CALIBRATE_CALIBRATE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "weft/v1/profile.pb.h"
#include "worker/comm/communicator.h"
#include "worker/kernels/kernels.h"

namespace weft::calibrate {

// The times of one shape's calls, in seconds.
struct Timing {
  std::string what;  // the call and its shape, e.g. "MATMUL f32 [1024,1024,1024]"

  double units = 0;  // the work of one call, in its fit's units
  double mean_s = 0;
  double median_s = 0;
  double p90_s = 0;
  int samples = 0;  // timed calls
};

// Calls `call` once to warm up, then times it `reps` times (at least 1), or fewer once more than
// `budget_s` seconds have gone by (at least 3 when reps allows), with steady_clock.
Timing TimeCalls(std::string what, double units, const std::function<void()>& call, int reps,
                 double budget_s);
// The mean, median and p90 of times already taken.
Timing TimingOf(std::string what, double units, const std::vector<double>& seconds);

// seconds = alpha + per_unit * units by least squares over the timings' means, each weighted
// by 1 / mean: between absolute residuals, where the largest shape alone would set alpha (a
// link's latency), and relative ones, where cache-resident small shapes would set the rate that
// prices the large ones a step's time is made of. alpha is clamped at 0 (the line refit through
// the origin). tail_ratio: the median over timings of p90 / median (>= 1); samples: the timed
// calls behind it.
v1::LinearFit FitLinear(absl::Span<const Timing> timings);

// Called with every shape's timing and the fit it went into, once fitted (weft-calibrate
// --verbose prints them).
using TimingReport = std::function<void(const Timing& timing, const v1::LinearFit& fit)>;

struct KernelCalibrationOptions {
  // Fewer and smaller shapes and calls: well under 2 s, for tests. The full run is ~10 s on two
  // cores.
  bool quick = false;
  // The backend measured (cpu unless said; precision kF32: the operand rounding of kBf16 is a
  // program's choice, not the storage's).
  KernelOptions kernels;
  TimingReport report;  // may be empty
};

// A KernelCost per kind and storage dtype: MATMUL f32 and bf16 (bf16 storage widened to float32
// with Cast and the output rounded back, as the executor runs it), ATTENTION f32, MEMORY f32 and
// bf16 (ADD, RELU, and the ADAMW update; bf16 widened likewise). Errors name the kernel that
// could not get its memory.
absl::StatusOr<std::vector<v1::KernelCost>> MeasureKernels(const KernelCalibrationOptions& options);

struct LinkCalibrationOptions {
  v1::LinkCost::Scope scope = v1::LinkCost::INTRA_HOST;  // where the group's members are
  bool quick = false;   // tensors of 4 KiB to 1 MiB rather than 4 KiB to 16 MiB
  TimingReport report;  // may be empty
};

// A LinkCost per op (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, SEND) over `comm`'s group, each of
// f32 tensors from 4 KiB to 16 MiB. Every member calls it, in the same order as its other
// collectives on `comm`; each timed call starts after a barrier. SEND goes from member 0 to
// member 1 (the others sit it out). The members then take the maximum of each time (an
// all-reduce of them), so every member returns the same costs: what the slowest member waited.
// Errors name the op and the size that failed.
absl::StatusOr<std::vector<v1::LinkCost>> MeasureLinks(Communicator& comm,
                                                       const LinkCalibrationOptions& options);

// How many times slower a matmul runs while an all-reduce is in flight on another thread (>= 1):
// member 0 times a matmul alone, then again while the members all-reduce a few MiB over `comm`
// in a loop. Every member calls it; only member 0 measures, the others return 1.0, as does
// member 0 when no matmul both started and ended while the all-reduces ran.
absl::StatusOr<double> MeasureOverlapSlowdown(Communicator& comm, bool quick,
                                              const KernelOptions& kernels = {});

// What the executor spends per instruction beyond its kernel's work (decoding, dispatch, the
// checks around a step's instructions): the median over steps of a program of one-element SCALEs
// run through a real Executor, per instruction. The simulator adds it to every instruction
// (CostProfile.instruction_overhead_s); small models run thousands a step.
absl::StatusOr<double> MeasureInstructionOverhead(bool quick);

}  // namespace weft::calibrate

#endif  // WEFT_WORKER_CALIBRATE_CALIBRATE_H_
