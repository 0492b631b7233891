// How the CPU backend's own loops (everything but sgemm, which is OpenBLAS's) use the machine:
//  - Vector clones. A function marked WEFT_CPU_VECTOR_CLONES is compiled three times, for
//    x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the x86-64 baseline (SSE2), and the loader
//    picks the widest the CPU has (GCC's target_clones, an ifunc), so one binary runs everywhere
//    and vectorizes as wide as the machine allows. expf and exp are declared SIMD-callable, so a
//    loop over them vectorizes into glibc's libmvec (_ZGVeN16v_expf and kin) where `#pragma omp
//    simd` allows it; reductions over such loops say so with `reduction(...)` and keep their
//    double accumulators. The results depend on the clone the CPU gets (lane count decides the
//    summation order) but never on threads or timing.
//  - Threads. ParallelFor splits a loop into contiguous ranges, one per OpenMP thread. The split
//    depends only on the loop's length, its grain and the thread count, and every kernel that
//    uses it computes each output element from one range alone (column sums run over columns,
//    each adding its rows in ascending order), so results are bit-identical for any thread count.
//    The backend's thread count is KernelOptions::threads, by default OpenBLAS's
//    (OPENBLAS_NUM_THREADS, which `weftctl local` sets per rank).
//
// E.g.
//   WEFT_CPU_VECTOR_CLONES void ExpRange(const float* x, float* y, int64_t begin, int64_t end) {
//   #pragma omp simd
//     for (int64_t i = begin; i < end; ++i) y[i] = std::exp(x[i]);
//   }
//   cpu::ParallelFor(threads, n, cpu::kGrainElements,
//                    [&](int64_t begin, int64_t end) { ExpRange(x, y, begin, end); });
#ifndef WEFT_WORKER_KERNELS_CPU_LOOPS_H_
#define WEFT_WORKER_KERNELS_CPU_LOOPS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/functional/function_ref.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define WEFT_CPU_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
// glibc's <math.h> declares these SIMD-callable only under -ffast-math, which would also let the
// compiler drop NaN and infinity handling; this says the same of the two functions alone.
extern "C" float expf(float) __attribute__((simd("notinbranch")));
extern "C" double exp(double) __attribute__((simd("notinbranch")));
#else
#define WEFT_CPU_VECTOR_CLONES
#endif

namespace weft::cpu {

// Loops shorter than this many elements (or rows of that many elements in all) run on the calling
// thread alone: below it, waking a thread costs more than it saves.
inline constexpr int64_t kGrainElements = int64_t{1} << 15;

// The grain, in rows, of a loop over rows of `cols` elements each.
inline int64_t RowGrain(int64_t cols) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(cols, 1));
}

// Runs fn(begin, end) over [0, n) cut into min(threads, ceil(n / grain)) contiguous ranges of
// near-equal length, one per OpenMP thread (the calling thread among them), and returns when all
// are done. One range, on the calling thread, when that is 1. fn must not throw.
void ParallelFor(int threads, int64_t n, int64_t grain,
                 absl::FunctionRef<void(int64_t begin, int64_t end)> fn);

}  // namespace weft::cpu

#endif  // WEFT_WORKER_KERNELS_CPU_LOOPS_H_
