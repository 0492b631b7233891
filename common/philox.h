// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", the Random123
// library) and the mapping Weft uses for deterministic parameter init and synthetic data.
//
// A counter-based generator lets any rank compute element e of any tensor directly, so a shard's
// initial values are exactly the slice of the single-device tensor, whatever the mesh.
//
// Weft's mapping, for a tensor with a 64-bit tensor_key and the job's 64-bit seed: element e
// (global row-major index into the unsharded tensor) gets
//   counter = {lo32(e), hi32(e), lo32(tensor_key), hi32(tensor_key)}
//   key     = {lo32(seed), hi32(seed)}
//   u       = (word0 >> 8) * 2^-24            in [0, 1), exactly representable in float
//   value   = -bound + 2 * bound * u          in [-bound, bound)
// where word0 is the first output word of Philox4x32-10(counter, key). The value is computed in
// float as (-bound) + ((2 * bound) * u), two roundings (a reference must not fuse them).
// tensor_key is Fnv1a64 of the global tensor name ("fc0.weight", "data.input").
//
// E.g.
//   uint64_t key = Fnv1a64("fc0.weight");
//   float w = PhiloxUniform(seed, key, /*element=*/17, /*bound=*/0.125f);
#ifndef WEFT_COMMON_PHILOX_H_
#define WEFT_COMMON_PHILOX_H_

#include <array>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace weft {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// The 10-round Philox4x32 bijection of Random123 (philox4x32_R(10, ctr, key)).
PhiloxCounter Philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// FNV-1a 64-bit hash (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
uint64_t Fnv1a64(absl::string_view s);

// The uniform in [0, 1) of element `element` of tensor `tensor_key` under `seed` (mapping above).
float PhiloxUnit(uint64_t seed, uint64_t tensor_key, uint64_t element);

// U(-bound, bound) value of element `element` of tensor `tensor_key` under `seed`.
float PhiloxUniform(uint64_t seed, uint64_t tensor_key, uint64_t element, float bound);

}  // namespace weft

#endif  // WEFT_COMMON_PHILOX_H_
