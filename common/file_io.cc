#include "common/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace weft {
namespace {

// ConfineToRoots' folders: written once at start, read after.
std::vector<std::string>& Roots() {
  static auto* roots = new std::vector<std::string>();
  return *roots;
}

// The innermost root `path` lies under (by name: the kernel resolves the rest), or nullptr.
const std::string* RootOf(const std::string& path) {
  const std::string* found = nullptr;
  for (const std::string& root : Roots()) {
    if (path.size() > root.size() && absl::StartsWith(path, root) &&
        path[root.size()] == '/' && (found == nullptr || root.size() > found->size())) {
      found = &root;
    }
  }
  return found;
}

// openat2 beneath `root` of `path` (under it): the kernel refuses any resolution that leaves it.
int OpenBeneath(const std::string& root, const std::string& path, int flags, int mode) {
  const int root_fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return -1;
  std::string rel = path.substr(root.size());
  while (!rel.empty() && rel.front() == '/') rel.erase(0, 1);
  struct open_how how = {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) != 0 ? static_cast<uint64_t>(mode) : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const int fd = static_cast<int>(::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof(how)));
  const int saved = errno;
  ::close(root_fd);
  errno = saved;
  return fd;
}

// The folder holding `path` opened (O_PATH) under the confinement, and its last name: what the
// *at calls act on, so that a link swapped in for a folder on the way cannot redirect them.
struct Parent {
  int fd = -1;  // owned
  std::string name;
};
absl::StatusOr<Parent> OpenParent(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const std::string::size_type slash = p.find_last_of('/');
  Parent out;
  out.name = slash == std::string::npos ? p : p.substr(slash + 1);
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
  out.fd = OpenConfined(dir, O_PATH | O_DIRECTORY);
  if (out.fd < 0) return OpenError(dir, "cannot open folder");
  return out;
}

// Removes `name` in folder `dir_fd`, a folder's entries first; never follows a link.
absl::Status RemoveAt(int dir_fd, const std::string& name, const std::string& path) {
  if (::unlinkat(dir_fd, name.c_str(), 0) == 0 || errno == ENOENT) return absl::OkStatus();
  if (errno != EISDIR) return OpenError(path, "cannot remove");
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return OpenError(path, "cannot open folder");
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return OpenError(path, "cannot list");
  }
  absl::Cleanup close_dir = [d] { ::closedir(d); };
  std::vector<std::string> entries;
  while (struct dirent* e = ::readdir(d)) {
    const std::string entry = e->d_name;
    if (entry != "." && entry != "..") entries.push_back(entry);
  }
  for (const std::string& entry : entries) {
    RETURN_IF_ERROR(RemoveAt(::dirfd(d), entry, absl::StrCat(path, "/", entry)));
  }
  if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return OpenError(path, "cannot remove");
  }
  return absl::OkStatus();
}

}  // namespace

void ConfineToRoots(std::vector<std::string> roots) {
  std::vector<std::string>& out = Roots();
  out.clear();
  for (std::string& root : roots) {
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    if (!root.empty() && root != "/") out.push_back(std::move(root));
  }
}

int OpenConfined(const std::string& path, int flags, int mode) {
  if (const std::string* root = RootOf(path)) return OpenBeneath(*root, path, flags, mode);
  return ::open(path.c_str(), flags | O_CLOEXEC, mode);
}

absl::Status OpenError(const std::string& path, absl::string_view what) {
  const int err = errno;
  if (err == EXDEV) {
    const std::string* root = RootOf(path);
    return absl::PermissionDeniedError(absl::StrCat(
        path, ": leads outside ", root != nullptr ? *root : "its root",
        " (through a link or `..`): refused"));
  }
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(err)));
}

absl::Status MakeDirs(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const int fd = OpenConfined(p, O_PATH | O_DIRECTORY);
  if (fd >= 0) {
    ::close(fd);
    return absl::OkStatus();
  }
  if (errno != ENOENT) return OpenError(p, "cannot open folder");
  const std::string::size_type slash = p.find_last_of('/');
  if (slash != std::string::npos && slash > 0) RETURN_IF_ERROR(MakeDirs(p.substr(0, slash)));
  ASSIGN_OR_RETURN(Parent parent, OpenParent(p));
  absl::Cleanup close_parent = [&] { ::close(parent.fd); };
  if (::mkdirat(parent.fd, parent.name.c_str(), 0755) != 0 && errno != EEXIST) {
    return OpenError(p, "cannot create the folder");
  }
  return absl::OkStatus();
}

absl::Status RenamePath(const std::string& from, const std::string& to) {
  ASSIGN_OR_RETURN(Parent a, OpenParent(from));
  absl::Cleanup close_a = [&] { ::close(a.fd); };
  ASSIGN_OR_RETURN(Parent b, OpenParent(to));
  absl::Cleanup close_b = [&] { ::close(b.fd); };
  if (::renameat(a.fd, a.name.c_str(), b.fd, b.name.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("renaming ", from, " to ", to, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  const int fd = OpenConfined(path, O_PATH | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) return absl::OkStatus();
  if (fd >= 0) ::close(fd);
  ASSIGN_OR_RETURN(Parent parent, OpenParent(path));
  absl::Cleanup close_parent = [&] { ::close(parent.fd); };
  return RemoveAt(parent.fd, parent.name, path);  // *at calls take an O_PATH folder
}

absl::StatusOr<ReadOnlyFile> ReadOnlyFile::Open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it is refused below
  // like every other file that is not a regular one (reads of a regular file never block).
  int raw = OpenConfined(path, O_RDONLY | O_NONBLOCK);
  if (raw < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    if (errno == EXDEV) return OpenError(path, "cannot open");
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
  return OpenConfined(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
}

}  // namespace

absl::Status WriteFile(const std::string& path, absl::Span<const absl::string_view> chunks) {
  const int fd = CreateForWriting(path);
  if (fd < 0) return OpenError(path, "cannot create");
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
  if (fd < 0) return OpenError(tmp, "cannot create");
  return AtomicFileWriter(path, std::move(tmp), fd);
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_(std::move(other.tmp_)),
      fd_(std::exchange(other.fd_, -1)),
      committed_(std::exchange(other.committed_, true)) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) (void)RemoveTree(tmp_);
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
  RETURN_IF_ERROR(RenamePath(tmp_, path_));
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
  const int fd = OpenConfined(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return OpenError(dir, "cannot open folder");
  absl::Status s;
  if (::fsync(fd) != 0) s = Errno(dir, "fsync failed");
  ::close(fd);
  return s;
}

}  // namespace weft
