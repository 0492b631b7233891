#include "common/safetensors.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/box.h"
#include "common/dtype.h"
#include "common/file_io.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace weft {
namespace {

// Same cap as the reference implementation: a larger header is taken as corruption.
constexpr uint64_t kMaxHeaderBytes = 100 << 20;

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Bytes per element of every safetensors dtype; 0 for an unknown one.
int DtypeSize(const std::string& dtype) {
  static const std::map<std::string, int>* sizes = new std::map<std::string, int>{
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},   {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2},  {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8},  {"I64", 8},     {"U64", 8}};
  auto it = sizes->find(dtype);
  return it == sizes->end() ? 0 : it->second;
}

bool AsNonNegativeInt(const nlohmann::json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = v;
    return true;
  }
  return false;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

const SafetensorsFile::Entry* SafetensorsFile::Find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::optional<std::string> SafetensorsFile::ParameterName(const std::string& name) const {
  if (Find(name) != nullptr) return name;
  std::string prefixed = absl::StrCat("transformer.", name);
  if (Find(prefixed) != nullptr) return prefixed;
  return std::nullopt;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::Open(path));
  SafetensorsFile f(std::move(file));
  const int64_t file_size = f.file_.size();
  if (file_size < 8) return Invalid(path, "truncated: shorter than the 8-byte header length");
  unsigned char len_bytes[8];
  RETURN_IF_ERROR(f.file_.ReadAt(0, 8, len_bytes));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  // The length is the file's first 8 bytes: until the header parses, nothing says this is a
  // safetensors file, so no message quotes them (of /etc/shadow they would read "root:*:1").
  if (header_len > kMaxHeaderBytes) {
    return Invalid(path, absl::StrCat("not a safetensors file: its first 8 bytes give a header "
                                      "length over the ", kMaxHeaderBytes, "-byte limit"));
  }
  if (static_cast<int64_t>(header_len) > file_size - 8) {
    return Invalid(path, absl::StrCat("truncated or not a safetensors file: its first 8 bytes "
                                      "give a header length beyond the ", file_size - 8,
                                      " bytes that follow them"));
  }
  std::string header(header_len, '\0');
  RETURN_IF_ERROR(f.file_.ReadAt(8, header_len, header.data()));
  f.data_offset_ = 8 + static_cast<int64_t>(header_len);
  const int64_t data_size = file_size - f.data_offset_;

  nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid(path, "header is not valid JSON");
  if (!j.is_object()) return Invalid(path, "header is not a JSON object");

  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return Invalid(path, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return Invalid(path, absl::StrCat("__metadata__ value of '", m.key(),
                                            "' is not a string"));
        }
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](absl::string_view what) {
      return Invalid(path, absl::StrCat("tensor '", name, "': ", what));
    };
    if (!v.is_object()) return bad("entry is not an object");
    Entry e;
    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) return bad("missing or non-string dtype");
    e.dtype = dt->get<std::string>();
    const int elem_size = DtypeSize(e.dtype);
    if (elem_size == 0) return bad(absl::StrCat("unknown dtype ", e.dtype));
    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) return bad("missing or non-array shape");
    int64_t numel = 1;
    for (const auto& d : *sh) {
      int64_t dim;
      if (!AsNonNegativeInt(d, &dim)) return bad("shape holds a non-integer or negative dim");
      if (dim > 0 && numel > std::numeric_limits<int64_t>::max() / 8 / dim) {
        return bad("shape too large");
      }
      numel *= dim;
      e.shape.push_back(dim);
    }
    auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2 ||
        !AsNonNegativeInt((*off)[0], &e.begin) || !AsNonNegativeInt((*off)[1], &e.end)) {
      return bad("data_offsets must be two non-negative integers");
    }
    if (e.begin > e.end) {
      return bad(absl::StrCat("data_offsets [", e.begin, ", ", e.end, "] are reversed"));
    }
    if (e.end > data_size) {
      return bad(absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                              "] out of range: data section holds ", data_size, " bytes"));
    }
    if (e.end - e.begin != numel * elem_size) {
      return bad(absl::StrCat("size mismatch: ", e.dtype, ShapeString(e.shape), " needs ",
                              numel * elem_size, " bytes, data_offsets span ",
                              e.end - e.begin));
    }
    ranges.push_back({{e.begin, e.end}, name});
    f.entries_.emplace(name, std::move(e));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first.first < ranges[i - 1].first.second) {
      return Invalid(path, absl::StrCat("tensors '", ranges[i - 1].second, "' and '",
                                        ranges[i].second, "' overlap"));
    }
  }
  return f;
}

absl::StatusOr<v1::DType> SafetensorsFile::DTypeOf(const std::string& name) const {
  const Entry* e = Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(absl::StrCat(file_.path(), ": no tensor '", name, "'"));
  }
  absl::StatusOr<v1::DType> dtype = DTypeFromSafetensors(e->dtype);
  if (!dtype.ok()) {
    return Annotate(dtype.status(), absl::StrCat(file_.path(), ": tensor '", name, "'"));
  }
  return *dtype;
}

