// Conformance of every Communicator transport compiled into this binary: "local" (in-process),
// "gloo" (TCP on 127.0.0.1, rendezvous through Gloo's HashStore) and, in a --config=cuda build,
// "nccl" (rank r on CUDA device r % device count). Each case runs 1 to 4 ranks as threads of
// this process, in the backend's memory space (host vectors, or cudaMalloc'd device buffers).
//
// The collectives run for every dtype (f32, bf16, i32, i64: the CommunicatorConformanceTest
// cases are instantiated per backend, group size and dtype). Inputs are random and non-zero,
// seeded per member, so every thread can rebuild any member's input, and fresh on every run
// (TestSeed): floats uniform in +-[0.05, 2] (bf16: those rounded to bf16), i32 in
// +-[1, 2^29) and i64 in +-[2^53, 2^60), beyond what a float or a double holds exactly. Outputs
// are poisoned before each call (NaN, or 0xA5 bytes for integers). Expected values are computed
// here, independently of the transports: copies must be bit-exact; integer sums exact; f32 sums
// in float64, within a tolerance relative to the sum of magnitudes; bf16 sums in float64, then
// as the backend's header documents its rounding: bit-exact to the bf16 nearest the float32 sum
// where it rounds once, else within one bf16 rounding of the partial sums per addition. Maxima
// must be bit-exact for every backend and dtype: the largest member's element by comparing
// values here (+0 over -0), or the canonical quiet NaN where any member holds a NaN.
//
// NCCL needs one GPU per rank: a case that needs more GPUs than the machine has is skipped with
// the reason. With WEFT_REQUIRE_GPU=1 a machine with no usable GPU fails every NCCL case
// instead, so a GPU run cannot pass by skipping everything.
//
// Every backend runs every case (send/recv needs two members, so it skips groups of one). The
// local backend differs only in the code of a call after a failure: ABORTED, where Gloo and NCCL
// say FAILED_PRECONDITION.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/dtype.h"
#include "common/test_seed.h"
#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "worker/comm/communicator.h"
#include "worker/comm/gloo/gloo_communicator.h"
#include "worker/comm/local/local_communicator.h"
#ifdef WEFT_CUDA
#include <cuda_runtime.h>

#include "worker/comm/nccl/nccl_communicator.h"
#endif

namespace weft {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(60);
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr v1::DType kDTypes[] = {v1::F32, v1::BF16, v1::I32, v1::I64};

// memcpy for counts that may be 0: an empty Values' data() is null, and memcpy must not be given
// null even for 0 bytes (UBSan's nonnull-attribute check).
void CopyBytes(void* to, const void* from, size_t bytes) {
  if (bytes > 0) std::memcpy(to, from, bytes);
}

// ---- Values ----

// Host copies of n elements of one dtype, bit for bit: what the tests write into buffers and
// read back.
class Values {
 public:
  Values() = default;
  Values(v1::DType dtype, int64_t n) : dtype_(dtype), bytes_(n * DTypeSize(dtype)) {}
  // f32 values.
  Values(const std::vector<float>& floats) : Values(v1::F32, floats.size()) {  // NOLINT
    CopyBytes(data(), floats.data(), bytes());
  }

  v1::DType dtype() const { return dtype_; }
  int64_t size() const { return static_cast<int64_t>(bytes_.size()) / DTypeSize(dtype_); }
  size_t bytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  void* at(int64_t i) { return bytes_.data() + i * DTypeSize(dtype_); }
  const void* at(int64_t i) const { return bytes_.data() + i * DTypeSize(dtype_); }

  // Element i of a float type (f32, bf16), exactly.
  double Float(int64_t i) const {
    if (dtype_ == v1::BF16) return Bf16BitsToFloat(Get<uint16_t>(i));
    return Get<float>(i);
  }
  // Element i of an integer type (i32, i64), exactly.
  int64_t Int(int64_t i) const {
    return dtype_ == v1::I32 ? Get<int32_t>(i) : Get<int64_t>(i);
  }
  // Sets element i from a float (rounded to bf16 for bf16) or an integer value.
  void SetFloat(int64_t i, float v) {
    if (dtype_ == v1::BF16) {
      Set<uint16_t>(i, FloatToBf16Bits(v));
    } else {
      Set<float>(i, v);
    }
  }
  void SetInt(int64_t i, int64_t v) {
    if (dtype_ == v1::I32) {
      Set<int32_t>(i, static_cast<int32_t>(v));
    } else {
      Set<int64_t>(i, v);
    }
  }
  // Sets element i to `v` in whatever type this is.
  void SetNumber(int64_t i, int64_t v) {
    if (IsFloatingPoint(dtype_)) {
      SetFloat(i, static_cast<float>(v));
    } else {
      SetInt(i, v);
    }
  }
  bool SameBits(int64_t i, const Values& other, int64_t j) const {
    return std::memcmp(at(i), other.at(j), DTypeSize(dtype_)) == 0;
  }
  // "1.25 (bits 0x3fa0)" or "-17".
  std::string Format(int64_t i) const {
    if (!IsFloatingPoint(dtype_)) return absl::StrCat(Int(i));
    const uint32_t bits = dtype_ == v1::BF16 ? Get<uint16_t>(i) : Get<uint32_t>(i);
    return absl::StrCat(Float(i), " (bits 0x", absl::Hex(bits), ")");
  }

  void Append(const Values& other) {
    bytes_.insert(bytes_.end(), other.bytes_.begin(), other.bytes_.end());
  }
  Values Slice(int64_t from, int64_t n) const {
    Values piece(dtype_, n);
    CopyBytes(piece.data(), at(from), piece.bytes());
    return piece;
  }

 private:
  template <typename T>
  T Get(int64_t i) const {
    T v;
    std::memcpy(&v, at(i), sizeof(T));
    return v;
  }
  template <typename T>
  void Set(int64_t i, T v) {
    std::memcpy(at(i), &v, sizeof(T));
  }

  v1::DType dtype_ = v1::F32;
  std::vector<char> bytes_;
};

// n values of `dtype` all equal to v.
Values Fill(v1::DType dtype, int64_t n, int64_t v) {
  Values values(dtype, n);
  for (int64_t i = 0; i < n; ++i) values.SetNumber(i, v);
  return values;
}

// ---- Memory spaces ----

// Buffers where one rank's communicator reads and writes them. Used from that rank's thread.
class Memory {
 public:
  virtual ~Memory() = default;
  // At least 8 bytes, so that empty buffers still have a valid address.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual void Write(void* to, const void* from, size_t bytes) = 0;
  virtual void Read(const void* from, void* to, size_t bytes) = 0;
};

class HostMemory : public Memory {
 public:
  // int64_t storage: aligned for every dtype.
  void* Allocate(size_t bytes) override { return new int64_t[bytes / 8 + 1]; }
  void Free(void* p) override { delete[] static_cast<int64_t*>(p); }
  void Write(void* to, const void* from, size_t bytes) override { CopyBytes(to, from, bytes); }
  void Read(const void* from, void* to, size_t bytes) override { CopyBytes(to, from, bytes); }
};

#ifdef WEFT_CUDA
// cudaMalloc'd buffers on one device. cudaMemcpy is synchronous, and the communicators' calls
// block until their stream is done, so no further synchronization is needed.
class CudaMemory : public Memory {
 public:
  explicit CudaMemory(int device) : device_(device) {}
  void* Allocate(size_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 8));
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return p;
  }
  void Free(void* p) override {
    cudaSetDevice(device_);
    cudaFree(p);
  }
  void Write(void* to, const void* from, size_t bytes) override {
    cudaSetDevice(device_);
    const cudaError_t e = cudaMemcpy(to, from, bytes, cudaMemcpyHostToDevice);
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  }
  void Read(const void* from, void* to, size_t bytes) override {
    cudaSetDevice(device_);
    const cudaError_t e = cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToHost);
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  }

 private:
  const int device_;
};
#endif

