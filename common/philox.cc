#include "common/philox.h"

namespace weft {
namespace {

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

}  // namespace

PhiloxCounter Philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    // Random123 bumps the key before every round but the first.
    if (round > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kPhiloxM0, ctr[0], &hi0, &lo0);
    MulHiLo(kPhiloxM1, ctr[2], &hi1, &lo1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

uint64_t Fnv1a64(absl::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

float PhiloxUnit(uint64_t seed, uint64_t tensor_key, uint64_t element) {
  const PhiloxCounter ctr = {static_cast<uint32_t>(element), static_cast<uint32_t>(element >> 32),
                             static_cast<uint32_t>(tensor_key),
                             static_cast<uint32_t>(tensor_key >> 32)};
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const uint32_t word0 = Philox4x32_10(ctr, key)[0];
  return static_cast<float>(word0 >> 8) * (1.0f / 16777216.0f);
}

float PhiloxUniform(uint64_t seed, uint64_t tensor_key, uint64_t element, float bound) {
  const float u = PhiloxUnit(seed, tensor_key, element);
  const float width = 2.0f * bound;
  const float scaled = width * u;  // separate statements: no contraction into an fma
  return -bound + scaled;
}

}  // namespace weft
