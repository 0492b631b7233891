#include "worker/comm/gloo/gloo_communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/status.h"
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/alltoallv.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"
#include "worker/comm/gloo/gloo_status.h"
#include "worker/comm/host_reduce.h"
#include "worker/comm/wire_bytes.h"

namespace weft {
namespace {

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

// Calls fn(T{}) with T the C++ type Gloo moves elements of `dtype` as. Gloo has no bf16 type:
// uint16_t gives it the element size (segments are cut at whole elements), and the reduce
// function does the arithmetic.
template <typename Fn>
void WithGlooType(v1::DType dtype, Fn&& fn) {
  switch (dtype) {
    case v1::BF16:
      return fn(uint16_t{});
    case v1::I32:
      return fn(int32_t{});
    case v1::I64:
      return fn(int64_t{});
    default:
      return fn(float{});
  }
}

}  // namespace

// ---- GlooCommunicatorFactory ----

// "group-<id>-<ranks>": the member list is part of the prefix so that two groups the planner
// numbered alike (the dp group of every mp column, say) never read each other's addresses.
std::string GlooCommunicatorFactory::StorePrefix(const v1::CommGroup& group) {
  return absl::StrCat("group-", group.id(), "-", absl::StrJoin(group.ranks(), "."));
}

GlooCommunicatorFactory::GlooCommunicatorFactory(gloo::rendezvous::Store* store,
                                                 int my_global_rank, std::string bind_host,
                                                 absl::Duration timeout)
    : store_(store),
      my_global_rank_(my_global_rank),
      bind_host_(std::move(bind_host)),
      timeout_(ToChrono(timeout)),
      bytes_sent_(std::make_shared<std::atomic<int64_t>>(0)) {}

GlooCommunicatorFactory::~GlooCommunicatorFactory() = default;

absl::StatusOr<std::shared_ptr<gloo::transport::Device>> GlooCommunicatorFactory::Device() {
  absl::MutexLock lock(&mu_);
  if (device_ != nullptr) return device_;
  gloo::transport::tcp::attr attr;
  attr.hostname = bind_host_;
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
  } catch (...) {
    return FromGlooException(std::current_exception(),
                             absl::StrCat("creating a Gloo TCP device on ", bind_host_));
  }
  return device_;
}

