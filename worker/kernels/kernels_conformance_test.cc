// Every Kernels method of every backend compiled into this binary (CompiledBackends(): cpu, and
// cuda under --config=cuda), each in both MatmulPrecisions, against float64 references written
// here (and, for Cast and Fill, integer and bit-level references written here, not common/dtype's
// conversions, which the CPU backend calls). Each case allocates through the backend, copies
// random non-zero inputs in, poisons every output buffer (NaN, or a byte pattern for other
// types) so that an element the kernel skips cannot pass, synchronizes and reads the result back.
// Never compares one Weft kernel with another.
//
// A cuda configuration without a usable GPU is skipped with ProbeDevice's message, unless
// WEFT_REQUIRE_GPU=1 (`bazel test --config=cuda --test_env=WEFT_REQUIRE_GPU=1 ...`), where it
// fails instead so that a GPU run cannot pass by skipping.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iomanip>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/dtype.h"
#include "common/test_seed.h"
#include "gtest/gtest.h"
#include "worker/kernels/backend.h"
#include "worker/kernels/kernels.h"

namespace weft {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
// One float32 ulp relative to the value (2^-23): the unit of the tolerances below.
constexpr double kUlp = 1.0 / (1 << 23);
// Enough elements for several CUDA blocks, and not a multiple of any block size.
constexpr int64_t kLarge = 100003;
const int64_t kSizes[] = {1, 255, kLarge};

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// x rounded to bfloat16 (8 significant bits), round to nearest, ties to even; NaN stays NaN.
// Written on the two 16-bit halves, unlike the backends' branch-free version.
float RoundToBf16(float x) {
  if (std::isnan(x)) return x;
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const uint32_t upper = bits >> 16, lower = bits & 0xFFFFu;
  uint32_t kept = upper;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u) != 0)) ++kept;
  return FromBits(kept << 16);
}

struct BackendConfig {
  std::string device;  // "cpu" | "cuda"
  bool bf16 = false;   // MatmulPrecision::kBf16; otherwise KernelOptions' default precision
};

void PrintTo(const BackendConfig& config, std::ostream* os) {
  *os << config.device << (config.bf16 ? " bf16" : "");
}

std::string ConfigName(const ::testing::TestParamInfo<BackendConfig>& info) {
  return info.param.device + (info.param.bf16 ? "_bf16" : "");
}

std::vector<BackendConfig> AllConfigs() {
  std::vector<BackendConfig> configs;
  for (const std::string& device : CompiledBackends()) {
    configs.push_back({device, false});
    configs.push_back({device, true});
  }
  return configs;
}

// Every |got[i] - want[i]| <= tol[i]; a NaN (an unwritten, poisoned element) never is. Reports
// the count and the first few offenders rather than one failure per element.
::testing::AssertionResult AllWithin(const std::vector<float>& got,
                                     const std::vector<double>& want,
                                     const std::vector<double>& tol) {
  if (got.size() != want.size() || got.size() != tol.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: got " << got.size() << ", want " << want.size();
  }
  int64_t bad = 0;
  std::ostringstream first;
  first << std::setprecision(9);
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (err <= tol[i]) continue;
    if (bad < 5) {
      first << "\n  [" << i << "] got " << got[i] << ", want " << want[i] << ", |err| " << err
            << " > tol " << tol[i] << (std::isnan(got[i]) ? " (NaN: left unwritten?)" : "");
    }
    ++bad;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements out of tolerance:" << first.str();
}

// |got - want| <= atol + rtol * |want|.
::testing::AssertionResult AllClose(const std::vector<float>& got, const std::vector<double>& want,
                                    double rtol, double atol) {
  std::vector<double> tol(want.size());
  for (size_t i = 0; i < want.size(); ++i) tol[i] = atol + rtol * std::fabs(want[i]);
  return AllWithin(got, want, tol);
}

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// c = op(a) @ op(b) in float64, from a and b as stored (see Kernels::Matmul), rounded to bf16
// first when bf16. tol[i] bounds float32 accumulation in any order over k terms with margin:
// 4 * k * 2^-24 * sum_p |a_ip * b_pj| (products of bf16 values are exact in float32).
struct MatmulReference {
  std::vector<double> c;
  std::vector<double> tol;
};

MatmulReference ReferenceMatmul(std::vector<float> a, std::vector<float> b, int64_t m, int64_t n,
                                int64_t k, bool trans_a, bool trans_b, bool bf16) {
  if (bf16) {
    for (float& x : a) x = RoundToBf16(x);
    for (float& x : b) x = RoundToBf16(x);
  }
  MatmulReference r{std::vector<double>(m * n, 0.0), std::vector<double>(m * n, 0.0)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0, abs_sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = trans_a ? a[p * m + i] : a[i * k + p];
        const double bv = trans_b ? b[j * k + p] : b[p * n + j];
        sum += av * bv;
        abs_sum += std::fabs(av * bv);
      }
      r.c[i * n + j] = sum;
      r.tol[i * n + j] = 2.0 * static_cast<double>(k) * kUlp * abs_sum;
    }
  }
  return r;
}

class KernelsConformanceTest : public ::testing::TestWithParam<BackendConfig> {
 protected:
  void SetUp() override {
    const BackendConfig& config = GetParam();
    if (config.device != "cpu") {
      const std::string device = config.device + ":0";
      absl::StatusOr<DeviceDescription> probed = ProbeDevice(device);
      if (!probed.ok()) {
        const char* require = std::getenv("WEFT_REQUIRE_GPU");
        if (require != nullptr && std::string(require) == "1") {
          FAIL() << "WEFT_REQUIRE_GPU=1 but " << device << " is not usable: " << probed.status();
        }
        GTEST_SKIP() << probed.status();
      }
    }
    KernelOptions options;
    options.device = config.device;
    if (config.bf16) options.precision = MatmulPrecision::kBf16;
    absl::StatusOr<std::unique_ptr<Kernels>> kernels = NewKernels(options);
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    k_ = std::move(*kernels);
    ASSERT_EQ(std::string(k_->name()), config.device);
  }

  void TearDown() override {
    if (k_ == nullptr) return;
    const absl::Status status = k_->Synchronize();
    EXPECT_TRUE(status.ok()) << status;
    for (void* p : buffers_) k_->Free(p);
  }

  bool bf16() const { return GetParam().bf16; }

