// What is particular to the in-process transport: its world (ranks outside it, non-members) and
// its check that every member entered the same collective with the same dtype. The collectives
// themselves are checked for every transport in worker/comm/conformance.
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
    status[r] = (*comm)->AllReduce(v.data(), r == 0 ? 4 : 3, v1::F32, ReduceOp::kSum);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kInvalidArgument) << status[r];
    EXPECT_NE(status[r].message().find("group 0 (dp) ranks [0,1]"), absl::string_view::npos)
        << status[r];
  }
}

// Same collective and count, different dtypes: both members fail, naming both dtypes. A recv
// of another dtype than the message's fails naming both too.
TEST(LocalCommunicatorTest, MismatchedDTypesFailOnBothSides) {
  auto world = std::make_shared<LocalWorld>(2, absl::Seconds(10));
  std::vector<absl::Status> status(2);
  absl::Status recv;
  RunRanks(2, [&](int r) {
    LocalCommunicatorFactory f(world, r);
    auto comm = f.Create(Group(0, {0, 1}));
    ASSERT_TRUE(comm.ok());
    std::vector<int64_t> v(4, 1);
    status[r] = (*comm)->AllReduce(v.data(), 4, r == 0 ? v1::F32 : v1::I32, ReduceOp::kSum);
    if (r == 0) {
      ASSERT_TRUE((*comm)->Send(v.data(), 4, v1::F32, 1, 9).ok());
    } else {
      recv = (*comm)->Recv(v.data(), 4, v1::I32, 0, 9);
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(status[r].code(), absl::StatusCode::kInvalidArgument) << status[r];
    EXPECT_NE(status[r].message().find("f32"), absl::string_view::npos) << status[r];
    EXPECT_NE(status[r].message().find("i32"), absl::string_view::npos) << status[r];
  }
  EXPECT_EQ(recv.code(), absl::StatusCode::kInvalidArgument) << recv;
  EXPECT_NE(recv.message().find("expected 4 i32 elements, the sender sent 4 f32"),
            absl::string_view::npos)
      << recv;
}

TEST(LocalCommunicatorTest, RejectsNonMembersAndBadRanks) {
  auto world = std::make_shared<LocalWorld>(2, absl::Seconds(1));
  LocalCommunicatorFactory f(world, 0);
  EXPECT_EQ(f.Create(Group(0, {1})).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.Create(Group(0, {0, 5})).status().code(), absl::StatusCode::kInvalidArgument);
  auto single = f.Create(Group(7, {0}));
  ASSERT_TRUE(single.ok());
  float v = 2.0f;
  EXPECT_TRUE((*single)->AllReduce(&v, 1, v1::F32, ReduceOp::kAvg).ok());
  EXPECT_EQ(v, 2.0f);
}

}  // namespace
}  // namespace weft
