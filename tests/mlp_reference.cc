#include "tests/mlp_reference.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace weft::testing {
namespace {

double Gelu(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double GeluGrad(double x) {
  const double cdf = 0.5 * (1.0 + std::erf(x / std::sqrt(2.0)));
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
  return cdf + x * pdf;
}

}  // namespace

double RoundToBf16(double v) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if (std::isnan(f)) return v;
  bits += 0x7fffu + ((bits >> 16) & 1u);  // to nearest, ties to the even bf16
  bits &= 0xffff0000u;
  float r;
  std::memcpy(&r, &bits, sizeof(r));
  return r;
}

std::vector<double> RefMlp::Train(const std::vector<double>& inputs,
                                  const std::vector<double>& labels, int num_samples, int batch,
                                  int steps, const RefOptimizer& opt) {
  const int n = static_cast<int>(layers_.size());
  const int in0 = layers_.front().in;
  // What each layer reads: indices into the values, 0 the batch and i + 1 layer i's output.
  std::vector<std::vector<int>> reads(n);
  std::map<std::string, int> value_of = {{"input", 0}};
  for (int i = 0; i < n; ++i) {
    if (layers_[i].inputs.empty()) {
      reads[i] = {i};
    } else {
      for (const std::string& name : layers_[i].inputs) reads[i].push_back(value_of.at(name));
    }
    value_of[layers_[i].name] = i + 1;
  }
  // The matmul operands as the run sees them.
  auto operand = [this](std::vector<double> v) {
    if (bf16_matmul) {
      for (double& e : v) e = RoundToBf16(e);
    }
    return v;
  };
  // A value as Weft stores it.
  auto stored = [this](std::vector<double> v) {
    if (bf16_storage) {
      for (double& e : v) e = RoundToBf16(e);
    }
    return v;
  };
  // gin += term, as stored: the term is stored, then the sum.
  auto add_stored = [&](std::vector<double>* gin, const std::vector<double>& term) {
    const std::vector<double> t = stored(term);
    for (size_t e = 0; e < gin->size(); ++e) (*gin)[e] += t[e];
    *gin = stored(*gin);
  };
  // A parameter as the layers read it.
  auto param = [&](const std::string& name) { return stored(params.at(name)); };
  std::vector<double> losses;
  for (int step = 1; step <= steps; ++step) {
    // Widths: the batch's, then each layer's output.
    std::vector<int> widths = {in0};
    for (int i = 0; i < n; ++i) {
      widths.push_back(layers_[i].type == "linear" ? layers_[i].out : widths[reads[i][0]]);
    }
    const int out_last = widths.back();
    std::vector<double> x(static_cast<size_t>(batch) * in0), y(static_cast<size_t>(batch) * out_last);
    for (int b = 0; b < batch; ++b) {
      int sample = static_cast<int>((static_cast<int64_t>(step - 1) * batch + b) % num_samples);
      for (int j = 0; j < in0; ++j) x[b * in0 + j] = inputs[static_cast<size_t>(sample) * in0 + j];
      for (int j = 0; j < out_last; ++j) {
        y[b * out_last + j] = labels[static_cast<size_t>(sample) * out_last + j];
      }
    }
    // Forward, keeping every value.
    std::vector<std::vector<double>> values = {x};
    for (int i = 0; i < n; ++i) {
      const RefLayer& l = layers_[i];
      const std::vector<double>& a = values[reads[i][0]];
      std::vector<double> o;
      if (l.type == "linear") {
        const std::vector<double> w = operand(param(l.name + ".weight"));
        const std::vector<double> xa = operand(a);
        o.assign(static_cast<size_t>(batch) * l.out, 0.0);
        for (int b = 0; b < batch; ++b) {
          for (int j = 0; j < l.out; ++j) {
            double s = 0.0;
            for (int k = 0; k < l.in; ++k) s += xa[b * l.in + k] * w[k * l.out + j];
            o[b * l.out + j] = s;
          }
        }
        if (l.bias) {
          o = stored(o);  // the product, stored before the bias is added
          const std::vector<double> bias = param(l.name + ".bias");
          for (int b = 0; b < batch; ++b) {
            for (int j = 0; j < l.out; ++j) o[b * l.out + j] += bias[j];
          }
        }
      } else if (l.type == "add") {
        o.assign(a.size(), 0.0);
        for (int r : reads[i]) {
          for (size_t e = 0; e < o.size(); ++e) o[e] += values[r][e];
        }
      } else {
        o = a;
        for (auto& v : o) v = l.type == "relu" ? (v > 0 ? v : 0.0) : Gelu(v);
      }
      values.push_back(stored(std::move(o)));
    }
    const auto& pred = values.back();
    const double n_total = static_cast<double>(batch) * out_last;
    double loss = 0;
    // The gradient of every value, summed over the layers that read it.
    std::vector<std::vector<double>> grads_of(n + 1);
    for (int v = 0; v <= n; ++v) grads_of[v].assign(values[v].size(), 0.0);
    for (size_t i = 0; i < pred.size(); ++i) {
      const double d = pred[i] - y[i];
      loss += d * d / n_total;
      grads_of[n][i] = 2.0 * d / n_total;
    }
    grads_of[n] = stored(grads_of[n]);
    losses.push_back(loss);
    // Backward.
    std::map<std::string, std::vector<double>> grads;
    for (int li = n - 1; li >= 0; --li) {
      const RefLayer& l = layers_[li];
      const std::vector<double>& grad = grads_of[li + 1];
      const int src = reads[li][0];
      const std::vector<double>& act = values[src];
      std::vector<double>& gin = grads_of[src];
      if (l.type == "linear") {
        const std::vector<double> w = operand(param(l.name + ".weight"));
        const std::vector<double> a = operand(act);
        const std::vector<double> g = operand(grad);
        std::vector<double> gw(static_cast<size_t>(l.in) * l.out, 0.0);
        std::vector<double> term(gin.size(), 0.0);
        for (int b = 0; b < batch; ++b) {
          for (int k = 0; k < l.in; ++k) {
            for (int j = 0; j < l.out; ++j) {
              gw[k * l.out + j] += a[b * l.in + k] * g[b * l.out + j];
              term[b * l.in + k] += g[b * l.out + j] * w[k * l.out + j];
            }
          }
        }
        add_stored(&gin, term);
        grads[l.name + ".weight"] = stored(gw);
        if (l.bias) {
          std::vector<double> gb(l.out, 0.0);
          for (int b = 0; b < batch; ++b) {
            for (int j = 0; j < l.out; ++j) gb[j] += grad[b * l.out + j];
          }
          grads[l.name + ".bias"] = stored(gb);
        }
      } else if (l.type == "add") {
        for (int r : reads[li]) add_stored(&grads_of[r], grad);
      } else {
        std::vector<double> term(act.size());
        for (size_t i = 0; i < act.size(); ++i) {
          term[i] = grad[i] * (l.type == "relu" ? (act[i] > 0 ? 1.0 : 0.0) : GeluGrad(act[i]));
        }
        add_stored(&gin, term);
      }
    }
    // Update.
    for (auto& [name, g] : grads) {
      ApplyRefOptimizer(opt, step, g, &params.at(name), &m_[name], &v_[name]);
    }
  }
  return losses;
}