  // Uniform in [-2, -0.05] U [0.05, 2]: random and never zero.
  std::vector<float> Random(int64_t n) {
    std::uniform_real_distribution<float> magnitude(0.05f, 2.0f);
    std::bernoulli_distribution negative(0.5);
    std::vector<float> v(n);
    for (float& x : v) x = negative(rng_) ? -magnitude(rng_) : magnitude(rng_);
    return v;
  }

  // A backend buffer holding host's values, freed at TearDown. The host copy is kept alive until
  // then too, since CopyFromHost may be asynchronous.
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    const int64_t bytes = static_cast<int64_t>(host.size() * sizeof(T));
    void* p = k_->Allocate(bytes);
    EXPECT_NE(p, nullptr) << "Allocate(" << bytes << ")";
    buffers_.push_back(p);
    const auto* first = reinterpret_cast<const char*>(host.data());
    staged_.emplace_back(first, first + bytes);
    k_->CopyFromHost(staged_.back().data(), p, bytes);
    return static_cast<T*>(p);
  }
  // An output buffer, every element NaN.
  float* Poisoned(int64_t n) { return Upload(std::vector<float>(n, kNaN)); }
  // An output buffer of any type, every byte kPoisonByte.
  template <typename T>
  T* PoisonedBits(int64_t n) {
    T poison;
    std::memset(&poison, kPoisonByte, sizeof(poison));
    return Upload(std::vector<T>(n, poison));
  }

  ::testing::AssertionResult Synced() {
    const absl::Status status = k_->Synchronize();
    if (status.ok()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "Synchronize: " << status;
  }

  template <typename T>
  std::vector<T> Download(const T* p, int64_t n) {
    std::vector<T> host(n);
    std::memset(host.data(), kPoisonByte, host.size() * sizeof(T));
    k_->CopyToHost(p, host.data(), n * static_cast<int64_t>(sizeof(T)));
    EXPECT_TRUE(Synced()) << "after CopyToHost";
    return host;
  }

  static constexpr unsigned char kPoisonByte = 0x5A;

  // Slice and Unslice of Word-sized elements (defined with its tests below).
  template <typename Word>
  void CheckSliceAndUnslice();

  std::mt19937 rng_{static_cast<uint32_t>(TestSeed())};
  std::unique_ptr<Kernels> k_;
  std::vector<void*> buffers_;
  std::deque<std::vector<char>> staged_;
};

// The reference rounding itself: ties go to the even neighbour, anything past a tie goes up.
TEST(RoundToBf16Test, NearestEven) {
  EXPECT_EQ(RoundToBf16(1.0f), 1.0f);
  EXPECT_EQ(RoundToBf16(1.0f + 0x1p-8f), 1.0f);                    // tie, 1.0 is even
  EXPECT_EQ(RoundToBf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);       // tie, 1 + 2^-7 is odd
  EXPECT_EQ(RoundToBf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);  // past the tie
  EXPECT_EQ(RoundToBf16(-(1.0f + 0x1p-8f - 0x1p-20f)), -1.0f);      // short of the tie
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::max()),
            std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(RoundToBf16(FromBits(0x7F800001u))));
}

TEST_P(KernelsConformanceTest, MemoryOps) {
  const int64_t n = kLarge;
  const std::vector<float> src = Random(n);
  float* a = Upload(src);
  if (std::string(k_->name()) == "cpu") {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u) << "the CPU backend aligns to 64 bytes";
  }
  ASSERT_TRUE(Synced());
  EXPECT_EQ(Download(a, n), src);

  // Copy, whole and between offsets; elements outside the copied range stay poisoned.
  float* whole = Poisoned(n);
  float* part = Poisoned(n);
  k_->Copy(a, whole, n * sizeof(float));
  k_->Copy(a + 3, part + 5, (n - 10) * sizeof(float));
  ASSERT_TRUE(Synced());
  EXPECT_EQ(Download(whole, n), src);
  const std::vector<float> got_part = Download(part, n);
  for (int64_t i = 0; i < n; ++i) {
    if (i >= 5 && i < n - 5) {
      ASSERT_EQ(got_part[i], src[i - 2]) << "element " << i;
    } else {
      ASSERT_TRUE(std::isnan(got_part[i])) << "element " << i << " outside the copy was written";
    }
  }

  // Fill, whole and an inner range.
  float* filled = Poisoned(n);
  k_->Fill(filled, n, v1::F32, 2.5);
  k_->Fill(a + 1, n - 2, v1::F32, -0.75);
  ASSERT_TRUE(Synced());
  EXPECT_EQ(Download(filled, n), std::vector<float>(n, 2.5f));
  std::vector<float> want = src;
  for (int64_t i = 1; i < n - 1; ++i) want[i] = -0.75f;
  EXPECT_EQ(Download(a, n), want);

  // Free, then allocate again: the backend hands memory back out.
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> ps;
    for (int64_t size : {int64_t{1}, int64_t{255}, kLarge, 4 * kLarge}) {
      void* p = k_->Allocate(size * sizeof(float));
      ASSERT_NE(p, nullptr) << "Allocate(" << size << " floats)";
      ps.push_back(p);
    }
    ASSERT_TRUE(Synced());
    for (void* p : ps) k_->Free(p);
  }
}

// Matmul in the configuration's precision, on odd and larger shapes, every transpose combination.
TEST_P(KernelsConformanceTest, MatmulAllTransposes) {
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape& s : {Shape{1, 1, 1}, Shape{5, 7, 11}, Shape{67, 129, 93},
                         Shape{256, 33, 520}}) {
    for (bool trans_a : {false, true}) {
      for (bool trans_b : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "m=" << s.m << " n=" << s.n << " k=" << s.k
                                          << " trans_a=" << trans_a << " trans_b=" << trans_b);
        const std::vector<float> a = Random(s.m * s.k), b = Random(s.k * s.n);
        float* da = Upload(a);
        float* db = Upload(b);
        float* dc = Poisoned(s.m * s.n);
        k_->Matmul(da, db, dc, s.m, s.n, s.k, trans_a, trans_b);
        ASSERT_TRUE(Synced());
        const MatmulReference want =
            ReferenceMatmul(a, b, s.m, s.n, s.k, trans_a, trans_b, bf16());
        EXPECT_TRUE(AllWithin(Download(dc, s.m * s.n), want.c, want.tol));
      }
    }
  }
}

