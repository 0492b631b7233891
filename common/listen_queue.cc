#include "common/listen_queue.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace weft {
namespace {

// TCP_LISTEN in the kernel's state numbering, as /proc/net/tcp prints it.
constexpr char kListenState[] = "0A";

// The inodes of this process's sockets, from /proc/self/fd's links ("socket:[12345]").
absl::StatusOr<std::set<uint64_t>> OwnSocketInodes() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return absl::InternalError("cannot list /proc/self/fd");
  std::set<uint64_t> inodes;
  while (dirent* entry = readdir(dir)) {
    char target[64];
    const std::string link = absl::StrCat("/proc/self/fd/", entry->d_name);
    const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    absl::string_view text(target, static_cast<size_t>(n));
    uint64_t inode = 0;
    if (absl::ConsumePrefix(&text, "socket:[") && absl::ConsumeSuffix(&text, "]") &&
        absl::SimpleAtoi(text, &inode)) {
      inodes.insert(inode);
    }
  }
  closedir(dir);
  return inodes;
}

}  // namespace

int64_t ListenQueueInTable(const std::string& table, int port, const std::set<uint64_t>& inodes) {
  int64_t total = -1;
  std::istringstream lines(table);
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 10 || f[3] != kListenState) continue;
    const size_t colon = f[1].rfind(':');
    const size_t queues = f[4].find(':');
    int local_port = 0;
    int64_t rx_queue = 0;
    uint64_t inode = 0;
    if (colon == absl::string_view::npos || queues == absl::string_view::npos ||
        !absl::SimpleHexAtoi(f[1].substr(colon + 1), &local_port) ||
        !absl::SimpleHexAtoi(f[4].substr(queues + 1), &rx_queue) ||
        !absl::SimpleAtoi(f[9], &inode)) {
      continue;
    }
    if (local_port != port || inodes.count(inode) == 0) continue;
    total = (total < 0 ? 0 : total) + rx_queue;
  }
  return total;
}

absl::StatusOr<std::unique_ptr<ListenQueueProbe>> ListenQueueProbe::Open(int port) {
  absl::StatusOr<std::set<uint64_t>> inodes = OwnSocketInodes();
  if (!inodes.ok()) return inodes.status();
  std::vector<int> tables;
  for (const char* path : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) tables.push_back(fd);
  }
  std::unique_ptr<ListenQueueProbe> probe(new ListenQueueProbe(port, *std::move(inodes), tables));
  absl::StatusOr<int64_t> first = probe->Sample();
  if (!first.ok()) return first.status();
  return probe;
}

absl::StatusOr<int64_t> ListenQueueLength(int port) {
  absl::StatusOr<std::unique_ptr<ListenQueueProbe>> probe = ListenQueueProbe::Open(port);
  if (!probe.ok()) return probe.status();
  return (*probe)->Sample();
}

ListenQueueProbe::~ListenQueueProbe() {
  for (int fd : tables_) close(fd);
}

absl::StatusOr<int64_t> ListenQueueProbe::Sample() {
  int64_t total = -1;
  for (int fd : tables_) {
    // A /proc table is made afresh by a read from its start.
    buffer_.clear();
    char chunk[16384];
    ssize_t n;
    off_t offset = 0;
    while ((n = pread(fd, chunk, sizeof(chunk), offset)) > 0) {
      buffer_.append(chunk, static_cast<size_t>(n));
      offset += n;
    }
    if (n < 0) return absl::InternalError("cannot read /proc/self/net/tcp");
    const int64_t waiting = ListenQueueInTable(buffer_, port_, inodes_);
    if (waiting >= 0) total = (total < 0 ? 0 : total) + waiting;
  }
  if (total < 0) {
    return absl::NotFoundError(
        absl::StrCat("this process has no TCP socket listening on port ", port_));
  }
  return total;
}

}  // namespace weft
