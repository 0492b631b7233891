#include "tests/transformer_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "common/philox.h"

namespace weft::testing {
namespace {

using Vec = std::vector<double>;
using ParamMap = std::map<std::string, Vec>;

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "transformer_reference: %s\n", message.c_str());
  std::abort();
}

// ---------------------------------------------------------------------------------------------
// Shapes.

// The sizes of one forward pass: a batch of `batch` sequences of `seq` tokens through the model.
struct ModelDims {
  int batch = 0, seq = 0;
  int width = 0;     // C
  int heads = 0;     // H
  int kv_heads = 0;  // KVH (gpt2: H)
  int head_dim = 0;  // D = C / H
  int inner = 0;     // the MLP's width
  int vocab = 0;
  int layers = 0;
  int rows() const { return batch * seq; }
};

ModelDims DimsOf(const RefTransformerConfig& c, int batch, int seq) {
  ModelDims d;
  d.batch = batch;
  d.seq = seq;
  d.vocab = static_cast<int>(c.vocab_size);
  if (c.arch == "gpt2") {
    d.width = static_cast<int>(c.n_embd);
    d.heads = d.kv_heads = static_cast<int>(c.n_head);
    d.inner = static_cast<int>(c.n_inner);
    d.layers = static_cast<int>(c.n_layer);
  } else {
    d.width = static_cast<int>(c.hidden_size);
    d.heads = static_cast<int>(c.num_attention_heads);
    d.kv_heads = static_cast<int>(c.num_key_value_heads);
    d.inner = static_cast<int>(c.intermediate_size);
    d.layers = static_cast<int>(c.num_hidden_layers);
  }
  d.head_dim = d.width / d.heads;
  return d;
}

// A projection of x [rows, in] to [rows, out]. GPT-2's Conv1D stores its weight [in, out] and
// computes y = x W + b; nn.Linear stores [out, in] and computes y = x W^T.
enum class WeightLayout { kConv1D, kLinear };
struct ProjectionShape {
  int rows = 0, in = 0, out = 0;
  WeightLayout layout = WeightLayout::kLinear;
  size_t WeightIndex(int i, int o) const {
    return layout == WeightLayout::kConv1D ? static_cast<size_t>(i) * out + o
                                           : static_cast<size_t>(o) * in + i;
  }
};

// A row-wise normalization over the last axis of [rows, dim].
struct NormShape {
  int rows = 0, dim = 0;
  double eps = 0;
};

// Causal attention: q [B, T, H, D], k and v [B, T, KVH, D], probabilities [B, H, T, T].
struct AttentionShape {
  int batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double scale = 0;  // 1 / sqrt(D)
  size_t Q(int b, int t, int h, int e) const {
    return ((static_cast<size_t>(b) * seq + t) * heads + h) * head_dim + e;
  }
  size_t KV(int b, int t, int g, int e) const {
    return ((static_cast<size_t>(b) * seq + t) * kv_heads + g) * head_dim + e;
  }
  size_t P(int b, int h, int i, int j) const {
    return ((static_cast<size_t>(b) * heads + h) * seq + i) * seq + j;
  }
  size_t Probabilities() const { return static_cast<size_t>(batch) * heads * seq * seq; }
  // GQA: query head h reads kv head h / (H / KVH).
  int KvHeadOf(int h) const { return h / (heads / kv_heads); }
};

// Rotary embedding of x [B, T, H, D] at positions t, Hugging Face's rotate-half convention.
struct RopeShape {
  int batch = 0, seq = 0, heads = 0, head_dim = 0;
  double theta = 0;
};

// Where dropout masks are drawn from: the job's seed and the training step (0: no dropout).
struct DropoutDraw {
  uint64_t seed = 0;
  int64_t step = 0;
};

// ---------------------------------------------------------------------------------------------
// Ops, each a forward and its backward (the VJP: the input gradients from the output's).

// out[r, :] = table[ids[r], :].
Vec EmbeddingForward(const Vec& table, const std::vector<int32_t>& ids, int dim) {
  Vec out(ids.size() * dim);
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int c = 0; c < dim; ++c) out[r * dim + c] = table[static_cast<size_t>(ids[r]) * dim + c];
  }
  return out;
}

// dtable[ids[r], :] += dy[r, :] (a scatter-add: repeated ids sum).
void EmbeddingBackward(const Vec& dy, const std::vector<int32_t>& ids, int dim, Vec* dtable) {
  for (size_t r = 0; r < ids.size(); ++r) {
    for (int c = 0; c < dim; ++c) {
      (*dtable)[static_cast<size_t>(ids[r]) * dim + c] += dy[r * dim + c];
    }
  }
}

Vec ProjectionForward(const Vec& x, const Vec& w, const Vec* bias, const ProjectionShape& s) {
  Vec y(static_cast<size_t>(s.rows) * s.out);
  for (int r = 0; r < s.rows; ++r) {
    for (int o = 0; o < s.out; ++o) {
      double sum = bias ? (*bias)[o] : 0.0;
      for (int i = 0; i < s.in; ++i) {
        sum += x[static_cast<size_t>(r) * s.in + i] * w[s.WeightIndex(i, o)];
      }
      y[static_cast<size_t>(r) * s.out + o] = sum;
    }
  }
  return y;
}

// Returns dx; adds the weight's gradient to *dw and, when dbias is set, the bias's to *dbias.
Vec ProjectionBackward(const Vec& x, const Vec& w, const Vec& dy, const ProjectionShape& s, Vec* dw,
                       Vec* dbias) {
  Vec dx(static_cast<size_t>(s.rows) * s.in, 0.0);
  for (int r = 0; r < s.rows; ++r) {
    for (int o = 0; o < s.out; ++o) {
      const double g = dy[static_cast<size_t>(r) * s.out + o];
      if (dbias) (*dbias)[o] += g;
      for (int i = 0; i < s.in; ++i) {
        const size_t xi = static_cast<size_t>(r) * s.in + i;
        dx[xi] += g * w[s.WeightIndex(i, o)];
        (*dw)[s.WeightIndex(i, o)] += g * x[xi];
      }
    }
  }
  return dx;
}

// y = (x - mean) / sqrt(var + eps) * gamma + beta, var biased (divided by dim).
Vec LayerNormForward(const Vec& x, const Vec& gamma, const Vec& beta, const NormShape& s) {
  Vec y(x.size());
  for (int r = 0; r < s.rows; ++r) {
    const double* xr = &x[static_cast<size_t>(r) * s.dim];
    double mean = 0, var = 0;
    for (int c = 0; c < s.dim; ++c) mean += xr[c] / s.dim;
    for (int c = 0; c < s.dim; ++c) var += (xr[c] - mean) * (xr[c] - mean) / s.dim;
    const double rstd = 1.0 / std::sqrt(var + s.eps);
    for (int c = 0; c < s.dim; ++c) {
      y[static_cast<size_t>(r) * s.dim + c] = (xr[c] - mean) * rstd * gamma[c] + beta[c];
    }
  }
  return y;
}

