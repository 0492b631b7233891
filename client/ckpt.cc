#include "client/ckpt.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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

// A file written front to back, removed unless Commit() renamed it into place.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path)
      : path_(std::move(path)), tmp_(absl::StrCat(path_, ".tmp-", getpid())) {}
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  absl::Status Open() {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return Error("cannot create");
    return absl::OkStatus();
  }

  absl::Status Write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        return Error("write failed");
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }

  // fsync, close, rename onto the final path, fsync the folder.
  absl::Status Commit() {
    if (::fsync(fd_) != 0) return Error("fsync failed");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return Error("close failed");
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) return Error("rename failed");
    committed_ = true;
    std::string folder = fs::path(path_).parent_path().string();
    if (folder.empty()) folder = ".";
    const int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InternalError(absl::StrCat(tmp_, ": ", what, ": ", std::strerror(errno)));
  }

  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

absl::StatusOr<std::string> ResolveCheckpoint(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "index.json", ec)) return dir;
  return checkpoint::FindLatestReadOnly(dir);
}

std::string FormatCheckpointText(const CheckpointReader& reader) {
  const checkpoint::Index& index = reader.index();
  std::string out;
  int64_t tensor_bytes = 0, chunks = 0;
  for (const auto& [name, e] : index.tensors) {
    tensor_bytes += Volume(e.global_shape) * 4;
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
    absl::StrAppend(&out, "\n", name, "  ", e.dtype, " ", Dims(e.global_shape), "  ",
                    Volume(e.global_shape) * 4, " bytes, ", e.chunks.size(), " chunk(s)\n");
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
    Json t = {{"name", name}, {"dtype", e.dtype}, {"shape", e.global_shape},
              {"bytes", Volume(e.global_shape) * 4}, {"chunks", Json::array()}};
    tensor_bytes += Volume(e.global_shape) * 4;
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

std::vector<absl::Status> VerifyCheckpoint(const CheckpointReader& reader,
                                           int64_t* bytes_checked) {
  std::vector<absl::Status> problems;
  *bytes_checked = 0;
  for (const auto& [name, e] : reader.index().tensors) {
    absl::Status s = reader.CheckCoverage(name);
    if (!s.ok()) problems.push_back(s);
    for (const Chunk& c : e.chunks) {
      s = reader.VerifyChunk(name, c);
      if (s.ok()) {
        *bytes_checked += c.end - c.begin;
      } else {
        problems.push_back(s);
      }
    }
  }
  return problems;
}

absl::Status ExportCheckpoint(const CheckpointReader& reader, const std::string& out_path) {
  const std::string context = absl::StrCat("exporting ", reader.step_dir(), " to ", out_path);
  const checkpoint::Index& index = reader.index();
  Json header = Json::object();
  header["__metadata__"] = {{"format", "pt"}, {"weft_step", absl::StrCat(index.step)}};
  int64_t offset = 0;
  for (const auto& [name, e] : index.tensors) {  // name order, as safetensors writers do
    if (name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat(context, ": tensor name '__metadata__' is reserved"));
    }
    const int64_t bytes = Volume(e.global_shape) * 4;
    header[name] = {{"dtype", "F32"}, {"shape", e.global_shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = Dump(header);
  text.append((8 - text.size() % 8) % 8, ' ');
  char prefix[8];
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<char>((n >> (8 * i)) & 0xff);

  AtomicFile file(out_path);
  RETURN_IF_ERROR(Annotate(file.Open(), context));
  RETURN_IF_ERROR(Annotate(file.Write(prefix, 8), context));
  RETURN_IF_ERROR(Annotate(file.Write(text.data(), text.size()), context));
  std::vector<float> buffer;
  for (const auto& [name, e] : index.tensors) {
    buffer.assign(static_cast<size_t>(Volume(e.global_shape)), 0.0f);
    if (buffer.empty()) continue;
    RETURN_IF_ERROR(Annotate(
        reader.ReadBox(name, std::vector<int64_t>(e.global_shape.size(), 0), e.global_shape,
                       buffer.data()),
        context));
    RETURN_IF_ERROR(Annotate(file.Write(buffer.data(), buffer.size() * sizeof(float)), context));
  }
  return Annotate(file.Commit(), context);
}

}  // namespace weft::client
