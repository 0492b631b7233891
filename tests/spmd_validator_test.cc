// The gate for every SPMD rule and every reshard (DTensor's strategy_validation): enumerate the
// placements of an op's inputs on 1-d and 2-d meshes, ask the planner what it does (the rule's
// decision plus the reshards it inserts), run every rank's Program in one process with the real
// CPU kernels and in-process communicators, and compare each rank's local result with its slice
// of the full single-device result computed here in float64. A Partial result is checked as the
// sum over its group of the locals. Reports by name every WRONG combination (numbers differ) and
// every MISSING one (the planner errs although a correct plan exists: all of R is one).
//
// Placements are Replicate, Shard(each axis), Partial(sum) and Partial(avg) on meshes [2], [3],
// [2,2], [2,3], with even and uneven shapes (uneven ones leave empty shards on [2,3]). Inputs are
// fed as parameters initialized FROM_FILE, one file entry per Partial term, so a Partial input is
// a genuine split into different terms. Values are multiples of 1/8: sums of terms and every
// sum-collective are exact in float32.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dist_attr.h"
#include "common/mesh.h"
#include "common/philox.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "common/dtype.h"
#include "planner/emit.h"
#include "planner/planner.h"
#include "planner/graph.h"
#include "planner/lower.h"
#include "planner/op_table.h"
#include "planner/propagate.h"
#include "planner/spmd.h"
#include "worker/comm/local/local_communicator.h"
#include "worker/executor/executor.h"

namespace weft::planner {
namespace {

// ---------------------------------------------------------------------------------------------
// Float64 reference tensors and the single-device math of every op.

struct Array {
  std::vector<int64_t> shape;
  std::vector<double> v;
};

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string Dims(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

// Tensors of rank > 2 as [prod(leading), last] (program.proto).
int64_t Rows(const Array& a) { return NumElements(a.shape) / a.shape.back(); }

constexpr double kLr = 0.1, kWeightDecay = 0.01, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;

double Phi(double x) { return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }
double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }

// MATMUL contracting c axes (program.proto): a viewed [prod(a[:-c]), prod(a[-c:])] (transposed:
// [prod(a[:c]), prod(a[c:])]), b viewed [prod(b[:c]), prod(b[c:])] (transposed: [prod(b[:-c]),
// prod(b[-c:])]).
Array Matmul(const Array& a, const Array& b, bool ta, bool tb, int c,
             std::vector<int64_t> out_shape) {
  auto view = [](const std::vector<int64_t>& s, int leading) {
    const int64_t rows = NumElements(std::vector<int64_t>(s.begin(), s.begin() + leading));
    return std::make_pair(rows, NumElements(s) / rows);
  };
  const auto [ar, ac] = view(a.shape, ta ? c : static_cast<int>(a.shape.size()) - c);
  const auto [br, bc] = view(b.shape, tb ? static_cast<int>(b.shape.size()) - c : c);
  const int64_t m = ta ? ac : ar, k = ta ? ar : ac, n = tb ? br : bc;
  Array out{std::move(out_shape), {}};
  out.v.assign(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) {
        s += (ta ? a.v[l * ac + i] : a.v[i * ac + l]) * (tb ? b.v[j * bc + l] : b.v[l * bc + j]);
      }
      out.v[i * n + j] = s;
    }
  }
  return out;
}

Array Map(const Array& a, const std::function<double(double)>& f) {
  Array out = a;
  for (double& x : out.v) x = f(x);
  return out;
}

