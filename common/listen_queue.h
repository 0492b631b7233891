// Whether a listening socket of this process is being served: the kernel holds each connection a
// client opened in the socket's accept queue until the server accepts it, so a queue that stays
// non-empty means the server stopped accepting (gRPC does so for good after an accept fails with
// EMFILE: issue 30 saw a coordinator whose clients all timed out while its health said SERVING).
// Linux reports a listening socket's queue length as rx_queue in /proc/net/tcp and tcp6.
//
// E.g.
//   absl::StatusOr<int64_t> waiting = ListenQueueLength(port);   // 0 while the server keeps up
#ifndef WEFT_COMMON_LISTEN_QUEUE_H_
#define WEFT_COMMON_LISTEN_QUEUE_H_

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace weft {

// The connections waiting to be accepted on this process's TCP listening sockets on `port` (IPv4
// and IPv6 together). NOT_FOUND when the process has no such socket; INTERNAL when /proc cannot
// be read.
absl::StatusOr<int64_t> ListenQueueLength(int port);

// ListenQueueLength for a monitor that must go on working when the process has no descriptor
// left (the very case it watches for): the sockets are found and the /proc tables opened once;
// each Sample reads them again through the descriptors it holds.
class ListenQueueProbe {
 public:
  static absl::StatusOr<std::unique_ptr<ListenQueueProbe>> Open(int port);
  ~ListenQueueProbe();
  ListenQueueProbe(const ListenQueueProbe&) = delete;
  ListenQueueProbe& operator=(const ListenQueueProbe&) = delete;

  absl::StatusOr<int64_t> Sample();

 private:
  ListenQueueProbe(int port, std::set<uint64_t> inodes, std::vector<int> tables)
      : port_(port), inodes_(std::move(inodes)), tables_(std::move(tables)) {}

  const int port_;
  const std::set<uint64_t> inodes_;  // this process's sockets when it was opened
  const std::vector<int> tables_;    // /proc/self/net/tcp and tcp6, open
  std::string buffer_;
};

// The sum of rx_queue over the LISTEN lines of `table` (the text of /proc/net/tcp or tcp6) on
// local port `port` whose inode is in `inodes`; -1 when no line matches. Malformed lines are
// skipped.
int64_t ListenQueueInTable(const std::string& table, int port, const std::set<uint64_t>& inodes);

}  // namespace weft

#endif  // WEFT_COMMON_LISTEN_QUEUE_H_