// With xhat the normalized x and g = dy * gamma: dx = rstd * (g - mean(g) - xhat * mean(g xhat)).
Vec LayerNormBackward(const Vec& x, const Vec& gamma, const Vec& dy, const NormShape& s,
                      Vec* dgamma, Vec* dbeta) {
  Vec dx(x.size());
  std::vector<double> xhat(s.dim), g(s.dim);
  for (int r = 0; r < s.rows; ++r) {
    const size_t row = static_cast<size_t>(r) * s.dim;
    double mean = 0, var = 0;
    for (int c = 0; c < s.dim; ++c) mean += x[row + c] / s.dim;
    for (int c = 0; c < s.dim; ++c) var += (x[row + c] - mean) * (x[row + c] - mean) / s.dim;
    const double rstd = 1.0 / std::sqrt(var + s.eps);
    double mean_g = 0, mean_gx = 0;
    for (int c = 0; c < s.dim; ++c) {
      xhat[c] = (x[row + c] - mean) * rstd;
      g[c] = dy[row + c] * gamma[c];
      mean_g += g[c] / s.dim;
      mean_gx += g[c] * xhat[c] / s.dim;
      (*dgamma)[c] += dy[row + c] * xhat[c];
      (*dbeta)[c] += dy[row + c];
    }
    for (int c = 0; c < s.dim; ++c) dx[row + c] = rstd * (g[c] - mean_g - xhat[c] * mean_gx);
  }
  return dx;
}

// y = x / sqrt(mean(x^2) + eps) * gamma.
Vec RmsNormForward(const Vec& x, const Vec& gamma, const NormShape& s) {
  Vec y(x.size());
  for (int r = 0; r < s.rows; ++r) {
    const size_t row = static_cast<size_t>(r) * s.dim;
    double mean_sq = 0;
    for (int c = 0; c < s.dim; ++c) mean_sq += x[row + c] * x[row + c] / s.dim;
    const double rms_inv = 1.0 / std::sqrt(mean_sq + s.eps);
    for (int c = 0; c < s.dim; ++c) y[row + c] = x[row + c] * rms_inv * gamma[c];
  }
  return y;
}

// With q = 1 / sqrt(mean(x^2) + eps): dx_c = q gamma_c dy_c - x_c q^3 / dim * sum_k dy_k gamma_k
// x_k.
Vec RmsNormBackward(const Vec& x, const Vec& gamma, const Vec& dy, const NormShape& s,
                    Vec* dgamma) {
  Vec dx(x.size());
  for (int r = 0; r < s.rows; ++r) {
    const size_t row = static_cast<size_t>(r) * s.dim;
    double mean_sq = 0;
    for (int c = 0; c < s.dim; ++c) mean_sq += x[row + c] * x[row + c] / s.dim;
    const double rms_inv = 1.0 / std::sqrt(mean_sq + s.eps);
    double dot = 0;
    for (int c = 0; c < s.dim; ++c) {
      dot += dy[row + c] * gamma[c] * x[row + c];
      (*dgamma)[c] += dy[row + c] * x[row + c] * rms_inv;
    }
    const double k = rms_inv * rms_inv * rms_inv / s.dim;
    for (int c = 0; c < s.dim; ++c) {
      dx[row + c] = rms_inv * gamma[c] * dy[row + c] - x[row + c] * k * dot;
    }
  }
  return dx;
}

// gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
constexpr double kGeluCubic = 0.044715;
double GeluTanhArgument(double x) { return std::sqrt(2.0 / M_PI) * (x + kGeluCubic * x * x * x); }

Vec GeluTanhForward(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    y[i] = 0.5 * x[i] * (1.0 + std::tanh(GeluTanhArgument(x[i])));
  }
  return y;
}

Vec GeluTanhBackward(const Vec& x, const Vec& dy) {
  Vec dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double t = std::tanh(GeluTanhArgument(x[i]));
    const double du = std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * kGeluCubic * x[i] * x[i]);
    dx[i] = dy[i] * (0.5 * (1.0 + t) + 0.5 * x[i] * (1.0 - t * t) * du);
  }
  return dx;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// silu(x) = x sigmoid(x).
Vec SiluForward(const Vec& x) {
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * Sigmoid(x[i]);
  return y;
}

Vec SiluBackward(const Vec& x, const Vec& dy) {
  Vec dx(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = Sigmoid(x[i]);
    dx[i] = dy[i] * s * (1.0 + x[i] * (1.0 - s));
  }
  return dx;
}

// out = a * b elementwise (the gated MLP; dropout, with b its factors).
Vec MulForward(const Vec& a, const Vec& b) {
  Vec y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] * b[i];
  return y;
}

// The gradient w.r.t. one factor of a * b: dy times the other factor.
Vec MulBackward(const Vec& dy, const Vec& other) { return MulForward(dy, other); }

// out = a + b (residual connections). Its backward hands dy to both.
Vec AddForward(const Vec& a, const Vec& b) {
  Vec y(a.size());
  for (size_t i = 0; i < a.size(); ++i) y[i] = a[i] + b[i];
  return y;
}

void Accumulate(Vec* into, const Vec& v) {
  for (size_t i = 0; i < v.size(); ++i) (*into)[i] += v[i];
}

Vec DropoutFactors(const std::string& site, size_t n, double p, const DropoutDraw& draw) {
  return RefDropoutFactors(site, n, p, draw.seed, draw.step);
}

// Splits x [rows, sum(widths)] into column blocks (GPT-2's c_attn output into q | k | v).
std::vector<Vec> SplitColumnsForward(const Vec& x, int rows, const std::vector<int>& widths) {
  int total = 0;
  for (int w : widths) total += w;
  std::vector<Vec> parts;
  int begin = 0;
  for (int w : widths) {
    Vec part(static_cast<size_t>(rows) * w);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < w; ++c) {
        part[static_cast<size_t>(r) * w + c] = x[static_cast<size_t>(r) * total + begin + c];
      }
    }
    parts.push_back(std::move(part));
    begin += w;
  }
  return parts;
}

// The column blocks' gradients joined back into [rows, sum(widths)].
Vec SplitColumnsBackward(const std::vector<Vec>& dparts, int rows, const std::vector<int>& widths) {
  int total = 0;
  for (int w : widths) total += w;
  Vec dx(static_cast<size_t>(rows) * total);
  int begin = 0;
  for (size_t p = 0; p < widths.size(); ++p) {
    const int w = widths[p];
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < w; ++c) {
        dx[static_cast<size_t>(r) * total + begin + c] = dparts[p][static_cast<size_t>(r) * w + c];
      }
    }
    begin += w;
  }
  return dx;
}

// The angle of rotary pair i at position t: t / theta^(2i / D).
double RopeAngle(const RopeShape& s, int t, int i) {
  return t / std::pow(s.theta, 2.0 * i / s.head_dim);
}

