#include "worker/comm/wire_bytes.h"

#include <algorithm>
#include <numeric>

namespace weft {
namespace {

// gloo::detail::AllreduceOptionsImpl::kMaxSegmentSize. Gloo rounds it down to whole elements,
// which leaves it unchanged for elements of 2, 4 or 8 bytes.
constexpr int64_t kMaxSegmentBytes = int64_t{1} << 20;

int64_t RoundUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

int64_t Sum(absl::Span<const int64_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

}  // namespace

int64_t RingAllReduceBytesSent(int64_t count, int64_t element_bytes, int rank, int size) {
  if (count <= 0 || size <= 1) return 0;
  const int64_t total = count * element_bytes;
  const int64_t k = size;
  const int64_t num_segments =
      RoundUp(std::max((total + kMaxSegmentBytes - 1) / kMaxSegmentBytes, 2 * k), k);
  const int64_t per_chunk = num_segments / k;
  const int64_t segment_bytes = RoundUp((total + num_segments - 1) / num_segments, element_bytes);
  // Bytes of chunk c: its segments clipped at the end of the buffer.
  auto chunk = [&](int64_t c) {
    int64_t bytes = 0;
    for (int64_t s = c * per_chunk; s < (c + 1) * per_chunk; ++s) {
      bytes += std::max<int64_t>(0, std::min(segment_bytes, total - s * segment_bytes));
    }
    return bytes;
  };
  return 2 * total - chunk(rank) - chunk((rank + k - 1) % k);
}

int64_t RingAllGatherBytesSent(absl::Span<const int64_t> counts, int64_t element_bytes, int rank) {
  const int size = static_cast<int>(counts.size());
  if (size <= 1) return 0;
  return (Sum(counts) - counts[(rank + 1) % size]) * element_bytes;
}

int64_t AllToAllBytesSent(absl::Span<const int64_t> send_counts, int64_t element_bytes,
                          int rank) {
  if (send_counts.size() <= 1) return 0;
  return (Sum(send_counts) - send_counts[rank]) * element_bytes;
}

int64_t BinomialBroadcastBytesSent(int64_t count, int64_t element_bytes, int rank, int size,
                                   int root) {
  if (count <= 0 || size <= 1) return 0;
  // The loop of gloo::broadcast over virtual ranks (root = 0), counting the sends.
  const int64_t vsize = size;
  const int64_t vrank = (rank + vsize - root) % vsize;
  int dim = 0;
  while ((int64_t{1} << dim) < vsize) ++dim;
  int64_t mask = (int64_t{1} << dim) - 1;
  int64_t sends = 0;
  for (int i = 0; i < dim; ++i) {
    mask ^= int64_t{1} << i;
    if ((vrank & mask) != 0) continue;
    const int64_t vpeer = vrank ^ (int64_t{1} << i);
    if (vpeer >= vsize) continue;
    if ((vrank & (int64_t{1} << i)) == 0) ++sends;
  }
  return sends * count * element_bytes;
}

int64_t NcclRingAllReduceBytesSent(int64_t count, int64_t element_bytes, int size) {
  if (count <= 0 || size <= 1) return 0;
  return 2 * (size - 1) * element_bytes * count / size;
}

int64_t NcclChainBroadcastBytesSent(int64_t count, int64_t element_bytes, int rank, int size,
                                    int root) {
  if (count <= 0 || size <= 1) return 0;
  return rank == (root + size - 1) % size ? 0 : count * element_bytes;
}

}  // namespace weft
