// A unix datagram socket standing in for systemd's notification socket in tests: give its path
// to a process as NOTIFY_SOCKET and read what it sends (sd_notify's "READY=1\nSTATUS=...", one
// datagram per call).
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<NotifySocket> socket, NotifySocket::Create());
//   env["NOTIFY_SOCKET"] = socket->path();
//   ...start the daemon...
//   absl::StatusOr<std::string> ready = socket->ReceiveMatching(
//       [](const std::string& m) { return absl::StrContains(m, "READY=1"); },
//       absl::Now() + absl::Seconds(30));
#ifndef WEFT_COMMON_TESTING_NOTIFY_SOCKET_H_
#define WEFT_COMMON_TESTING_NOTIFY_SOCKET_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace weft::testing {

class NotifySocket {
 public:
  // Bound in a fresh folder under TEST_TMPDIR, or under /tmp where that path would not fit a
  // socket address (108 bytes); the folder is removed with the socket.
  static absl::StatusOr<std::unique_ptr<NotifySocket>> Create();
  ~NotifySocket();
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  const std::string& path() const { return path_; }
  // The next datagram; DEADLINE_EXCEEDED when none came by `deadline`.
  absl::StatusOr<std::string> Receive(absl::Time deadline);
  // Datagrams until one that `match` accepts, which is returned; those before it are dropped
  // (appended to *skipped when given). DEADLINE_EXCEEDED naming what came instead.
  absl::StatusOr<std::string> ReceiveMatching(const std::function<bool(const std::string&)>& match,
                                              absl::Time deadline,
                                              std::vector<std::string>* skipped = nullptr);
  // Every datagram waiting now, without blocking.
  std::vector<std::string> Drain();

 private:
  NotifySocket(int fd, std::string dir, std::string path)
      : fd_(fd), dir_(std::move(dir)), path_(std::move(path)) {}

  const int fd_;  // owned
  const std::string dir_;
  const std::string path_;
};

}  // namespace weft::testing

#endif  // WEFT_COMMON_TESTING_NOTIFY_SOCKET_H_