absl::StatusOr<std::unique_ptr<Communicator>> GlooCommunicatorFactory::Create(
    const v1::CommGroup& group) {
  const std::string name = GroupName(group);
  absl::StatusOr<int> member = MemberIndex(group, my_global_rank_);
  if (!member.ok()) return member.status();
  const int rank = *member;
  const int size = group.ranks_size();
  if (size == 1) {
    return std::unique_ptr<Communicator>(
        std::make_unique<GlooCommunicator>(nullptr, 0, 1, name, timeout_, bytes_sent_));
  }
  if (store_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("connecting ", name, ": no rendezvous store"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<gloo::transport::Device> device, Device());
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(timeout_);
  try {
    gloo::rendezvous::PrefixStore prefixed(StorePrefix(group), *store_);
    context->connectFullMesh(prefixed, device);
  } catch (...) {
    return FromGlooException(std::current_exception(), absl::StrCat("connecting ", name));
  }
  return std::unique_ptr<Communicator>(
      std::make_unique<GlooCommunicator>(std::move(context), rank, size, name, timeout_,
                                         bytes_sent_));
}

// ---- GlooCommunicator ----

GlooCommunicator::GlooCommunicator(std::shared_ptr<gloo::Context> context, int rank, int size,
                                   std::string name, std::chrono::milliseconds timeout,
                                   std::shared_ptr<std::atomic<int64_t>> also_count)
    : context_(std::move(context)),
      rank_(rank),
      size_(size),
      name_(std::move(name)),
      timeout_(timeout),
      also_count_(std::move(also_count)) {}

GlooCommunicator::~GlooCommunicator() = default;

void GlooCommunicator::CountSent(int64_t bytes) {
  bytes_sent_ += bytes;
  if (also_count_ != nullptr) also_count_->fetch_add(bytes);
}

template <typename Fn>
absl::Status GlooCommunicator::Run(const char* op_name, Fn&& op) {
  if (broken_) {
    return absl::FailedPreconditionError(absl::StrCat(op_name, " on ", name_,
                                                      ": communicator unusable after an earlier "
                                                      "failure (",
                                                      broken_reason_, ")"));
  }
  if (size_ == 1) return absl::OkStatus();  // the caller did the local part already
  try {
    op();
    return absl::OkStatus();
  } catch (...) {
    absl::Status status =
        FromGlooException(std::current_exception(), absl::StrCat(op_name, " on ", name_));
    broken_ = true;
    broken_reason_ = std::string(status.message());
    return status;
  }
}

absl::Status GlooCommunicator::AllReduce(void* data, size_t count, v1::DType dtype,
                                         ReduceOp op) {
  RETURN_IF_ERROR(CheckReduce(*this, "all_reduce", dtype, op));
  if (count == 0) return Run("all_reduce", [] {});
  RETURN_IF_ERROR(Run("all_reduce", [&] {
    gloo::AllreduceOptions opts(context_);
    WithGlooType(dtype, [&](auto zero) {
      opts.setOutput(static_cast<decltype(zero)*>(data), count);
    });
    // Called by the ring on each received segment: one addition, and for bf16 one rounding,
    // per hop; or one exact max.
    if (op == ReduceOp::kMax) {
      opts.setReduceFunction([dtype](void* c, const void* a, const void* b, size_t n) {
        MaxElements(a, b, dtype, n, c);
      });
    } else {
      opts.setReduceFunction([dtype](void* c, const void* a, const void* b, size_t n) {
        AddElements(a, b, dtype, n, c);
      });
    }
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  }));
  CountSent(RingAllReduceBytesSent(static_cast<int64_t>(count), DTypeSize(dtype), rank_, size_));
  if (op == ReduceOp::kAvg && size_ > 1) {
    ScaleElements(data, dtype, static_cast<int64_t>(count), 1.0f / static_cast<float>(size_));
  }
  // A group of one runs no ring: its max is its buffer, with NaNs made canonical.
  if (op == ReduceOp::kMax && size_ == 1) MaxElements(data, data, dtype, count, data);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllGather(const void* in, void* out,
                                         absl::Span<const int64_t> counts, v1::DType dtype) {
  RETURN_IF_ERROR(CheckDType(*this, "all_gather", dtype));
  RETURN_IF_ERROR(CheckCounts(*this, "all_gather", counts));
  const int64_t element = DTypeSize(dtype);
  void* slot = ElementAt(out, SumCounts(counts.subspan(0, rank_)), dtype);
  // Prime this member's slot ourselves (memmove: `in` may already be that slot), then gather
  // in place.
  if (counts[rank_] > 0 && in != slot) std::memmove(slot, in, counts[rank_] * element);
  if (SumCounts(counts) == 0) return Run("all_gather", [] {});
  RETURN_IF_ERROR(Run("all_gather", [&] {
    gloo::AllgathervOptions opts(context_);
    WithGlooType(dtype, [&](auto zero) {
      opts.setOutput(static_cast<decltype(zero)*>(out),
                     std::vector<size_t>(counts.begin(), counts.end()));
    });
    opts.setTimeout(timeout_);
    gloo::allgatherv(opts);
  }));
  CountSent(RingAllGatherBytesSent(counts, element, rank_));
  return absl::OkStatus();
}

absl::Status GlooCommunicator::ReduceScatter(const void* in, void* out,
                                             absl::Span<const int64_t> counts, v1::DType dtype) {
  RETURN_IF_ERROR(CheckDType(*this, "reduce_scatter", dtype));
  RETURN_IF_ERROR(CheckCounts(*this, "reduce_scatter", counts));
  const int64_t mine = counts[rank_];
  const int64_t element = DTypeSize(dtype);
  if (size_ == 1) {
    if (mine > 0 && out != in) std::memmove(out, in, mine * element);
    return Run("reduce_scatter", [] {});
  }
  if (SumCounts(counts) == 0) return Run("reduce_scatter", [] {});
  // received[j] = member j's chunk for this member; summed in member order so every run
  // rounds the same way.
  std::vector<char> received(static_cast<size_t>(size_ * mine * element));
  RETURN_IF_ERROR(Run("reduce_scatter", [&] {
    gloo::AlltoallvOptions opts(context_);
    WithGlooType(dtype, [&](auto zero) {
      using T = decltype(zero);
      opts.setInput(static_cast<T*>(const_cast<void*>(in)),
                    std::vector<int64_t>(counts.begin(), counts.end()));
      opts.setOutput(reinterpret_cast<T*>(received.data()), std::vector<int64_t>(size_, mine));
    });
    opts.setTimeout(timeout_);
    gloo::alltoallv(opts);
  }));
  CountSent(AllToAllBytesSent(counts, element, rank_));
  std::vector<const void*> chunks;
  for (int j = 0; j < size_; ++j) chunks.push_back(ElementAt(received.data(), j * mine, dtype));
  SumElements(chunks, dtype, mine, /*divisor=*/1, out);
  return absl::OkStatus();
}

absl::Status GlooCommunicator::AllToAll(const void* in, absl::Span<const int64_t> send_counts,
                                        void* out, absl::Span<const int64_t> recv_counts,
                                        v1::DType dtype) {
  RETURN_IF_ERROR(CheckDType(*this, "all_to_all", dtype));
  RETURN_IF_ERROR(CheckCounts(*this, "all_to_all", send_counts));
  RETURN_IF_ERROR(CheckCounts(*this, "all_to_all", recv_counts));
  if (send_counts[rank_] != recv_counts[rank_]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "all_to_all on ", name_, ": member ", rank_, " sends itself ", send_counts[rank_],
        " elements but expects ", recv_counts[rank_]));
  }
  if (size_ == 1) {
    if (send_counts[0] > 0 && out != in) {
      std::memmove(out, in, send_counts[0] * DTypeSize(dtype));
    }
    return Run("all_to_all", [] {});
  }
  RETURN_IF_ERROR(Run("all_to_all", [&] {
    gloo::AlltoallvOptions opts(context_);
    WithGlooType(dtype, [&](auto zero) {
      using T = decltype(zero);
      opts.setInput(static_cast<T*>(const_cast<void*>(in)),
                    std::vector<int64_t>(send_counts.begin(), send_counts.end()));
      opts.setOutput(static_cast<T*>(out),
                     std::vector<int64_t>(recv_counts.begin(), recv_counts.end()));
    });
    opts.setTimeout(timeout_);
    gloo::alltoallv(opts);
  }));
  CountSent(AllToAllBytesSent(send_counts, DTypeSize(dtype), rank_));
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Broadcast(void* data, size_t count, v1::DType dtype, int root) {
  RETURN_IF_ERROR(CheckDType(*this, "broadcast", dtype));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("broadcast on ", name_, ": root ", root, " out of range"));
  }
  if (count == 0) return Run("broadcast", [] {});
  RETURN_IF_ERROR(Run("broadcast", [&] {
    gloo::BroadcastOptions opts(context_);
    WithGlooType(dtype, [&](auto zero) {
      opts.setOutput(static_cast<decltype(zero)*>(data), count);
    });
    opts.setRoot(root);
    opts.setTimeout(timeout_);
    gloo::broadcast(opts);
  }));
  CountSent(BinomialBroadcastBytesSent(static_cast<int64_t>(count), DTypeSize(dtype), rank_,
                                       size_, root));
  return absl::OkStatus();
}

