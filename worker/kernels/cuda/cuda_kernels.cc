#include "worker/kernels/cuda/cuda_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "worker/kernels/cuda/caching_allocator.h"
#include "worker/kernels/cuda/ops.h"

namespace weft {
namespace {

static_assert(static_cast<int>(cuda::ElementType::kF32) == v1::F32 &&
                  static_cast<int>(cuda::ElementType::kBf16) == v1::BF16 &&
                  static_cast<int>(cuda::ElementType::kI32) == v1::I32 &&
                  static_cast<int>(cuda::ElementType::kI64) == v1::I64,
              "cuda::ElementType must number the types as weft.v1.DType does");
static_assert(cuda::MaskBox::kMaxAxes == GlobalBox::kMaxAxes,
              "cuda::MaskBox must hold every GlobalBox");

// DropoutSpec as the kernels take it: the stream key and the keep factor (in float32, as the spec
// says) worked out here.
cuda::DropoutMask MaskOf(const DropoutSpec& spec) {
  cuda::DropoutMask mask;
  mask.p = spec.p;
  mask.seed = spec.seed;
  mask.stream_key = spec.StreamKey();
  mask.keep_scale = 1.0f / (1.0f - spec.p);
  return mask;
}

cuda::MaskBox MaskBoxOf(const GlobalBox& box) {
  cuda::MaskBox mask_box;
  mask_box.rank = box.rank;
  for (int a = 0; a < GlobalBox::kMaxAxes; ++a) {
    mask_box.global[a] = box.global[a];
    mask_box.offsets[a] = box.offsets[a];
    mask_box.lengths[a] = box.lengths[a];
  }
  return mask_box;
}

cuda::AttentionDims DimsOf(const AttentionShape& shape) {
  cuda::AttentionDims dims;
  dims.batch = shape.batch;
  dims.seq = shape.seq;
  dims.heads = shape.heads;
  dims.kv_heads = shape.kv_heads;
  dims.head_dim = shape.head_dim;
  dims.scale = shape.scale;
  dims.dropout = MaskOf(shape.dropout);
  dims.global_batch = shape.global_batch;
  dims.global_heads = shape.global_heads;
  dims.batch_offset = shape.batch_offset;
  dims.head_offset = shape.head_offset;
  return dims;
}

// "<text> (<name>)": the wording of an initialization error.
std::string Describe(cudaError_t err) {
  return absl::StrCat(cudaGetErrorString(err), " (", cudaGetErrorName(err), ")");
}
std::string Describe(cublasStatus_t status) {
  return absl::StrCat(cublasGetStatusString(status), " (", cublasGetStatusName(status), ")");
}

absl::Status NoDevice(absl::string_view why) {
  return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", why));
}

// OK when cuda:index exists; why not otherwise.
absl::Status CheckDeviceIndex(int index) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorNoDevice) {
    cudaGetLastError();
    count = 0;
  } else if (err != cudaSuccess) {
    cudaGetLastError();  // not left behind for an unrelated later check
    return NoDevice(absl::StrCat("cudaGetDeviceCount: ", Describe(err)));
  }
  if (count == 0) return NoDevice("no GPU found");
  if (index < 0 || index >= count) {
    return NoDevice(absl::StrCat("cuda:", index, " does not exist (", count, " device(s))"));
  }
  return absl::OkStatus();
}