// n elements of one dtype in a rank's memory space, freed on destruction.
class Buffer {
 public:
  Buffer(Memory& memory, v1::DType dtype, int64_t n)
      : memory_(memory), dtype_(dtype), size_(n), data_(memory.Allocate(n * DTypeSize(dtype))) {}
  Buffer(Memory& memory, const Values& values) : Buffer(memory, values.dtype(), values.size()) {
    Write(values);
  }
  ~Buffer() { memory_.Free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return data_; }
  // The address of element i.
  void* at(int64_t i) const { return static_cast<char*>(data_) + i * DTypeSize(dtype_); }
  void Write(const Values& values) {
    ASSERT_EQ(values.dtype(), dtype_);
    ASSERT_EQ(values.size(), size_);
    memory_.Write(data_, values.data(), values.bytes());
  }
  Values Read() const {
    Values values(dtype_, size_);
    memory_.Read(data_, values.data(), values.bytes());
    return values;
  }

 private:
  Memory& memory_;
  const v1::DType dtype_;
  const int64_t size_;
  void* const data_;
};

// ---- Backends ----

// The ranks of one run: what they share (a store, a LocalWorld) and what each one gets.
class World {
 public:
  virtual ~World() = default;
  virtual std::unique_ptr<CommunicatorFactory> NewFactory(int rank) = 0;
  virtual std::unique_ptr<Memory> NewMemory(int rank) = 0;
};

// The bf16 reductions whose rounding the transports document.
enum class Bf16Reduction { kAllReduceSum, kAllReduceAvg, kReduceScatter };

bool IsPowerOfTwo(int k) { return (k & (k - 1)) == 0; }

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::unique_ptr<World> NewWorld(int ranks, absl::Duration timeout) const = 0;
  // The CUDA devices this machine has (with `why` saying why none), or -1 if the backend needs
  // none.
  virtual int Devices(std::string* why) const { return -1; }
  // Whether buffers are host memory (the shared Gloo byte check allocates host vectors).
  virtual bool host_memory() const { return true; }
  // The code of a call on a communicator broken by an earlier failure.
  virtual absl::StatusCode broken_code() const { return absl::StatusCode::kFailedPrecondition; }
  // Bytes member `rank` of `size` sends in a broadcast of `count` elements of `element_bytes`
  // from `root`: the one op whose algorithm differs between the transports.
  virtual int64_t BroadcastBytes(int64_t count, int64_t element_bytes, int rank, int size,
                                 int root) const = 0;
  // How many times, at most, a bf16 reduction over k members is rounded to bf16 (or suffers an
  // error as large), as the transport's header documents it. 1 means exactly once: the result
  // must be the bf16 nearest the float32 result.
  virtual int Bf16Roundings(Bf16Reduction reduction, int k) const = 0;
  // The bytes an element of `dtype` puts on the wire in an all-reduce max.
  virtual int64_t MaxElementBytes(v1::DType dtype) const { return DTypeSize(dtype); }
};

// Gloo's binomial tree (and LocalCommunicator, which counts as Gloo): virtual rank v = rank -
// root sends the buffer to v + 2^i for every 2^i > v with v + 2^i < size.
int64_t BinomialBroadcastBytes(int64_t count, int64_t element_bytes, int rank, int size,
                               int root) {
  const int v = (rank - root + size) % size;
  int children = 0;
  for (int step = 1; step < size; step *= 2) {
    if (step > v && v + step < size) ++children;
  }
  return element_bytes * count * children;
}

class LocalBackend : public Backend {
 public:
  class LocalRun : public World {
   public:
    LocalRun(int ranks, absl::Duration timeout)
        : world_(std::make_shared<LocalWorld>(ranks, timeout)) {}
    std::unique_ptr<CommunicatorFactory> NewFactory(int rank) override {
      return std::make_unique<LocalCommunicatorFactory>(world_, rank);
    }
    std::unique_ptr<Memory> NewMemory(int) override { return std::make_unique<HostMemory>(); }

   private:
    std::shared_ptr<LocalWorld> world_;
  };

  std::unique_ptr<World> NewWorld(int ranks, absl::Duration timeout) const override {
    return std::make_unique<LocalRun>(ranks, timeout);
  }
  absl::StatusCode broken_code() const override { return absl::StatusCode::kAborted; }
  int64_t BroadcastBytes(int64_t count, int64_t element_bytes, int rank, int size,
                         int root) const override {
    return BinomialBroadcastBytes(count, element_bytes, rank, size, root);
  }
  // Sums every member in float32 (and divides, for avg), then rounds once.
  int Bf16Roundings(Bf16Reduction, int) const override { return 1; }
};

class GlooBackend : public Backend {
 public:
  class GlooRun : public World {
   public:
    explicit GlooRun(absl::Duration timeout) : timeout_(timeout) {}
    std::unique_ptr<CommunicatorFactory> NewFactory(int rank) override {
      return std::make_unique<GlooCommunicatorFactory>(&store_, rank, "127.0.0.1", timeout_);
    }
    std::unique_ptr<Memory> NewMemory(int) override { return std::make_unique<HostMemory>(); }

   private:
    const absl::Duration timeout_;
    gloo::rendezvous::HashStore store_;
  };

  std::unique_ptr<World> NewWorld(int, absl::Duration timeout) const override {
    return std::make_unique<GlooRun>(timeout);
  }
  int64_t BroadcastBytes(int64_t count, int64_t element_bytes, int rank, int size,
                         int root) const override {
    return BinomialBroadcastBytes(count, element_bytes, rank, size, root);
  }
  // The ring rounds once per hop (K - 1 additions); avg multiplies by 1/K and rounds again,
  // which is exact for K a power of two. The reduce-scatter sums in float32 and rounds once.
  int Bf16Roundings(Bf16Reduction reduction, int k) const override {
    if (reduction == Bf16Reduction::kReduceScatter) return 1;
    const int sum = std::max(1, k - 1);
    return reduction == Bf16Reduction::kAllReduceAvg && !IsPowerOfTwo(k) ? sum + 1 : sum;
  }
};

#ifdef WEFT_CUDA
class NcclBackend : public Backend {
 public:
  class NcclRun : public World {
   public:
    NcclRun(int devices, absl::Duration timeout) : devices_(devices), timeout_(timeout) {}
    std::unique_ptr<CommunicatorFactory> NewFactory(int rank) override {
      // Compute on the legacy default stream, as the tests' cudaMemcpy calls do.
      auto factory =
          std::make_unique<NcclCommunicatorFactory>(&store_, rank, Device(rank), timeout_);
      factory->SetComputeStream(nullptr);
      return factory;
    }
    std::unique_ptr<Memory> NewMemory(int rank) override {
      return std::make_unique<CudaMemory>(Device(rank));
    }

   private:
    int Device(int rank) const { return rank % devices_; }
    const int devices_;
    const absl::Duration timeout_;
    gloo::rendezvous::HashStore store_;
  };

  std::unique_ptr<World> NewWorld(int, absl::Duration timeout) const override {
    std::string why;
    return std::make_unique<NcclRun>(std::max(1, Devices(&why)), timeout);
  }
  int Devices(std::string* why) const override {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
      *why = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
      return 0;
    }
    if (count == 0) *why = "cudaGetDeviceCount found no device";
    return count;
  }
  bool host_memory() const override { return false; }
  // A chain root -> root+1 -> ... -> root-1: every member but the last sends the buffer.
  int64_t BroadcastBytes(int64_t count, int64_t element_bytes, int rank, int size,
                         int root) const override {
    if (size == 1) return 0;
    return rank == (root + size - 1) % size ? 0 : element_bytes * count;
  }
  // One rounding per addition of NCCL's ring or tree (K - 1); ncclAvg premultiplies every input
  // by 1/K rounded to bf16, two more errors of a rounding's size unless K is a power of two.
  int Bf16Roundings(Bf16Reduction reduction, int k) const override {
    const int sum = std::max(1, k - 1);
    return reduction == Bf16Reduction::kAllReduceAvg && !IsPowerOfTwo(k) ? sum + 2 : sum;
  }
  // Float maxima move int32 keys, bf16 too.
  int64_t MaxElementBytes(v1::DType dtype) const override {
    return dtype == v1::BF16 ? 4 : DTypeSize(dtype);
  }
};
#endif

