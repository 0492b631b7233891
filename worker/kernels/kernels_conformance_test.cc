// Every Kernels method of every backend compiled into this binary (CompiledBackends(): cpu, and
// cuda under --config=cuda), each in both MatmulPrecisions, against float64 references written
// here (and, for Cast and Fill, integer and bit-level references written here, not common/dtype's
// conversions, which the CPU backend calls; for dropout masks, common/philox's PhiloxUnit, the
// generator kernels.h specifies them by). Each case allocates through the backend, copies
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
#include <functional>
#include <iomanip>
#include <initializer_list>
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
#include "common/philox.h"
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

// Step t (from 1) of PyTorch's AdamW in float64, the formula of kernels.h, on the parameter p
// and moments m, v, for the gradient g * grad_scale.
void ReferenceAdamW(const AdamWHyper& h, int64_t t, const std::vector<float>& g, double grad_scale,
                    std::vector<double>* p, std::vector<double>* m, std::vector<double>* v) {
  const double lr = h.lr, b1 = h.beta1, b2 = h.beta2, eps = h.eps, wd = h.weight_decay;
  for (size_t i = 0; i < g.size(); ++i) {
    const double gs = static_cast<double>(g[i]) * grad_scale;
    (*p)[i] -= lr * wd * (*p)[i];
    (*m)[i] = b1 * (*m)[i] + (1 - b1) * gs;
    (*v)[i] = b2 * (*v)[i] + (1 - b2) * gs * gs;
    const double m_hat = (*m)[i] / (1 - std::pow(b1, t));
    const double v_hat = (*v)[i] / (1 - std::pow(b2, t));
    (*p)[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
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
    k_->Sgd(dp, dg, n, lr, wd, nullptr);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllWithin(Download(dp, n), want, tol));
  }
}

// The clip coefficient multiplies the gradient before the update: g * s in float32, then the
// update as without it.
TEST_P(KernelsConformanceTest, SgdWithGradientScale) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const float lr = 0.05f, wd = 0.01f, scale = 0.3f;
    const std::vector<float> p = Random(n), g = Random(n);
    std::vector<double> want(n), tol(n);
    for (int64_t i = 0; i < n; ++i) {
      const double update =
          static_cast<double>(lr) * (g[i] * static_cast<double>(scale) + wd * p[i]);
      want[i] = p[i] - update;
      tol[i] = 5 * kUlp * (std::fabs(p[i]) + std::fabs(update));
    }
    float* dp = Upload(p);
    k_->Sgd(dp, Upload(g), n, lr, wd, Upload(std::vector<float>{scale}));
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllWithin(Download(dp, n), want, tol));
  }
}

TEST_P(KernelsConformanceTest, SumSquaresInDouble) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{255}, kLarge}) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> a = Random(n);
    double sum = 0;
    for (float x : a) sum += static_cast<double>(x) * x;
    float* out = Poisoned(1);
    k_->SumSquares(n > 0 ? Upload(a) : nullptr, n, out);
    ASSERT_TRUE(Synced());
    // A double sum leaves only the final float32 rounding.
    EXPECT_TRUE(AllClose(Download(out, 1), {sum}, 2 * kUlp, 0));
  }
}

TEST_P(KernelsConformanceTest, ClipCoefficientIsClipGradNorms) {
  for (const auto& [norm_sq, max_norm] : std::vector<std::pair<float, float>>{
           {16.0f, 1.0f}, {0.25f, 1.0f}, {4.0f, 2.0f}, {0.0f, 0.5f}, {1e6f, 3.0f}}) {
    SCOPED_TRACE(::testing::Message() << "norm_sq=" << norm_sq << " max_norm=" << max_norm);
    float* out = Poisoned(1);
    k_->ClipCoefficient(Upload(std::vector<float>{norm_sq}), max_norm, out);
    ASSERT_TRUE(Synced());
    const double want = std::min(1.0, max_norm / (std::sqrt(static_cast<double>(norm_sq)) + 1e-6));
    EXPECT_TRUE(AllClose(Download(out, 1), {want}, 3 * kUlp, 0));
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
    for (int64_t t = 1; t <= 5; ++t) {
      const std::vector<float> g = Random(n);
      ReferenceAdamW(h, t, g, 1.0, &rp, &rm, &rv);
      k_->AdamW(p, Upload(g), m, v, n, h, t, nullptr);
    }
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(p, n), rp, 1e-5, 1e-6)) << "param";
    EXPECT_TRUE(AllClose(Download(m, n), rm, 1e-5, 1e-6)) << "m";
    EXPECT_TRUE(AllClose(Download(v, n), rv, 1e-5, 1e-6)) << "v";
  }
}

// A gradient scale (the clip coefficient) enters the moments as g * s.
TEST_P(KernelsConformanceTest, AdamWWithGradientScale) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    AdamWHyper h;
    h.lr = 0.05f;
    h.weight_decay = 0.1f;
    const float scale = 0.25f;
    const std::vector<float> p0 = Random(n);
    std::vector<double> rp(p0.begin(), p0.end()), rm(n, 0.0), rv(n, 0.0);
    float* p = Upload(p0);
    float* m = Upload(std::vector<float>(n, 0.0f));
    float* v = Upload(std::vector<float>(n, 0.0f));
    for (int64_t t = 1; t <= 3; ++t) {
      const std::vector<float> g = Random(n);
      ReferenceAdamW(h, t, g, scale, &rp, &rm, &rv);
      k_->AdamW(p, Upload(g), m, v, n, h, t, Upload(std::vector<float>{scale}));
    }
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(p, n), rp, 1e-5, 1e-6)) << "param";
    EXPECT_TRUE(AllClose(Download(m, n), rm, 1e-5, 1e-6)) << "m";
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

// --- Transformers -------------------------------------------------------------------------------
//
// Each kernel against a float64 reference written here from kernels.h's comments. The references
// of the gradient kernels are themselves held to central finite differences of the forward
// references (NumericGradient) on a small case, so that a reference and a kernel cannot agree on
// a wrong formula. Ids come in both dtypes, with ids below and above a vocabulary shard.

constexpr v1::DType kIdDTypes[] = {v1::I32, v1::I64};

// ids as the kernels read them: n integers of dtype (I32 or I64).
std::vector<char> IdBytes(const std::vector<int64_t>& ids, v1::DType dtype) {
  std::vector<char> bytes(ids.size() * DTypeSize(dtype));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (dtype == v1::I64) {
      std::memcpy(bytes.data() + 8 * i, &ids[i], 8);
    } else {
      const int32_t id = static_cast<int32_t>(ids[i]);
      std::memcpy(bytes.data() + 4 * i, &id, 4);
    }
  }
  return bytes;
}

// n ids for a shard of `rows` rows at `offset`: mostly inside, some just below and just above
// it, and (from n = 5) the dtype's extremes, which must not overflow a kernel's arithmetic.
std::vector<int64_t> ShardIds(int64_t n, int64_t offset, int64_t rows, v1::DType dtype,
                              std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> near(offset - 3, offset + rows + 2);
  std::vector<int64_t> ids(n);
  for (int64_t& id : ids) id = near(rng);
  const int64_t lowest = dtype == v1::I64 ? std::numeric_limits<int64_t>::min()
                                          : std::numeric_limits<int32_t>::min();
  const int64_t highest = dtype == v1::I64 ? std::numeric_limits<int64_t>::max()
                                           : std::numeric_limits<int32_t>::max();
  const int64_t forced[] = {offset - 1, offset + rows, offset, lowest, highest};
  for (int64_t i = 0; i < std::min<int64_t>(n, 5); ++i) ids[(i * 7) % n] = forced[i];
  return ids;
}

// The row of the shard that id falls on, or -1 (kernels.h's Embedding).
int64_t ShardRowOf(int64_t id, int64_t offset, int64_t rows) {
  if (id < offset || id - offset >= rows) return -1;  // ids here are far from overflowing
  return id - offset;
}

