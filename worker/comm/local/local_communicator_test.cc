// What is particular to the in-process transport: its world (ranks outside it, non-members) and
// its check that every member entered the same collective. The collectives themselves are
// checked for every transport in worker/comm/conformance.
#include "worker/comm/local/local_communicator.h"

#include <functional>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

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
