#include "common/testing_notify_socket.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft::testing {
namespace {

// A fresh folder under `base`, or "" when it cannot be made.
std::string MakeDir(const std::string& base) {
  std::string templ = base + "/notify-XXXXXX";
  return mkdtemp(templ.data()) != nullptr ? templ : "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<NotifySocket>> NotifySocket::Create() {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  const char* test_tmpdir = getenv("TEST_TMPDIR");
  std::string dir;
  // The folder's name adds 14 bytes and the socket's 7.
  if (test_tmpdir != nullptr && std::strlen(test_tmpdir) + 21 < sizeof(addr.sun_path)) {
    dir = MakeDir(test_tmpdir);
  } else {
    dir = MakeDir("/tmp");
  }
  if (dir.empty()) return absl::ErrnoToStatus(errno, "making the notify socket's folder");
  const std::string path = dir + "/notify";
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int error = errno;
    rmdir(dir.c_str());
    return absl::ErrnoToStatus(error, "socket(AF_UNIX, SOCK_DGRAM)");
  }
  auto socket = std::unique_ptr<NotifySocket>(new NotifySocket(fd, dir, path));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("binding ", path));
  }
  return socket;
}

NotifySocket::~NotifySocket() {
  close(fd_);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

absl::StatusOr<std::string> NotifySocket::Receive(absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    pollfd p = {fd_, POLLIN, 0};
    const int ready =
        poll(&p, 1, static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(left))));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return absl::ErrnoToStatus(errno, "poll on the notify socket");
    if (ready == 0) return absl::DeadlineExceededError("no notification");
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) return absl::ErrnoToStatus(errno, "recv on the notify socket");
    return std::string(buf, n);
  }
}

absl::StatusOr<std::string> NotifySocket::ReceiveMatching(
    const std::function<bool(const std::string&)>& match, absl::Time deadline,
    std::vector<std::string>* skipped) {
  std::vector<std::string> other;
  while (true) {
    absl::StatusOr<std::string> message = Receive(deadline);
    if (!message.ok()) {
      if (skipped != nullptr) skipped->insert(skipped->end(), other.begin(), other.end());
      // The last few of what came instead (a watchdog sends many).
      const size_t shown = std::min<size_t>(other.size(), 8);
      return absl::Status(message.status().code(),
                          absl::StrCat(message.status().message(), " matching; ", other.size(),
                                       " others, the last ", shown, ": [",
                                       absl::StrJoin(other.end() - shown, other.end(), "] ["),
                                       "]"));
    }
    if (match(*message)) {
      if (skipped != nullptr) skipped->insert(skipped->end(), other.begin(), other.end());
      return message;
    }
    other.push_back(*std::move(message));
  }
}

std::vector<std::string> NotifySocket::Drain() {
  std::vector<std::string> out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd_, buf, sizeof(buf), MSG_DONTWAIT)) >= 0) out.push_back(std::string(buf, n));
  return out;
}

}  // namespace weft::testing
