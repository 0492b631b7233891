// Reading NumPy .npy files (format 1.0/2.0/3.0, little-endian, C order) of float32 '<f4', int32
// '<i4' or int64 '<i8' without loading them whole: the header is parsed once and rows are read
// with pread. numpy has no bfloat16, so neither has npy here.
//
// E.g.
//   ASSIGN_OR_RETURN(NpyHeader h, NpyFile::ReadHeader("labels.npy"));   // {I64, [1000]}
//   ASSIGN_OR_RETURN(NpyFile f, NpyFile::Open("inputs.npy"));
//   std::vector<char> rows(2 * f.row_bytes());
//   RETURN_IF_ERROR(f.ReadRows(/*first=*/4, /*count=*/2, rows.data()));  // f.dtype() elements
#ifndef WEFT_COMMON_NPY_H_
#define WEFT_COMMON_NPY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_io.h"
#include "weft/v1/job.pb.h"

namespace weft {

// What a .npy header says: the element type and the shape.
struct NpyHeader {
  v1::DType dtype = v1::F32;
  std::vector<int64_t> shape;
};

class NpyFile {
 public:
  // Fails with INVALID_ARGUMENT naming the file for anything but a well-formed C-order array of
  // a supported dtype (another dtype is named: "x.npy: dtype '<f2' is not supported (float32,
  // int32 and int64 are)"), NOT_FOUND when the file is missing. Reads only the header.
  static absl::StatusOr<NpyFile> Open(const std::string& path);
  // Open's checks, keeping only the header: for validation that needs shape and dtype.
  static absl::StatusOr<NpyHeader> ReadHeader(const std::string& path);

  const NpyHeader& header() const { return header_; }
  v1::DType dtype() const { return header_.dtype; }
  const std::vector<int64_t>& shape() const { return header_.shape; }
  int64_t rows() const { return header_.shape.empty() ? 0 : header_.shape[0]; }
  // Elements per row (product of shape[1:]; 1 for a 1-D array), and their bytes.
  int64_t row_elements() const;
  int64_t row_bytes() const;
  // Reads rows [first, first+count) into out: count * row_elements() elements of dtype(), as
  // they lie in the file.
  absl::Status ReadRows(int64_t first, int64_t count, void* out) const;

  // Writes a C-order array (format 1.0) of F32, I32 or I64 elements (BF16 is INVALID_ARGUMENT:
  // numpy cannot read it). For tests, benchmarks and examples.
  static absl::Status Write(const std::string& path, const std::vector<int64_t>& shape,
                            v1::DType dtype, const void* data);
  static absl::Status Write(const std::string& path, const std::vector<int64_t>& shape,
                            const float* data) {
    return Write(path, shape, v1::F32, data);
  }
  static absl::Status Write(const std::string& path, const std::vector<int64_t>& shape,
                            const int32_t* data) {
    return Write(path, shape, v1::I32, data);
  }
  static absl::Status Write(const std::string& path, const std::vector<int64_t>& shape,
                            const int64_t* data) {
    return Write(path, shape, v1::I64, data);
  }

 private:
  explicit NpyFile(ReadOnlyFile file) : file_(std::move(file)) {}

  ReadOnlyFile file_;  // copies share the descriptor
  NpyHeader header_;
  int64_t data_offset_ = 0;
};

}  // namespace weft

#endif  // WEFT_COMMON_NPY_H_
