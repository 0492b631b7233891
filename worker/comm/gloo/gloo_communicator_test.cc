// Conformance of GlooCommunicator: 1 to 4 ranks as threads of this process, rendezvous through
// Gloo's in-process HashStore, TCP on 127.0.0.1. Every result is checked against values
// computed here; counts are uneven (and some zero) on purpose.
#include "worker/comm/gloo/gloo_communicator.h"

#include <chrono>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/bytes_sent_check.h"

namespace weft {
namespace {

v1::CommGroup Group(int id, std::vector<int> ranks, const std::string& dims = "dp") {
  v1::CommGroup g;
  g.set_id(id);
  for (int r : ranks) g.add_ranks(r);
  g.set_mesh_dims(dims);
  return g;
}

std::vector<int> Iota(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Runs body(global_rank, factory) for ranks 0..n-1 on n threads sharing one HashStore.
void RunRanks(int n, absl::Duration timeout,
              const std::function<void(int, GlooCommunicatorFactory&)>& body) {
  gloo::rendezvous::HashStore store;
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      GlooCommunicatorFactory factory(&store, r, "127.0.0.1", timeout);
      body(r, factory);
    });
  }
  for (auto& t : threads) t.join();
}

// A value every member can compute for (member, index): small integers plus a half, so sums of
// up to four of them are exact in float32.
float Value(int member, int64_t i) { return member * 1000.0f + (i % 997) + 0.5f; }

int64_t Sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

class GlooConformanceTest : public ::testing::TestWithParam<int> {
 protected:
  int n() const { return GetParam(); }

  // Creates the communicator of all n ranks and runs `body` on each.
  void RunOnGroup(const std::function<void(Communicator&)>& body) {
    RunRanks(n(), absl::Seconds(30), [&](int r, GlooCommunicatorFactory& factory) {
      auto comm = factory.Create(Group(1, Iota(n())));
      ASSERT_TRUE(comm.ok()) << comm.status();
      ASSERT_EQ((*comm)->rank(), r);
      ASSERT_EQ((*comm)->size(), n());
      body(**comm);
    });
  }
};

TEST_P(GlooConformanceTest, AllReduceSumAndAvg) {
  RunOnGroup([&](Communicator& comm) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{300001}}) {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = Value(comm.rank(), i);
      ASSERT_TRUE(comm.AllReduce(data.data(), count, ReduceOp::kSum).ok());
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int m = 0; m < comm.size(); ++m) want += Value(m, i);
        ASSERT_EQ(data[i], want) << "count " << count << " index " << i;
      }
    }
    std::vector<float> data(5);
    for (size_t i = 0; i < data.size(); ++i) data[i] = Value(comm.rank(), i);
    ASSERT_TRUE(comm.AllReduce(data.data(), data.size(), ReduceOp::kAvg).ok());
    for (size_t i = 0; i < data.size(); ++i) {
      double want = 0;
      for (int m = 0; m < comm.size(); ++m) want += Value(m, i);
      EXPECT_NEAR(data[i], want / comm.size(), 1e-3);
    }
  });
}

TEST_P(GlooConformanceTest, AllGatherUnevenCounts) {
  RunOnGroup([&](Communicator& comm) {
    std::vector<std::vector<int64_t>> cases;
    std::vector<int64_t> uneven, with_zero;
    for (int m = 0; m < comm.size(); ++m) {
      uneven.push_back(m + 1);
      with_zero.push_back(m % 2 == 0 ? 0 : 3 + m);
    }
    cases = {uneven, with_zero};
    for (const auto& counts : cases) {
      std::vector<float> in(counts[comm.rank()]);
      for (size_t i = 0; i < in.size(); ++i) in[i] = Value(comm.rank(), i);
      std::vector<float> out(Sum(counts), -1.0f);
      ASSERT_TRUE(comm.AllGather(in.data(), out.data(), counts).ok());
      size_t k = 0;
      for (int m = 0; m < comm.size(); ++m) {
        for (int64_t i = 0; i < counts[m]; ++i, ++k) ASSERT_EQ(out[k], Value(m, i));
      }
    }
    // In place: `in` is already this member's slot of `out`.
    std::vector<float> out(Sum(uneven), -1.0f);
    int64_t offset = Sum(std::vector<int64_t>(uneven.begin(), uneven.begin() + comm.rank()));
    for (int64_t i = 0; i < uneven[comm.rank()]; ++i) out[offset + i] = Value(comm.rank(), i);
    ASSERT_TRUE(comm.AllGather(out.data() + offset, out.data(), uneven).ok());
    size_t k = 0;
    for (int m = 0; m < comm.size(); ++m) {
      for (int64_t i = 0; i < uneven[m]; ++i, ++k) ASSERT_EQ(out[k], Value(m, i));
    }
  });
}

