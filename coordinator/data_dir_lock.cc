#include "coordinator/data_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace weft::coordinator {

absl::StatusOr<DataDirLock> DataDirLock::Acquire(const std::string& data_dir) {
  const std::string path = data_dir + "/weft.lock";
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("--data_dir ", data_dir, ": cannot open ", path, ": ",
                                            std::strerror(errno)));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) {
      return absl::InternalError(
          absl::StrCat("--data_dir ", data_dir, ": locking ", path, ": ", std::strerror(err)));
    }
    const std::string holder(absl::StripAsciiWhitespace(std::string(pid, n > 0 ? n : 0)));
    return absl::FailedPreconditionError(absl::StrCat(
        "--data_dir ", data_dir, " is in use by another weft-coordinator",
        holder.empty() ? "" : absl::StrCat(" (pid ", holder, ")"),
        ": two would both write its job store; stop that one, or give this one another folder"));
  }
  // The holder's pid, for the message a second one prints (the lock holds without it).
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) == 0) (void)!pwrite(fd, pid.data(), pid.size(), 0);
  return DataDirLock(fd);
}

DataDirLock::DataDirLock(DataDirLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

DataDirLock::~DataDirLock() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace weft::coordinator