// k == 0 is an empty sum: c is all zeros. m == 0 or n == 0 leaves nothing to write.
TEST_P(KernelsConformanceTest, MatmulEmpty) {
  const int64_t m = 6, n = 5;
  float* a = Upload(Random(1));
  float* b = Upload(Random(1));
  float* c = Poisoned(m * n);
  k_->Matmul(a, b, c, m, n, /*k=*/0, false, false);
  ASSERT_TRUE(Synced());
  EXPECT_EQ(Download(c, m * n), std::vector<float>(m * n, 0.0f));

  // Operands as large as the nonempty side declares, in case a backend reads them anyway.
  float* a12 = Upload(Random(12));
  float* b12 = Upload(Random(12));
  const std::vector<float> sentinel = Random(4);
  float* untouched = Upload(sentinel);
  k_->Matmul(a12, b12, untouched, /*m=*/0, /*n=*/4, /*k=*/3, false, false);
  k_->Matmul(a12, b12, untouched, /*m=*/4, /*n=*/0, /*k=*/3, true, true);
  ASSERT_TRUE(Synced());
  EXPECT_EQ(Download(untouched, 4), sentinel);
}

// With k == 1 every element is one product, which both precisions compute exactly (float32
// rounding of a * b; bf16 products are exact): checks the operand rounding itself, ties included.
TEST_P(KernelsConformanceTest, MatmulOfOneTermIsTheExactProduct) {
  const int64_t m = 37, n = 41;
  std::vector<float> a = Random(m), b = Random(n);
  const float ties[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.5f + 0x1p-8f),
                        1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 0x1p-8f - 0x1p-20f, 0.75f + 0x1p-9f};
  for (size_t i = 0; i < sizeof(ties) / sizeof(ties[0]); ++i) {
    a[3 * i] = ties[i];
    b[5 * i + 1] = -ties[i];
  }
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a=" << trans_a << " trans_b=" << trans_b);
      float* da = Upload(a);
      float* db = Upload(b);
      float* dc = Poisoned(m * n);
      k_->Matmul(da, db, dc, m, n, /*k=*/1, trans_a, trans_b);
      ASSERT_TRUE(Synced());
      std::vector<double> want(m * n);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          const float ai = bf16() ? RoundToBf16(a[i]) : a[i];
          const float bj = bf16() ? RoundToBf16(b[j]) : b[j];
          want[i * n + j] = static_cast<float>(static_cast<double>(ai) * bj);
        }
      }
      EXPECT_TRUE(AllClose(Download(dc, m * n), want, 0, 0));
    }
  }
}

// The default precision does not round to bf16, and kBf16 does. Operands are positive with their
// low 16 bits in [0x4000, 0x7FFF], so bf16 shrinks every one by 2^-10 to 2^-8 of its value and
// the two results differ by far more than float32 accumulation error.
TEST_P(KernelsConformanceTest, MatmulRoundsToBf16OnlyWhenAsked) {
  const int64_t m = 33, n = 65, k = 129;
  std::uniform_int_distribution<uint32_t> low(0x4000u, 0x7FFFu);
  auto operand = [&](int64_t size) {
    std::vector<float> v = Random(size);
    for (float& x : v) {
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof(bits));
      x = FromBits(((bits & 0x7FFF0000u) | low(rng_)));
    }
    return v;
  };
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "trans_a=" << trans_a << " trans_b=" << trans_b);
      const std::vector<float> a = operand(m * k), b = operand(k * n);
      const MatmulReference f32 = ReferenceMatmul(a, b, m, n, k, trans_a, trans_b, false);
      const MatmulReference rounded = ReferenceMatmul(a, b, m, n, k, trans_a, trans_b, true);
      for (int64_t i = 0; i < m * n; ++i) {
        ASSERT_GT(std::fabs(f32.c[i] - rounded.c[i]), 20 * (f32.tol[i] + rounded.tol[i]))
            << "the inputs do not tell the precisions apart at " << i;
      }
      float* da = Upload(a);
      float* db = Upload(b);
      float* dc = Poisoned(m * n);
      k_->Matmul(da, db, dc, m, n, k, trans_a, trans_b);
      ASSERT_TRUE(Synced());
      const MatmulReference& want = bf16() ? rounded : f32;
      EXPECT_TRUE(AllWithin(Download(dc, m * n), want.c, want.tol));
    }
  }
}

// A NaN operand gives a NaN row, in both precisions: bf16 rounding must not turn a NaN whose
// payload is only in the low 16 bits into infinity.
TEST_P(KernelsConformanceTest, MatmulPropagatesNaN) {
  const int64_t m = 9, n = 13, k = 17, row = 4;
  std::vector<float> a = Random(m * k);
  const std::vector<float> b = Random(k * n);
  std::vector<float> finite_a = a;
  a[row * k + 6] = FromBits(0x7F800001u);
  float* da = Upload(a);
  float* db = Upload(b);
  float* dc = Poisoned(m * n);
  k_->Matmul(da, db, dc, m, n, k, false, false);
  ASSERT_TRUE(Synced());
  const std::vector<float> got = Download(dc, m * n);
  const MatmulReference want = ReferenceMatmul(finite_a, b, m, n, k, false, false, bf16());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int64_t e = i * n + j;
      if (i == row) {
        EXPECT_TRUE(std::isnan(got[e])) << "c[" << i << ", " << j << "] = " << got[e];
      } else {
        EXPECT_LE(std::fabs(got[e] - want.c[e]), want.tol[e]) << "c[" << i << ", " << j << "]";
      }
    }
  }
}

TEST_P(KernelsConformanceTest, AddBiasAndInPlace) {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape& s : {Shape{1, 1}, Shape{6, 9}, Shape{391, 257}, Shape{2, kLarge}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << s.rows << " cols=" << s.cols);
    const std::vector<float> a = Random(s.rows * s.cols), bias = Random(s.cols);
    std::vector<double> want(s.rows * s.cols);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) {
        want[r * s.cols + c] = static_cast<double>(a[r * s.cols + c]) + bias[c];
      }
    }
    float* da = Upload(a);
    float* db = Upload(bias);
    float* out = Poisoned(s.rows * s.cols);
    k_->AddBias(da, db, out, s.rows, s.cols);
    k_->AddBias(da, db, da, s.rows, s.cols);
    ASSERT_TRUE(Synced());
    // One float32 rounding of the sum.
    EXPECT_TRUE(AllClose(Download(out, s.rows * s.cols), want, kUlp, 0));
    EXPECT_TRUE(AllClose(Download(da, s.rows * s.cols), want, kUlp, 0)) << "in place";
  }
}