Array Zip(const Array& a, const Array& b, const std::function<double(double, double)>& f) {
  Array out = a;
  for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = f(a.v[i], b.v[i]);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The op cases: one per (registry op type, attribute variant, shape set).

// How an input's placement is chosen: enumerated (at most two inputs of a case), always whole,
// or as input `follows` of the same rank has it (whole where that one is Partial, unless this
// one may be Partial): the inputs an op needs placed alike (optimizer states, attention's k).
constexpr int kEnumerated = -1, kWhole = -2;

struct InputSpec {
  std::string name;
  std::vector<int64_t> shape;
  bool partial = true;    // enumerate Partial placements for it (not for optimizer states)
  bool positive = false;  // adamw's v, a sum of exponentials
  int follows = kEnumerated;
  int64_t ids = 0;  // > 0: I32 ids in [0, ids) (tokens, targets), never Partial
};

InputSpec Follower(std::string name, std::vector<int64_t> shape, int follows, bool partial = true) {
  InputSpec in{std::move(name), std::move(shape), partial};
  in.follows = follows;
  return in;
}

InputSpec Ids(std::string name, std::vector<int64_t> shape, int64_t vocab,
              int follows = kEnumerated) {
  InputSpec in{std::move(name), std::move(shape), false};
  in.follows = follows;
  in.ids = vocab;
  return in;
}

struct OpCase {
  std::string type;     // registry key
  std::string variant;  // attributes, e.g. "transpose_a"
  std::string shapes;   // "even" | "uneven" | "rank3"
  Attrs attrs;          // the op's attributes (op_table.h)
  std::vector<InputSpec> inputs;
  std::vector<std::vector<int64_t>> outputs;  // global shapes
  std::vector<v1::DType> output_dtypes;       // empty: F32
  std::vector<int> updated;  // update ops: inputs written in place, checked instead of outputs
  std::function<std::vector<Array>(const std::vector<Array>&)> reference;

  std::string Label() const {
    return variant.empty() ? absl::StrCat(type, "/", shapes)
                           : absl::StrCat(type, "[", variant, "]/", shapes);
  }
};

void PrintTo(const OpCase& c, std::ostream* os) { *os << c.Label(); }

// Dims of the two shape sets: "even" divides by 2, 3, 4 and 6 (every nesting of the meshes);
// "uneven" leaves remainders everywhere and, nested on [2,3], empty shards.
struct Dims3 {
  int64_t m, k, n;
};
constexpr Dims3 kEven{12, 12, 12};
constexpr Dims3 kUneven{5, 7, 4};

std::vector<OpCase> MatmulCases() {
  std::vector<OpCase> out;
  for (const auto& [label, d] :
       {std::make_pair("even", kEven), std::make_pair("uneven", kUneven)}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      OpCase c;
      c.type = "matmul";
      c.variant = ta && tb ? "transpose_a,transpose_b"
                  : ta     ? "transpose_a"
                  : tb     ? "transpose_b"
                           : "";
      c.shapes = label;
      c.attrs = Attrs{{"transpose_a", ta}, {"transpose_b", tb}};
      c.inputs = {{"a", ta ? std::vector<int64_t>{d.k, d.m} : std::vector<int64_t>{d.m, d.k}},
                  {"b", tb ? std::vector<int64_t>{d.n, d.k} : std::vector<int64_t>{d.k, d.n}}};
      c.outputs = {{d.m, d.n}};
      std::vector<int64_t> os = c.outputs[0];
      c.reference = [ta, tb, os](const std::vector<Array>& in) {
        return std::vector<Array>{Matmul(in[0], in[1], ta, tb, 1, os)};
      };
      out.push_back(std::move(c));
    }
  }
  // Rank-3 activations as the MLP's VJP makes them: y = x @ W, dx = dy @ W^T, dW = x^T @ dy (the
  // last contracts B and T: contract 2).
  const int64_t B = 2, T = 3, K = 5, N = 4;
  struct Rank3 {
    const char* variant;
    bool ta, tb;
    int contract;
    std::vector<int64_t> a, b, o;
  };
  for (const Rank3& r :
       {Rank3{"", false, false, 1, {B, T, K}, {K, N}, {B, T, N}},
        Rank3{"transpose_b", false, true, 1, {B, T, N}, {K, N}, {B, T, K}},
        Rank3{"transpose_a,contract=2", true, false, 2, {B, T, K}, {B, T, N}, {K, N}}}) {
    OpCase c;
    c.type = "matmul";
    c.variant = r.variant;
    c.shapes = "rank3";
    c.attrs =
        Attrs{{"transpose_a", r.ta}, {"transpose_b", r.tb}, {"contract", int64_t{r.contract}}};
    c.inputs = {{"a", r.a}, {"b", r.b}};
    c.outputs = {r.o};
    const bool ta = r.ta, tb = r.tb;
    const int contract = r.contract;
    const std::vector<int64_t> os = r.o;
    c.reference = [ta, tb, contract, os](const std::vector<Array>& in) {
      return std::vector<Array>{Matmul(in[0], in[1], ta, tb, contract, os)};
    };
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<OpCase> OtherCases() {
  std::vector<OpCase> out;
  struct ShapeSet {
    const char* label;
    std::vector<int64_t> x;
  };
  for (const ShapeSet& s :
       {ShapeSet{"even", {kEven.m, kEven.k}}, ShapeSet{"uneven", {kUneven.m, kUneven.k}},
        ShapeSet{"rank3", {2, 3, 5}}}) {
    const std::vector<int64_t> x = s.x;
    const int64_t n = x.back();
    auto base = [&](const std::string& type) {
      OpCase c;
      c.type = type;
      c.shapes = s.label;
      return c;
    };
    {
      OpCase c = base("bias_add");
      c.inputs = {{"x", x}, {"b", {n}}};
      c.outputs = {x};
      c.reference = [](const std::vector<Array>& in) {
        Array o = in[0];
        for (size_t i = 0; i < o.v.size(); ++i) o.v[i] += in[1].v[i % in[1].v.size()];
        return std::vector<Array>{o};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("bias_grad");
      c.inputs = {{"dy", x}};
      c.outputs = {{n}};
      c.reference = [n](const std::vector<Array>& in) {
        Array o{{n}, std::vector<double>(n, 0.0)};
        for (size_t i = 0; i < in[0].v.size(); ++i) o.v[i % n] += in[0].v[i];
        return std::vector<Array>{o};
      };
      out.push_back(std::move(c));
    }
    if (std::string(s.label) == "rank3") continue;  // elementwise ops do not care about rank
    {
      OpCase c = base("relu");
      c.inputs = {{"x", x}};
      c.outputs = {x};
      c.reference = [](const std::vector<Array>& in) {
        return std::vector<Array>{Map(in[0], [](double v) { return std::max(v, 0.0); })};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("gelu");
      c.inputs = {{"x", x}};
      c.outputs = {x};
      c.reference = [](const std::vector<Array>& in) {
        return std::vector<Array>{Map(in[0], [](double v) { return v * Phi(v); })};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("relu_grad");
      c.inputs = {{"x", x}, {"dy", x}};
      c.outputs = {x};
      c.reference = [](const std::vector<Array>& in) {
        return std::vector<Array>{
            Zip(in[0], in[1], [](double v, double dy) { return v > 0 ? dy : 0.0; })};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("gelu_grad");
      c.inputs = {{"x", x}, {"dy", x}};
      c.outputs = {x};
      c.reference = [](const std::vector<Array>& in) {
        return std::vector<Array>{
            Zip(in[0], in[1], [](double v, double dy) { return dy * (Phi(v) + v * phi(v)); })};
      };
      out.push_back(std::move(c));
    }
    // Activations f and their gradients dy * f'(x) (kernels.h).
    const std::vector<std::pair<std::string, std::function<double(double, double)>>> activations = {
        {"gelu_tanh",
         [](double v, double dy) {
           const double a = std::sqrt(2.0 / M_PI), t = std::tanh(a * (v + 0.044715 * v * v * v));
           return dy * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * a * (1 + 3 * 0.044715 * v * v));
         }},
        {"silu", [](double v, double dy) {
           const double sig = 1 / (1 + std::exp(-v));
           return dy * sig * (1 + v * (1 - sig));
         }}};
    for (const auto& [type, grad] : activations) {
      {
        OpCase c = base(type);
        c.inputs = {{"x", x}};
        c.outputs = {x};
        const bool tanh = type == "gelu_tanh";
        c.reference = [tanh](const std::vector<Array>& in) {
          return std::vector<Array>{Map(in[0], [tanh](double v) {
            return tanh ? 0.5 * v *
                              (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)))
                        : v / (1 + std::exp(-v));
          })};
        };
        out.push_back(std::move(c));
      }
      if (std::string(s.label) == "even") continue;  // as relu_grad's; uneven keeps the time
      OpCase c = base(type + "_grad");
      c.inputs = {{"x", x}, {"dy", x}};
      c.outputs = {x};
      c.reference = [grad = grad](const std::vector<Array>& in) {
        return std::vector<Array>{Zip(in[0], in[1], grad)};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("mul");
      c.inputs = {{"a", x}, {"b", x}};
      c.outputs = {x};
      c.reference = [](const std::vector<Array>& in) {
        return std::vector<Array>{Zip(in[0], in[1], [](double a, double b) { return a * b; })};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("add");
      c.inputs = {{"x", x}, {"y", x}};
      c.outputs = {x};
      c.reference = [](const std::vector<Array>& in) {
        return std::vector<Array>{Zip(in[0], in[1], [](double a, double b) { return a + b; })};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("add");
      c.variant = "3 inputs";
      c.inputs = {{"x", x}, {"y", x}, Follower("z", x, 0, false)};
      c.outputs = {x};
      c.reference = [](const std::vector<Array>& in) {
        Array sum = Zip(in[0], in[1], [](double a, double b) { return a + b; });
        return std::vector<Array>{Zip(sum, in[2], [](double a, double b) { return a + b; })};
      };
      out.push_back(std::move(c));
    }
    // cast: the values (multiples of 1/8) are exact in bf16; to int32 they truncate toward 0.
    for (const v1::DType to : {v1::BF16, v1::I32}) {
      OpCase c = base("cast");
      c.variant = std::string(DTypeName(to));
      c.inputs = {{"x", x}};
      c.outputs = {x};
      c.output_dtypes = {to};
      c.reference = [to](const std::vector<Array>& in) {
        return std::vector<Array>{
            Map(in[0], [to](double v) { return to == v1::I32 ? std::trunc(v) : v; })};
      };
      out.push_back(std::move(c));
    }
    const double numel = static_cast<double>(NumElements(x));
    {
      OpCase c = base("mse");
      c.inputs = {{"pred", x}, {"label", x}};
      c.outputs = {{1}};
      const double scale = static_cast<float>(1.0 / numel);
      c.attrs = Attrs{{"scale", scale}};
      c.reference = [scale](const std::vector<Array>& in) {
        double sum = 0;
        for (size_t i = 0; i < in[0].v.size(); ++i) {
          sum += (in[0].v[i] - in[1].v[i]) * (in[0].v[i] - in[1].v[i]);
        }
        return std::vector<Array>{Array{{1}, {scale * sum}}};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("mse_grad");
      c.inputs = {{"pred", x}, {"label", x}};
      c.outputs = {x};
      const double scale = static_cast<float>(2.0 / numel);
      c.attrs = Attrs{{"scale", scale}};
      c.reference = [scale](const std::vector<Array>& in) {
        return std::vector<Array>{
            Zip(in[0], in[1], [scale](double p, double l) { return scale * (p - l); })};
      };
      out.push_back(std::move(c));
    }
    // Update ops: the parameter and its states are updated in place; states are never Partial.
    {
      OpCase c = base("sgd");
      c.attrs = Attrs{{"lr", kLr}, {"weight_decay", kWeightDecay}};
      c.inputs = {{"param", x}, {"grad", x}};
      c.updated = {0};
      c.reference = [](const std::vector<Array>& in) {
        return std::vector<Array>{
            Zip(in[0], in[1], [](double p, double g) { return p - kLr * (g + kWeightDecay * p); })};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("adamw");
      c.attrs = Attrs{{"lr", kLr}, {"weight_decay", kWeightDecay}, {"beta1", kBeta1},
                      {"beta2", kBeta2}, {"eps", kEps}};
      c.inputs = {{"param", x}, {"grad", x}, Follower("m", x, 0, false),
                  Follower("v", x, 0, false)};
      c.inputs[3].positive = true;
      c.updated = {0, 2, 3};
      c.reference = [](const std::vector<Array>& in) {
        Array p = in[0], m = in[2], v = in[3];
        for (size_t i = 0; i < p.v.size(); ++i) {  // step 1 (kernels.h)
          const double g = in[1].v[i];
          p.v[i] -= kLr * kWeightDecay * p.v[i];
          m.v[i] = kBeta1 * m.v[i] + (1 - kBeta1) * g;
          v.v[i] = kBeta2 * v.v[i] + (1 - kBeta2) * g * g;
          p.v[i] -= kLr * (m.v[i] / (1 - kBeta1)) / (std::sqrt(v.v[i] / (1 - kBeta2)) + kEps);
        }
        return std::vector<Array>{p, m, v};
      };
      out.push_back(std::move(c));
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Transformer ops: references, then their cases.

constexpr double kNormEps = 1e-5, kRopeTheta = 10000.0, kDropoutP = 0.5;
constexpr int64_t kDropoutKey = 0x5eed;
constexpr uint64_t kSeed = 1, kStep = 1;  // SpecFor's seed; the step RunAllRanks runs

// Whether dropout site kDropoutKey keeps global element e in step kStep (kernels.h DropoutSpec);
// a kept value is scaled by 1 / (1 - p) = 2.
bool Kept(int64_t e) {
  const uint64_t stream = static_cast<uint64_t>(kDropoutKey) + kStep * 0x9E3779B97F4A7C15ull;
  return PhiloxUnit(kSeed, stream, static_cast<uint64_t>(e)) >= static_cast<float>(kDropoutP);
}
constexpr double kKeepScale = 1 / (1 - kDropoutP);

Array Zeros(std::vector<int64_t> shape) {
  Array a{std::move(shape), {}};
  a.v.assign(NumElements(a.shape), 0.0);
  return a;
}

// layer_norm (x, gamma, beta) or rms_norm (x, gamma); with dy (in[2]) their gradients
// (dx, dgamma[, dbeta]).
std::vector<Array> NormRef(const std::vector<Array>& in, bool rms, bool grad) {
  const Array& x = in[0];
  const int64_t cols = x.shape.back(), rows = Rows(x);
  Array y = x, dgamma = Zeros({cols}), dbeta = Zeros({cols});
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = &x.v[r * cols];
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t c = 0; c < cols; ++c) mean += row[c] / cols;
    }
    for (int64_t c = 0; c < cols; ++c) var += (row[c] - mean) * (row[c] - mean) / cols;
    const double rstd = 1 / std::sqrt(var + kNormEps);
    if (!grad) {
      for (int64_t c = 0; c < cols; ++c) {
        y.v[r * cols + c] = (row[c] - mean) * rstd * in[1].v[c] + (rms ? 0 : in[2].v[c]);
      }
      continue;
    }
    const double* dy = &in[2].v[r * cols];
    double mean_gdy = 0, mean_gdy_xhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (row[c] - mean) * rstd;
      mean_gdy += in[1].v[c] * dy[c] / cols;
      mean_gdy_xhat += in[1].v[c] * dy[c] * xhat / cols;
      dgamma.v[c] += dy[c] * xhat;
      dbeta.v[c] += dy[c];
    }
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (row[c] - mean) * rstd;
      y.v[r * cols + c] =
          rstd * (in[1].v[c] * dy[c] - (rms ? 0 : mean_gdy) - xhat * mean_gdy_xhat);
    }
  }
  if (!grad) return {y};
  if (rms) return {y, dgamma};
  return {y, dgamma, dbeta};
}

// x [B, T, H, D] rotated at position t (rotate-half), or back.
Array RopeRef(const Array& x, bool inverse) {
  const int64_t B = x.shape[0], T = x.shape[1], H = x.shape[2], D = x.shape[3], half = D / 2;
  Array out = x;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = ((b * T + t) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const double angle = t / std::pow(kRopeTheta, 2.0 * i / D);
          const double c = std::cos(angle), s = (inverse ? -1 : 1) * std::sin(angle);
          const double x1 = x.v[base + i], x2 = x.v[base + i + half];
          out.v[base + i] = x1 * c - x2 * s;
          out.v[base + i + half] = x2 * c + x1 * s;
        }
      }
    }
  }
  return out;
}

// Causal attention of q [B, T, H, D], k, v [B, T, KVH, D], its probabilities dropped out at
// global (b, h, i, j) of [B, H, T, T]; with dout (in[3]) the gradients (dq, dk, dv).
std::vector<Array> AttentionRef(const std::vector<Array>& in, double scale, bool grad) {
  const Array &q = in[0], &k = in[1], &v = in[2];
  const int64_t B = q.shape[0], T = q.shape[1], H = q.shape[2], D = q.shape[3];
  const int64_t KVH = k.shape[2];
  auto at = [&](int64_t heads, int64_t b, int64_t t, int64_t h) {
    return ((b * T + t) * heads + h) * D;
  };
  Array out = Zeros(q.shape), dq = Zeros(q.shape), dk = Zeros(k.shape), dv = Zeros(v.shape);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kh = h / (H / KVH);
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> p(i + 1), kept(i + 1);
        double max = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += q.v[at(H, b, i, h) + d] * k.v[at(KVH, b, j, kh) + d];
          p[j] = scale * s;
          max = std::max(max, p[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += p[j] = std::exp(p[j] - max);
        for (int64_t j = 0; j <= i; ++j) {
          p[j] /= sum;
          kept[j] = Kept(((b * H + h) * T + i) * T + j) ? kKeepScale : 0.0;
        }
        if (!grad) {
          for (int64_t j = 0; j <= i; ++j) {
            for (int64_t d = 0; d < D; ++d) {
              out.v[at(H, b, i, h) + d] += p[j] * kept[j] * v.v[at(KVH, b, j, kh) + d];
            }
          }
          continue;
        }
        const double* dout = &in[3].v[at(H, b, i, h)];
        std::vector<double> dp(i + 1, 0.0);
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t d = 0; d < D; ++d) {
            dp[j] += dout[d] * v.v[at(KVH, b, j, kh) + d] * kept[j];
            dv.v[at(KVH, b, j, kh) + d] += p[j] * kept[j] * dout[d];
          }
          dot += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = scale * p[j] * (dp[j] - dot);
          for (int64_t d = 0; d < D; ++d) {
            dq.v[at(H, b, i, h) + d] += ds * k.v[at(KVH, b, j, kh) + d];
            dk.v[at(KVH, b, j, kh) + d] += ds * q.v[at(H, b, i, h) + d];
          }
        }
      }
    }
  }
  if (!grad) return {out};
  return {dq, dk, dv};
}

