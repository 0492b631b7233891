// Each CPU kernel against a float64 reference written here, on random non-zero inputs, with
// outputs poisoned (NaN) before the call so a skipped element cannot pass.
#include "worker/kernels/cpu/cpu_kernels.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace weft {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

class CpuKernelsTest : public ::testing::Test {
 protected:
  // Uniform in [-2, -0.05] U [0.05, 2]: random and never zero.
  std::vector<float> Random(int64_t n) {
    std::uniform_real_distribution<float> mag(0.05f, 2.0f);
    std::bernoulli_distribution sign(0.5);
    std::vector<float> v(n);
    for (auto& x : v) x = sign(rng_) ? mag(rng_) : -mag(rng_);
    return v;
  }
  std::vector<float> Poisoned(int64_t n) { return std::vector<float>(n, kNaN); }

  // |got - want| <= atol + rtol * |want| for every element, none NaN.
  void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                   double rtol = 1e-5, double atol = 1e-6) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << "element " << i << " left unwritten";
      EXPECT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << "element " << i;
    }
  }

  std::mt19937 rng_{12345};
  std::unique_ptr<Kernels> k_ = NewCpuKernels();
};

TEST_F(CpuKernelsTest, MatmulAllTransposes) {
  const int64_t m = 5, n = 7, kd = 11;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> a = Random(m * kd), b = Random(kd * n), c = Poisoned(m * n);
      std::vector<double> want(m * n, 0.0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t p = 0; p < kd; ++p) {
            const double av = ta ? a[p * m + i] : a[i * kd + p];
            const double bv = tb ? b[j * kd + p] : b[p * n + j];
            s += av * bv;
          }
          want[i * n + j] = s;
        }
      k_->Matmul(a.data(), b.data(), c.data(), m, n, kd, ta, tb);
      SCOPED_TRACE(testing::Message() << "trans_a=" << ta << " trans_b=" << tb);
      ExpectClose(c, want, 1e-5, 1e-5);
    }
  }
}

TEST_F(CpuKernelsTest, AddBiasAndInPlace) {
  const int64_t rows = 6, cols = 9;
  std::vector<float> a = Random(rows * cols), bias = Random(cols), out = Poisoned(rows * cols);
  std::vector<double> want(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      want[r * cols + c] = static_cast<double>(a[r * cols + c]) + bias[c];
  k_->AddBias(a.data(), bias.data(), out.data(), rows, cols);
  ExpectClose(out, want);
  k_->AddBias(a.data(), bias.data(), a.data(), rows, cols);
  ExpectClose(a, want);
}

TEST_F(CpuKernelsTest, BiasGrad) {
  const int64_t rows = 13, cols = 4;
  std::vector<float> a = Random(rows * cols), out = Poisoned(cols);
  std::vector<double> want(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) want[c] += a[r * cols + c];
  k_->BiasGrad(a.data(), out.data(), rows, cols);
  ExpectClose(out, want, 1e-5, 1e-5);
}

TEST_F(CpuKernelsTest, ReluAndGrad) {
  const int64_t n = 101;
  std::vector<float> x = Random(n), dy = Random(n), y = Poisoned(n), dx = Poisoned(n);
  std::vector<double> want_y(n), want_dx(n);
  for (int64_t i = 0; i < n; ++i) {
    want_y[i] = x[i] > 0 ? x[i] : 0.0;
    want_dx[i] = x[i] > 0 ? dy[i] : 0.0;
  }
  k_->Relu(x.data(), y.data(), n);
  k_->ReluGrad(x.data(), dy.data(), dx.data(), n);
  ExpectClose(y, want_y, 0, 0);
  ExpectClose(dx, want_dx, 0, 0);
}

TEST_F(CpuKernelsTest, GeluAndGradExactErf) {
  const int64_t n = 97;
  std::vector<float> x = Random(n), dy = Random(n), y = Poisoned(n), dx = Poisoned(n);
  std::vector<double> want_y(n), want_dx(n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double cdf = 0.5 * std::erfc(-v / std::sqrt(2.0));
    const double pdf = std::exp(-v * v / 2) / std::sqrt(2 * M_PI);
    want_y[i] = v * cdf;
    want_dx[i] = dy[i] * (cdf + v * pdf);
  }
  k_->Gelu(x.data(), y.data(), n);
  k_->GeluGrad(x.data(), dy.data(), dx.data(), n);
  ExpectClose(y, want_y);
  ExpectClose(dx, want_dx);
  // The tanh approximation differs from the exact form by ~1e-4 near x = 1.5: make sure we are
  // not using it.
  float one_five = 1.5f, g = kNaN;
  k_->Gelu(&one_five, &g, 1);
  EXPECT_NEAR(g, 1.5 * 0.5 * std::erfc(-1.5 / std::sqrt(2.0)), 1e-6);
}

TEST_F(CpuKernelsTest, MseLossAndGrad) {
  const int64_t n = 1000;
  const float scale = 1.0f / n;
  std::vector<float> p = Random(n), l = Random(n), loss = Poisoned(1), grad = Poisoned(n);
  double sum = 0;
  std::vector<double> want_grad(n);
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(p[i]) - l[i];
    sum += d * d;
    want_grad[i] = static_cast<double>(scale) * d;
  }
  k_->MseLoss(p.data(), l.data(), loss.data(), n, scale);
  k_->MseGrad(p.data(), l.data(), grad.data(), n, scale);
  ExpectClose(loss, {static_cast<double>(scale) * sum}, 1e-6, 0);
  ExpectClose(grad, want_grad);
}

