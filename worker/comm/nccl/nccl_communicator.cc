#include "worker/comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/dtype.h"
#include "common/status.h"
#include "gloo/rendezvous/store.h"
#include "worker/comm/gloo/gloo_status.h"
#include "worker/comm/nccl/max_keys.h"
#include "worker/comm/wire_bytes.h"

namespace weft {
namespace {

// The watchdog's poll interval: short at first (a small collective finishes in tens of
// microseconds), doubling up to a cap so a long wait costs little CPU.
constexpr absl::Duration kFirstPoll = absl::Microseconds(20);
constexpr absl::Duration kMaxPoll = absl::Milliseconds(1);

void SleepAndBackOff(absl::Duration* poll) {
  absl::SleepFor(*poll);
  *poll = std::min(*poll * 2, kMaxPoll);
}

// ncclInProgress is what a non-blocking communicator answers while it is still initializing or
// enqueueing: not an error.
bool IsError(ncclResult_t r) { return r != ncclSuccess && r != ncclInProgress; }

// Remote and system errors are a peer or the network going away; the rest are bugs or CUDA
// failures.
absl::StatusCode CodeOf(ncclResult_t r) {
  return r == ncclRemoteError || r == ncclSystemError ? absl::StatusCode::kUnavailable
                                                      : absl::StatusCode::kInternal;
}

// "NCCL error: remote process exited or there was a network error (<last error>)". Call before
// the communicator is aborted: ncclGetLastError may read it.
std::string NcclErrorText(ncclResult_t r, ncclComm_t comm) {
  std::string text = absl::StrCat("NCCL error: ", ncclGetErrorString(r));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&text, " (", last, ")");
  return text;
}

std::string CudaErrorText(const char* call, cudaError_t e) {
  return absl::StrCat(call, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

// Waits until `comm` leaves ncclInProgress (a non-blocking init, enqueue or finalize is done),
// `deadline` passes or *cancelled is set. Returns the communicator's state: ncclSuccess, an
// error, or ncclInProgress when the deadline or the cancellation came first.
ncclResult_t AwaitNotInProgress(ncclComm_t comm, absl::Time deadline,
                                const std::atomic<bool>* cancelled = nullptr) {
  absl::Duration poll = kFirstPoll;
  while (true) {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    if (absl::Now() >= deadline) return ncclInProgress;
    if (cancelled != nullptr && cancelled->load()) return ncclInProgress;
    SleepAndBackOff(&poll);
  }
}

// NCCL's type for each weft.v1.DType (checked valid by the caller): bf16 is NCCL's own
// ncclBfloat16, whose sums the GPU computes in float32 and rounds at every step of the ring.
ncclDataType_t NcclType(v1::DType dtype) {
  switch (dtype) {
    case v1::BF16:
      return ncclBfloat16;
    case v1::I32:
      return ncclInt32;
    case v1::I64:
      return ncclInt64;
    default:
      return ncclFloat32;
  }
}

bool AllEqual(absl::Span<const int64_t> counts) {
  return std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
}

// The CUDA objects of one communicator, on `device`: the stream its collectives run on, the
// events that order it against the compute stream, the barrier's one float, and the int32 keys of
// a bf16 max.
struct CudaResources {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;  // recorded on the compute stream before each op
  cudaEvent_t done = nullptr;   // recorded on `stream` after each op
  float* barrier = nullptr;     // zero; all-reduced (sum) by Barrier
  int32_t* keys = nullptr;      // key_capacity elements, grown by ReserveKeys
  int64_t key_capacity = 0;

  ~CudaResources() {
    cudaSetDevice(device);
    if (keys != nullptr) cudaFree(keys);
    if (barrier != nullptr) cudaFree(barrier);
    if (done != nullptr) cudaEventDestroy(done);
    if (ready != nullptr) cudaEventDestroy(ready);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Creates them on the current device (`device`). The error names the failed call.
  static absl::StatusOr<std::unique_ptr<CudaResources>> Create(int device) {
    auto r = std::make_unique<CudaResources>();
    r->device = device;
    cudaError_t e = cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return absl::InternalError(CudaErrorText("cudaStreamCreate", e));
    e = cudaEventCreateWithFlags(&r->ready, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
    if (e != cudaSuccess) return absl::InternalError(CudaErrorText("cudaEventCreate", e));
    void* barrier = nullptr;
    e = cudaMalloc(&barrier, sizeof(float));
    if (e != cudaSuccess) return absl::InternalError(CudaErrorText("cudaMalloc", e));
    r->barrier = static_cast<float*>(barrier);
    // On the communicator's stream, so it is ordered before the first Barrier (the stream does
    // not synchronize with the legacy default stream).
    e = cudaMemsetAsync(r->barrier, 0, sizeof(float), r->stream);
    if (e != cudaSuccess) return absl::InternalError(CudaErrorText("cudaMemsetAsync", e));
    return r;
  }

  // Makes `keys` hold at least n elements. Every op has finished when the next one starts (the
  // calls block), so the old buffer is free to go.
  absl::Status ReserveKeys(int64_t n) {
    if (n <= key_capacity) return absl::OkStatus();
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return absl::InternalError(CudaErrorText("cudaSetDevice", e));
    if (keys != nullptr) cudaFree(keys);
    keys = nullptr;
    key_capacity = 0;
    void* grown = nullptr;
    e = cudaMalloc(&grown, n * sizeof(int32_t));
    if (e != cudaSuccess) {
      const std::string text =
          absl::StrCat(CudaErrorText("cudaMalloc", e), " (", n, " int32 keys for a bf16 max)");
      return e == cudaErrorMemoryAllocation ? absl::ResourceExhaustedError(text)
                                            : absl::InternalError(text);
    }
    keys = static_cast<int32_t*>(grown);
    key_capacity = n;
    return absl::OkStatus();
  }
};

// Runs the NCCL calls of `calls` (which returns the first error, or ncclSuccess) between
// ncclGroupStart and ncclGroupEnd, so NCCL launches them as one operation and point-to-point
// pairs progress together. The group is closed even when a call fails, since groups are
// per-thread state.
template <typename Fn>
ncclResult_t Grouped(Fn&& calls) {
  const ncclResult_t start = ncclGroupStart();
  if (start != ncclSuccess) return start;
  const ncclResult_t first = calls();
  const ncclResult_t end = ncclGroupEnd();
  return IsError(first) ? first : end;
}

// One group's collectives over NCCL. Not thread-safe: the executor calls it from one thread, in
// the same order on every member (see the factory's header for streams, errors and bytes).
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, std::unique_ptr<CudaResources> cuda,
                   cudaStream_t compute_stream, int rank, int size, int global_rank,
                   std::string name, absl::Duration timeout,
                   std::shared_ptr<std::atomic<int64_t>> also_count,
                   std::shared_ptr<const std::atomic<bool>> cancelled)
      : cuda_(std::move(cuda)),
        comm_(comm),
        compute_stream_(compute_stream),
        rank_(rank),
        size_(size),
        global_rank_(global_rank),
        name_(std::move(name)),
        timeout_(timeout),
        also_count_(std::move(also_count)),
        cancelled_(std::move(cancelled)) {}

  // Finalizes the NCCL communicator (it flushes its work, and may wait for the other members),
  // bounded by the timeout, then destroys it; aborts it if that fails. A broken one was aborted
  // already.
  ~NcclCommunicator() override {
    if (comm_ == nullptr) return;
    cudaSetDevice(cuda_->device);
    const absl::Time deadline = absl::Now() + timeout_;
    ncclResult_t r = ncclCommFinalize(comm_);
    if (!IsError(r)) r = AwaitNotInProgress(comm_, deadline);
    if (r == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  int64_t bytes_sent() const override { return bytes_sent_; }

  absl::Status AllReduce(void* data, size_t count, v1::DType dtype, ReduceOp op) override {
    const char* kOp = "all_reduce";
    RETURN_IF_ERROR(CheckReduce(*this, kOp, dtype, op));
    if (count == 0) return CheckUsable(kOp, 0, dtype);
    if (op == ReduceOp::kMax && IsFloatingPoint(dtype)) return FloatMax(data, count, dtype);
    const ncclRedOp_t nccl_op = op == ReduceOp::kAvg   ? ncclAvg
                                : op == ReduceOp::kMax ? ncclMax
                                                       : ncclSum;
    RETURN_IF_ERROR(Run(kOp, count, dtype, [&](ncclResult_t* r) {
      *r = ncclAllReduce(data, data, count, NcclType(dtype), nccl_op, comm_, cuda_->stream);
      return absl::OkStatus();
    }));
    CountSent(NcclRingAllReduceBytesSent(static_cast<int64_t>(count), DTypeSize(dtype), size_));
    return absl::OkStatus();
  }

  // Equal counts: ncclAllGather. Unequal: one ncclBroadcast per member, each the root of its own
  // piece, in one group; this member's piece is copied into place first, so every broadcast is
  // in place (sendbuff == recvbuff; NCCL reads sendbuff on the root only).
  absl::Status AllGather(const void* in, void* out, absl::Span<const int64_t> counts,
                         v1::DType dtype) override {
    const char* kOp = "all_gather";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    RETURN_IF_ERROR(CheckCounts(*this, kOp, counts));
    const int64_t total = SumCounts(counts);
    if (total == 0) return CheckUsable(kOp, 0, dtype);
    const ncclDataType_t type = NcclType(dtype);
    if (AllEqual(counts)) {
      RETURN_IF_ERROR(Run(kOp, total, dtype, [&](ncclResult_t* r) {
        *r = ncclAllGather(in, out, counts[0], type, comm_, cuda_->stream);
        return absl::OkStatus();
      }));
    } else {
      const int64_t offset = SumCounts(counts.subspan(0, rank_));
      RETURN_IF_ERROR(Run(kOp, total, dtype, [&](ncclResult_t* r) {
        RETURN_IF_ERROR(CopyOnStream(ElementAt(out, offset, dtype), in, counts[rank_], dtype));
        *r = Grouped([&] {
          int64_t at = 0;
          for (int i = 0; i < size_; ++i) {
            void* piece = ElementAt(out, at, dtype);
            at += counts[i];
            if (counts[i] == 0) continue;  // every member skips it: counts are the same on all
            const ncclResult_t b =
                ncclBroadcast(piece, piece, counts[i], type, i, comm_, cuda_->stream);
            if (IsError(b)) return b;
          }
          return ncclSuccess;
        });
        return absl::OkStatus();
      }));
    }
    CountSent(RingAllGatherBytesSent(counts, DTypeSize(dtype), rank_));
    return absl::OkStatus();
  }

  // Equal counts: ncclReduceScatter. Unequal: one ncclReduce per member i of its piece of `in`,
  // rooted at i, in one group; recvbuff is `out` on the root and null elsewhere (NCCL uses it on
  // the root only, and says so).
  absl::Status ReduceScatter(const void* in, void* out, absl::Span<const int64_t> counts,
                             v1::DType dtype) override {
    const char* kOp = "reduce_scatter";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    RETURN_IF_ERROR(CheckCounts(*this, kOp, counts));
    const int64_t total = SumCounts(counts);
    if (total == 0) return CheckUsable(kOp, 0, dtype);
    const ncclDataType_t type = NcclType(dtype);
    if (AllEqual(counts)) {
      RETURN_IF_ERROR(Run(kOp, total, dtype, [&](ncclResult_t* r) {
        *r = ncclReduceScatter(in, out, counts[0], type, ncclSum, comm_, cuda_->stream);
        return absl::OkStatus();
      }));
    } else {
      RETURN_IF_ERROR(Run(kOp, total, dtype, [&](ncclResult_t* r) {
        *r = Grouped([&] {
          int64_t at = 0;
          for (int i = 0; i < size_; ++i) {
            const void* piece = ElementAt(in, at, dtype);
            at += counts[i];
            if (counts[i] == 0) continue;
            void* recv = i == rank_ ? out : nullptr;
            const ncclResult_t red =
                ncclReduce(piece, recv, counts[i], type, ncclSum, i, comm_, cuda_->stream);
            if (IsError(red)) return red;
          }
          return ncclSuccess;
        });
        return absl::OkStatus();
      }));
    }
    CountSent(AllToAllBytesSent(counts, DTypeSize(dtype), rank_));
    return absl::OkStatus();
  }

  // One group of ncclSend/ncclRecv, a pair per peer with a non-empty chunk; the own chunk is a
  // device copy on the communicator's stream.
  absl::Status AllToAll(const void* in, absl::Span<const int64_t> send_counts, void* out,
                        absl::Span<const int64_t> recv_counts, v1::DType dtype) override {
    const char* kOp = "all_to_all";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    RETURN_IF_ERROR(CheckCounts(*this, kOp, send_counts));
    RETURN_IF_ERROR(CheckCounts(*this, kOp, recv_counts));
    if (send_counts[rank_] != recv_counts[rank_]) {
      return absl::InvalidArgumentError(absl::StrCat(kOp, " on ", name_, ": member ", rank_,
                                                     " sends itself ", send_counts[rank_],
                                                     " elements but expects ",
                                                     recv_counts[rank_]));
    }
    const int64_t total = SumCounts(send_counts);
    if (total == 0 && SumCounts(recv_counts) == 0) return CheckUsable(kOp, 0, dtype);
    const ncclDataType_t type = NcclType(dtype);
    RETURN_IF_ERROR(Run(kOp, total, dtype, [&](ncclResult_t* r) {
      const int64_t self_from = SumCounts(send_counts.subspan(0, rank_));
      const int64_t self_to = SumCounts(recv_counts.subspan(0, rank_));
      RETURN_IF_ERROR(CopyOnStream(ElementAt(out, self_to, dtype),
                                   ElementAt(in, self_from, dtype), send_counts[rank_], dtype));
      *r = Grouped([&] {
        int64_t from = 0, to = 0;
        for (int j = 0; j < size_; ++j) {
          const void* send = ElementAt(in, from, dtype);
          void* recv = ElementAt(out, to, dtype);
          from += send_counts[j];
          to += recv_counts[j];
          if (j == rank_) continue;
          if (send_counts[j] > 0) {
            const ncclResult_t s = ncclSend(send, send_counts[j], type, j, comm_, cuda_->stream);
            if (IsError(s)) return s;
          }
          if (recv_counts[j] > 0) {
            const ncclResult_t v = ncclRecv(recv, recv_counts[j], type, j, comm_, cuda_->stream);
            if (IsError(v)) return v;
          }
        }
        return ncclSuccess;
      });
      return absl::OkStatus();
    }));
    CountSent(AllToAllBytesSent(send_counts, DTypeSize(dtype), rank_));
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, size_t count, v1::DType dtype, int root) override {
    const char* kOp = "broadcast";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, " on ", name_, ": root ", root, " out of range"));
    }
    if (count == 0) return CheckUsable(kOp, 0, dtype);
    RETURN_IF_ERROR(Run(kOp, count, dtype, [&](ncclResult_t* r) {
      *r = ncclBroadcast(data, data, count, NcclType(dtype), root, comm_, cuda_->stream);
      return absl::OkStatus();
    }));
    CountSent(NcclChainBroadcastBytesSent(static_cast<int64_t>(count), DTypeSize(dtype), rank_,
                                          size_, root));
    return absl::OkStatus();
  }

  // NCCL matches point-to-point ops by peer and issue order; `tag` only names the message.
  absl::Status Send(const void* data, size_t count, v1::DType dtype, int peer,
                    uint32_t tag) override {
    const char* kOp = "send";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    RETURN_IF_ERROR(CheckPeer(*this, kOp, peer, tag));
    if (count == 0) return CheckUsable(kOp, 0, dtype);
    RETURN_IF_ERROR(Run(kOp, count, dtype, [&](ncclResult_t* r) {
      *r = ncclSend(data, count, NcclType(dtype), peer, comm_, cuda_->stream);
      return absl::OkStatus();
    }));
    CountSent(static_cast<int64_t>(count) * DTypeSize(dtype));
    return absl::OkStatus();
  }

  absl::Status Recv(void* data, size_t count, v1::DType dtype, int peer,
                    uint32_t tag) override {
    const char* kOp = "recv";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    RETURN_IF_ERROR(CheckPeer(*this, kOp, peer, tag));
    if (count == 0) return CheckUsable(kOp, 0, dtype);
    return Run(kOp, count, dtype, [&](ncclResult_t* r) {
      *r = ncclRecv(data, count, NcclType(dtype), peer, comm_, cuda_->stream);
      return absl::OkStatus();
    });
  }

  // An all-reduce of one float: it completes on a member only once every member has joined.
  absl::Status Barrier() override {
    return Run("barrier", 1, v1::F32, [&](ncclResult_t* r) {
      *r = ncclAllReduce(cuda_->barrier, cuda_->barrier, 1, ncclFloat32, ncclSum, comm_,
                         cuda_->stream);
      return absl::OkStatus();
    });
  }

 private:
  // "all_reduce of 24 bf16 elements on group 1 (dp) ranks [0,2] (member 0, global rank 0)".
  std::string Describe(const char* op, int64_t count, v1::DType dtype) const {
    return absl::StrCat(op, " of ", count, " ", DTypeName(dtype),
                        count == 1 ? " element" : " elements", " on ", name_,
                        " (member ", rank_, ", global rank ", global_rank_, ")");
  }

  absl::Status CheckUsable(const char* op, int64_t count, v1::DType dtype) const {
    if (!broken_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(Describe(op, count, dtype),
                     ": communicator unusable after an earlier failure (", broken_reason_, ")"));
  }

  // A max of floats (see the header): an ncclMax of their int32 keys, f32 in place, bf16 through
  // cuda_->keys. NCCL's float max (fmaxf, __hmax) would drop NaNs.
  absl::Status FloatMax(void* data, size_t count, v1::DType dtype) {
    const char* kOp = "all_reduce";
    const int64_t n = static_cast<int64_t>(count);
    const bool bf16 = dtype == v1::BF16;
    if (bf16) {
      RETURN_IF_ERROR(CheckUsable(kOp, n, dtype));
      absl::Status reserved = cuda_->ReserveKeys(n);
      if (!reserved.ok()) {
        return absl::Status(reserved.code(),
                            absl::StrCat(Describe(kOp, n, dtype), ": ", reserved.message()));
      }
    }
    int32_t* keys = bf16 ? cuda_->keys : static_cast<int32_t*>(data);
    auto kernel_failed = [](const char* kernel, cudaError_t e) {
      return absl::InternalError(CudaErrorText(kernel, e));
    };
    RETURN_IF_ERROR(Run(
        kOp, n, dtype,
        [&](ncclResult_t* r) {
          const cudaError_t e = bf16 ? EncodeBf16MaxKeys(data, keys, n, cuda_->stream)
                                     : EncodeF32MaxKeys(data, n, cuda_->stream);
          if (e != cudaSuccess) return kernel_failed("encoding max keys", e);
          *r = ncclAllReduce(keys, keys, count, ncclInt32, ncclMax, comm_, cuda_->stream);
          return absl::OkStatus();
        },
        [&] {
          const cudaError_t e = bf16 ? DecodeBf16MaxKeys(keys, data, n, cuda_->stream)
                                     : DecodeF32MaxKeys(data, n, cuda_->stream);
          if (e != cudaSuccess) return kernel_failed("decoding max keys", e);
          return absl::OkStatus();
        }));
    // What moves is the keys: 4 bytes an element, bf16 too.
    CountSent(NcclRingAllReduceBytesSent(n, sizeof(int32_t), size_));
    return absl::OkStatus();
  }

  // Records the first failure: aborts the NCCL communicator (its kernels stop waiting for
  // peers) and refuses every later call.
  absl::Status Break(absl::StatusCode code, const std::string& message) {
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    broken_ = true;
    broken_reason_ = message;
    return absl::Status(code, message);
  }

  // Enqueues an op on the communicator's stream, ordered after the compute stream's work, and
  // waits for it (see the header). `enqueue` makes the NCCL calls and stores their result in
  // its argument; a status it returns is a CUDA failure before them. `finish`, once NCCL has
  // enqueued them, enqueues CUDA work that must follow them on the stream; a status it returns
  // is a CUDA failure.
  template <typename Enqueue>
  absl::Status Run(const char* op, int64_t count, v1::DType dtype, Enqueue&& enqueue) {
    return Run(op, count, dtype, enqueue, [] { return absl::OkStatus(); });
  }
  template <typename Enqueue, typename Finish>
  absl::Status Run(const char* op, int64_t count, v1::DType dtype, Enqueue&& enqueue,
                   Finish&& finish) {
    RETURN_IF_ERROR(CheckUsable(op, count, dtype));
    const std::string what = Describe(op, count, dtype);
    const absl::Time deadline = absl::Now() + timeout_;
    auto cuda_failed = [&](const char* call, cudaError_t e) {
      return Break(absl::StatusCode::kInternal, absl::StrCat(what, ": ", CudaErrorText(call, e)));
    };
    auto nccl_failed = [&](ncclResult_t r) {
      const std::string text = NcclErrorText(r, comm_);  // before the abort frees comm_
      return Break(CodeOf(r), absl::StrCat(what, ": ", text));
    };
    auto cancelled = [&] {
      return Break(absl::StatusCode::kCancelled,
                   absl::StrCat(what, ": cancelled; the NCCL communicator was aborted"));
    };
    auto timed_out = [&](const char* waiting_for) {
      return Break(
          absl::StatusCode::kDeadlineExceeded,
          absl::StrCat(what, ": timed out after ", absl::FormatDuration(timeout_), " waiting for ",
                       waiting_for, "; the NCCL communicator was aborted"));
    };

    cudaError_t e = cudaSetDevice(cuda_->device);
    if (e != cudaSuccess) return cuda_failed("cudaSetDevice", e);
    e = cudaEventRecord(cuda_->ready, compute_stream_);
    if (e != cudaSuccess) return cuda_failed("cudaEventRecord on the compute stream", e);
    e = cudaStreamWaitEvent(cuda_->stream, cuda_->ready, 0);
    if (e != cudaSuccess) return cuda_failed("cudaStreamWaitEvent", e);

    ncclResult_t r = ncclSuccess;
    absl::Status enqueued = enqueue(&r);
    if (!enqueued.ok()) {
      return Break(absl::StatusCode::kInternal, absl::StrCat(what, ": ", enqueued.message()));
    }
    if (IsError(r)) return nccl_failed(r);
    // A non-blocking communicator may still be enqueueing (connecting peers, say): nothing is
    // on the stream until its state leaves ncclInProgress.
    if (r == ncclInProgress) {
      r = AwaitNotInProgress(comm_, deadline, cancelled_.get());
      if (r == ncclInProgress && cancelled_->load()) return cancelled();
      if (r == ncclInProgress) {
        return timed_out("NCCL to enqueue the operation (connecting to the other members)");
      }
      if (IsError(r)) return nccl_failed(r);
    }
    absl::Status finished = finish();
    if (!finished.ok()) {
      return Break(absl::StatusCode::kInternal, absl::StrCat(what, ": ", finished.message()));
    }

    e = cudaEventRecord(cuda_->done, cuda_->stream);
    if (e != cudaSuccess) return cuda_failed("cudaEventRecord on the communicator's stream", e);
    e = cudaStreamWaitEvent(compute_stream_, cuda_->done, 0);
    if (e != cudaSuccess) return cuda_failed("cudaStreamWaitEvent on the compute stream", e);

    // The watchdog: the op is done, NCCL saw an error (a peer died), the deadline passed (a
    // peer never joined; the kernel would wait forever), or the factory was cancelled.
    absl::Duration poll = kFirstPoll;
    while (true) {
      e = cudaEventQuery(cuda_->done);
      if (e == cudaSuccess) return absl::OkStatus();
      if (e != cudaErrorNotReady) return cuda_failed("cudaEventQuery", e);
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
      if (q != ncclSuccess) return nccl_failed(q);
      if (IsError(state)) return nccl_failed(state);
      if (absl::Now() >= deadline) return timed_out("the other members");
      if (cancelled_->load()) return cancelled();
      SleepAndBackOff(&poll);
    }
  }

  // Device-to-device copy of `count` elements on the communicator's stream (ordered with its
  // collectives).
  absl::Status CopyOnStream(void* to, const void* from, int64_t count, v1::DType dtype) {
    if (count == 0 || to == from) return absl::OkStatus();
    const cudaError_t e = cudaMemcpyAsync(to, from, count * DTypeSize(dtype),
                                          cudaMemcpyDeviceToDevice, cuda_->stream);
    if (e != cudaSuccess) return absl::InternalError(CudaErrorText("cudaMemcpyAsync", e));
    return absl::OkStatus();
  }

  void CountSent(int64_t bytes) {
    bytes_sent_ += bytes;
    if (also_count_ != nullptr) also_count_->fetch_add(bytes);
  }

  const std::unique_ptr<CudaResources> cuda_;  // owned; outlives comm_ (destroyed after it)
  ncclComm_t comm_;                            // owned; null once aborted
  const cudaStream_t compute_stream_;          // not owned; null is the legacy default stream
  const int rank_;
  const int size_;
  const int global_rank_;
  const std::string name_;
  const absl::Duration timeout_;
  bool broken_ = false;
  std::string broken_reason_;
  int64_t bytes_sent_ = 0;
  const std::shared_ptr<std::atomic<int64_t>> also_count_;  // the factory's total
  const std::shared_ptr<const std::atomic<bool>> cancelled_;  // the factory's Cancel()
};

}  // namespace

// ---- NcclCommunicatorFactory ----

// Like GlooCommunicatorFactory's "group-<id>-<ranks>", with its own namespace so a worker that
// runs both transports over one store never mixes their keys.
std::string NcclCommunicatorFactory::StorePrefix(const v1::CommGroup& group) {
  return absl::StrCat("nccl-group-", group.id(), "-", absl::StrJoin(group.ranks(), "."));
}

NcclCommunicatorFactory::NcclCommunicatorFactory(gloo::rendezvous::Store* store, int my_global_rank,
                                                 int device_index, absl::Duration timeout)
    : store_(store),
      my_global_rank_(my_global_rank),
      device_index_(device_index),
      timeout_(std::max(timeout, absl::Milliseconds(1))),
      bytes_sent_(std::make_shared<std::atomic<int64_t>>(0)),
      cancelled_(std::make_shared<std::atomic<bool>>(false)) {}

void NcclCommunicatorFactory::Cancel() { cancelled_->store(true); }

NcclCommunicatorFactory::~NcclCommunicatorFactory() = default;

void NcclCommunicatorFactory::SetComputeStream(void* stream) {
  absl::MutexLock lock(&mu_);
  compute_stream_ = stream;
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicatorFactory::Create(
    const v1::CommGroup& group) {
  const std::string name = GroupName(group);
  absl::StatusOr<int> member = MemberIndex(group, my_global_rank_);
  if (!member.ok()) return member.status();
  const int rank = *member;
  const int size = group.ranks_size();
  const std::string context =
      absl::StrCat("connecting ", name, " over NCCL (member ", rank, ", cuda:", device_index_, ")");
  const absl::Time deadline = absl::Now() + timeout_;

  cudaError_t e = cudaSetDevice(device_index_);
  if (e != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat(context, ": no usable CUDA device: ", CudaErrorText("cudaSetDevice", e)));
  }
  void* compute_stream;
  int incarnation;
  {
    absl::MutexLock lock(&mu_);
    compute_stream = compute_stream_;
    incarnation = creations_[StorePrefix(group)]++;
  }
  auto cuda = CudaResources::Create(device_index_);
  if (!cuda.ok()) return Annotate(cuda.status(), context);

  // Member 0 makes the id; the others read it from the store.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (size == 1 || rank == 0) {
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      return absl::Status(CodeOf(r),
                          absl::StrCat(context, ": ncclGetUniqueId: ", NcclErrorText(r, nullptr)));
    }
  }
  if (size > 1) {
    if (store_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(context, ": no rendezvous store"));
    }
    const std::string key = absl::StrCat(StorePrefix(group), "/unique-id-", incarnation);
    try {
      if (rank == 0) {
        const char* bytes = reinterpret_cast<const char*>(&id);
        store_->set(key, std::vector<char>(bytes, bytes + sizeof(id)));
      } else {
        const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
        store_->wait({key}, std::chrono::milliseconds(std::max<int64_t>(1, left_ms)));
        const std::vector<char> bytes = store_->get(key);
        if (bytes.size() != sizeof(id)) {
          return absl::InternalError(absl::StrCat(context, ": the unique id under ", key, " has ",
                                                  bytes.size(), " bytes, not ", sizeof(id)));
        }
        std::memcpy(&id, bytes.data(), sizeof(id));
      }
    } catch (...) {
      return FromGlooException(std::current_exception(),
                                absl::StrCat(context, ": rendezvous on ", key));
    }
  }

  // Non-blocking init: it returns at once and is polled, so a member that never comes is a
  // timeout instead of a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (!IsError(r)) r = AwaitNotInProgress(comm, deadline, cancelled_.get());
  if (r != ncclSuccess) {
    absl::Status status =
        r == ncclInProgress && cancelled_->load()
            ? absl::CancelledError(absl::StrCat(context, ": cancelled"))
        : r == ncclInProgress
            ? absl::DeadlineExceededError(
                  absl::StrCat(context, ": timed out after ", absl::FormatDuration(timeout_),
                               " waiting for the other members to initialize NCCL"))
            : absl::Status(
                  CodeOf(r),
                  absl::StrCat(context, ": ncclCommInitRankConfig: ", NcclErrorText(r, comm)));
    if (comm != nullptr) ncclCommAbort(comm);
    return status;
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(
      comm, *std::move(cuda), static_cast<cudaStream_t>(compute_stream), rank, size,
      my_global_rank_, name, timeout_, bytes_sent_, cancelled_));
}

}  // namespace weft
