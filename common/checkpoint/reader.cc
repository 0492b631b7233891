#include "common/checkpoint/reader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/box_geometry.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/directory.h"
#include "common/checkpoint/shard.h"
#include "common/dtype.h"
#include "common/safetensors.h"
#include "common/status.h"

namespace weft::checkpoint {
namespace {

using internal::CheckCovers;
using internal::CheckShardEntry;
using internal::ChunkRegion;
using internal::CopyRegion;
using internal::Dims;
using internal::Hex;
using internal::Intersect;
using internal::LoadIndex;
using internal::MissingRegionError;
using internal::Region;
using internal::Volume;

// A chunk is verified in blocks of this size, so verifying needs no chunk-sized buffer.
constexpr int64_t kVerifyBlockBytes = 16 << 20;

}  // namespace

absl::StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& step_dir) {
  CheckpointReader r;
  r.step_dir_ = step_dir;
  ASSIGN_OR_RETURN(r.index_, LoadIndex(step_dir));
  // The chunks of each file, tensor by tensor.
  std::map<std::string, std::vector<std::pair<const std::string*, const Chunk*>>> by_file;
  for (const auto& [name, e] : r.index_.tensors) {
    for (const Chunk& c : e.chunks) by_file[c.file].push_back({&name, &c});
  }
  // Each file once, long enough for the chunk that reaches furthest into it.
  for (const auto& [file, in_file] : by_file) {
    const auto& [name, last] = *std::max_element(
        in_file.begin(), in_file.end(),
        [](const auto& a, const auto& b) { return a.second->end < b.second->end; });
    const std::string path = absl::StrCat(step_dir, "/", file);
    const std::string what = absl::StrCat("tensor '", *name, "'");
    absl::StatusOr<ReadOnlyFile> f = ReadOnlyFile::Open(path);
    if (!f.ok()) return Annotate(f.status(), absl::StrCat("loading ", what, " from ", path));
    if (f->size() < last->end) {
      return absl::DataLossError(absl::StrCat(
          "loading ", what, " from ", path, ": truncated: the file holds ", f->size(),
          " bytes, chunk ", ChunkRegion(*last), " ends at byte ", last->end));
    }
    r.files_.emplace(file, *std::move(f));
  }
  // The shards' own headers agree with the index on every chunk, so that a chunk is never read
  // as another dtype than it was written in.
  for (const auto& [file, in_file] : by_file) {
    const std::string path = absl::StrCat(step_dir, "/", file);
    absl::StatusOr<SafetensorsFile> shard = SafetensorsFile::Open(path);
    if (!shard.ok()) {
      return absl::DataLossError(absl::StrCat("loading tensor '", *in_file.front().first, "': ",
                                              shard.status().message()));
    }
    for (const auto& [name, c] : in_file) {
      RETURN_IF_ERROR(
          Annotate(CheckShardEntry(*shard, *name, r.index_.tensors.at(*name).dtype, *c),
                   absl::StrCat("loading tensor '", *name, "' from ", path)));
    }
  }
  return r;
}

absl::StatusOr<const TensorEntry*> CheckpointReader::FindTensor(const std::string& name) const {
  auto it = index_.tensors.find(name);
  if (it == index_.tensors.end()) {
    return absl::NotFoundError(absl::StrCat(step_dir_, ": no tensor '", name, "' in the checkpoint"));
  }
  return &it->second;
}

std::string CheckpointReader::ChunkContext(const std::string& name, const Chunk& chunk) const {
  return absl::StrCat("loading tensor '", name, "' from ", step_dir_, "/", chunk.file, ": chunk ",
                      ChunkRegion(chunk));
}

absl::StatusOr<const ReadOnlyFile*> CheckpointReader::ChunkFile(const Chunk& chunk,
                                                                const std::string& context) const {
  auto f = files_.find(chunk.file);
  if (f == files_.end()) return absl::InternalError(absl::StrCat(context, ": file not open"));
  return &f->second;
}

absl::Status CheckpointReader::CheckCrc(const Chunk& chunk, uint32_t crc,
                                        const std::string& context) {
  if (crc == chunk.crc32c) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(context, " (bytes [", chunk.begin, ",", chunk.end,
                                          ")): checksum mismatch (index ", Hex(chunk.crc32c),
                                          ", data ", Hex(crc), ")"));
}

absl::Status CheckpointReader::VerifyChunk(const std::string& name, const Chunk& chunk) const {
  const std::string context = ChunkContext(name, chunk);
  ASSIGN_OR_RETURN(const ReadOnlyFile* f, ChunkFile(chunk, context));
  std::vector<char> block(static_cast<size_t>(std::min(kVerifyBlockBytes, chunk.end - chunk.begin)));
  uint32_t crc = 0;
  for (int64_t at = chunk.begin; at < chunk.end;) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(block.size(), chunk.end - at));
    RETURN_IF_ERROR(Annotate(f->ReadAt(at, n, block.data()), context));
    crc = Crc32c(block.data(), n, crc);
    at += static_cast<int64_t>(n);
  }
  return CheckCrc(chunk, crc, context);
}