std::vector<std::string> BackendNames() {
  std::vector<std::string> names = {"local", "gloo"};
#ifdef WEFT_CUDA
  names.push_back("nccl");
#endif
  return names;
}

const Backend& GetBackend(const std::string& name) {
  static const LocalBackend* local = new LocalBackend;
  static const GlooBackend* gloo = new GlooBackend;
#ifdef WEFT_CUDA
  static const NcclBackend* nccl = new NcclBackend;
  if (name == "nccl") return *nccl;
#endif
  if (name == "local") return *local;
  return *gloo;
}

// ---- Values ----

v1::CommGroup Group(int id, int ranks, const std::string& dims = "dp") {
  v1::CommGroup g;
  g.set_id(id);
  for (int r = 0; r < ranks; ++r) g.add_ranks(r);
  g.set_mesh_dims(dims);
  return g;
}

std::string GroupNameOf(int id, int ranks) {
  std::string list;
  for (int r = 0; r < ranks; ++r) absl::StrAppend(&list, r == 0 ? "" : ",", r);
  return absl::StrCat("group ", id, " (dp) ranks [", list, "]");
}

// n random values of `dtype`, never zero, so a missing contribution always shows: floats
// uniform in +-[0.05, 2] (rounded to bf16 for bf16), i32 in +-[1, 2^29) (past float32's 2^24,
// and four of them still fit), i64 in +-[2^53, 2^60) (past float64's 2^53). The same
// (stream, member) gives the same values in every thread of a run; runs differ (TestSeed).
Values Inputs(int stream, int member, int64_t n, v1::DType dtype = v1::F32) {
  std::mt19937_64 gen(TestSeed() ^ (static_cast<uint64_t>(stream) * 1000003 + member));
  std::bernoulli_distribution negative(0.5);
  Values v(dtype, n);
  if (IsFloatingPoint(dtype)) {
    std::uniform_real_distribution<float> magnitude(0.05f, 2.0f);
    for (int64_t i = 0; i < n; ++i) v.SetFloat(i, negative(gen) ? -magnitude(gen) : magnitude(gen));
  } else {
    const bool i32 = dtype == v1::I32;
    std::uniform_int_distribution<int64_t> magnitude(i32 ? 1 : int64_t{1} << 53,
                                                     i32 ? (1 << 29) - 1 : (int64_t{1} << 60) - 1);
    for (int64_t i = 0; i < n; ++i) v.SetInt(i, negative(gen) ? -magnitude(gen) : magnitude(gen));
  }
  return v;
}

// n elements no transport may leave behind: NaN for floats, 0xA5 bytes for integers (beyond
// the inputs' range).
Values Poison(int64_t n, v1::DType dtype = v1::F32) {
  Values v(dtype, n);
  if (IsFloatingPoint(dtype)) {
    for (int64_t i = 0; i < n; ++i) v.SetFloat(i, kNaN);
  } else if (n > 0) {  // data() is null at 0, which memset must not be given
    std::memset(v.data(), 0xA5, v.bytes());
  }
  return v;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t t = 0;
  for (int64_t x : v) t += x;
  return t;
}

int64_t Offset(const std::vector<int64_t>& counts, int member) {
  return Sum(std::vector<int64_t>(counts.begin(), counts.begin() + member));
}

// f32: got[i] within 1e-6 of the magnitude of the terms of want[i] (float32 rounding of a sum of
// up to four terms, in any order), plus 1e-7. NaN (a poisoned output never written) always
// fails.
void ExpectNear(const Values& got, const std::vector<double>& want,
                const std::vector<double>& magnitude, const std::string& what) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tolerance = 1e-6 * magnitude[i] + 1e-7;
    ASSERT_TRUE(std::abs(got.Float(i) - want[i]) <= tolerance)
        << what << ": element " << i << " is " << got.Float(i) << ", want " << want[i] << " +- "
        << tolerance;
  }
}

// Copies must be exact, bit for bit.
void ExpectEqual(const Values& got, const Values& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.size(), want.size()) << what;
  for (int64_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got.SameBits(i, want, i))
        << what << ": element " << i << " is " << got.Format(i) << ", want " << want.Format(i);
  }
}

// got = the element-wise sum of `terms` (one per member, in member order) divided by `divisor`
// (the group's size for avg), computed here exactly: float64 for floats (exact for four of these
// inputs), int64 for integers. f32 within ExpectNear's tolerance; integers exact; bf16 as the
// backend documents (`bf16_roundings`, Backend::Bf16Roundings): rounded once, the result must be
// the bf16 nearest the float32 sum (divided in float32), bit for bit; rounded r times, within r
// times bf16's unit roundoff (2^-8: 8 significant bits) of the sum of magnitudes.
void ExpectReduced(const Values& got, const std::vector<Values>& terms, int divisor,
                   int bf16_roundings, const std::string& what) {
  const v1::DType dtype = got.dtype();
  const int64_t n = got.size();
  for (const Values& t : terms) {
    ASSERT_EQ(t.dtype(), dtype) << what;
    ASSERT_EQ(t.size(), n) << what;
  }
  if (!IsFloatingPoint(dtype)) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t want = 0;
      for (const Values& t : terms) want += t.Int(i);
      ASSERT_EQ(got.Int(i), want) << what << ": element " << i;
    }
    return;
  }
  std::vector<double> want(n, 0.0), magnitude(n, 0.0);
  for (const Values& t : terms) {
    for (int64_t i = 0; i < n; ++i) {
      want[i] += t.Float(i);
      magnitude[i] += std::abs(t.Float(i));
    }
  }
  if (dtype == v1::F32) {
    for (double& w : want) w /= divisor;
    ExpectNear(got, want, magnitude, what);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    if (bf16_roundings <= 1) {
      float nearest = static_cast<float>(want[i]);
      if (divisor != 1) nearest /= static_cast<float>(divisor);
      Values once(v1::BF16, 1);
      once.SetFloat(0, nearest);
      ASSERT_TRUE(got.SameBits(i, once, 0))
          << what << ": element " << i << " is " << got.Format(i) << ", want " << once.Format(0)
          << " (the bf16 nearest " << want[i] / divisor << ")";
    } else {
      // Each rounding errs by at most 2^-8 of a partial sum, itself at most the magnitude (plus
      // the earlier errors: the 1%).
      const double tolerance = bf16_roundings * std::ldexp(magnitude[i] / divisor, -8) * 1.01;
      ASSERT_TRUE(std::abs(got.Float(i) - want[i] / divisor) <= tolerance)
          << what << ": element " << i << " is " << got.Format(i) << ", want "
          << want[i] / divisor << " +- " << tolerance << " (" << bf16_roundings << " roundings)";
    }
  }
}

// Sets element i of a float Values to the float32 with these bits (bf16: their upper half), so
// that NaNs keep their sign and payload.
void SetFloatBits(Values& values, int64_t i, uint32_t bits) {
  if (values.dtype() == v1::BF16) {
    const uint16_t upper = static_cast<uint16_t>(bits >> 16);
    std::memcpy(values.at(i), &upper, sizeof(upper));
  } else {
    std::memcpy(values.at(i), &bits, sizeof(bits));
  }
}