TEST_P(GlooConformanceTest, ReduceScatterUnevenCounts) {
  RunOnGroup([&](Communicator& comm) {
    std::vector<int64_t> uneven, with_zero;
    for (int m = 0; m < comm.size(); ++m) {
      uneven.push_back(2 * m + 1);
      with_zero.push_back(m == 0 ? 0 : m + 2);
    }
    for (const auto& counts : {uneven, with_zero}) {
      const int64_t total = Sum(counts);
      std::vector<float> in(total);
      for (int64_t i = 0; i < total; ++i) in[i] = Value(comm.rank(), i);
      std::vector<float> out(counts[comm.rank()], -1.0f);
      ASSERT_TRUE(comm.ReduceScatter(in.data(), out.data(), counts).ok());
      const int64_t offset =
          Sum(std::vector<int64_t>(counts.begin(), counts.begin() + comm.rank()));
      for (int64_t i = 0; i < counts[comm.rank()]; ++i) {
        float want = 0;
        for (int m = 0; m < comm.size(); ++m) want += Value(m, offset + i);
        ASSERT_EQ(out[i], want) << "index " << i;
      }
    }
  });
}

TEST_P(GlooConformanceTest, AllToAllUnevenCounts) {
  RunOnGroup([&](Communicator& comm) {
    // count(src, dst): what member src sends member dst; some are zero.
    auto count = [](int src, int dst) -> int64_t { return (src + 2 * dst) % 3; };
    auto value = [](int src, int dst, int64_t i) -> float { return src * 100 + dst * 10 + i; };
    const int me = comm.rank();
    std::vector<int64_t> send_counts, recv_counts;
    std::vector<float> in;
    for (int j = 0; j < comm.size(); ++j) {
      send_counts.push_back(count(me, j));
      recv_counts.push_back(count(j, me));
      for (int64_t i = 0; i < count(me, j); ++i) in.push_back(value(me, j, i));
    }
    std::vector<float> out(Sum(recv_counts), -1.0f);
    ASSERT_TRUE(comm.AllToAll(in.data(), send_counts, out.data(), recv_counts).ok());
    size_t k = 0;
    for (int j = 0; j < comm.size(); ++j) {
      for (int64_t i = 0; i < count(j, me); ++i, ++k) ASSERT_EQ(out[k], value(j, me, i));
    }
  });
}

TEST_P(GlooConformanceTest, BroadcastFromEveryRoot) {
  RunOnGroup([&](Communicator& comm) {
    for (int root = 0; root < comm.size(); ++root) {
      std::vector<float> data(11);
      for (size_t i = 0; i < data.size(); ++i) data[i] = Value(comm.rank(), i);
      ASSERT_TRUE(comm.Broadcast(data.data(), data.size(), root).ok());
      for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(data[i], Value(root, i));
    }
    EXPECT_EQ(comm.Broadcast(nullptr, 0, comm.size()).code(), absl::StatusCode::kInvalidArgument);
  });
}