// The gradient of f at x by central differences, (f(x + h e_i) - f(x - h e_i)) / 2h per i:
// truncation error O(h^2 f'''), rounding error O(eps |f| / h), both near 1e-10 here.
std::vector<double> NumericGradient(const std::function<double(const std::vector<double>&)>& f,
                                    std::vector<double> x, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double up = f(x);
    x[i] = xi - h;
    const double down = f(x);
    x[i] = xi;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

// An analytic float64 gradient agrees with the central differences to 1e-6 of the gradient's
// scale: far above the differences' own error, far below any wrong term of a formula.
::testing::AssertionResult GradientsAgree(const std::vector<double>& analytic,
                                          const std::vector<double>& numeric) {
  if (analytic.size() != numeric.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << analytic.size() << " and "
                                         << numeric.size();
  }
  double scale = 0;
  for (double g : numeric) scale = std::max(scale, std::fabs(g));
  for (size_t i = 0; i < analytic.size(); ++i) {
    if (std::fabs(analytic[i] - numeric[i]) > 1e-6 * (std::fabs(numeric[i]) + scale)) {
      return ::testing::AssertionFailure() << "[" << i << "] analytic " << analytic[i]
                                           << ", central difference " << numeric[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// sum_i w[i] y[i]: the scalar whose gradient a VJP with dy = w computes.
double Dot(const std::vector<double>& w, const std::vector<double>& y) {
  double sum = 0;
  for (size_t i = 0; i < w.size(); ++i) sum += w[i] * y[i];
  return sum;
}

// a, b, ... concatenated, and the inverse: the pieces of x of the given sizes.
std::vector<double> Concat(std::initializer_list<const std::vector<double>*> parts) {
  std::vector<double> all;
  for (const std::vector<double>* p : parts) all.insert(all.end(), p->begin(), p->end());
  return all;
}
std::vector<std::vector<double>> Split(const std::vector<double>& x,
                                       std::initializer_list<size_t> sizes) {
  std::vector<std::vector<double>> parts;
  size_t at = 0;
  for (size_t size : sizes) {
    parts.emplace_back(x.begin() + at, x.begin() + at + size);
    at += size;
  }
  return parts;
}

// --- Embedding

std::vector<double> ReferenceEmbedding(const std::vector<int64_t>& ids,
                                       const std::vector<double>& table, int64_t table_rows,
                                       int64_t dim, int64_t row_offset) {
  std::vector<double> out(ids.size() * dim, 0.0);
  for (size_t r = 0; r < ids.size(); ++r) {
    const int64_t row = ShardRowOf(ids[r], row_offset, table_rows);
    if (row < 0) continue;
    for (int64_t c = 0; c < dim; ++c) out[r * dim + c] = table[row * dim + c];
  }
  return out;
}

// grad_table and its tolerance: float32 accumulation in any order over each row's ids
// (kernels.h allows it), 2 * count * 2^-23 * sum |dy|; rows no id falls on are exactly zero.
struct EmbeddingGradReference {
  std::vector<double> grad, tol;
};
EmbeddingGradReference ReferenceEmbeddingGrad(const std::vector<int64_t>& ids,
                                              const std::vector<double>& dy, int64_t table_rows,
                                              int64_t dim, int64_t row_offset) {
  EmbeddingGradReference r{std::vector<double>(table_rows * dim, 0.0),
                           std::vector<double>(table_rows * dim, 0.0)};
  std::vector<int64_t> count(table_rows, 0);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t row = ShardRowOf(ids[i], row_offset, table_rows);
    if (row < 0) continue;
    ++count[row];
    for (int64_t c = 0; c < dim; ++c) {
      r.grad[row * dim + c] += dy[i * dim + c];
      r.tol[row * dim + c] += std::fabs(dy[i * dim + c]);
    }
  }
  for (int64_t row = 0; row < table_rows; ++row) {
    for (int64_t c = 0; c < dim; ++c) r.tol[row * dim + c] *= 2.0 * count[row] * kUlp;
  }
  return r;
}

struct EmbeddingShape {
  int64_t n, table_rows, dim, row_offset;
};
std::ostream& operator<<(std::ostream& os, const EmbeddingShape& s) {
  return os << "n=" << s.n << " table_rows=" << s.table_rows << " dim=" << s.dim
            << " row_offset=" << s.row_offset;
}
const EmbeddingShape kEmbeddingShapes[] = {
    {1, 1, 1, 0}, {37, 11, 5, 0}, {64, 50, 33, 100}, {200, 7, 129, 7}, {3, 4, 1, 1000},
};

// Every id's row of the shard, or zeros; ids outside the shard (below, above, the dtype's
// extremes) read nothing.
TEST_P(KernelsConformanceTest, EmbeddingGathersTheShardsRows) {
  for (v1::DType dtype : kIdDTypes) {
    std::vector<EmbeddingShape> shapes(std::begin(kEmbeddingShapes), std::end(kEmbeddingShapes));
    // A shard past 2^32, reachable by I64 ids only.
    if (dtype == v1::I64) shapes.push_back({20, 9, 3, int64_t{1} << 33});
    for (const EmbeddingShape& s : shapes) {
      SCOPED_TRACE(::testing::Message() << v1::DType_Name(dtype) << " " << s);
      const std::vector<int64_t> ids = ShardIds(s.n, s.row_offset, s.table_rows, dtype, rng_);
      const std::vector<float> table = Random(s.table_rows * s.dim);
      float* out = Poisoned(s.n * s.dim);
      k_->Embedding(Upload(IdBytes(ids, dtype)), dtype, Upload(table), out, s.n, s.table_rows,
                    s.dim, s.row_offset);
      ASSERT_TRUE(Synced());
      EXPECT_TRUE(AllClose(Download(out, s.n * s.dim),
                           ReferenceEmbedding(ids, ToDouble(table), s.table_rows, s.dim,
                                              s.row_offset),
                           0, 0));
    }
  }
}

// Repeated ids add up; rows no id falls on are zero. The reference is held to the central
// differences of sum(dy * Embedding(table)).
TEST_P(KernelsConformanceTest, EmbeddingGradSumsRepeatedIds) {
  {
    const int64_t n = 9, table_rows = 4, dim = 3, row_offset = 2;
    const std::vector<int64_t> ids = ShardIds(n, row_offset, table_rows, v1::I64, rng_);
    const std::vector<double> dy = ToDouble(Random(n * dim));
    const auto loss = [&](const std::vector<double>& table) {
      return Dot(dy, ReferenceEmbedding(ids, table, table_rows, dim, row_offset));
    };
    EXPECT_TRUE(GradientsAgree(ReferenceEmbeddingGrad(ids, dy, table_rows, dim, row_offset).grad,
                               NumericGradient(loss, ToDouble(Random(table_rows * dim)))));
  }
  for (v1::DType dtype : kIdDTypes) {
    for (const EmbeddingShape& s : kEmbeddingShapes) {
      SCOPED_TRACE(::testing::Message() << v1::DType_Name(dtype) << " " << s);
      const std::vector<int64_t> ids = ShardIds(s.n, s.row_offset, s.table_rows, dtype, rng_);
      const std::vector<float> dy = Random(s.n * s.dim);
      float* grad = Poisoned(s.table_rows * s.dim);
      k_->EmbeddingGrad(Upload(IdBytes(ids, dtype)), dtype, Upload(dy), grad, s.n, s.table_rows,
                        s.dim, s.row_offset);
      ASSERT_TRUE(Synced());
      const EmbeddingGradReference want =
          ReferenceEmbeddingGrad(ids, ToDouble(dy), s.table_rows, s.dim, s.row_offset);
      EXPECT_TRUE(AllWithin(Download(grad, s.table_rows * s.dim), want.grad, want.tol));
    }
  }
}

// --- LayerNorm and RmsNorm
//
// Tolerances: kernels.h lets a backend reduce a row in float32 (in any fixed order). For random
// rows that error grows like a random walk, O(sqrt(dim)) ulps of the row's largest |x|, and an
// element carries it divided by the row's standard deviation: so the unit of a normalized value's
// error is `range` = max|x - 0| / std (about 2 for centred rows, large for a row far from zero,
// where a one-pass float32 variance loses everything), plus a few roundings per element.

double NormUlps(int64_t dim) { return 8.0 + 2.0 * std::sqrt(static_cast<double>(dim)); }

struct NormShape {
  int64_t rows, dim;
  double shift;  // added to every x: a row far from zero
};
std::ostream& operator<<(std::ostream& os, const NormShape& s) {
  return os << "rows=" << s.rows << " dim=" << s.dim << " shift=" << s.shift;
}
const NormShape kNormShapes[] = {
    {1, 1, 0}, {1, 7, 0}, {5, 33, 0}, {37, 256, 0}, {3, 1000, 0}, {4, 64, 300},
};

// A row's mean and 1 / sqrt(var + eps) (biased variance), and its range max|x| / std.
struct Moments {
  double mean = 0, rstd = 0, range = 0;
};
Moments MomentsOf(const double* x, int64_t dim, double eps) {
  Moments m;
  double max_abs = 0;
  for (int64_t c = 0; c < dim; ++c) {
    m.mean += x[c];
    max_abs = std::max(max_abs, std::fabs(x[c]));
  }
  m.mean /= dim;
  double var = 0;
  for (int64_t c = 0; c < dim; ++c) var += (x[c] - m.mean) * (x[c] - m.mean);
  var /= dim;
  m.rstd = 1.0 / std::sqrt(var + eps);
  m.range = max_abs * m.rstd;
  return m;
}

struct NormReference {
  std::vector<double> y, tol;
};
NormReference ReferenceLayerNorm(const std::vector<double>& x, const std::vector<double>& gamma,
                                 const std::vector<double>& beta, int64_t rows, int64_t dim,
                                 double eps) {
  NormReference r{std::vector<double>(rows * dim), std::vector<double>(rows * dim)};
  for (int64_t i = 0; i < rows; ++i) {
    const Moments m = MomentsOf(&x[i * dim], dim, eps);
    for (int64_t c = 0; c < dim; ++c) {
      const double xhat = (x[i * dim + c] - m.mean) * m.rstd;
      r.y[i * dim + c] = xhat * gamma[c] + beta[c];
      r.tol[i * dim + c] =
          NormUlps(dim) * kUlp * (std::fabs(gamma[c]) * (std::fabs(xhat) + m.range) +
                                  std::fabs(beta[c]));
    }
  }
  return r;
}

// dx, dgamma and dbeta with their tolerances: dx's terms' magnitudes in NormUlps, dgamma's and
// dbeta's float32 accumulation over rows on top (as BiasGrad's).
struct LayerNormGradReference {
  std::vector<double> dx, dgamma, dbeta, tol_dx, tol_dgamma, tol_dbeta;
};
LayerNormGradReference ReferenceLayerNormGrad(const std::vector<double>& x,
                                              const std::vector<double>& gamma,
                                              const std::vector<double>& dy, int64_t rows,
                                              int64_t dim, double eps) {
  LayerNormGradReference r;
  r.dx.assign(rows * dim, 0);
  r.tol_dx.assign(rows * dim, 0);
  r.dgamma.assign(dim, 0);
  r.dbeta.assign(dim, 0);
  r.tol_dgamma.assign(dim, 0);
  r.tol_dbeta.assign(dim, 0);
  for (int64_t i = 0; i < rows; ++i) {
    const Moments m = MomentsOf(&x[i * dim], dim, eps);
    std::vector<double> xhat(dim), g(dim);
    double g_mean = 0, gx_mean = 0, g_abs = 0, gx_abs = 0;
    for (int64_t c = 0; c < dim; ++c) {
      xhat[c] = (x[i * dim + c] - m.mean) * m.rstd;
      g[c] = dy[i * dim + c] * gamma[c];
      g_mean += g[c] / dim;
      gx_mean += g[c] * xhat[c] / dim;
      g_abs += std::fabs(g[c]) / dim;
      gx_abs += std::fabs(g[c]) * (std::fabs(xhat[c]) + m.range) / dim;
    }
    for (int64_t c = 0; c < dim; ++c) {
      const double d = dy[i * dim + c];
      r.dx[i * dim + c] = m.rstd * (g[c] - g_mean - xhat[c] * gx_mean);
      r.tol_dx[i * dim + c] = NormUlps(dim) * kUlp * m.rstd *
                              (std::fabs(g[c]) + g_abs + (std::fabs(xhat[c]) + m.range) * gx_abs);
      r.dgamma[c] += d * xhat[c];
      r.dbeta[c] += d;
      r.tol_dgamma[c] += std::fabs(d) * (std::fabs(xhat[c]) + m.range);
      r.tol_dbeta[c] += std::fabs(d);
    }
  }
  for (int64_t c = 0; c < dim; ++c) {
    r.tol_dgamma[c] *= (NormUlps(dim) + 2.0 * rows) * kUlp;
    r.tol_dbeta[c] *= 2.0 * rows * kUlp;
  }
  return r;
}

NormReference ReferenceRmsNorm(const std::vector<double>& x, const std::vector<double>& gamma,
                               int64_t rows, int64_t dim, double eps) {
  NormReference r{std::vector<double>(rows * dim), std::vector<double>(rows * dim)};
  for (int64_t i = 0; i < rows; ++i) {
    double squares = 0;
    for (int64_t c = 0; c < dim; ++c) squares += x[i * dim + c] * x[i * dim + c];
    const double u = 1.0 / std::sqrt(squares / dim + eps);
    for (int64_t c = 0; c < dim; ++c) {
      r.y[i * dim + c] = x[i * dim + c] * u * gamma[c];
      // A sum of squares has no cancellation: its error is relative.
      r.tol[i * dim + c] = NormUlps(dim) * kUlp * std::fabs(r.y[i * dim + c]);
    }
  }
  return r;
}

struct RmsNormGradReference {
  std::vector<double> dx, dgamma, tol_dx, tol_dgamma;
};
RmsNormGradReference ReferenceRmsNormGrad(const std::vector<double>& x,
                                          const std::vector<double>& gamma,
                                          const std::vector<double>& dy, int64_t rows,
                                          int64_t dim, double eps) {
  RmsNormGradReference r;
  r.dx.assign(rows * dim, 0);
  r.tol_dx.assign(rows * dim, 0);
  r.dgamma.assign(dim, 0);
  r.tol_dgamma.assign(dim, 0);
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = &x[i * dim];
    const double* dyr = &dy[i * dim];
    double squares = 0, gx = 0, gx_abs = 0;
    for (int64_t c = 0; c < dim; ++c) {
      squares += xr[c] * xr[c];
      gx += dyr[c] * gamma[c] * xr[c];
      gx_abs += std::fabs(dyr[c] * gamma[c] * xr[c]);
    }
    const double u = 1.0 / std::sqrt(squares / dim + eps);
    for (int64_t c = 0; c < dim; ++c) {
      // y = x u gamma, du/dx_c = -u^3 x_c / dim.
      r.dx[i * dim + c] = u * dyr[c] * gamma[c] - u * u * u * xr[c] * gx / dim;
      r.tol_dx[i * dim + c] =
          NormUlps(dim) * kUlp *
          (u * std::fabs(dyr[c] * gamma[c]) + u * u * u * std::fabs(xr[c]) * gx_abs / dim);
      r.dgamma[c] += dyr[c] * xr[c] * u;
      r.tol_dgamma[c] += std::fabs(dyr[c] * xr[c] * u);
    }
  }
  for (double& t : r.tol_dgamma) t *= (NormUlps(dim) + 2.0 * rows) * kUlp;
  return r;
}

// x of a norm case: random, shifted by s.shift.
std::vector<float> NormInput(const std::vector<float>& random, double shift) {
  std::vector<float> x = random;
  for (float& v : x) v = static_cast<float>(v + shift);
  return x;
}

TEST_P(KernelsConformanceTest, LayerNorm) {
  const float eps = 1e-5f;
  for (const NormShape& s : kNormShapes) {
    SCOPED_TRACE(::testing::Message() << s);
    const std::vector<float> x = NormInput(Random(s.rows * s.dim), s.shift);
    const std::vector<float> gamma = Random(s.dim), beta = Random(s.dim);
    float* y = Poisoned(s.rows * s.dim);
    k_->LayerNorm(Upload(x), Upload(gamma), Upload(beta), y, s.rows, s.dim, eps);
    ASSERT_TRUE(Synced());
    const NormReference want =
        ReferenceLayerNorm(ToDouble(x), ToDouble(gamma), ToDouble(beta), s.rows, s.dim, eps);
    EXPECT_TRUE(AllWithin(Download(y, s.rows * s.dim), want.y, want.tol));
  }
}

// dx, and dgamma and dbeta each given or null (null ones are not written).
TEST_P(KernelsConformanceTest, LayerNormGrad) {
  const float eps = 1e-5f;
  {
    const int64_t rows = 3, dim = 6;
    const std::vector<double> x = ToDouble(Random(rows * dim)), gamma = ToDouble(Random(dim)),
                              beta = ToDouble(Random(dim)), dy = ToDouble(Random(rows * dim));
    const LayerNormGradReference grad = ReferenceLayerNormGrad(x, gamma, dy, rows, dim, eps);
    const auto loss = [&](const std::vector<double>& xgb) {
      const std::vector<std::vector<double>> p = Split(xgb, {x.size(), gamma.size(), beta.size()});
      return Dot(dy, ReferenceLayerNorm(p[0], p[1], p[2], rows, dim, eps).y);
    };
    EXPECT_TRUE(GradientsAgree(Concat({&grad.dx, &grad.dgamma, &grad.dbeta}),
                               NumericGradient(loss, Concat({&x, &gamma, &beta}))));
  }
  for (const NormShape& s : kNormShapes) {
    for (int outputs = 0; outputs < 4; ++outputs) {
      const bool with_dgamma = (outputs & 1) != 0, with_dbeta = (outputs & 2) != 0;
      SCOPED_TRACE(::testing::Message() << s << " dgamma=" << with_dgamma
                                        << " dbeta=" << with_dbeta);
      const std::vector<float> x = NormInput(Random(s.rows * s.dim), s.shift);
      const std::vector<float> gamma = Random(s.dim), dy = Random(s.rows * s.dim);
      float* dx = Poisoned(s.rows * s.dim);
      float* dgamma = Poisoned(s.dim);
      float* dbeta = Poisoned(s.dim);
      k_->LayerNormGrad(Upload(x), Upload(gamma), Upload(dy), dx, with_dgamma ? dgamma : nullptr,
                        with_dbeta ? dbeta : nullptr, s.rows, s.dim, eps);
      ASSERT_TRUE(Synced());
      const LayerNormGradReference want =
          ReferenceLayerNormGrad(ToDouble(x), ToDouble(gamma), ToDouble(dy), s.rows, s.dim, eps);
      EXPECT_TRUE(AllWithin(Download(dx, s.rows * s.dim), want.dx, want.tol_dx)) << "dx";
      if (with_dgamma) {
        EXPECT_TRUE(AllWithin(Download(dgamma, s.dim), want.dgamma, want.tol_dgamma)) << "dgamma";
      }
      if (with_dbeta) {
        EXPECT_TRUE(AllWithin(Download(dbeta, s.dim), want.dbeta, want.tol_dbeta)) << "dbeta";
      }
    }
  }
}

TEST_P(KernelsConformanceTest, RmsNorm) {
  const float eps = 1e-6f;
  for (const NormShape& s : kNormShapes) {
    SCOPED_TRACE(::testing::Message() << s);
    const std::vector<float> x = NormInput(Random(s.rows * s.dim), s.shift);
    const std::vector<float> gamma = Random(s.dim);
    float* y = Poisoned(s.rows * s.dim);
    k_->RmsNorm(Upload(x), Upload(gamma), y, s.rows, s.dim, eps);
    ASSERT_TRUE(Synced());
    const NormReference want = ReferenceRmsNorm(ToDouble(x), ToDouble(gamma), s.rows, s.dim, eps);
    EXPECT_TRUE(AllWithin(Download(y, s.rows * s.dim), want.y, want.tol));
  }
}

TEST_P(KernelsConformanceTest, RmsNormGrad) {
  const float eps = 1e-6f;
  {
    const int64_t rows = 3, dim = 6;
    const std::vector<double> x = ToDouble(Random(rows * dim)), gamma = ToDouble(Random(dim)),
                              dy = ToDouble(Random(rows * dim));
    const RmsNormGradReference grad = ReferenceRmsNormGrad(x, gamma, dy, rows, dim, eps);
    const auto loss = [&](const std::vector<double>& xg) {
      const std::vector<std::vector<double>> p = Split(xg, {x.size(), gamma.size()});
      return Dot(dy, ReferenceRmsNorm(p[0], p[1], rows, dim, eps).y);
    };
    EXPECT_TRUE(GradientsAgree(Concat({&grad.dx, &grad.dgamma}),
                               NumericGradient(loss, Concat({&x, &gamma}))));
  }
  for (const NormShape& s : kNormShapes) {
    for (bool with_dgamma : {true, false}) {
      SCOPED_TRACE(::testing::Message() << s << " dgamma=" << with_dgamma);
      const std::vector<float> x = NormInput(Random(s.rows * s.dim), s.shift);
      const std::vector<float> gamma = Random(s.dim), dy = Random(s.rows * s.dim);
      float* dx = Poisoned(s.rows * s.dim);
      float* dgamma = Poisoned(s.dim);
      k_->RmsNormGrad(Upload(x), Upload(gamma), Upload(dy), dx, with_dgamma ? dgamma : nullptr,
                      s.rows, s.dim, eps);
      ASSERT_TRUE(Synced());
      const RmsNormGradReference want =
          ReferenceRmsNormGrad(ToDouble(x), ToDouble(gamma), ToDouble(dy), s.rows, s.dim, eps);
      EXPECT_TRUE(AllWithin(Download(dx, s.rows * s.dim), want.dx, want.tol_dx)) << "dx";
      if (with_dgamma) {
        EXPECT_TRUE(AllWithin(Download(dgamma, s.dim), want.dgamma, want.tol_dgamma)) << "dgamma";
      }
    }
  }
}

// --- Elementwise: GeluTanh, Silu, Mul
//
// Tolerances are ulps of the magnitude of the formula's terms (GELU's 1 + tanh cancels for
// negative x), so a backend may evaluate in float32 or double.

// Random inputs and the points where a careless formula overflows or cancels.
std::vector<float> ActivationInput(std::vector<float> x) {
  const float special[] = {0.0f, -6.0f, 6.0f, -20.0f, 20.0f, -100.0f, 100.0f, 1e-3f, -1e-3f};
  for (size_t i = 0; i < sizeof(special) / sizeof(special[0]) && i < x.size(); ++i) {
    x[x.size() - 1 - i] = special[i];
  }
  return x;
}

constexpr double kGeluC = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

double GeluTanhOf(double x) { return 0.5 * x * (1 + std::tanh(kGeluC * (x + kGeluCubic * x * x * x))); }

TEST_P(KernelsConformanceTest, GeluTanh) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> x = ActivationInput(Random(n));
    std::vector<double> want(n), tol(n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], t = std::tanh(kGeluC * (v + kGeluCubic * v * v * v));
      want[i] = GeluTanhOf(v);
      tol[i] = 8 * kUlp * 0.5 * std::fabs(v) * (1 + std::fabs(t));
    }
    float* out = Poisoned(n);
    k_->GeluTanh(Upload(x), out, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllWithin(Download(out, n), want, tol));
  }
}

