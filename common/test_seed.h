// The seed of a test's random inputs: fresh on every run (std::random_device), or the value of
// WEFT_TEST_SEED to reproduce a failure. The first call prints it to stderr, which is in the
// test's log, e.g. "test seed 8234211 (WEFT_TEST_SEED=8234211 reproduces this run)".
//
// E.g.
//   std::mt19937 rng(static_cast<uint32_t>(TestSeed()));
//   bazel test //worker/kernels:kernels_conformance_test --test_env=WEFT_TEST_SEED=8234211
#ifndef WEFT_COMMON_TEST_SEED_H_
#define WEFT_COMMON_TEST_SEED_H_

#include <cstdint>

namespace weft {

// The same value for every call in one process. Thread-safe.
uint64_t TestSeed();

}  // namespace weft

#endif  // WEFT_COMMON_TEST_SEED_H_
