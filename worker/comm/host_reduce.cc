#include "worker/comm/host_reduce.h"

#include <algorithm>
#include <type_traits>

#include "common/dtype.h"
#include "worker/comm/max_key.h"

namespace weft {
namespace {

// a + b modulo 2^bits: signed overflow is undefined in C++, unsigned wraps.
template <typename Int>
Int WrappingAdd(Int a, Int b) {
  using U = std::make_unsigned_t<Int>;
  return static_cast<Int>(static_cast<U>(a) + static_cast<U>(b));
}

template <typename Int>
void SumInts(absl::Span<const void* const> inputs, int64_t n, void* out) {
  Int* dst = static_cast<Int*>(out);
  for (int64_t i = 0; i < n; ++i) {
    Int acc = 0;
    for (const void* in : inputs) acc = WrappingAdd(acc, static_cast<const Int*>(in)[i]);
    dst[i] = acc;
  }
}

// z[i] = fn(x[i], y[i]) over n elements of T. `out` may be `a` or `b`.
template <typename T, typename Fn>
void Zip(const void* a, const void* b, size_t n, void* out, Fn fn) {
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  T* z = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) z[i] = fn(x[i], y[i]);
}

// z[i] = the larger of x[i] and y[i] as `key` orders them, decoded by `bits`.
template <typename T, typename KeyFn, typename BitsFn>
void MaxByKey(const void* a, const void* b, size_t n, void* out, KeyFn key, BitsFn bits) {
  Zip<T>(a, b, n, out, [&](T x, T y) { return bits(std::max(key(x), key(y))); });
}

template <typename T>
T Self(T v) {
  return v;
}

}  // namespace

void SumElements(absl::Span<const void* const> inputs, v1::DType dtype, int64_t n, int divisor,
                 void* out) {
  switch (dtype) {
    case v1::F32: {
      float* dst = static_cast<float*>(out);
      for (int64_t i = 0; i < n; ++i) {
        float acc = 0.0f;
        for (const void* in : inputs) acc += static_cast<const float*>(in)[i];
        dst[i] = divisor == 1 ? acc : acc / static_cast<float>(divisor);
      }
      return;
    }
    case v1::BF16: {
      uint16_t* dst = static_cast<uint16_t*>(out);
      for (int64_t i = 0; i < n; ++i) {
        float acc = 0.0f;
        for (const void* in : inputs) acc += Bf16BitsToFloat(static_cast<const uint16_t*>(in)[i]);
        dst[i] = FloatToBf16Bits(divisor == 1 ? acc : acc / static_cast<float>(divisor));
      }
      return;
    }
    case v1::I32:
      return SumInts<int32_t>(inputs, n, out);
    case v1::I64:
      return SumInts<int64_t>(inputs, n, out);
    default:
      return;  // CheckDType rejected it
  }
}

void AddElements(const void* a, const void* b, v1::DType dtype, size_t n, void* out) {
  switch (dtype) {
    case v1::F32:
      return Zip<float>(a, b, n, out, [](float x, float y) { return x + y; });
    case v1::BF16:
      return Zip<uint16_t>(a, b, n, out, [](uint16_t x, uint16_t y) {
        return FloatToBf16Bits(Bf16BitsToFloat(x) + Bf16BitsToFloat(y));
      });
    case v1::I32:
      return Zip<int32_t>(a, b, n, out, WrappingAdd<int32_t>);
    case v1::I64:
      return Zip<int64_t>(a, b, n, out, WrappingAdd<int64_t>);
    default:
      return;  // CheckDType rejected it
  }
}

void MaxElements(const void* a, const void* b, v1::DType dtype, size_t n, void* out) {
  switch (dtype) {
    case v1::F32:
      return MaxByKey<uint32_t>(a, b, n, out, F32MaxKey, F32BitsOfMaxKey);
    case v1::BF16:
      return MaxByKey<uint16_t>(a, b, n, out, Bf16MaxKey, Bf16BitsOfMaxKey);
    case v1::I32:
      return MaxByKey<int32_t>(a, b, n, out, Self<int32_t>, Self<int32_t>);
    case v1::I64:
      return MaxByKey<int64_t>(a, b, n, out, Self<int64_t>, Self<int64_t>);
    default:
      return;  // CheckDType rejected it
  }
}

void ScaleElements(void* data, v1::DType dtype, int64_t n, float factor) {
  if (dtype == v1::F32) {
    float* x = static_cast<float*>(data);
    for (int64_t i = 0; i < n; ++i) x[i] *= factor;
  } else if (dtype == v1::BF16) {
    uint16_t* x = static_cast<uint16_t*>(data);
    for (int64_t i = 0; i < n; ++i) x[i] = FloatToBf16Bits(Bf16BitsToFloat(x[i]) * factor);
  }
}

}  // namespace weft