// d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t the tanh.
TEST_P(KernelsConformanceTest, GeluTanhGrad) {
  const auto grad = [](double v, double* magnitude) {
    const double t = std::tanh(kGeluC * (v + kGeluCubic * v * v * v));
    const double du = kGeluC * (1 + 3 * kGeluCubic * v * v);
    *magnitude = 0.5 * (1 + std::fabs(t)) + 0.5 * std::fabs(v) * (1 + t * t) * du;
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * du;
  };
  {
    const std::vector<double> x = ToDouble(Random(16));
    std::vector<double> analytic(x.size());
    double magnitude;
    for (size_t i = 0; i < x.size(); ++i) analytic[i] = grad(x[i], &magnitude);
    const auto sum = [](const std::vector<double>& v) {
      double s = 0;
      for (double e : v) s += GeluTanhOf(e);
      return s;
    };
    EXPECT_TRUE(GradientsAgree(analytic, NumericGradient(sum, x)));
  }
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> x = ActivationInput(Random(n)), dy = Random(n);
    std::vector<double> want(n), tol(n);
    for (int64_t i = 0; i < n; ++i) {
      double magnitude;
      want[i] = dy[i] * grad(x[i], &magnitude);
      tol[i] = 8 * kUlp * std::fabs(dy[i]) * magnitude;
    }
    float* out = Poisoned(n);
    k_->GeluTanhGrad(Upload(x), Upload(dy), out, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllWithin(Download(out, n), want, tol));
  }
}