TEST_P(GlooConformanceTest, SendRecvEveryPair) {
  RunOnGroup([&](Communicator& comm) {
    const int me = comm.rank();
    // Every ordered pair in the same order on every member; Send blocks until the peer posts
    // the matching Recv, so the two sides of one pair must not both send first.
    for (int a = 0; a < comm.size(); ++a) {
      for (int b = 0; b < comm.size(); ++b) {
        if (a == b || (me != a && me != b)) continue;
        const uint32_t tag = 100 + a * 10 + b;
        const size_t count = 3 + a + b;
        if (me == a) {
          std::vector<float> data(count);
          for (size_t i = 0; i < count; ++i) data[i] = Value(a, i + b);
          ASSERT_TRUE(comm.Send(data.data(), count, b, tag).ok());
        } else {
          std::vector<float> data(count, -1.0f);
          ASSERT_TRUE(comm.Recv(data.data(), count, a, tag).ok());
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(data[i], Value(a, i + b));
        }
      }
    }
    EXPECT_EQ(comm.Send(nullptr, 1, me, 0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(comm.Recv(nullptr, 1, comm.size(), 0).code(), absl::StatusCode::kInvalidArgument);
  });
}

TEST_P(GlooConformanceTest, BarrierAndBadCounts) {
  RunOnGroup([&](Communicator& comm) {
    ASSERT_TRUE(comm.Barrier().ok());
    std::vector<int64_t> wrong(comm.size() + 1, 1);
    float buf[8] = {};
    absl::Status s = comm.AllGather(buf, buf, wrong);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("group 1 (dp)"), absl::string_view::npos) << s;
    // A bad argument is caught before any traffic: the communicator is still usable.
    ASSERT_TRUE(comm.Barrier().ok());
  });
}

// bytes_sent() against closed forms of what each Gloo algorithm sends (K members, B bytes):
// ring all-reduce 2 (K-1)/K * B when the chunks are even, ring all-gather everything but the
// next member's chunk, all-to-all and reduce-scatter everything but the own chunk, binomial
// broadcast B per child, send its message; recv and barrier nothing. The factory sums them.
TEST_P(GlooConformanceTest, BytesSentMatchTheAlgorithms) {
  RunRanks(n(), absl::Seconds(30), [&](int r, GlooCommunicatorFactory& factory) {
    auto created = factory.Create(Group(1, Iota(n())));
    ASSERT_TRUE(created.ok()) << created.status();
    testing::ExpectBytesSentFollowTheAlgorithms(**created, factory, n(), r, ReduceOp::kSum);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooConformanceTest, ::testing::Values(1, 2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// A 2x2 mesh: rows and columns are separate groups; the planner may number all rows alike.
TEST(GlooCommunicatorFactoryTest, SeveralGroupsPerRank) {
  RunRanks(4, absl::Seconds(30), [](int r, GlooCommunicatorFactory& factory) {
    const int row = r / 2, col = r % 2;
    auto mp = factory.Create(Group(1, {row * 2, row * 2 + 1}, "mp"));
    ASSERT_TRUE(mp.ok()) << mp.status();
    auto dp = factory.Create(Group(2, {col, col + 2}, "dp"));
    ASSERT_TRUE(dp.ok()) << dp.status();
    EXPECT_EQ((*mp)->rank(), col);
    EXPECT_EQ((*dp)->rank(), row);
    EXPECT_EQ((*dp)->name(), absl::StrCat("group 2 (dp) ranks [", col, ",", col + 2, "]"));
    float x = static_cast<float>(r);
    ASSERT_TRUE((*mp)->AllReduce(&x, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(x, row * 2 + row * 2 + 1);
    float y = static_cast<float>(r);
    ASSERT_TRUE((*dp)->AllReduce(&y, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(y, col + col + 2);
  });
}

TEST(GlooCommunicatorFactoryTest, SingleRankGroupNeedsNoStore) {
  GlooCommunicatorFactory factory(/*store=*/nullptr, 5, "127.0.0.1", absl::Seconds(1));
  auto comm = factory.Create(Group(3, {5}));
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> in = {1, 2, 3}, out(3);
  ASSERT_TRUE((*comm)->AllReduce(in.data(), 3, ReduceOp::kAvg).ok());
  EXPECT_EQ(in, (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE((*comm)->ReduceScatter(in.data(), out.data(), {3}).ok());
  EXPECT_EQ(out, in);
  ASSERT_TRUE((*comm)->Barrier().ok());
}

TEST(GlooCommunicatorFactoryTest, NotAMember) {
  GlooCommunicatorFactory factory(nullptr, 7, "127.0.0.1", absl::Seconds(1));
  auto comm = factory.Create(Group(3, {0, 1}));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("rank 7 is not a member of group 3"),
            std::string::npos)
      << comm.status();
}

// One member never shows up: Create fails after the timeout instead of hanging.
TEST(GlooTimeoutTest, MissingMemberFailsCreate) {
  gloo::rendezvous::HashStore store;
  GlooCommunicatorFactory factory(&store, 0, "127.0.0.1", absl::Seconds(1));
  const auto start = std::chrono::steady_clock::now();
  auto comm = factory.Create(Group(4, {0, 1}, "pp"));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_NE(comm.status().message().find("connecting group 4 (pp) ranks [0,1]"),
            std::string::npos)
      << comm.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// Both members connect, only one calls all_reduce: it times out, and the communicator refuses
// further work.
TEST(GlooTimeoutTest, SilentPeerTimesOutAndBreaksCommunicator) {
  absl::Notification done;
  RunRanks(2, absl::Seconds(1), [&](int r, GlooCommunicatorFactory& factory) {
    auto comm = factory.Create(Group(1, {0, 1}));
    ASSERT_TRUE(comm.ok()) << comm.status();
    if (r == 1) {
      done.WaitForNotification();
      return;
    }
    std::vector<float> data(4, 1.0f);
    absl::Status s = (*comm)->AllReduce(data.data(), data.size(), ReduceOp::kSum);
    done.Notify();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("all_reduce on group 1 (dp) ranks [0,1]"), std::string::npos)
        << s;
    absl::Status again = (*comm)->Barrier();
    EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  });
}

// A peer that goes away mid-operation is an error well before the timeout.
TEST(GlooTimeoutTest, DeadPeerFailsFast) {
  RunRanks(2, absl::Seconds(60), [&](int r, GlooCommunicatorFactory& factory) {
    auto comm = factory.Create(Group(1, {0, 1}));
    ASSERT_TRUE(comm.ok()) << comm.status();
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm->reset();  // closes its sockets
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> data(4, 1.0f);
    absl::Status s = (*comm)->AllReduce(data.data(), data.size(), ReduceOp::kSum);
    EXPECT_FALSE(s.ok());
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << s;
  });
}

}  // namespace
}  // namespace weft
