// Conformance of every Communicator transport compiled into this binary: "local" (in-process),
// "gloo" (TCP on 127.0.0.1, rendezvous through Gloo's HashStore) and, in a --config=cuda build,
// "nccl" (rank r on CUDA device r % device count). Each case runs 1 to 4 ranks as threads of
// this process, in the backend's memory space (host vectors, or cudaMalloc'd device buffers).
//
// Inputs are random non-zero floats, seeded per member, so every thread can rebuild any member's
// input; outputs are poisoned with NaN before each call; expected values are computed here in
// float64, independently of the transports. Sums are compared with a tolerance relative to the
// sum of magnitudes; copies must be exact.
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

// ---- Memory spaces ----

// Buffers where one rank's communicator reads and writes them. Used from that rank's thread.
class Memory {
 public:
  virtual ~Memory() = default;
  // At least one float, so that empty buffers still have a valid address.
  virtual float* Allocate(size_t n) = 0;
  virtual void Free(float* p) = 0;
  virtual void Write(float* to, const std::vector<float>& values) = 0;
  virtual std::vector<float> Read(const float* from, size_t n) = 0;
};

class HostMemory : public Memory {
 public:
  float* Allocate(size_t n) override { return new float[std::max<size_t>(n, 1)]; }
  void Free(float* p) override { delete[] p; }
  void Write(float* to, const std::vector<float>& values) override {
    std::copy(values.begin(), values.end(), to);
  }
  std::vector<float> Read(const float* from, size_t n) override {
    return std::vector<float>(from, from + n);
  }
};

#ifdef WEFT_CUDA
// cudaMalloc'd buffers on one device. cudaMemcpy is synchronous, and the communicators' calls
// block until their stream is done, so no further synchronization is needed.
class CudaMemory : public Memory {
 public:
  explicit CudaMemory(int device) : device_(device) {}
  float* Allocate(size_t n) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float));
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return static_cast<float*>(p);
  }
  void Free(float* p) override {
    cudaSetDevice(device_);
    cudaFree(p);
  }
  void Write(float* to, const std::vector<float>& values) override {
    cudaSetDevice(device_);
    const cudaError_t e =
        cudaMemcpy(to, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice);
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  }
  std::vector<float> Read(const float* from, size_t n) override {
    cudaSetDevice(device_);
    std::vector<float> values(n);
    const cudaError_t e =
        cudaMemcpy(values.data(), from, n * sizeof(float), cudaMemcpyDeviceToHost);
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return values;
  }

 private:
  const int device_;
};
#endif

