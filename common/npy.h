// Reading NumPy .npy files (format 1.0/2.0/3.0, little-endian float32 '<f4', C order) without
// loading them whole: the header is parsed once and rows are read with pread.
//
// E.g.
//   ASSIGN_OR_RETURN(NpyFile f, NpyFile::Open("inputs.npy"));
//   std::vector<float> rows(2 * f.row_elements());
//   RETURN_IF_ERROR(f.ReadRows(/*first=*/4, /*count=*/2, rows.data()));
#ifndef WEFT_COMMON_NPY_H_
#define WEFT_COMMON_NPY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/file_io.h"

namespace weft {

class NpyFile {
 public:
  // Fails with INVALID_ARGUMENT naming the file for anything but a well-formed float32 C-order
  // array, NOT_FOUND when the file is missing.
  static absl::StatusOr<NpyFile> Open(const std::string& path);

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rows() const { return shape_.empty() ? 0 : shape_[0]; }
  // Elements per row (product of shape[1:]; 1 for a 1-D array).
  int64_t row_elements() const;
  // Reads rows [first, first+count) into out (count * row_elements() floats).
  absl::Status ReadRows(int64_t first, int64_t count, float* out) const;

  // Writes a float32 C-order array (format 1.0). For tests, benchmarks and examples.
  static absl::Status Write(const std::string& path, const std::vector<int64_t>& shape,
                            const float* data);

 private:
  explicit NpyFile(ReadOnlyFile file) : file_(std::move(file)) {}

  ReadOnlyFile file_;  // copies share the descriptor
  std::vector<int64_t> shape_;
  int64_t data_offset_ = 0;
};

}  // namespace weft

#endif  // WEFT_COMMON_NPY_H_