double SigmoidOf(double x) { return 1 / (1 + std::exp(-x)); }

// SiLU's tails underflow into float32's subnormals, which are spaced this far apart.
const double kSubnormalStep = std::numeric_limits<float>::denorm_min();

TEST_P(KernelsConformanceTest, Silu) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> x = ActivationInput(Random(n));
    std::vector<double> want(n), tol(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = x[i] * SigmoidOf(x[i]);
      tol[i] = 8 * kUlp * std::fabs(want[i]) + kSubnormalStep;
    }
    float* out = Poisoned(n);
    k_->Silu(Upload(x), out, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllWithin(Download(out, n), want, tol));
  }
}

TEST_P(KernelsConformanceTest, SiluGrad) {
  {
    const std::vector<double> x = ToDouble(Random(16));
    std::vector<double> analytic(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double s = SigmoidOf(x[i]);
      analytic[i] = s * (1 + x[i] * (1 - s));
    }
    const auto sum = [](const std::vector<double>& v) {
      double s = 0;
      for (double e : v) s += e * SigmoidOf(e);
      return s;
    };
    EXPECT_TRUE(GradientsAgree(analytic, NumericGradient(sum, x)));
  }
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> x = ActivationInput(Random(n)), dy = Random(n);
    std::vector<double> want(n), tol(n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i], s = SigmoidOf(v);
      want[i] = dy[i] * s * (1 + v * (1 - s));
      tol[i] = 8 * kUlp * std::fabs(dy[i]) * s * (1 + std::fabs(v) * (1 - s)) + kSubnormalStep;
    }
    float* out = Poisoned(n);
    k_->SiluGrad(Upload(x), Upload(dy), out, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllWithin(Download(out, n), want, tol));
  }
}

TEST_P(KernelsConformanceTest, MulAndAliasing) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const std::vector<float> a = Random(n), b = Random(n);
    // The product of two floats is exact in double: this is the correctly rounded float product.
    std::vector<double> want(n), squares(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = static_cast<float>(static_cast<double>(a[i]) * b[i]);
      squares[i] = static_cast<float>(static_cast<double>(a[i]) * a[i]);
    }
    float* da = Upload(a);
    float* db = Upload(b);
    float* out = Poisoned(n);
    k_->Mul(da, db, out, n);
    float* into_a = Upload(a);
    k_->Mul(into_a, db, into_a, n);
    float* into_b = Upload(b);
    k_->Mul(da, into_b, into_b, n);
    float* squared = Upload(a);
    k_->Mul(squared, squared, squared, n);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, n), want, 0, 0));
    EXPECT_TRUE(AllClose(Download(into_a, n), want, 0, 0)) << "out aliases a";
    EXPECT_TRUE(AllClose(Download(into_b, n), want, 0, 0)) << "out aliases b";
    EXPECT_TRUE(AllClose(Download(squared, n), squares, 0, 0)) << "out, a and b the same";
  }
}

// --- Rope

struct RopeShape {
  int64_t batch, seq, heads, head_dim, pos_offset;
  float theta;
};

// Rope in float64 from kernels.h, with inv_freq = 1 / theta^(2i / D) and the angle computed in
// float32 as specified (the test's powf is glibc's, within an ulp of the exact power), then cos
// and sin of that float angle in double. tol: 4 ulps of |x1| + |x2| for the roundings of cos,
// sin and the rotation, plus angle_ulps ulps of the angle (a backend's powf may differ from
// glibc's by an ulp, which moves the angle by an ulp of itself).
std::vector<double> ReferenceRope(const std::vector<double>& x, const RopeShape& s, bool inverse,
                                  double angle_ulps, std::vector<double>* tol) {
  const int64_t half = s.head_dim / 2;
  std::vector<double> out(x.size());
  if (tol != nullptr) tol->assign(x.size(), 0);
  for (int64_t t = 0; t < s.seq; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float inv_freq =
          1.0f / std::pow(s.theta, static_cast<float>(2 * i) / static_cast<float>(s.head_dim));
      const float angle = static_cast<float>(s.pos_offset + t) * inv_freq;
      const double c = std::cos(static_cast<double>(angle));
      const double sn = (inverse ? -1 : 1) * std::sin(static_cast<double>(angle));
      for (int64_t b = 0; b < s.batch; ++b) {
        for (int64_t h = 0; h < s.heads; ++h) {
          const int64_t at = ((b * s.seq + t) * s.heads + h) * s.head_dim;
          const double x1 = x[at + i], x2 = x[at + i + half];
          out[at + i] = x1 * c - x2 * sn;
          out[at + i + half] = x2 * c + x1 * sn;
          if (tol != nullptr) {
            const double t12 = (std::fabs(x1) + std::fabs(x2)) * kUlp *
                               (4 + angle_ulps * std::fabs(static_cast<double>(angle)));
            (*tol)[at + i] = t12;
            (*tol)[at + i + half] = t12;
          }
        }
      }
    }
  }
  return out;
}

