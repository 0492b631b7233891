// Wire bytes: the payload bytes one member of a group puts on the wire for each collective, as
// the algorithms of Debian's Gloo snapshot (0.0~git20220518) do it, and as NCCL's rings do
// (the Nccl* functions and the Gloo ones they share). GlooCommunicator counts with these, and
// LocalCommunicator too, so an in-process run reports the traffic the daemons would; so does
// NcclCommunicator.
//
// Every count is in elements and `element_bytes` is their size (DTypeSize: 4 for f32 and i32, 2
// for bf16, 8 for i64): the algorithms cut buffers in bytes, and Gloo's ring rounds its segments
// to whole elements, so the element size changes how an uneven buffer splits, not only the total.
//
// Payload only: Gloo's TCP framing (a 48-byte preamble per message, and a preamble-only
// "ready to receive" notice the receiver sends per message) and the rendezvous are not counted.
//
// E.g.
//   RingAllReduceBytesSent(/*count=*/1 << 20, /*element_bytes=*/4, /*rank=*/0, /*size=*/2)
//       // 4 MiB: 2 (K-1)/K * B, B = 4n bytes
#ifndef WEFT_WORKER_COMM_WIRE_BYTES_H_
#define WEFT_WORKER_COMM_WIRE_BYTES_H_

#include <cstdint>

#include "absl/types/span.h"

namespace weft {

// gloo::allreduce (ring; Gloo's default when no algorithm is set). The buffer of B bytes is cut
// into numSegments = roundUp(max(ceil(B / 1 MiB), 2K), K) segments of roundUp(ceil(B /
// numSegments), element_bytes) bytes, numSegments / K of them per chunk, the last ones clipped
// at B (1 MiB is Gloo's maximum segment, a whole number of elements for every dtype here). In the
// reduce-scatter phase member r sends every chunk but its own (r), in the all-gather phase
// every chunk but r - 1's: 2B - chunk(r) - chunk(r - 1), which is 2 (K-1)/K * B when the
// chunks are even.
int64_t RingAllReduceBytesSent(int64_t count, int64_t element_bytes, int rank, int size);

// gloo::allgatherv (ring): in K - 1 steps member r forwards chunks r, r-1, ..., r-K+2 to r+1,
// i.e. every chunk except r+1's.
int64_t RingAllGatherBytesSent(absl::Span<const int64_t> counts, int64_t element_bytes, int rank);

// gloo::alltoallv: chunk j goes straight to member j; the member's own chunk is a local copy.
// Also GlooCommunicator's reduce-scatter, which is an all-to-all followed by a local sum.
int64_t AllToAllBytesSent(absl::Span<const int64_t> send_counts, int64_t element_bytes,
                          int rank);

// gloo::broadcast (binomial tree rooted at `root`): a member sends the whole buffer once to
// each of its children in the tree (the root has ceil(log2 K) of them, leaves none).
int64_t BinomialBroadcastBytesSent(int64_t count, int64_t element_bytes, int rank, int size,
                                   int root);

// NCCL's ring algorithms, with the ring in member order (0 -> 1 -> ... -> K-1 -> 0); the
// NCCL communicator counts with these. A model, not a measurement: NCCL picks rings from the
// topology (one per channel, not necessarily in member order), and for some sizes Tree, NVLS or
// CollNet instead; the per-member split may then differ, the ring's total does not. Its
// all-gather (ncclAllGather, or one ncclBroadcast chain per member for uneven counts) moves
// what RingAllGatherBytesSent says, and its reduce-scatter (ncclReduceScatter, or one ncclReduce
// chain per member) and all-to-all (grouped send/recv) what AllToAllBytesSent says.

// Ring all-reduce (a reduce-scatter then an all-gather of K even chunks): 2 (K-1) B / K bytes,
// rounded down, the same for every member.
int64_t NcclRingAllReduceBytesSent(int64_t count, int64_t element_bytes, int size);

// Chain broadcast root -> root+1 -> ... -> root-1: every member but root-1 sends the buffer.
int64_t NcclChainBroadcastBytesSent(int64_t count, int64_t element_bytes, int rank, int size,
                                    int root);

}  // namespace weft

#endif  // WEFT_WORKER_COMM_WIRE_BYTES_H_
