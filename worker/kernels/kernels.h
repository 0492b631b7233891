// Kernels: the math of every Instruction op, behind one interface so that the executor runs
// unchanged on the CPU backend (cpu/: OpenBLAS sgemm, plain loops) and a CUDA backend (cuBLAS,
// small kernels on a stream). Pointers are in the backend's memory space (host memory for CPU,
// device memory for CUDA); Allocate/CopyFromHost/CopyToHost move data across. Calls may be
// asynchronous; Synchronize() waits for them and reports any backend error. Shapes are validated
// by the executor before any kernel runs, so kernels do not check them.
//
// Memory is untyped and counted in bytes. Fill, Cast, Slice and Unslice work on elements of any
// v1::DType (F32, BF16, I32, I64; bf16 held as its 16 bits); the compute kernels are float32.
// Buffers stored as bf16 reach them as float32 copies: the executor widens an op's bf16 operands
// with Cast once per instruction and rounds the written ones back after it.
// Layout: row-major. Tensors of rank > 2 are viewed as [rows, cols] by the caller.
//
// E.g.
//   std::unique_ptr<Kernels> k = NewCpuKernels();
//   auto* y = static_cast<float*>(k->Allocate(batch * out_features * sizeof(float)));
//   k->Matmul(x, w, y, /*m=*/batch, /*n=*/out_features, /*k=*/in_features, false, false);
//   k->AddBias(y, b, y, batch, out_features);
#ifndef WEFT_WORKER_KERNELS_KERNELS_H_
#define WEFT_WORKER_KERNELS_KERNELS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "weft/v1/job.pb.h"

namespace weft {

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

// Matmul operand precision. kBf16 rounds both operands to bfloat16 (round to nearest even) and
// accumulates in float32 into a float32 result, as cuBLAS's bf16 GEMM does: parameters stay
// float32 master copies, only the products see bf16 (spec `precision: bf16`).
enum class MatmulPrecision { kF32, kBf16 };

// What to build a backend for (NewKernels in backend.h).
struct KernelOptions {
  std::string device = "cpu";  // "cpu" | "cuda"
  int device_index = 0;        // cuda:N
  // CUDA only: let cuBLAS use TF32 tensor cores for float32 matmuls (10-bit mantissa products).
  // Off by default so results stay comparable with the CPU backend (spec `allow_tf32: true`).
  bool allow_tf32 = false;
  MatmulPrecision precision = MatmulPrecision::kF32;
  // CPU only: threads for the backend's own loops (elementwise, norms, softmax, cross-entropy;
  // cpu/loops.h); 0 takes OpenBLAS's count (OPENBLAS_NUM_THREADS, else the cores), so sgemm and
  // the loops share one setting. Results do not depend on it.
  int threads = 0;
};

// Memory the backend holds, in bytes: the blocks Allocate handed out and Free has not taken back,
// and the backend's own scratch, each at the size the backend really reserves for it (at least
// the bytes requested), so that the peak is the memory a step needed:
//  - cpu: Allocate's blocks rounded up to 64 bytes (0 bytes to 64), plus the kernels' scratch:
//    the kBf16 Matmul's operand copies, attention's and the rotary embedding's floats, the norms'
//    and EmbeddingGrad's doubles and EmbeddingGrad's int64s, each kept and grown to exactly the
//    largest call's need (common/kernel_scratch.h, which the planner counts in a rank's peak).
//  - cuda: the caching allocator's blocks in use (cuda/caching_allocator.h): requests rounded up
//    to 512 bytes, and a cached block handed out again counts whole (up to twice the rounded
//    request). Besides Allocate's blocks these are the backend's own scratch: the kBf16 Matmul's
//    operand copies (in use during the call only, so they show in the peak) and MseLoss's partial
//    sums (kept). Cached blocks, free but not given back to the driver, do not count. The planner
//    counts none of this scratch (common/kernel_scratch.h).
struct MemoryStats {
  int64_t bytes_in_use = 0;       // held now
  int64_t peak_bytes_in_use = 0;  // the most bytes_in_use has been since the last reset
};

// Where a rank's piece lies in a global tensor, so that a kernel can name an element by its
// global row-major index (dropout masks): the piece is the box at `offsets` with `lengths` of a
// tensor of shape `global`, `rank` axes (at most kMaxAxes), and local element i (row-major in
// the piece) is global element GlobalIndex(i).
struct GlobalBox {
  static constexpr int kMaxAxes = 8;
  int rank = 0;
  int64_t global[kMaxAxes] = {};
  int64_t offsets[kMaxAxes] = {};
  int64_t lengths[kMaxAxes] = {};
  int64_t GlobalIndex(int64_t local) const {
    int64_t index = 0, stride = 1;
    for (int a = rank - 1; a >= 0; --a) {
      const int64_t coordinate = offsets[a] + local % lengths[a];
      local /= lengths[a];
      index += coordinate * stride;
      stride *= global[a];
    }
    return index;
  }
};

// A dropout mask, the same on every mesh (common/philox.h): the element with global index e is
// kept iff PhiloxUnit(seed, key + step * 0x9E3779B97F4A7C15 (mod 2^64), e) >= p, and a kept
// value is multiplied by 1 / (1 - p) (computed in float32); p = 0 keeps everything unchanged.
// key is Fnv1a64 of the dropout site's name (e.g. "h.0.attn.resid_dropout"), step the training
// step (from 1), so a site draws a fresh mask every step and the VJP redraws the forward's.
struct DropoutSpec {
  float p = 0.0f;
  uint64_t seed = 0;
  uint64_t key = 0;
  int64_t step = 0;
  uint64_t StreamKey() const { return key + static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull; }
};

// Causal attention's shapes (Kernels::Attention): q [batch, seq, heads, head_dim], k and v
// [batch, seq, kv_heads, head_dim], heads a multiple of kv_heads. The probabilities' dropout
// indexes the global [global_batch, global_heads, seq, seq] space: local (b, h, i, j) is global
// (batch_offset + b, head_offset + h, i, j).
struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.0f;  // the scores' factor, 1 / sqrt(head_dim)
  DropoutSpec dropout;
  int64_t global_batch = 0, global_heads = 0, batch_offset = 0, head_offset = 0;
};

