#include "worker/comm/local/local_communicator.h"

#include <functional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "worker/comm/testing/bytes_sent_check.h"

namespace weft {
namespace {

v1::CommGroup Group(int id, std::vector<int> ranks) {
  v1::CommGroup g;
  g.set_id(id);
  g.set_mesh_dims("dp");
  for (int r : ranks) g.add_ranks(r);
  return g;
}

// Runs body(global_rank) in one thread per rank and waits for all.
void RunRanks(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
}

TEST(LocalCommunicatorTest, AllReduceSumAndAvgAreIdenticalOnEveryMember) {
  const int n = 3;
  auto world = std::make_shared<LocalWorld>(n, absl::Seconds(10));
  std::vector<std::vector<float>> sums(n), avgs(n);
  RunRanks(n, [&](int r) {
    LocalCommunicatorFactory f(world, r);
    auto comm = f.Create(Group(0, {0, 1, 2}));
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_EQ((*comm)->rank(), r);
    EXPECT_EQ((*comm)->size(), 3);
    std::vector<float> v = {1.0f + r, 10.0f * r, -0.5f};
    ASSERT_TRUE((*comm)->AllReduce(v.data(), v.size(), ReduceOp::kSum).ok());
    sums[r] = v;
    std::vector<float> w = {3.0f * r, 1.0f};
    ASSERT_TRUE((*comm)->AllReduce(w.data(), w.size(), ReduceOp::kAvg).ok());
    avgs[r] = w;
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(sums[r], (std::vector<float>{6.0f, 30.0f, -1.5f}));
    EXPECT_EQ(avgs[r], (std::vector<float>{3.0f, 1.0f}));
  }
}

TEST(LocalCommunicatorTest, AllGatherAndReduceScatterWithUnevenCounts) {
  const int n = 3;
  auto world = std::make_shared<LocalWorld>(n, absl::Seconds(10));
  const std::vector<int64_t> counts = {1, 2, 3};
  std::vector<std::vector<float>> gathered(n), scattered(n);
  RunRanks(n, [&](int r) {
    LocalCommunicatorFactory f(world, r);
    auto comm = f.Create(Group(4, {0, 1, 2}));
    ASSERT_TRUE(comm.ok()) << comm.status();
    std::vector<float> in(counts[r], 100.0f * r);
    for (int64_t i = 0; i < counts[r]; ++i) in[i] += i;
    gathered[r].assign(6, -1.0f);
    ASSERT_TRUE((*comm)->AllGather(in.data(), gathered[r].data(), counts).ok());
    std::vector<float> full(6);
    for (int i = 0; i < 6; ++i) full[i] = (r + 1) * (i + 1);
    scattered[r].assign(counts[r], -1.0f);
    ASSERT_TRUE((*comm)->ReduceScatter(full.data(), scattered[r].data(), counts).ok());
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(gathered[r], (std::vector<float>{0, 100, 101, 200, 201, 202}));
  }
  // Sum over members of (r+1)*(i+1) = 6*(i+1).
  EXPECT_EQ(scattered[0], (std::vector<float>{6}));
  EXPECT_EQ(scattered[1], (std::vector<float>{12, 18}));
  EXPECT_EQ(scattered[2], (std::vector<float>{24, 30, 36}));
}

TEST(LocalCommunicatorTest, AllToAllBroadcastSendRecvBarrier) {
  const int n = 2;
  auto world = std::make_shared<LocalWorld>(n, absl::Seconds(10));
  std::vector<std::vector<float>> a2a(n), bcast(n), recv(n);
  RunRanks(n, [&](int r) {
    LocalCommunicatorFactory f(world, r);
    auto comm = f.Create(Group(1, {1, 0}));  // group order differs from global order
    ASSERT_TRUE(comm.ok()) << comm.status();
    const int me = (*comm)->rank();
    EXPECT_EQ(me, r == 1 ? 0 : 1);
    // Member m sends (m+1) floats to each member j: values 10*m + j.
    std::vector<int64_t> send = {me + 1, me + 1};
    std::vector<int64_t> recv_counts = {1, 2};
    std::vector<float> in;
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k <= me; ++k) in.push_back(10.0f * me + j);
    a2a[me].assign(3, -1.0f);
    ASSERT_TRUE((*comm)->AllToAll(in.data(), send, a2a[me].data(), recv_counts).ok());
    std::vector<float> b = {me == 1 ? 7.0f : 0.0f, me == 1 ? 8.0f : 0.0f};
    ASSERT_TRUE((*comm)->Broadcast(b.data(), 2, /*root=*/1).ok());
    bcast[me] = b;
    if (me == 0) {
      std::vector<float> msg = {1.5f, 2.5f};
      ASSERT_TRUE((*comm)->Send(msg.data(), 2, 1, 9).ok());
    } else {
      recv[me].assign(2, -1.0f);
      ASSERT_TRUE((*comm)->Recv(recv[me].data(), 2, 0, 9).ok());
    }
    ASSERT_TRUE((*comm)->Barrier().ok());
  });
  EXPECT_EQ(a2a[0], (std::vector<float>{0, 10, 10}));
  EXPECT_EQ(a2a[1], (std::vector<float>{1, 11, 11}));
  EXPECT_EQ(bcast[0], (std::vector<float>{7, 8}));
  EXPECT_EQ(bcast[1], (std::vector<float>{7, 8}));
  EXPECT_EQ(recv[1], (std::vector<float>{1.5f, 2.5f}));
}

// The in-process communicator counts what GlooCommunicator sends for the same calls (the
// closed forms of gloo_communicator_test's BytesSentMatchTheAlgorithms), on 1 to 4 ranks.
TEST(LocalCommunicatorTest, BytesSentAsGlooSendsThem) {
  for (int k = 1; k <= 4; ++k) {
    auto world = std::make_shared<LocalWorld>(k, absl::Seconds(10));
    std::vector<int> ranks(k);
    for (int i = 0; i < k; ++i) ranks[i] = i;
    RunRanks(k, [&](int r) {
      LocalCommunicatorFactory factory(world, r);
      auto created = factory.Create(Group(1, ranks));
      ASSERT_TRUE(created.ok()) << created.status();
      testing::ExpectBytesSentFollowTheAlgorithms(**created, factory, k, r, ReduceOp::kAvg);
    });
  }
}

TEST(LocalCommunicatorTest, MismatchedCollectivesFailOnBothSides) {
  auto world = std::make_shared<LocalWorld>(2, absl::Seconds(10));
  std::vector<absl::Status> status(2);
  RunRanks(2, [&](int r) {
    LocalCommunicatorFactory f(world, r);
    auto comm = f.Create(Group(0, {0, 1}));
    ASSERT_TRUE(comm.ok());
    std::vector<float> v(4, 1.0f);
    status[r] = (*comm)->AllReduce(v.data(), r == 0 ? 4 : 3, ReduceOp::kSum);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kInvalidArgument) << status[r];
    EXPECT_NE(status[r].message().find("group 0 (dp) ranks [0,1]"), absl::string_view::npos)
        << status[r];
  }
}

TEST(LocalCommunicatorTest, MissingMemberTimesOutNamingTheGroup) {
  auto world = std::make_shared<LocalWorld>(2, absl::Milliseconds(100));
  LocalCommunicatorFactory f(world, 0);
  auto comm = f.Create(Group(3, {0, 1}));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(comm.status().message().find("group 3"), absl::string_view::npos) << comm.status();
}

TEST(LocalCommunicatorTest, RejectsNonMembersAndBadRanks) {
  auto world = std::make_shared<LocalWorld>(2, absl::Seconds(1));
  LocalCommunicatorFactory f(world, 0);
  EXPECT_EQ(f.Create(Group(0, {1})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.Create(Group(0, {0, 5})).status().code(), absl::StatusCode::kInvalidArgument);
  auto single = f.Create(Group(7, {0}));
  ASSERT_TRUE(single.ok());
  float v = 2.0f;
  EXPECT_TRUE((*single)->AllReduce(&v, 1, ReduceOp::kAvg).ok());
  EXPECT_EQ(v, 2.0f);
}

}  // namespace
}  // namespace weft