// Forward and inverse on odd shapes and positions up to a few thousand; the inverse is held to
// the central differences of sum(dy * Rope(x)), which it must be (the VJP).
TEST_P(KernelsConformanceTest, RopeAndInverse) {
  {
    const RopeShape s{1, 3, 2, 6, 5, 10000.0f};
    const std::vector<double> dy = ToDouble(Random(s.seq * s.heads * s.head_dim));
    const auto loss = [&](const std::vector<double>& x) {
      return Dot(dy, ReferenceRope(x, s, false, 0, nullptr));
    };
    EXPECT_TRUE(GradientsAgree(ReferenceRope(dy, s, true, 0, nullptr),
                               NumericGradient(loss, ToDouble(Random(dy.size())))));
  }
  const RopeShape shapes[] = {
      {1, 1, 1, 2, 0, 10000.0f},   {3, 37, 4, 64, 0, 10000.0f}, {2, 5, 3, 6, 17, 500000.0f},
      {1, 9, 2, 130, 3000, 10000.0f}, {2, 1, 4, 8, 4095, 10000.0f},
  };
  for (const RopeShape& s : shapes) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "batch=" << s.batch << " seq=" << s.seq
                                        << " heads=" << s.heads << " head_dim=" << s.head_dim
                                        << " pos_offset=" << s.pos_offset << " theta=" << s.theta
                                        << " inverse=" << inverse);
      const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
      const std::vector<float> x = Random(n);
      float* out = Poisoned(n);
      k_->Rope(Upload(x), out, s.batch, s.seq, s.heads, s.head_dim, s.pos_offset, s.theta,
               inverse);
      ASSERT_TRUE(Synced());
      std::vector<double> tol;
      const std::vector<double> want = ReferenceRope(ToDouble(x), s, inverse, 4, &tol);
      EXPECT_TRUE(AllWithin(Download(out, n), want, tol));
    }
  }
}

// Positions and angles are float32, as Hugging Face computes them: with theta = 256 and D = 8
// every inv_freq is a power of two (1, 1/4, 1/16, 1/64), so the angle is exactly float(p) times
// it on every backend and the tolerance has no slack for it; near 2^24, float(p) is not p, and an
// angle taken in double (p exactly) is off by up to a radian.
TEST_P(KernelsConformanceTest, RopeAnglesAreFloat32) {
  const RopeShape s{1, 41, 2, 8, (int64_t{1} << 24) - 20, 256.0f};
  const int64_t n = s.seq * s.heads * s.head_dim;
  const std::vector<float> x = Random(n);
  std::vector<double> tol;
  const std::vector<double> want = ReferenceRope(ToDouble(x), s, false, 0, &tol);
  // The reference with angles in double: far outside the tolerance somewhere.
  double worst = 0;
  for (int64_t t = 0; t < s.seq; ++t) {
    const double p = static_cast<double>(s.pos_offset + t);
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t at = (t * s.heads + h) * s.head_dim;
      const double x1 = x[at], x2 = x[at + 4];
      worst = std::max(worst, std::fabs(x1 * std::cos(p) - x2 * std::sin(p) - want[at]) /
                                  (tol[at] + 1e-30));
    }
  }
  ASSERT_GT(worst, 1000) << "the case does not tell float32 angles from double ones";
  float* out = Poisoned(n);
  k_->Rope(Upload(x), out, s.batch, s.seq, s.heads, s.head_dim, s.pos_offset, s.theta, false);
  ASSERT_TRUE(Synced());
  EXPECT_TRUE(AllWithin(Download(out, n), want, tol));
}

// --- Dropout

// The factor DropoutSpec's mask applies at global element e (kernels.h): 1 / (1 - p), computed
// in float32, when PhiloxUnit(seed, key + step * 0x9E3779B97F4A7C15, e) >= p; else 0.
double MaskFactor(const DropoutSpec& spec, int64_t e) {
  if (spec.p == 0.0f) return 1.0;
  const uint64_t stream = spec.key + static_cast<uint64_t>(spec.step) * 0x9E3779B97F4A7C15ull;
  if (PhiloxUnit(spec.seed, stream, static_cast<uint64_t>(e)) < spec.p) return 0.0;
  return 1.0f / (1.0f - spec.p);
}

// A box of `global` at `offsets` with `lengths`.
GlobalBox BoxOf(std::initializer_list<int64_t> global, std::initializer_list<int64_t> offsets,
                std::initializer_list<int64_t> lengths) {
  GlobalBox box;
  box.rank = static_cast<int>(global.size());
  std::copy(global.begin(), global.end(), box.global);
  std::copy(offsets.begin(), offsets.end(), box.offsets);
  std::copy(lengths.begin(), lengths.end(), box.lengths);
  return box;
}

// The box's elements' global indices, row-major in the box, by nested loops over its axes
// (not GlobalBox::GlobalIndex, whose arithmetic this checks).
std::vector<int64_t> GlobalIndices(const GlobalBox& box) {
  std::vector<int64_t> indices = {0};
  for (int a = 0; a < box.rank; ++a) {
    std::vector<int64_t> next;
    for (int64_t prefix : indices) {
      for (int64_t i = 0; i < box.lengths[a]; ++i) {
        next.push_back(prefix * box.global[a] + box.offsets[a] + i);
      }
    }
    indices = std::move(next);
  }
  return indices;
}

// x under the mask: the kept values times the float32 factor, rounded once (a float product).
std::vector<double> ReferenceDropout(const std::vector<float>& x, const DropoutSpec& spec,
                                     const GlobalBox& box) {
  const std::vector<int64_t> indices = GlobalIndices(box);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = static_cast<float>(x[i] * MaskFactor(spec, indices[i]));
  }
  return out;
}

DropoutSpec SpecOf(float p, int64_t step) {
  DropoutSpec spec;
  spec.p = p;
  spec.seed = 0x243F6A8885A308D3ull;  // a seed with both halves set
  spec.key = Fnv1a64("h.0.attn.resid_dropout");
  spec.step = step;
  return spec;
}

// The mask is Philox's, element by element, on whole tensors and on boxes of rank 1 to 4, in and
// out of place; the share kept is about 1 - p; another step draws another mask.
TEST_P(KernelsConformanceTest, DropoutMaskIsPhilox) {
  struct Case {
    GlobalBox box;
    float p;
    int64_t step;
  };
  const Case cases[] = {
      {BoxOf({kLarge}, {0}, {kLarge}), 0.1f, 1},
      {BoxOf({1}, {0}, {1}), 0.5f, 1},
      {BoxOf({7, 300}, {2, 1}, {3, 255}), 0.5f, 3},
      {BoxOf({5, 37, 129}, {1, 3, 17}, {3, 30, 100}), 0.25f, 7},
      {BoxOf({3, 4, 5, 6}, {1, 0, 2, 3}, {2, 4, 3, 3}), 0.9f, 2},
  };
  for (const Case& c : cases) {
    const int64_t n = static_cast<int64_t>(GlobalIndices(c.box).size());
    SCOPED_TRACE(::testing::Message() << "rank=" << c.box.rank << " n=" << n << " p=" << c.p
                                      << " step=" << c.step);
    const DropoutSpec spec = SpecOf(c.p, c.step);
    const std::vector<float> x = Random(n);
    const std::vector<double> want = ReferenceDropout(x, spec, c.box);
    float* out = Poisoned(n);
    float* in_place = Upload(x);
    k_->Dropout(Upload(x), out, n, spec, c.box);
    k_->Dropout(in_place, in_place, n, spec, c.box);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, n), want, 0, 0));
    EXPECT_TRUE(AllClose(Download(in_place, n), want, 0, 0)) << "in place";
    if (n == kLarge) {
      const int64_t kept = std::count_if(want.begin(), want.end(), [](double v) { return v != 0; });
      EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - c.p, 0.01);
      EXPECT_NE(ReferenceDropout(x, SpecOf(c.p, c.step + 1), c.box), want);
    }
  }
}

// A rank's box gets exactly its slice of the mask of the whole tensor, whatever the mesh.
TEST_P(KernelsConformanceTest, DropoutOfABoxIsTheSliceOfTheWholeTensor) {
  const DropoutSpec spec = SpecOf(0.3f, 5);
  const GlobalBox whole = BoxOf({4, 37, 129}, {0, 0, 0}, {4, 37, 129});
  const int64_t n = 4 * 37 * 129;
  const std::vector<float> x = Random(n);
  float* full = Poisoned(n);
  k_->Dropout(Upload(x), full, n, spec, whole);
  ASSERT_TRUE(Synced());
  const std::vector<float> got_full = Download(full, n);
  EXPECT_TRUE(AllClose(got_full, ReferenceDropout(x, spec, whole), 0, 0)) << "whole tensor";
  for (const GlobalBox& box : {BoxOf({4, 37, 129}, {1, 5, 3}, {2, 30, 100}),
                               BoxOf({4, 37, 129}, {3, 36, 128}, {1, 1, 1}),
                               BoxOf({4, 37, 129}, {0, 10, 0}, {4, 9, 129})}) {
    const std::vector<int64_t> indices = GlobalIndices(box);
    const int64_t m = static_cast<int64_t>(indices.size());
    SCOPED_TRACE(::testing::Message() << "box at (" << box.offsets[0] << ", " << box.offsets[1]
                                      << ", " << box.offsets[2] << ") of " << m << " elements");
    std::vector<float> piece(m);
    std::vector<double> want(m);
    for (int64_t i = 0; i < m; ++i) {
      piece[i] = x[indices[i]];
      want[i] = got_full[indices[i]];
    }
    float* out = Poisoned(m);
    k_->Dropout(Upload(piece), out, m, spec, box);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, m), want, 0, 0));
  }
}