// Rotates pairs (i, i + D/2) by sign * angle: y_i = x_i cos - x_{i+D/2} sin,
// y_{i+D/2} = x_{i+D/2} cos + x_i sin with sin = sign * sin(angle).
Vec RopeRotate(const Vec& x, const RopeShape& s, double sign) {
  Vec y(x.size());
  const int half = s.head_dim / 2;
  for (int b = 0; b < s.batch; ++b) {
    for (int t = 0; t < s.seq; ++t) {
      for (int h = 0; h < s.heads; ++h) {
        const size_t base = ((static_cast<size_t>(b) * s.seq + t) * s.heads + h) * s.head_dim;
        for (int i = 0; i < half; ++i) {
          const double angle = RopeAngle(s, t, i), cos = std::cos(angle);
          const double sin = sign * std::sin(angle);
          const double lo = x[base + i], hi = x[base + i + half];
          y[base + i] = lo * cos - hi * sin;
          y[base + i + half] = hi * cos + lo * sin;
        }
      }
    }
  }
  return y;
}

Vec RopeForward(const Vec& x, const RopeShape& s) { return RopeRotate(x, s, 1.0); }

// The transpose of the rotation: the rotation by -angle.
Vec RopeBackward(const Vec& dy, const RopeShape& s) { return RopeRotate(dy, s, -1.0); }

// out[b, i, h, :] = sum_{j <= i} drop(P)[b, h, i, j] v[b, j, g(h), :], P = softmax_j(scale q_i.k_j)
// over j <= i. *probs gets P before dropout (zero above the diagonal).
Vec AttentionForward(const Vec& q, const Vec& k, const Vec& v, const Vec& dropout_factors,
                     const AttentionShape& s, Vec* probs) {
  Vec out(q.size(), 0.0);
  probs->assign(s.Probabilities(), 0.0);
  std::vector<double> scores(s.seq);
  for (int b = 0; b < s.batch; ++b) {
    for (int h = 0; h < s.heads; ++h) {
      const int g = s.KvHeadOf(h);
      for (int i = 0; i < s.seq; ++i) {
        double max_score = -INFINITY;
        for (int j = 0; j <= i; ++j) {
          double dot = 0;
          for (int e = 0; e < s.head_dim; ++e) dot += q[s.Q(b, i, h, e)] * k[s.KV(b, j, g, e)];
          scores[j] = s.scale * dot;
          max_score = std::max(max_score, scores[j]);
        }
        double total = 0;
        for (int j = 0; j <= i; ++j) total += std::exp(scores[j] - max_score);
        for (int j = 0; j <= i; ++j) {
          const double p = std::exp(scores[j] - max_score) / total;
          (*probs)[s.P(b, h, i, j)] = p;
          const double kept = p * dropout_factors[s.P(b, h, i, j)];
          for (int e = 0; e < s.head_dim; ++e) out[s.Q(b, i, h, e)] += kept * v[s.KV(b, j, g, e)];
        }
      }
    }
  }
  return out;
}

// With dP = drop'(dout . v_j) and dS = P (dP - sum_j P dP): dq_i = scale sum_j dS_ij k_j,
// dk_j = scale sum_i dS_ij q_i, dv_j = sum_i drop(P)_ij dout_i. KV heads sum over their q heads.
void AttentionBackward(const Vec& q, const Vec& k, const Vec& v, const Vec& probs,
                       const Vec& dropout_factors, const Vec& dout, const AttentionShape& s,
                       Vec* dq, Vec* dk, Vec* dv) {
  dq->assign(q.size(), 0.0);
  dk->assign(k.size(), 0.0);
  dv->assign(v.size(), 0.0);
  std::vector<double> dprobs(s.seq);
  for (int b = 0; b < s.batch; ++b) {
    for (int h = 0; h < s.heads; ++h) {
      const int g = s.KvHeadOf(h);
      for (int i = 0; i < s.seq; ++i) {
        double weighted = 0;  // sum_j P_ij dP_ij
        for (int j = 0; j <= i; ++j) {
          const double factor = dropout_factors[s.P(b, h, i, j)];
          const double p = probs[s.P(b, h, i, j)];
          double dot = 0;
          for (int e = 0; e < s.head_dim; ++e) {
            dot += dout[s.Q(b, i, h, e)] * v[s.KV(b, j, g, e)];
            (*dv)[s.KV(b, j, g, e)] += p * factor * dout[s.Q(b, i, h, e)];
          }
          dprobs[j] = dot * factor;
          weighted += p * dprobs[j];
        }
        for (int j = 0; j <= i; ++j) {
          const double dscore = probs[s.P(b, h, i, j)] * (dprobs[j] - weighted) * s.scale;
          for (int e = 0; e < s.head_dim; ++e) {
            (*dq)[s.Q(b, i, h, e)] += dscore * k[s.KV(b, j, g, e)];
            (*dk)[s.KV(b, j, g, e)] += dscore * q[s.Q(b, i, h, e)];
          }
        }
      }
    }
  }
}

// The mean over rows of -log softmax(logits[r])[targets[r]], by log-sum-exp with the row maximum
// subtracted.
double CrossEntropyForward(const Vec& logits, const std::vector<int32_t>& targets, int vocab) {
  double loss = 0;
  for (size_t r = 0; r < targets.size(); ++r) {
    const double* row = &logits[r * vocab];
    const double max_logit = *std::max_element(row, row + vocab);
    double total = 0;
    for (int c = 0; c < vocab; ++c) total += std::exp(row[c] - max_logit);
    loss += (max_logit + std::log(total) - row[targets[r]]) / targets.size();
  }
  return loss;
}

// d loss / d logits = (softmax - onehot(target)) / rows.
Vec CrossEntropyBackward(const Vec& logits, const std::vector<int32_t>& targets, int vocab) {
  Vec dlogits(logits.size());
  const double rows = static_cast<double>(targets.size());
  for (size_t r = 0; r < targets.size(); ++r) {
    const double* row = &logits[r * vocab];
    const double max_logit = *std::max_element(row, row + vocab);
    double total = 0;
    for (int c = 0; c < vocab; ++c) total += std::exp(row[c] - max_logit);
    for (int c = 0; c < vocab; ++c) {
      const double softmax = std::exp(row[c] - max_logit) / total;
      dlogits[r * vocab + c] = (softmax - (c == targets[r] ? 1.0 : 0.0)) / rows;
    }
  }
  return dlogits;
}

// ---------------------------------------------------------------------------------------------
// The models: a block's forward records what its backward reads.

const Vec& Param(const ParamMap& params, const std::string& name) {
  auto it = params.find(name);
  if (it == params.end()) Fail("missing parameter " + name);
  return it->second;
}

Vec* Grad(ParamMap* grads, const std::string& name) { return &grads->at(name); }

AttentionShape AttentionOf(const ModelDims& d) {
  return {d.batch, d.seq, d.heads, d.kv_heads, d.head_dim, 1.0 / std::sqrt(double(d.head_dim))};
}

struct Gpt2BlockTape {
  Vec x;                    // the block's input
  Vec ln1, q, k, v;         // ln_1(x); c_attn's output split
  Vec probs, attn_dropout;  // softmax, attn_dropout's factors
  Vec heads;                // attention output, heads merged [rows, C]
  Vec resid_dropout;        // attn.resid_dropout's factors
  Vec mid;                  // x + the attention branch
  Vec ln2, fc, act;         // ln_2(mid), c_fc's output, gelu_new of it
  Vec mlp_dropout;          // mlp.dropout's factors
};