// x viewed [outer, n, inner] along axis -> n pieces [outer, inner], and back.
std::vector<Array> UnstackRef(const Array& x, int axis) {
  const int64_t n = x.shape[axis];
  std::vector<int64_t> piece_shape = x.shape;
  piece_shape.erase(piece_shape.begin() + axis);
  const int64_t inner =
      NumElements(std::vector<int64_t>(x.shape.begin() + axis + 1, x.shape.end()));
  const int64_t outer = NumElements(x.shape) / (n * inner);
  std::vector<Array> out(n, Zeros(piece_shape));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t i = 0; i < inner; ++i) out[p].v[o * inner + i] = x.v[(o * n + p) * inner + i];
    }
  }
  return out;
}

Array StackRef(const std::vector<Array>& pieces, std::vector<int64_t> shape, int axis) {
  Array out = Zeros(std::move(shape));
  const int64_t n = static_cast<int64_t>(pieces.size());
  const int64_t inner =
      NumElements(std::vector<int64_t>(out.shape.begin() + axis + 1, out.shape.end()));
  const int64_t outer = NumElements(out.shape) / (n * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t i = 0; i < inner; ++i) {
        out.v[(o * n + p) * inner + i] = pieces[p].v[o * inner + i];
      }
    }
  }
  return out;
}

