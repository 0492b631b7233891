#include "common/npy.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/dtype.h"
#include "common/file_io.h"
#include "common/status.h"

namespace weft {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// numpy's little-endian descr of each dtype npy files hold here.
struct NpyDescr {
  v1::DType dtype;
  const char* descr;
};
constexpr NpyDescr kDescrs[] = {{v1::F32, "<f4"}, {v1::I32, "<i4"}, {v1::I64, "<i8"}};

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
  ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(path));
  NpyFile f(std::move(file));
  const int64_t file_size = f.file_.size();

  unsigned char pre[12];
  if (file_size < 10) return Invalid(path, "truncated: shorter than the .npy preamble");
  RETURN_IF_ERROR(f.file_.ReadAt(0, std::min<int64_t>(12, file_size), pre));
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
  RETURN_IF_ERROR(f.file_.ReadAt(header_start, header_len, header.data()));

  std::string descr, fortran, shape_text;
  if (!FindDictValue(header, "descr", &descr) || !FindDictValue(header, "fortran_order", &fortran) ||
      !FindDictValue(header, "shape", &shape_text)) {
    return Invalid(path, absl::StrCat("malformed header: ", header));
  }
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') ||
      descr.back() != descr.front()) {
    return Invalid(path, absl::StrCat("malformed descr ", descr));
  }
  descr = descr.substr(1, descr.size() - 2);
  const NpyDescr* known = nullptr;
  for (const NpyDescr& d : kDescrs) {
    if (descr == d.descr) known = &d;
  }
  if (known == nullptr) {
    return Invalid(path, absl::StrCat("dtype '", descr,
                                      "' is not supported (float32, int32 and int64 are)"));
  }
  f.header_.dtype = known->dtype;
  const int64_t elem_size = DTypeSize(known->dtype);
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
    if (d > 0 && numel > std::numeric_limits<int64_t>::max() / elem_size / d) {
      return Invalid(path, absl::StrCat("shape ", shape_text, " too large"));
    }
    numel *= d;
    f.header_.shape.push_back(d);
  }
  f.data_offset_ = header_start + header_len;
  const int64_t want = numel * elem_size;
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

absl::StatusOr<NpyHeader> NpyFile::ReadHeader(const std::string& path) {
  ASSIGN_OR_RETURN(NpyFile f, Open(path));
  return f.header_;
}

int64_t NpyFile::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < header_.shape.size(); ++i) n *= header_.shape[i];
  return n;
}

int64_t NpyFile::row_bytes() const { return row_elements() * DTypeSize(header_.dtype); }

absl::Status NpyFile::ReadRows(int64_t first, int64_t count, void* out) const {
  if (first < 0 || count < 0 || first + count > rows()) {
    return absl::OutOfRangeError(absl::StrCat(file_.path(), ": rows [", first, ", ", first + count,
                                              ") outside the array's ", rows(), " rows"));
  }
  if (count == 0) return absl::OkStatus();
  return file_.ReadAt(data_offset_ + first * row_bytes(), static_cast<size_t>(count * row_bytes()),
                      out);
}

absl::Status NpyFile::Write(const std::string& path, const std::vector<int64_t>& shape,
                            v1::DType dtype, const void* data) {
  const NpyDescr* known = nullptr;
  for (const NpyDescr& d : kDescrs) {
    if (d.dtype == dtype) known = &d;
  }
  if (known == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("writing ", path, ": dtype ", DTypeName(dtype),
                                                   " has no .npy form (f32, i32 and i64 do)"));
  }
  std::string dict =
      absl::StrCat("{'descr': '", known->descr, "', 'fortran_order': False, 'shape': (");
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

  const size_t data_bytes = numel > 0 ? static_cast<size_t>(numel * DTypeSize(dtype)) : 0;
  return WriteFile(path,
                   {bytes, absl::string_view(static_cast<const char*>(data), data_bytes)});
}

}  // namespace weft