// n floats in a rank's memory space, freed on destruction.
class Buffer {
 public:
  Buffer(Memory& memory, size_t n) : memory_(memory), size_(n), data_(memory.Allocate(n)) {}
  Buffer(Memory& memory, const std::vector<float>& values) : Buffer(memory, values.size()) {
    Write(values);
  }
  ~Buffer() { memory_.Free(data_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  float* get() const { return data_; }
  void Write(const std::vector<float>& values) {
    ASSERT_EQ(values.size(), size_);
    memory_.Write(data_, values);
  }
  std::vector<float> Read() const { return memory_.Read(data_, size_); }

 private:
  Memory& memory_;
  const size_t size_;
  float* const data_;
};

// ---- Backends ----

// The ranks of one run: what they share (a store, a LocalWorld) and what each one gets.
class World {
 public:
  virtual ~World() = default;
  virtual std::unique_ptr<CommunicatorFactory> NewFactory(int rank) = 0;
  virtual std::unique_ptr<Memory> NewMemory(int rank) = 0;
};

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
  // Bytes member `rank` of `size` sends in a broadcast of `count` floats from `root`: the one op
  // whose algorithm differs between the transports.
  virtual int64_t BroadcastBytes(int64_t count, int rank, int size, int root) const = 0;
};

// Gloo's binomial tree (and LocalCommunicator, which counts as Gloo): virtual rank v = rank -
// root sends the buffer to v + 2^i for every 2^i > v with v + 2^i < size.
int64_t BinomialBroadcastBytes(int64_t count, int rank, int size, int root) {
  const int v = (rank - root + size) % size;
  int children = 0;
  for (int step = 1; step < size; step *= 2) {
    if (step > v && v + step < size) ++children;
  }
  return 4 * count * children;
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
  int64_t BroadcastBytes(int64_t count, int rank, int size, int root) const override {
    return BinomialBroadcastBytes(count, rank, size, root);
  }
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
  int64_t BroadcastBytes(int64_t count, int rank, int size, int root) const override {
    return BinomialBroadcastBytes(count, rank, size, root);
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
  int64_t BroadcastBytes(int64_t count, int rank, int size, int root) const override {
    if (size == 1) return 0;
    return rank == (root + size - 1) % size ? 0 : 4 * count;
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

// n random floats uniform in +-[0.05, 2]: never zero, so a missing contribution always shows.
// The same (stream, member) gives the same values in every thread of a run; runs differ
// (TestSeed).
std::vector<float> Inputs(int stream, int member, int64_t n) {
  std::mt19937_64 gen(TestSeed() ^ (static_cast<uint64_t>(stream) * 1000003 + member));
  std::uniform_real_distribution<float> magnitude(0.05f, 2.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> v(n);
  for (float& x : v) x = negative(gen) ? -magnitude(gen) : magnitude(gen);
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

// got[i] within 1e-6 of the magnitude of the terms of want[i] (float32 rounding of a sum of up
// to four terms, in any order), plus 1e-7. NaN (a poisoned output never written) always fails.
void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                const std::vector<double>& magnitude, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tolerance = 1e-6 * magnitude[i] + 1e-7;
    ASSERT_TRUE(std::abs(got[i] - want[i]) <= tolerance)
        << what << ": element " << i << " is " << got[i] << ", want " << want[i] << " +- "
        << tolerance;
  }
}

// Copies must be exact.
void ExpectEqual(const std::vector<float>& got, const std::vector<float>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << ": element " << i;
  }
}

std::vector<float> Poison(int64_t n) { return std::vector<float>(n, kNaN); }

bool GpuRequired() {
  const char* v = std::getenv("WEFT_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

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

class CommunicatorConformanceTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {
 protected:
  void SetUp() override { RequireDevices(backend(), backend_name(), n()); }

  const std::string& backend_name() const { return std::get<0>(GetParam()); }
  const Backend& backend() const { return GetBackend(backend_name()); }
  int n() const { return std::get<1>(GetParam()); }

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
      Buffer data(me.memory, Inputs(stream, me.rank, c.count));
      ASSERT_TRUE(me.comm.AllReduce(data.get(), c.count, c.op).ok());
      std::vector<double> want(c.count, 0.0), magnitude(c.count, 0.0);
      for (int m = 0; m < k; ++m) {
        const std::vector<float> in = Inputs(stream, m, c.count);
        for (int64_t i = 0; i < c.count; ++i) {
          want[i] += in[i];
          magnitude[i] += std::abs(in[i]);
        }
      }
      if (c.op == ReduceOp::kAvg) {
        for (int64_t i = 0; i < c.count; ++i) want[i] /= k;
      }
      ExpectNear(data.Read(), want, magnitude,
                 absl::StrCat(c.op == ReduceOp::kAvg ? "avg" : "sum", " of ", c.count,
                              " floats, member ", me.rank));
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
      Buffer in(me.memory, Inputs(stream, me.rank, counts[me.rank]));
      Buffer out(me.memory, Poison(Sum(counts)));
      ASSERT_TRUE(me.comm.AllGather(in.get(), out.get(), counts).ok());
      std::vector<float> want;
      for (int m = 0; m < k; ++m) {
        const std::vector<float> piece = Inputs(stream, m, counts[m]);
        want.insert(want.end(), piece.begin(), piece.end());
      }
      ExpectEqual(out.Read(), want, absl::StrCat("all_gather case ", stream, ", member ", me.rank));
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
      std::vector<float> want;
      for (int m = 0; m < k; ++m) {
        const std::vector<float> piece = Inputs(stream, m, counts[m]);
        want.insert(want.end(), piece.begin(), piece.end());
      }
      const int64_t offset = Offset(counts, me.rank);
      std::vector<float> start = Poison(Sum(counts));
      std::copy(want.begin() + offset, want.begin() + offset + counts[me.rank],
                start.begin() + offset);
      Buffer out(me.memory, start);
      ASSERT_TRUE(me.comm.AllGather(out.get() + offset, out.get(), counts).ok());
      ExpectEqual(out.Read(), want,
                  absl::StrCat("in-place all_gather, uneven ", uneven, ", member ", me.rank));
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
      Buffer in(me.memory, Inputs(stream, me.rank, Sum(counts)));
      Buffer out(me.memory, Poison(mine));
      ASSERT_TRUE(me.comm.ReduceScatter(in.get(), out.get(), counts).ok());
      std::vector<double> want(mine, 0.0), magnitude(mine, 0.0);
      for (int m = 0; m < k; ++m) {
        const std::vector<float> theirs = Inputs(stream, m, Sum(counts));
        for (int64_t i = 0; i < mine; ++i) {
          want[i] += theirs[offset + i];
          magnitude[i] += std::abs(theirs[offset + i]);
        }
      }
      ExpectNear(out.Read(), want, magnitude,
                 absl::StrCat("reduce_scatter case ", stream, ", member ", me.rank));
    }
  });
}

TEST_P(CommunicatorConformanceTest, AllToAllUnequalCounts) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    // What member `from` sends member `to`: 0, 7, 14 or 21 floats, and rarely what `to` sends
    // back (0 -> 1 sends 14, 1 -> 0 sends none).
    auto count = [](int from, int to) -> int64_t { return ((3 * from + 5 * to + 1) % 4) * 7; };
    auto chunk = [&](int from, int to) { return Inputs(100 + from * 8 + to, 0, count(from, to)); };
    std::vector<int64_t> send_counts, recv_counts;
    std::vector<float> in;
    for (int j = 0; j < k; ++j) {
      send_counts.push_back(count(me.rank, j));
      recv_counts.push_back(count(j, me.rank));
      const std::vector<float> c = chunk(me.rank, j);
      in.insert(in.end(), c.begin(), c.end());
    }
    Buffer in_buf(me.memory, in);
    Buffer out(me.memory, Poison(Sum(recv_counts)));
    ASSERT_TRUE(me.comm.AllToAll(in_buf.get(), send_counts, out.get(), recv_counts).ok());
    std::vector<float> want;
    for (int j = 0; j < k; ++j) {
      const std::vector<float> c = chunk(j, me.rank);
      want.insert(want.end(), c.begin(), c.end());
    }
    ExpectEqual(out.Read(), want, absl::StrCat("all_to_all, member ", me.rank));
  });
}