TEST_P(KernelsConformanceTest, BiasGrad) {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape& s : {Shape{1, 1}, Shape{13, 4}, Shape{1031, 97}, Shape{3, kLarge}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << s.rows << " cols=" << s.cols);
    const std::vector<float> a = Random(s.rows * s.cols);
    std::vector<double> want(s.cols, 0.0), tol(s.cols, 0.0);
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) {
        want[c] += a[r * s.cols + c];
        tol[c] += std::fabs(a[r * s.cols + c]);
      }
    }
    // float32 accumulation over rows terms, in any order.
    for (double& t : tol) t *= 2.0 * static_cast<double>(s.rows) * kUlp;
    float* da = Upload(a);
    float* out = Poisoned(s.cols);
    k_->BiasGrad(da, out, s.rows, s.cols);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllWithin(Download(out, s.cols), want, tol));
  }
}

TEST_P(KernelsConformanceTest, ReluAndInPlace) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> x = Random(n);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = x[i] > 0 ? x[i] : 0.0;
    float* dx = Upload(x);
    float* out = Poisoned(n);
    k_->Relu(dx, out, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, n), want, 0, 0));
    k_->Relu(dx, dx, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(dx, n), want, 0, 0)) << "in place";
  }
}

TEST_P(KernelsConformanceTest, ReluGradAndInPlace) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> x = Random(n), dy = Random(n);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = x[i] > 0 ? dy[i] : 0.0;
    float* dx = Upload(x);
    float* ddy = Upload(dy);
    float* out = Poisoned(n);
    k_->ReluGrad(dx, ddy, out, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, n), want, 0, 0));
    k_->ReluGrad(dx, ddy, ddy, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(ddy, n), want, 0, 0)) << "in place (out aliases dy)";
  }
}

TEST_P(KernelsConformanceTest, GeluExactErf) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::vector<float> x = Random(n);
    // The tanh approximation is off by ~1e-4 near |x| = 1.5; make sure it is not what runs.
    x[0] = 1.5f;
    if (n > 1) x[1] = -1.5f;
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      want[i] = v * 0.5 * std::erfc(-v / std::sqrt(2.0));
    }
    float* dx = Upload(x);
    float* out = Poisoned(n);
    k_->Gelu(dx, out, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, n), want, 1e-5, 1e-6));
  }
}

TEST_P(KernelsConformanceTest, GeluGrad) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    std::vector<float> x = Random(n);
    x[0] = 1.5f;
    const std::vector<float> dy = Random(n);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      const double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
      const double pdf = std::exp(-v * v / 2) / std::sqrt(2 * M_PI);
      want[i] = dy[i] * (cdf + v * pdf);
    }
    float* dx = Upload(x);
    float* ddy = Upload(dy);
    float* out = Poisoned(n);
    k_->GeluGrad(dx, ddy, out, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, n), want, 1e-5, 1e-6));
  }
}

TEST_P(KernelsConformanceTest, MseLossSumsInDouble) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const float scale = 1.0f / static_cast<float>(n);
    const std::vector<float> pred = Random(n), label = Random(n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(pred[i]) - label[i];
      sum += d * d;
    }
    float* dp = Upload(pred);
    float* dl = Upload(label);
    float* loss = Poisoned(1);
    k_->MseLoss(dp, dl, loss, n, scale);
    ASSERT_TRUE(Synced());
    // A double sum leaves only the final float32 roundings (of the sum and of the scaled sum).
    EXPECT_TRUE(AllClose(Download(loss, 1), {static_cast<double>(scale) * sum}, 3 * kUlp, 0));
  }
}

TEST_P(KernelsConformanceTest, MseGrad) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const float scale = 2.0f / static_cast<float>(n);
    const std::vector<float> pred = Random(n), label = Random(n);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = static_cast<double>(scale) * (static_cast<double>(pred[i]) - label[i]);
    }
    float* dp = Upload(pred);
    float* dl = Upload(label);
    float* out = Poisoned(n);
    k_->MseGrad(dp, dl, out, n, scale);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, n), want, 2 * kUlp, 0));
  }
}

TEST_P(KernelsConformanceTest, ScaleAndInPlace) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const float scale = -0.3f;
    const std::vector<float> a = Random(n);
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = static_cast<double>(scale) * a[i];
    float* da = Upload(a);
    float* out = Poisoned(n);
    k_->Scale(da, out, n, scale);
    k_->Scale(da, da, n, scale);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, n), want, kUlp, 0));
    EXPECT_TRUE(AllClose(Download(da, n), want, kUlp, 0)) << "in place";
  }
}

TEST_P(KernelsConformanceTest, SgdWithWeightDecay) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const float lr = 0.05f, wd = 0.01f;
    const std::vector<float> p = Random(n), g = Random(n);
    std::vector<double> want(n), tol(n);
    for (int64_t i = 0; i < n; ++i) {
      const double update = static_cast<double>(lr) * (g[i] + static_cast<double>(wd) * p[i]);
      want[i] = p[i] - update;
      // A few float32 roundings of the largest term.
      tol[i] = 4 * kUlp * (std::fabs(p[i]) + std::fabs(update));
    }
    float* dp = Upload(p);
    float* dg = Upload(g);
    k_->Sgd(dp, dg, n, lr, wd);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllWithin(Download(dp, n), want, tol));
  }
}

// Several steps of PyTorch's AdamW (decoupled weight decay applied to the parameter before the
// Adam update), against a float64 implementation of the formula in kernels.h. lr and
// weight_decay are large enough that decaying after the update, or adding the decay to the
// gradient (Adam's L2), is off by far more than the tolerance.
TEST_P(KernelsConformanceTest, AdamWOverSeveralSteps) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    AdamWHyper h;
    h.lr = 0.05f;
    h.beta1 = 0.9f;
    h.beta2 = 0.99f;
    h.eps = 1e-6f;
    h.weight_decay = 0.2f;
    const std::vector<float> p0 = Random(n);
    std::vector<double> rp(p0.begin(), p0.end()), rm(n, 0.0), rv(n, 0.0);
    float* p = Upload(p0);
    float* m = Upload(std::vector<float>(n, 0.0f));
    float* v = Upload(std::vector<float>(n, 0.0f));
    const double lr = h.lr, b1 = h.beta1, b2 = h.beta2, eps = h.eps, wd = h.weight_decay;
    for (int64_t t = 1; t <= 5; ++t) {
      const std::vector<float> g = Random(n);
      for (int64_t i = 0; i < n; ++i) {
        rp[i] -= lr * wd * rp[i];
        rm[i] = b1 * rm[i] + (1 - b1) * g[i];
        rv[i] = b2 * rv[i] + (1 - b2) * g[i] * g[i];
        const double m_hat = rm[i] / (1 - std::pow(b1, t));
        const double v_hat = rv[i] / (1 - std::pow(b2, t));
        rp[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
      k_->AdamW(p, Upload(g), m, v, n, h, t);
    }
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(p, n), rp, 1e-5, 1e-6)) << "param";
    EXPECT_TRUE(AllClose(Download(m, n), rm, 1e-5, 1e-6)) << "m";
    EXPECT_TRUE(AllClose(Download(v, n), rv, 1e-5, 1e-6)) << "v";
  }
}

