#include "worker/kernels/cpu/loops.h"

#include <omp.h>

#include <algorithm>

namespace weft::cpu {

void ParallelFor(int threads, int64_t n, int64_t grain,
                 absl::FunctionRef<void(int64_t begin, int64_t end)> fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t ranges = (n + grain - 1) / grain;
  const int team = static_cast<int>(std::min<int64_t>(std::max(threads, 1), ranges));
  if (team <= 1) {
    fn(0, n);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    const int64_t part = omp_get_thread_num(), parts = omp_get_num_threads();
    const int64_t begin = n * part / parts, end = n * (part + 1) / parts;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace weft::cpu