std::vector<int64_t> Concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<OpCase> TransformerCases() {
  std::vector<OpCase> out;
  // Shapes: "even" divides every split axis by 2, 3, 4 and 6; "uneven" leaves empty shards on
  // [2,3]. Tokens [B, T] of a vocabulary V, channels C; the norms' x and the cross-entropy's
  // tokens (rank 2 where the sequence axis splits); rope's x [B, T, H, D]; attention's q
  // [B, T, H, D] and k, v [B, T, KVH, D] (T and D never split).
  struct Shapes {
    const char* label;
    std::vector<int64_t> tokens;
    int64_t vocab, channels;
    std::vector<int64_t> norm, norm_grad, ce_rows, heads_x, q, kv;
  };
  for (const Shapes& s :
       {Shapes{"even", {12, 12}, 12, 12, {12, 12}, {12, 12}, {12}, {12, 12, 12, 4},
               {12, 4, 12, 2}, {12, 4, 12, 2}},
        Shapes{"uneven", {3, 5}, 5, 4, {2, 5, 7}, {5, 7}, {3, 5}, {2, 5, 3, 4}, {3, 5, 4, 2},
               {3, 5, 2, 2}}}) {
    auto base = [&](const std::string& type) {
      OpCase c;
      c.type = type;
      c.shapes = s.label;
      return c;
    };
    const std::vector<int64_t> tokens = s.tokens;
    const int64_t V = s.vocab, C = s.channels;
    const std::vector<int64_t> table = {V, C}, embedded = Concat(tokens, {C});
    {
      OpCase c = base("positions");
      c.outputs = {tokens};
      c.output_dtypes = {v1::I32};
      c.reference = [tokens](const std::vector<Array>&) {
        Array o = Zeros(tokens);
        for (size_t i = 0; i < o.v.size(); ++i) o.v[i] = static_cast<double>(i % tokens.back());
        return std::vector<Array>{o};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("embedding");
      c.inputs = {Ids("ids", tokens, V), {"table", table}};
      c.outputs = {embedded};
      c.reference = [C, embedded](const std::vector<Array>& in) {
        Array o = Zeros(embedded);
        for (size_t r = 0; r < in[0].v.size(); ++r) {
          const int64_t id = static_cast<int64_t>(in[0].v[r]);
          for (int64_t j = 0; j < C; ++j) o.v[r * C + j] = in[1].v[id * C + j];
        }
        return std::vector<Array>{o};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("embedding_grad");
      c.inputs = {Ids("ids", tokens, V), {"dy", embedded}};
      c.outputs = {table};
      c.reference = [C, table](const std::vector<Array>& in) {
        Array o = Zeros(table);
        for (size_t r = 0; r < in[0].v.size(); ++r) {
          const int64_t id = static_cast<int64_t>(in[0].v[r]);
          for (int64_t j = 0; j < C; ++j) o.v[id * C + j] += in[1].v[r * C + j];
        }
        return std::vector<Array>{o};
      };
      out.push_back(std::move(c));
    }
    for (const bool rms : {false, true}) {
      const std::string type = rms ? "rms_norm" : "layer_norm";
      const std::vector<int64_t> x3 = s.norm, cols = {x3.back()};
      OpCase c = base(type);
      c.attrs = Attrs{{"eps", kNormEps}};
      c.inputs = {{"x", x3}, {"gamma", cols}};
      if (!rms) c.inputs.push_back(Follower("beta", cols, 1));
      c.outputs = {x3};
      c.reference = [rms](const std::vector<Array>& in) { return NormRef(in, rms, false); };
      out.push_back(std::move(c));

      OpCase g = base(type + "_grad");
      g.attrs = Attrs{{"eps", kNormEps}};
      const std::vector<int64_t> x = s.norm_grad;
      g.inputs = {{"x", x}, Follower("gamma", {x.back()}, kWhole), {"dy", x}};
      g.outputs = {x, {x.back()}};
      if (!rms) g.outputs.push_back({x.back()});
      g.reference = [rms](const std::vector<Array>& in) { return NormRef(in, rms, true); };
      out.push_back(std::move(g));
    }
    for (const bool inverse : {false, true}) {
      OpCase c = base(inverse ? "rope_grad" : "rope");
      c.attrs = Attrs{{"theta", kRopeTheta}};
      c.inputs = {{"x", s.heads_x}};
      c.outputs = {s.heads_x};
      c.reference = [inverse](const std::vector<Array>& in) {
        return std::vector<Array>{RopeRef(in[0], inverse)};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("dropout");
      c.attrs = Attrs{{"dropout_p", kDropoutP}, {"dropout_key", kDropoutKey}};
      const std::vector<int64_t> x = Concat(tokens, {C});
      c.inputs = {{"x", x}};
      c.outputs = {x};
      c.reference = [](const std::vector<Array>& in) {
        Array o = in[0];
        for (size_t e = 0; e < o.v.size(); ++e) o.v[e] *= Kept(e) ? kKeepScale : 0.0;
        return std::vector<Array>{o};
      };
      out.push_back(std::move(c));
    }
    // Attention: q varies, the other inputs are placed as q is (a Partial v, or dout, stays
    // Partial under the rule's P strategy while q and k are reduced).
    const double scale = 1 / std::sqrt(static_cast<double>(s.q.back()));
    const Attrs attention{{"dropout_p", kDropoutP}, {"dropout_key", kDropoutKey}, {"scale", scale}};
    {
      OpCase c = base("attention");
      c.variant = s.q[2] == s.kv[2] ? "mha" : "gqa";
      c.attrs = attention;
      c.inputs = {{"q", s.q}, Follower("k", s.kv, 0), Follower("v", s.kv, 0)};
      c.outputs = {s.q};
      c.reference = [scale](const std::vector<Array>& in) {
        return AttentionRef(in, scale, false);
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("attention_grad");
      c.variant = s.q[2] == s.kv[2] ? "mha" : "gqa";
      c.attrs = attention;
      c.inputs = {{"q", s.q}, Follower("k", s.kv, 0), Follower("v", s.kv, 0),
                  Follower("dout", s.q, 0)};
      c.outputs = {s.q, s.kv, s.kv};
      c.reference = [scale](const std::vector<Array>& in) { return AttentionRef(in, scale, true); };
      out.push_back(std::move(c));
    }
    // Cross-entropy over logits [rows.., V + 2]: the ids of targets in [0, V + 2).
    const std::vector<int64_t> rows = s.ce_rows;
    const std::vector<int64_t> logits = Concat(rows, {V + 2});
    const int64_t cols = V + 2;
    {
      OpCase c = base("row_max");
      c.inputs = {{"logits", logits}};
      c.outputs = {rows};
      c.reference = [cols, rows](const std::vector<Array>& in) {
        Array m = Zeros(rows);
        for (size_t r = 0; r < m.v.size(); ++r) {
          m.v[r] = -INFINITY;
          for (int64_t j = 0; j < cols; ++j) m.v[r] = std::max(m.v[r], in[0].v[r * cols + j]);
        }
        return std::vector<Array>{m};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("ce_parts");
      c.inputs = {{"logits", logits}, {"m", rows}, Ids("targets", rows, cols, 1)};
      c.outputs = {rows, rows};
      c.reference = [cols, rows](const std::vector<Array>& in) {
        Array sumexp = Zeros(rows), tlogit = Zeros(rows);
        for (size_t r = 0; r < sumexp.v.size(); ++r) {
          for (int64_t j = 0; j < cols; ++j) {
            sumexp.v[r] += std::exp(in[0].v[r * cols + j] - in[1].v[r]);
          }
          tlogit.v[r] = in[0].v[r * cols + static_cast<int64_t>(in[2].v[r])];
        }
        return std::vector<Array>{sumexp, tlogit};
      };
      out.push_back(std::move(c));
    }
    {
      // logits and d_sumexp vary; d_tlogit is placed as d_sumexp, m and targets likewise (whole).
      OpCase c = base("ce_parts_grad");
      c.inputs = {{"logits", logits}, Follower("m", rows, 3, false), Ids("targets", rows, cols, 3),
                  {"d_sumexp", rows}, Follower("d_tlogit", rows, 3)};
      c.outputs = {logits};
      c.reference = [cols](const std::vector<Array>& in) {
        Array d = in[0];
        for (size_t i = 0; i < d.v.size(); ++i) {
          const size_t r = i / cols;
          d.v[i] =
              in[3].v[r] * std::exp(in[0].v[i] - in[1].v[r]) +
              (static_cast<int64_t>(i % cols) == static_cast<int64_t>(in[2].v[r]) ? in[4].v[r] : 0);
        }
        return std::vector<Array>{d};
      };
      out.push_back(std::move(c));
    }
    const double ce_scale = static_cast<float>(1.0 / NumElements(rows));
    {
      OpCase c = base("ce_loss");
      c.attrs = Attrs{{"scale", ce_scale}};
      c.inputs = {
          {"sumexp", rows, true, true}, Follower("m", rows, 0), Follower("tlogit", rows, 0)};
      c.outputs = {{1}};
      c.reference = [ce_scale](const std::vector<Array>& in) {
        double sum = 0;
        for (size_t r = 0; r < in[0].v.size(); ++r) {
          sum += std::log(in[0].v[r]) + in[1].v[r] - in[2].v[r];
        }
        return std::vector<Array>{Array{{1}, {ce_scale * sum}}};
      };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("ce_loss_grad");
      c.attrs = Attrs{{"scale", ce_scale}};
      c.inputs = {{"sumexp", rows, true, true}};
      c.outputs = {rows, rows};
      c.reference = [ce_scale](const std::vector<Array>& in) {
        return std::vector<Array>{Map(in[0], [ce_scale](double v) { return ce_scale / v; }),
                                  Map(in[0], [ce_scale](double) { return -ce_scale; })};
      };
      out.push_back(std::move(c));
    }
    // gpt2's q | k | v: [rows, 3, C] <-> 3 x [rows, C] along axis 1.
    const std::vector<int64_t> piece = {tokens[1], C}, stacked = {tokens[1], 3, C};
    {
      OpCase c = base("unstack");
      c.attrs = Attrs{{"axis", int64_t{1}}};
      c.inputs = {{"x", stacked}};
      c.outputs = {piece, piece, piece};
      c.reference = [](const std::vector<Array>& in) { return UnstackRef(in[0], 1); };
      out.push_back(std::move(c));
    }
    {
      OpCase c = base("stack");
      c.attrs = Attrs{{"axis", int64_t{1}}};
      c.inputs = {{"q", piece}, Follower("k", piece, 0), Follower("v", piece, 0)};
      c.outputs = {stacked};
      c.reference = [stacked](const std::vector<Array>& in) {
        return std::vector<Array>{StackRef(in, stacked, 1)};
      };
      out.push_back(std::move(c));
    }
  }
  return out;
}

std::vector<OpCase> AllOpCases() {
  std::vector<OpCase> out = MatmulCases();
  for (OpCase& c : OtherCases()) out.push_back(std::move(c));
  for (OpCase& c : TransformerCases()) out.push_back(std::move(c));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Enumeration of placements.

// Partial(avg) is enumerated on every mesh but [2,3], which keeps the test near 30 s on 2 cores.
struct OpMesh {
  Mesh mesh;
  bool avg;
};
std::vector<OpMesh> OpMeshes() {
  return {{*Mesh::Create({2}, {}), true},
          {*Mesh::Create({3}, {}), true},
          {*Mesh::Create({2, 2}, {}), true},
          {*Mesh::Create({2, 3}, {}), false}};
}

// Replicate, Shard(each axis) and, when allowed, Partial(sum) and Partial(avg): the choices on
// one mesh dim.
std::vector<Placement> DimChoices(int tensor_ndim, bool partial, bool avg) {
  std::vector<Placement> out = {Placement::Replicate()};
  for (int a = 0; a < tensor_ndim; ++a) out.push_back(Placement::Shard(a));
  if (partial) out.push_back(Placement::Partial(Placement::Reduce::kSum));
  if (partial && avg) out.push_back(Placement::Partial(Placement::Reduce::kAvg));
  return out;
}

// Every DistAttr of a tensor of rank tensor_ndim on mesh.
std::vector<DistAttr> AllAttrs(const Mesh& mesh, int tensor_ndim, bool partial, bool avg = true) {
  const std::vector<Placement> choices = DimChoices(tensor_ndim, partial, avg);
  std::vector<DistAttr> out;
  std::vector<size_t> idx(mesh.ndim(), 0);
  while (true) {
    std::vector<Placement> p;
    for (size_t i : idx) p.push_back(choices[i]);
    out.push_back(*DistAttr::Create(mesh, p, tensor_ndim));
    int d = mesh.ndim() - 1;
    while (d >= 0 && ++idx[d] == choices.size()) idx[d--] = 0;
    if (d < 0) return out;
  }
}

// ---------------------------------------------------------------------------------------------
// Values: multiples of 1/8 in [-2, 2], never 0 (relu's kink); Partial terms likewise.

Array RandomArray(std::vector<int64_t> shape, bool positive, std::mt19937* rng) {
  std::uniform_int_distribution<int> dist(1, 16);
  std::bernoulli_distribution sign(0.5);
  Array a{std::move(shape), {}};
  a.v.resize(NumElements(a.shape));
  for (double& x : a.v) x = dist(*rng) / 8.0 * (positive || sign(*rng) ? 1 : -1);
  return a;
}

// Ids in [0, vocab): token ids, targets.
Array RandomIds(std::vector<int64_t> shape, int64_t vocab, std::mt19937* rng) {
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  Array a{std::move(shape), {}};
  a.v.resize(NumElements(a.shape));
  for (double& x : a.v) x = static_cast<double>(dist(*rng));
  return a;
}

std::vector<int> PartialDims(const DistAttr& attr) {
  std::vector<int> dims;
  for (int d = 0; d < attr.mesh().ndim(); ++d) {
    if (attr.placement(d).is_partial()) dims.push_back(d);
  }
  return dims;
}

// Position of rank in its group along dims, row-major (mesh.h).
int PositionInGroup(const Mesh& mesh, int rank, const std::vector<int>& dims) {
  std::vector<int> group = mesh.GroupRanks(rank, dims);
  return static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
}

// The terms the members of a Partial group of `terms` members hold: they sum to `global`.
std::vector<Array> PartialTerms(const Array& global, int64_t terms, std::mt19937* rng) {
  std::vector<Array> out;
  Array last = global;
  for (int64_t t = 0; t + 1 < terms; ++t) {
    out.push_back(RandomArray(global.shape, false, rng));
    for (size_t i = 0; i < last.v.size(); ++i) last.v[i] -= out.back().v[i];
  }
  out.push_back(std::move(last));
  return out;
}

// Every input's values on one mesh in one safetensors file, written once per mesh rather than
// once per combination: for each way of making mesh dims Partial (sum or avg), the terms the
// members of a Partial group hold, as entries "<name>#<kind per dim>#<position in the group>".
// The group's value is the sum over its Partial(sum) dims of the mean over its Partial(avg)
// dims, so the terms sum to the global value times the sizes of the avg dims.
class TermFile {
 public:
  TermFile(const Mesh& mesh, std::string path) : mesh_(mesh), path_(std::move(path)) {}

  const std::string& path() const { return path_; }

  void Add(const std::string& name, const Array& global, std::mt19937* rng) {
    int combos = 1;
    for (int d = 0; d < mesh_.ndim(); ++d) combos *= 3;
    for (int c = 0; c < combos; ++c) {
      std::vector<Placement> kinds;  // per dim: Replicate (not Partial), Partial(sum|avg)
      int64_t terms = 1;
      double avg = 1;
      for (int d = 0, rest = c; d < mesh_.ndim(); ++d, rest /= 3) {
        kinds.push_back(rest % 3 == 0   ? Placement::Replicate()
                        : rest % 3 == 1 ? Placement::Partial(Placement::Reduce::kSum)
                                        : Placement::Partial(Placement::Reduce::kAvg));
        if (rest % 3 != 0) terms *= mesh_.dim_size(d);
        if (rest % 3 == 2) avg *= static_cast<double>(mesh_.dim_size(d));
      }
      Array scaled = global;
      for (double& v : scaled.v) v *= avg;
      std::vector<Array> t = PartialTerms(scaled, terms, rng);
      for (size_t i = 0; i < t.size(); ++i) {
        entries_.push_back({Entry(name, kinds, static_cast<int>(i)), global.shape,
                            std::vector<float>(t[i].v.begin(), t[i].v.end())});
      }
    }
  }

  // Ids are never Partial: one I32 entry, the whole value.
  void AddIds(const std::string& name, const Array& global) {
    Stored e{Entry(name, std::vector<Placement>(mesh_.ndim(), Placement::Replicate()), 0),
             global.shape, {}, {}};
    for (double v : global.v) e.ids.push_back(static_cast<int32_t>(v));
    entries_.push_back(std::move(e));
  }

  absl::Status Write() const {
    std::vector<SafetensorsFile::TensorToWrite> tensors;
    for (const Stored& e : entries_) {
      if (e.ids.empty()) {
        tensors.push_back({e.name, e.shape, e.values.data()});
      } else {
        tensors.push_back({e.name, e.shape, e.ids.data(), v1::I32});
      }
    }
    return SafetensorsFile::Write(path_, tensors);
  }

  // The entry rank reads for a tensor placed by attr.
  std::string EntryFor(const std::string& name, const DistAttr& attr, int rank) const {
    std::vector<Placement> kinds;
    for (const Placement& p : attr.placements()) {
      kinds.push_back(p.is_partial() ? p : Placement::Replicate());
    }
    return Entry(name, kinds, PositionInGroup(mesh_, rank, PartialDims(attr)));
  }

 private:
  static std::string Entry(const std::string& name, const std::vector<Placement>& kinds,
                           int position) {
    return absl::StrCat(name, "#", FormatPlacements(kinds), "#", position);
  }
  struct Stored {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
    std::vector<int32_t> ids;  // instead of values, for ids
  };
  const Mesh mesh_;
  const std::string path_;
  std::vector<Stored> entries_;
};

// ---------------------------------------------------------------------------------------------
// Planning one op or one reshard into per-rank Programs, and running them.

// An input: a PARAM tensor so that emit gives it an init entry, re-pointed below at its term.
struct PlacedInput {
  std::string name;
  std::vector<int64_t> shape;
  DistAttr attr;
  v1::DType dtype = v1::F32;
};

v1::JobSpec SpecFor(const Mesh& mesh, const std::string& init_from) {
  v1::JobSpec spec;
  spec.set_name("validator");
  *spec.mutable_mesh() = mesh.ToProto();
  spec.mutable_train()->set_steps(1);
  spec.mutable_train()->set_seed(1);
  spec.set_device("cpu");
  spec.set_init_from(init_from);
  v1::Optimizer* opt = spec.mutable_optimizer();
  opt->set_type("adamw");
  opt->set_lr(kLr);
  opt->set_weight_decay(kWeightDecay);
  opt->add_betas(kBeta1);
  opt->add_betas(kBeta2);
  opt->set_eps(kEps);
  return spec;
}

int AddInput(Graph* g, const PlacedInput& in) {
  Tensor t{in.name, in.shape, in.dtype, v1::Buffer::PARAM, "l0"};
  t.dist = in.attr;
  int id = g->AddTensor(std::move(t));
  g->params.push_back(Parameter{id, 0.0f});
  return id;
}

// A graph of layer l0 on mesh, with a loss placeholder: a Program needs a non-empty loss buffer,
// and a rank's piece of the result may be empty.
Graph NewGraph(const Mesh& mesh) {
  Graph g;
  g.mesh = mesh;
  g.layers.push_back(Layer{"l0", 0});
  Tensor t{"validator.loss", {1}, v1::F32, v1::Buffer::LOSS, ""};
  t.dist = DistAttr::Replicated(g.mesh);
  g.loss = g.AddTensor(std::move(t));
  return g;
}

// Emits each rank's Program, its inputs read from `terms`.
absl::StatusOr<std::vector<v1::Program>> EmitAll(const PlannedGraph& planned,
                                                 const std::vector<PlacedInput>& inputs,
                                                 const TermFile& terms) {
  const v1::Program header = ProgramHeader(SpecFor(planned.graph.mesh, terms.path()), "validator", 0);
  MemoryPlanner memory;
  std::vector<v1::Program> programs;
  for (int rank = 0; rank < planned.graph.mesh.size(); ++rank) {
    ASSIGN_OR_RETURN(v1::Program p, EmitProgram(planned, header, rank, &memory));
    for (v1::ParamInit& init : *p.mutable_init()) {
      for (const PlacedInput& in : inputs) {
        if (in.name != init.name()) continue;
        init.set_kind(v1::ParamInit::FROM_FILE);  // emit zeroes non-first Partial(sum) members
        init.set_name(terms.EntryFor(in.name, in.attr, rank));
      }
    }
    programs.push_back(std::move(p));
  }
  return programs;
}

struct RankOutput {
  absl::Status status;
  std::map<std::string, std::vector<float>> values;  // by buffer name
};

// Runs one step of every rank's Program, each rank a thread; reads the named buffers.
std::vector<RankOutput> RunAllRanks(const std::vector<v1::Program>& programs,
                                    const std::vector<std::string>& read) {
  const int world = static_cast<int>(programs.size());
  auto local_world = std::make_shared<LocalWorld>(world, absl::Seconds(5));
  std::vector<RankOutput> out(world);
  // Programs are checked before any rank starts, so that one rejected program does not leave
  // the others waiting for it in a collective.
  std::vector<std::unique_ptr<LocalCommunicatorFactory>> factories;
  std::vector<std::unique_ptr<Executor>> execs;
  for (int r = 0; r < world; ++r) {
    factories.push_back(std::make_unique<LocalCommunicatorFactory>(local_world, r));
    // The programs as planned (collectives started early), run with blocking collectives: the
    // rules and reshards are what this checks, over tens of thousands of short programs, for
    // which a communication thread per executor would double the suite's time. The asynchronous
    // runtime has its own tests (executor_test) and runs in every integration test.
    v1::Program program = programs[r];
    program.set_blocking_collectives(true);
    absl::StatusOr<std::unique_ptr<Executor>> exec =
        Executor::Create(program, factories[r].get());
    if (!exec.ok()) {
      out[r].status = exec.status();
      return out;
    }
    execs.push_back(*std::move(exec));
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      Executor* exec = execs[r].get();
      out[r].status = exec->Initialize();
      if (out[r].status.ok()) out[r].status = exec->RunStep(1).status();
      for (size_t i = 0; out[r].status.ok() && i < read.size(); ++i) {
        absl::StatusOr<std::vector<float>> v = exec->ReadBuffer(read[i]);
        if (!v.ok()) {
          out[r].status = v.status();
        } else {
          out[r].values[read[i]] = *std::move(v);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return out;
}

// Checks every rank's local piece of a tensor with attr against the global value; "" if right.
std::string CheckLocals(const std::string& what, const Array& want, const DistAttr& attr,
                        const std::vector<RankOutput>& ranks, double tolerance) {
  const Mesh& mesh = attr.mesh();
  const std::vector<int> partial = PartialDims(attr);
  double avg_divisor = 1;
  int max_dims = 0;  // Partial(max): the group's value is the largest of its members'
  for (int d : partial) {
    if (attr.placement(d).reduce == Placement::Reduce::kAvg) avg_divisor *= mesh.dim_size(d);
    if (attr.placement(d).reduce == Placement::Reduce::kMax) ++max_dims;
  }
  const bool max = max_dims > 0;
  if (max && max_dims != static_cast<int>(partial.size())) {
    return absl::StrCat(what, " ", attr.ToString(), " mixes Partial(max) with sums");
  }
  for (int rank = 0; rank < mesh.size(); ++rank) {
    const v1::TensorBox box = attr.Box(want.shape, rank);
    const int64_t n = NumElements(attr.LocalShape(want.shape, rank));
    std::vector<double> got(n, max ? -INFINITY : 0.0);
    for (int member : mesh.GroupRanks(rank, partial)) {
      const std::vector<float>& local = ranks[member].values.at(what);
      if (static_cast<int64_t>(local.size()) != n) {
        return absl::StrCat(what, " on rank ", member, " holds ", local.size(),
                            " elements, its local shape ",
                            Dims(attr.LocalShape(want.shape, member)), " holds ", n);
      }
      for (int64_t i = 0; i < n; ++i) {
        got[i] = max ? std::max<double>(got[i], local[i]) : got[i] + local[i];
      }
    }
    // Walk the box row-major; element e of the box is global element sum (off + idx) * stride.
    const int ndim = static_cast<int>(want.shape.size());
    std::vector<int64_t> stride(ndim, 1), idx(ndim, 0);
    for (int d = ndim - 2; d >= 0; --d) stride[d] = stride[d + 1] * want.shape[d + 1];
    for (int64_t e = 0; e < n; ++e) {
      int64_t gidx = 0;
      for (int d = 0; d < ndim; ++d) gidx += (box.offsets(d) + idx[d]) * stride[d];
      const double w = want.v[gidx], v = got[e] / avg_divisor;
      if (!(std::abs(v - w) <= tolerance * (1 + std::abs(w)))) {
        std::vector<int64_t> at(ndim);
        for (int d = 0; d < ndim; ++d) at[d] = box.offsets(d) + idx[d];
        return absl::StrCat(what, " ", attr.ToString(), " on rank ", rank,
                            partial.empty() ? "" : " (reduced over its Partial group)",
                            ": element ", Dims(at), " is ", v, ", the full result has ", w);
      }
      for (int d = ndim - 1; d >= 0 && ++idx[d] == box.lengths(d); --d) idx[d] = 0;
    }
  }
  return "";
}

// "a: [S(0), R]->[R, R] (ALL_GATHER over d0)": the reshards the planner inserted.
std::string DescribePlan(const Graph& g, const LoweredGraph* lowered) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    if (op.type != "reshard") continue;
    std::vector<std::string> steps;
    if (lowered != nullptr) {
      for (const ReshardStep& s : lowered->steps[i]) {
        steps.push_back(
            absl::StrCat(v1::Instruction::Op_Name(s.kind), " over ", g.mesh.dim_name(s.mesh_dim)));
      }
    }
    parts.push_back(
        absl::StrCat("reshard ", op.comment,
                     steps.empty() ? "" : absl::StrCat(" (", absl::StrJoin(steps, ", "), ")")));
  }
  if (g.ops.empty() || g.ops.back().type == "reshard") {
    return parts.empty() ? "no steps" : absl::StrJoin(parts, "; ");
  }
  const Op& last = g.ops.back();
  std::vector<std::string> outs;
  for (int id : last.outputs)
    outs.push_back(absl::StrCat(g.tensors[id].name, " ", g.tensors[id].dist->ToString()));
  std::vector<std::string> ins;
  for (int id : last.inputs) ins.push_back(g.tensors[id].dist->ToString());
  parts.push_back(absl::StrCat(last.type, " on ", absl::StrJoin(ins, ", "), " -> ",
                               outs.empty() ? "(in place)" : absl::StrJoin(outs, ", ")));
  return absl::StrJoin(parts, "; ");
}

// ---------------------------------------------------------------------------------------------
// Outcome bookkeeping and the summary.

// Marks a plan that reshards an input the op updates in place: the update then lands in a copy.
constexpr char kUpdateResharded[] = "an in-place updated input is resharded first";

enum class Outcome { kRight, kWrong, kMissing };

struct Tally {
  int checked = 0, wrong = 0, missing = 0;
  int wrong_in_place = 0;             // of wrong: an in-place updated input was resharded first
  std::vector<std::string> failures;  // first few, in full
};

constexpr int kFailuresShownPerCase = 8;

void Record(Tally* tally, Outcome o, const std::string& message) {
  ++tally->checked;
  if (o == Outcome::kRight) return;
  (o == Outcome::kWrong ? tally->wrong : tally->missing)++;
  if (o == Outcome::kWrong && message.find(kUpdateResharded) != std::string::npos) {
    ++tally->wrong_in_place;
  }
  if (static_cast<int>(tally->failures.size()) < kFailuresShownPerCase) {
    tally->failures.push_back(absl::StrCat(o == Outcome::kWrong ? "WRONG " : "MISSING ", message));
  }
}

std::string TempPath(const std::string& file) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", file);
}

// ---------------------------------------------------------------------------------------------
// Rules.

// Load ops (positions) have no rule: they load the box of their output's placement, as given.
bool IsLoad(const OpCase& c) {
  const OpDef* def = FindOpDef(c.type);
  return def != nullptr && def->kind == OpKind::kLoad;
}

// Plans, runs and checks one op on one placement of its inputs (of its output, for a load).
std::pair<Outcome, std::string> ValidateOp(const RuleRegistry& registry, const OpCase& c,
                                           const Mesh& mesh, const std::vector<DistAttr>& attrs,
                                           const std::vector<Array>& globals,
                                           const TermFile& terms) {
  const bool load = IsLoad(c);
  std::vector<std::string> described;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    described.push_back(
        absl::StrCat(c.inputs[i].name, Dims(c.inputs[i].shape), " ", attrs[i].ToString()));
  }
  if (load) described.push_back(absl::StrCat("out0", Dims(c.outputs[0]), " ", attrs[0].ToString()));
  const std::string label = absl::StrCat(c.Label(), " on mesh ", mesh.ToString(), " with ",
                                         absl::StrJoin(described, ", "));

  Graph g = NewGraph(mesh);
  std::vector<PlacedInput> inputs;
  Op op{c.type, {}, {}, "l0", Phase::kForward, c.attrs};
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    inputs.push_back({c.inputs[i].name, c.inputs[i].shape, attrs[i],
                      c.inputs[i].ids > 0 ? v1::I32 : v1::F32});
    op.inputs.push_back(AddInput(&g, inputs.back()));
  }
  for (size_t i = 0; i < c.outputs.size(); ++i) {
    const v1::DType dtype = i < c.output_dtypes.size() ? c.output_dtypes[i] : v1::F32;
    Tensor t{absl::StrCat("out", i), c.outputs[i], dtype,
             load ? v1::Buffer::DATA : v1::Buffer::ACTIVATION, "l0"};
    if (load) t.dist = attrs[i];
    op.outputs.push_back(g.AddTensor(std::move(t)));
  }
  const std::vector<int> input_ids = op.inputs, output_ids = op.outputs;
  absl::Status placed = load ? g.AddOp(op) : AppendPlacedOp(registry, &g, op);
  if (!placed.ok()) return {Outcome::kMissing, absl::StrCat(label, ": ", placed.ToString())};
  const Graph placed_graph = g;
  absl::StatusOr<PlannedGraph> planned = PlanPlacedGraph(std::move(g));
  if (!planned.ok()) {
    return {Outcome::kMissing, absl::StrCat(label, ": plan ", DescribePlan(placed_graph, nullptr),
                                            ": lowering: ", planned.status().ToString())};
  }
  const Graph& pg = planned->graph;
  std::string plan = DescribePlan(pg, &planned->lowered);
  for (const Op& o : pg.ops) {
    for (int i : c.updated) {
      if (o.type == "reshard" && o.inputs[0] == input_ids[i]) {
        absl::StrAppend(&plan, " [", kUpdateResharded, "]");
      }
    }
  }
  absl::StatusOr<std::vector<v1::Program>> programs = EmitAll(*planned, inputs, terms);
  if (!programs.ok()) {
    return {Outcome::kMissing,
            absl::StrCat(label, ": plan ", plan, ": emit: ", programs.status().ToString())};
  }

  // What to check: the outputs in the attrs the rule gave them, or the updated inputs in their
  // own attrs (an in-place update must land in the tensor itself, not a resharded copy).
  std::vector<std::string> read;
  std::vector<DistAttr> read_attrs;
  if (c.updated.empty()) {
    for (int id : output_ids) {
      read.push_back(pg.tensors[id].name);
      read_attrs.push_back(*pg.tensors[id].dist);
    }
  } else {
    for (int i : c.updated) {
      read.push_back(c.inputs[i].name);
      read_attrs.push_back(attrs[i]);
    }
  }
  std::vector<RankOutput> ranks = RunAllRanks(*programs, read);
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].status.ok()) {
      return {Outcome::kWrong, absl::StrCat(label, ": plan ", plan, ": rank ", r,
                                            " failed: ", ranks[r].status.ToString())};
    }
  }
  const std::vector<Array> want = c.reference(globals);
  for (size_t i = 0; i < read.size(); ++i) {
    std::string error = CheckLocals(read[i], want[i], read_attrs[i], ranks, 1e-4);
    if (!error.empty()) return {Outcome::kWrong, absl::StrCat(label, ": plan ", plan, ": ", error)};
  }
  return {Outcome::kRight, ""};
}

std::map<std::string, Tally>& RuleTallies() {
  static auto* t = new std::map<std::string, Tally>();
  return *t;
}

DistAttr WholeWherePartial(DistAttr attr) {
  for (int d : PartialDims(attr)) attr = attr.With(d, Placement::Replicate());
  return attr;
}

class RuleValidatorTest : public ::testing::TestWithParam<OpCase> {};

// Every combination of input placements of one op case on every mesh, planned with `registry`.
Tally ValidateCase(const RuleRegistry& registry, const OpCase& c) {
  Tally tally;
  std::mt19937 rng(std::hash<std::string>()(c.Label()) & 0xffffffff);
  std::vector<Array> globals;
  for (const InputSpec& in : c.inputs) {
    globals.push_back(in.ids > 0 ? RandomIds(in.shape, in.ids, &rng)
                                 : RandomArray(in.shape, in.positive, &rng));
  }
  for (const auto& [mesh, avg] : OpMeshes()) {
    TermFile terms(mesh, TempPath("validator_op.safetensors"));
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i].ids > 0) {
        terms.AddIds(c.inputs[i].name, globals[i]);
      } else {
        terms.Add(c.inputs[i].name, globals[i], &rng);
      }
    }
    absl::Status written = terms.Write();
    if (!written.ok()) {
      Record(&tally, Outcome::kMissing, absl::StrCat("writing the inputs: ", written.ToString()));
      return tally;
    }
    // The enumerated placements: of the inputs that vary freely, or of a load's output (ids).
    std::vector<int> free;
    std::vector<std::vector<DistAttr>> choices;
    if (IsLoad(c)) {
      choices.push_back(AllAttrs(mesh, static_cast<int>(c.outputs[0].size()), false));
    }
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const InputSpec& in = c.inputs[i];
      if (in.follows != kEnumerated) continue;
      free.push_back(static_cast<int>(i));
      choices.push_back(
          AllAttrs(mesh, static_cast<int>(in.shape.size()), in.partial && in.ids == 0, avg));
    }
    std::vector<size_t> idx(choices.size(), 0);
    while (true) {
      std::vector<DistAttr> attrs(c.inputs.size(), DistAttr::Replicated(mesh));
      if (IsLoad(c)) attrs = {choices[0][idx[0]]};
      for (size_t f = 0; f < free.size(); ++f) attrs[free[f]] = choices[f][idx[f]];
      // Followers, as the optimizer pass creates states: like the parameter, whole where it is
      // Partial.
      for (size_t i = 0; i < c.inputs.size(); ++i) {
        const InputSpec& in = c.inputs[i];
        if (in.follows < 0) continue;
        attrs[i] = in.partial && in.ids == 0 ? attrs[in.follows]
                                             : WholeWherePartial(attrs[in.follows]);
      }
      auto [outcome, message] = ValidateOp(registry, c, mesh, attrs, globals, terms);
      Record(&tally, outcome, message);
      int i = static_cast<int>(idx.size()) - 1;
      while (i >= 0 && ++idx[i] == choices[i].size()) idx[i--] = 0;
      if (i < 0) break;
    }
  }
  return tally;
}

