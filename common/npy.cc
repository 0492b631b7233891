#include "common/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status.h"

namespace weft {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Reads exactly n bytes at offset, failing on a short read.
absl::Status PreadAll(int fd, void* buf, size_t n, int64_t offset, const std::string& path) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, offset);
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(absl::StrCat(path, ": read failed: ", std::strerror(errno)));
    }
    if (got == 0) return Invalid(path, "truncated: data ends early");
    p += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return absl::OkStatus();
}

// Finds the value of 'key' in a Python dict literal like
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }. Returns the raw value text.
bool FindDictValue(absl::string_view dict, absl::string_view key, std::string* value) {
  const std::string quoted1 = absl::StrCat("'", key, "'");
  const std::string quoted2 = absl::StrCat("\"", key, "\"");
  size_t pos = dict.find(quoted1);
  size_t keylen = quoted1.size();
  if (pos == absl::string_view::npos) {
    pos = dict.find(quoted2);
    keylen = quoted2.size();
  }
  if (pos == absl::string_view::npos) return false;
  size_t colon = dict.find(':', pos + keylen);
  if (colon == absl::string_view::npos) return false;
  absl::string_view rest = dict.substr(colon + 1);
  rest = absl::StripLeadingAsciiWhitespace(rest);
  if (rest.empty()) return false;
  size_t end;
  if (rest[0] == '(') {
    end = rest.find(')');
    if (end == absl::string_view::npos) return false;
    ++end;
  } else if (rest[0] == '\'' || rest[0] == '"') {
    end = rest.find(rest[0], 1);
    if (end == absl::string_view::npos) return false;
    ++end;
  } else {
    end = rest.find_first_of(",}");
    if (end == absl::string_view::npos) return false;
  }
  *value = std::string(absl::StripAsciiWhitespace(rest.substr(0, end)));
  return true;
}

}  // namespace

absl::StatusOr<NpyFile> NpyFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  NpyFile f;
  f.path_ = path;
  f.fd_ = std::shared_ptr<int>(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::InternalError(absl::StrCat(path, ": stat failed: ", std::strerror(errno)));
  }
  const int64_t file_size = st.st_size;

  unsigned char pre[12];
  if (file_size < 10) return Invalid(path, "truncated: shorter than the .npy preamble");
  RETURN_IF_ERROR(PreadAll(fd, pre, std::min<int64_t>(12, file_size), 0, path));
  if (std::memcmp(pre, kMagic, kMagicLen) != 0) return Invalid(path, "not a .npy file (bad magic)");
  const int major = pre[6];
  int64_t header_len;
  int64_t header_start;
  if (major == 1) {
    header_len = pre[8] | (pre[9] << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (file_size < 12) return Invalid(path, "truncated: shorter than the .npy preamble");
    header_len = static_cast<int64_t>(pre[8]) | (static_cast<int64_t>(pre[9]) << 8) |
                 (static_cast<int64_t>(pre[10]) << 16) | (static_cast<int64_t>(pre[11]) << 24);
    header_start = 12;
  } else {
    return Invalid(path, absl::StrCat("unsupported .npy format version ", major));
  }
  if (header_start + header_len > file_size) return Invalid(path, "truncated: header ends early");
  std::string header(header_len, '\0');
  RETURN_IF_ERROR(PreadAll(fd, header.data(), header_len, header_start, path));

  std::string descr, fortran, shape_text;
  if (!FindDictValue(header, "descr", &descr) || !FindDictValue(header, "fortran_order", &fortran) ||
      !FindDictValue(header, "shape", &shape_text)) {
    return Invalid(path, absl::StrCat("malformed header: ", header));
  }
  if (descr != "'<f4'" && descr != "\"<f4\"") {
    return Invalid(path, absl::StrCat("dtype ", descr, " is not little-endian float32 '<f4'"));
  }
  if (fortran != "False") return Invalid(path, "Fortran-order arrays are not supported");
  if (shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')') {
    return Invalid(path, absl::StrCat("malformed shape ", shape_text));
  }
  int64_t numel = 1;
  for (absl::string_view part :
       absl::StrSplit(shape_text.substr(1, shape_text.size() - 2), ',', absl::SkipWhitespace())) {
    int64_t d;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d) || d < 0) {
      return Invalid(path, absl::StrCat("malformed shape ", shape_text));
    }
    if (d > 0 && numel > std::numeric_limits<int64_t>::max() / 4 / d) {
      return Invalid(path, absl::StrCat("shape ", shape_text, " too large"));
    }
    numel *= d;
    f.shape_.push_back(d);
  }
  f.data_offset_ = header_start + header_len;
  const int64_t want = numel * static_cast<int64_t>(sizeof(float));
  if (file_size - f.data_offset_ < want) {
    return Invalid(path, absl::StrCat("truncated: shape ", shape_text, " needs ", want,
                                      " data bytes, file holds ", file_size - f.data_offset_));
  }
  if (file_size - f.data_offset_ > want) {
    return Invalid(path, absl::StrCat("size mismatch: shape ", shape_text, " needs ", want,
                                      " data bytes, file holds ", file_size - f.data_offset_));
  }
  return f;
}

int64_t NpyFile::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape_.size(); ++i) n *= shape_[i];
  return n;
}

absl::Status NpyFile::ReadRows(int64_t first, int64_t count, float* out) const {
  if (first < 0 || count < 0 || first + count > rows()) {
    return absl::OutOfRangeError(absl::StrCat(path_, ": rows [", first, ", ", first + count,
                                              ") outside the array's ", rows(), " rows"));
  }
  if (count == 0) return absl::OkStatus();
  const int64_t row_bytes = row_elements() * static_cast<int64_t>(sizeof(float));
  return PreadAll(*fd_, out, static_cast<size_t>(count * row_bytes),
                  data_offset_ + first * row_bytes, path_);
}

absl::Status NpyFile::Write(const std::string& path, const std::vector<int64_t>& shape,
                            const float* data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    absl::StrAppend(&dict, shape[i], shape.size() == 1 ? "," : (i + 1 < shape.size() ? ", " : ""));
    numel *= shape[i];
  }
  absl::StrAppend(&dict, "), }");
  // Pad with spaces so that magic + 4 + header (ending in '\n') is a multiple of 64.
  const size_t unpadded = kMagicLen + 4 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');

  std::string bytes(kMagic, kMagicLen);
  bytes.push_back('\x01');
  bytes.push_back('\x00');
  bytes.push_back(static_cast<char>(dict.size() & 0xff));
  bytes.push_back(static_cast<char>((dict.size() >> 8) & 0xff));
  bytes += dict;

  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  auto write_all = [&](const char* p, size_t n) -> absl::Status {
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return absl::InternalError(absl::StrCat(path, ": write failed: ", std::strerror(errno)));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  };
  absl::Status s = write_all(bytes.data(), bytes.size());
  if (s.ok() && numel > 0) {
    s = write_all(reinterpret_cast<const char*>(data), static_cast<size_t>(numel) * sizeof(float));
  }
  if (::close(fd) != 0 && s.ok()) {
    s = absl::InternalError(absl::StrCat(path, ": close failed: ", std::strerror(errno)));
  }
  return s;
}

}  // namespace weft
