#include "common/checkpoint/index.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint/box_geometry.h"
#include "common/checkpoint/crc32c.h"
#include "common/dtype.h"
#include "common/utf8.h"
#include "nlohmann/json.hpp"

namespace weft::checkpoint {
namespace internal {
namespace {

// A chunk file is a plain name inside the step folder.
bool PlainFileName(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f != kIndexFile;
}

}  // namespace

std::string Hex(uint32_t v) { return absl::StrFormat("0x%08x", v); }

absl::Status CheckTensorName(const std::string& name) {
  if (name.empty()) return absl::InvalidArgumentError("a tensor has an empty name");
  if (!IsValidUtf8(name)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor name '", name, "' is not UTF-8"));
  }
  if (name == "__metadata__") {
    return absl::InvalidArgumentError("tensor name '__metadata__' is reserved by safetensors");
  }
  return absl::OkStatus();
}

absl::Status CheckShape(const std::vector<int64_t>& shape) {
  for (int64_t d : shape) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("shape ", Dims(shape), " has a negative dim"));
  }
  if (Volume(shape) > std::numeric_limits<int64_t>::max() / 8) {
    return absl::InvalidArgumentError(absl::StrCat("shape ", Dims(shape), " is too large"));
  }
  return absl::OkStatus();
}

absl::Status CheckDType(v1::DType dtype) {
  if (v1::DType_IsValid(dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype ", static_cast<int>(dtype), " (F32, BF16, I32 and I64 are)"));
}

absl::Status CheckChunk(const std::vector<int64_t>& shape, v1::DType dtype, const Chunk& c) {
  if (c.offsets.size() != shape.size() || c.lengths.size() != shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk offsets ", Dims(c.offsets), " lengths ", Dims(c.lengths), " do not match rank ",
        shape.size(), " of shape ", Dims(shape)));
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (c.offsets[d] < 0 || c.lengths[d] < 0 || c.offsets[d] > shape[d] ||
        c.lengths[d] > shape[d] - c.offsets[d]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "chunk ", ChunkRegion(c), " lies outside shape ", Dims(shape)));
    }
  }
  if (!PlainFileName(c.file)) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk ", ChunkRegion(c), ": file '", c.file, "' is not a plain file name"));
  }
  if (c.begin < 0 || c.end < c.begin || c.end - c.begin != Volume(c.lengths) * DTypeSize(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk ", ChunkRegion(c), " in ", c.file, ": byte range [", c.begin, ",", c.end,
        ") does not hold ", Volume(c.lengths), " ", SafetensorsDTypeName(dtype), " elements"));
  }
  return absl::OkStatus();
}

