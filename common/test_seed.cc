#include "common/test_seed.h"

#include <cstdio>
#include <cstdlib>
#include <random>

namespace weft {

uint64_t TestSeed() {
  static const uint64_t seed = [] {
    uint64_t s = 0;
    const char* env = std::getenv("WEFT_TEST_SEED");
    if (env != nullptr && env[0] != '\0') {
      s = std::strtoull(env, nullptr, 10);
    } else {
      std::random_device device;
      s = (static_cast<uint64_t>(device()) << 32) ^ device();
    }
    std::fprintf(stderr, "test seed %llu (WEFT_TEST_SEED=%llu reproduces this run)\n",
                 static_cast<unsigned long long>(s), static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

}  // namespace weft
