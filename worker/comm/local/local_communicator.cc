#include "worker/comm/local/local_communicator.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/status.h"
#include "worker/comm/host_reduce.h"
#include "worker/comm/wire_bytes.h"

namespace weft {
namespace {

// What a member posts when it enters a collective; every member checks the others match.
struct Post {
  const char* op = nullptr;
  v1::DType dtype = v1::F32;
  int64_t count = 0;       // elements this member contributes (op-specific)
  int64_t aux = 0;         // root for broadcast, total for gather/scatter
  const void* in = nullptr;
  void* out = nullptr;
  const int64_t* counts = nullptr;   // per-member counts (gather/scatter/all-to-all send)
  const int64_t* counts2 = nullptr;  // all-to-all recv counts
};

// A point-to-point message: its bytes and the dtype the sender called it.
struct Message {
  v1::DType dtype;
  std::vector<char> bytes;

  int64_t count() const { return static_cast<int64_t>(bytes.size()) / DTypeSize(dtype); }
};

}  // namespace

// The meeting point of one group's members. Each collective is two cyclic barriers: after the
// first, every member's Post is visible and each member computes its own output from the
// others' inputs; after the second, nobody reads inputs any more, so members may overwrite them
// (in-place all-reduce) and post again. A timeout breaks the group for good.
class LocalGroup {
 public:
  LocalGroup(std::string name, int size, absl::Duration timeout)
      : name_(std::move(name)), size_(size), timeout_(timeout), posts_(size) {}

  const std::string& name() const { return name_; }
  int size() const { return size_; }

  // Publishes `post` as member `rank`'s and waits for every member's.
  absl::Status Enter(int rank, const Post& post) {
    absl::MutexLock lock(&mu_);
    posts_[rank] = post;
    return ArriveLocked(post.op);
  }
  // Waits until every member has finished reading the posts.
  absl::Status Leave(const char* op) {
    absl::MutexLock lock(&mu_);
    return ArriveLocked(op);
  }
  // Valid between Enter and Leave: the barriers order these reads after every write.
  const Post& post(int rank) const ABSL_NO_THREAD_SAFETY_ANALYSIS { return posts_[rank]; }

  // Point-to-point: messages are buffered (eager send), matched by (from, to, tag) in order.
  absl::Status Send(int from, int to, uint32_t tag, const void* data, size_t count,
                    v1::DType dtype) {
    absl::MutexLock lock(&mu_);
    if (broken_) return Broken("send");
    const char* bytes = static_cast<const char*>(data);
    mailbox_[std::make_tuple(from, to, tag)].push_back(
        Message{dtype, std::vector<char>(bytes, bytes + count * DTypeSize(dtype))});
    return absl::OkStatus();
  }
  absl::Status Recv(int from, int to, uint32_t tag, void* data, size_t count, v1::DType dtype) {
    absl::MutexLock lock(&mu_);
    const auto key = std::make_tuple(from, to, tag);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (broken_) return true;
      auto it = mailbox_.find(key);
      return it != mailbox_.end() && !it->second.empty();
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout_)) {
      broken_ = true;
      return absl::DeadlineExceededError(absl::StrCat(
          "recv from member ", from, " tag ", tag, " on ", name_, ": timed out after ",
          absl::FormatDuration(timeout_)));
    }
    if (broken_) return Broken("recv");
    std::deque<Message>& queue = mailbox_[key];
    Message msg = std::move(queue.front());
    queue.pop_front();
    if (msg.dtype != dtype || msg.count() != static_cast<int64_t>(count)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recv from member ", from, " tag ", tag, " on ", name_, ": expected ", count, " ",
          DTypeName(dtype), " elements, the sender sent ", msg.count(), " ", DTypeName(msg.dtype)));
    }
    std::copy(msg.bytes.begin(), msg.bytes.end(), static_cast<char*>(data));
    return absl::OkStatus();
  }

 private:
  absl::Status Broken(const char* op) const {
    return absl::AbortedError(
        absl::StrCat(op, " on ", name_, ": the group is broken by an earlier failure"));
  }

  // A cyclic barrier over all members.
  absl::Status ArriveLocked(const char* op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (broken_) return Broken(op);
    const int64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      return absl::OkStatus();
    }
    auto passed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return broken_ || generation_ != generation;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&passed), timeout_)) {
      broken_ = true;
      return absl::DeadlineExceededError(absl::StrCat(op, " on ", name_, ": timed out after ",
                                                      absl::FormatDuration(timeout_),
                                                      " waiting for the other members"));
    }
    if (generation_ == generation) return Broken(op);
    return absl::OkStatus();
  }

  const std::string name_;
  const int size_;
  const absl::Duration timeout_;
  absl::Mutex mu_;
  std::vector<Post> posts_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::tuple<int, int, uint32_t>, std::deque<Message>> mailbox_ ABSL_GUARDED_BY(mu_);
};