// Point-to-point messages use the caller's tag as the Gloo slot. Collectives use slots with a
// non-zero prefix byte (gloo::Slot::build), so a 32-bit tag never collides with them.
absl::Status GlooCommunicator::Send(const void* data, size_t count, v1::DType dtype, int peer,
                                    uint32_t tag) {
  RETURN_IF_ERROR(CheckDType(*this, "send", dtype));
  RETURN_IF_ERROR(CheckPeer(*this, "send", peer, tag));
  if (count == 0) return Run("send", [] {});
  const size_t bytes = count * DTypeSize(dtype);
  RETURN_IF_ERROR(Run("send", [&] {
    auto buf = context_->createUnboundBuffer(const_cast<void*>(data), bytes);
    buf->send(peer, tag);
    if (!buf->waitSend(timeout_)) throw gloo::IoException("send aborted");
  }));
  CountSent(static_cast<int64_t>(bytes));
  return absl::OkStatus();
}

absl::Status GlooCommunicator::Recv(void* data, size_t count, v1::DType dtype, int peer,
                                    uint32_t tag) {
  RETURN_IF_ERROR(CheckDType(*this, "recv", dtype));
  RETURN_IF_ERROR(CheckPeer(*this, "recv", peer, tag));
  if (count == 0) return Run("recv", [] {});
  return Run("recv", [&] {
    auto buf = context_->createUnboundBuffer(data, count * DTypeSize(dtype));
    buf->recv(peer, tag);
    if (!buf->waitRecv(timeout_)) throw gloo::IoException("recv aborted");
  });
}

absl::Status GlooCommunicator::Barrier() {
  return Run("barrier", [&] {
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(timeout_);
    gloo::barrier(opts);
  });
}

}  // namespace weft
