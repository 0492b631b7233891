// safetensors files (8-byte little-endian header length, JSON header, raw little-endian data):
// the format numpy, PyTorch and Hugging Face tools read without Weft. Weft reads and writes F32,
// BF16, I32 and I64 tensors; a file may hold others (F16, F64, U8, ...), which are listed but
// not read (an error naming the tensor and its dtype).
//
// E.g.
//   ASSIGN_OR_RETURN(SafetensorsFile f, SafetensorsFile::Open("init.safetensors"));
//   const SafetensorsFile::Entry* e = f.Find("fc0.weight");              // e->dtype "BF16"
//   // Into a bf16 buffer as stored, or into a float32 buffer, converted:
//   RETURN_IF_ERROR(f.ReadBox("fc0.weight", box_offsets, box_lengths, v1::F32, buffer));
#ifndef WEFT_COMMON_SAFETENSORS_H_
#define WEFT_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_io.h"
#include "weft/v1/job.pb.h"

namespace weft {

class SafetensorsFile {
 public:
  struct Entry {
    // As the file names it: F32, BF16, I32, I64, or one Weft does not read (F16, U8, ...).
    std::string dtype;
    std::vector<int64_t> shape;
    int64_t begin = 0;            // byte offsets into the data section
    int64_t end = 0;
  };

  // Validates the header (length, JSON, offsets inside the file, sizes matching shape x dtype,
  // no overlaps). Errors name the file and what is wrong.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // The file offset of the data section (Entry::begin and end count from it).
  int64_t data_offset() const { return data_offset_; }
  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const Entry* Find(const std::string& name) const;
  // The name model parameter `name` is stored under: itself, or "transformer.<name>" as Hugging
  // Face's GPT-2 files name theirs; nullopt when neither is in the file.
  std::optional<std::string> ParameterName(const std::string& name) const;

  // The Weft dtype of tensor `name`. NOT_FOUND when there is no such tensor, INVALID_ARGUMENT
  // naming the file, the tensor and its dtype for one Weft does not read.
  absl::StatusOr<v1::DType> DTypeOf(const std::string& name) const;

  // Reads the region [offsets, offsets+lengths) of tensor `name` into out as prod(lengths)
  // elements of `dtype` (row-major), reading only the bytes it needs. A floating tensor is
  // converted to another floating dtype (F32 <-> BF16, rounded to nearest even); an integer
  // tensor is read only as its own dtype, else INVALID_ARGUMENT naming the tensor and both.
  // `view`, when given, is the shape the box is in: the tensor's row-major elements seen in
  // another shape of the same size (gpt2's c_attn [C, 3C] seen as [C, 3, H, D]).
  absl::Status ReadBox(const std::string& name, const std::vector<int64_t>& offsets,
                       const std::vector<int64_t>& lengths, v1::DType dtype, void* out,
                       const std::vector<int64_t>& view = {}) const;
  // Into float32: ReadBox(name, offsets, lengths, v1::F32, out).
  absl::Status ReadBox(const std::string& name, const std::vector<int64_t>& offsets,
                       const std::vector<int64_t>& lengths, float* out) const {
    return ReadBox(name, offsets, lengths, v1::F32, out);
  }

  struct TensorToWrite {
    std::string name;
    std::vector<int64_t> shape;
    const void* data;  // prod(shape) elements of dtype
    v1::DType dtype = v1::F32;
  };
  // Writes the tensors, each with its dtype (sorted by name, 8-byte aligned header as the
  // reference writer does).
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
// header padded with spaces to a multiple of 8) for tensors laid out back to back in the given
// order, and where each tensor's data lies. Every safetensors file Weft writes (files,
// checkpoint shards, `weftctl ckpt export`) is laid out by this, so they are byte for byte what
// the reference writer produces. Callers check names (unique, not __metadata__) and shapes.
//
// E.g.
//   SafetensorsHeader h = EncodeSafetensorsHeader({{"fc0.weight", {4, 8}}}, {{"format", "pt"}});
//   // write h.bytes, then fc0.weight's 128 bytes (32 F32) at file offset h.ranges[0].first
struct SafetensorsHeaderEntry {
  std::string name;
  std::vector<int64_t> shape;  // non-negative dims
  v1::DType dtype = v1::F32;
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
