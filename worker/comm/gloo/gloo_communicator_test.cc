// What is particular to GlooCommunicator: several groups (store prefixes) per rank, groups of one
// without a store, the messages of its connect, a peer whose sockets close. The collectives
// themselves are checked for every transport in worker/comm/conformance.
#include "worker/comm/gloo/gloo_communicator.h"

#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"

namespace weft {
namespace {

v1::CommGroup Group(int id, std::vector<int> ranks, const std::string& dims = "dp") {
  v1::CommGroup g;
  g.set_id(id);
  for (int r : ranks) g.add_ranks(r);
  g.set_mesh_dims(dims);
  return g;
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
    ASSERT_TRUE((*mp)->AllReduce(&x, 1, v1::F32, ReduceOp::kSum).ok());
    EXPECT_EQ(x, row * 2 + row * 2 + 1);
    float y = static_cast<float>(r);
    ASSERT_TRUE((*dp)->AllReduce(&y, 1, v1::F32, ReduceOp::kSum).ok());
    EXPECT_EQ(y, col + col + 2);
  });
}

TEST(GlooCommunicatorFactoryTest, SingleRankGroupNeedsNoStore) {
  GlooCommunicatorFactory factory(/*store=*/nullptr, 5, "127.0.0.1", absl::Seconds(1));
  auto comm = factory.Create(Group(3, {5}));
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> in = {1, 2, 3}, out(3);
  ASSERT_TRUE((*comm)->AllReduce(in.data(), 3, v1::F32, ReduceOp::kAvg).ok());
  EXPECT_EQ(in, (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE((*comm)->ReduceScatter(in.data(), out.data(), {3}, v1::F32).ok());
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
    absl::Status s = (*comm)->AllReduce(data.data(), data.size(), v1::F32, ReduceOp::kSum);
    EXPECT_FALSE(s.ok());
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30)) << s;
  });
}

}  // namespace
}  // namespace weft
