// Whole-file I/O on POSIX descriptors for the formats Weft reads and writes (npy, safetensors,
// later checkpoints). Errors name the file: "<path>: no such file", "<path>: truncated: data ends
// early".
#ifndef WEFT_COMMON_FILE_IO_H_
#define WEFT_COMMON_FILE_IO_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace weft {

// Confinement (a daemon's --data_root and --checkpoint_root, resolved): once set, every path
// under one of the roots that file_io opens, creates, renames or removes is resolved by the
// kernel beneath that root (openat2 with RESOLVE_BENEATH), whatever its folders have become since
// the job's paths were checked: a link or `..` swapped in that leads out fails with
// PERMISSION_DENIED "<path>: leads outside <root> (through a link or `..`)", and nothing is read,
// written or removed there. A link beneath the root is followed only when it is relative and
// stays inside (the job's paths are stored resolved; Weft writes no link). Paths under no root
// are opened as they are. Set once at start, before any thread opens a file.
//
// E.g.
//   ConfineToRoots({roots.data, roots.checkpoint});   // empty roots are ignored
void ConfineToRoots(std::vector<std::string> roots);

// open(2) of `path` under the confinement above: a descriptor, or -1 with errno set (EXDEV: it
// leads outside its root). O_CLOEXEC is added.
int OpenConfined(const std::string& path, int flags, int mode = 0);

// A status for the errno an OpenConfined of `path` failed with (`what`: "cannot open", ...):
// PERMISSION_DENIED "<path>: leads outside <root> ..." for EXDEV, else INTERNAL "<path>: <what>:
// <strerror>".
absl::Status OpenError(const std::string& path, absl::string_view what);

// mkdir -p, each folder made beneath its root when confined. INTERNAL naming the path.
absl::Status MakeDirs(const std::string& path);

// rename(2), both names resolved beneath their root when confined.
absl::Status RenamePath(const std::string& from, const std::string& to);

// Removes `path` and, for a folder, everything in it, never following a link (a link is removed,
// not what it names). Absent is fine. Confined like the rest.
absl::Status RemoveTree(const std::string& path);

// A file opened read-only for positioned reads (pread), so copies can read concurrently without
// a shared cursor. Copies share the descriptor, which closes with the last copy. The size is
// taken once, at Open.
//
// E.g.
//   ASSIGN_OR_RETURN(ReadOnlyFile f, ReadOnlyFile::Open("inputs.npy"));
//   unsigned char magic[6];
//   RETURN_IF_ERROR(f.ReadAt(/*offset=*/0, sizeof(magic), magic));
class ReadOnlyFile {
 public:
  // NOT_FOUND "<path>: no such file" when missing; INVALID_ARGUMENT "<path>: is a folder, not a
  // file", "<path>: not a regular file" (a FIFO, a device, a socket: refused without blocking),
  // "<path>: cannot open: ..." for any other open error.
  static absl::StatusOr<ReadOnlyFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }

  // Reads exactly n bytes at offset into buf. A file that ends first is INVALID_ARGUMENT
  // "<path>: truncated: data ends early".
  absl::Status ReadAt(int64_t offset, size_t n, void* buf) const;

 private:
  ReadOnlyFile(std::string path, std::shared_ptr<const int> fd, int64_t size)
      : path_(std::move(path)), fd_(std::move(fd)), size_(size) {}

  std::string path_;
  std::shared_ptr<const int> fd_;  // shared by copies; closes on the last
  int64_t size_ = 0;
};

// The whole file. Errors are ReadOnlyFile's: NOT_FOUND "<path>: no such file", ...
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// A small file whole, for credentials (a token, a certificate, a key): a regular file only (a
// FIFO would block, a device never end) of at most max_bytes. INVALID_ARGUMENT "<path>: cannot be
// read: <why>", "<path>: not a regular file", "<path>: more than N bytes" or ReadOnlyFile's
// message; no message holds the file's bytes.
absl::StatusOr<std::string> ReadSmallRegularFile(const std::string& path, int64_t max_bytes);

// Creates or truncates `path` (mode 0644) and writes the chunks in order, then fsyncs and closes
// it, so a file Weft reports written is on disk. Errors are INTERNAL naming the file and the step
// ("<path>: cannot create: ...", "write failed", "fsync failed", "close failed").
//
// E.g.
//   RETURN_IF_ERROR(WriteFile("x.npy", {header, absl::string_view(data, bytes)}));
absl::Status WriteFile(const std::string& path, absl::Span<const absl::string_view> chunks);

// A file written front to back under a temporary name beside its path (<path>.tmp-<pid>) and
// renamed onto the path by Commit, so a reader sees the whole file or none of it (the previous
// version, if any). Streams: nothing is buffered. Removed unless committed. Errors are as
// WriteFile's, naming the temporary file; a failed rename is "renaming <tmp> to <path>: ...".
//
// E.g.
//   ASSIGN_OR_RETURN(AtomicFileWriter out, AtomicFileWriter::Create("model.safetensors"));
//   RETURN_IF_ERROR(out.Append(header));
//   for (...) RETURN_IF_ERROR(out.Append(tensor_bytes));
//   RETURN_IF_ERROR(out.Commit());
class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> Create(const std::string& path);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();  // closes and removes the temporary file unless committed

  absl::Status Append(absl::string_view bytes);
  // fsync, close, rename onto the path, fsync its folder. At most once.
  absl::Status Commit();

 private:
  AtomicFileWriter(std::string path, std::string tmp, int fd)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}

  std::string path_;
  std::string tmp_;
  int fd_ = -1;  // owned; -1 once closed
  bool committed_ = false;
};

// Writes the chunks to `path` through AtomicFileWriter: the file, small or rewritten in place
// (a pointer file, a port file), is replaced whole or not at all.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> chunks);

// fsyncs a folder, so that entries created or renamed in it are on disk. Errors are INTERNAL
// "<dir>: cannot open folder: ..." or "<dir>: fsync failed: ...".
absl::Status FsyncDir(const std::string& dir);

}  // namespace weft

#endif  // WEFT_COMMON_FILE_IO_H_
