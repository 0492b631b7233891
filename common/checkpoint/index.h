// The checkpoint index, index.json: format version, step, free-form metadata, and for each
// global tensor its dtype, global shape and chunks (offsets, lengths, file, byte range, crc32c),
// then a crc32c of the index itself. The index alone says where every element of every tensor
// lies, in which dtype; loading needs nothing else (no mesh, no shard headers).
//
// E.g.
//   Index index;
//   index.step = 300;
//   index.tensors["fc0.weight"] = {v1::BF16, {4, 6}, {{{0, 0}, {4, 6}, "rank-0.safetensors",
//                                                     64, 112, crc}}};
//   const std::string text = SerializeIndex(index);
//   ASSIGN_OR_RETURN(Index back, ParseIndex(text, "step-300/index.json"));
#ifndef WEFT_COMMON_CHECKPOINT_INDEX_H_
#define WEFT_COMMON_CHECKPOINT_INDEX_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"

namespace weft::checkpoint {

inline constexpr int kFormatVersion = 1;

struct Chunk {
  std::vector<int64_t> offsets;  // into the global tensor
  std::vector<int64_t> lengths;  // a zero length is allowed (an empty shard) and stored as such
  std::string file;              // relative to the step folder, e.g. rank-3.safetensors
  int64_t begin = 0;             // byte range in `file` (absolute file offsets)
  int64_t end = 0;
  uint32_t crc32c = 0;           // of the bytes [begin, end)
};

struct TensorEntry {
  v1::DType dtype = v1::F32;  // of every chunk, as stored
  std::vector<int64_t> global_shape;
  std::vector<Chunk> chunks;
};

// Index.metadata keys of a transformer job's checkpoint, what `weftctl ckpt export --format hf`
// needs (written by the coordinator from planner/arch/hf_export.h): the
// architecture, its config.json text, and the Hugging Face shapes of parameters laid out
// otherwise (JSON: name -> shape).
inline constexpr char kHfArchKey[] = "arch";
inline constexpr char kHfConfigKey[] = "hf_config";
inline constexpr char kHfShapesKey[] = "hf_shapes";

struct Index {
  int format_version = kFormatVersion;
  int64_t step = 0;
  std::map<std::string, TensorEntry> tensors;
  std::map<std::string, std::string> metadata;  // free-form, e.g. job name
};

// index.json text <-> Index (the text's own crc32c is checked on parse). The text is one JSON
// object {"format_version", "step", "metadata": {k: v}, "tensors": {name: {"dtype", "shape",
// "chunks": [{"offsets", "lengths", "file", "byte_range": [begin, end], "crc32c"}]}},
// "checksum"}. "dtype" is the safetensors name (F32, BF16, I32, I64); an index without it
// (written before tensors were typed) means F32. "checksum" is the crc32c of the object without
// the "checksum" member, serialized compactly with keys sorted and strings as UTF-8 (nlohmann's
// dump(); in Python json.dumps(obj, sort_keys=True, separators=(",", ":"),
// ensure_ascii=False)), so the file may be laid out with any whitespace. ParseIndex also checks
// the structure: version, dtype, chunk ranks and bounds, byte ranges of DTypeSize(dtype) bytes
// per element, no overlapping chunks. Its errors are DATA_LOSS naming `path` (an unsupported
// version is FAILED_PRECONDITION).
std::string SerializeIndex(const Index& index);
absl::StatusOr<Index> ParseIndex(const std::string& text, const std::string& path);

// The checks an index's parts pass, shared by the shard writer and the commit.
namespace internal {

inline constexpr char kIndexFile[] = "index.json";

// "0x0000abcd"
std::string Hex(uint32_t v);
// Non-empty, UTF-8, not safetensors' reserved __metadata__.
absl::Status CheckTensorName(const std::string& name);
// No negative dim, and a volume whose bytes fit in int64.
absl::Status CheckShape(const std::vector<int64_t>& shape);
// A dtype of the enum (proto3 keeps unknown values as ints).
absl::Status CheckDType(v1::DType dtype);
// One chunk against its tensor's global shape and dtype: rank, bounds, a plain file name, and a
// byte range of exactly DTypeSize(dtype) bytes per element.
absl::Status CheckChunk(const std::vector<int64_t>& shape, v1::DType dtype, const Chunk& c);
// No two non-empty chunks of a tensor overlap (then covered volumes can be added up).
absl::Status CheckNoOverlap(const TensorEntry& e);

}  // namespace internal
}  // namespace weft::checkpoint

#endif  // WEFT_COMMON_CHECKPOINT_INDEX_H_
