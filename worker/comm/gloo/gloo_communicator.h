// GlooCommunicator: the Communicator of one group over Gloo's TCP transport, for CPU workers.
// GlooCommunicatorFactory bootstraps each group through a gloo::rendezvous::Store (in the
// daemon, RendezvousStore over the coordinator's RendezvousService; in tests, Gloo's HashStore)
// under the prefix "group-<id>-<ranks>" (e.g. "group-1-0.2"), so several groups of one job never
// read each other's keys.
//
// Every operation is bounded by the factory's timeout. Gloo closes a context's pairs after a
// timeout or an I/O error, so the first failure marks the communicator broken and every later
// call fails at once (FAILED_PRECONDITION) instead of hanging on a dead socket. A group of one
// rank never touches the store or the network.
//
// E.g.
//   gloo::rendezvous::HashStore store;
//   GlooCommunicatorFactory factory(&store, /*my_global_rank=*/2, "127.0.0.1",
//                                   absl::Seconds(300));
//   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, factory.Create(group));
//   RETURN_IF_ERROR(comm->AllReduce(grad.data(), grad.size(), v1::F32, ReduceOp::kSum));
#ifndef WEFT_WORKER_COMM_GLOO_GLOO_COMMUNICATOR_H_
#define WEFT_WORKER_COMM_GLOO_GLOO_COMMUNICATOR_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}  // namespace rendezvous
namespace transport {
class Device;
}  // namespace transport
}  // namespace gloo

namespace weft {

class GlooCommunicatorFactory : public CommunicatorFactory {
 public:
  // `store` is borrowed and must outlive every Create call. `bind_host` is the address this
  // rank's pairs listen on and advertise to peers (127.0.0.1 for a single machine).
  GlooCommunicatorFactory(gloo::rendezvous::Store* store, int my_global_rank,
                          std::string bind_host, absl::Duration timeout);
  ~GlooCommunicatorFactory() override;

  // Blocks until every member of `group` has called Create for it, or fails after the timeout
  // (DEADLINE_EXCEEDED) naming the group. INVALID_ARGUMENT when this rank is not a member.
  absl::StatusOr<std::unique_ptr<Communicator>> Create(const v1::CommGroup& group) override;

  // The store prefix of `group`'s keys.
  static std::string StorePrefix(const v1::CommGroup& group);

  int64_t bytes_sent() const override { return bytes_sent_->load(); }

 private:
  absl::StatusOr<std::shared_ptr<gloo::transport::Device>> Device() ABSL_LOCKS_EXCLUDED(mu_);

  gloo::rendezvous::Store* const store_;  // not owned
  const int my_global_rank_;
  const std::string bind_host_;
  const std::chrono::milliseconds timeout_;
  // Shared with every communicator created here, which add what they send.
  const std::shared_ptr<std::atomic<int64_t>> bytes_sent_;

  absl::Mutex mu_;
  // One TCP device (one listening socket and event loop) shared by all of this rank's groups;
  // created on the first group with more than one member.
  std::shared_ptr<gloo::transport::Device> device_ ABSL_GUARDED_BY(mu_);
};

// One group's collectives. Not thread-safe: the executor calls it from one thread, in the same
// order on every member.
//
// Every dtype goes through Gloo's typed algorithms with its own element size (bf16 as a 16-bit
// element, since Gloo has no bf16 type), so segments and chunks are cut at whole elements.
//
// AllReduce is Gloo's ring: each member adds the partial sum it receives to its own piece, one
// addition per hop, in ring order. For bf16 the reduce function converts both to float32, adds
// and rounds back to bf16 at every hop: a sum over K members is rounded K - 1 times (the
// members agree bit for bit: the all-gather phase copies the final sums). avg then multiplies
// by 1/K in float32 and rounds to bf16 once more. Integers add exactly (wrapping). max takes the
// larger of the two at every hop instead (worker/comm/host_reduce.h), exactly.
//
// ReduceScatter is an all-to-all of the chunks (chunk j of `in` goes to member j) followed by a
// local sum in member order, rather than Gloo's legacy ReduceScatterHalvingDoubling, which has no
// timeout and works on bound buffers. Each member sends sum(counts) - counts[rank] elements and
// receives (size - 1) * counts[rank]: the same bytes as a ring reduce-scatter and half of what
// PyTorch's fallback (all-reduce of everything, then slice) moves, at the cost of a temporary of
// size() * counts[rank] elements and size() - 1 concurrent peers per member. The local sum runs
// in float32 for bf16 and rounds once (worker/comm/host_reduce.h).
//
// bytes_sent() counts the payload of each successful call as Gloo's algorithm sends it
// (worker/comm/wire_bytes.h, E = the dtype's size): all_reduce by the ring's segments,
// all_gather E * (sum(counts) - counts[rank + 1]), reduce_scatter and all_to_all what goes to the
// other members, broadcast the buffer once per child in the binomial tree, send the message;
// recv and barrier nothing. A failed call adds nothing (how much got out before the failure is
// unknown).
//
// Send returns once the peer has posted the matching Recv (Gloo's TCP transport sends an unbound
// buffer only to a waiting receiver), so two members that both Send to each other first wait
// for each other until the timeout: one side must Recv first, as with NCCL.
class GlooCommunicator : public Communicator {
 public:
  // `context` is null for a group of one. `also_count`, when set, receives every byte this
  // communicator counts (its factory's total).
  GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int size, std::string name,
                   std::chrono::milliseconds timeout,
                   std::shared_ptr<std::atomic<int64_t>> also_count = nullptr);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  absl::Status AllReduce(void* data, size_t count, v1::DType dtype, ReduceOp op) override;
  absl::Status AllGather(const void* in, void* out, absl::Span<const int64_t> counts,
                         v1::DType dtype) override;
  absl::Status ReduceScatter(const void* in, void* out, absl::Span<const int64_t> counts,
                             v1::DType dtype) override;
  absl::Status AllToAll(const void* in, absl::Span<const int64_t> send_counts, void* out,
                        absl::Span<const int64_t> recv_counts, v1::DType dtype) override;
  absl::Status Broadcast(void* data, size_t count, v1::DType dtype, int root) override;
  absl::Status Send(const void* data, size_t count, v1::DType dtype, int peer,
                    uint32_t tag) override;
  absl::Status Recv(void* data, size_t count, v1::DType dtype, int peer, uint32_t tag) override;
  absl::Status Barrier() override;
  int64_t bytes_sent() const override { return bytes_sent_; }

 private:
  void CountSent(int64_t bytes);
  // Runs `op` (which calls into Gloo) and turns a Gloo exception into a status naming the
  // operation and the group; marks the communicator broken on failure.
  template <typename Fn>
  absl::Status Run(const char* op_name, Fn&& op);

  const std::shared_ptr<gloo::Context> context_;
  const int rank_;
  const int size_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  bool broken_ = false;
  std::string broken_reason_;
  int64_t bytes_sent_ = 0;
  const std::shared_ptr<std::atomic<int64_t>> also_count_;  // may be null
};

}  // namespace weft

#endif  // WEFT_WORKER_COMM_GLOO_GLOO_COMMUNICATOR_H_
