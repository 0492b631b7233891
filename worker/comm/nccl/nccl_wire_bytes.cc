#include "worker/comm/nccl/nccl_wire_bytes.h"

namespace weft {
namespace {

constexpr int64_t kFloatBytes = 4;

int64_t Sum(absl::Span<const int64_t> counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

}  // namespace

int64_t NcclAllReduceBytesSent(int64_t count, int size) {
  if (count <= 0 || size <= 1) return 0;
  return 2 * (size - 1) * kFloatBytes * count / size;
}

int64_t NcclAllGatherBytesSent(absl::Span<const int64_t> counts, int rank) {
  const int size = static_cast<int>(counts.size());
  if (size <= 1) return 0;
  return (Sum(counts) - counts[(rank + 1) % size]) * kFloatBytes;
}

int64_t NcclReduceScatterBytesSent(absl::Span<const int64_t> counts, int rank) {
  if (counts.size() <= 1) return 0;
  return (Sum(counts) - counts[rank]) * kFloatBytes;
}

int64_t NcclAllToAllBytesSent(absl::Span<const int64_t> send_counts, int rank) {
  if (send_counts.size() <= 1) return 0;
  return (Sum(send_counts) - send_counts[rank]) * kFloatBytes;
}

int64_t NcclBroadcastBytesSent(int64_t count, int rank, int size, int root) {
  if (count <= 0 || size <= 1) return 0;
  return rank == (root + size - 1) % size ? 0 : count * kFloatBytes;
}

}  // namespace weft
