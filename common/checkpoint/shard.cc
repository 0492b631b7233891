#include "common/checkpoint/shard.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/box_geometry.h"
#include "common/checkpoint/crc32c.h"
#include "common/dtype.h"
#include "common/file_io.h"
#include "common/status.h"

namespace weft::checkpoint {

// Shards hold little-endian elements, copied as they lie in memory.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoints assume a little-endian host");

namespace internal {

std::string ShardEntryName(const std::string& tensor, const std::vector<int64_t>& offsets) {
  return absl::StrCat(tensor, "@", absl::StrJoin(offsets, ","));
}

absl::Status CheckShardEntry(const SafetensorsFile& shard, const std::string& tensor,
                             v1::DType dtype, const Chunk& chunk) {
  const std::string entry_name = ShardEntryName(tensor, chunk.offsets);
  auto bad = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("chunk ", ChunkRegion(chunk), " (entry '", entry_name, "') ", what));
  };
  const SafetensorsFile::Entry* e = shard.Find(entry_name);
  if (e == nullptr) return bad("is not in the shard");
  if (e->dtype != SafetensorsDTypeName(dtype)) {
    return bad(absl::StrCat("is ", e->dtype, " in the shard but ", SafetensorsDTypeName(dtype),
                            " in the index"));
  }
  if (e->shape != chunk.lengths) {
    return bad(absl::StrCat("has shape ", Dims(e->shape), " in the shard but lengths ",
                            Dims(chunk.lengths), " in the index"));
  }
  const int64_t begin = shard.data_offset() + e->begin, end = shard.data_offset() + e->end;
  if (begin != chunk.begin || end != chunk.end) {
    return bad(absl::StrCat("lies at bytes [", begin, ",", end, ") in the shard but [",
                            chunk.begin, ",", chunk.end, ") in the index"));
  }
  return absl::OkStatus();
}

}  // namespace internal

using internal::CheckChunk;
using internal::CheckDType;
using internal::CheckShape;
using internal::CheckTensorName;
using internal::ChunkRegion;
using internal::Dims;
using internal::Volume;

absl::StatusOr<std::vector<IndexedChunk>> WriteShard(const std::string& staging_dir, int rank,
                                                     const std::vector<ShardPiece>& pieces) {
  const std::string file = absl::StrCat("rank-", rank, ".safetensors");
  const std::string path = absl::StrCat(staging_dir, "/", file);
  const std::string context = absl::StrCat("writing shard ", path);
  if (rank < 0) return absl::InvalidArgumentError(absl::StrCat(context, ": negative rank"));

  // Tensors in name order, as safetensors writers lay them out.
  std::map<std::string, const ShardPiece*> by_name;
  for (const ShardPiece& p : pieces) {
    RETURN_IF_ERROR(Annotate(CheckTensorName(p.name), context));
    const std::string tensor = absl::StrCat(context, ": tensor '", p.name, "'");
    RETURN_IF_ERROR(Annotate(CheckShape(p.global_shape), tensor));
    RETURN_IF_ERROR(Annotate(CheckDType(p.dtype), tensor));
    Chunk c;
    c.offsets = p.offsets;
    c.lengths = p.lengths;
    c.file = file;
    c.end = Volume(p.lengths) * DTypeSize(p.dtype);
    RETURN_IF_ERROR(Annotate(CheckChunk(p.global_shape, p.dtype, c), tensor));
    if (p.data == nullptr && Volume(p.lengths) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": tensor '", p.name, "' chunk ", ChunkRegion(c), " has no data"));
    }
    if (!by_name.emplace(internal::ShardEntryName(p.name, p.offsets), &p).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": tensor '", p.name, "' chunk at ", Dims(p.offsets), " given twice"));
    }
  }

  std::vector<SafetensorsHeaderEntry> entries;
  for (const auto& [key, p] : by_name) entries.push_back({key, p->lengths, p->dtype});
  const SafetensorsHeader header = EncodeSafetensorsHeader(
      entries, {{"format_version", absl::StrCat(kFormatVersion)}, {"rank", absl::StrCat(rank)}});

  std::vector<absl::string_view> parts = {header.bytes};
  std::vector<IndexedChunk> out;
  size_t i = 0;
  for (const auto& [key, p] : by_name) {
    const auto& [begin, end] = header.ranges[i++];
    const size_t bytes = static_cast<size_t>(end - begin);
    const char* data = static_cast<const char*>(p->data);
    parts.emplace_back(bytes == 0 ? "" : absl::string_view(data, bytes));
    IndexedChunk ic;
    ic.tensor = p->name;
    ic.global_shape = p->global_shape;
    ic.dtype = p->dtype;
    ic.chunk.offsets = p->offsets;
    ic.chunk.lengths = p->lengths;
    ic.chunk.file = file;
    ic.chunk.begin = begin;
    ic.chunk.end = end;
    ic.chunk.crc32c = Crc32c(data, bytes);
    out.push_back(std::move(ic));
  }

  RETURN_IF_ERROR(Annotate(MakeDirs(staging_dir), context));
  RETURN_IF_ERROR(Annotate(WriteFile(path, parts), "writing shard"));
  RETURN_IF_ERROR(Annotate(FsyncDir(staging_dir), context));
  return out;
}

void ChunkToProto(const IndexedChunk& chunk, v1::CheckpointChunk* out) {
  out->set_tensor(chunk.tensor);
  for (int64_t d : chunk.global_shape) out->add_global_shape(d);
  for (int64_t d : chunk.chunk.offsets) out->add_offsets(d);
  for (int64_t d : chunk.chunk.lengths) out->add_lengths(d);
  out->set_file(chunk.chunk.file);
  out->set_begin(chunk.chunk.begin);
  out->set_end(chunk.chunk.end);
  out->set_crc32c(chunk.chunk.crc32c);
  out->set_dtype(chunk.dtype);
}

IndexedChunk ChunkFromProto(const v1::CheckpointChunk& chunk) {
  IndexedChunk out;
  out.tensor = chunk.tensor();
  out.global_shape.assign(chunk.global_shape().begin(), chunk.global_shape().end());
  out.chunk.offsets.assign(chunk.offsets().begin(), chunk.offsets().end());
  out.chunk.lengths.assign(chunk.lengths().begin(), chunk.lengths().end());
  out.chunk.file = chunk.file();
  out.chunk.begin = chunk.begin();
  out.chunk.end = chunk.end();
  out.chunk.crc32c = chunk.crc32c();
  out.dtype = chunk.dtype();
  return out;
}

}  // namespace weft::checkpoint