TEST_P(RuleValidatorTest, EveryPlacementOfTheInputsMatchesTheFullTensor) {
  const OpCase& c = GetParam();
  ASSERT_TRUE(BuiltinRules().Find(c.type) != nullptr || IsLoad(c))
      << "the validator has a case for op " << c.type << " but the registry has no rule for it";
  const Tally& tally = RuleTallies()[c.Label()] = ValidateCase(BuiltinRules(), c);
  std::printf("[validator] %-40s %5d combinations, %d wrong, %d missing\n", c.Label().c_str(),
              tally.checked, tally.wrong, tally.missing);
  if (tally.wrong_in_place > 0) {
    std::printf("[validator] %-40s   %d of the wrong: %s\n", "", tally.wrong_in_place,
                kUpdateResharded);
  }
  for (const std::string& f : tally.failures) ADD_FAILURE() << f;
  EXPECT_EQ(tally.wrong, 0) << c.Label() << ": " << tally.wrong << " of " << tally.checked
                            << " combinations give wrong numbers (first " << kFailuresShownPerCase
                            << " above)";
  EXPECT_EQ(tally.missing, 0) << c.Label() << ": the planner has no plan for " << tally.missing
                              << " of " << tally.checked << " combinations";
}

std::string CaseName(const ::testing::TestParamInfo<OpCase>& info) {
  std::string name = info.param.Label();
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Rules, RuleValidatorTest, ::testing::ValuesIn(AllOpCases()), CaseName);

