// MeasureLinks and MeasureOverlapSlowdown (calibrate.h): each op of the table below over tensor
// sizes from 4 KiB up, every call timed on every member between a barrier and its return, and
// the members' times maxed call by call before the medians are taken.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/calibrate/calibrate.h"
#include "worker/kernels/backend.h"

namespace weft::calibrate {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

// The buffers of one size: `count` float32 elements in and out (a multiple of the group's size).
struct LinkBuffers {
  std::vector<float> in, out;
  std::vector<int64_t> counts;  // count / K per member
};

// One op: the bytes a member sends for a tensor of `bytes` over K members, as planner/format.h
// CollectiveBytes counts them, and one call over `count` elements.
struct LinkProbe {
  v1::Instruction::Op op;
  int64_t (*bytes_sent)(int64_t bytes, int64_t k);
  absl::Status (*run)(Communicator& comm, LinkBuffers& b, int64_t count);
};

const LinkProbe kLinkProbes[] = {
    {.op = v1::Instruction::ALL_REDUCE,
     .bytes_sent = [](int64_t bytes, int64_t k) { return 2 * (k - 1) * bytes / k; },
     .run =
         [](Communicator& comm, LinkBuffers& b, int64_t count) {
           return comm.AllReduce(b.in.data(), count, v1::F32, ReduceOp::kSum);
         }},
    // The tensor is the gathered one, `count` elements; each member brings count / K.
    {.op = v1::Instruction::ALL_GATHER,
     .bytes_sent = [](int64_t bytes, int64_t k) { return bytes * (k - 1) / k; },
     .run =
         [](Communicator& comm, LinkBuffers& b, int64_t count) {
           return comm.AllGather(b.in.data(), b.out.data(), b.counts, v1::F32);
         }},
    {.op = v1::Instruction::REDUCE_SCATTER,
     .bytes_sent = [](int64_t bytes, int64_t k) { return bytes * (k - 1) / k; },
     .run =
         [](Communicator& comm, LinkBuffers& b, int64_t count) {
           return comm.ReduceScatter(b.in.data(), b.out.data(), b.counts, v1::F32);
         }},
    // Member 0 to member 1; the others wait at the next barrier.
    {.op = v1::Instruction::SEND,
     .bytes_sent = [](int64_t bytes, int64_t k) { return bytes; },
     .run =
         [](Communicator& comm, LinkBuffers& b, int64_t count) {
           if (comm.rank() == 0) return comm.Send(b.in.data(), count, v1::F32, 1, /*tag=*/7);
           if (comm.rank() == 1) return comm.Recv(b.out.data(), count, v1::F32, 0, /*tag=*/7);
           return absl::OkStatus();
         }},
};

// Timed calls per size: the same on every member, since each one is a collective.
int Reps(int64_t bytes, bool quick) {
  if (quick) return 9;
  return bytes <= 256 * kKiB ? 11 : bytes <= 4 * kMiB ? 7 : 4;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

absl::StatusOr<std::vector<v1::LinkCost>> MeasureLinks(Communicator& comm,
                                                       const LinkCalibrationOptions& options) {
  const int64_t k = comm.size();
  if (k < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibrating links on ", comm.name(), ": needs at least two members"));
  }
  std::vector<int64_t> sizes;
  for (int64_t bytes = 4 * kKiB; bytes <= (options.quick ? kMiB : 16 * kMiB); bytes *= 4) {
    sizes.push_back(bytes);
  }
  // Every call's time in nanoseconds, in the same order on every member, then maxed over them.
  std::vector<int64_t> nanos;
  for (const LinkProbe& probe : kLinkProbes) {
    for (int64_t bytes : sizes) {
      const int64_t count = bytes / sizeof(float) / k * k;
      LinkBuffers b{.in = std::vector<float>(count, 1.0f),
                    .out = std::vector<float>(count),
                    .counts = std::vector<int64_t>(k, count / k)};
      const std::string what =
          absl::StrCat("calibrating ", v1::Instruction::Op_Name(probe.op), " of ",
                       count * sizeof(float), " bytes on ", comm.name());
      for (int rep = -1; rep < Reps(bytes, options.quick); ++rep) {  // rep -1: the warm-up
        RETURN_IF_ERROR(Annotate(comm.Barrier(), what));
        const Clock::time_point t0 = Clock::now();
        RETURN_IF_ERROR(Annotate(probe.run(comm, b, count), what));
        const Clock::duration d = Clock::now() - t0;
        if (rep >= 0)
          nanos.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
      }
    }
  }
  RETURN_IF_ERROR(
      Annotate(comm.AllReduce(nanos.data(), nanos.size(), v1::I64, ReduceOp::kMax),
               absl::StrCat("calibrating links on ", comm.name(), ": the slowest member's times")));
  std::vector<v1::LinkCost> costs;
  size_t next = 0;
  for (const LinkProbe& probe : kLinkProbes) {
    std::vector<Timing> timings;
    for (int64_t bytes : sizes) {
      const int64_t count = bytes / sizeof(float) / k * k;
      std::vector<double> seconds;
      for (int rep = 0; rep < Reps(bytes, options.quick); ++rep) {
        seconds.push_back(static_cast<double>(nanos[next++]) * 1e-9);
      }
      const int64_t tensor_bytes = count * static_cast<int64_t>(sizeof(float));
      timings.push_back(
          TimingOf(absl::StrCat(v1::Instruction::Op_Name(probe.op), " of ", tensor_bytes, " bytes"),
                   static_cast<double>(probe.bytes_sent(tensor_bytes, k)), seconds));
    }
    v1::LinkCost& cost = costs.emplace_back();
    cost.set_op(probe.op);
    cost.set_group_size(static_cast<int32_t>(k));
    cost.set_scope(options.scope);
    *cost.mutable_fit() = FitLinear(timings);
    for (const Timing& t : timings) {
      if (options.report) options.report(t, cost.fit());
    }
  }
  return costs;
}

absl::StatusOr<double> MeasureOverlapSlowdown(Communicator& comm, bool quick,
                                              const KernelOptions& kernel_options) {
  const std::string what = absl::StrCat("measuring compute overlapped with ", comm.name());
  ASSIGN_OR_RETURN(std::unique_ptr<Kernels> kernels, NewKernels(kernel_options));
  const int64_t dim = quick ? 256 : 512;
  std::vector<float> a(dim * dim, 0.5f), b(dim * dim, 0.5f), c(dim * dim);
  auto matmul = [&] { kernels->Matmul(a.data(), b.data(), c.data(), dim, dim, dim, false, false); };
  const bool measures = comm.rank() == 0;
  Timing alone;
  if (measures) {
    alone = TimeCalls("matmul alone", 2.0 * dim * dim * dim, matmul, quick ? 5 : 9, 0.2);
  }
  RETURN_IF_ERROR(Annotate(comm.Barrier(), what));

  // The members all-reduce `rounds` times on a thread of their own, as the executor's
  // asynchronous collectives do; member 0 times matmuls until they are done.
  std::vector<float> grad((quick ? kMiB : 4 * kMiB) / sizeof(float), 1.0f);
  const int rounds = quick ? 10 : 40;
  std::atomic<bool> done{false};
  absl::Status reduced;
  std::thread reducer([&] {
    for (int i = 0; i < rounds && reduced.ok(); ++i) {
      reduced = comm.AllReduce(grad.data(), grad.size(), v1::F32, ReduceOp::kSum);
    }
    done = true;
  });
  std::vector<double> overlapped;
  while (measures && !done) {
    const Clock::time_point t0 = Clock::now();
    matmul();
    const Clock::duration d = Clock::now() - t0;
    if (!done) overlapped.push_back(Seconds(d));  // a matmul the all-reduces spanned
  }
  reducer.join();
  RETURN_IF_ERROR(Annotate(reduced, what));
  if (overlapped.empty() || alone.median_s <= 0) return 1.0;
  return std::max(1.0, TimingOf("matmul overlapped", 0, overlapped).median_s / alone.median_s);
}

}  // namespace weft::calibrate
