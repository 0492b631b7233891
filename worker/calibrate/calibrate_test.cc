// Calibration against what it measures: the kernel fits price a shape they were not fitted on
// within a factor of 3 of its measured time, and a link calibration over two ranks (Gloo on
// 127.0.0.1) prices a byte for every op, the same on both ranks.
#include "worker/calibrate/calibrate.h"

#include <string>
#include <thread>

#include "gloo/rendezvous/hash_store.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo/gloo_communicator.h"
#include "worker/kernels/backend.h"

namespace weft::calibrate {
namespace {

double Predict(const v1::LinearFit& fit, double units) {
  return fit.alpha_s() + fit.per_unit_s() * units;
}

TEST(FitLinearTest, RecoversALine) {
  std::vector<Timing> timings;
  for (double x : {1e3, 1e4, 1e5, 1e6}) {
    timings.push_back({.what = "line",
                       .units = x,
                       .mean_s = 2e-6 + 3e-9 * x,
                       .median_s = 2e-6 + 3e-9 * x,
                       .p90_s = 1.5 * (2e-6 + 3e-9 * x),
                       .samples = 5});
  }
  const v1::LinearFit fit = FitLinear(timings);
  EXPECT_NEAR(fit.alpha_s(), 2e-6, 1e-9);
  EXPECT_NEAR(fit.per_unit_s(), 3e-9, 1e-12);
  EXPECT_DOUBLE_EQ(fit.tail_ratio(), 1.5);
  EXPECT_EQ(fit.samples(), 20);
}

TEST(FitLinearTest, ClampsANegativeFixedCostAtZero) {
  const std::vector<Timing> timings = {
      {.units = 1e3, .mean_s = 1e-6, .median_s = 1e-6, .p90_s = 1e-6},
      {.units = 1e6, .mean_s = 2e-3, .median_s = 2e-3, .p90_s = 2e-3}};
  const v1::LinearFit fit = FitLinear(timings);
  EXPECT_EQ(fit.alpha_s(), 0);
  EXPECT_GT(fit.per_unit_s(), 0);
}

const v1::KernelCost* Find(const std::vector<v1::KernelCost>& costs, v1::KernelCost::Kind kind,
                           v1::DType dtype, const std::string& precision = "") {
  for (const v1::KernelCost& c : costs) {
    if (c.kind() == kind && c.dtype() == dtype && c.precision() == precision) return &c;
  }
  return nullptr;
}

TEST(MeasureKernelsTest, FitsPriceAHeldOutShape) {
  auto costs = MeasureKernels({.quick = true});
  ASSERT_TRUE(costs.ok()) << costs.status();
  for (auto [kind, dtype] :
       {std::pair{v1::KernelCost::MATMUL, v1::F32}, std::pair{v1::KernelCost::MATMUL, v1::BF16},
        std::pair{v1::KernelCost::ATTENTION, v1::F32}, std::pair{v1::KernelCost::MEMORY, v1::F32},
        std::pair{v1::KernelCost::MEMORY, v1::BF16}}) {
    const v1::KernelCost* c = Find(*costs, kind, dtype);
    ASSERT_NE(c, nullptr) << v1::KernelCost::Kind_Name(kind) << " " << v1::DType_Name(dtype);
    EXPECT_GE(c->fit().alpha_s(), 0) << c->DebugString();
    EXPECT_GT(c->fit().per_unit_s(), 0) << c->DebugString();
    EXPECT_GE(c->fit().tail_ratio(), 1) << c->DebugString();
    EXPECT_GT(c->fit().samples(), 0) << c->DebugString();
  }
  // `precision: bf16`'s matmul, timed on kernels that round the operands to bf16.
  const v1::KernelCost* products = Find(*costs, v1::KernelCost::MATMUL, v1::F32, "bf16");
  ASSERT_NE(products, nullptr);
  EXPECT_GT(products->fit().per_unit_s(), 0) << products->DebugString();
  EXPECT_GT(products->fit().samples(), 0) << products->DebugString();

  // A 192^3 matmul and an ADD over 3 x 512 KiB, which the quick shapes skip.
  auto kernels = NewKernels({});
  ASSERT_TRUE(kernels.ok()) << kernels.status();
  const int64_t d = 192;
  std::vector<float> a(d * d, 0.5f), b(d * d, 0.5f), c(d * d);
  const Timing matmul = TimeCalls(
      "MATMUL f32 [192,192,192]", 2.0 * d * d * d,
      [&] { (*kernels)->Matmul(a.data(), b.data(), c.data(), d, d, d, false, false); }, 9, 0.1);
  const double matmul_s =
      Predict(Find(*costs, v1::KernelCost::MATMUL, v1::F32)->fit(), matmul.units);
  EXPECT_LT(matmul_s, 3 * matmul.median_s) << "measured " << matmul.median_s;
  EXPECT_GT(matmul_s, matmul.median_s / 3) << "measured " << matmul.median_s;

  const int64_t n = 128 * 1024;
  std::vector<float> x(n, 1.0f), y(n, 2.0f), z(n);
  const Timing add = TimeCalls(
      "ADD f32 [1572864]", 3.0 * n * sizeof(float),
      [&] { (*kernels)->Add(x.data(), y.data(), z.data(), n); }, 9, 0.1);
  const double add_s = Predict(Find(*costs, v1::KernelCost::MEMORY, v1::F32)->fit(), add.units);
  EXPECT_LT(add_s, 3 * add.median_s) << "measured " << add.median_s;
  EXPECT_GT(add_s, add.median_s / 3) << "measured " << add.median_s;
}

TEST(MeasureLinksTest, TwoRanksOnLoopback) {
  gloo::rendezvous::HashStore store;
  v1::CommGroup group;
  group.set_id(1);
  group.add_ranks(0);
  group.add_ranks(1);
  absl::StatusOr<std::vector<v1::LinkCost>> links[2];
  absl::StatusOr<double> slowdown[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      GlooCommunicatorFactory factory(&store, r, "127.0.0.1", absl::Seconds(60));
      auto comm = factory.Create(group);
      if (!comm.ok()) {
        links[r] = comm.status();
        return;
      }
      links[r] = MeasureLinks(**comm, {.scope = v1::LinkCost::INTRA_HOST, .quick = true});
      slowdown[r] = MeasureOverlapSlowdown(**comm, /*quick=*/true);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(links[r].ok()) << links[r].status();
    ASSERT_TRUE(slowdown[r].ok()) << slowdown[r].status();
    EXPECT_GE(*slowdown[r], 1.0);
  }
  ASSERT_EQ(links[0]->size(), 4);
  std::vector<v1::Instruction::Op> ops;
  for (size_t i = 0; i < links[0]->size(); ++i) {
    const v1::LinkCost& l = (*links[0])[i];
    ops.push_back(l.op());
    EXPECT_EQ(l.group_size(), 2);
    EXPECT_EQ(l.scope(), v1::LinkCost::INTRA_HOST);
    // On a loaded machine a woken rank can wait for the scheduler's next tick (4 ms at
    // HZ=250), more often the more wake-ups a size takes; the line then bends up and its
    // fixed cost clamps at 0. What every fit must do is price a byte.
    EXPECT_GE(l.fit().alpha_s(), 0) << l.DebugString();
    EXPECT_GT(l.fit().per_unit_s(), 0) << l.DebugString();
    // Every member holds the slowest member's times, so the same fits.
    EXPECT_EQ(l.SerializeAsString(), (*links[1])[i].SerializeAsString());
  }
  EXPECT_EQ(ops, (std::vector<v1::Instruction::Op>{
                     v1::Instruction::ALL_REDUCE, v1::Instruction::ALL_GATHER,
                     v1::Instruction::REDUCE_SCATTER, v1::Instruction::SEND}));
}

// A real executor's own cost per instruction: more than nothing, far less than a millisecond
// (one-element ops), and what a program of a thousand of them takes per instruction.
TEST(MeasureInstructionOverheadTest, IsTheExecutorsCostPerInstruction) {
  absl::StatusOr<double> overhead = MeasureInstructionOverhead(/*quick=*/true);
  ASSERT_TRUE(overhead.ok()) << overhead.status();
  EXPECT_GT(*overhead, 1e-9);
  EXPECT_LT(*overhead, 1e-3);
}

}  // namespace
}  // namespace weft::calibrate