absl::Status CheckpointReader::CheckCoverage(const std::string& name) const {
  ASSIGN_OR_RETURN(const TensorEntry* e, FindTensor(name));
  return CheckCovers(absl::StrCat(step_dir_, ": "), name, *e);
}

std::vector<absl::Status> CheckpointReader::VerifyEach(int64_t* bytes_checked) const {
  std::vector<absl::Status> problems;
  int64_t bytes = 0;
  for (const auto& [name, e] : index_.tensors) {
    absl::Status s = CheckCoverage(name);
    if (!s.ok()) problems.push_back(s);
    for (const Chunk& c : e.chunks) {
      s = VerifyChunk(name, c);
      if (s.ok()) {
        bytes += c.end - c.begin;
      } else {
        problems.push_back(s);
      }
    }
  }
  if (bytes_checked != nullptr) *bytes_checked = bytes;
  return problems;
}

absl::Status CheckpointReader::VerifyAll() const {
  const std::vector<absl::Status> problems = VerifyEach();
  return problems.empty() ? absl::OkStatus() : problems.front();
}

absl::Status CheckpointReader::ReadBox(const std::string& name,
                                       const std::vector<int64_t>& offsets,
                                       const std::vector<int64_t>& lengths, v1::DType dtype,
                                       void* out) const {
  ASSIGN_OR_RETURN(const TensorEntry* entry, FindTensor(name));
  const TensorEntry& e = *entry;
  if (!ReadableAs(e.dtype, dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loading tensor '", name, "' from ", step_dir_, ": the checkpoint holds ",
        SafetensorsDTypeName(e.dtype), ", the destination is ", SafetensorsDTypeName(dtype),
        ": only floating dtypes convert on read (F32 <-> BF16)"));
  }
  const size_t rank = e.global_shape.size();
  if (offsets.size() != rank || lengths.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loading tensor '", name, "' from ", step_dir_, ": shape mismatch: saved shape ",
        Dims(e.global_shape), ", box offsets ", Dims(offsets), " lengths ", Dims(lengths)));
  }
  for (size_t d = 0; d < rank; ++d) {
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] + lengths[d] > e.global_shape[d]) {
      return absl::OutOfRangeError(absl::StrCat(
          "loading tensor '", name, "' from ", step_dir_, ": box ", Region(offsets, lengths),
          " lies outside the saved shape ", Dims(e.global_shape)));
    }
  }
  const int64_t box_volume = Volume(lengths);
  if (box_volume == 0) return absl::OkStatus();

  // Row-major strides of the box in `out`.
  std::vector<int64_t> out_strides(rank, 1);
  for (int d = static_cast<int>(rank) - 2; d >= 0; --d) out_strides[d] = out_strides[d + 1] * lengths[d + 1];

  int64_t covered = 0;
  std::vector<int64_t> ioff, ilen;
  std::vector<char> buffer;  // a chunk as stored, when it is not read straight into out
  for (const Chunk& c : e.chunks) {
    if (!Intersect(offsets, lengths, c.offsets, c.lengths, &ioff, &ilen)) continue;
    covered += Volume(ilen);
    // A chunk inside the box whose elements are contiguous in `out` is read straight there
    // when it needs no conversion: dims before the first of length > 1 have length 1, later
    // dims span the whole box.
    bool direct = e.dtype == dtype && ilen == c.lengths;
    size_t first = 0;
    while (first < rank && c.lengths[first] == 1) ++first;
    for (size_t d = first + 1; direct && d < rank; ++d) direct = c.lengths[d] == lengths[d];
    int64_t start = 0;
    for (size_t d = 0; d < rank; ++d) start += (ioff[d] - offsets[d]) * out_strides[d];
    char* dst = direct ? static_cast<char*>(out) + start * DTypeSize(dtype) : nullptr;
    if (!direct) {
      buffer.resize(static_cast<size_t>(c.end - c.begin));
      dst = buffer.data();
    }
    const std::string context = ChunkContext(name, c);
    ASSIGN_OR_RETURN(const ReadOnlyFile* f, ChunkFile(c, context));
    const size_t bytes = static_cast<size_t>(c.end - c.begin);
    RETURN_IF_ERROR(Annotate(f->ReadAt(c.begin, bytes, dst), context));
    RETURN_IF_ERROR(CheckCrc(c, Crc32c(dst, bytes), context));
    if (direct) continue;
    CopyRegion(buffer.data(), e.dtype, c.offsets, c.lengths, out, dtype, offsets, lengths, ioff,
               ilen);
  }
  if (covered != box_volume) {
    return MissingRegionError(absl::StrCat("loading from ", step_dir_, ": "), name, offsets,
                              lengths, e.chunks, covered);
  }
  return absl::OkStatus();
}

}  // namespace weft::checkpoint
