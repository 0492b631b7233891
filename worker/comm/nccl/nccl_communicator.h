// NcclCommunicatorFactory: the Communicators of a GPU worker, over NCCL. Buffers are DEVICE
// pointers on the factory's GPU. Built only with `--config=cuda`.
//
// Types: F32, BF16, I32 and I64 are ncclFloat32, ncclBfloat16, ncclInt32 and ncclInt64, so NCCL
// moves and reduces each in its own element size (uneven all-gathers and reduce-scatters and
// all-to-all offset their pieces by DTypeSize). bf16 sums are NCCL's own: each reduction step of
// its ring (or tree) adds two bf16 values in float32 and rounds the result to bf16, so a sum over
// K members is rounded up to K - 1 times, in an order NCCL picks (it need not match Gloo's ring
// bit for bit). avg is ncclAvg: for float types NCCL multiplies every input by 1/K, itself
// rounded to bf16 for bf16, before the sum (exact for K a power of two). Integer sums are exact;
// avg of integers is refused before NCCL sees it (CheckReduce).
//
// max: integers are NCCL's ncclMax. NCCL's float max (fmaxf, __hmax) returns the other operand of
// a NaN, so floats instead go through their max keys (worker/comm/max_key.h, kernels in
// max_keys.cu): a kernel turns each element into its int32 key, an ncclMax over ncclInt32 takes
// the largest, and a kernel turns it back, all on the communicator's stream. f32 keys replace the
// buffer in place; bf16 keys take a device buffer of 4 bytes per element, kept by the
// communicator (grown to the largest bf16 max so far) and on the wire. The result is the one
// communicator.h gives, bit for bit, as Gloo's and the local transport's are. (A failed f32 max
// may leave keys in the buffer.)
//
// Bootstrap: member 0 of a group makes an ncclUniqueId and publishes it in the rendezvous store
// under "nccl-group-<id>-<ranks>/unique-id-<n>" (n counts this factory's earlier Creates of the
// same group, so re-creating a group never reads a stale id); the others wait for the key. Each
// group gets its own ncclCommInitRankConfig (no ncclCommSplit: groups come one at a time from the
// program, and a split would need every rank of a parent communicator to take part). A group of
// one rank uses a locally made id and no store: it is still a (1-rank) NCCL communicator, so
// every op goes through the same code.
//
// Streams: each communicator runs its collectives on its own non-blocking CUDA stream. Before an
// op it makes that stream wait for an event recorded on the compute stream (SetComputeStream), so
// the collective sees all compute enqueued before the call; after it, the compute stream waits
// for a `done` event, so later compute sees the result. The call itself blocks, as the
// Communicator interface says: it polls the done event and ncclCommGetAsyncError (20 us backoff
// doubling to 1 ms) until the op completes, NCCL reports an asynchronous error, or the factory's
// timeout passes. Communicators are created non-blocking (config.blocking = 0), so enqueueing and
// init are polled the same way, and ncclInProgress means "still being enqueued", not an error.
//
// Errors: a timeout is DEADLINE_EXCEEDED, a cancelled factory (Cancel) CANCELLED, an NCCL error
// UNAVAILABLE (ncclRemoteError, ncclSystemError: a peer or the network went away) or INTERNAL
// (anything else, CUDA errors too), with ncclGetErrorString and ncclGetLastError's text. The
// message names the op, the element count and dtype, the group (GroupName) and this member. The
// first failure aborts the NCCL communicator (ncclCommAbort), so no GPU kernel keeps waiting for
// a dead peer, and every later call fails at once with FAILED_PRECONDITION. Bad arguments
// (dtypes, counts, roots, peers) are INVALID_ARGUMENT and leave the communicator usable.
// Zero-element ops return at once on every member, without NCCL.
//
// Send/Recv: NCCL has no tags; it matches the sends and receives between two members in the
// order they are issued. The tag is only checked for range and named in messages: the planner's
// programs issue point-to-point ops in matching order on both sides, which the coordinator's
// deadlock check verifies. As with Gloo, Send may not return before the peer has posted the
// matching Recv (large messages, and the first message between two members, which connects
// them), so two members must not both Send to each other first.
// The same applies to all_to_all's counts: what member i sends member j must equal what j expects
// from i, or the call times out (NCCL cannot check it).
//
// bytes_sent() counts each successful call with NCCL's ring algorithms, ring in member order
// (worker/comm/wire_bytes.h; K members, n elements of E = DTypeSize bytes, B = E n bytes):
//   all_reduce       floor(2 (K-1) B / K); a bf16 max moves int32 keys, E = 4
//   all_gather       E (sum(counts) - counts[rank + 1])   ((K-1)/K of the result, equal counts)
//   reduce_scatter   E (sum(counts) - counts[rank])       ((K-1)/K of the input, equal counts)
//   all_to_all       E (sum(send_counts) - send_counts[rank])
//   broadcast        B, except 0 on member root - 1 (the chain's end)
//   send             B;  recv, barrier: 0
// NCCL may choose Tree or NVLS algorithms or rings in another order; the counts are a model of
// the traffic, good for comparing plans, not a measurement. A failed call adds nothing.
//
// E.g.
//   NcclCommunicatorFactory factory(&store, /*my_global_rank=*/2, /*device_index=*/0,
//                                   absl::Seconds(300));
//   factory.SetComputeStream(kernels_stream);
//   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, factory.Create(group));
//   RETURN_IF_ERROR(comm->AllReduce(grad_device_ptr, n, v1::BF16, ReduceOp::kSum));
#ifndef WEFT_WORKER_COMM_NCCL_NCCL_COMMUNICATOR_H_
#define WEFT_WORKER_COMM_NCCL_NCCL_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace weft {