TEST_P(CommunicatorConformanceTest, BroadcastFromEveryRoot) {
  RunOnGroup([&](Rank& me) {
    const int64_t count = 1000;
    Buffer data(me.memory, count);
    for (int root = 0; root < me.comm.size(); ++root) {
      const std::vector<float> sent = Inputs(30 + root, root, count);
      data.Write(me.rank == root ? sent : Poison(count));
      ASSERT_TRUE(me.comm.Broadcast(data.get(), count, root).ok());
      ExpectEqual(data.Read(), sent, absl::StrCat("broadcast from ", root, ", member ", me.rank));
    }
    EXPECT_EQ(me.comm.Broadcast(data.get(), count, me.comm.size()).code(),
              absl::StatusCode::kInvalidArgument);
  });
}

// Member m sends 100 + 3m floats to m + 1 (mod K). Send may wait for the matching Recv (Gloo,
// NCCL), so the ring is a chain: 0 sends first, everyone else receives first.
TEST_P(CommunicatorConformanceTest, SendRecvRing) {
  if (n() == 1) GTEST_SKIP() << "send and recv need two members";
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    const int next = (me.rank + 1) % k, prev = (me.rank + k - 1) % k;
    auto count = [](int from) -> int64_t { return 100 + 3 * from; };
    const std::vector<float> mine = Inputs(40, me.rank, count(me.rank));
    Buffer out(me.memory, mine);
    Buffer in(me.memory, Poison(count(prev)));
    auto send = [&] {
      ASSERT_TRUE(me.comm.Send(out.get(), count(me.rank), next, 40 + me.rank).ok());
    };
    auto recv = [&] { ASSERT_TRUE(me.comm.Recv(in.get(), count(prev), prev, 40 + prev).ok()); };
    if (me.rank == 0) {
      send();
      recv();
    } else {
      recv();
      send();
    }
    ExpectEqual(in.Read(), Inputs(40, prev, count(prev)),
                absl::StrCat("message from ", prev, " to ", me.rank));
    EXPECT_EQ(me.comm.Send(out.get(), 1, me.rank, 0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(me.comm.Recv(in.get(), 1, k, 0).code(), absl::StatusCode::kInvalidArgument);
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
        const std::vector<float> message = Inputs(static_cast<int>(tag), a, count);
        if (me.rank == a) {
          Buffer data(me.memory, message);
          ASSERT_TRUE(me.comm.Send(data.get(), count, b, tag).ok());
        } else {
          Buffer data(me.memory, Poison(count));
          ASSERT_TRUE(me.comm.Recv(data.get(), count, a, tag).ok());
          ExpectEqual(data.Read(), message, absl::StrCat("message from ", a, " to ", b));
        }
      }
    }
  });
}