// The validator itself: a rule that passes a Partial through a nonlinear op or moves a shard
// to another axis is WRONG, a rule with no strategy for some inputs is MISSING.
OpCase FindCase(const std::string& label) {
  for (OpCase& c : AllOpCases()) {
    if (c.Label() == label) return c;
  }
  return {};
}

// relu: x[R] -> R, x[S(0)] -> S(1) (the wrong axis), x[P] -> P (relu is not linear).
absl::StatusOr<std::vector<DimStrategy>> WrongReluStrategies(const OpSignature&) {
  const Placement R = Placement::Replicate();
  return std::vector<DimStrategy>{{{R}, {R}},
                                  {{Placement::Shard(0)}, {Placement::Shard(1)}},
                                  {{Placement::Partial()}, {Placement::Partial()}}};
}

// relu: only x[S(0)] -> S(0); a Partial x cannot reach it (the search does not price P->S).
absl::StatusOr<std::vector<DimStrategy>> IncompleteReluStrategies(const OpSignature&) {
  return std::vector<DimStrategy>{{{Placement::Shard(0)}, {Placement::Shard(0)}}};
}

TEST(ValidatorSelfTest, ReportsAWrongRule) {
  RuleRegistry broken;
  ASSERT_TRUE(broken.Register("relu", {WrongReluStrategies, nullptr}).ok());
  Tally tally = ValidateCase(broken, FindCase("relu/uneven"));
  EXPECT_GT(tally.wrong, 0);
  EXPECT_EQ(tally.missing, 0);
  ASSERT_FALSE(tally.failures.empty());
  EXPECT_NE(tally.failures[0].find("WRONG relu/uneven on mesh"), std::string::npos)
      << tally.failures[0];
}