// Every member's input of an all-reduce max of n elements over k members. Random (Inputs), then
// made so that member (i + i / 8) % k, the winner, holds the strict maximum of element i, so the
// maximum moves between members from element to element; and by i % 8:
//   1      every member's element is negative (a max that starts from 0 would show);
//   3      with `nans` (floats): a NaN at member (i / 8) % k, a quiet, a negative or a signalling
//          one in turn, and +inf at the winner (unless it holds the NaN): the max is a NaN;
//   5      floats: -0 everywhere, +0 at the winner; integers: the type's minimum everywhere, its
//          maximum at the winner;
//   7      floats: -inf everywhere, the winner's random value.
std::vector<Values> MaxInputs(int stream, int k, int64_t n, v1::DType dtype, bool nans) {
  const bool floats = IsFloatingPoint(dtype);
  std::vector<Values> terms;
  for (int m = 0; m < k; ++m) terms.push_back(Inputs(stream, m, n, dtype));
  const uint32_t kNaNBits[] = {0x7FC00000u, 0xFFFF0000u, 0x7F810000u};
  for (int64_t i = 0; i < n; ++i) {
    const int winner = static_cast<int>((i + i / 8) % k);
    const int other = static_cast<int>((i / 8) % k);
    if (floats && i % 8 == 5) {
      for (int m = 0; m < k; ++m) terms[m].SetFloat(i, m == winner ? 0.0f : -0.0f);
      continue;
    }
    if (!floats && i % 8 == 5) {
      const bool i32 = dtype == v1::I32;
      for (int m = 0; m < k; ++m) {
        if (m == winner) {
          terms[m].SetInt(i, i32 ? std::numeric_limits<int32_t>::max()
                                 : std::numeric_limits<int64_t>::max());
        } else {
          terms[m].SetInt(i, i32 ? std::numeric_limits<int32_t>::min()
                                 : std::numeric_limits<int64_t>::min());
        }
      }
      continue;
    }
    if (floats && nans && i % 8 == 3) {
      terms[winner].SetFloat(i, std::numeric_limits<float>::infinity());
      SetFloatBits(terms[other], i, kNaNBits[(i / 8) % 3]);
      continue;
    }
    if (floats && i % 8 == 7) {
      for (int m = 0; m < k; ++m) {
        if (m != winner) terms[m].SetFloat(i, -std::numeric_limits<float>::infinity());
      }
      continue;
    }
    if (i % 8 == 1) {
      for (int m = 0; m < k; ++m) {
        if (floats) {
          terms[m].SetFloat(i, -std::abs(static_cast<float>(terms[m].Float(i))));
        } else {
          // One further from zero, so that half the largest is still negative.
          terms[m].SetInt(i, -std::abs(terms[m].Int(i)) - 1);
        }
      }
    }
    if (k == 1) continue;
    // The winner's value beats the others' largest, M: 1.5 M or M / 2 stay inside every dtype's
    // range, and bf16 rounds 1.5 M to within 2^-9 of it, still above M.
    if (floats) {
      double largest = -std::numeric_limits<double>::infinity();
      for (int m = 0; m < k; ++m) {
        if (m != winner) largest = std::max(largest, terms[m].Float(i));
      }
      terms[winner].SetFloat(i, static_cast<float>(largest > 0 ? largest * 1.5 : largest * 0.5));
    } else {
      int64_t largest = std::numeric_limits<int64_t>::min();
      for (int m = 0; m < k; ++m) {
        if (m != winner) largest = std::max(largest, terms[m].Int(i));
      }
      terms[winner].SetInt(i, largest > 0 ? largest + largest / 2 + 1 : largest / 2);
    }
  }
  return terms;
}

// The element-wise max of `terms` as communicator.h defines it, found by comparing values:
// the canonical quiet NaN where any term is a NaN, else the largest term's element, bit for bit,
// +0 counting as larger than -0.
Values ReferenceMax(const std::vector<Values>& terms) {
  Values max = terms[0];
  const bool floats = IsFloatingPoint(max.dtype());
  for (int64_t i = 0; i < max.size(); ++i) {
    bool nan = false;
    for (const Values& t : terms) {
      if (floats && std::isnan(t.Float(i))) {
        nan = true;
      } else if (floats) {
        const double x = t.Float(i), best = max.Float(i);
        if (x > best || (x == best && std::signbit(best) && !std::signbit(x))) {
          std::memcpy(max.at(i), t.at(i), DTypeSize(max.dtype()));
        }
      } else if (t.Int(i) > max.Int(i)) {
        std::memcpy(max.at(i), t.at(i), DTypeSize(max.dtype()));
      }
    }
    if (nan) max.SetFloat(i, kNaN);
  }
  return max;
}

bool GpuRequired() {
  const char* v = std::getenv("WEFT_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

// ASSERT_TRUE(status.ok()), printing the status when it is not.
#define ASSERT_OK(expr)                      \
  do {                                       \
    const absl::Status status_ = (expr);     \
    ASSERT_TRUE(status_.ok()) << status_;    \
  } while (0)

// ---- Fixtures ----

struct Rank {
  int rank;
  Communicator& comm;
  CommunicatorFactory& factory;
  Memory& memory;
};

// Checks the machine can run `ranks` ranks of `backend`: skips when a GPU backend has fewer
// devices than ranks, fails when it has none and WEFT_REQUIRE_GPU=1. Call from SetUp.
void RequireDevices(const Backend& backend, const std::string& name, int ranks) {
  std::string why;
  const int devices = backend.Devices(&why);
  if (devices < 0) return;
  if (devices == 0 && GpuRequired()) {
    GTEST_FAIL() << "WEFT_REQUIRE_GPU=1 but the " << name
                 << " backend finds no usable CUDA device: " << why;
  }
  if (devices < ranks) {
    GTEST_SKIP() << name << " with " << ranks << " ranks needs " << ranks
                 << " CUDA devices (one per rank); this machine has " << devices
                 << (why.empty() ? "" : ": ") << why;
  }
}

// Runs body(rank's factory, memory) on `ranks` threads of one world.
void RunRanks(const Backend& backend, int ranks, absl::Duration timeout,
              const std::function<void(int, CommunicatorFactory&, Memory&)>& body) {
  std::unique_ptr<World> world = backend.NewWorld(ranks, timeout);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Memory> memory = world->NewMemory(r);
      std::unique_ptr<CommunicatorFactory> factory = world->NewFactory(r);
      body(r, *factory, *memory);
    });
  }
  for (auto& t : threads) t.join();
}

// One case per backend, group size and dtype.
class CommunicatorConformanceTest
    : public ::testing::TestWithParam<std::tuple<std::string, int, v1::DType>> {
 protected:
  void SetUp() override { RequireDevices(backend(), backend_name(), n()); }

  const std::string& backend_name() const { return std::get<0>(GetParam()); }
  const Backend& backend() const { return GetBackend(backend_name()); }
  int n() const { return std::get<1>(GetParam()); }
  v1::DType dtype() const { return std::get<2>(GetParam()); }

  // Creates group 1 of all n ranks and runs `body` on each member.
  void RunOnGroup(const std::function<void(Rank&)>& body) {
    RunRanks(backend(), n(), kTimeout, [&](int r, CommunicatorFactory& factory, Memory& memory) {
      auto comm = factory.Create(Group(1, n()));
      ASSERT_TRUE(comm.ok()) << comm.status();
      ASSERT_EQ((*comm)->rank(), r);
      ASSERT_EQ((*comm)->size(), n());
      Rank rank{r, **comm, factory, memory};
      body(rank);
    });
  }
};

// The cases that do not depend on the dtype, or go through several themselves: one per backend
// and group size (instantiated with f32 only).
class GroupConformanceTest : public CommunicatorConformanceTest {};

TEST_P(CommunicatorConformanceTest, AllReduceSumAndAvg) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    struct Case {
      int64_t count;
      ReduceOp op;
    };
    int stream = 0;
    for (const Case& c :
         {Case{1, ReduceOp::kSum}, Case{7, ReduceOp::kSum}, Case{4099, ReduceOp::kSum},
          Case{300001, ReduceOp::kSum}, Case{1031, ReduceOp::kAvg}}) {
      ++stream;
      // avg of integers is an error: GroupConformanceTest.AvgOfIntegersIsInvalid.
      if (c.op == ReduceOp::kAvg && !IsFloatingPoint(dtype())) continue;
      Buffer data(me.memory, Inputs(stream, me.rank, c.count, dtype()));
      ASSERT_OK(me.comm.AllReduce(data.get(), c.count, dtype(), c.op));
      std::vector<Values> terms;
      for (int m = 0; m < k; ++m) terms.push_back(Inputs(stream, m, c.count, dtype()));
      const bool avg = c.op == ReduceOp::kAvg;
      ExpectReduced(data.Read(), terms, avg ? k : 1,
                    backend().Bf16Roundings(
                        avg ? Bf16Reduction::kAllReduceAvg : Bf16Reduction::kAllReduceSum, k),
                    absl::StrCat(avg ? "avg" : "sum", " of ", c.count, " ", DTypeName(dtype()),
                                 ", member ", me.rank));
    }
  });
}