TEST_F(CpuKernelsTest, ScaleInPlace) {
  const int64_t n = 33;
  std::vector<float> a = Random(n), out = Poisoned(n);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = -0.375 * a[i];
  k_->Scale(a.data(), out.data(), n, -0.375f);
  ExpectClose(out, want);
  k_->Scale(a.data(), a.data(), n, -0.375f);
  ExpectClose(a, want);
}

TEST_F(CpuKernelsTest, SgdWithWeightDecay) {
  const int64_t n = 50;
  std::vector<float> p = Random(n), g = Random(n);
  std::vector<double> want(n);
  const double lr = 0.05, wd = 0.01;
  for (int64_t i = 0; i < n; ++i) want[i] = p[i] - lr * (g[i] + wd * p[i]);
  k_->Sgd(p.data(), g.data(), n, 0.05f, 0.01f);
  ExpectClose(p, want);
}

TEST_F(CpuKernelsTest, AdamWOverSeveralSteps) {
  const int64_t n = 64;
  AdamWHyper h;
  h.lr = 0.01f;
  h.beta1 = 0.9f;
  h.beta2 = 0.99f;
  h.eps = 1e-6f;
  h.weight_decay = 0.1f;
  std::vector<float> p = Random(n), m(n, 0.0f), v(n, 0.0f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  for (int64_t t = 1; t <= 5; ++t) {
    std::vector<float> g = Random(n);
    for (int64_t i = 0; i < n; ++i) {
      const double lr = h.lr, b1 = h.beta1, b2 = h.beta2;
      rp[i] -= lr * h.weight_decay * rp[i];
      rm[i] = b1 * rm[i] + (1 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1 - b2) * g[i] * g[i];
      const double mhat = rm[i] / (1 - std::pow(b1, t));
      const double vhat = rv[i] / (1 - std::pow(b2, t));
      rp[i] -= lr * mhat / (std::sqrt(vhat) + h.eps);
    }
    k_->AdamW(p.data(), g.data(), m.data(), v.data(), n, h, t);
  }
  ExpectClose(p, rp, 1e-5, 1e-6);
  ExpectClose(m, rm, 1e-5, 1e-6);
  ExpectClose(v, rv, 1e-5, 1e-6);
}

TEST_F(CpuKernelsTest, SliceAndUnsliceEveryAxis) {
  const std::vector<int64_t> shape = {3, 5, 4};
  std::vector<float> a = Random(60);
  for (int axis = 0; axis < 3; ++axis) {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= shape[d];
    for (int d = axis + 1; d < 3; ++d) inner *= shape[d];
    const int64_t offset = 1, length = shape[axis] - 2;
    std::vector<float> out = Poisoned(outer * length * inner);
    k_->Slice(a.data(), out.data(), outer, shape[axis], inner, offset, length);
    std::vector<double> want;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j)
        for (int64_t l = 0; l < 4; ++l) {
          const int64_t idx[3] = {i, j, l};
          if (idx[axis] >= offset && idx[axis] < offset + length) {
            want.push_back(a[(i * 5 + j) * 4 + l]);
          }
        }
    SCOPED_TRACE(testing::Message() << "axis " << axis);
    ExpectClose(out, want, 0, 0);
    // Unslice puts the piece back into a poisoned full tensor; outside the box stays NaN.
    std::vector<float> back = Poisoned(60);
    k_->Unslice(out.data(), back.data(), outer, shape[axis], inner, offset, length);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j)
        for (int64_t l = 0; l < 4; ++l) {
          const int64_t idx[3] = {i, j, l};
          const int64_t flat = (i * 5 + j) * 4 + l;
          if (idx[axis] >= offset && idx[axis] < offset + length) {
            EXPECT_EQ(back[flat], a[flat]);
          } else {
            EXPECT_TRUE(std::isnan(back[flat]));
          }
        }
  }
}

TEST_F(CpuKernelsTest, MemoryOps) {
  float* p = k_->Allocate(10);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  std::vector<float> src = Random(10), dst = Poisoned(10);
  k_->CopyFromHost(src.data(), p, 10);
  k_->CopyToHost(p, dst.data(), 10);
  EXPECT_EQ(dst, src);
  k_->Fill(p, 10, 2.5f);
  k_->CopyToHost(p, dst.data(), 10);
  EXPECT_EQ(dst, std::vector<float>(10, 2.5f));
  EXPECT_TRUE(k_->Synchronize().ok());
  k_->Free(p);
}

}  // namespace
}  // namespace weft
