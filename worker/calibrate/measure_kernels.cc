// MeasureKernels (calibrate.h): each kernel of the table below over its shapes, fitted per kind
// and storage dtype. A shape is four numbers: MATMUL {m, n, k}, ATTENTION {B, T, H, D}, MEMORY
// {bytes of the distinct buffers the call reads and writes}.
#include <array>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/status.h"
#include "worker/calibrate/calibrate.h"
#include "worker/kernels/backend.h"

namespace weft::calibrate {
namespace {

// Unused trailing numbers are 0 (and printed as such in a report).
using Shape = std::array<int64_t, 4>;
constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

// The buffers of one shape's calls, given back to the backend when it goes.
class Arena {
 public:
  explicit Arena(Kernels& kernels) : kernels_(kernels) {}
  ~Arena() {
    for (void* p : blocks_) kernels_.Free(p);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // n elements of dtype, each `value`.
  absl::StatusOr<void*> Elements(int64_t n, v1::DType dtype, double value = 0.5) {
    const int64_t bytes = n * DTypeSize(dtype);
    void* p = kernels_.Allocate(bytes);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes"));
    }
    blocks_.push_back(p);
    kernels_.Fill(p, n, dtype, value);
    return p;
  }
  absl::StatusOr<float*> Floats(int64_t n, double value = 0.5) {
    ASSIGN_OR_RETURN(void* p, Elements(n, v1::F32, value));
    return static_cast<float*>(p);
  }