// max of every dtype, bit-exact against ReferenceMax: counts that split evenly over 1 to 4
// members (12) and that do not, the maximum at a different member from element to element,
// negative maxima, +-0, infinities, the integer types' extremes, and NaNs for floats.
TEST_P(CommunicatorConformanceTest, AllReduceMax) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    struct Case {
      int64_t count;
      bool nans;
    };
    int stream = 200;
    for (const Case& c : {Case{1, false}, Case{12, true}, Case{12, false}, Case{7, true},
                          Case{4099, false}, Case{300001, true}}) {
      ++stream;
      const std::vector<Values> terms = MaxInputs(stream, k, c.count, dtype(), c.nans);
      Buffer data(me.memory, terms[me.rank]);
      ASSERT_OK(me.comm.AllReduce(data.get(), c.count, dtype(), ReduceOp::kMax));
      ExpectEqual(data.Read(), ReferenceMax(terms),
                  absl::StrCat("max of ", c.count, " ", DTypeName(dtype()),
                               c.nans ? " with NaNs" : "", ", member ", me.rank, " of ", k));
    }
  });
}

TEST_P(CommunicatorConformanceTest, AllGatherEqualAndUnequalCounts) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    std::vector<int64_t> equal, uneven, with_zero;
    for (int m = 0; m < k; ++m) {
      equal.push_back(257);
      uneven.push_back(m + 3);
      with_zero.push_back(m % 2 == 1 ? 0 : 3 * m + 5);  // members 1 and 3 contribute nothing
    }
    int stream = 10;
    for (const auto& counts : {equal, uneven, with_zero}) {
      ++stream;
      Buffer in(me.memory, Inputs(stream, me.rank, counts[me.rank], dtype()));
      Buffer out(me.memory, Poison(Sum(counts), dtype()));
      ASSERT_OK(me.comm.AllGather(in.get(), out.get(), counts, dtype()));
      Values want(dtype(), 0);
      for (int m = 0; m < k; ++m) want.Append(Inputs(stream, m, counts[m], dtype()));
      ExpectEqual(out.Read(), want,
                  absl::StrCat("all_gather case ", stream, " of ", DTypeName(dtype()),
                               ", member ", me.rank));
    }
  });
}

// In place: `in` is already this member's slot of `out`.
TEST_P(CommunicatorConformanceTest, AllGatherInPlace) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    for (const bool uneven : {false, true}) {
      std::vector<int64_t> counts;
      for (int m = 0; m < k; ++m) counts.push_back(uneven ? m + 1 : 6);
      const int stream = uneven ? 16 : 15;
      Values want(dtype(), 0);
      for (int m = 0; m < k; ++m) want.Append(Inputs(stream, m, counts[m], dtype()));
      const int64_t offset = Offset(counts, me.rank);
      Values start = Poison(Sum(counts), dtype());
      std::memcpy(start.at(offset), want.at(offset), counts[me.rank] * DTypeSize(dtype()));
      Buffer out(me.memory, start);
      ASSERT_OK(me.comm.AllGather(out.at(offset), out.get(), counts, dtype()));
      ExpectEqual(out.Read(), want,
                  absl::StrCat("in-place all_gather of ", DTypeName(dtype()), ", uneven ",
                               uneven, ", member ", me.rank));
    }
  });
}

TEST_P(CommunicatorConformanceTest, ReduceScatterEqualAndUnequalCounts) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    std::vector<int64_t> equal, uneven, with_zero;
    for (int m = 0; m < k; ++m) {
      equal.push_back(129);
      uneven.push_back(2 * m + 1);
      with_zero.push_back(m == 0 ? 0 : m + 2);
    }
    int stream = 20;
    for (const auto& counts : {equal, uneven, with_zero}) {
      ++stream;
      const int64_t mine = counts[me.rank];
      const int64_t offset = Offset(counts, me.rank);
      Buffer in(me.memory, Inputs(stream, me.rank, Sum(counts), dtype()));
      Buffer out(me.memory, Poison(mine, dtype()));
      ASSERT_OK(me.comm.ReduceScatter(in.get(), out.get(), counts, dtype()));
      std::vector<Values> terms;
      for (int m = 0; m < k; ++m) {
        terms.push_back(Inputs(stream, m, Sum(counts), dtype()).Slice(offset, mine));
      }
      ExpectReduced(out.Read(), terms, 1,
                    backend().Bf16Roundings(Bf16Reduction::kReduceScatter, k),
                    absl::StrCat("reduce_scatter case ", stream, " of ", DTypeName(dtype()),
                                 ", member ", me.rank));
    }
  });
}

TEST_P(CommunicatorConformanceTest, AllToAllUnequalCounts) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    // What member `from` sends member `to`: 0, 7, 14 or 21 elements, and rarely what `to` sends
    // back (0 -> 1 sends 14, 1 -> 0 sends none).
    auto count = [](int from, int to) -> int64_t { return ((3 * from + 5 * to + 1) % 4) * 7; };
    auto chunk = [&](int from, int to) {
      return Inputs(100 + from * 8 + to, 0, count(from, to), dtype());
    };
    std::vector<int64_t> send_counts, recv_counts;
    Values in(dtype(), 0);
    for (int j = 0; j < k; ++j) {
      send_counts.push_back(count(me.rank, j));
      recv_counts.push_back(count(j, me.rank));
      in.Append(chunk(me.rank, j));
    }
    Buffer in_buf(me.memory, in);
    Buffer out(me.memory, Poison(Sum(recv_counts), dtype()));
    ASSERT_OK(me.comm.AllToAll(in_buf.get(), send_counts, out.get(), recv_counts, dtype()));
    Values want(dtype(), 0);
    for (int j = 0; j < k; ++j) want.Append(chunk(j, me.rank));
    ExpectEqual(out.Read(), want,
                absl::StrCat("all_to_all of ", DTypeName(dtype()), ", member ", me.rank));
  });
}

