#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path) {
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (raw < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::shared_ptr<const int> fd(new int(raw), [](const int* p) {
    ::close(*p);
    delete p;
  });
  struct stat st;
  if (::fstat(raw, &st) != 0) {
    return absl::InternalError(absl::StrCat(path, ": stat failed: ", std::strerror(errno)));
  }
  return ReadOnlyFile(path, std::move(fd), static_cast<int64_t>(st.st_size));
}

absl::Status ReadOnlyFile::ReadAt(int64_t offset, size_t n, void* buf) const {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(*fd_, p, n, offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(path_, ": read failed: ", std::strerror(errno)));
    }
    if (got == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": truncated: data ends early"));
    }
    p += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, absl::Span<const absl::string_view> chunks) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  absl::Status s;
  for (absl::string_view chunk : chunks) {
    const char* p = chunk.data();
    size_t n = chunk.size();
    while (s.ok() && n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        s = absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
        break;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    if (!s.ok()) break;
  }
  if (s.ok() && ::fsync(fd) != 0) {
    s = absl::InternalError(absl::StrCat(path, ": fsync failed: ", std::strerror(errno)));
  }
  if (::close(fd) != 0 && s.ok()) {
    s = absl::InternalError(absl::StrCat(path, ": close failed: ", std::strerror(errno)));
  }
  return s;
}

}  // namespace weft