void ApplyRefOptimizer(const RefOptimizer& opt, int64_t step, const std::vector<double>& g,
                       std::vector<double>* p, std::vector<double>* m, std::vector<double>* v) {
  if (opt.type == "sgd") {
    for (size_t i = 0; i < p->size(); ++i) (*p)[i] -= opt.lr * (g[i] + opt.weight_decay * (*p)[i]);
    return;
  }
  m->resize(p->size(), 0.0);
  v->resize(p->size(), 0.0);
  const double bc1 = 1.0 - std::pow(opt.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(opt.beta2, static_cast<double>(step));
  for (size_t i = 0; i < p->size(); ++i) {
    (*p)[i] -= opt.lr * opt.weight_decay * (*p)[i];
    (*m)[i] = opt.beta1 * (*m)[i] + (1 - opt.beta1) * g[i];
    (*v)[i] = opt.beta2 * (*v)[i] + (1 - opt.beta2) * g[i] * g[i];
    (*p)[i] -= opt.lr * ((*m)[i] / bc1) / (std::sqrt((*v)[i] / bc2) + opt.eps);
  }
}

namespace {

std::string ShapeText(const std::vector<int64_t>& shape, bool python_tuple) {
  std::ostringstream s;
  s << (python_tuple ? "(" : "[");
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  if (python_tuple && shape.size() == 1) s << ",";
  s << (python_tuple ? ")" : "]");
  return s.str();
}

void AppendFloats(std::string* out, const std::vector<double>& values) {
  for (double v : values) {
    float f = static_cast<float>(v);
    char b[4];
    std::memcpy(b, &f, 4);
    out->append(b, 4);
  }
}

}  // namespace

void WriteNpyF32(const std::string& path, const std::vector<int64_t>& shape,
                 const std::vector<double>& values) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " +
                       ShapeText(shape, true) + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string file = "\x93NUMPY";
  file += '\x01';
  file += '\x00';
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  file += header;
  AppendFloats(&file, values);
  std::ofstream(path, std::ios::binary) << file;
}

void WriteSafetensorsF32(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::string json = "{";
  std::string data;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const size_t begin = data.size();
    AppendFloats(&data, t.values);
    json += (i ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"F32\",\"shape\":" +
            ShapeText(t.shape, false) + ",\"data_offsets\":[" + std::to_string(begin) + "," +
            std::to_string(data.size()) + "]}";
  }
  json += "}";
  while (json.size() % 8 != 0) json += ' ';
  std::string file(8, '\0');
  uint64_t n = json.size();
  std::memcpy(file.data(), &n, 8);
  file += json;
  file += data;
  std::ofstream(path, std::ios::binary) << file;
}

std::vector<double> TestValues(size_t n, uint64_t seed, double scale) {
  std::vector<double> out(n);
  uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (size_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    double u = static_cast<double>(state >> 11) / 9007199254740992.0;  // [0,1)
    double v = (2.0 * u - 1.0) * scale;
    out[i] = v == 0.0 ? scale * 0.5 : v;
  }
  return out;
}

}  // namespace weft::testing