TEST(ValidatorSelfTest, ReportsAMissingRule) {
  RuleRegistry incomplete;
  ASSERT_TRUE(incomplete.Register("relu", {IncompleteReluStrategies, nullptr}).ok());
  Tally tally = ValidateCase(incomplete, FindCase("relu/uneven"));
  EXPECT_EQ(tally.wrong, 0);
  EXPECT_GT(tally.missing, 0);
  ASSERT_FALSE(tally.failures.empty());
  EXPECT_NE(tally.failures[0].find("MISSING relu/uneven on mesh"), std::string::npos)
      << tally.failures[0];
}

// Coverage: every rule in the registry has a validator case, and every compute instruction of
// program.proto stands for a rule that has one, so a new op fails here until it gets a case.
TEST(RuleCoverageTest, EveryRegisteredRuleHasAValidatorCase) {
  std::set<std::string> covered;
  for (const OpCase& c : AllOpCases()) covered.insert(c.type);
  const std::vector<std::string> types = BuiltinRules().OpTypes();
  EXPECT_FALSE(types.empty());
  for (const std::string& type : types) {
    EXPECT_TRUE(covered.count(type) > 0 || type == "reshard" || type == "load_input" ||
                type == "load_label")
        << "the registry has a rule for op " << type << " that the validator does not cover";
  }
  // Instructions that no SPMD rule emits: data loads, the steps of a reshard, the pipeline
  // pass's transfers and gradient accumulation (tests/pipeline_simulated_test checks those), and
  // what emit makes of the placements around the updates: the gradient norm and its clip
  // coefficient (planner/grad_norm.h; the simulated tests compare every rank's norm with the
  // 1-rank run's on every mesh) and a Partial(sum) parameter's decay on its other members.
  const std::set<std::string> not_rules = {
      "OP_UNSPECIFIED", "ALL_REDUCE",  "ALL_GATHER",       "REDUCE_SCATTER", "ALL_TO_ALL",
      "SLICE",          "SCALE",       "LOAD_INPUT",       "LOAD_LABEL",     "SEND",
      "RECV",           "ACCUMULATE",  "FILL",             "SUM_SQUARES",    "CLIP_COEFFICIENT",
      "WEIGHT_DECAY"};
  const std::map<std::string, std::string> rule_of = {
      {"MATMUL", "matmul"},       {"ADD_BIAS", "bias_add"},
      {"BIAS_GRAD", "bias_grad"}, {"RELU", "relu"},
      {"RELU_GRAD", "relu_grad"}, {"GELU", "gelu"},
      {"GELU_GRAD", "gelu_grad"}, {"MSE_LOSS", "mse"},
      {"MSE_GRAD", "mse_grad"},   {"SGD", "sgd"},
      {"ADAMW", "adamw"},         {"ADD", "add"},
      {"CAST", "cast"},           {"MUL", "mul"},
      {"GELU_TANH", "gelu_tanh"}, {"GELU_TANH_GRAD", "gelu_tanh_grad"},
      {"SILU", "silu"},           {"SILU_GRAD", "silu_grad"},
      {"EMBEDDING", "embedding"}, {"EMBEDDING_GRAD", "embedding_grad"},
      {"LAYER_NORM", "layer_norm"}, {"LAYER_NORM_GRAD", "layer_norm_grad"},
      {"RMS_NORM", "rms_norm"},   {"RMS_NORM_GRAD", "rms_norm_grad"},
      {"ROPE", "rope"},           {"ROPE_GRAD", "rope_grad"},
      {"ATTENTION", "attention"}, {"ATTENTION_GRAD", "attention_grad"},
      {"DROPOUT", "dropout"},     {"ROW_MAX", "row_max"},
      {"CE_PARTS", "ce_parts"},   {"CE_PARTS_GRAD", "ce_parts_grad"},
      {"CE_LOSS", "ce_loss"},     {"CE_LOSS_GRAD", "ce_loss_grad"},
      {"POSITIONS", "positions"}, {"UNSTACK", "unstack"},
      {"STACK", "stack"}};
  const google::protobuf::EnumDescriptor* ops = v1::Instruction::Op_descriptor();
  for (int i = 0; i < ops->value_count(); ++i) {
    const std::string name = ops->value(i)->name();
    if (not_rules.count(name) > 0) continue;
    auto it = rule_of.find(name);
    EXPECT_TRUE(it != rule_of.end() && covered.count(it->second) > 0)
        << "instruction " << name << " has no validator case: add its rule to the validator";
  }
}