TEST_P(CommunicatorConformanceTest, BroadcastFromEveryRoot) {
  RunOnGroup([&](Rank& me) {
    const int64_t count = 1000;
    Buffer data(me.memory, dtype(), count);
    for (int root = 0; root < me.comm.size(); ++root) {
      const Values sent = Inputs(30 + root, root, count, dtype());
      data.Write(me.rank == root ? sent : Poison(count, dtype()));
      ASSERT_OK(me.comm.Broadcast(data.get(), count, dtype(), root));
      ExpectEqual(data.Read(), sent,
                  absl::StrCat("broadcast of ", DTypeName(dtype()), " from ", root, ", member ",
                               me.rank));
    }
    EXPECT_EQ(me.comm.Broadcast(data.get(), count, dtype(), me.comm.size()).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

// Member m sends 100 + 3m elements to m + 1 (mod K). Send may wait for the matching Recv (Gloo,
// NCCL), so the ring is a chain: 0 sends first, everyone else receives first.
TEST_P(CommunicatorConformanceTest, SendRecvRing) {
  if (n() == 1) GTEST_SKIP() << "send and recv need two members";
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    const int next = (me.rank + 1) % k, prev = (me.rank + k - 1) % k;
    auto count = [](int from) -> int64_t { return 100 + 3 * from; };
    Buffer out(me.memory, Inputs(40, me.rank, count(me.rank), dtype()));
    Buffer in(me.memory, Poison(count(prev), dtype()));
    auto send = [&] {
      ASSERT_OK(me.comm.Send(out.get(), count(me.rank), dtype(), next, 40 + me.rank));
    };
    auto recv = [&] { ASSERT_OK(me.comm.Recv(in.get(), count(prev), dtype(), prev, 40 + prev)); };
    if (me.rank == 0) {
      send();
      recv();
    } else {
      recv();
      send();
    }
    ExpectEqual(in.Read(), Inputs(40, prev, count(prev), dtype()),
                absl::StrCat(DTypeName(dtype()), " message from ", prev, " to ", me.rank));
    EXPECT_EQ(me.comm.Send(out.get(), 1, dtype(), me.rank, 0).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(me.comm.Recv(in.get(), 1, dtype(), k, 0).code(), absl::StatusCode::kInvalidArgument);
  });
}

// Every ordered pair (a, b) in the same order on every member, each with its own tag and
// length. Send may wait for the matching Recv, so the two sides of a pair never both send first.
TEST_P(CommunicatorConformanceTest, SendRecvEveryPair) {
  if (n() == 1) GTEST_SKIP() << "send and recv need two members";
  RunOnGroup([&](Rank& me) {
    for (int a = 0; a < me.comm.size(); ++a) {
      for (int b = 0; b < me.comm.size(); ++b) {
        if (a == b || (me.rank != a && me.rank != b)) continue;
        const uint32_t tag = 100 + a * 10 + b;
        const int64_t count = 3 + a + b;
        const Values message = Inputs(static_cast<int>(tag), a, count, dtype());
        if (me.rank == a) {
          Buffer data(me.memory, message);
          ASSERT_OK(me.comm.Send(data.get(), count, dtype(), b, tag));
        } else {
          Buffer data(me.memory, Poison(count, dtype()));
          ASSERT_OK(me.comm.Recv(data.get(), count, dtype(), a, tag));
          ExpectEqual(data.Read(), message,
                      absl::StrCat(DTypeName(dtype()), " message from ", a, " to ", b));
        }
      }
    }
  });
}

// Zero-element ops succeed on every member without touching the buffers, and leave the members
// in step for the next op.
TEST_P(CommunicatorConformanceTest, ZeroLengthOps) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    const Values seven = Fill(dtype(), 1, 7);
    Buffer sentinel(me.memory, seven);
    ASSERT_OK(me.comm.AllReduce(sentinel.get(), 0, dtype(), ReduceOp::kSum));
    ASSERT_OK(me.comm.AllReduce(sentinel.get(), 0, dtype(), ReduceOp::kMax));
    ASSERT_OK(me.comm.Broadcast(sentinel.get(), 0, dtype(), k - 1));
    const std::vector<int64_t> zeros(k, 0);
    ASSERT_OK(me.comm.AllGather(sentinel.get(), sentinel.get(), zeros, dtype()));
    ASSERT_OK(me.comm.ReduceScatter(sentinel.get(), sentinel.get(), zeros, dtype()));
    ASSERT_OK(me.comm.AllToAll(sentinel.get(), zeros, sentinel.get(), zeros, dtype()));
    if (k > 1) {
      const int next = (me.rank + 1) % k, prev = (me.rank + k - 1) % k;
      ASSERT_OK(me.comm.Send(sentinel.get(), 0, dtype(), next, 1));
      ASSERT_OK(me.comm.Recv(sentinel.get(), 0, dtype(), prev, 1));
    }
    ExpectEqual(sentinel.Read(), seven, "buffer of zero-length ops");
    EXPECT_EQ(me.comm.bytes_sent(), 0);
    Buffer data(me.memory, Fill(dtype(), 3, me.rank + 1));
    ASSERT_OK(me.comm.AllReduce(data.get(), 3, dtype(), ReduceOp::kSum));
    ExpectEqual(data.Read(), Fill(dtype(), 3, k * (k + 1) / 2), "all_reduce after zero-length ops");
  });
}

// The check every Gloo-like transport shares (host buffers): member `rank` of a fresh group of
// `size` runs each op once on elements of `dtype` (E bytes each) and bytes_sent() (and its
// factory's) must grow by the closed form of what Gloo's algorithms send (K members, B bytes):
// ring all-reduce 2 (K-1)/K * B for even chunks, ring all-gather everything but the next
// member's chunk, all-to-all and reduce-scatter everything but the own chunk, binomial broadcast
// B per child from every root, send its message; recv and barrier nothing.
void ExpectBytesSentFollowTheAlgorithms(Communicator& comm, const CommunicatorFactory& factory,
                                        int size, int rank, ReduceOp all_reduce_op,
                                        v1::DType dtype) {
  const int k = size, r = rank;
  const int64_t e = DTypeSize(dtype);
  int64_t want = 0;
  auto check = [&](const char* what, int64_t bytes) {
    want += bytes;
    ASSERT_EQ(comm.bytes_sent(), want)
        << what << " of " << DTypeName(dtype) << " on " << k << " ranks, member " << r;
    ASSERT_EQ(factory.bytes_sent(), want) << what;
  };
  // Zero bytes are zero in every dtype; the values do not matter here.
  auto buffer = [&](int64_t count) { return std::vector<char>(count * e); };
  EXPECT_EQ(comm.bytes_sent(), 0);
  // 24 and 300000 elements split into even ring chunks for K = 1..4 and every element size.
  for (int64_t count : {int64_t{24}, int64_t{300000}}) {
    std::vector<char> data = buffer(count);
    ASSERT_OK(comm.AllReduce(data.data(), count, dtype, all_reduce_op));
    check("all_reduce", 2 * (k - 1) * e * count / k);
  }
  std::vector<int64_t> counts;
  for (int m = 0; m < k; ++m) counts.push_back(m + 1);
  std::vector<char> in = buffer(counts[r]), out = buffer(Sum(counts));
  ASSERT_OK(comm.AllGather(in.data(), out.data(), counts, dtype));
  check("all_gather", k == 1 ? 0 : e * (Sum(counts) - counts[(r + 1) % k]));
  std::vector<char> full = buffer(Sum(counts)), mine = buffer(counts[r]);
  ASSERT_OK(comm.ReduceScatter(full.data(), mine.data(), counts, dtype));
  check("reduce_scatter", e * (Sum(counts) - counts[r]));
  // Member r sends r + j + 1 elements to member j.
  std::vector<int64_t> send, recv;
  for (int j = 0; j < k; ++j) {
    send.push_back(r + j + 1);
    recv.push_back(j + r + 1);
  }
  std::vector<char> a2a_in = buffer(Sum(send)), a2a_out = buffer(Sum(recv));
  ASSERT_OK(comm.AllToAll(a2a_in.data(), send, a2a_out.data(), recv, dtype));
  check("all_to_all", e * (Sum(send) - send[r]));
  for (int root = 0; root < k; ++root) {
    std::vector<char> data = buffer(11);
    ASSERT_OK(comm.Broadcast(data.data(), 11, dtype, root));
    // Children in the binomial tree of virtual rank v = (r - root) mod K.
    const int v = (r - root + k) % k;
    const int children[4][4] = {{0}, {1, 0}, {2, 0, 0}, {2, 1, 0, 0}};
    check("broadcast", 11 * e * children[k - 1][v]);
  }
  ASSERT_OK(comm.Barrier());
  check("barrier", 0);
  if (k >= 2) {
    std::vector<char> msg = buffer(5);
    if (r == 0) {
      ASSERT_OK(comm.Send(msg.data(), 5, dtype, 1, 7));
      check("send", 5 * e);
    } else if (r == 1) {
      ASSERT_OK(comm.Recv(msg.data(), 5, dtype, 0, 7));
      check("recv", 0);
    }
  }
}

