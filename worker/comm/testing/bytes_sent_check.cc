#include "worker/comm/testing/bytes_sent_check.h"

#include <gtest/gtest.h>

#include <vector>

namespace weft::testing {
namespace {

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t t = 0;
  for (int64_t x : v) t += x;
  return t;
}

}  // namespace

void ExpectBytesSentFollowTheAlgorithms(Communicator& comm, const CommunicatorFactory& factory,
                                        int size, int rank, ReduceOp all_reduce_op) {
  const int k = size, r = rank;
  int64_t want = 0;
  auto check = [&](const char* what, int64_t bytes) {
    want += bytes;
    ASSERT_EQ(comm.bytes_sent(), want) << what << " on " << k << " ranks, member " << r;
    ASSERT_EQ(factory.bytes_sent(), want) << what;
  };
  EXPECT_EQ(comm.bytes_sent(), 0);
  // 24 and 300000 floats split into even ring chunks for K = 1..4.
  for (int64_t count : {int64_t{24}, int64_t{300000}}) {
    std::vector<float> data(count, 1.0f);
    ASSERT_TRUE(comm.AllReduce(data.data(), count, all_reduce_op).ok());
    check("all_reduce", 2 * (k - 1) * 4 * count / k);
  }
  std::vector<int64_t> counts;
  for (int m = 0; m < k; ++m) counts.push_back(m + 1);
  std::vector<float> in(counts[r], 1.0f), out(Sum(counts));
  ASSERT_TRUE(comm.AllGather(in.data(), out.data(), counts).ok());
  check("all_gather", k == 1 ? 0 : 4 * (Sum(counts) - counts[(r + 1) % k]));
  std::vector<float> full(Sum(counts), 1.0f), mine(counts[r]);
  ASSERT_TRUE(comm.ReduceScatter(full.data(), mine.data(), counts).ok());
  check("reduce_scatter", 4 * (Sum(counts) - counts[r]));
  // Member r sends r + j + 1 floats to member j.
  std::vector<int64_t> send, recv;
  for (int j = 0; j < k; ++j) {
    send.push_back(r + j + 1);
    recv.push_back(j + r + 1);
  }
  std::vector<float> a2a_in(Sum(send), 1.0f), a2a_out(Sum(recv));
  ASSERT_TRUE(comm.AllToAll(a2a_in.data(), send, a2a_out.data(), recv).ok());
  check("all_to_all", 4 * (Sum(send) - send[r]));
  for (int root = 0; root < k; ++root) {
    std::vector<float> data(11, 1.0f);
    ASSERT_TRUE(comm.Broadcast(data.data(), data.size(), root).ok());
    // Children in the binomial tree of virtual rank v = (r - root) mod K.
    const int v = (r - root + k) % k;
    const int children[4][4] = {{0}, {1, 0}, {2, 0, 0}, {2, 1, 0, 0}};
    check("broadcast", 44 * children[k - 1][v]);
  }
  ASSERT_TRUE(comm.Barrier().ok());
  check("barrier", 0);
  if (k >= 2) {
    std::vector<float> msg(5, 1.0f);
    if (r == 0) {
      ASSERT_TRUE(comm.Send(msg.data(), msg.size(), 1, 7).ok());
      check("send", 20);
    } else if (r == 1) {
      ASSERT_TRUE(comm.Recv(msg.data(), msg.size(), 0, 7).ok());
      check("recv", 0);
    }
  }
}

}  // namespace weft::testing