Vec Gpt2BlockForward(const ParamMap& p, const RefTransformerConfig& c, const ModelDims& d,
                     int layer, const DropoutDraw& draw, const Vec& x, Gpt2BlockTape* tape) {
  const std::string n = "h." + std::to_string(layer) + ".";
  const int rows = d.rows(), C = d.width;
  const NormShape norm{rows, C, c.layer_norm_epsilon};
  const AttentionShape attention = AttentionOf(d);
  tape->x = x;
  tape->ln1 = LayerNormForward(x, Param(p, n + "ln_1.weight"), Param(p, n + "ln_1.bias"), norm);
  const Vec qkv =
      ProjectionForward(tape->ln1, Param(p, n + "attn.c_attn.weight"),
                        &Param(p, n + "attn.c_attn.bias"), {rows, C, 3 * C, WeightLayout::kConv1D});
  std::vector<Vec> parts = SplitColumnsForward(qkv, rows, {C, C, C});
  tape->q = std::move(parts[0]);
  tape->k = std::move(parts[1]);
  tape->v = std::move(parts[2]);
  tape->attn_dropout =
      DropoutFactors(n + "attn.attn_dropout", attention.Probabilities(), c.attn_pdrop, draw);
  tape->heads =
      AttentionForward(tape->q, tape->k, tape->v, tape->attn_dropout, attention, &tape->probs);
  const Vec proj =
      ProjectionForward(tape->heads, Param(p, n + "attn.c_proj.weight"),
                        &Param(p, n + "attn.c_proj.bias"), {rows, C, C, WeightLayout::kConv1D});
  tape->resid_dropout = DropoutFactors(n + "attn.resid_dropout", proj.size(), c.resid_pdrop, draw);
  tape->mid = AddForward(x, MulForward(proj, tape->resid_dropout));

  tape->ln2 =
      LayerNormForward(tape->mid, Param(p, n + "ln_2.weight"), Param(p, n + "ln_2.bias"), norm);
  tape->fc =
      ProjectionForward(tape->ln2, Param(p, n + "mlp.c_fc.weight"), &Param(p, n + "mlp.c_fc.bias"),
                        {rows, C, d.inner, WeightLayout::kConv1D});
  tape->act = GeluTanhForward(tape->fc);
  const Vec mlp = ProjectionForward(tape->act, Param(p, n + "mlp.c_proj.weight"),
                                    &Param(p, n + "mlp.c_proj.bias"),
                                    {rows, d.inner, C, WeightLayout::kConv1D});
  tape->mlp_dropout = DropoutFactors(n + "mlp.dropout", mlp.size(), c.resid_pdrop, draw);
  return AddForward(tape->mid, MulForward(mlp, tape->mlp_dropout));
}

// Returns the gradient of the block's input; adds the parameters' to *g.
Vec Gpt2BlockBackward(const ParamMap& p, const RefTransformerConfig& c, const ModelDims& d,
                      int layer, const Gpt2BlockTape& tape, const Vec& dout, ParamMap* g) {
  const std::string n = "h." + std::to_string(layer) + ".";
  const int rows = d.rows(), C = d.width;
  const NormShape norm{rows, C, c.layer_norm_epsilon};
  // out = mid + drop(c_proj(gelu(c_fc(ln_2(mid)))))
  Vec dmid = dout;
  const Vec dmlp = MulBackward(dout, tape.mlp_dropout);
  const Vec dact = ProjectionBackward(
      tape.act, Param(p, n + "mlp.c_proj.weight"), dmlp, {rows, d.inner, C, WeightLayout::kConv1D},
      Grad(g, n + "mlp.c_proj.weight"), Grad(g, n + "mlp.c_proj.bias"));
  const Vec dfc = GeluTanhBackward(tape.fc, dact);
  const Vec dln2 = ProjectionBackward(tape.ln2, Param(p, n + "mlp.c_fc.weight"), dfc,
                                      {rows, C, d.inner, WeightLayout::kConv1D},
                                      Grad(g, n + "mlp.c_fc.weight"), Grad(g, n + "mlp.c_fc.bias"));
  Accumulate(&dmid, LayerNormBackward(tape.mid, Param(p, n + "ln_2.weight"), dln2, norm,
                                      Grad(g, n + "ln_2.weight"), Grad(g, n + "ln_2.bias")));
  // mid = x + drop(c_proj(attention(split(c_attn(ln_1(x))))))
  Vec dx = dmid;
  const Vec dproj = MulBackward(dmid, tape.resid_dropout);
  const Vec dheads = ProjectionBackward(
      tape.heads, Param(p, n + "attn.c_proj.weight"), dproj, {rows, C, C, WeightLayout::kConv1D},
      Grad(g, n + "attn.c_proj.weight"), Grad(g, n + "attn.c_proj.bias"));
  std::vector<Vec> dqkv(3);
  AttentionBackward(tape.q, tape.k, tape.v, tape.probs, tape.attn_dropout, dheads, AttentionOf(d),
                    &dqkv[0], &dqkv[1], &dqkv[2]);
  const Vec dln1 = ProjectionBackward(
      tape.ln1, Param(p, n + "attn.c_attn.weight"), SplitColumnsBackward(dqkv, rows, {C, C, C}),
      {rows, C, 3 * C, WeightLayout::kConv1D}, Grad(g, n + "attn.c_attn.weight"),
      Grad(g, n + "attn.c_attn.bias"));
  Accumulate(&dx, LayerNormBackward(tape.x, Param(p, n + "ln_1.weight"), dln1, norm,
                                    Grad(g, n + "ln_1.weight"), Grad(g, n + "ln_1.bias")));
  return dx;
}

// qwen2 is llama with biases on the q, k and v projections.
bool HasQkvBias(const RefTransformerConfig& c) { return c.arch == "qwen2"; }

struct LlamaLayerTape {
  Vec x;                         // the layer's input
  Vec norm1;                     // input_layernorm(x)
  Vec q, k, v;                   // after the rotary embedding (q, k)
  Vec probs, attn_dropout;       // softmax, attention_dropout's factors
  Vec heads;                     // attention output, heads merged [rows, H*D]
  Vec mid;                       // x + o_proj(heads)
  Vec norm2;                     // post_attention_layernorm(mid)
  Vec gate, up, silu_gate, act;  // gate_proj, up_proj, silu(gate), silu(gate) * up
};