 private:
  Kernels& kernels_;
  std::vector<void*> blocks_;  // owned, from kernels_.Allocate
};

// One shape ready to run: the work of a call in its fit's units, and the call.
struct Call {
  double units = 0;
  std::function<void()> run;
};

// The buffers of an elementwise op over n elements: `operands` storage buffers of `dtype`, and
// for bf16 as many float32 copies, which the call widens into and rounds back from as the
// executor's RunWidened does.
struct Elementwise {
  std::vector<void*> stored;
  std::vector<float*> wide;
};
absl::StatusOr<Elementwise> ElementwiseBuffers(Arena& arena, int operands, int64_t n,
                                               v1::DType dtype) {
  Elementwise e;
  for (int i = 0; i < operands; ++i) {
    ASSIGN_OR_RETURN(void* p, arena.Elements(n, dtype));
    e.stored.push_back(p);
    if (dtype == v1::BF16) {
      ASSIGN_OR_RETURN(float* w, arena.Floats(n));
      e.wide.push_back(w);
    } else {
      e.wide.push_back(static_cast<float*>(p));
    }
  }
  return e;
}

// Runs `op` on the float32 views, widening the bf16 inputs first and rounding the outputs
// (the operands from `first_output` on) back after.
std::function<void()> Widened(Kernels& k, Elementwise e, int64_t n, v1::DType dtype,
                              int first_output, std::function<void(const Elementwise&)> op) {
  return [&k, e = std::move(e), n, dtype, first_output, op = std::move(op)] {
    const bool bf16 = dtype == v1::BF16;
    for (int i = 0; bf16 && i < first_output; ++i) {
      k.Cast(e.stored[i], v1::BF16, e.wide[i], v1::F32, n);
    }
    op(e);
    for (int i = first_output; bf16 && i < static_cast<int>(e.stored.size()); ++i) {
      k.Cast(e.wide[i], v1::F32, e.stored[i], v1::BF16, n);
    }
  };
}

template <v1::DType kDType>
absl::StatusOr<Call> Matmul(Kernels& k, Arena& arena, const Shape& s) {
  const int64_t m = s[0], n = s[1], kk = s[2];
  // Operands a [m, k], b [k, n], c [m, n] as one Elementwise each of its own size.
  Elementwise a, b, c;
  ASSIGN_OR_RETURN(a, ElementwiseBuffers(arena, 1, m * kk, kDType));
  ASSIGN_OR_RETURN(b, ElementwiseBuffers(arena, 1, kk * n, kDType));
  ASSIGN_OR_RETURN(c, ElementwiseBuffers(arena, 1, m * n, kDType));
  const bool bf16 = kDType == v1::BF16;
  return Call{.units = 2.0 * m * n * kk, .run = [&k, a, b, c, m, n, kk, bf16] {
                if (bf16) {
                  k.Cast(a.stored[0], v1::BF16, a.wide[0], v1::F32, m * kk);
                  k.Cast(b.stored[0], v1::BF16, b.wide[0], v1::F32, kk * n);
                }
                k.Matmul(a.wide[0], b.wide[0], c.wide[0], m, n, kk, false, false);
                if (bf16) k.Cast(c.wide[0], v1::F32, c.stored[0], v1::BF16, m * n);
              }};
}

AttentionShape AttentionOf(const Shape& s) {
  AttentionShape a;
  a.batch = s[0];
  a.seq = s[1];
  a.heads = a.kv_heads = s[2];
  a.head_dim = s[3];
  a.scale = 1.0f / std::sqrt(static_cast<float>(s[3]));
  a.global_batch = s[0];
  a.global_heads = s[2];
  return a;
}

double AttentionFlops(const Shape& s) {
  return 4.0 * s[0] * s[2] * static_cast<double>(s[1]) * s[1] * s[3];
}

absl::StatusOr<Call> Attention(Kernels& k, Arena& arena, const Shape& s) {
  const int64_t n = s[0] * s[1] * s[2] * s[3];
  ASSIGN_OR_RETURN(float* q, arena.Floats(n));
  ASSIGN_OR_RETURN(float* kv, arena.Floats(n, 0.25));
  ASSIGN_OR_RETURN(float* out, arena.Floats(n));
  const AttentionShape shape = AttentionOf(s);
  return Call{.units = AttentionFlops(s),
              .run = [&k, q, kv, out, shape] { k.Attention(q, kv, kv, out, shape); }};
}

// ComputeWork prices ATTENTION_GRAD at twice the forward's flops under the same fit.
absl::StatusOr<Call> AttentionGrad(Kernels& k, Arena& arena, const Shape& s) {
  const int64_t n = s[0] * s[1] * s[2] * s[3];
  ASSIGN_OR_RETURN(float* q, arena.Floats(n));
  ASSIGN_OR_RETURN(float* kv, arena.Floats(n, 0.25));
  ASSIGN_OR_RETURN(float* dout, arena.Floats(n));
  ASSIGN_OR_RETURN(float* dq, arena.Floats(n));
  ASSIGN_OR_RETURN(float* dk, arena.Floats(n));
  ASSIGN_OR_RETURN(float* dv, arena.Floats(n));
  const AttentionShape shape = AttentionOf(s);
  return Call{.units = 2 * AttentionFlops(s), .run = [&k, q, kv, dout, dq, dk, dv, shape] {
                k.AttentionGrad(q, kv, kv, dout, dq, dk, dv, shape);
              }};
}

// out = a + b: three buffers.
template <v1::DType kDType>
absl::StatusOr<Call> Add(Kernels& k, Arena& arena, const Shape& s) {
  const int64_t n = s[0] / (3 * DTypeSize(kDType));
  ASSIGN_OR_RETURN(Elementwise e, ElementwiseBuffers(arena, 3, n, kDType));
  return Call{.units = 3.0 * n * DTypeSize(kDType),
              .run = Widened(k, std::move(e), n, kDType, 2, [&k, n](const Elementwise& e) {
                k.Add(e.wide[0], e.wide[1], e.wide[2], n);
              })};
}

// out = max(x, 0): two buffers.
template <v1::DType kDType>
absl::StatusOr<Call> Relu(Kernels& k, Arena& arena, const Shape& s) {
  const int64_t n = s[0] / (2 * DTypeSize(kDType));
  ASSIGN_OR_RETURN(Elementwise e, ElementwiseBuffers(arena, 2, n, kDType));
  return Call{.units = 2.0 * n * DTypeSize(kDType),
              .run = Widened(k, std::move(e), n, kDType, 1,
                             [&k, n](const Elementwise& e) { k.Relu(e.wide[0], e.wide[1], n); })};
}

// param, grad, m, v: four float32 buffers, three updated in place.
absl::StatusOr<Call> AdamW(Kernels& k, Arena& arena, const Shape& s) {
  const int64_t n = s[0] / (4 * sizeof(float));
  ASSIGN_OR_RETURN(float* param, arena.Floats(n));
  ASSIGN_OR_RETURN(float* grad, arena.Floats(n, 0.01));
  ASSIGN_OR_RETURN(float* m, arena.Floats(n, 0));
  ASSIGN_OR_RETURN(float* v, arena.Floats(n, 0));
  return Call{.units = 4.0 * n * sizeof(float), .run = [&k, param, grad, m, v, n] {
                k.AdamW(param, grad, m, v, n, AdamWHyper{}, /*step=*/1, /*grad_scale=*/nullptr);
              }};
}

// One kernel and the shapes it is measured at; every probe of a kind and dtype feeds one fit.
struct KernelProbe {
  const char* name;
  v1::KernelCost::Kind kind;
  v1::DType dtype;
  std::vector<Shape> shapes;
  std::vector<Shape> quick_shapes;
  absl::StatusOr<Call> (*prepare)(Kernels&, Arena&, const Shape&);
  // Timed on kernels built with this matmul precision (KernelCost.precision "bf16" for kBf16).
  MatmulPrecision precision = MatmulPrecision::kF32;
};

// From 4 KiB, where the fixed cost of an op (its dispatch) shows, to 64 MiB, past the caches.
const std::vector<Shape> kMemoryShapes = {{4 * kKiB}, {16 * kKiB}, {64 * kKiB}, {256 * kKiB},
                                          {kMiB},     {4 * kMiB},  {16 * kMiB}, {64 * kMiB}};
const std::vector<Shape> kQuickMemoryShapes = {{64 * kKiB}, {kMiB}, {4 * kMiB}};

const std::vector<KernelProbe>& Probes() {
  static const auto* probes = new std::vector<KernelProbe>{
      {.name = "MATMUL f32",
       .kind = v1::KernelCost::MATMUL,
       .dtype = v1::F32,
       .shapes = {{64, 64, 64},
                  {128, 128, 128},
                  {256, 256, 256},
                  {512, 512, 512},
                  {128, 1024, 512},
                  {1024, 1024, 1024}},
       .quick_shapes = {{64, 64, 64}, {128, 128, 128}, {256, 256, 256}},
       .prepare = Matmul<v1::F32>},
      {.name = "MATMUL bf16",
       .kind = v1::KernelCost::MATMUL,
       .dtype = v1::BF16,
       .shapes = {{64, 64, 64}, {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}},
       .quick_shapes = {{64, 64, 64}, {128, 128, 128}},
       .prepare = Matmul<v1::BF16>},
      // `precision: bf16`: f32 operands, bf16 products.
      {.name = "MATMUL f32 (precision bf16)",
       .kind = v1::KernelCost::MATMUL,
       .dtype = v1::F32,
       .shapes = {{64, 64, 64}, {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}},
       .quick_shapes = {{64, 64, 64}, {128, 128, 128}},
       .prepare = Matmul<v1::F32>,
       .precision = MatmulPrecision::kBf16},
      {.name = "ATTENTION f32",
       .kind = v1::KernelCost::ATTENTION,
       .dtype = v1::F32,
       .shapes = {{1, 64, 4, 64}, {1, 128, 4, 64}, {1, 256, 8, 64}, {2, 512, 8, 64}},
       .quick_shapes = {{1, 32, 2, 32}, {1, 64, 4, 64}},
       .prepare = Attention},
      {.name = "ATTENTION_GRAD f32",
       .kind = v1::KernelCost::ATTENTION,
       .dtype = v1::F32,
       .shapes = {{1, 64, 4, 64}, {1, 128, 4, 64}, {1, 256, 8, 64}},
       .quick_shapes = {{1, 32, 2, 32}},
       .prepare = AttentionGrad},
      {.name = "ADD f32",
       .kind = v1::KernelCost::MEMORY,
       .dtype = v1::F32,
       .shapes = kMemoryShapes,
       .quick_shapes = kQuickMemoryShapes,
       .prepare = Add<v1::F32>},
      {.name = "RELU f32",
       .kind = v1::KernelCost::MEMORY,
       .dtype = v1::F32,
       .shapes = kMemoryShapes,
       .quick_shapes = kQuickMemoryShapes,
       .prepare = Relu<v1::F32>},
      {.name = "ADAMW f32",
       .kind = v1::KernelCost::MEMORY,
       .dtype = v1::F32,
       .shapes = kMemoryShapes,
       .quick_shapes = kQuickMemoryShapes,
       .prepare = AdamW},
      {.name = "ADD bf16",
       .kind = v1::KernelCost::MEMORY,
       .dtype = v1::BF16,
       .shapes = kMemoryShapes,
       .quick_shapes = kQuickMemoryShapes,
       .prepare = Add<v1::BF16>},
      {.name = "RELU bf16",
       .kind = v1::KernelCost::MEMORY,
       .dtype = v1::BF16,
       .shapes = kMemoryShapes,
       .quick_shapes = kQuickMemoryShapes,
       .prepare = Relu<v1::BF16>},
  };
  return *probes;
}

}  // namespace

absl::StatusOr<std::vector<v1::KernelCost>> MeasureKernels(
    const KernelCalibrationOptions& options) {
  // Kernels of each matmul precision, built when a probe first asks for it.
  std::map<MatmulPrecision, std::unique_ptr<Kernels>> by_precision;
  const int reps = options.quick ? 7 : 9;
  const double budget_s = options.quick ? 0.02 : 0.15;
  // (kind, dtype, precision) in the order the table first names them, and their timings.
  using Key = std::tuple<v1::KernelCost::Kind, v1::DType, MatmulPrecision>;
  std::vector<Key> order;
  std::map<Key, std::vector<Timing>> timings;
  for (const KernelProbe& probe : Probes()) {
    std::unique_ptr<Kernels>& made = by_precision[probe.precision];
    if (made == nullptr) {
      KernelOptions kernel_options = options.kernels;
      kernel_options.precision = probe.precision;
      ASSIGN_OR_RETURN(made, NewKernels(kernel_options));
    }
    Kernels* kernels = made.get();
    const Key key{probe.kind, probe.dtype, probe.precision};
    if (!timings.count(key)) order.push_back(key);
    for (const Shape& shape : options.quick ? probe.quick_shapes : probe.shapes) {
      const std::string what = absl::StrCat(probe.name, " [", absl::StrJoin(shape, ","), "]");
      Arena arena(*kernels);
      absl::StatusOr<Call> call = probe.prepare(*kernels, arena, shape);
      if (!call.ok()) return Annotate(call.status(), absl::StrCat("calibrating ", what));
      timings[key].push_back(TimeCalls(what, call->units, call->run, reps, budget_s));
    }
    RETURN_IF_ERROR(Annotate(kernels->Synchronize(), absl::StrCat("calibrating ", probe.name)));
  }
  std::vector<v1::KernelCost> costs;
  for (const auto& key : order) {
    v1::KernelCost& cost = costs.emplace_back();
    cost.set_kind(std::get<0>(key));
    cost.set_dtype(std::get<1>(key));
    if (std::get<2>(key) == MatmulPrecision::kBf16) cost.set_precision("bf16");
    *cost.mutable_fit() = FitLinear(timings[key]);
    for (const Timing& t : timings[key]) {
      if (options.report) options.report(t, cost.fit());
    }
  }
  return costs;
}

}  // namespace weft::calibrate