TEST_P(KernelsConformanceTest, DropoutWithPZeroIsTheIdentity) {
  for (int64_t n : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n=" << n);
    const DropoutSpec spec = SpecOf(0.0f, 1);
    const GlobalBox box = BoxOf({n}, {0}, {n});
    const std::vector<float> x = Random(n);
    float* out = Poisoned(n);
    float* in_place = Upload(x);
    k_->Dropout(Upload(x), out, n, spec, box);
    k_->Dropout(in_place, in_place, n, spec, box);
    ASSERT_TRUE(Synced());
    EXPECT_EQ(Download(out, n), x);
    EXPECT_EQ(Download(in_place, n), x) << "in place";
  }
}

// --- Attention
//
// Tolerances: a backend may compute the scores with a float32 GEMM (error up to 2 D ulps of
// A = scale * sum_d |q_d k_d|, as MatmulReference's), which moves every probability by up to
// twice that relative to itself, and may accumulate p v (and dk, dv over the T rows of every
// query head of a group) in float32: so errors are F = 4 D A + 2 T group + 16 ulps of the
// magnitude of each output's terms. Far looser than a correct float64 backend needs, far tighter
// than a wrong mask, scale, head mapping or dropout factor (errors of order 1).

struct AttentionCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
  float p = 0.0f;  // probability dropout; the dropout's space is larger than the local one
};

AttentionShape ShapeOf(const AttentionCase& c) {
  AttentionShape s;
  s.batch = c.batch;
  s.seq = c.seq;
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = c.head_dim;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  s.dropout = SpecOf(c.p, 4);
  s.dropout.key = Fnv1a64("h.0.attn.attn_dropout");
  // A rank's piece of a [batch + 2, 2 heads] space, at batch 1 and the second half of the heads.
  s.global_batch = c.batch + 2;
  s.global_heads = 2 * c.heads;
  s.batch_offset = 1;
  s.head_offset = c.heads;
  return s;
}

// One query row (b, h, i) of the float64 reference: probabilities p[j] and dropped pd[j] for
// j <= i, and the row's A = scale * max_j sum_d |q_d k_d|.
struct AttentionRow {
  std::vector<double> p, pd;
  double a = 0;
};
AttentionRow ReferenceAttentionRow(const std::vector<double>& q, const std::vector<double>& k,
                                   const AttentionShape& s, int64_t b, int64_t h, int64_t i) {
  const int64_t T = s.seq, H = s.heads, G = s.kv_heads, D = s.head_dim, g = h / (H / G);
  AttentionRow row;
  row.p.resize(i + 1);
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j <= i; ++j) {
    double dot = 0, abs_dot = 0;
    for (int64_t d = 0; d < D; ++d) {
      const double term = q[((b * T + i) * H + h) * D + d] * k[((b * T + j) * G + g) * D + d];
      dot += term;
      abs_dot += std::fabs(term);
    }
    row.p[j] = s.scale * dot;
    row.a = std::max(row.a, s.scale * abs_dot);
    max = std::max(max, row.p[j]);
  }
  double sum = 0;
  for (double& e : row.p) sum += (e = std::exp(e - max));
  row.pd.resize(i + 1);
  const int64_t base = (((s.batch_offset + b) * s.global_heads + s.head_offset + h) * T + i) * T;
  for (int64_t j = 0; j <= i; ++j) {
    row.p[j] /= sum;
    row.pd[j] = row.p[j] * MaskFactor(s.dropout, base + j);
  }
  return row;
}

struct AttentionReference {
  std::vector<double> out, tol;
};
AttentionReference ReferenceAttention(const std::vector<double>& q, const std::vector<double>& k,
                                      const std::vector<double>& v, const AttentionShape& s) {
  const int64_t T = s.seq, H = s.heads, G = s.kv_heads, D = s.head_dim;
  AttentionReference r{std::vector<double>(q.size(), 0.0), std::vector<double>(q.size(), 0.0)};
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / G);
      for (int64_t i = 0; i < T; ++i) {
        const AttentionRow row = ReferenceAttentionRow(q, k, s, b, h, i);
        const double ulps = 4.0 * D * row.a + 2.0 * T + 16;
        for (int64_t d = 0; d < D; ++d) {
          double sum = 0, magnitude = 0;
          for (int64_t j = 0; j <= i; ++j) {
            const double vj = v[((b * T + j) * G + g) * D + d];
            sum += row.pd[j] * vj;
            magnitude += row.pd[j] * std::fabs(vj);
          }
          r.out[((b * T + i) * H + h) * D + d] = sum;
          r.tol[((b * T + i) * H + h) * D + d] = ulps * kUlp * magnitude;
        }
      }
    }
  }
  return r;
}

// The VJP in float64, by the chain rule through out = pd v, pd = p * mask, p = softmax(s),
// s = scale q k: with w[j] = dout . v[j] and dot = sum_j pd[j] w[j],
//   ds[j] = pd[j] w[j] - p[j] dot, dq += scale ds k, dk += scale ds q, dv += pd dout.
// The tolerances sum each term's magnitude (|ds|'s: pd (|w| + sum_d |dout v|) + p (|dot| +
// sum_j pd sum_d |dout v|)) and take F ulps of it (see above).
struct AttentionGradReference {
  std::vector<double> dq, dk, dv, tol_dq, tol_dk, tol_dv;
};
AttentionGradReference ReferenceAttentionGrad(const std::vector<double>& q,
                                              const std::vector<double>& k,
                                              const std::vector<double>& v,
                                              const std::vector<double>& dout,
                                              const AttentionShape& s) {
  const int64_t T = s.seq, H = s.heads, G = s.kv_heads, D = s.head_dim, group = H / G;
  AttentionGradReference r;
  r.dq.assign(q.size(), 0);
  r.tol_dq.assign(q.size(), 0);
  r.dk.assign(k.size(), 0);
  r.tol_dk.assign(k.size(), 0);
  r.dv.assign(v.size(), 0);
  r.tol_dv.assign(v.size(), 0);
  double a_max = 0;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < T; ++i) {
        const AttentionRow row = ReferenceAttentionRow(q, k, s, b, h, i);
        a_max = std::max(a_max, row.a);
        const int64_t qi = ((b * T + i) * H + h) * D;
        std::vector<double> w(i + 1), w_abs(i + 1);
        double dot = 0, dot_abs = 0;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t kj = ((b * T + j) * G + g) * D;
          for (int64_t d = 0; d < D; ++d) {
            w[j] += dout[qi + d] * v[kj + d];
            w_abs[j] += std::fabs(dout[qi + d] * v[kj + d]);
          }
          dot += row.pd[j] * w[j];
          dot_abs += row.pd[j] * w_abs[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t kj = ((b * T + j) * G + g) * D;
          const double ds = row.pd[j] * w[j] - row.p[j] * dot;
          const double ds_abs =
              row.pd[j] * (std::fabs(w[j]) + w_abs[j]) + row.p[j] * (std::fabs(dot) + dot_abs);
          for (int64_t d = 0; d < D; ++d) {
            r.dq[qi + d] += s.scale * ds * k[kj + d];
            r.tol_dq[qi + d] += s.scale * ds_abs * std::fabs(k[kj + d]);
            r.dk[kj + d] += s.scale * ds * q[qi + d];
            r.tol_dk[kj + d] += s.scale * ds_abs * std::fabs(q[qi + d]);
            r.dv[kj + d] += row.pd[j] * dout[qi + d];
            r.tol_dv[kj + d] += row.pd[j] * std::fabs(dout[qi + d]);
          }
        }
      }
    }
  }
  const double ulps = 4.0 * D * a_max + 2.0 * T * group + 16;
  for (std::vector<double>* tol : {&r.tol_dq, &r.tol_dk, &r.tol_dv}) {
    for (double& t : *tol) t *= ulps * kUlp;
  }
  return r;
}

// Batch 3, seq 1 and 37, a block boundary (seq 64, 65, 130), head_dim 1 to 64 (odd ones too), and
// heads 4 with kv_heads 4 (MHA), 2 (GQA) and 1 (MQA); each with and without dropout.
const AttentionCase kAttentionCases[] = {
    {1, 1, 1, 1, 1},   {2, 1, 4, 2, 8},   {3, 37, 4, 2, 16}, {2, 37, 4, 4, 8},
    {1, 5, 6, 3, 7},   {2, 130, 4, 1, 33}, {1, 65, 2, 2, 64}, {1, 64, 2, 1, 5},
};

std::string Describe(const AttentionCase& c, float p) {
  std::ostringstream os;
  os << "batch=" << c.batch << " seq=" << c.seq << " heads=" << c.heads
     << " kv_heads=" << c.kv_heads << " head_dim=" << c.head_dim << " dropout p=" << p;
  return os.str();
}