Vec LlamaLayerForward(const ParamMap& p, const RefTransformerConfig& c, const ModelDims& d,
                      int layer, const DropoutDraw& draw, const Vec& x, LlamaLayerTape* tape) {
  const std::string n = "model.layers." + std::to_string(layer) + ".";
  const int rows = d.rows(), C = d.width;
  const int q_width = d.heads * d.head_dim, kv_width = d.kv_heads * d.head_dim;
  const NormShape norm{rows, C, c.rms_norm_eps};
  const AttentionShape attention = AttentionOf(d);
  tape->x = x;
  tape->norm1 = RmsNormForward(x, Param(p, n + "input_layernorm.weight"), norm);
  // qwen2: q, k and v projections with biases (added before the rotary embedding).
  auto bias = [&](const std::string& proj) -> const Vec* {
    return HasQkvBias(c) ? &Param(p, n + "self_attn." + proj + ".bias") : nullptr;
  };
  tape->q = RopeForward(ProjectionForward(tape->norm1, Param(p, n + "self_attn.q_proj.weight"),
                                          bias("q_proj"),
                                          {rows, C, q_width, WeightLayout::kLinear}),
                        {d.batch, d.seq, d.heads, d.head_dim, c.rope_theta});
  tape->k = RopeForward(ProjectionForward(tape->norm1, Param(p, n + "self_attn.k_proj.weight"),
                                          bias("k_proj"),
                                          {rows, C, kv_width, WeightLayout::kLinear}),
                        {d.batch, d.seq, d.kv_heads, d.head_dim, c.rope_theta});
  tape->v = ProjectionForward(tape->norm1, Param(p, n + "self_attn.v_proj.weight"),
                              bias("v_proj"), {rows, C, kv_width, WeightLayout::kLinear});
  tape->attn_dropout = DropoutFactors(n + "self_attn.attention_dropout", attention.Probabilities(),
                                      c.attention_dropout, draw);
  tape->heads =
      AttentionForward(tape->q, tape->k, tape->v, tape->attn_dropout, attention, &tape->probs);
  tape->mid = AddForward(x, ProjectionForward(tape->heads, Param(p, n + "self_attn.o_proj.weight"),
                                              nullptr, {rows, q_width, C, WeightLayout::kLinear}));

  tape->norm2 = RmsNormForward(tape->mid, Param(p, n + "post_attention_layernorm.weight"), norm);
  const ProjectionShape up_shape{rows, C, d.inner, WeightLayout::kLinear};
  tape->gate =
      ProjectionForward(tape->norm2, Param(p, n + "mlp.gate_proj.weight"), nullptr, up_shape);
  tape->up = ProjectionForward(tape->norm2, Param(p, n + "mlp.up_proj.weight"), nullptr, up_shape);
  tape->silu_gate = SiluForward(tape->gate);
  tape->act = MulForward(tape->silu_gate, tape->up);
  return AddForward(tape->mid,
                    ProjectionForward(tape->act, Param(p, n + "mlp.down_proj.weight"), nullptr,
                                      {rows, d.inner, C, WeightLayout::kLinear}));
}

Vec LlamaLayerBackward(const ParamMap& p, const RefTransformerConfig& c, const ModelDims& d,
                       int layer, const LlamaLayerTape& tape, const Vec& dout, ParamMap* g) {
  const std::string n = "model.layers." + std::to_string(layer) + ".";
  const int rows = d.rows(), C = d.width;
  const int q_width = d.heads * d.head_dim, kv_width = d.kv_heads * d.head_dim;
  const NormShape norm{rows, C, c.rms_norm_eps};
  // out = mid + down(silu(gate(norm2)) * up(norm2)), norm2 = post_attention_layernorm(mid)
  Vec dmid = dout;
  const Vec dact = ProjectionBackward(tape.act, Param(p, n + "mlp.down_proj.weight"), dout,
                                      {rows, d.inner, C, WeightLayout::kLinear},
                                      Grad(g, n + "mlp.down_proj.weight"), nullptr);
  const Vec dgate = SiluBackward(tape.gate, MulBackward(dact, tape.up));
  const Vec dup = MulBackward(dact, tape.silu_gate);
  const ProjectionShape up_shape{rows, C, d.inner, WeightLayout::kLinear};
  Vec dnorm2 = ProjectionBackward(tape.norm2, Param(p, n + "mlp.gate_proj.weight"), dgate, up_shape,
                                  Grad(g, n + "mlp.gate_proj.weight"), nullptr);
  Accumulate(&dnorm2, ProjectionBackward(tape.norm2, Param(p, n + "mlp.up_proj.weight"), dup,
                                         up_shape, Grad(g, n + "mlp.up_proj.weight"), nullptr));
  Accumulate(&dmid, RmsNormBackward(tape.mid, Param(p, n + "post_attention_layernorm.weight"),
                                    dnorm2, norm, Grad(g, n + "post_attention_layernorm.weight")));
  // mid = x + o_proj(attention(rope(q_proj(norm1)), rope(k_proj(norm1)), v_proj(norm1)))
  Vec dx = dmid;
  const Vec dheads = ProjectionBackward(tape.heads, Param(p, n + "self_attn.o_proj.weight"), dmid,
                                        {rows, q_width, C, WeightLayout::kLinear},
                                        Grad(g, n + "self_attn.o_proj.weight"), nullptr);
  Vec dq, dk, dv;
  AttentionBackward(tape.q, tape.k, tape.v, tape.probs, tape.attn_dropout, dheads, AttentionOf(d),
                    &dq, &dk, &dv);
  dq = RopeBackward(dq, {d.batch, d.seq, d.heads, d.head_dim, c.rope_theta});
  dk = RopeBackward(dk, {d.batch, d.seq, d.kv_heads, d.head_dim, c.rope_theta});
  auto dbias = [&](const std::string& proj) -> Vec* {
    return HasQkvBias(c) ? Grad(g, n + "self_attn." + proj + ".bias") : nullptr;
  };
  Vec dnorm1 = ProjectionBackward(tape.norm1, Param(p, n + "self_attn.q_proj.weight"), dq,
                                  {rows, C, q_width, WeightLayout::kLinear},
                                  Grad(g, n + "self_attn.q_proj.weight"), dbias("q_proj"));
  Accumulate(&dnorm1, ProjectionBackward(tape.norm1, Param(p, n + "self_attn.k_proj.weight"), dk,
                                         {rows, C, kv_width, WeightLayout::kLinear},
                                         Grad(g, n + "self_attn.k_proj.weight"), dbias("k_proj")));
  Accumulate(&dnorm1, ProjectionBackward(tape.norm1, Param(p, n + "self_attn.v_proj.weight"), dv,
                                         {rows, C, kv_width, WeightLayout::kLinear},
                                         Grad(g, n + "self_attn.v_proj.weight"), dbias("v_proj")));
  Accumulate(&dx, RmsNormBackward(tape.x, Param(p, n + "input_layernorm.weight"), dnorm1, norm,
                                  Grad(g, n + "input_layernorm.weight")));
  return dx;
}

// One forward pass over a batch, with everything the backward pass reads.
struct ModelTape {
  ModelDims dims;
  std::vector<int32_t> positions;  // gpt2: t of each row
  Vec embd_dropout;                // gpt2: drop's factors
  std::vector<Gpt2BlockTape> gpt2_blocks;
  std::vector<LlamaLayerTape> llama_layers;
  Vec final_input;   // the last block's output
  Vec final_normed;  // ln_f / model.norm of it
  Vec logits;        // [rows, V]
};

bool IsGpt2(const RefTransformerConfig& c) { return c.arch == "gpt2"; }

// The weight the logits read, [V, C] as nn.Linear: wte (gpt2), embed_tokens (tied llama) or
// lm_head.
std::string OutputWeightName(const RefTransformerConfig& c) {
  if (IsGpt2(c)) return "wte.weight";
  return c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
}

