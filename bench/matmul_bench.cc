// Matmul throughput of the CPU backend (Kernels::Matmul) against OpenBLAS cblas_sgemm called
// directly, on the shapes of one training step of the seed's MLP (batch 512, 1024 -> 4096 -> 1024):
// forward, input gradient (trans_b) and weight gradient (trans_a) of both layers.
// Prints a table of GFLOP/s (median of repeats). No test asserts on it.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "worker/kernels/cpu/cpu_kernels.h"

namespace {

struct Shape {
  const char* what;
  int64_t m, n, k;
  bool trans_a, trans_b;
};

double MedianSeconds(const std::function<void()>& fn, int repeats) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  const Shape shapes[] = {
      {"fc0 forward   x@W", 512, 4096, 1024, false, false},
      {"fc1 forward   h@W", 512, 1024, 4096, false, false},
      {"fc1 dX        dy@W^T", 512, 4096, 1024, false, true},
      {"fc1 dW        h^T@dy", 4096, 1024, 512, true, false},
      {"fc0 dW        x^T@dh", 1024, 4096, 512, true, false},
  };
  auto kernels = weft::NewCpuKernels();
  std::printf("%-22s %16s %16s %8s\n", "matmul (m,n,k)", "weft GFLOP/s", "sgemm GFLOP/s", "ratio");
  double total_weft = 0, total_blas = 0;
  for (const Shape& s : shapes) {
    const int64_t a_n = s.m * s.k, b_n = s.k * s.n, c_n = s.m * s.n;
    auto* a = static_cast<float*>(kernels->Allocate(a_n * sizeof(float)));
    auto* b = static_cast<float*>(kernels->Allocate(b_n * sizeof(float)));
    auto* c = static_cast<float*>(kernels->Allocate(c_n * sizeof(float)));
    std::vector<float> c2(c_n);
    for (int64_t i = 0; i < a_n; ++i) a[i] = static_cast<float>((i % 17) - 8) * 0.01f;
    for (int64_t i = 0; i < b_n; ++i) b[i] = static_cast<float>((i % 13) - 6) * 0.01f;
    const double flops = 2.0 * s.m * s.n * s.k;
    double tw = MedianSeconds(
        [&] { kernels->Matmul(a, b, c, s.m, s.n, s.k, s.trans_a, s.trans_b); }, 15);
    const int lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
    double tb = MedianSeconds(
        [&] {
          cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                      s.trans_b ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f, a, lda, b, ldb,
                      0.0f, c2.data(), s.n);
        },
        15);
    total_weft += tw;
    total_blas += tb;
    std::printf("%-22s %16.1f %16.1f %8.3f   (%ld,%ld,%ld)\n", s.what, flops / tw / 1e9,
                flops / tb / 1e9, tb / tw, static_cast<long>(s.m), static_cast<long>(s.n),
                static_cast<long>(s.k));
    kernels->Free(a);
    kernels->Free(b);
    kernels->Free(c);
  }
  std::printf("all five: weft %.4f s, sgemm %.4f s, weft/sgemm time %.3f\n", total_weft,
              total_blas, total_weft / total_blas);

  // The rest of the step: the elementwise and optimizer kernels on the same model's sizes.
  const int64_t params = 2 * 1024 * 4096, acts = 512 * 4096, outs = 512 * 1024;
  std::vector<float*> bufs;
  for (int i = 0; i < 4; ++i) {
    bufs.push_back(static_cast<float*>(kernels->Allocate(params * sizeof(float))));
    for (int64_t j = 0; j < params; ++j) bufs[i][j] = static_cast<float>((j % 7) + 1) * 0.01f;
  }
  auto* out = static_cast<float*>(kernels->Allocate(params * sizeof(float)));
  weft::AdamWHyper hyper;
  std::printf("\n%-40s %12s\n", "kernel (elements)", "ms");
  std::printf("%-40s %12.2f\n", "adamw (8388608: both weights)",
              1e3 * MedianSeconds([&] { kernels->AdamW(bufs[0], bufs[1], bufs[2], bufs[3], params, hyper, 3, nullptr); }, 9));
  std::printf("%-40s %12.2f\n", "relu (2097152)",
              1e3 * MedianSeconds([&] { kernels->Relu(bufs[1], out, acts); }, 9));
  std::printf("%-40s %12.2f\n", "relu_grad (2097152)",
              1e3 * MedianSeconds([&] { kernels->ReluGrad(bufs[1], bufs[2], out, acts); }, 9));
  std::printf("%-40s %12.2f\n", "mse_loss + mse_grad (524288)",
              1e3 * MedianSeconds([&] {
                kernels->MseLoss(bufs[1], bufs[2], out, outs, 1.0f);
                kernels->MseGrad(bufs[1], bufs[2], out + 1, outs, 1.0f);
              }, 9));
  return 0;
}
