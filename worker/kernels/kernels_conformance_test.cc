// Every Kernels method of every backend compiled into this binary (CompiledBackends(): cpu, and
// cuda under --config=cuda), each in both MatmulPrecisions, against float64 references written
// here. Each case allocates through the backend, copies random non-zero inputs in, poisons every
// output buffer with NaN so that an element the kernel skips cannot pass, synchronizes and reads
// the result back. Never compares one Weft kernel with another.
//
// A cuda configuration without a usable GPU is skipped with ProbeDevice's message, unless
// WEFT_REQUIRE_GPU=1 (`bazel test --config=cuda --test_env=WEFT_REQUIRE_GPU=1 ...`), where it
// fails instead so that a GPU run cannot pass by skipping.
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
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
    for (float* p : buffers_) k_->Free(p);
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
  float* Upload(const std::vector<float>& host) {
    const int64_t n = static_cast<int64_t>(host.size());
    float* p = k_->Allocate(n);
    EXPECT_NE(p, nullptr) << "Allocate(" << n << ")";
    buffers_.push_back(p);
    staged_.push_back(host);
    k_->CopyFromHost(staged_.back().data(), p, n);
    return p;
  }
  // An output buffer, every element NaN.
  float* Poisoned(int64_t n) { return Upload(std::vector<float>(n, kNaN)); }

  ::testing::AssertionResult Synced() {
    const absl::Status status = k_->Synchronize();
    if (status.ok()) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "Synchronize: " << status;
  }

  std::vector<float> Download(const float* p, int64_t n) {
    std::vector<float> host(n, kNaN);
    k_->CopyToHost(p, host.data(), n);
    EXPECT_TRUE(Synced()) << "after CopyToHost";
    return host;
  }

  std::mt19937 rng_{static_cast<uint32_t>(TestSeed())};
  std::unique_ptr<Kernels> k_;
  std::vector<float*> buffers_;
  std::deque<std::vector<float>> staged_;
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
  k_->Copy(a, whole, n);
  k_->Copy(a + 3, part + 5, n - 10);
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
  k_->Fill(filled, n, 2.5f);
  k_->Fill(a + 1, n - 2, -0.75f);
  ASSERT_TRUE(Synced());
  EXPECT_EQ(Download(filled, n), std::vector<float>(n, 2.5f));
  std::vector<float> want = src;
  for (int64_t i = 1; i < n - 1; ++i) want[i] = -0.75f;
  EXPECT_EQ(Download(a, n), want);

  // Free, then allocate again: the backend hands memory back out.
  for (int round = 0; round < 3; ++round) {
    std::vector<float*> ps;
    for (int64_t size : {int64_t{1}, int64_t{255}, kLarge, 4 * kLarge}) {
      float* p = k_->Allocate(size);
      ASSERT_NE(p, nullptr) << "Allocate(" << size << ")";
      ps.push_back(p);
    }
    ASSERT_TRUE(Synced());
    for (float* p : ps) k_->Free(p);
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
    k_->Slice(da, sliced, s.outer, s.axis_len, s.inner, s.offset, s.length);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(sliced, piece), want_slice, 0, 0)) << "Slice";

    const std::vector<float> before = Random(full), update = Random(piece);
    std::vector<double> want_full = ToDouble(before);
    for (int64_t flat = 0, next = 0; flat < full; ++flat) {
      if (inside(flat)) want_full[flat] = update[next++];
    }
    float* out = Upload(before);
    k_->Unslice(Upload(update), out, s.outer, s.axis_len, s.inner, s.offset, s.length);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, full), want_full, 0, 0)) << "Unslice";
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, KernelsConformanceTest, ::testing::ValuesIn(AllConfigs()),
                         ConfigName);

}  // namespace
}  // namespace weft