TEST_P(KernelsConformanceTest, Attention) {
  for (AttentionCase c : kAttentionCases) {
    for (float p : {0.0f, 0.25f}) {
      c.p = p;
      SCOPED_TRACE(Describe(c, p));
      const AttentionShape shape = ShapeOf(c);
      const int64_t q_size = c.batch * c.seq * c.heads * c.head_dim;
      const int64_t kv_size = c.batch * c.seq * c.kv_heads * c.head_dim;
      const std::vector<float> q = Random(q_size), k = Random(kv_size), v = Random(kv_size);
      float* out = Poisoned(q_size);
      k_->Attention(Upload(q), Upload(k), Upload(v), out, shape);
      ASSERT_TRUE(Synced());
      const AttentionReference want = ReferenceAttention(ToDouble(q), ToDouble(k), ToDouble(v), shape);
      EXPECT_TRUE(AllWithin(Download(out, q_size), want.out, want.tol));
    }
  }
}

TEST_P(KernelsConformanceTest, AttentionGrad) {
  // The reference's chain rule against central differences of the reference forward, with GQA
  // and dropout (the mask is fixed, so the forward is smooth in q, k and v).
  for (float p : {0.0f, 0.25f}) {
    SCOPED_TRACE(::testing::Message() << "central differences, dropout p=" << p);
    const AttentionShape shape = ShapeOf({1, 5, 4, 2, 3, p});
    const std::vector<double> q = ToDouble(Random(5 * 4 * 3)), k = ToDouble(Random(5 * 2 * 3)),
                              v = ToDouble(Random(5 * 2 * 3)), dout = ToDouble(Random(q.size()));
    const AttentionGradReference grad = ReferenceAttentionGrad(q, k, v, dout, shape);
    const auto loss = [&](const std::vector<double>& qkv) {
      const std::vector<std::vector<double>> x = Split(qkv, {q.size(), k.size(), v.size()});
      return Dot(dout, ReferenceAttention(x[0], x[1], x[2], shape).out);
    };
    EXPECT_TRUE(GradientsAgree(Concat({&grad.dq, &grad.dk, &grad.dv}),
                               NumericGradient(loss, Concat({&q, &k, &v}))));
  }
  for (AttentionCase c : kAttentionCases) {
    for (float p : {0.0f, 0.25f}) {
      c.p = p;
      SCOPED_TRACE(Describe(c, p));
      const AttentionShape shape = ShapeOf(c);
      const int64_t q_size = c.batch * c.seq * c.heads * c.head_dim;
      const int64_t kv_size = c.batch * c.seq * c.kv_heads * c.head_dim;
      const std::vector<float> q = Random(q_size), k = Random(kv_size), v = Random(kv_size),
                               dout = Random(q_size);
      float* dq = Poisoned(q_size);
      float* dk = Poisoned(kv_size);
      float* dv = Poisoned(kv_size);
      k_->AttentionGrad(Upload(q), Upload(k), Upload(v), Upload(dout), dq, dk, dv, shape);
      ASSERT_TRUE(Synced());
      const AttentionGradReference want =
          ReferenceAttentionGrad(ToDouble(q), ToDouble(k), ToDouble(v), ToDouble(dout), shape);
      EXPECT_TRUE(AllWithin(Download(dq, q_size), want.dq, want.tol_dq)) << "dq";
      EXPECT_TRUE(AllWithin(Download(dk, kv_size), want.dk, want.tol_dk)) << "dk";
      EXPECT_TRUE(AllWithin(Download(dv, kv_size), want.dv, want.tol_dv)) << "dv";
    }
  }
}

// --- Cross-entropy over a vocabulary shard

TEST_P(KernelsConformanceTest, RowMax) {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape& s : {Shape{1, 1}, Shape{7, 5}, Shape{33, 1000}, Shape{2, kLarge}}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << s.rows << " cols=" << s.cols);
    std::vector<float> logits = Random(s.rows * s.cols);
    // A row of negative values only: a maximum started at 0 would be wrong.
    for (int64_t c = 0; c < s.cols; ++c) logits[c] = -std::fabs(logits[c]);
    std::vector<double> want(s.rows, -std::numeric_limits<double>::infinity());
    for (int64_t r = 0; r < s.rows; ++r) {
      for (int64_t c = 0; c < s.cols; ++c) want[r] = std::max<double>(want[r], logits[r * s.cols + c]);
    }
    float* out = Poisoned(s.rows);
    k_->RowMax(Upload(logits), out, s.rows, s.cols);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(out, s.rows), want, 0, 0));
  }
}

struct CrossEntropyShape {
  int64_t rows, cols, col_offset;
};
std::ostream& operator<<(std::ostream& os, const CrossEntropyShape& s) {
  return os << "rows=" << s.rows << " cols=" << s.cols << " col_offset=" << s.col_offset;
}
const CrossEntropyShape kCrossEntropyShapes[] = {
    {1, 1, 0}, {5, 33, 0}, {37, 1000, 500}, {3, 7, 5}, {2, 50257, 0},
};

// m for the rows of a shard: the row's own maximum for even rows, a larger one (as another
// shard's maximum would be) for odd rows.
std::vector<float> ShardMax(const std::vector<float>& logits, int64_t rows, int64_t cols) {
  std::vector<float> m(rows);
  for (int64_t r = 0; r < rows; ++r) {
    m[r] = *std::max_element(logits.begin() + r * cols, logits.begin() + (r + 1) * cols);
    if (r % 2 == 1) m[r] += 1.5f;
  }
  return m;
}

// sumexp, tlogit and sumexp's tolerance: each exp(l - m) within (|l - m| + 4) ulps of itself
// (l - m rounded to float32, then expf), the sum accumulated in float32 in any order.
struct CrossEntropyPartsReference {
  std::vector<double> sumexp, tol_sumexp, tlogit;
};
CrossEntropyPartsReference ReferenceCrossEntropyParts(const std::vector<double>& logits,
                                                      const std::vector<double>& m,
                                                      const std::vector<int64_t>& targets,
                                                      const CrossEntropyShape& s) {
  CrossEntropyPartsReference r{std::vector<double>(s.rows, 0.0), std::vector<double>(s.rows, 0.0),
                               std::vector<double>(s.rows, 0.0)};
  for (int64_t i = 0; i < s.rows; ++i) {
    for (int64_t c = 0; c < s.cols; ++c) {
      const double x = logits[i * s.cols + c] - m[i], e = std::exp(x);
      r.sumexp[i] += e;
      r.tol_sumexp[i] += e * (std::fabs(x) + 4 + 2.0 * s.cols) * kUlp;
    }
    const int64_t col = ShardRowOf(targets[i], s.col_offset, s.cols);
    if (col >= 0) r.tlogit[i] = logits[i * s.cols + col];
  }
  return r;
}

TEST_P(KernelsConformanceTest, CrossEntropyParts) {
  for (v1::DType dtype : kIdDTypes) {
    for (const CrossEntropyShape& s : kCrossEntropyShapes) {
      SCOPED_TRACE(::testing::Message() << v1::DType_Name(dtype) << " " << s);
      const std::vector<float> logits = Random(s.rows * s.cols);
      const std::vector<float> m = ShardMax(logits, s.rows, s.cols);
      const std::vector<int64_t> targets = ShardIds(s.rows, s.col_offset, s.cols, dtype, rng_);
      float* sumexp = Poisoned(s.rows);
      float* tlogit = Poisoned(s.rows);
      k_->CrossEntropyParts(Upload(logits), Upload(m), Upload(IdBytes(targets, dtype)), dtype,
                            sumexp, tlogit, s.rows, s.cols, s.col_offset);
      ASSERT_TRUE(Synced());
      const CrossEntropyPartsReference want =
          ReferenceCrossEntropyParts(ToDouble(logits), ToDouble(m), targets, s);
      EXPECT_TRUE(AllWithin(Download(sumexp, s.rows), want.sumexp, want.tol_sumexp)) << "sumexp";
      EXPECT_TRUE(AllClose(Download(tlogit, s.rows), want.tlogit, 0, 0)) << "tlogit";
    }
  }
}

// dlogits = d_sumexp exp(l - m) (+ d_tlogit at the target), the gradient of
// sum_r d_sumexp[r] sumexp[r] + d_tlogit[r] tlogit[r] with m held constant (its gradient through
// a log-sum-exp is zero, so the graph does not differentiate it).
std::vector<double> ReferenceCrossEntropyPartsGrad(const std::vector<double>& logits,
                                                   const std::vector<double>& m,
                                                   const std::vector<int64_t>& targets,
                                                   const std::vector<double>& d_sumexp,
                                                   const std::vector<double>& d_tlogit,
                                                   const CrossEntropyShape& s,
                                                   std::vector<double>* tol) {
  std::vector<double> grad(logits.size());
  tol->assign(logits.size(), 0);
  for (int64_t i = 0; i < s.rows; ++i) {
    const int64_t col = ShardRowOf(targets[i], s.col_offset, s.cols);
    for (int64_t c = 0; c < s.cols; ++c) {
      const double x = logits[i * s.cols + c] - m[i], e = d_sumexp[i] * std::exp(x);
      const double t = c == col ? d_tlogit[i] : 0.0;
      grad[i * s.cols + c] = e + t;
      (*tol)[i * s.cols + c] = ((std::fabs(x) + 4) * std::fabs(e) + 2 * std::fabs(t)) * kUlp;
    }
  }
  return grad;
}