// A bad argument is INVALID_ARGUMENT naming the group, caught before any traffic: the
// communicator is still usable.
TEST_P(CommunicatorConformanceTest, BadCountsLeaveTheCommunicatorUsable) {
  RunOnGroup([&](Rank& me) {
    ASSERT_TRUE(me.comm.Barrier().ok());
    const std::vector<int64_t> wrong(me.comm.size() + 1, 1);
    Buffer buf(me.memory, 8);
    absl::Status s = me.comm.AllGather(buf.get(), buf.get(), wrong);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(GroupNameOf(1, me.comm.size())), absl::string_view::npos) << s;
    ASSERT_TRUE(me.comm.Barrier().ok());
    Buffer data(me.memory, std::vector<float>(2, 1.0f));
    ASSERT_TRUE(me.comm.AllReduce(data.get(), 2, ReduceOp::kSum).ok());
    ExpectEqual(data.Read(), std::vector<float>(2, static_cast<float>(me.comm.size())),
                "all_reduce after a bad call");
  });
}

// Members are numbered in the group's order, not by global rank: group [n-1, ..., 0].
TEST_P(CommunicatorConformanceTest, MembersInGroupOrder) {
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
    ASSERT_TRUE((*comm)->AllGather(in.get(), out.get(), counts).ok());
    std::vector<float> want;
    for (int m = 0; m < n(); ++m) {
      const std::vector<float> piece = Inputs(70, m, 3);
      want.insert(want.end(), piece.begin(), piece.end());
    }
    ExpectEqual(out.Read(), want, absl::StrCat("all_gather in group order, rank ", r));
  });
}

// No member leaves a barrier before every member has entered it.
TEST_P(CommunicatorConformanceTest, Barrier) {
  std::atomic<int> entered[3] = {};
  RunOnGroup([&](Rank& me) {
    for (int round = 0; round < 3; ++round) {
      entered[round].fetch_add(1);
      ASSERT_TRUE(me.comm.Barrier().ok());
      EXPECT_EQ(entered[round].load(), me.comm.size()) << "round " << round;
    }
  });
}

// Zero-element ops succeed on every member without touching the buffers, and leave the members
// in step for the next op.
TEST_P(CommunicatorConformanceTest, ZeroLengthOps) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size();
    Buffer sentinel(me.memory, std::vector<float>{7.0f});
    ASSERT_TRUE(me.comm.AllReduce(sentinel.get(), 0, ReduceOp::kSum).ok());
    ASSERT_TRUE(me.comm.Broadcast(sentinel.get(), 0, k - 1).ok());
    const std::vector<int64_t> zeros(k, 0);
    ASSERT_TRUE(me.comm.AllGather(sentinel.get(), sentinel.get(), zeros).ok());
    ASSERT_TRUE(me.comm.ReduceScatter(sentinel.get(), sentinel.get(), zeros).ok());
    if (k > 1) {
      const int next = (me.rank + 1) % k, prev = (me.rank + k - 1) % k;
      ASSERT_TRUE(me.comm.Send(sentinel.get(), 0, next, 1).ok());
      ASSERT_TRUE(me.comm.Recv(sentinel.get(), 0, prev, 1).ok());
    }
    ExpectEqual(sentinel.Read(), {7.0f}, "buffer of zero-length ops");
    EXPECT_EQ(me.comm.bytes_sent(), 0);
    Buffer data(me.memory, std::vector<float>(3, static_cast<float>(me.rank + 1)));
    ASSERT_TRUE(me.comm.AllReduce(data.get(), 3, ReduceOp::kSum).ok());
    const float want = static_cast<float>(k * (k + 1) / 2);
    ExpectEqual(data.Read(), std::vector<float>(3, want), "all_reduce after zero-length ops");
  });
}

