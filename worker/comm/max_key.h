// Max keys: the order ReduceOp::kMax (worker/comm/communicator.h) takes floats in, as int32 keys.
// A float's key is larger exactly when the float is larger, -0 sits just below +0, and every NaN
// (either sign, any payload) gets the one key of the canonical quiet NaN, above +inf. The max of
// floats is then the max of their keys, and every transport computes it so: the host reductions
// key by key (worker/comm/host_reduce.h), NCCL as an ncclMax over ncclInt32 keys (NCCL's own
// float max is fmaxf or __hmax, which drop NaNs). A key decodes to the float it was made from,
// bit for bit, so a max is exactly one member's value, or the canonical NaN; the transports agree
// bit for bit. A bf16's key is that of the float32 it stands for.
//
// Only <cstdint>: compiled by the host compiler and by nvcc (as __host__ __device__ functions,
// worker/comm/nccl/max_keys.cu).
//
// E.g.
//   const int32_t key = std::max(F32MaxKey(a_bits), F32MaxKey(b_bits));
//   const uint32_t max_bits = F32BitsOfMaxKey(key);
#ifndef WEFT_WORKER_COMM_MAX_KEY_H_
#define WEFT_WORKER_COMM_MAX_KEY_H_

#include <cstdint>

#if defined(__CUDACC__)
#define WEFT_MAX_KEY_FN __host__ __device__ inline
#else
#define WEFT_MAX_KEY_FN inline
#endif

namespace weft {

// What a max with a NaN in it is, whatever NaN the members held.
constexpr uint32_t kCanonicalF32NaN = 0x7FC00000u;
constexpr uint16_t kCanonicalBf16NaN = 0x7FC0u;

WEFT_MAX_KEY_FN int32_t F32MaxKey(uint32_t bits) {
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<int32_t>(kCanonicalF32NaN);
  const int32_t s = static_cast<int32_t>(bits);
  // As integers, positive floats are in order and negative ones backwards (-0 is INT32_MIN).
  // Flipping a negative one's 31 magnitude bits reverses them and keeps them below zero.
  return s >= 0 ? s : s ^ 0x7FFFFFFF;
}

WEFT_MAX_KEY_FN uint32_t F32BitsOfMaxKey(int32_t key) {
  return static_cast<uint32_t>(key >= 0 ? key : key ^ 0x7FFFFFFF);
}

WEFT_MAX_KEY_FN int32_t Bf16MaxKey(uint16_t bits) {
  return F32MaxKey(static_cast<uint32_t>(bits) << 16);
}

WEFT_MAX_KEY_FN uint16_t Bf16BitsOfMaxKey(int32_t key) {
  return static_cast<uint16_t>(F32BitsOfMaxKey(key) >> 16);
}

}  // namespace weft

#undef WEFT_MAX_KEY_FN

#endif  // WEFT_WORKER_COMM_MAX_KEY_H_
