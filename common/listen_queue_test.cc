#include "common/listen_queue.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

namespace weft {
namespace {

// Two listeners on port 0x1F90 (8080), one of them another process's (inode 999), a connection
// on the same port, and a line that is not one.
constexpr char kTable[] =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n"
    "   0: 0100007F:1F90 00000000:0000 0A 00001000:00000003 00:00000000 00000000     0        0 "
    "111 1 0000000000000000 100 0 0 10 0\n"
    "   1: 00000000:1F90 00000000:0000 0A 00001000:00000007 00:00000000 00000000     0        0 "
    "999 1 0000000000000000 100 0 0 10 0\n"
    "   2: 0100007F:1F90 0100007F:D431 01 00000000:00000010 00:00000000 00000000     0        0 "
    "111 1 0000000000000000 20 4 30 10 -1\n"
    "   3: garbage\n";

TEST(ListenQueueTest, SumsThisProcesssListenersOnThePort) {
  EXPECT_EQ(ListenQueueInTable(kTable, 8080, {111}), 3);
  EXPECT_EQ(ListenQueueInTable(kTable, 8080, {111, 999}), 10);
  EXPECT_EQ(ListenQueueInTable(kTable, 8080, {555}), -1);
  EXPECT_EQ(ListenQueueInTable(kTable, 8081, {111}), -1);
}

// A real listener that never accepts: its queue grows with each connection a client opens.
TEST(ListenQueueTest, ReadsARealListenersQueue) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);

  absl::StatusOr<int64_t> waiting = ListenQueueLength(port);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(*waiting, 0);
  std::vector<int> clients;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(socket(AF_INET, SOCK_STREAM, 0));
    ASSERT_EQ(connect(clients.back(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  waiting = ListenQueueLength(port);
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_EQ(*waiting, 3);
  absl::StatusOr<std::unique_ptr<ListenQueueProbe>> probe = ListenQueueProbe::Open(port);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(*(*probe)->Sample(), 3);
  const int accepted = accept(listener, nullptr, nullptr);
  ASSERT_GE(accepted, 0);
  EXPECT_EQ(*ListenQueueLength(port), 2);
  EXPECT_EQ(*(*probe)->Sample(), 2);  // read again through the descriptors it opened

  close(accepted);
  for (int c : clients) close(c);
  close(listener);
  EXPECT_EQ(ListenQueueLength(port).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace weft
