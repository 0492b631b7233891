#include "common/dtype.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

struct DTypeInfo {
  v1::DType dtype;
  int64_t size;
  const char* name;
  const char* long_name;
  const char* safetensors;
};

constexpr DTypeInfo kDTypes[] = {
    {v1::F32, 4, "f32", "float32", "F32"},
    {v1::BF16, 2, "bf16", "bfloat16", "BF16"},
    {v1::I32, 4, "i32", "int32", "I32"},
    {v1::I64, 8, "i64", "int64", "I64"},
};

const DTypeInfo& Info(v1::DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  return kDTypes[0];  // unreachable for the enum's values; proto3 keeps unknown ones as ints
}

double ToDouble(const void* in, v1::DType from, int64_t i) {
  switch (from) {
    case v1::F32:
      return static_cast<const float*>(in)[i];
    case v1::BF16:
      return Bf16BitsToFloat(static_cast<const uint16_t*>(in)[i]);
    case v1::I32:
      return static_cast<const int32_t*>(in)[i];
    default:
      return static_cast<double>(static_cast<const int64_t*>(in)[i]);
  }
}

template <typename Int>
Int SaturatingCast(double v) {
  if (std::isnan(v)) return 0;
  if (v <= static_cast<double>(std::numeric_limits<Int>::min())) {
    return std::numeric_limits<Int>::min();
  }
  if (v >= static_cast<double>(std::numeric_limits<Int>::max())) {
    return std::numeric_limits<Int>::max();
  }
  return static_cast<Int>(v);
}

}  // namespace

int64_t DTypeSize(v1::DType dtype) { return Info(dtype).size; }

absl::string_view DTypeName(v1::DType dtype) { return Info(dtype).name; }

absl::StatusOr<v1::DType> ParseDType(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.name || name == info.long_name) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\" (expected f32, bf16, i32 or i64)"));
}

bool IsFloatingPoint(v1::DType dtype) { return dtype == v1::F32 || dtype == v1::BF16; }

bool ReadableAs(v1::DType stored, v1::DType wanted) {
  return stored == wanted || (IsFloatingPoint(stored) && IsFloatingPoint(wanted));
}

absl::string_view SafetensorsDTypeName(v1::DType dtype) { return Info(dtype).safetensors; }

absl::StatusOr<v1::DType> DTypeFromSafetensors(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (name == info.safetensors) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("dtype ", name, " is not supported (F32, BF16, I32 and I64 are)"));
}

void EncodeElement(double value, v1::DType dtype, void* element) {
  switch (dtype) {
    case v1::F32: {
      const float f = static_cast<float>(value);
      std::memcpy(element, &f, sizeof(f));
      return;
    }
    case v1::BF16: {
      // Through float: a double rounded straight to bf16 could differ from PyTorch's
      // float -> bf16 only for values a float cannot hold.
      const uint16_t b = FloatToBf16Bits(static_cast<float>(value));
      std::memcpy(element, &b, sizeof(b));
      return;
    }
    case v1::I32: {
      const int32_t i = SaturatingCast<int32_t>(value);
      std::memcpy(element, &i, sizeof(i));
      return;
    }
    default: {
      const int64_t i = SaturatingCast<int64_t>(value);
      std::memcpy(element, &i, sizeof(i));
      return;
    }
  }
}

void ConvertElements(const void* in, v1::DType from, void* out, v1::DType to, int64_t n) {
  if (from == to) {
    if (in != out) std::memmove(out, in, static_cast<size_t>(n * DTypeSize(from)));
    return;
  }
  if (from == v1::I64 && to == v1::I32) {
    // Exact where it fits: through double, an int64 above 2^53 would first be rounded.
    const auto* src = static_cast<const int64_t*>(in);
    auto* dst = static_cast<int32_t*>(out);
    for (int64_t i = 0; i < n; ++i) {
      dst[i] = static_cast<int32_t>(std::clamp<int64_t>(
          src[i], std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
    }
    return;
  }
  const int64_t size = DTypeSize(to);
  for (int64_t i = 0; i < n; ++i) {
    void* element = static_cast<char*>(out) + i * size;
    if (from == v1::I32 && to == v1::I64) {
      static_cast<int64_t*>(out)[i] = static_cast<const int32_t*>(in)[i];  // exact
    } else {
      EncodeElement(ToDouble(in, from, i), to, element);
    }
  }
}

}  // namespace weft