TEST_P(KernelsConformanceTest, CrossEntropyPartsGrad) {
  {
    const CrossEntropyShape s{3, 5, 2};
    const std::vector<double> logits = ToDouble(Random(s.rows * s.cols));
    const std::vector<double> m = ToDouble(ShardMax(Random(s.rows * s.cols), s.rows, s.cols));
    const std::vector<int64_t> targets = {1, 4, 6};  // below, inside, inside
    const std::vector<double> d_sumexp = ToDouble(Random(s.rows)), d_tlogit = ToDouble(Random(s.rows));
    const auto loss = [&](const std::vector<double>& l) {
      const CrossEntropyPartsReference parts = ReferenceCrossEntropyParts(l, m, targets, s);
      return Dot(d_sumexp, parts.sumexp) + Dot(d_tlogit, parts.tlogit);
    };
    std::vector<double> tol;
    EXPECT_TRUE(GradientsAgree(
        ReferenceCrossEntropyPartsGrad(logits, m, targets, d_sumexp, d_tlogit, s, &tol),
        NumericGradient(loss, logits)));
  }
  for (v1::DType dtype : kIdDTypes) {
    for (const CrossEntropyShape& s : kCrossEntropyShapes) {
      SCOPED_TRACE(::testing::Message() << v1::DType_Name(dtype) << " " << s);
      const std::vector<float> logits = Random(s.rows * s.cols);
      const std::vector<float> m = ShardMax(logits, s.rows, s.cols);
      const std::vector<int64_t> targets = ShardIds(s.rows, s.col_offset, s.cols, dtype, rng_);
      const std::vector<float> d_sumexp = Random(s.rows), d_tlogit = Random(s.rows);
      float* dlogits = Poisoned(s.rows * s.cols);
      k_->CrossEntropyPartsGrad(Upload(logits), Upload(m), Upload(IdBytes(targets, dtype)), dtype,
                                Upload(d_sumexp), Upload(d_tlogit), dlogits, s.rows, s.cols,
                                s.col_offset);
      ASSERT_TRUE(Synced());
      std::vector<double> tol;
      const std::vector<double> want =
          ReferenceCrossEntropyPartsGrad(ToDouble(logits), ToDouble(m), targets,
                                         ToDouble(d_sumexp), ToDouble(d_tlogit), s, &tol);
      EXPECT_TRUE(AllWithin(Download(dlogits, s.rows * s.cols), want, tol));
    }
  }
}

// Positive sums of exponentials (at least 1: the maximum's own term), any m and tlogit.
std::vector<float> SumExpInput(std::vector<float> random) {
  for (float& x : random) x = 1.0f + 20.0f * std::fabs(x);
  return random;
}

double ReferenceCrossEntropyLoss(const std::vector<double>& sumexp, const std::vector<double>& m,
                                 const std::vector<double>& tlogit, double scale) {
  double sum = 0;
  for (size_t r = 0; r < sumexp.size(); ++r) sum += std::log(sumexp[r]) + m[r] - tlogit[r];
  return scale * sum;
}

TEST_P(KernelsConformanceTest, CrossEntropyLossSumsInDouble) {
  for (int64_t rows : {int64_t{1}, int64_t{37}, kLarge}) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows);
    const float scale = 1.0f / static_cast<float>(rows);
    const std::vector<float> sumexp = SumExpInput(Random(rows)), m = Random(rows),
                             tlogit = Random(rows);
    double magnitude = 0;
    for (int64_t r = 0; r < rows; ++r) {
      magnitude += std::fabs(std::log(static_cast<double>(sumexp[r]))) + std::fabs(m[r]) +
                   std::fabs(tlogit[r]);
    }
    float* out = Poisoned(1);
    k_->CrossEntropyLoss(Upload(sumexp), Upload(m), Upload(tlogit), out, rows, scale);
    ASSERT_TRUE(Synced());
    // In double only the logs' and the result's roundings remain.
    EXPECT_TRUE(AllWithin(Download(out, 1),
                          {ReferenceCrossEntropyLoss(ToDouble(sumexp), ToDouble(m),
                                                     ToDouble(tlogit), scale)},
                          {4 * kUlp * scale * magnitude}));
  }
}

TEST_P(KernelsConformanceTest, CrossEntropyLossGrad) {
  {
    const int64_t rows = 4;
    const double scale = 0.25;
    const std::vector<double> sumexp = ToDouble(SumExpInput(Random(rows))),
                              m = ToDouble(Random(rows)), tlogit = ToDouble(Random(rows));
    std::vector<double> d_sumexp(rows), d_tlogit(rows, -scale);
    for (int64_t r = 0; r < rows; ++r) d_sumexp[r] = scale / sumexp[r];
    const auto loss = [&](const std::vector<double>& st) {
      const std::vector<std::vector<double>> x = Split(st, {sumexp.size(), tlogit.size()});
      return ReferenceCrossEntropyLoss(x[0], m, x[1], scale);
    };
    EXPECT_TRUE(GradientsAgree(Concat({&d_sumexp, &d_tlogit}),
                               NumericGradient(loss, Concat({&sumexp, &tlogit}))));
  }
  for (int64_t rows : kSizes) {
    SCOPED_TRACE(::testing::Message() << "rows=" << rows);
    const float scale = 1.0f / static_cast<float>(rows);
    const std::vector<float> sumexp = SumExpInput(Random(rows));
    std::vector<double> want_d_sumexp(rows), want_d_tlogit(rows, -scale);
    for (int64_t r = 0; r < rows; ++r) want_d_sumexp[r] = static_cast<double>(scale) / sumexp[r];
    float* d_sumexp = Poisoned(rows);
    float* d_tlogit = Poisoned(rows);
    k_->CrossEntropyLossGrad(Upload(sumexp), d_sumexp, d_tlogit, rows, scale);
    ASSERT_TRUE(Synced());
    EXPECT_TRUE(AllClose(Download(d_sumexp, rows), want_d_sumexp, kUlp, 0)) << "d_sumexp";
    EXPECT_TRUE(AllClose(Download(d_tlogit, rows), want_d_tlogit, 0, 0)) << "d_tlogit";
  }
}

// --- Positions

// out[o, t] = offset + t in both dtypes, exactly outer * len elements (one more stays poisoned).
TEST_P(KernelsConformanceTest, Positions) {
  struct Case {
    int64_t outer, len, offset;
  };
  for (v1::DType dtype : kIdDTypes) {
    std::vector<Case> cases = {{1, 1, 0}, {3, 37, 5}, {2, 1000, 4096}};
    if (dtype == v1::I64) cases.push_back({2, 3, int64_t{1} << 40});
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << v1::DType_Name(dtype) << " outer=" << c.outer
                                        << " len=" << c.len << " offset=" << c.offset);
      const int64_t n = c.outer * c.len, size = DTypeSize(dtype);
      char* out = PoisonedBits<char>((n + 1) * size);
      k_->Positions(out, dtype, c.outer, c.len, c.offset);
      ASSERT_TRUE(Synced());
      std::vector<int64_t> want;
      for (int64_t o = 0; o < c.outer; ++o) {
        for (int64_t t = 0; t < c.len; ++t) want.push_back(c.offset + t);
      }
      std::vector<char> want_bytes = IdBytes(want, dtype);
      want_bytes.resize((n + 1) * size, static_cast<char>(kPoisonByte));
      EXPECT_TRUE(Download(out, (n + 1) * size) == want_bytes);
    }
  }
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

// The transformer kernels' scratch counts as well (the CPU backend keeps EmbeddingGrad's chains,
// table_rows + n int64s, and attention's score tiles), and the statistics stay consistent.
TEST_P(KernelsConformanceTest, MemoryStatsCountTransformerScratch) {
  const int64_t n = 64, table_rows = 50000, dim = 4;
  const std::vector<int64_t> ids = ShardIds(n, 0, table_rows, v1::I64, rng_);
  const char* dids = Upload(IdBytes(ids, v1::I64));
  float* dy = Upload(Random(n * dim));
  float* grad_table = Poisoned(table_rows * dim);
  const AttentionShape shape = ShapeOf({2, 70, 4, 2, 8, 0.1f});
  const int64_t q_size = 2 * 70 * 4 * 8, kv_size = 2 * 70 * 2 * 8;
  float* q = Upload(Random(q_size));
  float* k = Upload(Random(kv_size));
  float* v = Upload(Random(kv_size));
  float* dq = Poisoned(q_size);
  float* dk = Poisoned(kv_size);
  float* dv = Poisoned(kv_size);
  ASSERT_TRUE(Synced());
  const MemoryStats before = k_->memory_stats();
  k_->ResetPeakMemoryStats();
  k_->EmbeddingGrad(dids, v1::I64, dy, grad_table, n, table_rows, dim, 0);
  k_->AttentionGrad(q, k, v, q, dq, dk, dv, shape);
  ASSERT_TRUE(Synced());
  const MemoryStats after = k_->memory_stats();
  EXPECT_GE(after.bytes_in_use, before.bytes_in_use);
  EXPECT_GE(after.peak_bytes_in_use, after.bytes_in_use);
  if (std::string(k_->name()) == "cpu") {
    EXPECT_GE(after.peak_bytes_in_use - before.bytes_in_use,
              (table_rows + n) * static_cast<int64_t>(sizeof(int64_t)));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, KernelsConformanceTest, ::testing::ValuesIn(AllConfigs()),
                         ConfigName);

}  // namespace
}  // namespace weft