class NcclCommunicatorFactory : public CommunicatorFactory {
 public:
  // `store` is borrowed and must outlive every Create call (it may be null if every group has
  // one member). `device_index` is the CUDA device of this rank; `timeout` bounds Create, every
  // op and the teardown of each communicator.
  NcclCommunicatorFactory(gloo::rendezvous::Store* store, int my_global_rank, int device_index,
                          absl::Duration timeout);
  ~NcclCommunicatorFactory() override;

  // The cudaStream_t the worker's kernels run on (null: the legacy default stream), for the
  // communicators created after this call. Thread-safe.
  void SetComputeStream(void* stream) ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until every member of `group` has called Create for it, or fails after the timeout
  // (DEADLINE_EXCEEDED) naming the group. INVALID_ARGUMENT when this rank is not a member,
  // UNAVAILABLE when the CUDA device is not usable.
  absl::StatusOr<std::unique_ptr<Communicator>> Create(const v1::CommGroup& group) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Makes every Create and every op of the communicators created here, in progress or later,
  // stop waiting: the NCCL communicator is aborted and the call fails with CANCELLED (a job
  // cancelled while a collective waits for a peer that has stopped). Thread-safe.
  void Cancel();

  // The store prefix of `group`'s keys: "nccl-group-1-0.2".
  static std::string StorePrefix(const v1::CommGroup& group);

  int64_t bytes_sent() const override { return bytes_sent_->load(); }

 private:
  gloo::rendezvous::Store* const store_;  // not owned
  const int my_global_rank_;
  const int device_index_;
  const absl::Duration timeout_;
  // Shared with every communicator created here, which add what they send.
  const std::shared_ptr<std::atomic<int64_t>> bytes_sent_;
  // Set by Cancel(); shared with the communicators, whose watchdogs poll it.
  const std::shared_ptr<std::atomic<bool>> cancelled_;

  absl::Mutex mu_;
  void* compute_stream_ ABSL_GUARDED_BY(mu_) = nullptr;  // a cudaStream_t, not owned
  // How many times each group (by store prefix) was created here.
  std::map<std::string, int> creations_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_WORKER_COMM_NCCL_NCCL_COMMUNICATOR_H_