// Slice takes an inner box of a viewed as [outer, axis_len, inner]; Unslice writes it back into a
// full tensor and leaves every element outside the box as it was.
TEST_P(KernelsConformanceTest, SliceAndUnslice) {
  struct View {
    int64_t outer, axis_len, inner, offset, length;
  };
  const View views[] = {
      {1, 3, 20, 1, 1},        // [3, 5, 4] along axis 0
      {3, 5, 4, 1, 3},         // ... axis 1
      {15, 4, 1, 1, 2},        // ... axis 2
      {2, 9, 5, 0, 9},         // the whole axis
      {1000, 7, 13, 6, 1},     // the last index only
      {3, 300, 257, 17, 123},  // large, several blocks
  };
  for (const View& s : views) {
    SCOPED_TRACE(::testing::Message() << "outer=" << s.outer << " axis_len=" << s.axis_len
                                      << " inner=" << s.inner << " offset=" << s.offset
                                      << " length=" << s.length);
    const int64_t full = s.outer * s.axis_len * s.inner, piece = s.outer * s.length * s.inner;
    auto inside = [&](int64_t flat) {
      const int64_t i = (flat / s.inner) % s.axis_len;
      return i >= s.offset && i < s.offset + s.length;
    };
    const std::vector<float> a = Random(full);
    std::vector<double> want_slice;
    for (int64_t flat = 0; flat < full; ++flat) {
      if (inside(flat)) want_slice.push_back(a[flat]);
    }
    ASSERT_EQ(static_cast<int64_t>(want_slice.size()), piece);
    float* da = Upload(a);
    float* sliced = Poisoned(piece);
    k_->Slice(da, sliced, s.outer, s.axis_len, s.inner, s.offset, s.length, sizeof(float));
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(sliced, piece), want_slice, 0, 0)) << "Slice";

    const std::vector<float> before = Random(full), update = Random(piece);
    std::vector<double> want_full = ToDouble(before);
    for (int64_t flat = 0, next = 0; flat < full; ++flat) {
      if (inside(flat)) want_full[flat] = update[next++];
    }
    float* out = Upload(before);
    k_->Unslice(Upload(update), out, s.outer, s.axis_len, s.inner, s.offset, s.length,
                sizeof(float));
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, full), want_full, 0, 0)) << "Unslice";
  }
}

TEST_P(KernelsConformanceTest, AddAndAliasing) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> a = Random(n), b = Random(n);
    // The sum of two floats is exact in double, so this is the correctly rounded float sum.
    std::vector<double> want(n), twice_a(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = static_cast<float>(static_cast<double>(a[i]) + b[i]);
      twice_a[i] = static_cast<float>(2.0 * a[i]);
    }
    float* da = Upload(a);
    float* db = Upload(b);
    float* out = Poisoned(n);
    k_->Add(da, db, out, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, n), want, 0, 0));

    float* into_a = Upload(a);
    k_->Add(into_a, db, into_a, n);
    float* into_b = Upload(b);
    k_->Add(da, into_b, into_b, n);
    float* doubled = Upload(a);
    k_->Add(doubled, doubled, doubled, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(into_a, n), want, 0, 0)) << "out aliases a";
    EXPECT_TRUE(AllClose(Download(into_b, n), want, 0, 0)) << "out aliases b";
    EXPECT_TRUE(AllClose(Download(doubled, n), twice_a, 0, 0)) << "out, a and b the same";
  }
}

// --- Cast -------------------------------------------------------------------------------------

constexpr v1::DType kDTypes[] = {v1::F32, v1::BF16, v1::I32, v1::I64};

// The test's own element conversions (independent of common/dtype.h): truncation toward zero
// saturated at the integer's range, NaN to 0.
int32_t TruncateToI32(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 0x1p31) return std::numeric_limits<int32_t>::max();
  if (v < -0x1p31) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(std::trunc(v));
}
int64_t TruncateToI64(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 0x1p63) return std::numeric_limits<int64_t>::max();
  if (v < -0x1p63) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(std::trunc(v));
}
uint16_t Bf16Of(float x) {
  uint32_t bits;
  const float rounded = RoundToBf16(x);
  std::memcpy(&bits, &rounded, sizeof(bits));
  return static_cast<uint16_t>(bits >> 16);
}

// n elements of one dtype, in host memory, with what each element is: a float (F32 and BF16
// elements are floats exactly) or an integer.
struct TypedHost {
  v1::DType dtype = v1::F32;
  int64_t n = 0;
  std::vector<char> bytes;
  std::vector<float> as_float;   // F32, BF16
  std::vector<int64_t> as_int;   // I32, I64
};