// The check every Gloo-like transport shares (host buffers): member `rank` of a fresh group of
// `size` runs each op once and bytes_sent() (and its factory's) must grow by the closed form of
// what Gloo's algorithms send (K members, B bytes): ring all-reduce 2 (K-1)/K * B for even
// chunks, ring all-gather everything but the next member's chunk, all-to-all and reduce-scatter
// everything but the own chunk, binomial broadcast B per child from every root, send its
// message; recv and barrier nothing.
void ExpectBytesSentFollowTheAlgorithms(Communicator& comm, const CommunicatorFactory& factory,
                                        int size, int rank, ReduceOp all_reduce_op) {
  const int k = size, r = rank;
  int64_t want = 0;
  auto check = [&](const char* what, int64_t bytes) {
    want += bytes;
    ASSERT_EQ(comm.bytes_sent(), want) << what << " on " << k << " ranks, member " << r;
    ASSERT_EQ(factory.bytes_sent(), want) << what;
  };
  EXPECT_EQ(comm.bytes_sent(), 0);
  // 24 and 300000 floats split into even ring chunks for K = 1..4.
  for (int64_t count : {int64_t{24}, int64_t{300000}}) {
    std::vector<float> data(count, 1.0f);
    ASSERT_TRUE(comm.AllReduce(data.data(), count, all_reduce_op).ok());
    check("all_reduce", 2 * (k - 1) * 4 * count / k);
  }
  std::vector<int64_t> counts;
  for (int m = 0; m < k; ++m) counts.push_back(m + 1);
  std::vector<float> in(counts[r], 1.0f), out(Sum(counts));
  ASSERT_TRUE(comm.AllGather(in.data(), out.data(), counts).ok());
  check("all_gather", k == 1 ? 0 : 4 * (Sum(counts) - counts[(r + 1) % k]));
  std::vector<float> full(Sum(counts), 1.0f), mine(counts[r]);
  ASSERT_TRUE(comm.ReduceScatter(full.data(), mine.data(), counts).ok());
  check("reduce_scatter", 4 * (Sum(counts) - counts[r]));
  // Member r sends r + j + 1 floats to member j.
  std::vector<int64_t> send, recv;
  for (int j = 0; j < k; ++j) {
    send.push_back(r + j + 1);
    recv.push_back(j + r + 1);
  }
  std::vector<float> a2a_in(Sum(send), 1.0f), a2a_out(Sum(recv));
  ASSERT_TRUE(comm.AllToAll(a2a_in.data(), send, a2a_out.data(), recv).ok());
  check("all_to_all", 4 * (Sum(send) - send[r]));
  for (int root = 0; root < k; ++root) {
    std::vector<float> data(11, 1.0f);
    ASSERT_TRUE(comm.Broadcast(data.data(), data.size(), root).ok());
    // Children in the binomial tree of virtual rank v = (r - root) mod K.
    const int v = (r - root + k) % k;
    const int children[4][4] = {{0}, {1, 0}, {2, 0, 0}, {2, 1, 0, 0}};
    check("broadcast", 44 * children[k - 1][v]);
  }
  ASSERT_TRUE(comm.Barrier().ok());
  check("barrier", 0);
  if (k >= 2) {
    std::vector<float> msg(5, 1.0f);
    if (r == 0) {
      ASSERT_TRUE(comm.Send(msg.data(), msg.size(), 1, 7).ok());
      check("send", 20);
    } else if (r == 1) {
      ASSERT_TRUE(comm.Recv(msg.data(), msg.size(), 0, 7).ok());
      check("recv", 0);
    }
  }
}


