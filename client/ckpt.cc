#include "client/ckpt.h"

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/file_io.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace weft::client {
namespace {

namespace fs = std::filesystem;
using checkpoint::Chunk;
using checkpoint::CheckpointReader;
using checkpoint::TensorEntry;
using Json = nlohmann::json;

int64_t Volume(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

std::string Dims(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }

int64_t TensorBytes(const TensorEntry& e) { return Volume(e.global_shape) * DTypeSize(e.dtype); }

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The step folder's files (chunk files and index.json) with their sizes on disk; -1 when a
// file cannot be stat'ed.
std::map<std::string, int64_t> FileSizes(const CheckpointReader& reader) {
  std::map<std::string, int64_t> sizes;
  sizes["index.json"] = 0;
  for (const auto& [name, e] : reader.index().tensors) {
    for (const Chunk& c : e.chunks) sizes[c.file] = 0;
  }
  for (auto& [file, size] : sizes) {
    std::error_code ec;
    const uintmax_t n = fs::file_size(fs::path(reader.step_dir()) / file, ec);
    size = ec ? -1 : static_cast<int64_t>(n);
  }
  return sizes;
}

}  // namespace

std::string FormatCheckpointText(const CheckpointReader& reader) {
  const checkpoint::Index& index = reader.index();
  std::string out;
  int64_t tensor_bytes = 0, chunks = 0;
  for (const auto& [name, e] : index.tensors) {
    tensor_bytes += TensorBytes(e);
    chunks += static_cast<int64_t>(e.chunks.size());
  }
  absl::StrAppend(&out, "checkpoint ", reader.step_dir(), ": step ", index.step,
                  ", format version ", index.format_version, ", ", index.tensors.size(),
                  " tensor(s), ", chunks, " chunk(s)\n");
  if (!index.metadata.empty()) {
    std::vector<std::string> kv;
    for (const auto& [k, v] : index.metadata) kv.push_back(absl::StrCat(k, "=", v));
    absl::StrAppend(&out, "metadata: ", absl::StrJoin(kv, " "), "\n");
  }
  for (const auto& [name, e] : index.tensors) {
    absl::StrAppend(&out, "\n", name, "  ", SafetensorsDTypeName(e.dtype), " ",
                    Dims(e.global_shape), "  ", TensorBytes(e), " bytes, ", e.chunks.size(),
                    " chunk(s)\n");
    for (const Chunk& c : e.chunks) {
      absl::StrAppend(&out, "  offsets ", Dims(c.offsets), " lengths ", Dims(c.lengths), "  ",
                      c.file, " bytes [", c.begin, ",", c.end, ") (", c.end - c.begin, " B)",
                      absl::StrFormat(" crc32c 0x%08x", c.crc32c), "\n");
    }
  }
  absl::StrAppend(&out, "\nfiles:\n");
  int64_t file_bytes = 0;
  for (const auto& [file, size] : FileSizes(reader)) {
    absl::StrAppend(&out, "  ", file, "  ", size < 0 ? std::string("missing") : absl::StrCat(size, " bytes"), "\n");
    if (size > 0) file_bytes += size;
  }
  absl::StrAppend(&out, "total: ", tensor_bytes, " bytes of tensors, ", file_bytes,
                  " bytes on disk\n");
  return out;
}

std::string FormatCheckpointJson(const CheckpointReader& reader) {
  const checkpoint::Index& index = reader.index();
  Json j = Json::object();
  j["step_dir"] = reader.step_dir();
  j["step"] = index.step;
  j["format_version"] = index.format_version;
  j["metadata"] = Json::object();
  for (const auto& [k, v] : index.metadata) j["metadata"][k] = v;
  j["tensors"] = Json::array();
  int64_t tensor_bytes = 0;
  for (const auto& [name, e] : index.tensors) {
    Json t = {{"name", name}, {"dtype", std::string(SafetensorsDTypeName(e.dtype))},
              {"shape", e.global_shape}, {"bytes", TensorBytes(e)}, {"chunks", Json::array()}};
    tensor_bytes += TensorBytes(e);
    for (const Chunk& c : e.chunks) {
      t["chunks"].push_back({{"offsets", c.offsets}, {"lengths", c.lengths}, {"file", c.file},
                             {"byte_range", {c.begin, c.end}}, {"bytes", c.end - c.begin},
                             {"crc32c", c.crc32c}});
    }
    j["tensors"].push_back(std::move(t));
  }
  j["files"] = Json::array();
  int64_t file_bytes = 0;
  for (const auto& [file, size] : FileSizes(reader)) {
    j["files"].push_back({{"name", file}, {"bytes", size}});
    if (size > 0) file_bytes += size;
  }
  j["tensor_bytes"] = tensor_bytes;
  j["file_bytes"] = file_bytes;
  return Dump(j);
}

absl::Status ExportCheckpoint(const CheckpointReader& reader, const std::string& out_path) {
  const std::string context = absl::StrCat("exporting ", reader.step_dir(), " to ", out_path);
  const checkpoint::Index& index = reader.index();
  std::vector<SafetensorsHeaderEntry> entries;
  for (const auto& [name, e] : index.tensors) {  // name order, as safetensors writers do
    if (name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat(context, ": tensor name '__metadata__' is reserved"));
    }
    entries.push_back({name, e.global_shape, e.dtype});
  }
  const SafetensorsHeader header =
      EncodeSafetensorsHeader(entries, {{"format", "pt"}, {"weft_step", absl::StrCat(index.step)}});

  absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(out_path);
  if (!file.ok()) return Annotate(file.status(), context);
  RETURN_IF_ERROR(Annotate(file->Append(header.bytes), context));
  std::vector<char> buffer;  // one tensor as stored
  for (const auto& [name, e] : index.tensors) {
    buffer.assign(static_cast<size_t>(TensorBytes(e)), 0);
    if (buffer.empty()) continue;
    RETURN_IF_ERROR(Annotate(
        reader.ReadBox(name, std::vector<int64_t>(e.global_shape.size(), 0), e.global_shape,
                       e.dtype, buffer.data()),
        context));
    RETURN_IF_ERROR(Annotate(file->Append(absl::string_view(buffer.data(), buffer.size())), context));
  }
  return Annotate(file->Commit(), context);
}

}  // namespace weft::client