// Every source value the conversions treat specially, then random ones.
TypedHost CastSource(v1::DType dtype, std::mt19937& rng) {
  TypedHost t;
  t.dtype = dtype;
  std::uniform_int_distribution<uint32_t> bits32;
  std::uniform_int_distribution<int> exponent(-10, 70);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  const float inf = std::numeric_limits<float>::infinity();
  switch (dtype) {
    case v1::F32: {
      t.as_float = {0.0f, -0.0f, 1.5f, -1.5f, 2.5f, -2.7f, 0.49f, -0.99f, 1e10f, -1e10f, 3e9f,
                    -3e9f, 2147483520.0f, 0x1p31f, -0x1p31f, -2147483904.0f, 9223371487098961920.0f,
                    0x1p63f, -0x1p63f, -1e19f, 16777217.0f, inf, -inf, kNaN, -kNaN,
                    FromBits(0x7F800001u), FromBits(0xFF800001u), 1.0f + 0x1p-8f,
                    1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 1.0f + 0x1p-8f + 0x1p-20f,
                    std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(),
                    std::numeric_limits<float>::denorm_min(), 1e-40f, -1e-40f};
      // Half any bit pattern (NaNs included), half ordinary magnitudes from 2^-10 to 2^70.
      while (static_cast<int64_t>(t.as_float.size()) < kLarge) {
        t.as_float.push_back(t.as_float.size() % 2 == 0
                                 ? FromBits(bits32(rng))
                                 : static_cast<float>(std::ldexp(unit(rng), exponent(rng))));
      }
      break;
    }
    case v1::BF16: {
      // Every bfloat16 there is, then random ones up to kLarge.
      for (uint32_t b = 0; b < 0x10000u; ++b) t.as_float.push_back(FromBits(b << 16));
      while (static_cast<int64_t>(t.as_float.size()) < kLarge) {
        t.as_float.push_back(FromBits((bits32(rng) & 0xFFFFu) << 16));
      }
      break;
    }
    case v1::I32: {
      const int64_t min = std::numeric_limits<int32_t>::min(),
                    max = std::numeric_limits<int32_t>::max();
      t.as_int = {0, 1, -1, min, max, min + 1, max - 1, 16777216, 16777217, 16777219, -16777217,
                  255, 256, 257, -257, 65535, 65537};
      std::uniform_int_distribution<int32_t> small(-1000, 1000);
      while (static_cast<int64_t>(t.as_int.size()) < kLarge) {
        t.as_int.push_back(t.as_int.size() % 2 == 0 ? static_cast<int32_t>(bits32(rng))
                                                    : small(rng));
      }
      break;
    }
    default: {
      const int64_t min = std::numeric_limits<int64_t>::min(),
                    max = std::numeric_limits<int64_t>::max();
      t.as_int = {0, 1, -1, min, max, int64_t{1} << 31, (int64_t{1} << 31) - 1,
                  -(int64_t{1} << 31), -(int64_t{1} << 31) - 1, int64_t{1} << 53,
                  (int64_t{1} << 53) + 2, 16777217, -16777217, int64_t{1} << 62};
      // Random values with at most 53 significant bits, exact in double. ConvertElements (and so
      // both backends) rounds an int64 to float through double; on wider values that can differ
      // from rounding directly by one float ulp (a double rounding), which is not tested here.
      std::uniform_int_distribution<int64_t> mantissa(-(int64_t{1} << 53) + 1,
                                                      (int64_t{1} << 53) - 1);
      std::uniform_int_distribution<int> shift(0, 10);
      std::uniform_int_distribution<int64_t> small(-100000, 100000);
      while (static_cast<int64_t>(t.as_int.size()) < kLarge) {
        t.as_int.push_back(t.as_int.size() % 2 == 0 ? mantissa(rng) * (int64_t{1} << shift(rng))
                                                    : small(rng));
      }
      break;
    }
  }
  t.n = static_cast<int64_t>(std::max(t.as_float.size(), t.as_int.size()));
  t.bytes.resize(t.n * DTypeSize(dtype));
  for (int64_t i = 0; i < t.n; ++i) {
    char* e = t.bytes.data() + i * DTypeSize(dtype);
    switch (dtype) {
      case v1::F32:
        std::memcpy(e, &t.as_float[i], 4);
        break;
      case v1::BF16: {
        uint32_t bits;
        std::memcpy(&bits, &t.as_float[i], 4);
        const uint16_t upper = static_cast<uint16_t>(bits >> 16);
        std::memcpy(e, &upper, 2);
        break;
      }
      case v1::I32: {
        const int32_t v = static_cast<int32_t>(t.as_int[i]);
        std::memcpy(e, &v, 4);
        break;
      }
      default:
        std::memcpy(e, &t.as_int[i], 8);
        break;
    }
  }
  return t;
}

// Element i of src converted to `to`, per kernels.h, written to `out`; true when it is a NaN
// (then only NaN-ness is compared: payload bits may differ between backends).
bool ExpectedElement(const TypedHost& src, int64_t i, v1::DType to, char* out) {
  if (src.dtype == to) {  // a copy, bit for bit
    std::memcpy(out, src.bytes.data() + i * DTypeSize(to), DTypeSize(to));
    return false;
  }
  const bool from_float = src.dtype == v1::F32 || src.dtype == v1::BF16;
  const float x = from_float ? src.as_float[i] : 0.0f;
  const int64_t v = from_float ? 0 : src.as_int[i];
  switch (to) {
    case v1::F32: {
      // Integers round to nearest (the int64 sources are exact in double, see CastSource).
      const float f = from_float ? x : static_cast<float>(v);
      std::memcpy(out, &f, 4);
      return std::isnan(f);
    }
    case v1::BF16: {
      // Integers through float, as PyTorch converts them.
      const float f = from_float ? x : static_cast<float>(v);
      const uint16_t b = Bf16Of(f);
      std::memcpy(out, &b, 2);
      return std::isnan(f);
    }
    case v1::I32: {
      const int32_t r = from_float ? TruncateToI32(x)
                                   : static_cast<int32_t>(std::clamp<int64_t>(
                                         v, std::numeric_limits<int32_t>::min(),
                                         std::numeric_limits<int32_t>::max()));
      std::memcpy(out, &r, 4);
      return false;
    }
    default: {
      const int64_t r = from_float ? TruncateToI64(x) : v;
      std::memcpy(out, &r, 8);
      return false;
    }
  }
}

bool IsNaNElement(const char* e, v1::DType dtype) {
  if (dtype == v1::F32) {
    uint32_t bits;
    std::memcpy(&bits, e, 4);
    return (bits & 0x7FFFFFFFu) > 0x7F800000u;
  }
  uint16_t bits;
  std::memcpy(&bits, e, 2);
  return (bits & 0x7FFFu) > 0x7F80u;
}

std::string ElementHex(const char* e, int64_t size) {
  uint64_t bits = 0;
  std::memcpy(&bits, e, size);
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(2 * size) << std::setfill('0') << bits;
  return os.str();
}