absl::Status SafetensorsFile::ReadBox(const std::string& name, const std::vector<int64_t>& offsets,
                                      const std::vector<int64_t>& lengths, v1::DType dtype,
                                      void* out, const std::vector<int64_t>& view) const {
  ASSIGN_OR_RETURN(const v1::DType stored, DTypeOf(name));  // NOT_FOUND for no such tensor
  const Entry* e = Find(name);
  if (!ReadableAs(stored, dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        file_.path(), ": tensor '", name, "' has dtype ", SafetensorsDTypeName(stored),
        ", the destination is ", SafetensorsDTypeName(dtype),
        ": only floating dtypes convert on read (F32 <-> BF16)"));
  }
  if (!view.empty() && Elements(view) != Elements(e->shape)) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_.path(), ": tensor '", name, "' has shape ", ShapeString(e->shape),
                     ", which cannot be seen as ", ShapeString(view)));
  }
  const std::vector<int64_t>& shape = view.empty() ? e->shape : view;
  const size_t rank = shape.size();
  if (offsets.size() != rank || lengths.size() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_.path(), ": tensor '", name, "' has shape ", ShapeString(shape),
                     ", box has rank ", offsets.size(), "/", lengths.size()));
  }
  for (size_t d = 0; d < rank; ++d) {
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] + lengths[d] > shape[d]) {
      return absl::OutOfRangeError(absl::StrCat(
          file_.path(), ": tensor '", name, "' of shape ", ShapeString(shape),
          ": box offsets ", ShapeString(offsets), " lengths ", ShapeString(lengths),
          " out of range"));
    }
  }
  const int64_t base = data_offset_ + e->begin;
  const int64_t stored_size = DTypeSize(stored);
  const int64_t out_size = DTypeSize(dtype);
  char* out_bytes = static_cast<char*>(out);
  std::vector<char> scratch;  // a run as stored, when it is converted
  return ForEachBoxRun(
      shape, offsets, lengths, [&](int64_t src, int64_t dst, int64_t n) -> absl::Status {
        const size_t bytes = static_cast<size_t>(n * stored_size);
        char* to = out_bytes + dst * out_size;
        char* read_into = stored == dtype ? to : nullptr;
        if (read_into == nullptr) {
          scratch.resize(bytes);
          read_into = scratch.data();
        }
        RETURN_IF_ERROR(Annotate(file_.ReadAt(base + src * stored_size, bytes, read_into),
                                 absl::StrCat("reading tensor '", name, "'")));
        if (stored != dtype) ConvertElements(read_into, stored, to, dtype, n);
        return absl::OkStatus();
      });
}

absl::Status SafetensorsFile::Write(const std::string& path,
                                    const std::vector<TensorToWrite>& tensors,
                                    const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorToWrite* a, const TensorToWrite* b) { return a->name < b->name; });
  std::vector<SafetensorsHeaderEntry> entries;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const TensorToWrite& t = *sorted[i];
    if (i > 0 && t.name == sorted[i - 1]->name) {
      return absl::InvalidArgumentError(
          absl::StrCat("writing ", path, ": tensor '", t.name, "' given twice"));
    }
    if (t.name == "__metadata__") {
      return absl::InvalidArgumentError(
          absl::StrCat("writing ", path, ": '__metadata__' is reserved"));
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("writing ", path, ": tensor '", t.name,
                                                       "' has a negative dim"));
      }
    }
    entries.push_back({t.name, t.shape, t.dtype});
  }
  const SafetensorsHeader header = EncodeSafetensorsHeader(entries, metadata);

  std::vector<absl::string_view> chunks = {header.bytes};
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& [begin, end] = header.ranges[i];
    chunks.emplace_back(static_cast<const char*>(sorted[i]->data),
                        static_cast<size_t>(end - begin));
  }
  absl::Status s = WriteFile(path, chunks);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat("writing ", s.message()));
  return s;
}

SafetensorsHeader EncodeSafetensorsHeader(const std::vector<SafetensorsHeaderEntry>& tensors,
                                          const std::map<std::string, std::string>& metadata) {
  nlohmann::json json = nlohmann::json::object();
  if (!metadata.empty()) {
    nlohmann::json m = nlohmann::json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    json["__metadata__"] = m;
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;  // in the data section
  int64_t offset = 0;
  for (const SafetensorsHeaderEntry& t : tensors) {
    const int64_t bytes = Elements(t.shape) * DTypeSize(t.dtype);
    nlohmann::json entry = nlohmann::json::object();
    entry["dtype"] = std::string(SafetensorsDTypeName(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + bytes};
    json[t.name] = entry;
    ranges.push_back({offset, offset + bytes});
    offset += bytes;
  }
  // Invalid UTF-8 is replaced rather than thrown on (checkpoint names are checked before).
  std::string text = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');
  SafetensorsHeader header;
  const uint64_t n = text.size();
  header.bytes.resize(8);
  for (int i = 0; i < 8; ++i) header.bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  header.bytes += text;
  const int64_t data_start = static_cast<int64_t>(header.bytes.size());
  for (auto& [begin, end] : ranges) header.ranges.push_back({data_start + begin, data_start + end});
  return header;
}

}  // namespace weft
