// An in-process Communicator: N ranks as N threads of one process, meeting in a shared
// LocalWorld. Tests use it to run every rank's Program at once (executor tests, and the
// planner-vs-reference simulations) without sockets. Collectives are computed in member order,
// so every member gets bit-identical results, and members check that they called the same
// collective with the same counts and dtype: a mismatch is an error naming both sides rather
// than a hang (a recv likewise names the count and dtype the sender sent).
//
// Reductions (all-reduce, reduce-scatter) add every member's elements in member order in one
// pass: F32 in float32; BF16 in float32, divided by the group's size for avg, then rounded to
// bf16 once, so the result is the bf16 nearest the float32 sum (Gloo and NCCL round at every
// hop of their rings instead); I32 and I64 exactly (worker/comm/host_reduce.h). max folds the
// members in order, exactly (communicator.h).
//
// bytes_sent() counts what Gloo's algorithm would send for the same call, at the dtype's
// element size (worker/comm/wire_bytes.h; send counts its message), so simulated runs report
// the daemons' traffic.
//
// E.g.
//   auto world = std::make_shared<LocalWorld>(/*world_size=*/2, absl::Seconds(10));
//   // In the thread of global rank r:
//   LocalCommunicatorFactory factory(world, r);
//   ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, factory.Create(group));
//   RETURN_IF_ERROR(comm->AllReduce(grad, n, v1::BF16, ReduceOp::kSum));
#ifndef WEFT_WORKER_COMM_LOCAL_LOCAL_COMMUNICATOR_H_
#define WEFT_WORKER_COMM_LOCAL_LOCAL_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/comm/communicator.h"

namespace weft {

class LocalGroup;

// The rendezvous every rank's factory shares: one LocalGroup per distinct CommGroup (by id and
// member list), created by whichever member arrives first. Outlives every communicator.
class LocalWorld {
 public:
  LocalWorld(int world_size, absl::Duration timeout);
  ~LocalWorld();

  int world_size() const { return world_size_; }
  absl::Duration timeout() const { return timeout_; }

  // The shared state of `group` (created on first use).
  std::shared_ptr<LocalGroup> GetGroup(const v1::CommGroup& group);

 private:
  const int world_size_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<LocalGroup>> groups_ ABSL_GUARDED_BY(mu_);
};

// The factory of one global rank.
class LocalCommunicatorFactory : public CommunicatorFactory {
 public:
  LocalCommunicatorFactory(std::shared_ptr<LocalWorld> world, int global_rank);

  // Fails with INVALID_ARGUMENT if this rank is not in the group or the group names ranks
  // outside the world, DEADLINE_EXCEEDED if the other members do not arrive in time.
  absl::StatusOr<std::unique_ptr<Communicator>> Create(const v1::CommGroup& group) override;
  int64_t bytes_sent() const override { return bytes_sent_->load(); }

 private:
  std::shared_ptr<LocalWorld> world_;
  const int global_rank_;
  // Shared with the communicators created here, which add what they send.
  const std::shared_ptr<std::atomic<int64_t>> bytes_sent_;
};

}  // namespace weft

#endif  // WEFT_WORKER_COMM_LOCAL_LOCAL_COMMUNICATOR_H_
