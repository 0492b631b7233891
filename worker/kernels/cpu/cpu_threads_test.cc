// The CPU backend's threaded loops (loops.h) give bit-identical results for any thread count:
// every kernel that splits its work is run on shapes well above the grain with 1, 2 and 3
// threads, its outputs first poisoned with NaN, and the outputs compared bit for bit. That the
// 1-thread results are right is the conformance suite's business (kernels_conformance_test,
// against float64); here a wrong split (a range skipped, written twice or offset) shows as a
// difference or a NaN. Also: a thread count of 0 takes OpenBLAS's.
#include <cblas.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/cpu/cpu_kernels.h"
#include "worker/kernels/cpu/loops.h"

namespace weft {
namespace {

// Rows of the row-wise kernels, columns of the widest: each well above the grain, and odd so
// that ranges do not fall on vector boundaries.
constexpr int64_t kRows = 301, kCols = 517;
constexpr int64_t kVocab = 2053;
constexpr int64_t kN = kRows * kCols;

std::vector<float> Random(int64_t n, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// The outputs of one run of a kernel, each a buffer the run wrote.
using Outputs = std::vector<std::vector<float>>;

// Runs `run` on a backend with `threads` threads, its outputs each starting as NaN.
Outputs RunWith(int threads, const std::vector<int64_t>& output_sizes,
                const std::function<void(Kernels&, std::vector<float*>&)>& run) {
  KernelOptions options;
  options.threads = threads;
  std::unique_ptr<Kernels> k = NewCpuKernels(options);
  Outputs outputs;
  std::vector<float*> pointers;
  for (int64_t size : output_sizes) {
    outputs.emplace_back(size, std::numeric_limits<float>::quiet_NaN());
  }
  for (auto& o : outputs) pointers.push_back(o.data());
  run(*k, pointers);
  return outputs;
}

// `run`'s outputs on 2 and 3 threads are those on 1, bit for bit, and hold no NaN.
void ExpectSameOnAnyThreads(const std::string& kernel, const std::vector<int64_t>& output_sizes,
                            const std::function<void(Kernels&, std::vector<float*>&)>& run) {
  SCOPED_TRACE(kernel);
  const Outputs one = RunWith(1, output_sizes, run);
  for (size_t o = 0; o < one.size(); ++o) {
    for (size_t i = 0; i < one[o].size(); ++i) {
      ASSERT_FALSE(std::isnan(one[o][i])) << "output " << o << " [" << i << "] unwritten";
    }
  }
  for (int threads : {2, 3}) {
    const Outputs many = RunWith(threads, output_sizes, run);
    for (size_t o = 0; o < one.size(); ++o) {
      ASSERT_EQ(many[o].size(), one[o].size());
      const size_t bytes = one[o].size() * sizeof(float);
      if (std::memcmp(many[o].data(), one[o].data(), bytes) == 0) continue;
      for (size_t i = 0; i < one[o].size(); ++i) {
        uint32_t a, b;
        std::memcpy(&a, &one[o][i], 4);
        std::memcpy(&b, &many[o][i], 4);
        ASSERT_EQ(a, b) << threads << " threads, output " << o << " [" << i << "]: "
                        << many[o][i] << " against " << one[o][i] << " on 1 thread";
      }
    }
  }
}

TEST(CpuThreadsTest, RangesCoverTheLoopOnceInOrder) {
  for (int threads : {1, 2, 3, 7}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{1000}, int64_t{100003}}) {
      for (int64_t grain : {int64_t{1}, int64_t{64}, cpu::kGrainElements}) {
        std::vector<int> hits(n, 0);
        std::atomic<int> calls{0};
        cpu::ParallelFor(threads, n, grain, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) ++hits[i];
          ++calls;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << "element " << i;
        // Never more ranges than threads, nor than the grain allows.
        const int64_t most = std::min<int64_t>(threads, (n + grain - 1) / grain);
        EXPECT_LE(calls.load(), std::max<int64_t>(most, n > 0 ? 1 : 0))
            << "threads " << threads << " n " << n << " grain " << grain;
      }
    }
  }
}

TEST(CpuThreadsTest, ZeroThreadsTakesOpenBlasCount) {
  // Nothing observable distinguishes thread counts but timing, so this checks the call works and
  // computes; the count itself is OpenBLAS's (openblas_get_num_threads() >= 1).
  EXPECT_GE(openblas_get_num_threads(), 1);
  const std::vector<float> a = Random(kN, 1), b = Random(kN, 2);
  const Outputs zero = RunWith(0, {kN}, [&](Kernels& k, std::vector<float*>& out) {
    k.Add(a.data(), b.data(), out[0], kN);
  });
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(zero[0][i], a[i] + b[i]) << i;
}

TEST(CpuThreadsTest, ElementwiseKernels) {
  const std::vector<float> a = Random(kN, 11), b = Random(kN, 12), dy = Random(kN, 13);
  ExpectSameOnAnyThreads("Add", {kN}, [&](Kernels& k, std::vector<float*>& o) {
    k.Add(a.data(), b.data(), o[0], kN);
  });
  ExpectSameOnAnyThreads("Mul", {kN}, [&](Kernels& k, std::vector<float*>& o) {
    k.Mul(a.data(), b.data(), o[0], kN);
  });
  ExpectSameOnAnyThreads("Scale", {kN}, [&](Kernels& k, std::vector<float*>& o) {
    k.Scale(a.data(), o[0], kN, 0.37f);
  });
  ExpectSameOnAnyThreads("Relu+ReluGrad", {kN, kN}, [&](Kernels& k, std::vector<float*>& o) {
    k.Relu(a.data(), o[0], kN);
    k.ReluGrad(a.data(), dy.data(), o[1], kN);
  });
  ExpectSameOnAnyThreads("Gelu+GeluGrad", {kN, kN}, [&](Kernels& k, std::vector<float*>& o) {
    k.Gelu(a.data(), o[0], kN);
    k.GeluGrad(a.data(), dy.data(), o[1], kN);
  });
  ExpectSameOnAnyThreads("GeluTanh+GeluTanhGrad", {kN, kN},
                         [&](Kernels& k, std::vector<float*>& o) {
                           k.GeluTanh(a.data(), o[0], kN);
                           k.GeluTanhGrad(a.data(), dy.data(), o[1], kN);
                         });
  ExpectSameOnAnyThreads("Silu+SiluGrad", {kN, kN}, [&](Kernels& k, std::vector<float*>& o) {
    k.Silu(a.data(), o[0], kN);
    k.SiluGrad(a.data(), dy.data(), o[1], kN);
  });
  ExpectSameOnAnyThreads("MseGrad", {kN}, [&](Kernels& k, std::vector<float*>& o) {
    k.MseGrad(a.data(), b.data(), o[0], kN, 0.5f);
  });
  ExpectSameOnAnyThreads("AddBias+BiasGrad", {kN, kCols},
                         [&](Kernels& k, std::vector<float*>& o) {
                           k.AddBias(a.data(), b.data(), o[0], kRows, kCols);
                           k.BiasGrad(dy.data(), o[1], kRows, kCols);
                         });
}

TEST(CpuThreadsTest, OptimizerKernels) {
  const std::vector<float> grad = Random(kN, 21);
  const std::vector<float> param0 = Random(kN, 22), m0 = Random(kN, 23, -0.1f, 0.1f),
                           v0 = Random(kN, 24, 0.0f, 0.1f);
  // Updates in place: the outputs start as copies of the state, two steps each.
  ExpectSameOnAnyThreads("AdamW", {kN, kN, kN}, [&](Kernels& k, std::vector<float*>& o) {
    std::memcpy(o[0], param0.data(), kN * sizeof(float));
    std::memcpy(o[1], m0.data(), kN * sizeof(float));
    std::memcpy(o[2], v0.data(), kN * sizeof(float));
    AdamWHyper h;
    h.weight_decay = 0.1f;
    const float clip = 0.5f;
    for (int64_t step = 1; step <= 2; ++step) {
      k.AdamW(o[0], grad.data(), o[1], o[2], kN, h, step, step == 2 ? &clip : nullptr);
    }
  });
  ExpectSameOnAnyThreads("Sgd", {kN}, [&](Kernels& k, std::vector<float*>& o) {
    std::memcpy(o[0], param0.data(), kN * sizeof(float));
    k.Sgd(o[0], grad.data(), kN, 0.01f, 0.1f, nullptr);
  });
  // The global gradient norm's partial sums: blocks summed in order whatever the threads.
  ExpectSameOnAnyThreads("SumSquares", {1}, [&](Kernels& k, std::vector<float*>& o) {
    k.SumSquares(grad.data(), kN, o[0]);
  });
}

TEST(CpuThreadsTest, NormKernels) {
  const std::vector<float> x = Random(kN, 31), dy = Random(kN, 32);
  const std::vector<float> gamma = Random(kCols, 33), beta = Random(kCols, 34);
  ExpectSameOnAnyThreads("LayerNorm+Grad", {kN, kN, kCols, kCols},
                         [&](Kernels& k, std::vector<float*>& o) {
                           k.LayerNorm(x.data(), gamma.data(), beta.data(), o[0], kRows, kCols,
                                       1e-5f);
                           k.LayerNormGrad(x.data(), gamma.data(), dy.data(), o[1], o[2], o[3],
                                           kRows, kCols, 1e-5f);
                         });
  ExpectSameOnAnyThreads("RmsNorm+Grad", {kN, kN, kCols}, [&](Kernels& k, std::vector<float*>& o) {
    k.RmsNorm(x.data(), gamma.data(), o[0], kRows, kCols, 1e-6f);
    k.RmsNormGrad(x.data(), gamma.data(), dy.data(), o[1], o[2], kRows, kCols, 1e-6f);
  });
}

// dx may alias dy (kernels.h): the in-place gradients equal the out-of-place ones, bit for bit.
TEST(CpuThreadsTest, NormGradsInPlace) {
  const std::vector<float> x = Random(kN, 41), dy = Random(kN, 42), gamma = Random(kCols, 43);
  for (int threads : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    KernelOptions options;
    options.threads = threads;
    std::unique_ptr<Kernels> k = NewCpuKernels(options);
    std::vector<float> dx(kN), dgamma(kCols), dbeta(kCols);
    k->LayerNormGrad(x.data(), gamma.data(), dy.data(), dx.data(), dgamma.data(), dbeta.data(),
                     kRows, kCols, 1e-5f);
    std::vector<float> in_place = dy, dgamma2(kCols), dbeta2(kCols);
    k->LayerNormGrad(x.data(), gamma.data(), in_place.data(), in_place.data(), dgamma2.data(),
                     dbeta2.data(), kRows, kCols, 1e-5f);
    EXPECT_EQ(in_place, dx);
    EXPECT_EQ(dgamma2, dgamma);
    EXPECT_EQ(dbeta2, dbeta);

    k->RmsNormGrad(x.data(), gamma.data(), dy.data(), dx.data(), dgamma.data(), kRows, kCols,
                   1e-6f);
    in_place = dy;
    k->RmsNormGrad(x.data(), gamma.data(), in_place.data(), in_place.data(), dgamma2.data(),
                   kRows, kCols, 1e-6f);
    EXPECT_EQ(in_place, dx);
    EXPECT_EQ(dgamma2, dgamma);
  }
}

TEST(CpuThreadsTest, CrossEntropyKernels) {
  const int64_t rows = kRows, cols = kVocab, n = rows * cols;
  const std::vector<float> logits = Random(n, 51, -8.0f, 8.0f);
  std::vector<int64_t> targets(rows);
  std::mt19937 rng(52);
  // Half the targets outside this shard of columns [1000, 1000 + cols).
  std::uniform_int_distribution<int64_t> id(0, 2 * cols);
  for (int64_t& t : targets) t = id(rng);
  const std::vector<float> d_sumexp = Random(rows, 53), d_tlogit = Random(rows, 54);
  ExpectSameOnAnyThreads("RowMax+CrossEntropyParts+Grad", {rows, rows, rows, n},
                         [&](Kernels& k, std::vector<float*>& o) {
                           k.RowMax(logits.data(), o[0], rows, cols);
                           k.CrossEntropyParts(logits.data(), o[0], targets.data(), v1::I64, o[1],
                                               o[2], rows, cols, /*col_offset=*/1000);
                           k.CrossEntropyPartsGrad(logits.data(), o[0], targets.data(), v1::I64,
                                                   d_sumexp.data(), d_tlogit.data(), o[3], rows,
                                                   cols, /*col_offset=*/1000);
                         });
}

// A box [2, 301, 517] at offsets (1, 50, 20) of a [4, 400, 600] tensor: thread ranges cut its
// rows, whose global indices are not contiguous from one row to the next.
TEST(CpuThreadsTest, DropoutOfABox) {
  GlobalBox box;
  box.rank = 3;
  const int64_t global[3] = {4, 400, 600}, offsets[3] = {1, 50, 20}, lengths[3] = {2, 301, 517};
  for (int a = 0; a < 3; ++a) {
    box.global[a] = global[a];
    box.offsets[a] = offsets[a];
    box.lengths[a] = lengths[a];
  }
  const int64_t n = 2 * 301 * 517;
  const std::vector<float> x = Random(n, 61);
  DropoutSpec spec;
  spec.p = 0.3f;
  spec.seed = 7;
  spec.key = 99;
  spec.step = 3;
  ExpectSameOnAnyThreads("Dropout", {n}, [&](Kernels& k, std::vector<float*>& o) {
    k.Dropout(x.data(), o[0], n, spec, box);
  });
}

}  // namespace
}  // namespace weft