ModelTape RunForward(const ParamMap& p, const RefTransformerConfig& c, const RefTokenBatch& batch,
                     const DropoutDraw& draw) {
  ModelTape tape;
  const ModelDims d = DimsOf(c, batch.batch, batch.seq);
  tape.dims = d;
  const int rows = d.rows(), C = d.width;
  Vec x;
  if (IsGpt2(c)) {
    for (int r = 0; r < rows; ++r) tape.positions.push_back(r % d.seq);
    const Vec embedded = AddForward(EmbeddingForward(Param(p, "wte.weight"), batch.inputs, C),
                                    EmbeddingForward(Param(p, "wpe.weight"), tape.positions, C));
    tape.embd_dropout = DropoutFactors("drop", embedded.size(), c.embd_pdrop, draw);
    x = MulForward(embedded, tape.embd_dropout);
    tape.gpt2_blocks.resize(d.layers);
    for (int l = 0; l < d.layers; ++l) {
      x = Gpt2BlockForward(p, c, d, l, draw, x, &tape.gpt2_blocks[l]);
    }
    tape.final_normed = LayerNormForward(x, Param(p, "ln_f.weight"), Param(p, "ln_f.bias"),
                                         {rows, C, c.layer_norm_epsilon});
  } else {
    x = EmbeddingForward(Param(p, "model.embed_tokens.weight"), batch.inputs, C);
    tape.llama_layers.resize(d.layers);
    for (int l = 0; l < d.layers; ++l) {
      x = LlamaLayerForward(p, c, d, l, draw, x, &tape.llama_layers[l]);
    }
    tape.final_normed = RmsNormForward(x, Param(p, "model.norm.weight"), {rows, C, c.rms_norm_eps});
  }
  tape.final_input = std::move(x);
  tape.logits = ProjectionForward(tape.final_normed, Param(p, OutputWeightName(c)), nullptr,
                                  {rows, C, d.vocab, WeightLayout::kLinear});
  return tape;
}

// Adds the gradients of every parameter, given the logits', to *g (zeros of each size).
void RunBackward(const ParamMap& p, const RefTransformerConfig& c, const RefTokenBatch& batch,
                 const ModelTape& tape, const Vec& dlogits, ParamMap* g) {
  const ModelDims& d = tape.dims;
  const int rows = d.rows(), C = d.width;
  const std::string output = OutputWeightName(c);
  const Vec dnormed =
      ProjectionBackward(tape.final_normed, Param(p, output), dlogits,
                         {rows, C, d.vocab, WeightLayout::kLinear}, Grad(g, output), nullptr);
  Vec dx;
  if (IsGpt2(c)) {
    dx = LayerNormBackward(tape.final_input, Param(p, "ln_f.weight"), dnormed,
                           {rows, C, c.layer_norm_epsilon}, Grad(g, "ln_f.weight"),
                           Grad(g, "ln_f.bias"));
    for (int l = d.layers - 1; l >= 0; --l) {
      dx = Gpt2BlockBackward(p, c, d, l, tape.gpt2_blocks[l], dx, g);
    }
    const Vec dembedded = MulBackward(dx, tape.embd_dropout);
    EmbeddingBackward(dembedded, batch.inputs, C, Grad(g, "wte.weight"));
    EmbeddingBackward(dembedded, tape.positions, C, Grad(g, "wpe.weight"));
  } else {
    dx = RmsNormBackward(tape.final_input, Param(p, "model.norm.weight"), dnormed,
                         {rows, C, c.rms_norm_eps}, Grad(g, "model.norm.weight"));
    for (int l = d.layers - 1; l >= 0; --l) {
      dx = LlamaLayerBackward(p, c, d, l, tape.llama_layers[l], dx, g);
    }
    EmbeddingBackward(dx, batch.inputs, C, Grad(g, "model.embed_tokens.weight"));
  }
}

// ---------------------------------------------------------------------------------------------
// Checks, each failure naming what is wrong.

void CheckPositive(int64_t value, const std::string& key) {
  if (value <= 0) Fail(key + " must be positive, got " + std::to_string(value));
}

void CheckProbability(double p, const std::string& key) {
  if (!(p >= 0.0 && p < 1.0)) Fail(key + " must be in [0, 1), got " + std::to_string(p));
}

RefTransformerConfig Validated(RefTransformerConfig c) {
  CheckPositive(c.vocab_size, "vocab_size");
  if (c.arch == "gpt2") {
    CheckPositive(c.n_positions, "n_positions");
    CheckPositive(c.n_embd, "n_embd");
    CheckPositive(c.n_layer, "n_layer");
    CheckPositive(c.n_head, "n_head");
    if (c.n_embd % c.n_head != 0) Fail("n_embd is not a multiple of n_head");
    if (c.n_inner == 0) c.n_inner = 4 * c.n_embd;
    CheckPositive(c.n_inner, "n_inner");
    if (!(c.layer_norm_epsilon > 0)) Fail("layer_norm_epsilon must be positive");
    CheckProbability(c.embd_pdrop, "embd_pdrop");
    CheckProbability(c.attn_pdrop, "attn_pdrop");
    CheckProbability(c.resid_pdrop, "resid_pdrop");
  } else if (c.arch == "llama" || c.arch == "qwen2") {
    CheckPositive(c.hidden_size, "hidden_size");
    CheckPositive(c.intermediate_size, "intermediate_size");
    CheckPositive(c.num_hidden_layers, "num_hidden_layers");
    CheckPositive(c.num_attention_heads, "num_attention_heads");
    if (c.num_key_value_heads == 0) c.num_key_value_heads = c.num_attention_heads;
    CheckPositive(c.num_key_value_heads, "num_key_value_heads");
    if (c.hidden_size % c.num_attention_heads != 0) {
      Fail("hidden_size is not a multiple of num_attention_heads");
    }
    if (c.num_attention_heads % c.num_key_value_heads != 0) {
      Fail("num_attention_heads is not a multiple of num_key_value_heads");
    }
    if ((c.hidden_size / c.num_attention_heads) % 2 != 0) {
      Fail("the head dimension hidden_size / num_attention_heads must be even (rotary pairs)");
    }
    if (!(c.rms_norm_eps > 0)) Fail("rms_norm_eps must be positive");
    if (!(c.rope_theta > 0)) Fail("rope_theta must be positive");
    CheckProbability(c.attention_dropout, "attention_dropout");
  } else {
    Fail("arch must be gpt2, llama or qwen2, got '" + c.arch + "'");
  }
  return c;
}

void CheckBatch(const RefTransformerConfig& c, const RefTokenBatch& batch) {
  CheckPositive(batch.batch, "batch");
  CheckPositive(batch.seq, "seq");
  const size_t n = static_cast<size_t>(batch.batch) * batch.seq;
  if (batch.inputs.size() != n || batch.targets.size() != n) {
    Fail("a batch of " + std::to_string(batch.batch) + " x " + std::to_string(batch.seq) +
         " needs that many inputs and targets, got " + std::to_string(batch.inputs.size()) +
         " and " + std::to_string(batch.targets.size()));
  }
  if (IsGpt2(c) && batch.seq > c.n_positions) {
    Fail("seq " + std::to_string(batch.seq) + " exceeds n_positions");
  }
  for (size_t i = 0; i < n; ++i) {
    for (int32_t id : {batch.inputs[i], batch.targets[i]}) {
      if (id < 0 || id >= c.vocab_size) {
        Fail("token " + std::to_string(id) + " at position " + std::to_string(i) +
             " is outside the vocabulary");
      }
    }
  }
}