// Every pair of types (the equal pairs copy), on special and random values, against the rules in
// kernels.h. The output holds one element more than n, which must stay poisoned.
TEST_P(KernelsConformanceTest, CastEveryPair) {
  for (v1::DType from : kDTypes) {
    const TypedHost src = CastSource(from, rng_);
    for (v1::DType to : kDTypes) {
      SCOPED_TRACE(::testing::Message() << "Cast " << v1::DType_Name(from) << " -> "
                                        << v1::DType_Name(to) << ", n=" << src.n);
      const int64_t out_size = DTypeSize(to);
      char* in = Upload(src.bytes);
      char* out = PoisonedBits<char>((src.n + 1) * out_size);
      k_->Cast(in, from, out, to, src.n);
      ASSERT_TRUE(Synced());
      const std::vector<char> got = Download(out, (src.n + 1) * out_size);
      int64_t bad = 0;
      std::ostringstream first;
      std::vector<char> want(out_size);
      for (int64_t i = 0; i < src.n; ++i) {
        const char* g = got.data() + i * out_size;
        const bool nan = ExpectedElement(src, i, to, want.data());
        const bool ok = nan ? IsNaNElement(g, to)
                            : std::memcmp(g, want.data(), out_size) == 0;
        if (ok) continue;
        if (bad < 5) {
          first << "\n  [" << i << "] input "
                << ElementHex(src.bytes.data() + i * DTypeSize(from), DTypeSize(from))
                << ": got " << ElementHex(g, out_size) << ", want "
                << (nan ? "a NaN" : ElementHex(want.data(), out_size));
        }
        ++bad;
      }
      EXPECT_EQ(bad, 0) << bad << " of " << src.n << " elements wrong:" << first.str();
      const std::vector<char> poison(out_size, static_cast<char>(kPoisonByte));
      EXPECT_EQ(std::memcmp(got.data() + src.n * out_size, poison.data(), out_size), 0)
          << "wrote past n elements";
    }
  }
}

// Float to bf16 keeps the sign of a NaN and of zero, and rounds ties to even.
TEST_P(KernelsConformanceTest, CastToBf16Rounding) {
  const std::vector<float> x = {1.0f + 0x1p-8f,  1.0f + 3 * 0x1p-8f, -(1.5f + 0x1p-8f),
                                1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 0x1p-8f - 0x1p-20f,
                                -0.0f, -kNaN, FromBits(0x7F800001u), 3.4e38f};
  const std::vector<uint16_t> want = {0x3F80, 0x3F82, 0xBFC0, 0x3F81, 0x3F80, 0x8000};
  float* dx = Upload(x);
  uint16_t* out = PoisonedBits<uint16_t>(static_cast<int64_t>(x.size()));
  k_->Cast(dx, v1::F32, out, v1::BF16, static_cast<int64_t>(x.size()));
  const std::vector<uint16_t> got = Download(out, static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
  EXPECT_EQ(got[6] & 0xFF80u, 0xFF80u) << "a negative NaN stays negative";
  EXPECT_NE(got[6] & 0x7Fu, 0u);
  EXPECT_EQ(got[7] & 0xFF80u, 0x7F80u) << "a NaN with its payload in the low half stays NaN";
  EXPECT_NE(got[7] & 0x7Fu, 0u);
  EXPECT_EQ(got[8], 0x7F80u) << "3.4e38 rounds up to infinity";
}

// --- Fill -------------------------------------------------------------------------------------

// Fill converts its double to each dtype, and writes exactly n elements.
TEST_P(KernelsConformanceTest, FillEveryDType) {
  struct Case {
    v1::DType dtype;
    double value;
    uint64_t want;  // the element's bits
  };
  const Case cases[] = {
      {v1::F32, 2.5, 0x40200000u},
      {v1::F32, -0.0, 0x80000000u},
      {v1::F32, 0.1, 0x3DCCCCCDu},          // the float nearest 0.1
      {v1::BF16, 1.0 + 0x1p-8, 0x3F80u},    // a tie: to even
      {v1::BF16, 1.0 + 3 * 0x1p-8, 0x3F82u},
      {v1::BF16, -2.5, 0xC020u},
      {v1::BF16, 0.1, 0x3DCDu},             // 0x3DCCCCCD rounds up
      {v1::I32, -7.9, static_cast<uint32_t>(-7)},
      {v1::I32, 3e9, 0x7FFFFFFFu},
      {v1::I32, -3e9, 0x80000000u},
      {v1::I32, std::nan(""), 0},
      {v1::I64, 1e15, 1000000000000000u},
      {v1::I64, -2.5, static_cast<uint64_t>(int64_t{-2})},
      {v1::I64, 1e30, 0x7FFFFFFFFFFFFFFFu},
      {v1::I64, -1e30, 0x8000000000000000u},
  };
  for (const Case& c : cases) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << "Fill " << v1::DType_Name(c.dtype) << " with "
                                        << c.value << ", n=" << n);
      const int64_t size = DTypeSize(c.dtype);
      // n elements one past the start of a buffer of n + 2: both ends must stay poisoned.
      char* buffer = PoisonedBits<char>((n + 2) * size);
      k_->Fill(buffer + size, n, c.dtype, c.value);
      ASSERT_TRUE(Synced());
      const std::vector<char> got = Download(buffer, (n + 2) * size);
      std::vector<char> want((n + 2) * size, static_cast<char>(kPoisonByte));
      for (int64_t i = 1; i <= n; ++i) std::memcpy(want.data() + i * size, &c.want, size);
      ASSERT_TRUE(got == want) << "first element " << ElementHex(got.data() + size, size)
                               << ", want " << ElementHex(want.data() + size, size);
    }
  }
}

// --- Slice and Unslice of any element size ------------------------------------------------------

// Slice and Unslice on 2-, 4- and 8-byte elements (random bit patterns, compared bit for bit), on
// views whose runs and offsets are and are not multiples of wider words, and from a pointer one
// element into its buffer.
template <typename Word>
void KernelsConformanceTest::CheckSliceAndUnslice() {
  struct View {
    int64_t outer, axis_len, inner, offset, length;
  };
  const View views[] = {
      {1, 3, 20, 1, 1},  {3, 5, 4, 1, 3},         {15, 4, 1, 1, 2},       {2, 9, 5, 0, 9},
      {7, 3, 1, 1, 1},   {1000, 7, 13, 6, 1},     {3, 300, 257, 17, 123}, {4, 6, 8, 2, 3},
  };
  std::uniform_int_distribution<uint64_t> bits;
  auto random_words = [&](int64_t n) {
    std::vector<Word> v(n);
    for (Word& w : v) w = static_cast<Word>(bits(rng_));
    return v;
  };
  for (const View& s : views) {
    for (bool shifted : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << sizeof(Word) << "-byte elements, outer=" << s.outer
                   << " axis_len=" << s.axis_len << " inner=" << s.inner << " offset=" << s.offset
                   << " length=" << s.length << (shifted ? ", one element into the buffers" : ""));
      const int64_t full = s.outer * s.axis_len * s.inner, piece = s.outer * s.length * s.inner;
      auto inside = [&](int64_t flat) {
        const int64_t i = (flat / s.inner) % s.axis_len;
        return i >= s.offset && i < s.offset + s.length;
      };
      const int64_t skip = shifted ? 1 : 0;
      const std::vector<Word> a = random_words(full + skip);
      std::vector<Word> want_slice;
      for (int64_t flat = 0; flat < full; ++flat) {
        if (inside(flat)) want_slice.push_back(a[skip + flat]);
      }
      Word* da = Upload(a);
      Word* sliced = PoisonedBits<Word>(piece + skip);
      k_->Slice(da + skip, sliced + skip, s.outer, s.axis_len, s.inner, s.offset, s.length,
                      sizeof(Word));
      ASSERT_TRUE(Synced());
      const std::vector<Word> got_slice = Download(sliced + skip, piece);
      EXPECT_TRUE(got_slice == want_slice) << "Slice";

      const std::vector<Word> before = random_words(full + skip),
                              update = random_words(piece + skip);
      std::vector<Word> want_full = before;
      for (int64_t flat = 0, next = 0; flat < full; ++flat) {
        if (inside(flat)) want_full[skip + flat] = update[skip + next++];
      }
      Word* out = Upload(before);
      k_->Unslice(Upload(update) + skip, out + skip, s.outer, s.axis_len, s.inner,
                        s.offset, s.length, sizeof(Word));
      ASSERT_TRUE(Synced());
      EXPECT_TRUE(Download(out, full + skip) == want_full) << "Unslice";
    }
  }
}