absl::Status CheckNoOverlap(const TensorEntry& e) {
  std::vector<int64_t> off, len;
  for (size_t i = 0; i < e.chunks.size(); ++i) {
    for (size_t j = i + 1; j < e.chunks.size(); ++j) {
      const Chunk& a = e.chunks[i];
      const Chunk& b = e.chunks[j];
      if (Intersect(a.offsets, a.lengths, b.offsets, b.lengths, &off, &len)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunks ", ChunkRegion(a), " in ", a.file, " and ", ChunkRegion(b), " in ", b.file,
            " overlap on ", Region(off, len)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace internal

namespace {

using Json = nlohmann::json;
using internal::CheckChunk;
using internal::CheckNoOverlap;
using internal::CheckShape;
using internal::Hex;

Json ChunkJson(const Chunk& c) {
  Json j = Json::object();
  j["offsets"] = c.offsets;
  j["lengths"] = c.lengths;
  j["file"] = c.file;
  j["byte_range"] = {c.begin, c.end};
  j["crc32c"] = c.crc32c;
  return j;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

bool AsInt(const Json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    *out = j.get<int64_t>();
    return true;
  }
  return false;
}

bool AsIntVector(const Json& j, std::vector<int64_t>* out) {
  if (!j.is_array()) return false;
  out->clear();
  for (const Json& x : j) {
    int64_t v;
    if (!AsInt(x, &v)) return false;
    out->push_back(v);
  }
  return true;
}

bool AsCrc(const Json& j, uint32_t* out) {
  int64_t v;
  if (!AsInt(j, &v) || v < 0 || v > 0xffffffffll) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

std::string SerializeIndex(const Index& index) {
  Json body = Json::object();
  body["format_version"] = index.format_version;
  body["step"] = index.step;
  body["metadata"] = Json::object();
  for (const auto& [k, v] : index.metadata) body["metadata"][k] = v;
  body["tensors"] = Json::object();
  for (const auto& [name, e] : index.tensors) {
    Json t = Json::object();
    t["dtype"] = std::string(SafetensorsDTypeName(e.dtype));
    t["shape"] = e.global_shape;
    t["chunks"] = Json::array();
    for (const Chunk& c : e.chunks) t["chunks"].push_back(ChunkJson(c));
    body["tensors"][name] = t;
  }
  const uint32_t checksum = [&] {
    const std::string canonical = Dump(body);
    return Crc32c(canonical.data(), canonical.size());
  }();

  // Laid out one chunk per line for people; the checksum does not depend on the layout.
  std::string out = "{\n";
  absl::StrAppend(&out, "  \"format_version\": ", index.format_version, ",\n");
  absl::StrAppend(&out, "  \"step\": ", index.step, ",\n");
  absl::StrAppend(&out, "  \"metadata\": ", Dump(body["metadata"]), ",\n");
  absl::StrAppend(&out, "  \"tensors\": {");
  bool first = true;
  for (const auto& [name, t] : body["tensors"].items()) {
    absl::StrAppend(&out, first ? "" : ",", "\n    ", Dump(Json(name)), ": {\"dtype\": ",
                    Dump(t["dtype"]), ", \"shape\": ", Dump(t["shape"]), ", \"chunks\": [");
    bool first_chunk = true;
    for (const Json& c : t["chunks"]) {
      absl::StrAppend(&out, first_chunk ? "" : ",", "\n      ", Dump(c));
      first_chunk = false;
    }
    absl::StrAppend(&out, "]}");
    first = false;
  }
  absl::StrAppend(&out, "\n  },\n  \"checksum\": ", checksum, "\n}\n");
  return out;
}

absl::StatusOr<Index> ParseIndex(const std::string& text, const std::string& path) {
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("damaged index: not valid JSON");
  if (!j.is_object()) return bad("damaged index: not a JSON object");
  auto sum = j.find("checksum");
  uint32_t stored = 0;
  if (sum == j.end() || !AsCrc(*sum, &stored)) return bad("damaged index: no checksum");
  j.erase("checksum");
  const std::string canonical = Dump(j);
  const uint32_t computed = Crc32c(canonical.data(), canonical.size());
  if (computed != stored) {
    return bad(absl::StrCat("damaged index: checksum mismatch (stored ", Hex(stored),
                            ", computed ", Hex(computed), ")"));
  }

  Index index;
  int64_t v;
  auto version = j.find("format_version");
  if (version == j.end() || !AsInt(*version, &v)) return bad("no format_version");
  if (v != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": unsupported format version ", v, " (this Weft reads version ", kFormatVersion, ")"));
  }
  index.format_version = static_cast<int>(v);
  auto step = j.find("step");
  if (step == j.end() || !AsInt(*step, &index.step) || index.step < 0) return bad("no valid step");
  auto meta = j.find("metadata");
  if (meta != j.end()) {
    if (!meta->is_object()) return bad("metadata is not an object");
    for (auto it = meta->begin(); it != meta->end(); ++it) {
      if (!it->is_string()) return bad(absl::StrCat("metadata '", it.key(), "' is not a string"));
      index.metadata[it.key()] = it->get<std::string>();
    }
  }
  auto tensors = j.find("tensors");
  if (tensors == j.end() || !tensors->is_object()) return bad("no tensors object");
  for (auto it = tensors->begin(); it != tensors->end(); ++it) {
    const std::string& name = it.key();
    auto tbad = [&](absl::string_view what) { return bad(absl::StrCat("tensor '", name, "': ", what)); };
    const Json& t = it.value();
    if (!t.is_object()) return tbad("not an object");
    TensorEntry e;
    // Indexes written before tensors were typed have no dtype: all of them are F32.
    auto dtype = t.find("dtype");
    if (dtype != t.end()) {
      if (!dtype->is_string()) return tbad("dtype is not a string");
      absl::StatusOr<v1::DType> parsed = DTypeFromSafetensors(dtype->get<std::string>());
      if (!parsed.ok()) return tbad(parsed.status().message());
      e.dtype = *parsed;
    }
    auto shape = t.find("shape");
    if (shape == t.end() || !AsIntVector(*shape, &e.global_shape)) return tbad("no shape");
    absl::Status s = CheckShape(e.global_shape);
    if (!s.ok()) return tbad(s.message());
    auto chunks = t.find("chunks");
    if (chunks == t.end() || !chunks->is_array()) return tbad("no chunks");
    for (const Json& cj : *chunks) {
      Chunk c;
      auto f = cj.is_object() ? cj.find("file") : cj.end();
      auto r = cj.is_object() ? cj.find("byte_range") : cj.end();
      std::vector<int64_t> range;
      if (!cj.is_object() || !cj.contains("offsets") || !AsIntVector(cj["offsets"], &c.offsets) ||
          !cj.contains("lengths") || !AsIntVector(cj["lengths"], &c.lengths) || f == cj.end() ||
          !f->is_string() || r == cj.end() || !AsIntVector(*r, &range) || range.size() != 2 ||
          !cj.contains("crc32c") || !AsCrc(cj["crc32c"], &c.crc32c)) {
        return tbad(absl::StrCat("chunk ", e.chunks.size(),
                                 " needs offsets, lengths, file, byte_range [begin,end], crc32c"));
      }
      c.file = f->get<std::string>();
      c.begin = range[0];
      c.end = range[1];
      s = CheckChunk(e.global_shape, e.dtype, c);
      if (!s.ok()) return tbad(s.message());
      e.chunks.push_back(std::move(c));
    }
    s = CheckNoOverlap(e);
    if (!s.ok()) return tbad(s.message());
    index.tensors.emplace(name, std::move(e));
  }
  return index;
}

}  // namespace weft::checkpoint