// ---------------------------------------------------------------------------------------------
// Reshards.

// Per-mesh-dim transitions the planner does not lower yet. This set must only shrink: the test
// fails when an entry starts working (remove it) and when a transition fails that no entry
// explains. Spelled as lower.cc's messages spell a dim's step, with Shard axes as written.
const std::set<std::string>& KnownUnsupported() {
  static const auto* s = new std::set<std::string>{};
  return *s;
}

std::vector<Mesh> ReshardMeshes() {
  return {*Mesh::Create({2}, {}), *Mesh::Create({3}, {}), *Mesh::Create({2, 2}, {}),
          *Mesh::Create({2, 3}, {})};
}

// Plans, runs and checks one reshard; the message names the transition.
std::pair<Outcome, std::string> ValidateReshard(const DistAttr& from, const DistAttr& to,
                                                const Array& global, const TermFile& terms) {
  const std::string label =
      absl::StrCat("reshard t", Dims(global.shape), " on mesh ", from.mesh().ToString(), " ",
                   from.ToString(), "->", to.ToString());
  Graph g = NewGraph(from.mesh());
  PlacedInput in{"t", global.shape, from};
  const int t = AddInput(&g, in);
  absl::StatusOr<int> out =
      AppendReshard(&g, t, to, Placement::Replicate(), Phase::kForward, "l0");
  if (!out.ok()) return {Outcome::kMissing, absl::StrCat(label, ": ", out.status().ToString())};
  std::string read = "t";
  if (*out != t) {
    g.tensors[*out].name = "t.resharded";
    read = "t.resharded";
  }
  absl::StatusOr<PlannedGraph> planned = PlanPlacedGraph(std::move(g));
  if (!planned.ok())
    return {Outcome::kMissing, absl::StrCat(label, ": ", planned.status().ToString())};
  if (*out != t && planned->lowered.steps.back().empty()) read = "t";  // a no-step reshard aliases
  absl::StatusOr<std::vector<v1::Program>> programs = EmitAll(*planned, {in}, terms);
  if (!programs.ok())
    return {Outcome::kMissing, absl::StrCat(label, ": emit: ", programs.status().ToString())};
  std::vector<RankOutput> ranks = RunAllRanks(*programs, {read});
  const std::string plan = DescribePlan(planned->graph, &planned->lowered);
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (!ranks[r].status.ok()) {
      return {Outcome::kWrong, absl::StrCat(label, ": ", plan, ": rank ", r,
                                            " failed: ", ranks[r].status.ToString())};
    }
  }
  // Values are multiples of 1/8 and sums of them are exact; averages over 3 are not.
  std::string error = CheckLocals(read, global, to, ranks, 1e-6);
  if (!error.empty()) return {Outcome::kWrong, absl::StrCat(label, ": ", plan, ": ", error)};
  return {Outcome::kRight, ""};
}

// The per-dim transitions of from->to that a known-unsupported entry names.
std::vector<std::string> KnownReasons(const DistAttr& from, const DistAttr& to) {
  std::vector<std::string> out;
  for (int d = 0; d < from.mesh().ndim(); ++d) {
    std::string step = absl::StrCat(from.placement(d).ToString(), "->", to.placement(d).ToString());
    if (KnownUnsupported().count(step) > 0) out.push_back(step);
  }
  return out;
}

TEST(ReshardValidatorTest, EveryTransitionBetweenTwoDistAttrs) {
  std::mt19937 rng(7);
  std::map<std::string, Tally> tallies;
  std::map<std::string, int> known_hits;  // known-unsupported entry -> transitions it explains
  for (const std::vector<int64_t>& shape :
       {std::vector<int64_t>{12, 12}, std::vector<int64_t>{5, 4}}) {
    const Array global = RandomArray(shape, false, &rng);
    for (const Mesh& mesh : ReshardMeshes()) {
      const std::string key = absl::StrCat("t", Dims(shape), " on ", mesh.ToString());
      Tally& tally = tallies[key];
      const std::vector<DistAttr> attrs = AllAttrs(mesh, 2, true);
      TermFile terms(mesh, TempPath("validator_reshard.safetensors"));
      terms.Add("t", global, &rng);
      ASSERT_TRUE(terms.Write().ok());
      for (const DistAttr& from : attrs) {
        for (const DistAttr& to : attrs) {
          auto [outcome, message] = ValidateReshard(from, to, global, terms);
          if (outcome == Outcome::kMissing) {
            std::vector<std::string> reasons = KnownReasons(from, to);
            if (!reasons.empty()) {
              for (const std::string& r : reasons) ++known_hits[r];
              ++tally.checked;
              continue;
            }
          }
          Record(&tally, outcome, message);
        }
      }
    }
  }
  int checked = 0, known = 0;
  for (const auto& [key, tally] : tallies) {
    std::printf("[validator] reshard %-30s %4d transitions, %d wrong, %d missing\n", key.c_str(),
                tally.checked, tally.wrong, tally.missing);
    checked += tally.checked;
    for (const std::string& f : tally.failures) ADD_FAILURE() << f;
    EXPECT_EQ(tally.wrong, 0) << key << ": " << tally.wrong << " transitions give wrong numbers";
    EXPECT_EQ(tally.missing, 0) << key << ": " << tally.missing
                                << " transitions fail to plan and no known-unsupported entry "
                                   "explains them";
  }
  for (const std::string& entry : KnownUnsupported()) {
    std::printf("[validator] known unsupported %-28s explains %d failing transitions\n",
                entry.c_str(), known_hits[entry]);
    known += known_hits[entry];
  }
  std::printf("[validator] reshard total: %d transitions, %d known unsupported\n", checked, known);
}

// Each known-unsupported entry alone, on mesh [2]: an entry that plans and runs correctly now
// must leave the set.
TEST(ReshardValidatorTest, KnownUnsupportedEntriesAreStillUnsupported) {
  std::mt19937 rng(11);
  const Mesh mesh = *Mesh::Create({2}, {});
  const Array global = RandomArray({5, 4}, false, &rng);
  TermFile terms(mesh, TempPath("validator_reshard.safetensors"));
  terms.Add("t", global, &rng);
  ASSERT_TRUE(terms.Write().ok());
  for (const DistAttr& from : AllAttrs(mesh, 2, true)) {
    for (const DistAttr& to : AllAttrs(mesh, 2, true)) {
      const std::string step =
          absl::StrCat(from.placement(0).ToString(), "->", to.placement(0).ToString());
      if (KnownUnsupported().count(step) == 0) continue;
      auto [outcome, message] = ValidateReshard(from, to, global, terms);
      EXPECT_NE(outcome, Outcome::kRight)
          << step << " is in KnownUnsupported() but now plans and validates: remove it";
      EXPECT_NE(outcome, Outcome::kWrong) << message;
    }
  }
}

// The overall summary, after every test.
class SummaryEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    int checked = 0, wrong = 0, missing = 0;
    std::map<std::string, int> per_op;
    for (const auto& [label, t] : RuleTallies()) {
      checked += t.checked;
      wrong += t.wrong;
      missing += t.missing;
      per_op[label.substr(0, label.find_first_of("[/"))] += t.checked;
    }
    std::printf("[validator] rules: %d combinations checked, %d wrong, %d missing\n", checked,
                wrong, missing);
    for (const auto& [op, n] : per_op) std::printf("[validator]   %-12s %6d\n", op.c_str(), n);
  }
};

const auto* const kSummary = ::testing::AddGlobalTestEnvironment(new SummaryEnvironment);

}  // namespace
}  // namespace weft::planner