// bytes_sent() of one call per op against the closed forms in each transport's header (K
// members, B bytes): all-reduce 2 (K-1)/K * B for even ring chunks, all-gather everything but
// the next member's piece, reduce-scatter and all-to-all everything but the own piece, send its
// message, recv and barrier nothing; broadcast per backend (Gloo's binomial tree, NCCL's chain).
// The factory's total follows. For host backends, also the check every Gloo-like transport
// shares.
TEST_P(CommunicatorConformanceTest, BytesSentFollowTheDocumentedFormulas) {
  RunOnGroup([&](Rank& me) {
    const int k = me.comm.size(), r = me.rank;
    int64_t want = 0;
    auto expect = [&](const char* op, int64_t bytes) {
      want += bytes;
      ASSERT_EQ(me.comm.bytes_sent(), want) << op << " on " << k << " ranks, member " << r;
      ASSERT_EQ(me.factory.bytes_sent(), want) << op << " (factory)";
    };
    ASSERT_EQ(me.comm.bytes_sent(), 0);
    {
      Buffer data(me.memory, Inputs(50, r, 24));
      ASSERT_TRUE(me.comm.AllReduce(data.get(), 24, ReduceOp::kSum).ok());
      expect("all_reduce", 2 * (k - 1) * 96 / k);
    }
    std::vector<int64_t> equal(k, 5), uneven;
    for (int m = 0; m < k; ++m) uneven.push_back(m + 1);
    for (const auto& counts : {equal, uneven}) {
      Buffer in(me.memory, Inputs(51, r, counts[r]));
      Buffer out(me.memory, Poison(Sum(counts)));
      ASSERT_TRUE(me.comm.AllGather(in.get(), out.get(), counts).ok());
      expect("all_gather", k == 1 ? 0 : 4 * (Sum(counts) - counts[(r + 1) % k]));
      Buffer full(me.memory, Inputs(52, r, Sum(counts)));
      Buffer piece(me.memory, Poison(counts[r]));
      ASSERT_TRUE(me.comm.ReduceScatter(full.get(), piece.get(), counts).ok());
      expect("reduce_scatter", 4 * (Sum(counts) - counts[r]));
    }
    {
      // Member r sends r + j + 1 floats to member j.
      std::vector<int64_t> send, recv;
      for (int j = 0; j < k; ++j) {
        send.push_back(r + j + 1);
        recv.push_back(j + r + 1);
      }
      Buffer in(me.memory, Inputs(53, r, Sum(send)));
      Buffer out(me.memory, Poison(Sum(recv)));
      ASSERT_TRUE(me.comm.AllToAll(in.get(), send, out.get(), recv).ok());
      expect("all_to_all", 4 * (Sum(send) - send[r]));
    }
    {
      const int root = k - 1;
      Buffer data(me.memory, Inputs(54, root, 11));
      ASSERT_TRUE(me.comm.Broadcast(data.get(), 11, root).ok());
      expect("broadcast", backend().BroadcastBytes(11, r, k, root));
    }
    ASSERT_TRUE(me.comm.Barrier().ok());
    expect("barrier", 0);
    if (k >= 2 && r <= 1) {
      Buffer msg(me.memory, Inputs(55, 0, 5));
      if (r == 0) {
        ASSERT_TRUE(me.comm.Send(msg.get(), 5, 1, 7).ok());
        expect("send", 20);
      } else {
        ASSERT_TRUE(me.comm.Recv(msg.get(), 5, 0, 7).ok());
        expect("recv", 0);
      }
    }
  });
  if (backend().host_memory()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      RunRanks(backend(), n(), kTimeout, [&](int r, CommunicatorFactory& factory, Memory&) {
        auto comm = factory.Create(Group(2, n()));
        ASSERT_TRUE(comm.ok()) << comm.status();
        ExpectBytesSentFollowTheAlgorithms(**comm, factory, n(), r, op);
      });
    }
  }
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return absl::StrCat(std::get<0>(info.param), "_", std::get<1>(info.param), "ranks");
}

INSTANTIATE_TEST_SUITE_P(Backends, CommunicatorConformanceTest,
                         ::testing::Combine(::testing::ValuesIn(BackendNames()),
                                            ::testing::Values(1, 2, 3, 4)),
                         CaseName);

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
    absl::Status s = (*comm)->AllReduce(data.get(), 4, ReduceOp::kSum);
    const auto failed = std::chrono::steady_clock::now();
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("all_reduce"), absl::string_view::npos) << s;
    EXPECT_NE(s.message().find(GroupNameOf(1, 2)), absl::string_view::npos) << s;
    if (GetParam() != "nccl") {  // NCCL puts the count in between: "all_reduce of 4 floats on"
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
             absl::Status s = (*comm)->AllReduce(data.get(), 4, ReduceOp::kSum);
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