// The status of a failed CUDA call during an op: "<op>: [<call>: ]<error name>: <error text>".
// Running out of memory is RESOURCE_EXHAUSTED, anything else INTERNAL.
absl::Status OpError(const char* op, const char* call, cudaError_t err) {
  std::string message = absl::StrCat(op, ": ", call == nullptr ? "" : absl::StrCat(call, ": "),
                                     cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  if (err == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}
absl::Status OpError(const char* op, const char* call, cublasStatus_t status) {
  std::string message = absl::StrCat(op, ": ", call, ": ", cublasGetStatusName(status), ": ",
                                     cublasGetStatusString(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

class CudaKernels final : public Kernels {
 public:
  explicit CudaKernels(const KernelOptions& options)
      : device_(options.device_index),
        allow_tf32_(options.allow_tf32),
        precision_(options.precision),
        allocator_(std::make_unique<CachingAllocator>(
            [this](size_t bytes) { return RawAllocate(bytes); },
            [this](void* p) { RawFree(p); })) {}

  ~CudaKernels() override {
    // Queued work may still read or write the blocks: let it finish, then give the memory back
    // (before the stream it was used on goes). Errors have nowhere to go here.
    if (cudaSetDevice(device_) == cudaSuccess && stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
    }
    allocator_.reset();
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  // Selects the device and creates the stream and the cuBLAS handle; UNAVAILABLE naming the call
  // that failed.
  absl::Status Init() {
    if (absl::Status status = CheckDeviceIndex(device_); !status.ok()) return status;
    if (cudaError_t err = cudaSetDevice(device_); err != cudaSuccess) {
      return NoDevice(absl::StrCat("cudaSetDevice: ", Describe(err)));
    }
    // Non-blocking: work on it never waits behind the legacy default stream, which stream-less
    // calls of other code in the process use.
    if (cudaError_t err = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
        err != cudaSuccess) {
      stream_ = nullptr;
      return NoDevice(absl::StrCat("cudaStreamCreateWithFlags: ", Describe(err)));
    }
    if (cublasStatus_t s = cublasCreate(&cublas_); s != CUBLAS_STATUS_SUCCESS) {
      cublas_ = nullptr;
      return NoDevice(absl::StrCat("cublasCreate: ", Describe(s)));
    }
    if (cublasStatus_t s = cublasSetStream(cublas_, stream_); s != CUBLAS_STATUS_SUCCESS) {
      return NoDevice(absl::StrCat("cublasSetStream: ", Describe(s)));
    }
    // No TF32 unless a matmul asks for it through its compute type (allow_tf32).
    if (cublasStatus_t s = cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH);
        s != CUBLAS_STATUS_SUCCESS) {
      return NoDevice(absl::StrCat("cublasSetMathMode: ", Describe(s)));
    }
    return absl::OkStatus();
  }

  const char* name() const override { return "cuda"; }
  bool host_accessible() const override { return false; }
  void* stream() const override { return stream_; }

  // All work runs on stream_, in order. So a block freed here may be handed out again at once,
  // even while queued kernels still use it: whatever uses it next is queued after them. Work on
  // another stream (a communicator's) must be joined back into stream_ (an event wait) before
  // its buffers are freed.
  void* Allocate(int64_t bytes) override {
    if (!SelectDevice("Allocate")) return nullptr;
    return allocator_->Allocate(static_cast<size_t>(std::max<int64_t>(bytes, 0)));
  }

  // No CUDA call, so no device to select: the block only goes back to the cache.
  void Free(void* p) override { Record(allocator_->Free(p), "Free"); }

  // Waits for the copy, so the caller may reuse or release `host` as soon as this returns.
  void CopyFromHost(const void* host, void* dst, int64_t bytes) override {
    if (bytes <= 0 || !Begin("CopyFromHost")) return;
    Check(cudaMemcpyAsync(dst, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_),
          "CopyFromHost", "cudaMemcpyAsync");
    Check(cudaStreamSynchronize(stream_), "CopyFromHost", "cudaStreamSynchronize");
  }

  // Waits for the copy (and everything queued before it), so `host` holds the data on return.
  void CopyToHost(const void* src, void* host, int64_t bytes) override {
    if (bytes <= 0 || !Begin("CopyToHost")) return;
    Check(cudaMemcpyAsync(host, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_),
          "CopyToHost", "cudaMemcpyAsync");
    Check(cudaStreamSynchronize(stream_), "CopyToHost", "cudaStreamSynchronize");
  }

  void Copy(const void* src, void* dst, int64_t bytes) override {
    if (src == dst || bytes <= 0 || !Begin("Copy")) return;
    Check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                          stream_),
          "Copy", "cudaMemcpyAsync");
  }

  void Fill(void* dst, int64_t n, v1::DType dtype, double value) override {
    if (!Begin("Fill") || !KnownDType(dtype, "Fill")) return;
    uint64_t bits = 0;
    EncodeElement(value, dtype, &bits);
    cuda::Fill(dst, n, DTypeSize(dtype), bits, stream_);
    CheckLaunch("Fill");
  }

  // The caching allocator's blocks in use, scratch included (see MemoryStats).
  MemoryStats memory_stats() const override {
    const CachingAllocatorStats stats = allocator_->stats();
    MemoryStats m;
    m.bytes_in_use = stats.bytes_in_use;
    m.peak_bytes_in_use = stats.peak_bytes_in_use;
    return m;
  }

  void ResetPeakMemoryStats() override { allocator_->ResetPeakBytesInUse(); }

  // Waits for all queued work even after an error, so no kernel still runs on the caller's
  // buffers, then returns the first error since construction (errors are sticky).
  absl::Status Synchronize() override {
    if (SelectDevice("Synchronize")) {
      Check(cudaStreamSynchronize(stream_), "Synchronize", "cudaStreamSynchronize");
    }
    return status_;
  }

  // Row-major c = op(a) @ op(b) through column-major cuBLAS. A row-major [r, s] matrix with
  // leading dimension s is, in the same memory, the column-major [s, r] matrix of its transpose.
  // So cuBLAS sees c as c^T [n, m] (ldc = n) and computes c^T = op(b)^T @ op(a)^T:
  //  - op(b)^T, [n, k]: b stored [k, n] reads as [n, k] = op(b)^T (OP_N, ldb = n); stored [n, k]
  //    (trans_b) it reads as [k, n] and needs a transpose (OP_T, ldb = k).
  //  - op(a)^T, [k, m]: a stored [m, k] reads as [k, m] = op(a)^T (OP_N, lda = k); stored [k, m]
  //    (trans_a) it reads as [m, k] and needs a transpose (OP_T, lda = m).
  // Hence cublasGemmEx(op_b, op_a, M = n, N = m, K = k, b, ldb, a, lda, c, ldc = n).
  void Matmul(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k,
              bool trans_a, bool trans_b) override {
    if (m <= 0 || n <= 0 || !Begin("Matmul")) return;
    if (k <= 0) {
      cuda::Fill(c, m * n, sizeof(float), /*bits=*/0, stream_);  // +0.0f
      CheckLaunch("Matmul");
      return;
    }
    constexpr int64_t kMaxDim = std::numeric_limits<int>::max();
    if (m > kMaxDim || n > kMaxDim || k > kMaxDim) {
      Record(absl::InvalidArgumentError(absl::StrCat(
          "Matmul: [m, n, k] = [", m, ", ", n, ", ", k, "] exceeds cuBLAS's int dimensions")));
      return;
    }
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int lda = static_cast<int>(trans_a ? m : k);
    const int ldb = static_cast<int>(trans_b ? k : n);
    const int ldc = static_cast<int>(n);
    const float alpha = 1.0f, beta = 0.0f;

    if (precision_ == MatmulPrecision::kF32) {
      const cublasComputeType_t compute =
          allow_tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      Check(cublasGemmEx(cublas_, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                         static_cast<int>(k), &alpha, b, CUDA_R_32F, ldb, a, CUDA_R_32F, lda,
                         &beta, c, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT),
            "Matmul", "cublasGemmEx");
      return;
    }

    // kBf16: both operands rounded to bf16 into scratch blocks, products accumulated in float32
    // into the float32 c.
    const int64_t a_count = m * k, b_count = k * n;
    const int64_t bf16_bytes = DTypeSize(v1::BF16);
    void* a16 = allocator_->Allocate(static_cast<size_t>(a_count * bf16_bytes));
    void* b16 = allocator_->Allocate(static_cast<size_t>(b_count * bf16_bytes));
    if (a16 != nullptr && b16 != nullptr) {
      cuda::Cast(a, cuda::ElementType::kF32, a16, cuda::ElementType::kBf16, a_count, stream_);
      CheckLaunch("Matmul");
      cuda::Cast(b, cuda::ElementType::kF32, b16, cuda::ElementType::kBf16, b_count, stream_);
      CheckLaunch("Matmul");
      Check(cublasGemmEx(cublas_, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                         static_cast<int>(k), &alpha, b16, CUDA_R_16BF, ldb, a16, CUDA_R_16BF,
                         lda, &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "Matmul", "cublasGemmEx");
    } else {
      Record(absl::ResourceExhaustedError(absl::StrCat(
          "Matmul: out of device memory for the bf16 operands (",
          (a_count + b_count) * bf16_bytes, " bytes)")));
    }
    // Back to the cache right after the enqueue: any later user of these blocks is queued on
    // stream_ behind this GEMM.
    Record(allocator_->Free(a16), "Matmul");
    Record(allocator_->Free(b16), "Matmul");
  }

  void AddBias(const float* a, const float* bias, float* out, int64_t rows,
               int64_t cols) override {
    if (!Begin("AddBias")) return;
    cuda::AddBias(a, bias, out, rows, cols, stream_);
    CheckLaunch("AddBias");
  }

  void BiasGrad(const float* a, float* out, int64_t rows, int64_t cols) override {
    if (!Begin("BiasGrad")) return;
    cuda::BiasGrad(a, out, rows, cols, stream_);
    CheckLaunch("BiasGrad");
  }

  void Relu(const float* a, float* out, int64_t n) override {
    if (!Begin("Relu")) return;
    cuda::Relu(a, out, n, stream_);
    CheckLaunch("Relu");
  }

  void ReluGrad(const float* x, const float* dy, float* out, int64_t n) override {
    if (!Begin("ReluGrad")) return;
    cuda::ReluGrad(x, dy, out, n, stream_);
    CheckLaunch("ReluGrad");
  }

  void Gelu(const float* x, float* out, int64_t n) override {
    if (!Begin("Gelu")) return;
    cuda::Gelu(x, out, n, stream_);
    CheckLaunch("Gelu");
  }

  void GeluGrad(const float* x, const float* dy, float* out, int64_t n) override {
    if (!Begin("GeluGrad")) return;
    cuda::GeluGrad(x, dy, out, n, stream_);
    CheckLaunch("GeluGrad");
  }

  void MseLoss(const float* pred, const float* label, float* out, int64_t n,
               float scale) override {
    if (!Begin("MseLoss")) return;
    const int64_t partials = cuda::MseLossScratchSize(n);
    double* scratch = LossPartials(partials, "MseLoss");
    if (partials > 0 && scratch == nullptr) return;
    cuda::MseLoss(pred, label, out, n, scale, scratch, stream_);
    CheckLaunch("MseLoss");
  }

  void MseGrad(const float* pred, const float* label, float* out, int64_t n,
               float scale) override {
    if (!Begin("MseGrad")) return;
    cuda::MseGrad(pred, label, out, n, scale, stream_);
    CheckLaunch("MseGrad");
  }

  void Scale(const float* a, float* out, int64_t n, float scale) override {
    if (!Begin("Scale")) return;
    cuda::Scale(a, out, n, scale, stream_);
    CheckLaunch("Scale");
  }

  void Add(const float* a, const float* b, float* out, int64_t n) override {
    if (!Begin("Add")) return;
    cuda::Add(a, b, out, n, stream_);
    CheckLaunch("Add");
  }

  void Sgd(float* param, const float* grad, int64_t n, float lr, float weight_decay,
           const float* grad_scale) override {
    if (!Begin("Sgd")) return;
    cuda::Sgd(param, grad, n, lr, weight_decay, grad_scale, stream_);
    CheckLaunch("Sgd");
  }

  void SumSquares(const float* a, int64_t n, float* out) override {
    if (!Begin("SumSquares")) return;
    const int64_t partials = cuda::MseLossScratchSize(n);
    double* scratch = LossPartials(partials, "SumSquares");
    if (partials > 0 && scratch == nullptr) return;
    cuda::SumSquares(a, out, n, scratch, stream_);
    CheckLaunch("SumSquares");
  }

  void ClipCoefficient(const float* norm_sq, float max_norm, float* out) override {
    if (!Begin("ClipCoefficient")) return;
    cuda::ClipCoefficient(norm_sq, max_norm, out, stream_);
    CheckLaunch("ClipCoefficient");
  }

  void AdamW(float* param, const float* grad, float* m, float* v, int64_t n,
             const AdamWHyper& h, int64_t step, const float* grad_scale) override {
    if (!Begin("AdamW")) return;
    // The bias corrections in double on the host, folded as the CPU backend folds them.
    const double bias1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
    const double bias2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
    cuda::AdamWStep s;
    s.beta1 = h.beta1;
    s.beta2 = h.beta2;
    s.eps = h.eps;
    s.decay = 1.0f - h.lr * h.weight_decay;
    s.step_size = static_cast<float>(h.lr / bias1);
    s.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
    cuda::AdamW(param, grad, m, v, n, s, grad_scale, stream_);
    CheckLaunch("AdamW");
  }

  void Cast(const void* in, v1::DType from, void* out, v1::DType to, int64_t n) override {
    if (!Begin("Cast") || !KnownDType(from, "Cast") || !KnownDType(to, "Cast")) return;
    if (from == to) {
      Copy(in, out, n * DTypeSize(from));
      return;
    }
    cuda::Cast(in, static_cast<cuda::ElementType>(from), out, static_cast<cuda::ElementType>(to),
               n, stream_);
    CheckLaunch("Cast");
  }

  void Slice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
             int64_t offset, int64_t length, int64_t element_bytes) override {
    if (!Begin("Slice")) return;
    cuda::Slice(a, out, outer, axis_len, inner, offset, length, element_bytes, stream_);
    CheckLaunch("Slice");
  }

  void Unslice(const void* a, void* out, int64_t outer, int64_t axis_len, int64_t inner,
               int64_t offset, int64_t length, int64_t element_bytes) override {
    if (!Begin("Unslice")) return;
    cuda::Unslice(a, out, outer, axis_len, inner, offset, length, element_bytes, stream_);
    CheckLaunch("Unslice");
  }

  // ---- Transformers

  void Embedding(const void* ids, v1::DType ids_dtype, const float* table, float* out, int64_t n,
                 int64_t table_rows, int64_t dim, int64_t row_offset) override {
    if (!Begin("Embedding") || !IndexDType(ids_dtype, "Embedding")) return;
    cuda::Embedding(ids, static_cast<cuda::ElementType>(ids_dtype), table, out, n, table_rows, dim,
                    row_offset, stream_);
    CheckLaunch("Embedding");
  }

  // Deterministic: a stable sort of the ids, then each table row adds its dy rows in order (no
  // atomics). The sort's buffers are scratch for the call.
  void EmbeddingGrad(const void* ids, v1::DType ids_dtype, const float* dy, float* grad_table,
                     int64_t n, int64_t table_rows, int64_t dim, int64_t row_offset) override {
    if (!Begin("EmbeddingGrad") || !IndexDType(ids_dtype, "EmbeddingGrad")) return;
    if (table_rows <= 0 || dim <= 0) return;
    const int64_t bytes = cuda::EmbeddingGradScratchSize(n, table_rows);
    void* scratch = Scratch(bytes, "EmbeddingGrad", "the sort of the ids");
    if (bytes > 0 && scratch == nullptr) return;
    Check(cuda::EmbeddingGrad(ids, static_cast<cuda::ElementType>(ids_dtype), dy, grad_table, n,
                              table_rows, dim, row_offset, scratch, stream_),
          "EmbeddingGrad", "cub::DeviceRadixSort::SortPairs");
    CheckLaunch("EmbeddingGrad");
    FreeScratch(scratch, "EmbeddingGrad");
  }

  void LayerNorm(const float* x, const float* gamma, const float* beta, float* y, int64_t rows,
                 int64_t dim, float eps) override {
    if (!Begin("LayerNorm")) return;
    cuda::LayerNorm(x, gamma, beta, y, rows, dim, eps, stream_);
    CheckLaunch("LayerNorm");
  }

  void LayerNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                     float* dbeta, int64_t rows, int64_t dim, float eps) override {
    if (!Begin("LayerNormGrad")) return;
    double* stats = nullptr;
    if (dgamma != nullptr || dbeta != nullptr) {
      stats = static_cast<double*>(Scratch(RowStatsBytes(rows), "LayerNormGrad", "row statistics"));
      if (rows > 0 && stats == nullptr) return;
    }
    cuda::LayerNormGrad(x, gamma, dy, dx, dgamma, dbeta, rows, dim, eps, stats, stream_);
    CheckLaunch("LayerNormGrad");
    FreeScratch(stats, "LayerNormGrad");
  }

  void RmsNorm(const float* x, const float* gamma, float* y, int64_t rows, int64_t dim,
               float eps) override {
    if (!Begin("RmsNorm")) return;
    cuda::RmsNorm(x, gamma, y, rows, dim, eps, stream_);
    CheckLaunch("RmsNorm");
  }

  void RmsNormGrad(const float* x, const float* gamma, const float* dy, float* dx, float* dgamma,
                   int64_t rows, int64_t dim, float eps) override {
    if (!Begin("RmsNormGrad")) return;
    double* stats = nullptr;
    if (dgamma != nullptr) {
      stats = static_cast<double*>(Scratch(RowStatsBytes(rows), "RmsNormGrad", "row statistics"));
      if (rows > 0 && stats == nullptr) return;
    }
    cuda::RmsNormGrad(x, gamma, dy, dx, dgamma, rows, dim, eps, stats, stream_);
    CheckLaunch("RmsNormGrad");
    FreeScratch(stats, "RmsNormGrad");
  }

  void GeluTanh(const float* x, float* out, int64_t n) override {
    if (!Begin("GeluTanh")) return;
    cuda::GeluTanh(x, out, n, stream_);
    CheckLaunch("GeluTanh");
  }

  void GeluTanhGrad(const float* x, const float* dy, float* out, int64_t n) override {
    if (!Begin("GeluTanhGrad")) return;
    cuda::GeluTanhGrad(x, dy, out, n, stream_);
    CheckLaunch("GeluTanhGrad");
  }

  void Silu(const float* x, float* out, int64_t n) override {
    if (!Begin("Silu")) return;
    cuda::Silu(x, out, n, stream_);
    CheckLaunch("Silu");
  }

  void SiluGrad(const float* x, const float* dy, float* out, int64_t n) override {
    if (!Begin("SiluGrad")) return;
    cuda::SiluGrad(x, dy, out, n, stream_);
    CheckLaunch("SiluGrad");
  }

  void Mul(const float* a, const float* b, float* out, int64_t n) override {
    if (!Begin("Mul")) return;
    cuda::Mul(a, b, out, n, stream_);
    CheckLaunch("Mul");
  }

  void Rope(const float* x, float* out, int64_t batch, int64_t seq, int64_t heads,
            int64_t head_dim, int64_t pos_offset, float theta, bool inverse) override {
    if (!Begin("Rope")) return;
    cuda::Rope(x, out, batch, seq, heads, head_dim, pos_offset, theta, inverse, stream_);
    CheckLaunch("Rope");
  }

  void Attention(const float* q, const float* k, const float* v, float* out,
                 const AttentionShape& shape) override {
    if (!Begin("Attention")) return;
    cuda::Attention(q, k, v, out, DimsOf(shape), stream_);
    CheckLaunch("Attention");
  }

  // The per-query-row statistics the two kernels share are scratch for the call.
  void AttentionGrad(const float* q, const float* k, const float* v, const float* dout, float* dq,
                     float* dk, float* dv, const AttentionShape& shape) override {
    if (!Begin("AttentionGrad")) return;
    const cuda::AttentionDims dims = DimsOf(shape);
    const int64_t count = cuda::AttentionGradScratchSize(dims);
    auto* stats = static_cast<double*>(Scratch(count * static_cast<int64_t>(sizeof(double)),
                                               "AttentionGrad", "row statistics"));
    if (count > 0 && stats == nullptr) return;
    cuda::AttentionGrad(q, k, v, dout, dq, dk, dv, dims, stats, stream_);
    CheckLaunch("AttentionGrad");
    FreeScratch(stats, "AttentionGrad");
  }

  void Dropout(const float* x, float* out, int64_t n, const DropoutSpec& spec,
               const GlobalBox& box) override {
    if (!Begin("Dropout")) return;
    cuda::Dropout(x, out, n, MaskOf(spec), MaskBoxOf(box), stream_);
    CheckLaunch("Dropout");
  }

  void RowMax(const float* logits, float* out, int64_t rows, int64_t cols) override {
    if (!Begin("RowMax")) return;
    cuda::RowMax(logits, out, rows, cols, stream_);
    CheckLaunch("RowMax");
  }

  void CrossEntropyParts(const float* logits, const float* m, const void* targets,
                         v1::DType targets_dtype, float* sumexp, float* tlogit, int64_t rows,
                         int64_t cols, int64_t col_offset) override {
    if (!Begin("CrossEntropyParts") || !IndexDType(targets_dtype, "CrossEntropyParts")) return;
    cuda::CrossEntropyParts(logits, m, targets, static_cast<cuda::ElementType>(targets_dtype),
                            sumexp, tlogit, rows, cols, col_offset, stream_);
    CheckLaunch("CrossEntropyParts");
  }

  void CrossEntropyPartsGrad(const float* logits, const float* m, const void* targets,
                             v1::DType targets_dtype, const float* d_sumexp,
                             const float* d_tlogit, float* dlogits, int64_t rows, int64_t cols,
                             int64_t col_offset) override {
    if (!Begin("CrossEntropyPartsGrad") ||
        !IndexDType(targets_dtype, "CrossEntropyPartsGrad")) {
      return;
    }
    cuda::CrossEntropyPartsGrad(logits, m, targets, static_cast<cuda::ElementType>(targets_dtype),
                                d_sumexp, d_tlogit, dlogits, rows, cols, col_offset, stream_);
    CheckLaunch("CrossEntropyPartsGrad");
  }

  void CrossEntropyLoss(const float* sumexp, const float* m, const float* tlogit, float* out,
                        int64_t rows, float scale) override {
    if (!Begin("CrossEntropyLoss")) return;
    const int64_t partials = cuda::CrossEntropyLossScratchSize(rows);
    double* scratch = LossPartials(partials, "CrossEntropyLoss");
    if (partials > 0 && scratch == nullptr) return;
    cuda::CrossEntropyLoss(sumexp, m, tlogit, out, rows, scale, scratch, stream_);
    CheckLaunch("CrossEntropyLoss");
  }

  void CrossEntropyLossGrad(const float* sumexp, float* d_sumexp, float* d_tlogit, int64_t rows,
                            float scale) override {
    if (!Begin("CrossEntropyLossGrad")) return;
    cuda::CrossEntropyLossGrad(sumexp, d_sumexp, d_tlogit, rows, scale, stream_);
    CheckLaunch("CrossEntropyLossGrad");
  }

  void Positions(void* out, v1::DType dtype, int64_t outer, int64_t len,
                 int64_t offset) override {
    if (!Begin("Positions") || !IndexDType(dtype, "Positions")) return;
    cuda::Positions(out, static_cast<cuda::ElementType>(dtype), outer, len, offset, stream_);
    CheckLaunch("Positions");
  }

 private:
  // LayerNormGrad's and RmsNormGrad's per-row (mean, rstd), in bytes.
  static int64_t RowStatsBytes(int64_t rows) {
    return 2 * std::max<int64_t>(rows, 0) * static_cast<int64_t>(sizeof(double));
  }

  // False, with INVALID_ARGUMENT recorded, for a number that is not a v1::DType (proto3 enums
  // are open).
  bool KnownDType(v1::DType dtype, const char* op) {
    if (v1::DType_IsValid(dtype)) return true;
    Record(absl::InvalidArgumentError(
        absl::StrCat(op, ": unknown dtype ", static_cast<int>(dtype))));
    return false;
  }

  // Makes device_ current on the calling thread (cheap when it already is); false, the error
  // recorded, when that fails.
  bool SelectDevice(const char* op) { return Check(cudaSetDevice(device_), op, "cudaSetDevice"); }

  // The start of every op that queues work: false, so the op is skipped, after an earlier error
  // (the context may be unusable, and the step fails at the next Synchronize anyway) or when the
  // device cannot be selected.
  bool Begin(const char* op) { return status_.ok() && SelectDevice(op); }

  // Keeps the first error; true when err is cudaSuccess.
  bool Check(cudaError_t err, const char* op, const char* call) {
    if (err == cudaSuccess) return true;
    Record(OpError(op, call, err));
    return false;
  }
  bool Check(cublasStatus_t status, const char* op, const char* call) {
    if (status == CUBLAS_STATUS_SUCCESS) return true;
    Record(OpError(op, call, status));
    return false;
  }
  // After a launcher: a bad launch configuration, or an earlier asynchronous fault the runtime
  // has seen by now (so the op named may not be the one that faulted; the error is still the
  // first).
  void CheckLaunch(const char* op) { Check(cudaGetLastError(), op, nullptr); }

  void Record(absl::Status status) {
    if (status_.ok() && !status.ok()) status_ = std::move(status);
  }
  void Record(const absl::Status& status, const char* op) {
    if (!status.ok()) Record(absl::Status(status.code(), absl::StrCat(op, ": ", status.message())));
  }

  // The caching allocator's raw side.
  void* RawAllocate(size_t bytes) {
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaSuccess) return p;
    if (err == cudaErrorMemoryAllocation) {
      // An answer, not an error: the cache releases its blocks and retries, or the caller gets
      // null. Cleared so that the next launch check does not report it.
      cudaGetLastError();
      return nullptr;
    }
    Check(err, "Allocate", "cudaMalloc");
    return nullptr;
  }
  // cudaFree waits for the whole device, so no queued kernel still uses the block.
  void RawFree(void* p) { Check(cudaFree(p), "Free", "cudaFree"); }

  // At least `count` doubles for a loss's partial sums (MseLoss, CrossEntropyLoss), kept and grown
  // when too small; null, with RESOURCE_EXHAUSTED recorded for `op`, when out of memory.
  double* LossPartials(int64_t count, const char* op) {
    if (count <= loss_partials_count_) return loss_partials_;
    // The old block may go back at once: its last loss is queued ahead on stream_.
    Record(allocator_->Free(loss_partials_), op);
    loss_partials_ = static_cast<double*>(
        allocator_->Allocate(static_cast<size_t>(count) * sizeof(double)));
    loss_partials_count_ = loss_partials_ == nullptr ? 0 : count;
    if (loss_partials_ == nullptr) {
      Record(absl::ResourceExhaustedError(
          absl::StrCat(op, ": out of device memory for ", count, " partial sums")));
    }
    return loss_partials_;
  }

  // A scratch block of `bytes` for one call of `op` (null for 0 bytes); hand it back with
  // FreeScratch right after the op's last enqueue: any later user of the block is queued on
  // stream_ behind the op. Null, with RESOURCE_EXHAUSTED recorded, when out of memory.
  void* Scratch(int64_t bytes, const char* op, const char* what) {
    if (bytes <= 0) return nullptr;
    void* p = allocator_->Allocate(static_cast<size_t>(bytes));
    if (p == nullptr) {
      Record(absl::ResourceExhaustedError(
          absl::StrCat(op, ": out of device memory for ", what, " (", bytes, " bytes)")));
    }
    return p;
  }
  void FreeScratch(void* p, const char* op) { Record(allocator_->Free(p), op); }

  // False, with INVALID_ARGUMENT recorded, unless dtype is an index type (I32 or I64).
  bool IndexDType(v1::DType dtype, const char* op) {
    if (dtype == v1::I32 || dtype == v1::I64) return true;
    const std::string name = v1::DType_IsValid(dtype) ? v1::DType_Name(dtype)
                                                       : absl::StrCat(static_cast<int>(dtype));
    Record(absl::InvalidArgumentError(
        absl::StrCat(op, ": indices must be I32 or I64, not ", name)));
    return false;
  }

  const int device_;
  const bool allow_tf32_;
  const MatmulPrecision precision_;
  cudaStream_t stream_ = nullptr;   // owned; every op is queued on it
  cublasHandle_t cublas_ = nullptr;  // owned; bound to stream_
  absl::Status status_;              // the first error; sticky
  // Owns every device block; its raw functions use the members above, so it is declared after
  // them and released first, explicitly, in the destructor.
  std::unique_ptr<CachingAllocator> allocator_;
  double* loss_partials_ = nullptr;  // from allocator_
  int64_t loss_partials_count_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernels>> NewCudaKernels(const KernelOptions& options) {
  auto kernels = std::make_unique<CudaKernels>(options);
  if (absl::Status status = kernels->Init(); !status.ok()) return status;
  return std::unique_ptr<Kernels>(std::move(kernels));
}

absl::StatusOr<DeviceDescription> ProbeCudaDevice(int index) {
  if (absl::Status status = CheckDeviceIndex(index); !status.ok()) return status;
  cudaDeviceProp prop;
  if (cudaError_t err = cudaGetDeviceProperties(&prop, index); err != cudaSuccess) {
    cudaGetLastError();
    return NoDevice(absl::StrCat("cudaGetDeviceProperties: ", Describe(err)));
  }
  DeviceDescription d;
  d.kind = "cuda";
  d.name = prop.name;
  d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  d.cores = prop.multiProcessorCount;
  d.compute_capability = absl::StrCat(prop.major, ".", prop.minor);
  return d;
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace weft