// A device as a worker reports it in its hello.
struct DeviceDescription {
  std::string kind;                // "cpu" | "cuda"
  std::string name;                // CPU model or GPU name
  int64_t memory_bytes = 0;        // RAM, or the GPU's global memory
  int cores = 0;                   // CPU cores, or the GPU's multiprocessors
  std::string compute_capability;  // CUDA: "9.0"
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual const char* name() const = 0;  // "cpu", "cuda"
  // True when pointers returned by Allocate can be read and written by the host directly.
  virtual bool host_accessible() const = 0;

  // Memory, in bytes. Allocate returns a block of at least `bytes` bytes (contents unspecified),
  // aligned for any DType and distinct for every call (also for 0 bytes), or null when out of
  // memory. Free(nullptr) does nothing. Copy's ranges must not overlap unless they are equal.
  virtual void* Allocate(int64_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual void CopyFromHost(const void* host, void* dst, int64_t bytes) = 0;
  virtual void CopyToHost(const void* src, void* host, int64_t bytes) = 0;
  virtual void Copy(const void* src, void* dst, int64_t bytes) = 0;
  // dst[i] = value for i < n elements of dtype, value converted as EncodeElement
  // (common/dtype.h) converts it.
  virtual void Fill(void* dst, int64_t n, v1::DType dtype, double value) = 0;
  // See MemoryStats for what each backend counts. Thread-safe.
  virtual MemoryStats memory_stats() const = 0;
  // Sets peak_bytes_in_use to bytes_in_use, so the next peak is that of what runs after it.
  virtual void ResetPeakMemoryStats() = 0;
  virtual absl::Status Synchronize() = 0;
  // The backend's compute stream (a cudaStream_t for CUDA), so a communicator can order its own
  // stream against it with events; null for a synchronous backend.
  virtual void* stream() const { return nullptr; }

  // c[m, n] = op(a) @ op(b), in the backend's MatmulPrecision. op(a) is [m, k]: a is stored [m, k], or [k, m] when trans_a.
  // op(b) is [k, n]: b is stored [k, n], or [n, k] when trans_b. c must not alias a or b.
  virtual void Matmul(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
                      bool trans_a, bool trans_b) = 0;
  // out[r, c] = a[r, c] + bias[c]. out may alias a.
  virtual void AddBias(const float* a, const float* bias, float* out, int64_t rows,
                       int64_t cols) = 0;
  // out[c] = sum_r a[r, c].
  virtual void BiasGrad(const float* a, float* out, int64_t rows, int64_t cols) = 0;
  // out = max(a, 0). out may alias a.
  virtual void Relu(const float* a, float* out, int64_t n) = 0;
  // out = dy * (x > 0). out may alias dy.
  virtual void ReluGrad(const float* x, const float* dy, float* out, int64_t n) = 0;
  // out = x * Phi(x), Phi the standard normal CDF via erf.
  virtual void Gelu(const float* x, float* out, int64_t n) = 0;
  // out = dy * (Phi(x) + x * phi(x)).
  virtual void GeluGrad(const float* x, const float* dy, float* out, int64_t n) = 0;
  // out[0] = scale * sum((pred - label)^2), the sum accumulated in double.
  virtual void MseLoss(const float* pred, const float* label, float* out, int64_t n,
                       float scale) = 0;
  // out = scale * (pred - label).
  virtual void MseGrad(const float* pred, const float* label, float* out, int64_t n,
                       float scale) = 0;
  // out = scale * a. out may alias a.
  virtual void Scale(const float* a, float* out, int64_t n, float scale) = 0;
  // out = a + b. out may alias a or b (a residual connection, a gradient accumulated in place).
  virtual void Add(const float* a, const float* b, float* out, int64_t n) = 0;
  // param -= lr * (grad + weight_decay * param).
  // grad_scale (the updates'): null, or one float in the backend's memory that multiplies every
  // gradient element first, g = grad[i] * grad_scale[0] in float32 (the clip coefficient).
  virtual void Sgd(float* param, const float* grad, int64_t n, float lr, float weight_decay,
                   const float* grad_scale) = 0;
  // PyTorch's AdamW, step t from 1: p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
  // p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
  virtual void AdamW(float* param, const float* grad, float* m, float* v, int64_t n,
                     const AdamWHyper& hyper, int64_t step, const float* grad_scale) = 0;
  // out[0] = the sum of a[i]^2 over n elements, accumulated in double in an order that depends on
  // n alone (n = 0: 0).
  virtual void SumSquares(const float* a, int64_t n, float* out) = 0;
  // out[0] = min(1, max_norm / (sqrt(norm_sq[0]) + 1e-6)) in float32: clip_grad_norm_'s factor
  // for a squared global norm (NaN stays NaN).
  virtual void ClipCoefficient(const float* norm_sq, float max_norm, float* out) = 0;
  // out[i] = in[i] converted from `from` to `to`, n elements, as common/dtype.h's
  // ConvertElements converts in host memory: floats to bf16 round to nearest even (NaN stays
  // NaN); floats to integers truncate toward zero and saturate at the integer's range, NaN to 0;
  // integers to floats round to nearest; I64 to I32 saturates; I32 to I64 is exact. in and out
  // must not overlap unless from == to.
  virtual void Cast(const void* in, v1::DType from, void* out, v1::DType to, int64_t n) = 0;
  // Views a as [outer, axis_len, inner] elements of element_bytes bytes each (any DType);
  // out[o, i, j] = a[o, offset + i, j] for i < length.
  virtual void Slice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
                     int64_t offset, int64_t length, int64_t element_bytes) = 0;
  // The inverse of Slice: views out as [outer, axis_len, inner]; out[o, offset + i, j] =
  // a[o, i, j] for i < length. Other elements of out are left as they are.
  virtual void Unslice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
                       int64_t offset, int64_t length, int64_t element_bytes) = 0;

  // ---- Transformers. "ids" point to n integers of ids_dtype (I32 or I64). Row-wise ops view x
  // as [rows, dim]. Reductions over a row or over rows accumulate in at least float32 with a
  // fixed order (the CPU backend in double); results are written, never accumulated into.
  // out[r, :] = table[ids[r] - row_offset, :] when 0 <= ids[r] - row_offset < table_rows, else
  // zeros. table [table_rows, dim] (a vocabulary shard starting at row_offset), out [n, dim].
  virtual void Embedding(const void* ids, v1::DType ids_dtype, const float* table, float* out,
                         int64_t n, int64_t table_rows, int64_t dim, int64_t row_offset) = 0;
  // grad_table[table_rows, dim] = for each row, the sum of dy[r, :] over the r (in order) whose
  // ids[r] - row_offset is that row; rows no id falls on are zero. dy is [n, dim].
  virtual void EmbeddingGrad(const void* ids, v1::DType ids_dtype, const float* dy,
                             float* grad_table, int64_t n, int64_t table_rows, int64_t dim,
                             int64_t row_offset) = 0;
  // y = (x - mean) / sqrt(var + eps) * gamma + beta per row (var: the biased variance).
  virtual void LayerNorm(const float* x, const float* gamma, const float* beta, float* y,
                         int64_t rows, int64_t dim, float eps) = 0;
  // dx [rows, dim]; dgamma[c] = sum_r dy[r, c] xhat[r, c] and dbeta[c] = sum_r dy[r, c] (each
  // skipped when null).
  virtual void LayerNormGrad(const float* x, const float* gamma, const float* dy, float* dx,
                             float* dgamma, float* dbeta, int64_t rows, int64_t dim,
                             float eps) = 0;
  // y = x / sqrt(mean(x^2) + eps) * gamma per row (Hugging Face's LlamaRMSNorm in float32).
  virtual void RmsNorm(const float* x, const float* gamma, float* y, int64_t rows, int64_t dim,
                       float eps) = 0;
  // dx, and dgamma[c] = sum_r dy[r, c] x[r, c] / rms[r] (skipped when null).
  virtual void RmsNormGrad(const float* x, const float* gamma, const float* dy, float* dx,
                           float* dgamma, int64_t rows, int64_t dim, float eps) = 0;
  // GELU's tanh form (Hugging Face's gelu_new): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void GeluTanh(const float* x, float* out, int64_t n) = 0;
  virtual void GeluTanhGrad(const float* x, const float* dy, float* out, int64_t n) = 0;
  // SiLU: x * sigmoid(x); the grad dy * sigmoid(x) * (1 + x * (1 - sigmoid(x))).
  virtual void Silu(const float* x, float* out, int64_t n) = 0;
  virtual void SiluGrad(const float* x, const float* dy, float* out, int64_t n) = 0;
  // out = a * b. out may alias a or b.
  virtual void Mul(const float* a, const float* b, float* out, int64_t n) = 0;
  // Rotary embedding of x [batch, seq, heads, head_dim] (head_dim even), Hugging Face's
  // rotate-half convention: at position p = pos_offset + t, for i < D/2 (D = head_dim),
  // inv_freq = 1 / theta^(2i / D) and angle = p * inv_freq, both float32 as Hugging Face
  // computes them, c = cos(angle), s = sin(angle):
  //   out[.., i] = x[i] c - x[i + D/2] s,   out[.., i + D/2] = x[i + D/2] c + x[i] s.
  // inverse: the rotation by -angle (the VJP). out must not alias x.
  virtual void Rope(const float* x, float* out, int64_t batch, int64_t seq, int64_t heads,
                    int64_t head_dim, int64_t pos_offset, float theta, bool inverse) = 0;
  // Causal attention (AttentionShape): for each batch b, head h (kv head h / (heads/kv_heads)),
  // query i: s[j] = scale * q[b,i,h] . k[b,j,kvh] for j <= i; p = softmax(s) (max-subtracted);
  // p dropped out by shape.dropout at global (b, h, i, j); out[b,i,h] = sum_j p[j] v[b,j,kvh].
  virtual void Attention(const float* q, const float* k, const float* v, float* out,
                         const AttentionShape& shape) = 0;
  // The VJP, recomputing p: dq [B,T,H,D], dk and dv [B,T,KVH,D] (summed over the q heads that
  // share a kv head).
  virtual void AttentionGrad(const float* q, const float* k, const float* v, const float* dout,
                             float* dq, float* dk, float* dv, const AttentionShape& shape) = 0;
  // out = x with DropoutSpec's mask, x's local element i being global element box.GlobalIndex(i)
  // (n = the box's element count). out may alias x.
  virtual void Dropout(const float* x, float* out, int64_t n, const DropoutSpec& spec,
                       const GlobalBox& box) = 0;
  // out[r] = max_c logits[r, c].
  virtual void RowMax(const float* logits, float* out, int64_t rows, int64_t cols) = 0;
  // sumexp[r] = sum_c exp(logits[r, c] - m[r]); tlogit[r] = logits[r, t - col_offset] when
  // 0 <= t - col_offset < cols for t = targets[r], else 0 (a vocabulary shard at col_offset).
  virtual void CrossEntropyParts(const float* logits, const float* m, const void* targets,
                                 v1::DType targets_dtype, float* sumexp, float* tlogit,
                                 int64_t rows, int64_t cols, int64_t col_offset) = 0;
  // dlogits[r, c] = d_sumexp[r] * exp(logits[r, c] - m[r]), plus d_tlogit[r] at the target's
  // column when it is in this shard.
  virtual void CrossEntropyPartsGrad(const float* logits, const float* m, const void* targets,
                                     v1::DType targets_dtype, const float* d_sumexp,
                                     const float* d_tlogit, float* dlogits, int64_t rows,
                                     int64_t cols, int64_t col_offset) = 0;
  // out[0] = scale * sum_r (log(sumexp[r]) + m[r] - tlogit[r]), accumulated in double.
  virtual void CrossEntropyLoss(const float* sumexp, const float* m, const float* tlogit,
                                float* out, int64_t rows, float scale) = 0;
  // d_sumexp[r] = scale / sumexp[r]; d_tlogit[r] = -scale.
  virtual void CrossEntropyLossGrad(const float* sumexp, float* d_sumexp, float* d_tlogit,
                                    int64_t rows, float scale) = 0;
  // out viewed [outer, len] of dtype (I32 or I64): out[o, t] = offset + t.
  virtual void Positions(void* out, v1::DType dtype, int64_t outer, int64_t len,
                         int64_t offset) = 0;
};

}  // namespace weft

#endif  // WEFT_WORKER_KERNELS_KERNELS_H_
