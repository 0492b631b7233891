// Communicator: the collectives of one group of ranks (the ranks that differ only along some
// mesh dimensions). Knows nothing of the transport: Gloo (worker/comm/gloo) on CPU, NCCL on GPU,
// and an in-process one (worker/comm/local) for tests that simulate all ranks in one process.
//
// Buffers are flat arrays of one element type, weft.v1.DType (F32, BF16, I32, I64), and every
// count is in elements of that type; layout along a tensor axis (packing an all-gather along
// axis 1, for instance) is the executor's job. Every call is blocking and bounded by the
// communicator's timeout; a timeout or a dead peer is an error naming the operation and the
// group, and the communicator is unusable afterwards.
//
// Sums and averages (all-reduce, reduce-scatter) by element type:
//   F32       float32 sums; avg is the sum divided by the group's size.
//   BF16      sums computed in float32 and rounded back to bf16 (nearest even, common/dtype.h).
//             Where the rounding happens (after every pairwise addition, or once after summing
//             all members in float32) is the transport's algorithm: each transport's header
//             says, for avg (the sum divided by the group's size) too.
//   I32, I64  exact integer sums (two's complement, wrapping on overflow). avg of an integer
//             type is INVALID_ARGUMENT: a mean of integers needs a rounding rule the callers
//             would have to choose.
// max (all-reduce only) is the element-wise maximum over the members, for every dtype, and
// rounds nothing: integers compare as signed integers; F32 and BF16 compare by value (bf16 as the
// float32 it stands for), and the result is exactly one member's element, bit for bit. NaN
// propagates: if any member holds a NaN at an element, the result there is the canonical quiet
// NaN (f32 0x7FC00000, bf16 0x7FC0), whatever NaN it held. -0 counts as below +0. Every
// transport computes the same order (worker/comm/max_key.h), so they agree bit for bit.
// Copies (all-gather, all-to-all, broadcast, send/recv) move the bytes unchanged for every type.
// Bad arguments (an unknown dtype, avg of integers, wrong counts, a bad peer or root) are
// INVALID_ARGUMENT naming the op and the group, found before any traffic: the communicator stays
// usable.
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, factory->Create(group));
//   RETURN_IF_ERROR(comm->AllReduce(grad.data(), grad.size(), v1::F32, ReduceOp::kSum));
//   RETURN_IF_ERROR(comm->AllReduce(row_max.data(), rows, v1::F32, ReduceOp::kMax));
//   RETURN_IF_ERROR(comm->AllGather(ids.data(), all_ids.data(), counts, v1::I64));
#ifndef WEFT_WORKER_COMM_COMMUNICATOR_H_
#define WEFT_WORKER_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft {

// How a reduction combines the members' elements (see above). weft.v1.Placement.ReduceOp SUM,
// AVG and MAX.
enum class ReduceOp { kSum, kAvg, kMax };

// "group 1 (dp) ranks [0,2]": how every transport's messages name a group.
std::string GroupName(const v1::CommGroup& group);

// This rank's position in `group`; INVALID_ARGUMENT naming the group when it is not a member or
// a rank appears twice.
absl::StatusOr<int> MemberIndex(const v1::CommGroup& group, int global_rank);

// The sum of per-member counts (AllGather, ReduceScatter, AllToAll).
int64_t SumCounts(absl::Span<const int64_t> counts);

// The address of element `index` of a buffer of `dtype` elements (a member's piece or chunk).
void* ElementAt(void* base, int64_t index, v1::DType dtype);
const void* ElementAt(const void* base, int64_t index, v1::DType dtype);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;  // index in the group
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // for messages, e.g. "group 1 (dp) ranks [0,2]"

  // In place: data holds `count` elements of `dtype` on every member.
  virtual absl::Status AllReduce(void* data, size_t count, v1::DType dtype, ReduceOp op) = 0;
  // out = concatenation of every member's `in`; member i contributes counts[i] elements.
  virtual absl::Status AllGather(const void* in, void* out, absl::Span<const int64_t> counts,
                                 v1::DType dtype) = 0;
  // in holds sum(counts) elements; out (counts[rank()] elements) = the sum over members of
  // in[offset_i : offset_i + counts[i]] for i = rank(). Always a sum: an average scales after,
  // and there is no max reduce-scatter (a caller must refuse one rather than sum it).
  virtual absl::Status ReduceScatter(const void* in, void* out, absl::Span<const int64_t> counts,
                                     v1::DType dtype) = 0;
  // in holds size() chunks, chunk j (send_counts[j] elements) goes to member j; out receives
  // recv_counts[j] elements from member j, concatenated in member order.
  virtual absl::Status AllToAll(const void* in, absl::Span<const int64_t> send_counts, void* out,
                                absl::Span<const int64_t> recv_counts, v1::DType dtype) = 0;
  virtual absl::Status Broadcast(void* data, size_t count, v1::DType dtype, int root) = 0;
  virtual absl::Status Send(const void* data, size_t count, v1::DType dtype, int peer,
                            uint32_t tag) = 0;
  virtual absl::Status Recv(void* data, size_t count, v1::DType dtype, int peer,
                            uint32_t tag) = 0;
  virtual absl::Status Barrier() = 0;

  // Payload bytes this member has put on the wire since it was created, as the transport's
  // algorithm really moves them (a ring all-reduce sends about 2 (K-1)/K of the buffer, not the
  // buffer), each element counted at its dtype's size (DTypeSize: bf16 2 bytes, i64 8); framing,
  // acknowledgements and the connection handshake are not counted. Recv and Barrier add nothing. Exact per transport in its header (Gloo: worker/comm/wire_bytes.h).
  virtual int64_t bytes_sent() const = 0;
};

// Argument checks every transport makes before calling into its library: INVALID_ARGUMENT
// "<op> on <comm.name()>: ..." unless `counts` holds one non-negative count per member, unless
// `peer` is a member other than comm.rank(), unless `dtype` is one of weft.v1.DType's values
// (the message names the unknown value), or, for CheckReduce, when `op` averages an integer type
// (the message names the op, the group and the dtype); sum and max are valid for every dtype.
// CheckReduce checks the dtype too.
absl::Status CheckCounts(const Communicator& comm, const char* op,
                         absl::Span<const int64_t> counts);
absl::Status CheckPeer(const Communicator& comm, const char* op, int peer, uint32_t tag);
absl::Status CheckDType(const Communicator& comm, const char* op, v1::DType dtype);
absl::Status CheckReduce(const Communicator& comm, const char* op, v1::DType dtype,
                         ReduceOp reduce);

// "sum", "avg" or "max".
const char* ReduceOpName(ReduceOp op);

// Creates the communicator of one group for this rank. Every member calls Create for the same
// group; it returns once all of them are connected (or fails after the timeout).
class CommunicatorFactory {
 public:
  virtual ~CommunicatorFactory() = default;
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Create(const v1::CommGroup& group) = 0;

  // The sum of bytes_sent() over every communicator this factory created, those already
  // destroyed included: the worker's traffic per step is the difference across the step.
  // Thread-safe.
  virtual int64_t bytes_sent() const = 0;
};

}  // namespace weft

#endif  // WEFT_WORKER_COMM_COMMUNICATOR_H_