TEST_P(KernelsConformanceTest, SliceAndUnslice2ByteElements) {
  CheckSliceAndUnslice<uint16_t>();
}
TEST_P(KernelsConformanceTest, SliceAndUnslice4ByteElements) {
  CheckSliceAndUnslice<uint32_t>();
}
TEST_P(KernelsConformanceTest, SliceAndUnslice8ByteElements) {
  CheckSliceAndUnslice<uint64_t>();
}

// --- Memory statistics ------------------------------------------------------------------------

// The bytes a block of `bytes` holds as kernels.h documents it per backend, when it is not a
// cached block handed out again.
int64_t BlockBytes(const std::string& backend, int64_t bytes) {
  const int64_t granule = backend == "cpu" ? 64 : 512;
  return std::max<int64_t>(1, (bytes + granule - 1) / granule) * granule;
}

TEST_P(KernelsConformanceTest, MemoryStatsFollowAllocateAndFree) {
  const std::string backend = k_->name();
  auto block = [&](int64_t bytes) { return BlockBytes(backend, bytes); };
  auto expect_stats = [&](int64_t in_use, int64_t peak, const char* when) {
    const MemoryStats s = k_->memory_stats();
    EXPECT_EQ(s.bytes_in_use, in_use) << when;
    EXPECT_EQ(s.peak_bytes_in_use, peak) << when;
  };
  expect_stats(0, 0, "a new backend");

  void* a = k_->Allocate(1000);
  void* b = k_->Allocate(1);
  void* c = k_->Allocate(0);
  void* d = k_->Allocate(100000);
  ASSERT_TRUE(a != nullptr && b != nullptr && c != nullptr && d != nullptr);
  EXPECT_NE(b, c) << "every Allocate returns its own block, 0 bytes too";
  const int64_t all = block(1000) + block(1) + block(0) + block(100000);
  expect_stats(all, all, "after four allocations");

  k_->Free(b);
  k_->Free(d);
  k_->Free(nullptr);
  const int64_t a_c = block(1000) + block(0);
  expect_stats(a_c, all, "freeing leaves the peak");

  k_->ResetPeakMemoryStats();
  expect_stats(a_c, a_c, "after a reset");

  // 4000 bytes, for which neither freed block is a fit on either backend.
  void* e = k_->Allocate(4000);
  ASSERT_NE(e, nullptr);
  expect_stats(a_c + block(4000), a_c + block(4000), "after a fifth allocation");
  k_->Free(e);
  expect_stats(a_c, a_c + block(4000), "after freeing it");

  // The caching allocator hands the freed 4096-byte block out again for 3000 bytes and counts
  // it whole; the CPU backend allocates what it is asked for.
  void* f = k_->Allocate(3000);
  ASSERT_NE(f, nullptr);
  const int64_t f_bytes = backend == "cpu" ? block(3000) : block(4000);
  expect_stats(a_c + f_bytes, a_c + block(4000), "after reusing a freed block");

  k_->Free(a);
  k_->Free(c);
  k_->Free(f);
  expect_stats(0, a_c + block(4000), "everything freed");
  k_->ResetPeakMemoryStats();
  expect_stats(0, 0, "everything freed, after a reset");
  ASSERT_TRUE(Synced());
}

// memory_stats may be read from another thread while one thread allocates and frees.
TEST_P(KernelsConformanceTest, MemoryStatsReadConcurrently) {
  std::atomic<bool> done{false};
  std::thread worker([&] {
    for (int round = 0; round < 200; ++round) {
      void* p = k_->Allocate(1000 * (round % 7 + 1));
      void* q = k_->Allocate(64);
      k_->Free(p);
      k_->Free(q);
    }
    done = true;
  });
  int64_t reads = 0;
  while (!done || reads == 0) {
    const MemoryStats s = k_->memory_stats();
    ASSERT_GE(s.bytes_in_use, 0);
    ASSERT_LE(s.bytes_in_use, s.peak_bytes_in_use);
    ++reads;
  }
  worker.join();
  EXPECT_EQ(k_->memory_stats().bytes_in_use, 0);
  EXPECT_GT(reads, 0);
}

// A kBf16 Matmul's operand copies count (held by the CPU backend, in use during the call on
// CUDA, so they show in the peak); a float32 Matmul uses no memory of its own.
TEST_P(KernelsConformanceTest, MemoryStatsCountMatmulScratch) {
  const int64_t m = 64, n = 48, k = 96;
  float* a = Upload(Random(m * k));
  float* b = Upload(Random(k * n));
  float* c = Poisoned(m * n);
  ASSERT_TRUE(Synced());
  const MemoryStats before = k_->memory_stats();
  k_->ResetPeakMemoryStats();
  k_->Matmul(a, b, c, m, n, k, false, false);
  ASSERT_TRUE(Synced());
  const MemoryStats after = k_->memory_stats();
  if (bf16()) {
    // At least the bf16 bytes of both operands.
    EXPECT_GE(after.peak_bytes_in_use - before.bytes_in_use, (m * k + k * n) * 2);
  } else {
    EXPECT_EQ(after.peak_bytes_in_use, before.bytes_in_use);
    EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, KernelsConformanceTest, ::testing::ValuesIn(AllConfigs()),
                         ConfigName);

}  // namespace
}  // namespace weft
