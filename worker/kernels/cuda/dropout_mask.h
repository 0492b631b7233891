// Dropout's mask on the device: Philox4x32-10 and Weft's mapping to a uniform (common/philox.cc),
// and a piece's global element index (GlobalBox::GlobalIndex in worker/kernels/kernels.h), written
// again because nvcc sees neither file's dependencies (absl, protobuf). The arithmetic is the same
// step for step, so an element is kept on the GPU exactly when it is kept on the CPU. The functions
// are host-and-device so that dropout_mask_test checks them bit for bit against the originals on
// any machine.
//
// E.g. (in a kernel)
//   const int64_t e = GlobalIndex(box, i);
//   out[i] = mask.Keeps(e) ? x[i] * mask.keep_scale : 0.0f;
#ifndef WEFT_WORKER_KERNELS_CUDA_DROPOUT_MASK_H_
#define WEFT_WORKER_KERNELS_CUDA_DROPOUT_MASK_H_

#include <cstdint>

#ifdef __CUDACC__
#define WEFT_HOST_DEVICE __host__ __device__
#else
#define WEFT_HOST_DEVICE
#endif

namespace weft::cuda {

// The four output words of Philox4x32-10.
struct PhiloxWords {
  uint32_t w[4];
};

// common/philox.cc's Philox4x32_10: the 10-round Philox4x32 bijection of Random123, same
// constants, same key schedule (bumped before every round but the first), same round function.
WEFT_HOST_DEVICE inline PhiloxWords Philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2,
                                                  uint32_t c3, uint32_t k0, uint32_t k1) {
  constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
  constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
  constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
  constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
  }
  return PhiloxWords{{c0, c1, c2, c3}};
}

// common/philox.cc's PhiloxUnit: counter {lo32(e), hi32(e), lo32(key), hi32(key)}, key
// {lo32(seed), hi32(seed)}, u = (word0 >> 8) * 2^-24 (exact in float).
WEFT_HOST_DEVICE inline float PhiloxUnit(uint64_t seed, uint64_t tensor_key, uint64_t element) {
  const PhiloxWords words = Philox4x32_10(
      static_cast<uint32_t>(element), static_cast<uint32_t>(element >> 32),
      static_cast<uint32_t>(tensor_key), static_cast<uint32_t>(tensor_key >> 32),
      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(words.w[0] >> 8) * (1.0f / 16777216.0f);
}

// A DropoutSpec as a kernel needs it, its values worked out on the host: element e is kept iff
// PhiloxUnit(seed, stream_key, e) >= p, and a kept value is multiplied by keep_scale.
struct DropoutMask {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t stream_key = 0;   // DropoutSpec::StreamKey()
  float keep_scale = 1.0f;   // 1.0f / (1.0f - p), in float32
  WEFT_HOST_DEVICE bool active() const { return p != 0.0f; }
  WEFT_HOST_DEVICE bool Keeps(uint64_t element) const {
    return PhiloxUnit(seed, stream_key, element) >= p;
  }
};

// GlobalBox (kernels.h), passed to kernels by value.
struct MaskBox {
  static constexpr int kMaxAxes = 8;  // GlobalBox::kMaxAxes
  int rank = 0;
  int64_t global[kMaxAxes] = {};
  int64_t offsets[kMaxAxes] = {};
  int64_t lengths[kMaxAxes] = {};
};

// GlobalBox::GlobalIndex: local element `local` (row-major in the piece) as a global row-major
// index.
WEFT_HOST_DEVICE inline int64_t GlobalIndex(const MaskBox& box, int64_t local) {
  int64_t index = 0, stride = 1;
  for (int a = box.rank - 1; a >= 0; --a) {
    const int64_t coordinate = box.offsets[a] + local % box.lengths[a];
    local /= box.lengths[a];
    index += coordinate * stride;
    stride *= box.global[a];
  }
  return index;
}

}  // namespace weft::cuda

#undef WEFT_HOST_DEVICE

#endif  // WEFT_WORKER_KERNELS_CUDA_DROPOUT_MASK_H_