void CheckParams(const ParamMap& params, const std::vector<RefParamShape>& shapes) {
  for (const RefParamShape& s : shapes) {
    auto it = params.find(s.name);
    if (it == params.end()) Fail("missing parameter " + s.name);
    if (static_cast<int64_t>(it->second.size()) != s.Elements()) {
      Fail(s.name + " holds " + std::to_string(it->second.size()) + " values, its shape " +
           std::to_string(s.Elements()));
    }
  }
}

bool IsNormGain(const std::string& name) {
  for (const char* suffix : {"ln_1.weight", "ln_2.weight", "ln_f.weight", "norm.weight"}) {
    const std::string s = suffix;
    if (name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      return true;
    }
  }
  return false;
}

// One SGD or AdamW update (tests/mlp_reference.h), refusing any other optimizer type.
void ApplyOptimizer(const RefOptimizer& opt, int64_t step, const Vec& g, Vec* p, Vec* m, Vec* v) {
  if (opt.type != "sgd" && opt.type != "adamw") {
    Fail("optimizer type must be sgd or adamw, got '" + opt.type + "'");
  }
  ApplyRefOptimizer(opt, step, g, p, m, v);
}

void CheckNonNegative(int64_t value, const std::string& key) {
  if (value < 0) Fail(key + " must not be negative, got " + std::to_string(value));
}

// The global L2 norm of every gradient together, each parameter once (a tied embedding's one
// gradient already sums both uses).
double GlobalNorm(const ParamMap& grads) {
  double sum_sq = 0;
  for (const auto& [name, g] : grads) {
    for (double v : g) sum_sq += v * v;
  }
  return std::sqrt(sum_sq);
}

}  // namespace

int64_t RefParamShape::Elements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

RefTokenBatch BatchOfStep(const std::vector<int32_t>& tokens, int batch, int seq, int64_t step) {
  CheckPositive(batch, "batch");
  CheckPositive(seq, "seq");
  CheckPositive(step, "step");
  const int64_t num_samples = tokens.empty() ? 0 : (static_cast<int64_t>(tokens.size()) - 1) / seq;
  if (num_samples == 0) Fail("fewer than seq + 1 tokens: no sample");
  RefTokenBatch out;
  out.batch = batch;
  out.seq = seq;
  for (int b = 0; b < batch; ++b) {
    const int64_t sample = ((step - 1) * batch + b) % num_samples;
    for (int t = 0; t < seq; ++t) {
      out.inputs.push_back(tokens[sample * seq + t]);
      out.targets.push_back(tokens[sample * seq + t + 1]);
    }
  }
  return out;
}

std::vector<double> RefDropoutFactors(const std::string& site, size_t n, double p, uint64_t seed,
                                      int64_t step) {
  const float p32 = static_cast<float>(p);
  if (step == 0 || p32 == 0.0f) return std::vector<double>(n, 1.0);
  const uint64_t key = Fnv1a64(site) + static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull;
  const double kept = static_cast<double>(1.0f / (1.0f - p32));
  std::vector<double> factors(n);
  for (size_t e = 0; e < n; ++e) factors[e] = PhiloxUnit(seed, key, e) >= p32 ? kept : 0.0;
  return factors;
}

