// NCCL wire bytes: the payload bytes one member of a group puts on the wire for each collective
// under NCCL's ring algorithms, with the ring in member order (0 -> 1 -> ... -> K-1 -> 0).
// NcclCommunicator counts with these. Plain C++ (no CUDA), so the formulas build and are tested
// in every build.
//
// A model, not a measurement: NCCL picks rings from the topology (not necessarily in member
// order, and one per channel), and for some sizes and machines Tree, NVLS or CollNet instead of
// the ring. The per-member split may then differ; the ring's total over the group is the same.
//
// E.g.
//   NcclAllReduceBytesSent(/*count=*/1 << 20, /*size=*/2)  // 4 MiB: 2 (K-1)/K * 4n
#ifndef WEFT_WORKER_COMM_NCCL_NCCL_WIRE_BYTES_H_
#define WEFT_WORKER_COMM_NCCL_NCCL_WIRE_BYTES_H_

#include <cstdint>

#include "absl/types/span.h"

namespace weft {

// Ring all-reduce (a reduce-scatter then an all-gather of K chunks): 2 (K-1) * 4n / K bytes,
// rounded down, the same for every member.
int64_t NcclAllReduceBytesSent(int64_t count, int size);

// All-gather: ncclAllGather (equal counts) forwards every chunk but the next member's in K - 1
// ring steps; the grouped ncclBroadcast of unequal counts is one chain per member i, i -> i+1 ->
// ... -> i-1, in which every member but i-1 forwards chunk i. Both: 4 (sum(counts) -
// counts[rank + 1]); (K-1)/K of the gathered buffer for equal counts.
int64_t NcclAllGatherBytesSent(absl::Span<const int64_t> counts, int rank);

// Reduce-scatter: ncclReduceScatter (equal counts) sends K - 1 chunks; the grouped ncclReduce of
// unequal counts is one chain per member i ending at i, in which every member but i sends chunk i.
// Both: 4 (sum(counts) - counts[rank]); (K-1)/K of the input buffer for equal counts.
int64_t NcclReduceScatterBytesSent(absl::Span<const int64_t> counts, int rank);

// All-to-all (grouped ncclSend/ncclRecv): every chunk but the own one, which is a device copy.
int64_t NcclAllToAllBytesSent(absl::Span<const int64_t> send_counts, int rank);

// Ring broadcast: the chain root -> root+1 -> ... -> root-1; every member but root-1 sends the
// buffer once.
int64_t NcclBroadcastBytesSent(int64_t count, int rank, int size, int root);

}  // namespace weft

#endif  // WEFT_WORKER_COMM_NCCL_NCCL_WIRE_BYTES_H_
