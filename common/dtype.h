// Element types. The one representation is the proto enum weft.v1.DType (job.proto: F32, BF16,
// I32, I64); these are the facts every layer needs about it: sizes, names, the names other
// formats use (safetensors, npy), and conversions between types in host memory. bfloat16 is the
// upper half of a float32, rounded to nearest even (as PyTorch and cuBLAS do); a NaN stays NaN.
//
// E.g.
//   int64_t bytes = n * DTypeSize(v1::BF16);                     // 2 n
//   ASSIGN_OR_RETURN(v1::DType t, ParseDType("int32"));          // v1::I32
//   ConvertElements(src, v1::F32, dst, v1::BF16, n);             // round to nearest even
#ifndef WEFT_COMMON_DTYPE_H_
#define WEFT_COMMON_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "weft/v1/job.pb.h"

namespace weft {

// Every buffer's offset in a Program's arena is a multiple of this (a GPU's widest load, and
// four cache lines on a CPU).
inline constexpr int64_t kArenaAlignment = 256;
// `bytes` rounded up to a multiple of kArenaAlignment.
inline int64_t ArenaAligned(int64_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// Bytes per element: F32 4, BF16 2, I32 4, I64 8.
int64_t DTypeSize(v1::DType dtype);
// "f32", "bf16", "i32", "i64".
absl::string_view DTypeName(v1::DType dtype);
// "f32" or "float32", "bf16" or "bfloat16", "i32" or "int32", "i64" or "int64"; anything else is
// INVALID_ARGUMENT listing the known names.
absl::StatusOr<v1::DType> ParseDType(absl::string_view name);
bool IsFloatingPoint(v1::DType dtype);
// Whether a tensor stored as `stored` may be read into `wanted`: the same dtype, or two floating
// dtypes (F32 <-> BF16, converted on read).
bool ReadableAs(v1::DType stored, v1::DType wanted);

// The safetensors header's names: "F32", "BF16", "I32", "I64".
absl::string_view SafetensorsDTypeName(v1::DType dtype);
// INVALID_ARGUMENT for a safetensors dtype Weft does not hold (F16, F64, U8, ...), naming it.
absl::StatusOr<v1::DType> DTypeFromSafetensors(absl::string_view name);

// bfloat16 bits of a float, rounded to nearest even; a NaN becomes a quiet NaN (its quiet bit is
// set before the low half is dropped, so a payload only in the low bits cannot become infinity).
inline uint16_t FloatToBf16Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits | 0x00400000u) >> 16;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? quiet_nan : rounded);
}
inline float Bf16BitsToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// One element of `dtype` holding `value`: floating types through float32 (bf16 rounded to
// nearest even), integer types truncated toward zero and saturated at the type's range, NaN to 0.
// Writes DTypeSize(dtype) bytes to `element`. (Kernels' Fill writes its value so.)
void EncodeElement(double value, v1::DType dtype, void* element);

// out[i] = in[i] converted from `from` to `to`, n elements in host memory (in and out must not
// overlap unless the types are equal). Floats to bf16 round to nearest even; floats to integers
// truncate toward zero and saturate at the integer's range (NaN becomes 0); integers to floats
// round to nearest.
void ConvertElements(const void* in, v1::DType from, void* out, v1::DType to, int64_t n);

}  // namespace weft

#endif  // WEFT_COMMON_DTYPE_H_