namespace {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank,
                    std::shared_ptr<std::atomic<int64_t>> also_count)
      : group_(std::move(group)), rank_(rank), also_count_(std::move(also_count)) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  const std::string& name() const override { return group_->name(); }
  int64_t bytes_sent() const override { return bytes_sent_; }

  absl::Status AllReduce(void* data, size_t count, v1::DType dtype, ReduceOp op) override {
    const char* kOp = "all_reduce";
    RETURN_IF_ERROR(CheckReduce(*this, kOp, dtype, op));
    Post post{kOp, dtype, static_cast<int64_t>(count), static_cast<int64_t>(op), data};
    RETURN_IF_ERROR(Begin(post));
    std::vector<const void*> inputs;
    for (int m = 0; m < size(); ++m) inputs.push_back(group_->post(m).in);
    scratch_.resize(count * DTypeSize(dtype));
    if (op == ReduceOp::kMax) {
      // The first member with itself: even a group of one canonicalizes its NaNs.
      MaxElements(inputs[0], inputs[0], dtype, count, scratch_.data());
      for (int m = 1; m < size(); ++m) {
        MaxElements(scratch_.data(), inputs[m], dtype, count, scratch_.data());
      }
    } else {
      SumElements(inputs, dtype, static_cast<int64_t>(count), op == ReduceOp::kAvg ? size() : 1,
                  scratch_.data());
    }
    RETURN_IF_ERROR(group_->Leave(kOp));
    std::copy(scratch_.begin(), scratch_.end(), static_cast<char*>(data));
    CountSent(RingAllReduceBytesSent(static_cast<int64_t>(count), DTypeSize(dtype), rank_,
                                     size()));
    return absl::OkStatus();
  }

  absl::Status AllGather(const void* in, void* out, absl::Span<const int64_t> counts,
                         v1::DType dtype) override {
    const char* kOp = "all_gather";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    RETURN_IF_ERROR(CheckCounts(*this, kOp, counts));
    Post post{kOp, dtype, counts[rank_], SumCounts(counts), in, out, counts.data()};
    RETURN_IF_ERROR(Begin(post));
    RETURN_IF_ERROR(CheckSameCounts(kOp, counts));
    const int64_t element = DTypeSize(dtype);
    scratch_.resize(post.aux * element);
    int64_t offset = 0;
    for (int m = 0; m < size(); ++m) {
      // Not for 0 elements: an empty scratch_'s data() may be null, which memcpy must not get.
      if (counts[m] > 0) {
        std::memcpy(ElementAt(scratch_.data(), offset, dtype), group_->post(m).in,
                    counts[m] * element);
      }
      offset += counts[m];
    }
    RETURN_IF_ERROR(group_->Leave(kOp));
    std::copy(scratch_.begin(), scratch_.end(), static_cast<char*>(out));
    CountSent(RingAllGatherBytesSent(counts, element, rank_));
    return absl::OkStatus();
  }

  absl::Status ReduceScatter(const void* in, void* out, absl::Span<const int64_t> counts,
                             v1::DType dtype) override {
    const char* kOp = "reduce_scatter";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    RETURN_IF_ERROR(CheckCounts(*this, kOp, counts));
    Post post{kOp, dtype, counts[rank_], SumCounts(counts), in, out, counts.data()};
    RETURN_IF_ERROR(Begin(post));
    RETURN_IF_ERROR(CheckSameCounts(kOp, counts));
    const int64_t offset = SumCounts(counts.subspan(0, rank_));
    std::vector<const void*> pieces;
    for (int m = 0; m < size(); ++m) pieces.push_back(ElementAt(group_->post(m).in, offset, dtype));
    scratch_.resize(counts[rank_] * DTypeSize(dtype));
    SumElements(pieces, dtype, counts[rank_], /*divisor=*/1, scratch_.data());
    RETURN_IF_ERROR(group_->Leave(kOp));
    std::copy(scratch_.begin(), scratch_.end(), static_cast<char*>(out));
    // As GlooCommunicator's reduce-scatter.
    CountSent(AllToAllBytesSent(counts, DTypeSize(dtype), rank_));
    return absl::OkStatus();
  }

  absl::Status AllToAll(const void* in, absl::Span<const int64_t> send_counts, void* out,
                        absl::Span<const int64_t> recv_counts, v1::DType dtype) override {
    const char* kOp = "all_to_all";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    RETURN_IF_ERROR(CheckCounts(*this, kOp, send_counts));
    RETURN_IF_ERROR(CheckCounts(*this, kOp, recv_counts));
    Post post{kOp, dtype, SumCounts(send_counts), SumCounts(recv_counts), in, out,
              send_counts.data(), recv_counts.data()};
    RETURN_IF_ERROR(Begin(post));
    // What member m sends me must be what I expect from m.
    for (int m = 0; m < size(); ++m) {
      const int64_t sent = group_->post(m).counts[rank_];
      if (sent != recv_counts[m]) {
        group_->Leave(kOp).IgnoreError();
        return absl::InvalidArgumentError(absl::StrCat(
            kOp, " on ", name(), ": member ", rank_, " expects ", recv_counts[m],
            " elements from member ", m, ", which sends ", sent));
      }
    }
    const int64_t element = DTypeSize(dtype);
    scratch_.resize(post.aux * element);
    int64_t dst = 0;
    for (int m = 0; m < size(); ++m) {
      const Post& p = group_->post(m);
      int64_t src = 0;
      for (int j = 0; j < rank_; ++j) src += p.counts[j];
      if (recv_counts[m] > 0) {  // as in AllGather: scratch_.data() may be null
        std::memcpy(ElementAt(scratch_.data(), dst, dtype), ElementAt(p.in, src, dtype),
                    recv_counts[m] * element);
      }
      dst += recv_counts[m];
    }
    RETURN_IF_ERROR(group_->Leave(kOp));
    std::copy(scratch_.begin(), scratch_.end(), static_cast<char*>(out));
    CountSent(AllToAllBytesSent(send_counts, element, rank_));
    return absl::OkStatus();
  }

  absl::Status Broadcast(void* data, size_t count, v1::DType dtype, int root) override {
    const char* kOp = "broadcast";
    RETURN_IF_ERROR(CheckDType(*this, kOp, dtype));
    if (root < 0 || root >= size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, " on ", name(), ": root ", root, " is not a member"));
    }
    Post post{kOp, dtype, static_cast<int64_t>(count), root, data};
    RETURN_IF_ERROR(Begin(post));
    if (rank_ != root) {
      std::memcpy(data, group_->post(root).in, count * DTypeSize(dtype));
    }
    RETURN_IF_ERROR(group_->Leave(kOp));
    CountSent(BinomialBroadcastBytesSent(static_cast<int64_t>(count), DTypeSize(dtype), rank_,
                                         size(), root));
    return absl::OkStatus();
  }

  absl::Status Send(const void* data, size_t count, v1::DType dtype, int peer,
                    uint32_t tag) override {
    RETURN_IF_ERROR(CheckDType(*this, "send", dtype));
    RETURN_IF_ERROR(CheckPeer(*this, "send", peer, tag));
    RETURN_IF_ERROR(group_->Send(rank_, peer, tag, data, count, dtype));
    CountSent(static_cast<int64_t>(count) * DTypeSize(dtype));
    return absl::OkStatus();
  }

  absl::Status Recv(void* data, size_t count, v1::DType dtype, int peer,
                    uint32_t tag) override {
    RETURN_IF_ERROR(CheckDType(*this, "recv", dtype));
    RETURN_IF_ERROR(CheckPeer(*this, "recv", peer, tag));
    return group_->Recv(peer, rank_, tag, data, count, dtype);
  }

  absl::Status Barrier() override {
    Post post{"barrier"};
    RETURN_IF_ERROR(Begin(post));
    return group_->Leave("barrier");
  }

 private:
  void CountSent(int64_t bytes) {
    bytes_sent_ += bytes;
    if (also_count_ != nullptr) also_count_->fetch_add(bytes);
  }

  // Enters the collective and checks every member entered the same one with the same size
  // parameters. On a mismatch every member still leaves, so the others fail rather than hang.
  absl::Status Begin(const Post& post) {
    RETURN_IF_ERROR(group_->Enter(rank_, post));
    for (int m = 0; m < size(); ++m) {
      const Post& other = group_->post(m);
      bool same = std::strcmp(other.op, post.op) == 0 && other.dtype == post.dtype;
      // All-reduce and broadcast must agree on count and reduce op / root; the gather and
      // scatter kinds compare their per-member counts afterwards.
      if (same && (std::strcmp(post.op, "all_reduce") == 0 ||
                   std::strcmp(post.op, "broadcast") == 0)) {
        same = other.count == post.count && other.aux == post.aux;
      }
      if (!same) {
        group_->Leave(post.op).IgnoreError();
        return absl::InvalidArgumentError(absl::StrCat(
            post.op, " on ", name(), ": member ", rank_, " called ", post.op, "(count ",
            post.count, ", ", post.aux, ", ", DTypeName(post.dtype), ") but member ", m,
            " called ", other.op, "(count ", other.count, ", ", other.aux, ", ",
            DTypeName(other.dtype), ")"));
      }
    }
    return absl::OkStatus();
  }

  // Gather / scatter members must agree on every member's count.
  absl::Status CheckSameCounts(const char* op, absl::Span<const int64_t> counts) {
    for (int m = 0; m < size(); ++m) {
      const int64_t* theirs = group_->post(m).counts;
      for (int j = 0; j < size(); ++j) {
        if (theirs[j] != counts[j]) {
          group_->Leave(op).IgnoreError();
          return absl::InvalidArgumentError(
              absl::StrCat(op, " on ", name(), ": members ", rank_, " and ", m,
                           " disagree on the count of member ", j, ": ", counts[j], " vs ",
                           theirs[j]));
        }
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<LocalGroup> group_;
  const int rank_;
  // This member's result until every member has read the inputs.
  std::vector<char> scratch_;
  int64_t bytes_sent_ = 0;
  const std::shared_ptr<std::atomic<int64_t>> also_count_;  // the factory's total
};

}  // namespace

LocalWorld::LocalWorld(int world_size, absl::Duration timeout)
    : world_size_(world_size), timeout_(timeout) {}

LocalWorld::~LocalWorld() = default;

std::shared_ptr<LocalGroup> LocalWorld::GetGroup(const v1::CommGroup& group) {
  // Keyed like Gloo's store prefix: id and member list.
  const std::string key = absl::StrCat(group.id(), "-", absl::StrJoin(group.ranks(), "."));
  absl::MutexLock lock(&mu_);
  std::shared_ptr<LocalGroup>& g = groups_[key];
  if (g == nullptr) g = std::make_shared<LocalGroup>(GroupName(group), group.ranks_size(), timeout_);
  return g;
}

LocalCommunicatorFactory::LocalCommunicatorFactory(std::shared_ptr<LocalWorld> world,
                                                   int global_rank)
    : world_(std::move(world)),
      global_rank_(global_rank),
      bytes_sent_(std::make_shared<std::atomic<int64_t>>(0)) {}

absl::StatusOr<std::unique_ptr<Communicator>> LocalCommunicatorFactory::Create(
    const v1::CommGroup& group) {
  const std::string name = GroupName(group);
  for (int r : group.ranks()) {
    if (r < 0 || r >= world_->world_size()) {
      return absl::InvalidArgumentError(absl::StrCat("creating communicator for ", name, ": rank ",
                                                     r, " outside the world of ",
                                                     world_->world_size()));
    }
  }
  ASSIGN_OR_RETURN(const int index, MemberIndex(group, global_rank_));
  auto comm = std::make_unique<LocalCommunicator>(world_->GetGroup(group), index, bytes_sent_);
  // Returns once every member has arrived, as a real transport's connect does.
  RETURN_IF_ERROR(Annotate(comm->Barrier(), absl::StrCat("creating communicator for ", name)));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace weft