double RefLearningRate(const RefSchedule& schedule, double peak_lr, int64_t step) {
  if (!schedule.enabled) return peak_lr;
  const RefSchedule& s = schedule;
  if (s.decay != "constant" && s.decay != "linear" && s.decay != "cosine" && s.decay != "wsd") {
    Fail("schedule decay must be constant, linear, cosine or wsd, got '" + s.decay + "'");
  }
  CheckNonNegative(s.warmup_steps, "schedule warmup_steps");
  CheckNonNegative(s.cooldown_steps, "schedule cooldown_steps");
  if (s.decay != "constant") CheckPositive(s.decay_steps, "schedule decay_steps of a " + s.decay);
  CheckPositive(step, "step");
  // step >= 1, so this holds only for a positive warmup.
  if (step <= s.warmup_steps) {
    return peak_lr * static_cast<double>(step) / static_cast<double>(s.warmup_steps);
  }
  if (s.decay == "constant") return peak_lr;
  if (s.decay == "wsd") {
    const int64_t stable_end = s.decay_steps - s.cooldown_steps;
    if (step <= stable_end) return peak_lr;
    // No cooldown: straight to min_lr after decay_steps, the limit of the ratio below.
    const double q = s.cooldown_steps > 0 ? std::min(1.0, static_cast<double>(step - stable_end) /
                                                              static_cast<double>(s.cooldown_steps))
                                          : 1.0;
    return peak_lr - (peak_lr - s.min_lr) * q;
  }
  // A decay that ends by the warmup's end is over once the warmup is.
  const double p = s.decay_steps > s.warmup_steps
                       ? std::min(1.0, static_cast<double>(step - s.warmup_steps) /
                                           static_cast<double>(s.decay_steps - s.warmup_steps))
                       : 1.0;
  if (s.decay == "linear") return peak_lr - (peak_lr - s.min_lr) * p;
  return s.min_lr + (peak_lr - s.min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
}

RefTransformer::RefTransformer(RefTransformerConfig config)
    : config_(Validated(std::move(config))) {}

std::vector<RefParamShape> RefTransformer::ParamShapes() const {
  const RefTransformerConfig& c = config_;
  const ModelDims d = DimsOf(c, 0, 0);
  const int64_t V = d.vocab, C = d.width, I = d.inner;
  std::vector<RefParamShape> shapes;
  if (IsGpt2(c)) {
    shapes.push_back({"wte.weight", {V, C}});
    shapes.push_back({"wpe.weight", {c.n_positions, C}});
    for (int l = 0; l < d.layers; ++l) {
      const std::string n = "h." + std::to_string(l) + ".";
      shapes.push_back({n + "ln_1.weight", {C}});
      shapes.push_back({n + "ln_1.bias", {C}});
      shapes.push_back({n + "attn.c_attn.weight", {C, 3 * C}});
      shapes.push_back({n + "attn.c_attn.bias", {3 * C}});
      shapes.push_back({n + "attn.c_proj.weight", {C, C}});
      shapes.push_back({n + "attn.c_proj.bias", {C}});
      shapes.push_back({n + "ln_2.weight", {C}});
      shapes.push_back({n + "ln_2.bias", {C}});
      shapes.push_back({n + "mlp.c_fc.weight", {C, I}});
      shapes.push_back({n + "mlp.c_fc.bias", {I}});
      shapes.push_back({n + "mlp.c_proj.weight", {I, C}});
      shapes.push_back({n + "mlp.c_proj.bias", {C}});
    }
    shapes.push_back({"ln_f.weight", {C}});
    shapes.push_back({"ln_f.bias", {C}});
    return shapes;
  }
  const int64_t q_width = int64_t{d.heads} * d.head_dim,
                kv_width = int64_t{d.kv_heads} * d.head_dim;
  shapes.push_back({"model.embed_tokens.weight", {V, C}});
  for (int l = 0; l < d.layers; ++l) {
    const std::string n = "model.layers." + std::to_string(l) + ".";
    shapes.push_back({n + "self_attn.q_proj.weight", {q_width, C}});
    shapes.push_back({n + "self_attn.k_proj.weight", {kv_width, C}});
    shapes.push_back({n + "self_attn.v_proj.weight", {kv_width, C}});
    if (HasQkvBias(c)) {
      shapes.push_back({n + "self_attn.q_proj.bias", {q_width}});
      shapes.push_back({n + "self_attn.k_proj.bias", {kv_width}});
      shapes.push_back({n + "self_attn.v_proj.bias", {kv_width}});
    }
    shapes.push_back({n + "self_attn.o_proj.weight", {C, q_width}});
    shapes.push_back({n + "mlp.gate_proj.weight", {I, C}});
    shapes.push_back({n + "mlp.up_proj.weight", {I, C}});
    shapes.push_back({n + "mlp.down_proj.weight", {C, I}});
    shapes.push_back({n + "input_layernorm.weight", {C}});
    shapes.push_back({n + "post_attention_layernorm.weight", {C}});
  }
  shapes.push_back({"model.norm.weight", {C}});
  if (!c.tie_word_embeddings) shapes.push_back({"lm_head.weight", {V, C}});
  return shapes;
}

void RefTransformer::SetTestParams(uint64_t seed, double scale) {
  params.clear();
  uint64_t i = 0;
  for (const RefParamShape& s : ParamShapes()) {
    std::vector<double> values = TestValues(static_cast<size_t>(s.Elements()), seed + i++, scale);
    if (IsNormGain(s.name)) {
      for (double& v : values) v += 1.0;
    }
    params[s.name] = std::move(values);
  }
}

std::vector<double> RefTransformer::Logits(const RefTokenBatch& batch, uint64_t seed,
                                           int64_t step) const {
  CheckBatch(config_, batch);
  CheckParams(params, ParamShapes());
  return RunForward(params, config_, batch, {seed, step}).logits;
}

double RefTransformer::Loss(const RefTokenBatch& batch, uint64_t seed, int64_t step) const {
  return CrossEntropyForward(Logits(batch, seed, step), batch.targets,
                             static_cast<int>(config_.vocab_size));
}

double RefTransformer::Gradients(const RefTokenBatch& batch, uint64_t seed, int64_t step,
                                 std::map<std::string, std::vector<double>>* grads) const {
  CheckBatch(config_, batch);
  const std::vector<RefParamShape> shapes = ParamShapes();
  CheckParams(params, shapes);
  const ModelTape tape = RunForward(params, config_, batch, {seed, step});
  const int vocab = static_cast<int>(config_.vocab_size);
  grads->clear();
  for (const RefParamShape& s : shapes) (*grads)[s.name].assign(s.Elements(), 0.0);
  RunBackward(params, config_, batch, tape, CrossEntropyBackward(tape.logits, batch.targets, vocab),
              grads);
  return CrossEntropyForward(tape.logits, batch.targets, vocab);
}

std::vector<double> RefTransformer::Train(const std::vector<int32_t>& tokens, int batch, int seq,
                                          int steps, const RefOptimizer& opt, uint64_t seed) {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> grads;
  for (int i = 0; i < steps; ++i) {
    const int64_t step = steps_done_ + 1;
    losses.push_back(Gradients(BatchOfStep(tokens, batch, seq, step), seed, step, &grads));
    for (const auto& [name, g] : grads) {
      ApplyOptimizer(opt, step, g, &params.at(name), &m_[name], &v_[name]);
    }
    steps_done_ = step;
  }
  return losses;
}

std::vector<RefStepRecord> RefTransformer::TrainRecipe(const std::vector<int32_t>& tokens,
                                                       int batch, int seq, int steps,
                                                       const RefRecipe& recipe, uint64_t seed) {
  CheckNonNegative(recipe.total_steps, "total_steps");
  const int64_t total_steps = recipe.total_steps > 0 ? recipe.total_steps : steps_done_ + steps;
  RefSchedule schedule = recipe.schedule;
  if (schedule.decay_steps == 0) schedule.decay_steps = total_steps;
  if (!(recipe.clip_grad_norm >= 0)) {
    Fail("clip_grad_norm must not be negative, got " + std::to_string(recipe.clip_grad_norm));
  }
  const bool evaluate = !recipe.eval_tokens.empty();
  const int eval_batch = recipe.eval_batch > 0 ? recipe.eval_batch : batch;
  const int eval_seq = recipe.eval_seq > 0 ? recipe.eval_seq : seq;
  if (evaluate) {
    CheckNonNegative(recipe.eval_batch, "eval_batch");
    CheckNonNegative(recipe.eval_seq, "eval_seq");
    CheckNonNegative(recipe.eval_every, "eval_every");
    CheckPositive(recipe.eval_batches, "eval_batches");
    // BatchOfStep wraps around; evaluation must see each held-out sample at most once.
    const int64_t samples = (static_cast<int64_t>(recipe.eval_tokens.size()) - 1) / eval_seq;
    const int64_t needed = int64_t{recipe.eval_batches} * eval_batch;
    if (samples < needed) {
      Fail("the eval tokens hold " + std::to_string(samples) + " samples of eval_seq " +
           std::to_string(eval_seq) + ", fewer than eval_batches * eval_batch = " +
           std::to_string(needed) + " (evaluation does not wrap around)");
    }
  }
  std::map<std::string, size_t> dims;
  for (const RefParamShape& s : ParamShapes()) dims[s.name] = s.shape.size();

  std::vector<RefStepRecord> records;
  std::map<std::string, std::vector<double>> grads;
  for (int i = 0; i < steps; ++i) {
    const int64_t step = steps_done_ + 1;
    RefStepRecord record;
    record.loss = Gradients(BatchOfStep(tokens, batch, seq, step), seed, step, &grads);
    record.grad_norm = GlobalNorm(grads);
    if (recipe.clip_grad_norm > 0) {
      const double coef = std::min(1.0, recipe.clip_grad_norm / (record.grad_norm + 1e-6));
      for (auto& [name, g] : grads) {
        for (double& v : g) v *= coef;
      }
    }
    record.lr = RefLearningRate(schedule, recipe.optimizer.lr, step);
    for (const auto& [name, g] : grads) {
      RefOptimizer opt = recipe.optimizer;
      opt.lr = record.lr;
      if (recipe.decay_matrices_only && dims.at(name) < 2) opt.weight_decay = 0;
      ApplyOptimizer(opt, step, g, &params.at(name), &m_[name], &v_[name]);
    }
    steps_done_ = step;
    if (evaluate &&
        ((recipe.eval_every > 0 && step % recipe.eval_every == 0) || step == total_steps)) {
      double sum = 0;
      for (int j = 0; j < recipe.eval_batches; ++j) {
        sum += Loss(BatchOfStep(recipe.eval_tokens, eval_batch, eval_seq, j + 1), seed,
                    /*step=*/0);
      }
      record.has_eval = true;
      record.eval_loss = sum / recipe.eval_batches;
    }
    records.push_back(record);
  }
  return records;
}

}  // namespace weft::testing