// bytes_sent() of one call per op against the closed forms in each transport's header (K
// members, B bytes, E per element of the case's dtype): all-reduce 2 (K-1)/K * B for even ring
// chunks (a max at the backend's MaxElementBytes), all-gather everything but the next member's
// piece, reduce-scatter and all-to-all everything but the own piece, send its message, recv and
// barrier nothing; broadcast per backend (Gloo's binomial tree, NCCL's chain). The factory's
// total follows. For host backends, also the check every Gloo-like transport shares.
TEST_P(CommunicatorConformanceTest, BytesSentFollowTheDocumentedFormulas) {
  const int64_t e = DTypeSize(dtype());
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size(), r = me.rank;
    int64_t want = 0;
    auto expect = [&](const char* op, int64_t bytes) {
      want += bytes;
      ASSERT_EQ(me.comm.bytes_sent(), want)
          << op << " of " << DTypeName(dtype()) << " on " << k << " ranks, member " << r;
      ASSERT_EQ(me.factory.bytes_sent(), want) << op << " (factory)";
    };
    ASSERT_EQ(me.comm.bytes_sent(), 0);
    {
      Buffer data(me.memory, Inputs(50, r, 24, dtype()));
      ASSERT_OK(me.comm.AllReduce(data.get(), 24, dtype(), ReduceOp::kSum));
      expect("all_reduce", 2 * (k - 1) * 24 * e / k);
      ASSERT_OK(me.comm.AllReduce(data.get(), 24, dtype(), ReduceOp::kMax));
      expect("all_reduce max", 2 * (k - 1) * 24 * backend().MaxElementBytes(dtype()) / k);
    }
    std::vector<int64_t> equal(k, 5), uneven;
    for (int m = 0; m < k; ++m) uneven.push_back(m + 1);
    for (const auto& counts : {equal, uneven}) {
      Buffer in(me.memory, Inputs(51, r, counts[r], dtype()));
      Buffer out(me.memory, Poison(Sum(counts), dtype()));
      ASSERT_OK(me.comm.AllGather(in.get(), out.get(), counts, dtype()));
      expect("all_gather", k == 1 ? 0 : e * (Sum(counts) - counts[(r + 1) % k]));
      Buffer full(me.memory, Inputs(52, r, Sum(counts), dtype()));
      Buffer piece(me.memory, Poison(counts[r], dtype()));
      ASSERT_OK(me.comm.ReduceScatter(full.get(), piece.get(), counts, dtype()));
      expect("reduce_scatter", e * (Sum(counts) - counts[r]));
    }
    {
      // Member r sends r + j + 1 elements to member j.
      std::vector<int64_t> send, recv;
      for (int j = 0; j < k; ++j) {
        send.push_back(r + j + 1);
        recv.push_back(j + r + 1);
      }
      Buffer in(me.memory, Inputs(53, r, Sum(send), dtype()));
      Buffer out(me.memory, Poison(Sum(recv), dtype()));
      ASSERT_OK(me.comm.AllToAll(in.get(), send, out.get(), recv, dtype()));
      expect("all_to_all", e * (Sum(send) - send[r]));
    }
    {
      const int root = k - 1;
      Buffer data(me.memory, Inputs(54, root, 11, dtype()));
      ASSERT_OK(me.comm.Broadcast(data.get(), 11, dtype(), root));
      expect("broadcast", backend().BroadcastBytes(11, e, r, k, root));
    }
    ASSERT_OK(me.comm.Barrier());
    expect("barrier", 0);
    if (k >= 2 && r <= 1) {
      Buffer msg(me.memory, Inputs(55, 0, 5, dtype()));
      if (r == 0) {
        ASSERT_OK(me.comm.Send(msg.get(), 5, dtype(), 1, 7));
        expect("send", 5 * e);
      } else {
        ASSERT_OK(me.comm.Recv(msg.get(), 5, dtype(), 0, 7));
        expect("recv", 0);
      }
    }
  });
  if (backend().host_memory()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      if (op == ReduceOp::kAvg && !IsFloatingPoint(dtype())) continue;
      RunRanks(backend(), n(), kTimeout, [&](int r, CommunicatorFactory& factory, Memory&) {
        auto comm = factory.Create(Group(2, n()));
        ASSERT_TRUE(comm.ok()) << comm.status();
        ExpectBytesSentFollowTheAlgorithms(**comm, factory, n(), r, op, dtype());
      });
    }
  }
}

// A bad argument is INVALID_ARGUMENT naming the group, caught before any traffic: the
// communicator is still usable.
TEST_P(GroupConformanceTest, BadCountsLeaveTheCommunicatorUsable) {
  RunOnGroup([&](Rank& me) {
    ASSERT_TRUE(me.comm.Barrier().ok());
    const std::vector<int64_t> wrong(me.comm.size() + 1, 1);
    Buffer buf(me.memory, v1::F32, 8);
    absl::Status s = me.comm.AllGather(buf.get(), buf.get(), wrong, v1::F32);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(GroupNameOf(1, me.comm.size())), absl::string_view::npos) << s;
    ASSERT_TRUE(me.comm.Barrier().ok());
    Buffer data(me.memory, std::vector<float>(2, 1.0f));
    ASSERT_TRUE(me.comm.AllReduce(data.get(), 2, v1::F32, ReduceOp::kSum).ok());
    ExpectEqual(data.Read(), std::vector<float>(2, static_cast<float>(me.comm.size())),
                "all_reduce after a bad call");
  });
}

// avg of an integer type is INVALID_ARGUMENT naming the op, the group and the dtype, on every
// member before any traffic (nothing is counted); an integer sum works afterwards.
TEST_P(GroupConformanceTest, AvgOfIntegersIsInvalid) {
  RunOnGroup([&](Rank& me) {
    for (v1::DType dtype : {v1::I32, v1::I64}) {
      Buffer data(me.memory, Fill(dtype, 4, me.rank + 1));
      absl::Status s = me.comm.AllReduce(data.get(), 4, dtype, ReduceOp::kAvg);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      for (const std::string& part :
           {std::string("all_reduce"), std::string("avg of ") + std::string(DTypeName(dtype)),
            GroupNameOf(1, me.comm.size())}) {
        EXPECT_NE(s.message().find(part), absl::string_view::npos) << part << ": " << s;
      }
      ExpectEqual(data.Read(), Fill(dtype, 4, me.rank + 1), "buffer of the refused avg");
      EXPECT_EQ(me.comm.bytes_sent(), 0);
    }
    ASSERT_OK(me.comm.Barrier());
    const int k = me.comm.size();
    Buffer data(me.memory, Fill(v1::I64, 4, me.rank + 1));
    ASSERT_OK(me.comm.AllReduce(data.get(), 4, v1::I64, ReduceOp::kSum));
    ExpectEqual(data.Read(), Fill(v1::I64, 4, k * (k + 1) / 2), "i64 sum after the refused avg");
  });
}

// A dtype outside weft.v1.DType (a proto3 enum holds any int) is INVALID_ARGUMENT naming the
// value, the op and the group, for every op, before any traffic.
TEST_P(GroupConformanceTest, UnknownDTypeIsInvalid) {
  const v1::DType bad = static_cast<v1::DType>(7);
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    Buffer buf(me.memory, v1::I64, 4 * k);
    const std::vector<int64_t> ones(k, 1);
    auto expect_invalid = [&](const char* op, const absl::Status& s) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << op << ": " << s;
      for (const std::string& part :
           {std::string(op), std::string("unknown dtype 7"), GroupNameOf(1, k)}) {
        EXPECT_NE(s.message().find(part), absl::string_view::npos) << part << ": " << s;
      }
    };
    expect_invalid("all_reduce", me.comm.AllReduce(buf.get(), 1, bad, ReduceOp::kSum));
    expect_invalid("all_gather", me.comm.AllGather(buf.get(), buf.get(), ones, bad));
    expect_invalid("reduce_scatter", me.comm.ReduceScatter(buf.get(), buf.get(), ones, bad));
    expect_invalid("all_to_all", me.comm.AllToAll(buf.get(), ones, buf.get(), ones, bad));
    expect_invalid("broadcast", me.comm.Broadcast(buf.get(), 1, bad, 0));
    if (k > 1) {
      const int next = (me.rank + 1) % k, prev = (me.rank + k - 1) % k;
      expect_invalid("send", me.comm.Send(buf.get(), 1, bad, next, 3));
      expect_invalid("recv", me.comm.Recv(buf.get(), 1, bad, prev, 3));
    }
    EXPECT_EQ(me.comm.bytes_sent(), 0);
    Buffer data(me.memory, Fill(v1::I32, 2, 1));
    ASSERT_OK(me.comm.AllReduce(data.get(), 2, v1::I32, ReduceOp::kSum));
    ExpectEqual(data.Read(), Fill(v1::I32, 2, k), "i32 sum after the unknown dtypes");
  });
}

