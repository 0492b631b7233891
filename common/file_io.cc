#include "common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace weft {

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it is refused below
  // like every other file that is not a regular one (reads of a regular file never block).
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
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
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, S_ISDIR(st.st_mode) ? ": is a folder, not a file" : ": not a regular file"));
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

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::Open(path));
  std::string text(static_cast<size_t>(f.size()), '\0');
  RETURN_IF_ERROR(f.ReadAt(0, text.size(), text.data()));
  return text;
}

absl::StatusOr<std::string> ReadSmallRegularFile(const std::string& path, int64_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot be read: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": more than ", max_bytes, " bytes"));
  }
  absl::StatusOr<std::string> read = ReadFileToString(path);
  // ReadOnlyFile's errors name the path and why ("<path>: cannot open: Permission denied").
  if (!read.ok()) return absl::InvalidArgumentError(read.status().message());
  return read;
}

namespace {

absl::Status Errno(const std::string& path, absl::string_view what) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

// Writes all of bytes to fd; errors name `path`.
absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  const char* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno(path, "write failed");
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

int CreateForWriting(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
}

}  // namespace

absl::Status WriteFile(const std::string& path, absl::Span<const absl::string_view> chunks) {
  const int fd = CreateForWriting(path);
  if (fd < 0) return Errno(path, "cannot create");
  absl::Status s;
  for (absl::string_view chunk : chunks) {
    s = WriteAll(fd, chunk, path);
    if (!s.ok()) break;
  }
  if (s.ok() && ::fsync(fd) != 0) s = Errno(path, "fsync failed");
  if (::close(fd) != 0 && s.ok()) s = Errno(path, "close failed");
  return s;
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::Create(const std::string& path) {
  std::string tmp = absl::StrCat(path, ".tmp-", ::getpid());
  const int fd = CreateForWriting(tmp);
  if (fd < 0) return Errno(tmp, "cannot create");
  return AtomicFileWriter(path, std::move(tmp), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_(std::move(other.tmp_)),
      fd_(std::exchange(other.fd_, -1)),
      committed_(std::exchange(other.committed_, true)) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

absl::Status AtomicFileWriter::Append(absl::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(tmp_, ": already closed"));
  return WriteAll(fd_, bytes, tmp_);
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(tmp_, ": already closed"));
  if (::fsync(fd_) != 0) return Errno(tmp_, "fsync failed");
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return Errno(tmp_, "close failed");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("renaming ", tmp_, " to ", path_, ": ", std::strerror(errno)));
  }
  committed_ = true;
  const std::string::size_type slash = path_.find_last_of('/');
  return FsyncDir(slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash));
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> chunks) {
  ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Create(path));
  for (absl::string_view chunk : chunks) RETURN_IF_ERROR(out.Append(chunk));
  return out.Commit();
}

absl::Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno(dir, "cannot open folder");
  absl::Status s;
  if (::fsync(fd) != 0) s = Errno(dir, "fsync failed");
  ::close(fd);
  return s;
}

}  // namespace weft
