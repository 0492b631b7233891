// safetensors files (8-byte little-endian header length, JSON header, raw little-endian data):
// the format numpy, PyTorch and Hugging Face tools read without Weft. Weft reads F32 tensors
// (F64 converted on read is not supported; other dtypes are an error naming the tensor).
//
// E.g.
//   ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open("init.safetensors"));
//   const SafetensorsFile::Entry* e = f.Find("fc0.weight");
//   RETURN_IF_ERROR(f.ReadBox("fc0.weight", box_offsets, box_lengths, buffer));
#ifndef WEFT_COMMON_SAFETENSORS_H_
#define WEFT_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_io.h"

namespace weft {

class SafetensorsFile {
 public:
  struct Entry {
    std::string dtype;            // e.g. F32
    std::vector<int64_t> shape;
    int64_t begin = 0;            // byte offsets into the data section
    int64_t end = 0;
  };

  // Validates the header (length, JSON, offsets inside the file, sizes matching shape x dtype,
  // no overlaps). Errors name the file and what is wrong.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const Entry* Find(const std::string& name) const;

  // Reads the region [offsets, offsets+lengths) of F32 tensor `name` into out (row-major,
  // prod(lengths) floats), reading only the bytes it needs.
  absl::Status ReadBox(const std::string& name, const std::vector<int64_t>& offsets,
                       const std::vector<int64_t>& lengths, float* out) const;

  struct TensorToWrite {
    std::string name;
    std::vector<int64_t> shape;
    const float* data;  // prod(shape) floats
  };
  // Writes F32 tensors (sorted by name, 8-byte aligned header as the reference writer does).
  static absl::Status Write(const std::string& path, const std::vector<TensorToWrite>& tensors,
                            const std::map<std::string, std::string>& metadata = {});

 private:
  explicit SafetensorsFile(ReadOnlyFile file) : file_(std::move(file)) {}

  ReadOnlyFile file_;  // copies share the descriptor
  int64_t data_offset_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The bytes of a safetensors file before its data section (8-byte little-endian length, JSON
// header padded with spaces to a multiple of 8) for F32 tensors laid out back to back in the
// given order, and where each tensor's data lies. Every safetensors file Weft writes (files,
// checkpoint shards, `weftctl ckpt export`) is laid out by this, so they are byte for byte what
// the reference writer produces. Callers check names (unique, not __metadata__) and shapes.
//
// E.g.
//   SafetensorsHeader h = EncodeSafetensorsHeader({{"fc0.weight", {4, 8}}}, {{"format", "pt"}});
//   // write h.bytes, then fc0.weight's 128 bytes at file offset h.ranges[0].first
struct SafetensorsHeaderEntry {
  std::string name;
  std::vector<int64_t> shape;  // non-negative dims
};
struct SafetensorsHeader {
  std::string bytes;                                // length, JSON, padding
  std::vector<std::pair<int64_t, int64_t>> ranges;  // per entry, [begin, end) file offsets
};
// `metadata` is written as __metadata__ unless empty.
SafetensorsHeader EncodeSafetensorsHeader(const std::vector<SafetensorsHeaderEntry>& tensors,
                                          const std::map<std::string, std::string>& metadata);

}  // namespace weft

#endif  // WEFT_COMMON_SAFETENSORS_H_