// Members are numbered in the group's order, not by global rank: group [n-1, ..., 0].
TEST_P(GroupConformanceTest, MembersInGroupOrder) {
  v1::CommGroup reversed;
  reversed.set_id(5);
  reversed.set_mesh_dims("dp");
  for (int r = n() - 1; r >= 0; --r) reversed.add_ranks(r);
  RunRanks(backend(), n(), kTimeout, [&](int r, CommunicatorFactory& factory, Memory& memory) {
    auto comm = factory.Create(reversed);
    ASSERT_TRUE(comm.ok()) << comm.status();
    const int me = (*comm)->rank();
    EXPECT_EQ(me, n() - 1 - r);
    const std::vector<int64_t> counts(n(), 3);
    Buffer in(memory, Inputs(70, me, 3));
    Buffer out(memory, Poison(3 * n()));
    ASSERT_TRUE((*comm)->AllGather(in.get(), out.get(), counts, v1::F32).ok());
    Values want(v1::F32, 0);
    for (int m = 0; m < n(); ++m) want.Append(Inputs(70, m, 3));
    ExpectEqual(out.Read(), want, absl::StrCat("all_gather in group order, rank ", r));
  });
}

// No member leaves a barrier before every member has entered it.
TEST_P(GroupConformanceTest, Barrier) {
  std::atomic<int> entered[3] = {};
  RunOnGroup([&](Rank& me) {
    for (int round = 0; round < 3; ++round) {
      entered[round].fetch_add(1);
      ASSERT_TRUE(me.comm.Barrier().ok());
      EXPECT_EQ(entered[round].load(), me.comm.size()) << "round " << round;
    }
  });
}

std::string CaseName(
    const ::testing::TestParamInfo<std::tuple<std::string, int, v1::DType>>& info) {
  return absl::StrCat(std::get<0>(info.param), "_", std::get<1>(info.param), "ranks_",
                      DTypeName(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(BackendNames()),
                                            ::testing::Values(1, 2, 3, 4),
                                            ::testing::ValuesIn(kDTypes)),
                         CaseName);

INSTANTIATE_TEST_SUITE_P(
    Backends, GroupConformanceTest,
    ::testing::Combine(::testing::ValuesIn(BackendNames()), ::testing::Values(1, 2, 3, 4),
                       ::testing::Values(v1::F32)),
    [](const ::testing::TestParamInfo<std::tuple<std::string, int, v1::DType>>& info) {
      return absl::StrCat(std::get<0>(info.param), "_", std::get<1>(info.param), "ranks");
    });

// ---- Failures: a member that never comes is a timeout naming the group, never a hang ----

class CommunicatorTimeoutTest : public ::testing::TestWithParam<std::string> {
 protected:
  const Backend& backend() const { return GetBackend(GetParam()); }
};

// Both members connect, only member 0 calls all_reduce: it fails after the timeout, and the
// communicator refuses further work at once.
TEST_P(CommunicatorTimeoutTest, SilentPeerTimesOutAndBreaksCommunicator) {
  RequireDevices(backend(), GetParam(), 2);
  if (IsSkipped() || HasFatalFailure()) return;
  absl::Notification done;
  auto member = [&](int r, CommunicatorFactory& factory, Memory& memory) {
    auto comm = factory.Create(Group(1, 2));
    if (!comm.ok()) done.Notify();
    ASSERT_TRUE(comm.ok()) << comm.status();
    if (r == 1) {
      done.WaitForNotification();
      return;
    }
    Buffer data(memory, Inputs(60, 0, 4));
    const auto start = std::chrono::steady_clock::now();
    absl::Status s = (*comm)->AllReduce(data.get(), 4, v1::F32, ReduceOp::kSum);
    const auto failed = std::chrono::steady_clock::now();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("all_reduce"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(GroupNameOf(1, 2)), absl::string_view::npos) << s;
    // NCCL puts the count in between: "all_reduce of 4 f32 elements on".
    if (GetParam() != "nccl") {
      EXPECT_NE(s.message().find("all_reduce on " + GroupNameOf(1, 2)), absl::string_view::npos)
          << s;
    }
    EXPECT_LT(failed - start, std::chrono::seconds(30)) << s;
    absl::Status again = (*comm)->Barrier();
    EXPECT_EQ(again.code(), backend().broken_code()) << again;
    EXPECT_NE(again.message().find(GroupNameOf(1, 2)), absl::string_view::npos) << again;
    EXPECT_LT(std::chrono::steady_clock::now() - failed, std::chrono::milliseconds(500))
        << "a broken communicator must fail at once: " << again;
    done.Notify();
  };
  RunRanks(backend(), 2, absl::Seconds(1), member);
}

// Only one member of a 2-rank group calls Create: it fails after the timeout, naming the group.
// Member 0 (for NCCL: makes the unique id, then waits in ncclCommInitRankConfig) and member 1
// (waits for the id in the store).
TEST_P(CommunicatorTimeoutTest, MissingMemberFailsCreate) {
  RequireDevices(backend(), GetParam(), 1);
  if (IsSkipped() || HasFatalFailure()) return;
  for (int present : {0, 1}) {
    std::unique_ptr<World> world = backend().NewWorld(2, absl::Seconds(1));
    std::thread member([&] {
      std::unique_ptr<Memory> memory = world->NewMemory(present);
      std::unique_ptr<CommunicatorFactory> factory = world->NewFactory(present);
      const auto start = std::chrono::steady_clock::now();
      auto comm = factory->Create(Group(4, 2));
      EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded)
          << "member " << present << ": " << comm.status();
      EXPECT_NE(comm.status().message().find(GroupNameOf(4, 2)), std::string::npos)
          << comm.status();
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
    });
    member.join();
  }
}

#ifdef WEFT_CUDA
// NcclCommunicatorFactory::Cancel (a cancelled job) stops a collective that waits for a peer
// that will not come: CANCELLED at once, long before the 60 s timeout, the communicator aborted.
TEST(NcclCancelTest, CancelStopsAWaitingCollective) {
  RequireDevices(GetBackend("nccl"), "nccl", 2);
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
  absl::Notification created, done;
  std::atomic<NcclCommunicatorFactory*> waiting{nullptr};
  RunRanks(GetBackend("nccl"), 2, absl::Seconds(60),
           [&](int r, CommunicatorFactory& factory, Memory& memory) {
             auto comm = factory.Create(Group(1, 2));
             ASSERT_TRUE(comm.ok()) << comm.status();
             if (r == 1) {
               done.WaitForNotification();
               return;
             }
             waiting = dynamic_cast<NcclCommunicatorFactory*>(&factory);
             ASSERT_NE(waiting.load(), nullptr);
             std::thread canceller([&] {
               absl::SleepFor(absl::Milliseconds(300));
               waiting.load()->Cancel();
             });
             Buffer data(memory, Inputs(61, 0, 4));
             const auto start = std::chrono::steady_clock::now();
             absl::Status s = (*comm)->AllReduce(data.get(), 4, v1::F32, ReduceOp::kSum);
             canceller.join();
             EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
             EXPECT_NE(s.message().find(GroupNameOf(1, 2)), absl::string_view::npos) << s;
             EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10)) << s;
             EXPECT_EQ((*comm)->Barrier().code(), absl::StatusCode::kFailedPrecondition);
             done.Notify();
           });
}
#endif

INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorTimeoutTest, ::testing::ValuesIn(BackendNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace weft
