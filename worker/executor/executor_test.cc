// Executor tests: hand-written Programs run on the CPU kernels, every rank a thread on the
// in-process communicator, checked against float64 references written here and against the
// same model run as a 1-rank program.
#include "worker/executor/executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "common/dtype.h"
#include "common/npy.h"
#include "common/philox.h"
#include "common/program.h"
#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "worker/comm/local/local_communicator.h"
#include "worker/executor/op_registry.h"

namespace weft {
namespace {

using v1::Instruction;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

// Builds a Program one buffer and instruction at a time.
class ProgramBuilder {
 public:
  ProgramBuilder(int rank, int world_size) {
    p_.set_job_id("test");
    p_.set_rank(rank);
    p_.set_world_size(world_size);
    p_.set_seed(20240607);
  }
  int Buffer(const std::string& name, std::vector<int64_t> shape,
             v1::Buffer::Role role = v1::Buffer::ACTIVATION, v1::DType dtype = v1::F32) {
    v1::Buffer* b = p_.add_buffers();
    b->set_id(p_.buffers_size() - 1);
    b->set_name(name);
    for (int64_t d : shape) b->add_shape(d);
    b->set_role(role);
    b->set_dtype(dtype);
    return b->id();
  }
  v1::ParamInit* Init(int buffer, v1::ParamInit::Kind kind, std::vector<int64_t> global,
                      std::vector<int64_t> offsets, std::vector<int64_t> lengths) {
    v1::ParamInit* init = p_.add_init();
    init->set_buffer(buffer);
    init->set_name(p_.buffers(buffer).name());
    init->set_kind(kind);
    for (int64_t d : global) init->add_global_shape(d);
    for (int64_t o : offsets) init->mutable_box()->add_offsets(o);
    for (int64_t l : lengths) init->mutable_box()->add_lengths(l);
    return init;
  }
  v1::ParamInit* Init(int buffer, v1::ParamInit::Kind kind, std::vector<int64_t> global) {
    return Init(buffer, kind, global, std::vector<int64_t>(global.size(), 0), global);
  }
  v1::ParamInit* Uniform(int buffer, std::vector<int64_t> global, float bound) {
    v1::ParamInit* init = Init(buffer, v1::ParamInit::UNIFORM, global);
    init->set_bound(bound);
    init->set_tensor_key(Fnv1a64(init->name()));
    return init;
  }
  Instruction* Op(Instruction::Op op, std::vector<int> inputs, std::vector<int> outputs,
                  const std::string& comment = "") {
    Instruction* ins = p_.add_instructions();
    ins->set_op(op);
    for (int i : inputs) ins->add_inputs(i);
    for (int o : outputs) ins->add_outputs(o);
    ins->set_comment(comment);
    return ins;
  }
  Instruction* Load(Instruction::Op op, int out, std::vector<int64_t> offsets,
                    std::vector<int64_t> lengths) {
    Instruction* ins = Op(op, {}, {out});
    for (int64_t o : offsets) ins->mutable_box()->add_offsets(o);
    for (int64_t l : lengths) ins->mutable_box()->add_lengths(l);
    return ins;
  }
  void Group(int id, std::vector<int> ranks, const std::string& dims) {
    v1::CommGroup* g = p_.add_groups();
    g->set_id(id);
    for (int r : ranks) g->add_ranks(r);
    g->set_mesh_dims(dims);
  }
  v1::Program& program() { return p_; }

 private:
  v1::Program p_;
};

// Runs programs[r] on rank r's thread for `steps` steps; returns each rank's losses and leaves
// the executors in `execs` for inspection.
void RunAll(const std::vector<v1::Program>& programs, int steps,
            std::vector<std::vector<float>>* losses,
            std::vector<std::unique_ptr<Executor>>* execs) {
  const int n = static_cast<int>(programs.size());
  auto world = std::make_shared<LocalWorld>(n, absl::Seconds(30));
  losses->assign(n, {});
  execs->resize(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      LocalCommunicatorFactory factory(world, r);
      auto exec = Executor::Create(programs[r], &factory);
      ASSERT_TRUE(exec.ok()) << exec.status();
      ASSERT_TRUE((*exec)->Initialize().ok());
      for (int s = 1; s <= steps; ++s) {
        auto loss = (*exec)->RunStep(s);
        ASSERT_TRUE(loss.ok()) << loss.status();
        (*losses)[r].push_back(*loss);
      }
      (*execs)[r] = *std::move(exec);
    });
  }
  for (auto& t : threads) t.join();
}

// Runs step 1 of programs[r] on rank r's thread, in a local world that times out after
// `timeout`; each rank's status.
std::vector<absl::Status> RunStepStatuses(const std::vector<v1::Program>& programs,
                                          absl::Duration timeout) {
  const int n = static_cast<int>(programs.size());
  auto world = std::make_shared<LocalWorld>(n, timeout);
  std::vector<absl::Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      LocalCommunicatorFactory factory(world, r);
      auto exec = Executor::Create(programs[r], &factory);
      ASSERT_TRUE(exec.ok()) << exec.status();
      ASSERT_TRUE((*exec)->Initialize().ok());
      status[r] = (*exec)->RunStep(1).status();
    });
  }
  for (auto& t : threads) t.join();
  return status;
}

void ExpectAllClose(const std::vector<float>& got, const std::vector<double>& want, double rtol,
                    double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], atol + rtol * std::fabs(want[i])) << what << "[" << i << "]";
  }
}

// ---- Data parallel: a 2-layer MLP, batch split over ranks ----

constexpr int64_t kB = 8, kF = 3, kH = 4, kO = 2, kSamples = 12;
constexpr float kLr = 0.1f, kWd = 0.01f;

// bucketed: the two weight gradients are all-reduced as one bucket (a packed ALL_REDUCE of two
// pairs through a scratch buffer) once both are complete.
v1::Program DataParallelProgram(int rank, int world, bool bucketed = false) {
  const int64_t bl = kB / world;
  ProgramBuilder b(rank, world);
  v1::Data* data = b.program().mutable_data();
  data->set_source("synthetic");
  data->set_batch_size(kB);
  data->set_num_samples(kSamples);
  data->add_sample_shape(kF);
  data->add_label_shape(kO);
  const int w0 = b.Buffer("fc0.weight", {kF, kH}, v1::Buffer::PARAM);
  const int b0 = b.Buffer("fc0.bias", {kH}, v1::Buffer::PARAM);
  const int w1 = b.Buffer("fc1.weight", {kH, kO}, v1::Buffer::PARAM);
  const int x = b.Buffer("data.input", {bl, kF}, v1::Buffer::DATA);
  const int y = b.Buffer("data.label", {bl, kO}, v1::Buffer::DATA);
  const int h = b.Buffer("fc0.out", {bl, kH});
  const int a = b.Buffer("relu0.out", {bl, kH});
  const int pred = b.Buffer("fc1.out", {bl, kO});
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  const int dpred = b.Buffer("fc1.out@grad", {bl, kO}, v1::Buffer::GRAD);
  const int dw1 = b.Buffer("fc1.weight@grad", {kH, kO}, v1::Buffer::GRAD);
  const int da = b.Buffer("relu0.out@grad", {bl, kH}, v1::Buffer::GRAD);
  const int dh = b.Buffer("fc0.out@grad", {bl, kH}, v1::Buffer::GRAD);
  const int dw0 = b.Buffer("fc0.weight@grad", {kF, kH}, v1::Buffer::GRAD);
  const int db0 = b.Buffer("fc0.bias@grad", {kH}, v1::Buffer::GRAD);
  b.program().set_loss_buffer(loss);
  b.Uniform(w0, {kF, kH}, 0.5f);
  b.Uniform(b0, {kH}, 0.3f);
  b.Uniform(w1, {kH, kO}, 0.5f);
  const bool dp = world > 1;
  std::vector<int> all;
  for (int r = 0; r < world; ++r) all.push_back(r);
  if (dp) b.Group(0, all, "dp");
  auto all_reduce = [&](int buf, v1::Placement::ReduceOp op, const std::string& c) {
    if (!dp) return;
    Instruction* ins = b.Op(Instruction::ALL_REDUCE, {buf}, {buf}, c);
    ins->set_group(0);
    ins->set_reduce(op);
  };
  b.Load(Instruction::LOAD_INPUT, x, {rank * bl, 0}, {bl, kF});
  b.Load(Instruction::LOAD_LABEL, y, {rank * bl, 0}, {bl, kO});
  b.Op(Instruction::MATMUL, {x, w0}, {h}, "fc0: x @ w");
  b.Op(Instruction::ADD_BIAS, {h, b0}, {h}, "fc0: + b");
  b.Op(Instruction::RELU, {h}, {a});
  b.Op(Instruction::MATMUL, {a, w1}, {pred}, "fc1: x @ w");
  b.Op(Instruction::MSE_LOSS, {pred, y}, {loss})->set_scale(1.0f / (kB * kO));
  all_reduce(loss, v1::Placement::SUM, "loss: Partial(sum) -> Replicate");
  b.Op(Instruction::MSE_GRAD, {pred, y}, {dpred})->set_scale(2.0f / (kB * kO));
  b.Op(Instruction::MATMUL, {a, dpred}, {dw1}, "fc1 dw = x^T @ dy")->set_transpose_a(true);
  if (!bucketed) all_reduce(dw1, v1::Placement::SUM, "fc1.weight@grad");
  b.Op(Instruction::MATMUL, {dpred, w1}, {da}, "fc1 dx = dy @ w^T")->set_transpose_b(true);
  b.Op(Instruction::RELU_GRAD, {h, da}, {dh});
  b.Op(Instruction::MATMUL, {x, dh}, {dw0}, "fc0 dw")->set_transpose_a(true);
  if (!bucketed) {
    all_reduce(dw0, v1::Placement::SUM, "fc0.weight@grad");
  } else if (dp) {
    const int pack = b.Buffer("bucket0.scratch", {kH * kO + kF * kH}, v1::Buffer::SCRATCH);
    Instruction* ins = b.Op(Instruction::ALL_REDUCE, {dw1, dw0}, {dw1, dw0}, "bucket");
    ins->set_group(0);
    ins->set_reduce(v1::Placement::SUM);
    ins->set_scratch(pack);
  }
  b.Op(Instruction::BIAS_GRAD, {dh}, {db0});
  // Exercise SCALE and AVG: world * local sum, averaged over the group = the global sum.
  b.Op(Instruction::SCALE, {db0}, {db0})->set_scale(static_cast<float>(world));
  all_reduce(db0, v1::Placement::AVG, "fc0.bias@grad");
  Instruction* sgd = b.Op(Instruction::SGD, {w0, dw0}, {w0});
  sgd->set_lr(kLr);
  sgd->set_weight_decay(kWd);
  b.Op(Instruction::SGD, {b0, db0}, {})->set_lr(kLr);
  b.Op(Instruction::SGD, {w1, dw1}, {w1})->set_lr(kLr);
  return b.program();
}

// The float64 reference of the same model, with the same Philox data and init.
struct MlpReference {
  std::vector<double> w0, b0, w1;
  std::vector<double> losses;

  static std::vector<double> Init(uint64_t seed, const std::string& name, int64_t n, float bound) {
    std::vector<double> v(n);
    for (int64_t i = 0; i < n; ++i) v[i] = PhiloxUniform(seed, Fnv1a64(name), i, bound);
    return v;
  }

  void Run(uint64_t seed, int steps) {
    w0 = Init(seed, "fc0.weight", kF * kH, 0.5f);
    b0 = Init(seed, "fc0.bias", kH, 0.3f);
    w1 = Init(seed, "fc1.weight", kH * kO, 0.5f);
    for (int s = 1; s <= steps; ++s) {
      std::vector<double> dw0(kF * kH, 0), db0(kH, 0), dw1(kH * kO, 0);
      double loss = 0;
      for (int64_t r = 0; r < kB; ++r) {
        const int64_t sample = ((s - 1) * kB + r) % kSamples;
        double x[kF], y[kO], h[kH], a[kH], p[kO], dp[kO], dh[kH];
        for (int j = 0; j < kF; ++j)
          x[j] = PhiloxUniform(seed, Fnv1a64("data.input"), sample * kF + j, 1.0f);
        for (int j = 0; j < kO; ++j)
          y[j] = PhiloxUniform(seed, Fnv1a64("data.label"), sample * kO + j, 1.0f);
        for (int j = 0; j < kH; ++j) {
          h[j] = b0[j];
          for (int i = 0; i < kF; ++i) h[j] += x[i] * w0[i * kH + j];
          a[j] = h[j] > 0 ? h[j] : 0;
        }
        for (int o = 0; o < kO; ++o) {
          p[o] = 0;
          for (int j = 0; j < kH; ++j) p[o] += a[j] * w1[j * kO + o];
          loss += (p[o] - y[o]) * (p[o] - y[o]) / (kB * kO);
          dp[o] = 2 * (p[o] - y[o]) / (kB * kO);
        }
        for (int j = 0; j < kH; ++j) {
          double g = 0;
          for (int o = 0; o < kO; ++o) {
            dw1[j * kO + o] += a[j] * dp[o];
            g += dp[o] * w1[j * kO + o];
          }
          dh[j] = h[j] > 0 ? g : 0;
          db0[j] += dh[j];
          for (int i = 0; i < kF; ++i) dw0[i * kH + j] += x[i] * dh[j];
        }
      }
      losses.push_back(loss);
      for (size_t i = 0; i < w0.size(); ++i) w0[i] -= kLr * (dw0[i] + kWd * w0[i]);
      for (size_t i = 0; i < b0.size(); ++i) b0[i] -= kLr * db0[i];
      for (size_t i = 0; i < w1.size(); ++i) w1[i] -= kLr * dw1[i];
    }
  }
};

TEST(ExecutorTest, DataParallelMatchesSingleRankAndFloat64Reference) {
  const int kSteps = 3;  // 12 samples, batch 8: step 2 wraps
  MlpReference ref;
  ref.Run(20240607, kSteps);

  std::vector<std::vector<float>> losses1, losses2;
  std::vector<std::unique_ptr<Executor>> single, dp;
  RunAll({DataParallelProgram(0, 1)}, kSteps, &losses1, &single);
  RunAll({DataParallelProgram(0, 2), DataParallelProgram(1, 2)}, kSteps, &losses2, &dp);
  ASSERT_EQ(losses1[0].size(), kSteps);
  ASSERT_EQ(losses2[1].size(), kSteps);

  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(losses1[0][s], ref.losses[s], 1e-5 * ref.losses[s]) << "step " << s + 1;
    // Every rank reports the same replicated loss, equal to the single-rank one.
    EXPECT_EQ(losses2[0][s], losses2[1][s]) << "step " << s + 1;
    EXPECT_NEAR(losses2[0][s], losses1[0][s], 1e-5 * losses1[0][s]) << "step " << s + 1;
  }
  // Losses change: the updates did something.
  EXPECT_NE(losses1[0][0], losses1[0][2]);

  const std::vector<std::pair<std::string, const std::vector<double>*>> params = {
      {"fc0.weight", &ref.w0}, {"fc0.bias", &ref.b0}, {"fc1.weight", &ref.w1}};
  for (const auto& [name, want] : params) {
    auto s = single[0]->ReadBuffer(name);
    ASSERT_TRUE(s.ok()) << s.status();
    ExpectAllClose(*s, *want, 1e-5, 1e-6, "single " + name);
    for (int r = 0; r < 2; ++r) {
      auto d = dp[r]->ReadBuffer(name);
      ASSERT_TRUE(d.ok()) << d.status();
      ExpectAllClose(*d, std::vector<double>(s->begin(), s->end()), 1e-5, 1e-6,
                     "rank " + std::to_string(r) + " " + name);
    }
  }
}

void ExpectRejected(const v1::Program& p, CommunicatorFactory* factory,
                    const std::vector<std::string>& texts);
void ExpectAccepted(const v1::Program& p);

// A bucket of two gradients reduced in one packed call gives what two calls give, bit for bit
// (two ranks: each sum is one addition either way).
TEST(ExecutorTest, ABucketOfGradientsReducesLikeItsMembers) {
  const int kSteps = 3;
  std::vector<std::vector<float>> separate_losses, bucket_losses;
  std::vector<std::unique_ptr<Executor>> separate, bucket;
  RunAll({DataParallelProgram(0, 2), DataParallelProgram(1, 2)}, kSteps, &separate_losses,
         &separate);
  RunAll({DataParallelProgram(0, 2, true), DataParallelProgram(1, 2, true)}, kSteps,
         &bucket_losses, &bucket);
  ASSERT_EQ(bucket_losses[0].size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(bucket_losses[0], separate_losses[0]);
  EXPECT_NE(bucket_losses[0][0], bucket_losses[0][2]);
  for (const std::string name : {"fc0.weight", "fc1.weight", "fc0.bias"}) {
    for (int r = 0; r < 2; ++r) {
      auto a = separate[r]->ReadBuffer(name);
      auto b = bucket[r]->ReadBuffer(name);
      ASSERT_TRUE(a.ok() && b.ok()) << name;
      EXPECT_EQ(*a, *b) << "rank " << r << " " << name;
    }
  }
  // A bucket's pairs check like single all-reduces: each output is its input's size, no output
  // is written twice.
  LocalCommunicatorFactory factory(std::make_shared<LocalWorld>(2, absl::Seconds(1)), 0);
  v1::Program swapped = DataParallelProgram(0, 2, true);
  v1::Program twice = swapped;
  for (v1::Program* p : {&swapped, &twice}) {
    for (Instruction& ins : *p->mutable_instructions()) {
      if (ins.comment() != "bucket") continue;
      if (p == &swapped) {
        ins.set_outputs(1, ins.outputs(0));
      } else {
        ins.set_inputs(1, ins.inputs(0));
        ins.set_outputs(1, ins.outputs(0));
      }
    }
  }
  ExpectRejected(swapped, &factory,
                 {"(ALL_REDUCE 'bucket')", "input 1 (buffer", "is [3,4] but output 1"});
  ExpectRejected(twice, &factory, {"(ALL_REDUCE 'bucket')", "outputs 0 and 1 are both"});
  // The packing may not land on a member; a single pair packs nothing.
  v1::Program onto_member = DataParallelProgram(0, 2, true);
  v1::Program single = DataParallelProgram(0, 2);
  for (Instruction& ins : *onto_member.mutable_instructions()) {
    if (ins.comment() == "bucket") ins.set_scratch(ins.inputs(1));
  }
  for (Instruction& ins : *single.mutable_instructions()) {
    if (ins.comment() == "fc1.weight@grad") ins.set_scratch(ins.inputs(0));
  }
  ExpectRejected(onto_member, &factory,
                 {"(ALL_REDUCE 'bucket')", "is also the instruction's input 1"});
  ExpectRejected(single, &factory, {"a single all-reduce packs nothing"});
}

// ---- Model parallel: one linear layer, weight columns sharded unevenly; npy data and
// FROM_FILE init; ALL_GATHER along axis 1, SLICE, ADAMW ----

constexpr int64_t kMpB = 4, kMpF = 3, kMpO = 5, kMpSamples = 6;

v1::Program ModelParallelProgram(int rank, int world, const std::string& input,
                                 const std::string& label, const std::string& init_from) {
  // Paddle's rule: 5 over 2 ranks = [2, 3].
  const std::vector<int64_t> splits = world == 1 ? std::vector<int64_t>{kMpO}
                                                 : std::vector<int64_t>{2, 3};
  const int64_t col0 = rank == 0 ? 0 : splits[0];
  const int64_t cols = splits[rank];
  ProgramBuilder b(rank, world);
  b.program().set_init_from(init_from);
  v1::Data* data = b.program().mutable_data();
  data->set_source("npy");
  data->set_input(input);
  data->set_label(label);
  data->set_batch_size(kMpB);
  const int w = b.Buffer("fc0.weight", {kMpF, cols}, v1::Buffer::PARAM);
  const int m = b.Buffer("fc0.weight.m", {kMpF, cols}, v1::Buffer::OPTIMIZER_STATE);
  const int v = b.Buffer("fc0.weight.v", {kMpF, cols}, v1::Buffer::OPTIMIZER_STATE);
  const int x = b.Buffer("data.input", {kMpB, kMpF}, v1::Buffer::DATA);
  const int y = b.Buffer("data.label", {kMpB, kMpO}, v1::Buffer::DATA);
  const int part = b.Buffer("fc0.out", {kMpB, cols});
  const int full = world > 1 ? b.Buffer("fc0.out.gathered", {kMpB, kMpO}) : part;
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  const int dfull = b.Buffer("fc0.out@grad", {kMpB, kMpO}, v1::Buffer::GRAD);
  const int dpart = world > 1 ? b.Buffer("fc0.out@grad.shard", {kMpB, cols}) : dfull;
  const int dw = b.Buffer("fc0.weight@grad", {kMpF, cols}, v1::Buffer::GRAD);
  b.program().set_loss_buffer(loss);
  b.Init(w, v1::ParamInit::FROM_FILE, {kMpF, kMpO}, {0, col0}, {kMpF, cols});
  b.Init(m, v1::ParamInit::ZEROS, {kMpF, kMpO}, {0, col0}, {kMpF, cols});
  b.Init(v, v1::ParamInit::ZEROS, {kMpF, kMpO}, {0, col0}, {kMpF, cols});
  if (world > 1) b.Group(3, {0, 1}, "mp");
  b.Load(Instruction::LOAD_INPUT, x, {0, 0}, {kMpB, kMpF});
  b.Load(Instruction::LOAD_LABEL, y, {0, 0}, {kMpB, kMpO});
  b.Op(Instruction::MATMUL, {x, w}, {part});
  if (world > 1) {
    Instruction* g = b.Op(Instruction::ALL_GATHER, {part}, {full}, "Shard(1) -> Replicate");
    g->set_group(3);
    g->set_axis(1);
    for (int64_t s : splits) g->add_split_sizes(s);
  }
  b.Op(Instruction::MSE_LOSS, {full, y}, {loss})->set_scale(1.0f / (kMpB * kMpO));
  b.Op(Instruction::MSE_GRAD, {full, y}, {dfull})->set_scale(2.0f / (kMpB * kMpO));
  if (world > 1) {
    Instruction* s = b.Op(Instruction::SLICE, {dfull}, {dpart}, "Replicate -> Shard(1)");
    s->set_axis(-1);
    s->set_offset(col0);
    s->set_length(cols);
  }
  b.Op(Instruction::MATMUL, {x, dpart}, {dw})->set_transpose_a(true);
  Instruction* adam = b.Op(Instruction::ADAMW, {w, dw, m, v}, {w, m, v});
  adam->set_lr(0.05f);
  adam->set_beta1(0.9f);
  adam->set_beta2(0.99f);
  adam->set_eps(1e-6f);
  adam->set_weight_decay(0.1f);
  return b.program();
}

TEST(ExecutorTest, ModelParallelFromNpyAndSafetensorsMatchesReference) {
  // Data and initial weights, written the way a user would provide them.
  std::vector<float> xs(kMpSamples * kMpF), ys(kMpSamples * kMpO), w0(kMpF * kMpO);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(1.0 + i) * 0.9f;
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = std::cos(0.5 + 2.0 * i) * 0.7f;
  for (size_t i = 0; i < w0.size(); ++i) w0[i] = 0.1f * static_cast<float>(i) - 0.6f;
  const std::string input = TempPath("mp_x.npy"), label = TempPath("mp_y.npy");
  const std::string init = TempPath("mp_init.safetensors");
  ASSERT_TRUE(NpyFile::Write(input, {kMpSamples, kMpF}, xs.data()).ok());
  ASSERT_TRUE(NpyFile::Write(label, {kMpSamples, kMpO}, ys.data()).ok());
  ASSERT_TRUE(SafetensorsFile::Write(init, {{"fc0.weight", {kMpF, kMpO}, w0.data()}}).ok());

  // float64 reference: full matrices, PyTorch AdamW.
  const int kSteps = 4;
  std::vector<double> w(w0.begin(), w0.end()), m(w.size(), 0), v(w.size(), 0), ref_losses;
  for (int s = 1; s <= kSteps; ++s) {
    std::vector<double> dw(w.size(), 0);
    double loss = 0;
    for (int64_t r = 0; r < kMpB; ++r) {
      const int64_t sample = ((s - 1) * kMpB + r) % kMpSamples;
      for (int64_t o = 0; o < kMpO; ++o) {
        double p = 0;
        for (int64_t f = 0; f < kMpF; ++f) p += xs[sample * kMpF + f] * w[f * kMpO + o];
        const double d = p - ys[sample * kMpO + o];
        loss += d * d / (kMpB * kMpO);
        for (int64_t f = 0; f < kMpF; ++f) {
          dw[f * kMpO + o] += xs[sample * kMpF + f] * 2 * d / (kMpB * kMpO);
        }
      }
    }
    ref_losses.push_back(loss);
    const double lr = 0.05, b1 = 0.9f, b2 = 0.99f, eps = 1e-6f, wd = 0.1f;
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] -= lr * wd * w[i];
      m[i] = b1 * m[i] + (1 - b1) * dw[i];
      v[i] = b2 * v[i] + (1 - b2) * dw[i] * dw[i];
      w[i] -= lr * (m[i] / (1 - std::pow(b1, s))) / (std::sqrt(v[i] / (1 - std::pow(b2, s))) + eps);
    }
  }

  std::vector<std::vector<float>> losses1, losses2;
  std::vector<std::unique_ptr<Executor>> single, mp;
  RunAll({ModelParallelProgram(0, 1, input, label, init)}, kSteps, &losses1, &single);
  RunAll({ModelParallelProgram(0, 2, input, label, init),
          ModelParallelProgram(1, 2, input, label, init)},
         kSteps, &losses2, &mp);
  ASSERT_EQ(losses2[0].size(), kSteps);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(losses1[0][s], ref_losses[s], 1e-5 * ref_losses[s]) << "step " << s + 1;
    EXPECT_EQ(losses2[0][s], losses2[1][s]);
    EXPECT_NEAR(losses2[0][s], losses1[0][s], 1e-5 * losses1[0][s]) << "step " << s + 1;
  }
  auto full = single[0]->ReadBuffer("fc0.weight");
  ASSERT_TRUE(full.ok());
  ExpectAllClose(*full, w, 1e-4, 1e-5, "single fc0.weight");
  // Stitch the two column shards back together.
  auto s0 = mp[0]->ReadBuffer("fc0.weight");
  auto s1 = mp[1]->ReadBuffer("fc0.weight");
  ASSERT_TRUE(s0.ok() && s1.ok());
  std::vector<float> stitched;
  for (int64_t f = 0; f < kMpF; ++f) {
    stitched.insert(stitched.end(), s0->begin() + f * 2, s0->begin() + f * 2 + 2);
    stitched.insert(stitched.end(), s1->begin() + f * 3, s1->begin() + f * 3 + 3);
  }
  ExpectAllClose(stitched, std::vector<double>(full->begin(), full->end()), 1e-5, 1e-6,
                 "stitched fc0.weight");
}

// ---- REDUCE_SCATTER and ALL_GATHER along a non-leading axis with uneven splits ----

// Rank r of 2: x [2,3,5] loaded, scaled by r+1, reduce-scattered along axis 2 (splits 2, 3) and
// axis 1 (avg, splits 1, 2), the first gathered back along the last axis. Every collective packs
// along an inner axis (outer > 1), in the executor's own scratch.
v1::Program AxisCollectivesProgram(int r, const std::string& input) {
  ProgramBuilder b(r, 2);
  b.program().mutable_data()->set_source("npy");
  b.program().mutable_data()->set_input(input);
  b.program().mutable_data()->set_batch_size(2);
  const int64_t len = r == 0 ? 2 : 3;
  const int x = b.Buffer("x", {2, 3, 5});
  const int scaled = b.Buffer("scaled", {2, 3, 5});
  const int shard = b.Buffer("shard", {2, 3, len});
  const int gathered = b.Buffer("gathered", {2, 3, 5});
  const int avg_shard = b.Buffer("avg_shard", {2, r == 0 ? 1 : 2, 5});
  const int loss = b.Buffer("loss", {1});
  b.program().set_loss_buffer(loss);
  b.Group(0, {0, 1}, "mp");
  b.Load(Instruction::LOAD_INPUT, x, {0, 0, 0}, {2, 3, 5});
  b.Op(Instruction::SCALE, {x}, {scaled})->set_scale(r + 1.0f);
  Instruction* rs = b.Op(Instruction::REDUCE_SCATTER, {scaled}, {shard});
  rs->set_group(0);
  rs->set_axis(2);
  rs->add_split_sizes(2);
  rs->add_split_sizes(3);
  Instruction* avg = b.Op(Instruction::REDUCE_SCATTER, {scaled}, {avg_shard}, "Partial(avg)");
  avg->set_group(0);
  avg->set_axis(1);
  avg->set_reduce(v1::Placement::AVG);
  avg->add_split_sizes(1);
  avg->add_split_sizes(2);
  Instruction* ag = b.Op(Instruction::ALL_GATHER, {shard}, {gathered});
  ag->set_group(0);
  ag->set_axis(-1);
  ag->add_split_sizes(2);
  ag->add_split_sizes(3);
  b.Op(Instruction::MSE_LOSS, {gathered, x}, {loss})->set_scale(1.0f);
  return b.program();
}

TEST(ExecutorTest, ReduceScatterAndAllGatherAlongAxis1) {
  const std::string input = TempPath("rs_x.npy");
  std::vector<float> xs(2 * 3 * 5);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.25f * i - 2.0f;
  ASSERT_TRUE(NpyFile::Write(input, {2, 3, 5}, xs.data()).ok());
  std::vector<v1::Program> programs;
  for (int r = 0; r < 2; ++r) programs.push_back(AxisCollectivesProgram(r, input));
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll(programs, 1, &losses, &execs);
  ASSERT_EQ(execs.size(), 2u);
  double want_loss = 0;
  for (float v : xs) want_loss += 4.0 * v * v;  // (3x - x)^2
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(execs[r], nullptr);
    EXPECT_NEAR(losses[r][0], want_loss, 1e-5 * want_loss);
    auto shard = execs[r]->ReadBuffer("shard");
    ASSERT_TRUE(shard.ok());
    const int64_t off = r == 0 ? 0 : 2, len = r == 0 ? 2 : 3;
    std::vector<double> want;
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t c = off; c < off + len; ++c) want.push_back(3.0 * xs[i * 5 + c]);
    ExpectAllClose(*shard, want, 0, 0, "shard of rank " + std::to_string(r));
    // Average over the group of (r+1)*x = 1.5x, rows [r, r+1+r) of axis 1 (splits [1, 2]).
    auto avg = execs[r]->ReadBuffer("avg_shard");
    ASSERT_TRUE(avg.ok());
    std::vector<double> want_avg;
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = r; j < r + 1 + r; ++j)
        for (int64_t c = 0; c < 5; ++c) want_avg.push_back(1.5 * xs[(i * 3 + j) * 5 + c]);
    ExpectAllClose(*avg, want_avg, 1e-6, 0, "avg shard of rank " + std::to_string(r));
    auto gathered = execs[r]->ReadBuffer("gathered");
    ASSERT_TRUE(gathered.ok());
    std::vector<double> want_full;
    for (float v : xs) want_full.push_back(3.0 * v);
    ExpectAllClose(*gathered, want_full, 0, 0, "gathered");
  }
}

// ---- ALL_TO_ALL: Shard(0) -> Shard(2) and back, uneven splits over 3 ranks ----

TEST(ExecutorTest, AllToAllMovesTheShardAxisWithUnevenSplits) {
  const std::string input = TempPath("a2a_x.npy");
  std::vector<float> xs(5 * 3 * 7);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.5f * i - 7.0f;
  ASSERT_TRUE(NpyFile::Write(input, {5, 3, 7}, xs.data()).ok());
  const std::vector<int64_t> rows = {1, 1, 3}, row_off = {0, 1, 2};  // axis 0 of 5
  const std::vector<int64_t> cols = {2, 2, 3}, col_off = {0, 2, 4};  // axis 2 of 7
  std::vector<v1::Program> programs;
  for (int r = 0; r < 3; ++r) {
    ProgramBuilder b(r, 3);
    b.program().mutable_data()->set_source("npy");
    b.program().mutable_data()->set_input(input);
    b.program().mutable_data()->set_batch_size(5);
    const int x = b.Buffer("x", {5, 3, 7});
    const int s0 = b.Buffer("s0", {rows[r], 3, 7});
    const int s2 = b.Buffer("s2", {5, 3, cols[r]});
    const int back = b.Buffer("back", {rows[r], 3, 7});
    const int loss = b.Buffer("loss", {1});
    b.program().set_loss_buffer(loss);
    b.Group(4, {0, 1, 2}, "mp");
    b.Load(Instruction::LOAD_INPUT, x, {0, 0, 0}, {5, 3, 7});
    Instruction* slice = b.Op(Instruction::SLICE, {x}, {s0});
    slice->set_axis(0);
    slice->set_offset(row_off[r]);
    slice->set_length(rows[r]);
    Instruction* a2a = b.Op(Instruction::ALL_TO_ALL, {s0}, {s2}, "Shard(0)->Shard(2)");
    a2a->set_group(4);
    a2a->set_axis(2);
    a2a->set_concat_axis(0);
    for (int64_t c : cols) a2a->add_split_sizes(c);
    for (int64_t c : rows) a2a->add_concat_split_sizes(c);
    Instruction* inv = b.Op(Instruction::ALL_TO_ALL, {s2}, {back}, "Shard(2)->Shard(0)");
    inv->set_group(4);
    inv->set_axis(0);
    inv->set_concat_axis(-1);
    for (int64_t c : rows) inv->add_split_sizes(c);
    for (int64_t c : cols) inv->add_concat_split_sizes(c);
    b.Op(Instruction::MSE_LOSS, {back, s0}, {loss})->set_scale(1.0f);
    programs.push_back(b.program());
  }
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll(programs, 1, &losses, &execs);
  ASSERT_EQ(execs.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    ASSERT_NE(execs[r], nullptr);
    EXPECT_EQ(losses[r][0], 0.0f);  // the round trip is exact
    auto s2 = execs[r]->ReadBuffer("s2");
    ASSERT_TRUE(s2.ok());
    std::vector<double> want;
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t c = col_off[r]; c < col_off[r] + cols[r]; ++c)
          want.push_back(xs[(i * 3 + j) * 7 + c]);
    ExpectAllClose(*s2, want, 0, 0, "Shard(2) piece of rank " + std::to_string(r));
  }
  // A piece that does not match this member's concat size is rejected at Create.
  v1::Program bad = programs[1];
  bad.mutable_instructions(2)->set_concat_split_sizes(1, 2);
  LocalCommunicatorFactory factory(std::make_shared<LocalWorld>(3, absl::Seconds(1)), 1);
  absl::Status status = Executor::Create(bad, &factory).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("ALL_TO_ALL"), std::string::npos) << status;
}

// ---- Errors ----

v1::Program TinyProgram() {
  ProgramBuilder b(0, 1);
  const int a = b.Buffer("a", {2, 3}, v1::Buffer::PARAM);
  const int w = b.Buffer("w", {3, 4}, v1::Buffer::PARAM);
  const int out = b.Buffer("out", {2, 4});
  const int loss = b.Buffer("loss", {1});
  b.program().set_loss_buffer(loss);
  b.Uniform(a, {2, 3}, 1.0f);
  b.Uniform(w, {3, 4}, 1.0f);
  b.Op(Instruction::MATMUL, {a, w}, {out}, "fc0: x @ w");
  b.Op(Instruction::MSE_LOSS, {out, out}, {loss})->set_scale(1.0f);
  return b.program();
}

TEST(ExecutorTest, CreateRejectsBadProgramsNamingTheInstruction) {
  v1::Program p = TinyProgram();
  p.mutable_instructions(0)->set_outputs(0, 9);
  auto e = Executor::Create(p, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("instruction 0 (MATMUL 'fc0: x @ w')"),
            absl::string_view::npos)
      << e.status();
  EXPECT_NE(e.status().message().find("out of range"), absl::string_view::npos) << e.status();

  p = TinyProgram();
  p.mutable_instructions(0)->set_transpose_b(true);
  e = Executor::Create(p, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("inner dimensions"), absl::string_view::npos) << e.status();

  p = TinyProgram();
  p.mutable_buffers(2)->set_shape(1, 5);
  e = Executor::Create(p, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("output is [2,5], expected [2,4]"), absl::string_view::npos)
      << e.status();

  p = TinyProgram();
  Instruction* ar = p.add_instructions();
  ar->set_op(Instruction::ALL_REDUCE);
  ar->add_inputs(3);
  ar->add_outputs(3);
  ar->set_group(7);
  e = Executor::Create(p, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("instruction 2 (ALL_REDUCE)"), absl::string_view::npos)
      << e.status();
  EXPECT_NE(e.status().message().find("group 7"), absl::string_view::npos) << e.status();

  p = TinyProgram();
  p.mutable_init(0)->mutable_box()->set_lengths(1, 2);
  e = Executor::Create(p, nullptr);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("init of 'a'"), absl::string_view::npos) << e.status();

  p = TinyProgram();
  p.mutable_buffers(1)->set_id(5);
  EXPECT_FALSE(Executor::Create(p, nullptr).ok());

  p = TinyProgram();
  p.set_loss_buffer(42);
  EXPECT_FALSE(Executor::Create(p, nullptr).ok());
}

TEST(ExecutorTest, FromFileShapeMismatchNamesTensorAndFile) {
  const std::string init = TempPath("mismatch.safetensors");
  std::vector<float> w(12, 1.0f);
  ASSERT_TRUE(SafetensorsFile::Write(init, {{"w", {4, 3}, w.data()}}).ok());
  v1::Program p = TinyProgram();
  p.set_init_from(init);
  p.mutable_init(1)->set_kind(v1::ParamInit::FROM_FILE);
  auto e = Executor::Create(p, nullptr);
  ASSERT_TRUE(e.ok()) << e.status();
  absl::Status s = (*e)->Initialize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("loading w from " + init), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("[4,3]"), absl::string_view::npos) << s;

  p.set_init_from(TempPath("absent.safetensors"));
  e = Executor::Create(p, nullptr);
  ASSERT_TRUE(e.ok());
  s = (*e)->Initialize();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
}

TEST(ExecutorTest, UniformInitOfAShardIsTheSliceOfTheFullTensor) {
  v1::Program p = TinyProgram();
  // Buffer w holds columns 1..2 of a global [3, 6] tensor.
  p.mutable_buffers(1)->set_shape(1, 2);
  p.mutable_buffers(2)->set_shape(1, 2);
  v1::ParamInit* init = p.mutable_init(1);
  init->set_global_shape(1, 6);
  init->mutable_box()->set_offsets(1, 1);
  init->mutable_box()->set_lengths(1, 2);
  init->set_bound(0.25f);
  auto e = Executor::Create(p, nullptr);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->Initialize().ok());
  auto w = (*e)->ReadBuffer("w");
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->size(), 6u);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 2; ++c)
      EXPECT_EQ((*w)[r * 2 + c],
                PhiloxUniform(20240607, Fnv1a64("w"), r * 6 + 1 + c, 0.25f));
  EXPECT_EQ((*e)->ReadBuffer("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(ExecutorTest, CancelStopsAtTheNextInstruction) {
  auto e = Executor::Create(TinyProgram(), nullptr);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->RunStep(1).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*e)->Initialize().ok());
  auto loss = (*e)->RunStep(1);
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_EQ(*loss, 0.0f);  // MSE of a tensor against itself
  (*e)->Cancel();
  EXPECT_EQ((*e)->RunStep(2).status().code(), absl::StatusCode::kCancelled);
}

// ---- Pipeline: the data-parallel test's MLP cut in two stages, fc0+relu on rank 0 and fc1+mse
// on rank 1, the global batch in 2 micro-batches (FThenB): activations go forward with SEND/RECV,
// their gradients come back, ACCUMULATE sums the weight gradients and the loss over the
// micro-batches, FILL zeroes the accumulators, and rank 1 sends the loss back to rank 0 ----

constexpr int kMicroBatches = 2;
constexpr int64_t kMb = kB / kMicroBatches;

// Tags: activation of micro-batch m = 2m, its gradient 2m + 1, the loss 100.
constexpr uint32_t kLossTag = 100;

Instruction* Tagged(Instruction* ins, Instruction::Phase phase, int micro_batch) {
  ins->set_phase(phase);
  ins->set_micro_batch(micro_batch);
  ins->set_chunk(micro_batch < 0 ? -1 : 0);
  return ins;
}

Instruction* PointToPoint(ProgramBuilder& b, Instruction::Op op, int buffer, int peer,
                          uint32_t tag) {
  Instruction* ins = op == Instruction::SEND ? b.Op(op, {buffer}, {}) : b.Op(op, {}, {buffer});
  ins->set_group(0);
  ins->set_peer(peer);
  ins->set_tag(tag);
  return ins;
}

v1::Program PipelineProgram(int rank, bool trace) {
  ProgramBuilder b(rank, 2);
  b.program().set_trace(trace);
  v1::Data* data = b.program().mutable_data();
  data->set_source("synthetic");
  data->set_batch_size(kB);
  data->set_num_samples(kSamples);
  data->add_sample_shape(kF);
  data->add_label_shape(kO);
  b.Group(0, {0, 1}, "pp");
  const auto F = Instruction::FORWARD;
  const auto B = Instruction::BACKWARD;
  const auto O = Instruction::OPTIMIZER;
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  std::vector<int> act, dact;  // by micro-batch: relu0.out and its gradient
  if (rank == 0) {
    const int w0 = b.Buffer("fc0.weight", {kF, kH}, v1::Buffer::PARAM);
    const int b0 = b.Buffer("fc0.bias", {kH}, v1::Buffer::PARAM);
    const int dw0 = b.Buffer("fc0.weight@grad", {kF, kH}, v1::Buffer::GRAD);
    const int db0 = b.Buffer("fc0.bias@grad", {kH}, v1::Buffer::GRAD);
    const int dw0_mb = b.Buffer("fc0.weight@grad.mb", {kF, kH}, v1::Buffer::GRAD);
    const int db0_mb = b.Buffer("fc0.bias@grad.mb", {kH}, v1::Buffer::GRAD);
    b.Uniform(w0, {kF, kH}, 0.5f);
    b.Uniform(b0, {kH}, 0.3f);
    std::vector<int> x, h, dh;
    for (int m = 0; m < kMicroBatches; ++m) {
      const std::string mb = "@mb" + std::to_string(m);
      x.push_back(b.Buffer("data.input" + mb, {kMb, kF}, v1::Buffer::DATA));
      h.push_back(b.Buffer("fc0.out" + mb, {kMb, kH}));
      act.push_back(b.Buffer("relu0.out" + mb, {kMb, kH}));
      dact.push_back(b.Buffer("relu0.out@grad" + mb, {kMb, kH}, v1::Buffer::GRAD));
      dh.push_back(b.Buffer("fc0.out@grad" + mb, {kMb, kH}, v1::Buffer::GRAD));
    }
    b.Op(Instruction::FILL, {}, {dw0})->set_scale(0.0f);
    b.Op(Instruction::FILL, {}, {db0})->set_scale(0.0f);
    for (int m = 0; m < kMicroBatches; ++m) {
      Tagged(b.Load(Instruction::LOAD_INPUT, x[m], {m * kMb, 0}, {kMb, kF}), F, m);
      Tagged(b.Op(Instruction::MATMUL, {x[m], w0}, {h[m]}), F, m);
      Tagged(b.Op(Instruction::ADD_BIAS, {h[m], b0}, {h[m]}), F, m);
      Tagged(b.Op(Instruction::RELU, {h[m]}, {act[m]}), F, m);
      Tagged(PointToPoint(b, Instruction::SEND, act[m], 1, 2 * m), F, m);
    }
    for (int m = 0; m < kMicroBatches; ++m) {
      Tagged(PointToPoint(b, Instruction::RECV, dact[m], 1, 2 * m + 1), B, m);
      Tagged(b.Op(Instruction::RELU_GRAD, {h[m], dact[m]}, {dh[m]}), B, m);
      Tagged(b.Op(Instruction::MATMUL, {x[m], dh[m]}, {dw0_mb}), B, m)->set_transpose_a(true);
      Tagged(b.Op(Instruction::ACCUMULATE, {dw0_mb}, {dw0}), B, m);
      Tagged(b.Op(Instruction::BIAS_GRAD, {dh[m]}, {db0_mb}), B, m);
      Tagged(b.Op(Instruction::ACCUMULATE, {db0_mb}, {db0}), B, m);
    }
    Tagged(PointToPoint(b, Instruction::RECV, loss, 1, kLossTag), O, -1);
    Instruction* sgd = Tagged(b.Op(Instruction::SGD, {w0, dw0}, {w0}), O, -1);
    sgd->set_lr(kLr);
    sgd->set_weight_decay(kWd);
    Tagged(b.Op(Instruction::SGD, {b0, db0}, {b0}), O, -1)->set_lr(kLr);
  } else {
    const int w1 = b.Buffer("fc1.weight", {kH, kO}, v1::Buffer::PARAM);
    const int dw1 = b.Buffer("fc1.weight@grad", {kH, kO}, v1::Buffer::GRAD);
    const int dw1_mb = b.Buffer("fc1.weight@grad.mb", {kH, kO}, v1::Buffer::GRAD);
    const int loss_mb = b.Buffer("loss.mb", {1}, v1::Buffer::LOSS);
    b.Uniform(w1, {kH, kO}, 0.5f);
    std::vector<int> y, pred, dpred;
    for (int m = 0; m < kMicroBatches; ++m) {
      const std::string mb = "@mb" + std::to_string(m);
      act.push_back(b.Buffer("relu0.out" + mb, {kMb, kH}));
      dact.push_back(b.Buffer("relu0.out@grad" + mb, {kMb, kH}, v1::Buffer::GRAD));
      y.push_back(b.Buffer("data.label" + mb, {kMb, kO}, v1::Buffer::DATA));
      pred.push_back(b.Buffer("fc1.out" + mb, {kMb, kO}));
      dpred.push_back(b.Buffer("fc1.out@grad" + mb, {kMb, kO}, v1::Buffer::GRAD));
    }
    b.Op(Instruction::FILL, {}, {dw1})->set_scale(0.0f);
    b.Op(Instruction::FILL, {}, {loss})->set_scale(0.0f);
    for (int m = 0; m < kMicroBatches; ++m) {
      Tagged(PointToPoint(b, Instruction::RECV, act[m], 0, 2 * m), F, m);
      Tagged(b.Load(Instruction::LOAD_LABEL, y[m], {m * kMb, 0}, {kMb, kO}), F, m);
      Tagged(b.Op(Instruction::MATMUL, {act[m], w1}, {pred[m]}), F, m);
      Tagged(b.Op(Instruction::MSE_LOSS, {pred[m], y[m]}, {loss_mb}), F, m)
          ->set_scale(1.0f / (kB * kO));
      Tagged(b.Op(Instruction::ACCUMULATE, {loss_mb}, {loss}), F, m);
    }
    for (int m = 0; m < kMicroBatches; ++m) {
      Tagged(b.Op(Instruction::MSE_GRAD, {pred[m], y[m]}, {dpred[m]}), B, m)
          ->set_scale(2.0f / (kB * kO));
      Tagged(b.Op(Instruction::MATMUL, {act[m], dpred[m]}, {dw1_mb}), B, m)->set_transpose_a(true);
      Tagged(b.Op(Instruction::ACCUMULATE, {dw1_mb}, {dw1}), B, m);
      Tagged(b.Op(Instruction::MATMUL, {dpred[m], w1}, {dact[m]}), B, m)->set_transpose_b(true);
      Tagged(PointToPoint(b, Instruction::SEND, dact[m], 0, 2 * m + 1), B, m);
    }
    Tagged(PointToPoint(b, Instruction::SEND, loss, 0, kLossTag), O, -1);
    Tagged(b.Op(Instruction::SGD, {w1, dw1}, {w1}), O, -1)->set_lr(kLr);
  }
  return b.program();
}

TEST(ExecutorTest, TwoStagePipelineMatchesFloat64Reference) {
  const int kSteps = 3;
  MlpReference ref;
  ref.Run(20240607, kSteps);
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll({PipelineProgram(0, false), PipelineProgram(1, false)}, kSteps, &losses, &execs);
  ASSERT_EQ(losses[0].size(), kSteps);
  ASSERT_EQ(losses[1].size(), kSteps);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(losses[1][s], ref.losses[s], 1e-5 * ref.losses[s]) << "step " << s + 1;
    EXPECT_EQ(losses[0][s], losses[1][s]) << "step " << s + 1;  // sent back to stage 0
  }
  auto w0 = execs[0]->ReadBuffer("fc0.weight");
  auto b0 = execs[0]->ReadBuffer("fc0.bias");
  auto w1 = execs[1]->ReadBuffer("fc1.weight");
  ASSERT_TRUE(w0.ok() && b0.ok() && w1.ok());
  ExpectAllClose(*w0, ref.w0, 1e-5, 1e-6, "fc0.weight");
  ExpectAllClose(*b0, ref.b0, 1e-5, 1e-6, "fc0.bias");
  ExpectAllClose(*w1, ref.w1, 1e-5, 1e-6, "fc1.weight");
  // Untraced: no spans.
  EXPECT_TRUE(execs[0]->TakeSpans().empty());
}

TEST(ExecutorTest, TraceHasOneSpanPerWorkItemAndPerTransfer) {
  const int64_t before_us = absl::ToUnixMicros(absl::Now());
  std::vector<std::vector<float>> losses, traced_losses;
  std::vector<std::unique_ptr<Executor>> execs, traced;
  RunAll({PipelineProgram(0, false), PipelineProgram(1, false)}, 1, &losses, &execs);
  RunAll({PipelineProgram(0, true), PipelineProgram(1, true)}, 1, &traced_losses, &traced);
  const int64_t after_us = absl::ToUnixMicros(absl::Now());
  // Tracing changes no number.
  EXPECT_EQ(losses[0], traced_losses[0]);

  struct Want {
    std::string name, category;
    int micro_batch, chunk;
  };
  const std::vector<std::vector<Want>> want = {
      {{"compute", "compute", -1, -1},
       {"load mb0 c0", "data", 0, 0},
       {"F mb0 c0", "forward", 0, 0},
       {"send relu0.out@mb0 to r1", "send", 0, 0},
       {"load mb1 c0", "data", 1, 0},
       {"F mb1 c0", "forward", 1, 0},
       {"send relu0.out@mb1 to r1", "send", 1, 0},
       {"recv relu0.out@grad@mb0 from r1", "recv", 0, 0},
       {"B mb0 c0", "backward", 0, 0},
       {"recv relu0.out@grad@mb1 from r1", "recv", 1, 0},
       {"B mb1 c0", "backward", 1, 0},
       {"recv loss from r1", "recv", -1, -1},
       {"optimizer", "optimizer", -1, -1}},
      {{"compute", "compute", -1, -1},
       {"recv relu0.out@mb0 from r0", "recv", 0, 0},
       {"load mb0 c0", "data", 0, 0},
       {"F mb0 c0", "forward", 0, 0},
       {"recv relu0.out@mb1 from r0", "recv", 1, 0},
       {"load mb1 c0", "data", 1, 0},
       {"F mb1 c0", "forward", 1, 0},
       {"B mb0 c0", "backward", 0, 0},
       {"send relu0.out@grad@mb0 to r0", "send", 0, 0},
       {"B mb1 c0", "backward", 1, 0},
       {"send relu0.out@grad@mb1 to r0", "send", 1, 0},
       {"send loss to r0", "send", -1, -1},
       {"optimizer", "optimizer", -1, -1}},
  };
  for (int r = 0; r < 2; ++r) {
    std::vector<v1::TraceSpan> spans = traced[r]->TakeSpans();
    ASSERT_EQ(spans.size(), want[r].size()) << "rank " << r;
    for (size_t i = 0; i < spans.size(); ++i) {
      const v1::TraceSpan& span = spans[i];
      EXPECT_EQ(span.name(), want[r][i].name) << "rank " << r << " span " << i;
      EXPECT_EQ(span.category(), want[r][i].category) << span.name();
      EXPECT_EQ(span.micro_batch(), want[r][i].micro_batch) << span.name();
      EXPECT_EQ(span.chunk(), want[r][i].chunk) << span.name();
      EXPECT_GE(span.duration_us(), 1) << span.name();
      EXPECT_GE(span.start_us(), before_us) << span.name();
      EXPECT_LE(span.start_us() + span.duration_us(), after_us + 1000) << span.name();
      // The spans tile the step: each starts where the previous one ended.
      if (i > 0) {
        EXPECT_EQ(span.start_us(), spans[i - 1].start_us() + spans[i - 1].duration_us())
            << span.name();
      }
    }
    EXPECT_TRUE(traced[r]->TakeSpans().empty()) << "TakeSpans moves them out";
  }
}

// Expects Create to fail with INVALID_ARGUMENT whose message holds every one of `texts`.
void ExpectRejected(const v1::Program& p, CommunicatorFactory* factory,
                    const std::vector<std::string>& texts) {
  absl::Status s = Executor::Create(p, factory).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& t : texts) EXPECT_NE(s.message().find(t), std::string::npos) << s;
}

TEST(ExecutorTest, CreateRejectsBadPointToPointAndAccumulate) {
  LocalCommunicatorFactory factory(std::make_shared<LocalWorld>(2, absl::Seconds(1)), 0);
  auto expect_error = [&](const v1::Program& p, const std::string& text) {
    ExpectRejected(p, &factory, {text});
  };
  auto first = [](v1::Program& p, Instruction::Op op) {
    for (Instruction& ins : *p.mutable_instructions()) {
      if (ins.op() == op) return &ins;
    }
    return static_cast<Instruction*>(nullptr);
  };
  v1::Program p = PipelineProgram(0, false);
  first(p, Instruction::SEND)->set_peer(2);
  expect_error(p, "peer 2 is not a member of group 0 (pp) ranks [0,1]");
  p = PipelineProgram(0, false);
  first(p, Instruction::SEND)->set_peer(0);
  expect_error(p, "peer 0 is this rank itself");
  p = PipelineProgram(0, false);
  first(p, Instruction::RECV)->add_inputs(0);
  expect_error(p, "RECV");
  p = PipelineProgram(0, false);
  first(p, Instruction::SEND)->set_group(3);
  expect_error(p, "group 3 is not in the program");
  p = PipelineProgram(0, false);
  first(p, Instruction::ACCUMULATE)->set_inputs(0, 0);  // fc0.weight@grad += loss
  expect_error(p, "ACCUMULATE");
  p = PipelineProgram(0, false);
  first(p, Instruction::FILL)->add_inputs(1);
  expect_error(p, "expects 0 inputs and 1 outputs");
}


// ---- Typed buffers: ADD, CAST, data loads, typed collectives ----

// x rounded to bfloat16 (8 significant bits, to nearest even), from the definition rather than
// common/dtype.h's bit manipulation.
double Bf16Round(float x) {
  if (x == 0.0f || !std::isfinite(x)) return x;
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);  // x = m 2^e, 0.5 <= |m| < 1
  return std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8);
}

// Element `element` of the global tensor `tensor` initialized U(-bound, bound) (Philox, keyed
// by the tensor's name).
float GlobalUniform(const std::string& tensor, int64_t element, float bound) {
  return PhiloxUniform(20240607, Fnv1a64(tensor), element, bound);
}

// Philox values of the global tensor `name` [n], as Uniform(name, ..., bound) initializes it.
std::vector<float> UniformValues(const std::string& name, int64_t n, float bound) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = GlobalUniform(name, i, bound);
  return v;
}

// a, b, c [2,3]: s2 = a + b; t = a (ADD of one input: a copy), then t = t + b + c in place (3
// inputs, out = input 0);
// u = b, then u = a + u (out = input 1); loss = sum((s2 - t)^2) = sum(c^2).
v1::Program AddProgram() {
  ProgramBuilder b(0, 1);
  const int a = b.Buffer("a", {2, 3}, v1::Buffer::PARAM);
  const int bb = b.Buffer("b", {2, 3}, v1::Buffer::PARAM);
  const int c = b.Buffer("c", {2, 3}, v1::Buffer::PARAM);
  const int s2 = b.Buffer("s2", {2, 3});
  const int t = b.Buffer("t", {2, 3});
  const int u = b.Buffer("u", {2, 3});
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  for (int id : {a, bb, c}) b.Uniform(id, {2, 3}, 1.0f);
  b.Op(Instruction::ADD, {a, bb}, {s2}, "a + b");
  b.Op(Instruction::ADD, {a}, {t}, "t = a");
  b.Op(Instruction::ADD, {t, bb, c}, {t}, "t += b + c");
  b.Op(Instruction::SCALE, {bb}, {u})->set_scale(1.0f);
  b.Op(Instruction::ADD, {a, u}, {u}, "u = a + u");
  b.Op(Instruction::MSE_LOSS, {s2, t}, {loss})->set_scale(1.0f);
  return b.program();
}

TEST(ExecutorTest, AddSumsOneOrMoreInputsAndMayUpdateInPlace) {
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll({AddProgram()}, 1, &losses, &execs);
  ASSERT_NE(execs[0], nullptr);
  const std::vector<float> a = UniformValues("a", 6, 1.0f), b = UniformValues("b", 6, 1.0f),
                           c = UniformValues("c", 6, 1.0f);
  std::vector<double> s2, t;
  double loss = 0;
  for (int i = 0; i < 6; ++i) {
    s2.push_back(static_cast<double>(a[i]) + b[i]);
    t.push_back(static_cast<double>(a[i]) + b[i] + c[i]);
    loss += static_cast<double>(c[i]) * c[i];
  }
  ExpectAllClose(*execs[0]->ReadBuffer("s2"), s2, 1e-6, 1e-7, "s2");
  ExpectAllClose(*execs[0]->ReadBuffer("t"), t, 1e-6, 1e-7, "t");
  ExpectAllClose(*execs[0]->ReadBuffer("u"), s2, 1e-6, 1e-7, "u");
  EXPECT_NEAR(losses[0][0], loss, 1e-5 * loss);

  auto find = [](v1::Program& p, const std::string& comment) {
    for (Instruction& ins : *p.mutable_instructions()) {
      if (ins.comment() == comment) return &ins;
    }
    return static_cast<Instruction*>(nullptr);
  };
  v1::Program p = AddProgram();
  find(p, "a + b")->mutable_inputs()->Clear();
  ExpectRejected(p, nullptr, {"instruction 0 (ADD 'a + b')", "expects 1 or more inputs, got 0"});
  p = AddProgram();
  find(p, "t += b + c")->set_inputs(2, 4);  // t = t + b + t: t is overwritten before it is read
  ExpectRejected(p, nullptr, {"instruction 2 (ADD", "output aliases input 2 (buffer 4 't'"});
  p = AddProgram();
  p.mutable_buffers(2)->set_shape(1, 2);  // c [2,2]
  p.mutable_init(2)->set_global_shape(1, 2);
  p.mutable_init(2)->mutable_box()->set_lengths(1, 2);
  ExpectRejected(p, nullptr, {"input 2 (buffer 2 'c' f32[2,2]) is not the shape of input 0"});
  p = AddProgram();
  p.mutable_buffers(1)->set_dtype(v1::BF16);  // widened
  ExpectAccepted(p);
  p.mutable_buffers(1)->set_dtype(v1::I32);
  ExpectRejected(p, nullptr, {"instruction 0 (ADD 'a + b')", "input 1 (buffer 1 'b' i32[2,3]) "
                              "is i32; ADD computes in f32 (bf16 operands are widened)"});
}

// a [3,5] f32 -> h bf16 -> r f32; loss = sum((r - a)^2), the rounding error.
TEST(ExecutorTest, CastRoundsToBf16AndBack) {
  ProgramBuilder b(0, 1);
  const int a = b.Buffer("a", {3, 5}, v1::Buffer::PARAM);
  const int h = b.Buffer("h", {3, 5}, v1::Buffer::ACTIVATION, v1::BF16);
  const int r = b.Buffer("r", {3, 5});
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  b.Uniform(a, {3, 5}, 1.0f);
  b.Op(Instruction::CAST, {a}, {h});
  b.Op(Instruction::CAST, {h}, {r});
  b.Op(Instruction::MSE_LOSS, {r, a}, {loss})->set_scale(1.0f);
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll({b.program()}, 1, &losses, &execs);
  ASSERT_NE(execs[0], nullptr);
  const std::vector<float> av = UniformValues("a", 15, 1.0f);
  std::vector<double> rounded;
  double err = 0;
  for (float v : av) {
    rounded.push_back(Bf16Round(v));
    err += (rounded.back() - v) * (rounded.back() - v);
  }
  // ReadBuffer converts the bf16 buffer to floats exactly.
  ExpectAllClose(*execs[0]->ReadBuffer("h"), rounded, 0, 0, "h (bf16)");
  ExpectAllClose(*execs[0]->ReadBuffer("r"), rounded, 0, 0, "r");
  EXPECT_GT(err, 0.0);
  EXPECT_NEAR(losses[0][0], err, 1e-4 * err);
}

// An int32 .npy [4,3] loaded as int32 and cast to float32; a float32 load of it is rejected.
TEST(ExecutorTest, CastsAnInt32LoadToFloat) {
  const std::string input = TempPath("ids.npy");
  const std::vector<int32_t> ids = {-7, 0, 5, 123456789, -2147483647, 3, 1, 2, 4, 16777217, 8, -9};
  ASSERT_TRUE(NpyFile::Write(input, {4, 3}, ids.data()).ok());
  auto program = [&](v1::DType load_dtype) {
    ProgramBuilder b(0, 1);
    b.program().mutable_data()->set_source("npy");
    b.program().mutable_data()->set_input(input);
    b.program().mutable_data()->set_batch_size(2);
    const int xi = b.Buffer("xi", {2, 3}, v1::Buffer::DATA, load_dtype);
    const int xf = b.Buffer("xf", {2, 3});
    const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
    b.program().set_loss_buffer(loss);
    b.Load(Instruction::LOAD_INPUT, xi, {0, 0}, {2, 3});
    b.Op(Instruction::CAST, {xi}, {xf});
    b.Op(Instruction::MSE_LOSS, {xf, xf}, {loss})->set_scale(1.0f);
    return b.program();
  };
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll({program(v1::I32)}, 2, &losses, &execs);  // step 2 reads rows 2..3
  ASSERT_NE(execs[0], nullptr);
  std::vector<double> want;
  for (int i = 6; i < 12; ++i) want.push_back(static_cast<float>(ids[i]));  // nearest float
  ExpectAllClose(*execs[0]->ReadBuffer("xf"), want, 0, 0, "xf");
  ExpectAllClose(*execs[0]->ReadBuffer("xi"), want, 0, 0, "xi read as floats");
  EXPECT_EQ(want[3], 16777216.0);  // 2^24 + 1 is not a float: the cast rounds it

  ExpectRejected(program(v1::F32), nullptr,
                 {"instruction 0 (LOAD_INPUT)", "output (buffer 0 'xi' f32[2,3]) is f32 but "
                  "data.input (" + input + ") holds i32"});
}

// Rank r of 2 loads x [2,6] (values (i - 5) / 8, exact in bf16), scales it by r + 1 and keeps
// columns [3r, 3r + 3). Its piece goes round as bf16 (all-gather along axis 1 through a planned
// bf16 scratch) and as int32 (8 x the piece: all-gather along axis 0, and along axis 1 through the
// executor's own scratch); x scaled, as bf16, is averaged over the ranks by a reduce-scatter.
v1::Program TypedCollectivesProgram(int r, const std::string& input) {
  ProgramBuilder b(r, 2);
  b.program().mutable_data()->set_source("npy");
  b.program().mutable_data()->set_input(input);
  b.program().mutable_data()->set_batch_size(2);
  b.Group(0, {0, 1}, "mp");
  const int x = b.Buffer("x", {2, 6}, v1::Buffer::DATA);
  const int xs = b.Buffer("xs", {2, 6});
  const int piece = b.Buffer("piece", {2, 3});
  const int pb = b.Buffer("pb", {2, 3}, v1::Buffer::ACTIVATION, v1::BF16);
  const int gb = b.Buffer("gb", {2, 6}, v1::Buffer::ACTIVATION, v1::BF16);
  const int pack = b.Buffer("gb.scratch", {12}, v1::Buffer::SCRATCH, v1::BF16);
  const int p8 = b.Buffer("p8", {2, 3});
  const int pi = b.Buffer("pi", {2, 3}, v1::Buffer::ACTIVATION, v1::I32);
  const int gi0 = b.Buffer("gi0", {4, 3}, v1::Buffer::ACTIVATION, v1::I32);
  const int gi1 = b.Buffer("gi1", {2, 6}, v1::Buffer::ACTIVATION, v1::I32);
  const int xb = b.Buffer("xb", {2, 6}, v1::Buffer::ACTIVATION, v1::BF16);
  const int rsb = b.Buffer("rsb", {1, 6}, v1::Buffer::ACTIVATION, v1::BF16);
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  auto gather = [&](int in, int out, int axis, std::vector<int64_t> splits,
                    const std::string& comment = "") {
    Instruction* ins = b.Op(Instruction::ALL_GATHER, {in}, {out}, comment);
    ins->set_group(0);
    ins->set_axis(axis);
    for (int64_t len : splits) ins->add_split_sizes(len);
    return ins;
  };
  b.Load(Instruction::LOAD_INPUT, x, {0, 0}, {2, 6});
  b.Op(Instruction::SCALE, {x}, {xs})->set_scale(r + 1.0f);
  Instruction* slice = b.Op(Instruction::SLICE, {xs}, {piece});
  slice->set_axis(1);
  slice->set_offset(3 * r);
  slice->set_length(3);
  b.Op(Instruction::CAST, {piece}, {pb});
  gather(pb, gb, 1, {3, 3}, "bf16 along axis 1")->set_scratch(pack);
  b.Op(Instruction::SCALE, {piece}, {p8})->set_scale(8.0f);
  b.Op(Instruction::CAST, {p8}, {pi});
  gather(pi, gi0, 0, {2, 2});
  gather(pi, gi1, 1, {3, 3});
  b.Op(Instruction::CAST, {xs}, {xb});
  Instruction* rs = b.Op(Instruction::REDUCE_SCATTER, {xb}, {rsb}, "bf16 Partial(avg)");
  rs->set_group(0);
  rs->set_axis(0);
  rs->set_reduce(v1::Placement::AVG);
  rs->add_split_sizes(1);
  rs->add_split_sizes(1);
  b.Op(Instruction::MSE_LOSS, {x, x}, {loss})->set_scale(1.0f);
  return b.program();
}

TEST(ExecutorTest, TypedCollectivesBetweenTwoRanks) {
  const std::string input = TempPath("typed_x.npy");
  std::vector<float> v(12);
  for (int i = 0; i < 12; ++i) v[i] = (i - 5) / 8.0f;
  ASSERT_TRUE(NpyFile::Write(input, {2, 6}, v.data()).ok());
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll({TypedCollectivesProgram(0, input), TypedCollectivesProgram(1, input)}, 1, &losses,
         &execs);
  // Column j came from rank j / 3, which scaled x by j / 3 + 1.
  std::vector<double> gathered, ids_by_row, ids_by_column;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 6; ++j) {
      gathered.push_back((j / 3 + 1) * v[i * 6 + j]);
      ids_by_column.push_back((j / 3 + 1) * (i * 6 + j - 5));
    }
  }
  for (int r = 0; r < 2; ++r) {  // rank r's rows of [4,3]: its piece times 8
    for (int i = 0; i < 2; ++i)
      for (int j = 3 * r; j < 3 * r + 3; ++j) ids_by_row.push_back((r + 1) * (i * 6 + j - 5));
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(execs[r], nullptr);
    const std::string rank = " of rank " + std::to_string(r);
    ExpectAllClose(*execs[r]->ReadBuffer("gb"), gathered, 0, 0, "gb (bf16)" + rank);
    ExpectAllClose(*execs[r]->ReadBuffer("gi0"), ids_by_row, 0, 0, "gi0 (i32)" + rank);
    ExpectAllClose(*execs[r]->ReadBuffer("gi1"), ids_by_column, 0, 0, "gi1 (i32)" + rank);
    // Row r of the mean of 1 x and 2 x: 1.5 x, exact in bf16.
    std::vector<double> mean;
    for (int j = 0; j < 6; ++j) mean.push_back(1.5 * v[r * 6 + j]);
    ExpectAllClose(*execs[r]->ReadBuffer("rsb"), mean, 0, 0, "rsb (bf16 avg)" + rank);
  }

  LocalCommunicatorFactory factory(std::make_shared<LocalWorld>(2, absl::Seconds(1)), 0);
  v1::Program p = TypedCollectivesProgram(0, input);
  p.mutable_buffers(4)->set_dtype(v1::F32);  // gb
  ExpectRejected(p, &factory, {"(ALL_GATHER 'bf16 along axis 1')", "ALL_GATHER moves one dtype: "
                               "input 0 (buffer 3 'pb' bf16[2,3]) is bf16 but output 0 (buffer 4 "
                               "'gb' f32[2,6]) is f32"});
  p = TypedCollectivesProgram(0, input);
  p.mutable_buffers(11)->set_dtype(v1::I32);  // rsb
  p.mutable_buffers(10)->set_dtype(v1::I32);  // xb
  ExpectRejected(p, &factory, {"(REDUCE_SCATTER 'bf16 Partial(avg)')",
                               "avg of buffer 10 'xb' i32[2,6]: a mean of integers"});
}

// ---- Asynchronous collectives ----

// Rank 0 all-reduces a on group 0, then sends b to rank 1 on group 1; rank 1 receives b first,
// then joins the all-reduce. A blocking all-reduce on rank 0 waits for rank 1, which waits for
// b: a deadlock. A collective on its communicator's thread lets rank 0 go on to the SEND, and its
// MSE_LOSS, which reads a, waits for the all-reduce. loss = 0.5 * sum((a0 + a1 - b)^2).
v1::Program CrossedProgram(int rank, bool blocking, bool trace) {
  ProgramBuilder b(rank, 2);
  b.program().set_blocking_collectives(blocking);
  b.program().set_trace(trace);
  b.Group(0, {0, 1}, "dp");
  b.Group(1, {0, 1}, "pp");
  const int a = b.Buffer("a", {6}, v1::Buffer::PARAM);
  const int v = b.Buffer("b", {6}, v1::Buffer::PARAM);
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  b.Uniform(a, {6}, 1.0f)->set_tensor_key(Fnv1a64(rank == 0 ? "a on rank 0" : "a on rank 1"));
  if (rank == 0) {
    b.Uniform(v, {6}, 2.0f);
  } else {
    b.Init(v, v1::ParamInit::ZEROS, {6});
  }
  auto all_reduce = [&] { b.Op(Instruction::ALL_REDUCE, {a}, {a}, "a")->set_group(0); };
  auto transfer = [&] {
    Instruction* ins = rank == 0 ? b.Op(Instruction::SEND, {v}, {}) : b.Op(Instruction::RECV, {}, {v});
    ins->set_group(1);
    ins->set_peer(1 - rank);
    ins->set_tag(7);
  };
  if (rank == 0) {
    all_reduce();
    transfer();
  } else {
    transfer();
    all_reduce();
  }
  b.Op(Instruction::MSE_LOSS, {a, v}, {loss})->set_scale(0.5f);
  return b.program();
}

TEST(ExecutorTest, CollectivesRunWhileTheExecutorGoesOn) {
  // The reference: each rank's initial a and rank 0's b, read off 1-rank executors of the same
  // inits (no instructions run before Initialize's values are read).
  std::vector<std::vector<float>> a0(2);
  std::vector<float> b0;
  for (int r = 0; r < 2; ++r) {
    v1::Program p = CrossedProgram(r, false, false);
    p.clear_instructions();
    p.clear_groups();
    p.set_world_size(1);
    p.set_rank(0);
    auto exec = Executor::Create(p, nullptr);
    ASSERT_TRUE(exec.ok()) << exec.status();
    ASSERT_TRUE((*exec)->Initialize().ok());
    a0[r] = *(*exec)->ReadBuffer("a");
    if (r == 0) b0 = *(*exec)->ReadBuffer("b");
  }
  double want = 0.0;
  for (int i = 0; i < 6; ++i) {
    const double d = static_cast<double>(a0[0][i]) + a0[1][i] - b0[i];
    want += 0.5 * d * d;
  }

  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll({CrossedProgram(0, false, true), CrossedProgram(1, false, true)}, 2, &losses, &execs);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(losses[r].size(), 2u) << "rank " << r;
    EXPECT_NEAR(losses[r][0], want, 1e-5 * want) << "rank " << r;
    ASSERT_NE(execs[r], nullptr);
    EXPECT_EQ(*execs[r]->ReadBuffer("b"), b0) << "rank " << r;
    // Rank 0's all-reduce ran on the communicators' thread (a span on lane 1); rank 1's, whose
    // result the next instruction reads, on the executor's (lane 0).
    std::vector<int> collectives_on_lane(2, 0);
    for (const v1::TraceSpan& span : execs[r]->TakeSpans()) {
      if (span.category() != "collective") continue;
      EXPECT_EQ(span.name(), "all_reduce a");
      ++collectives_on_lane[span.lane()];
    }
    EXPECT_EQ(collectives_on_lane, (r == 0 ? std::vector<int>{0, 1} : std::vector<int>{1, 0}))
        << "rank " << r;
  }

  // The same programs with blocking collectives deadlock, which the local world's timeout ends:
  // the difference is the asynchronous run.
  const std::vector<absl::Status> status = RunStepStatuses(
      {CrossedProgram(0, true, false), CrossedProgram(1, true, false)}, absl::Seconds(1));
  EXPECT_FALSE(status[0].ok() && status[1].ok());
}

// A collective that fails on its thread fails the step, naming the instruction; the executor
// waits for every started collective before returning.
TEST(ExecutorTest, AnAsynchronousCollectiveErrorFailsTheStep) {
  // Rank 1 computes its loss and never joins the all-reduce: rank 0's times out on its thread.
  auto only = [](v1::Program p, Instruction::Op keep_a, Instruction::Op keep_b) {
    v1::Program q = p;
    q.clear_instructions();
    for (const Instruction& ins : p.instructions()) {
      if (ins.op() == keep_a || ins.op() == keep_b) *q.add_instructions() = ins;
    }
    return q;
  };
  const std::vector<absl::Status> status = RunStepStatuses(
      {only(CrossedProgram(0, false, false), Instruction::ALL_REDUCE, Instruction::MSE_LOSS),
       only(CrossedProgram(1, false, false), Instruction::MSE_LOSS, Instruction::MSE_LOSS)},
      absl::Milliseconds(300));
  EXPECT_TRUE(status[1].ok()) << status[1];
  ASSERT_FALSE(status[0].ok());
  EXPECT_NE(std::string(status[0].message()).find("step 1, instruction 0 (ALL_REDUCE 'a')"),
            std::string::npos)
      << status[0];
}

// ---- The arena ----

// x [2,3] @ w0 [3,4] -> h, relu -> r, @ w1 [4,2] -> y, MSE against t [2,2] -> loss. The
// parameters sit at the bottom of a planned arena; y shares h's bytes and the loss r's, their
// lifetimes being disjoint (h: instructions 0..1, r: 1..2, y: 2..3, loss: 3..3).
v1::Program ArenaProgram() {
  ProgramBuilder b(0, 1);
  const int x = b.Buffer("x", {2, 3}, v1::Buffer::PARAM);
  const int w0 = b.Buffer("w0", {3, 4}, v1::Buffer::PARAM);
  const int w1 = b.Buffer("w1", {4, 2}, v1::Buffer::PARAM);
  const int t = b.Buffer("t", {2, 2}, v1::Buffer::PARAM);
  const int h = b.Buffer("h", {2, 4});
  const int r = b.Buffer("r", {2, 4});
  const int y = b.Buffer("y", {2, 2});
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  b.Uniform(x, {2, 3}, 1.0f);
  b.Uniform(w0, {3, 4}, 1.0f);
  b.Uniform(w1, {4, 2}, 1.0f);
  b.Uniform(t, {2, 2}, 1.0f);
  b.Op(Instruction::MATMUL, {x, w0}, {h});
  b.Op(Instruction::RELU, {h}, {r});
  b.Op(Instruction::MATMUL, {r, w1}, {y});
  b.Op(Instruction::MSE_LOSS, {y, t}, {loss})->set_scale(0.25f);
  const int64_t offsets[] = {0, 256, 512, 768, 1024, 1280, 1024, 1280};
  for (int i = 0; i < 8; ++i) b.program().mutable_buffers(i)->set_offset(offsets[i]);
  b.program().set_arena_bytes(1536);
  return b.program();
}

TEST(ExecutorTest, ArenaBuffersShareBytesWhenTheirLifetimesAreDisjoint) {
  const std::vector<float> x = UniformValues("x", 6, 1.0f), w0 = UniformValues("w0", 12, 1.0f),
                           w1 = UniformValues("w1", 8, 1.0f), t = UniformValues("t", 4, 1.0f);
  std::vector<double> h(8, 0), y(4, 0);
  double loss = 0;
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      for (int k = 0; k < 3; ++k) h[i * 4 + j] += static_cast<double>(x[i * 3 + k]) * w0[k * 4 + j];
    }
    for (int o = 0; o < 2; ++o) {
      for (int j = 0; j < 4; ++j) y[i * 2 + o] += std::max(h[i * 4 + j], 0.0) * w1[j * 2 + o];
      loss += 0.25 * (y[i * 2 + o] - t[i * 2 + o]) * (y[i * 2 + o] - t[i * 2 + o]);
    }
  }
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll({ArenaProgram()}, 2, &losses, &execs);
  ASSERT_NE(execs[0], nullptr);
  EXPECT_NEAR(losses[0][0], loss, 1e-5 * loss);
  EXPECT_EQ(losses[0][1], losses[0][0]);  // nothing trains: the second step sees the same values
  const std::vector<float> got_y = *execs[0]->ReadBuffer("y");
  ExpectAllClose(got_y, y, 1e-5, 1e-6, "y");
  // y was written over h's first 4 elements, the loss over r's first.
  const std::vector<float> got_h = *execs[0]->ReadBuffer("h");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got_h[i], got_y[i]) << i;
  ExpectAllClose(std::vector<float>(got_h.begin() + 4, got_h.end()),
                 std::vector<double>(h.begin() + 4, h.end()), 1e-5, 1e-6, "h row 1");
  EXPECT_EQ((*execs[0]->ReadBuffer("r"))[0], losses[0][1]);
  // The step held the arena and nothing else.
  EXPECT_EQ(execs[0]->last_step_peak_bytes(), 1536);
}

TEST(ExecutorTest, ArenaLayoutsThatBreakTheLifetimesAreRejected) {
  v1::Program p = ArenaProgram();
  p.mutable_buffers(5)->set_offset(1024);  // r onto h: both alive at instruction 1
  ExpectRejected(p, nullptr, {"arena layout: buffer 4 'h' f32[2,4] (bytes [1024, 1056), alive "
                              "during instructions 0..1) and buffer 5 'r' f32[2,4] (bytes "
                              "[1024, 1056), alive during instructions 1..2) share bytes"});
  p = ArenaProgram();
  p.mutable_buffers(2)->set_offset(0);  // w1 onto x: parameters live for the whole job
  ExpectRejected(p, nullptr, {"buffer 0 'x' f32[2,3]", "buffer 2 'w1' f32[4,2]",
                              "alive for the whole job"});
  p = ArenaProgram();
  p.mutable_buffers(6)->set_offset(1000);
  ExpectRejected(p, nullptr, {"buffer 6 'y' f32[2,2] has offset 1000, not a multiple of 256"});
  p = ArenaProgram();
  p.mutable_buffers(6)->set_offset(1536);
  ExpectRejected(p, nullptr, {"buffer 6 'y' f32[2,2] at bytes [1536, 1552) does not fit in the "
                              "arena of 1536 bytes"});
}

// Without Program.arena_bytes the buffers lie back to back, one kArenaAlignment-aligned slot
// each; the collectives that pack along an inner axis use the executor's own scratch unless the
// program plans one. A step's peak on the CPU kernels is exactly the arena plus that scratch
// (each block rounded up to 64 bytes, the CPU allocator's rule).
TEST(ExecutorTest, PeakBytesIsTheArenaPlusTheExecutorsOwnScratch) {
  const std::string input = TempPath("peak_x.npy");
  std::vector<float> xs(2 * 3 * 5);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 0.25f * i - 2.0f;
  ASSERT_TRUE(NpyFile::Write(input, {2, 3, 5}, xs.data()).ok());
  auto round64 = [](int64_t n) { return (n + 63) / 64 * 64; };
  auto arena_of = [](const v1::Program& p) {
    int64_t bytes = 0;
    for (const v1::Buffer& b : p.buffers()) {
      int64_t n = 4;  // every buffer here is f32
      for (int64_t d : b.shape()) n *= d;
      bytes += (n + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    }
    return bytes;
  };
  std::vector<v1::Program> own, planned;
  for (int r = 0; r < 2; ++r) {
    own.push_back(AxisCollectivesProgram(r, input));
    // One planned scratch of 30 floats serves the three collectives: each packs a whole
    // [2,3,5] tensor (the reduce-scatters their input, the all-gather its output).
    v1::Program p = own.back();
    v1::Buffer* pack = p.add_buffers();
    pack->set_id(p.buffers_size() - 1);
    pack->set_name("pack");
    pack->add_shape(30);
    pack->set_role(v1::Buffer::SCRATCH);
    for (Instruction& ins : *p.mutable_instructions()) {
      if (ins.op() == Instruction::REDUCE_SCATTER || ins.op() == Instruction::ALL_GATHER) {
        ins.set_scratch(pack->id());
      }
    }
    planned.push_back(std::move(p));
  }
  std::vector<std::vector<float>> own_losses, planned_losses;
  std::vector<std::unique_ptr<Executor>> own_execs, planned_execs;
  RunAll(own, 1, &own_losses, &own_execs);
  RunAll(planned, 1, &planned_losses, &planned_execs);
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(own_execs[r], nullptr);
    ASSERT_NE(planned_execs[r], nullptr);
    EXPECT_EQ(planned_losses[r], own_losses[r]);
    for (const char* name : {"shard", "avg_shard", "gathered"}) {
      EXPECT_EQ(*planned_execs[r]->ReadBuffer(name), *own_execs[r]->ReadBuffer(name)) << name;
    }
    EXPECT_EQ(own_execs[r]->last_step_peak_bytes(), arena_of(own[r]) + round64(30 * 4));
    EXPECT_EQ(planned_execs[r]->last_step_peak_bytes(), arena_of(planned[r]));
  }

  // A planned scratch too small for what a collective packs is rejected at Create.
  LocalCommunicatorFactory factory(std::make_shared<LocalWorld>(2, absl::Seconds(1)), 0);
  v1::Program small = planned[0];
  small.mutable_buffers(small.buffers_size() - 1)->set_shape(0, 29);
  ExpectRejected(small, &factory, {"instruction 2 (REDUCE_SCATTER)", "scratch buffer 6 'pack' "
                                   "f32[29] holds 116 bytes; REDUCE_SCATTER packs 30 elements of "
                                   "f32 (120 bytes) there"});
}


// ---- The op registry and the transformer ops ----

// ---- The training recipe: the learning rate's schedule, the gradient norm and its clip, and
// the evaluation ----

// Runs `program` alone for `steps` steps, returning each step's learning rate and gradient norm
// (NaN when none), and leaving the executor in *out.
void RunAlone(const v1::Program& program, int steps, std::vector<double>* lrs,
              std::vector<double>* norms, std::unique_ptr<Executor>* out) {
  auto exec = Executor::Create(program, nullptr);
  ASSERT_TRUE(exec.ok()) << exec.status();
  ASSERT_TRUE((*exec)->Initialize().ok());
  for (int s = 1; s <= steps; ++s) {
    auto loss = (*exec)->RunStep(s);
    ASSERT_TRUE(loss.ok()) << loss.status();
    lrs->push_back((*exec)->last_step_lr());
    norms->push_back((*exec)->last_step_grad_norm().value_or(std::nan("")));
  }
  *out = *std::move(exec);
}

// The updates' lr is the peak, scaled at each step by the schedule (warmup 2, linear decay to
// 0.1 at step 4, then flat): SGD's step and WEIGHT_DECAY's factor both follow it.
TEST(ExecutorTest, TheScheduleScalesEveryUpdatesLearningRate) {
  ProgramBuilder b(0, 1);
  const int w = b.Buffer("w", {3}, v1::Buffer::PARAM);
  const int d = b.Buffer("d", {2}, v1::Buffer::PARAM);
  const int g = b.Buffer("w@grad", {3}, v1::Buffer::GRAD);
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  b.Init(w, v1::ParamInit::ZEROS, {3});
  b.Init(d, v1::ParamInit::ONES, {2});
  b.Op(Instruction::FILL, {}, {loss})->set_scale(0.0f);
  b.Op(Instruction::FILL, {}, {g})->set_scale(1.0f);
  Instruction* sgd = b.Op(Instruction::SGD, {w, g}, {w});
  sgd->set_lr(0.5f);
  Instruction* decay = b.Op(Instruction::WEIGHT_DECAY, {d}, {d});
  decay->set_lr(0.5f);
  decay->set_weight_decay(0.2f);
  b.program().set_steps(5);
  b.program().set_lr(0.5);
  v1::LrSchedule* schedule = b.program().mutable_lr_schedule();
  schedule->set_warmup_steps(2);
  schedule->set_decay("linear");
  schedule->set_decay_steps(4);
  schedule->set_min_lr(0.1);
  std::vector<double> lrs, norms;
  std::unique_ptr<Executor> exec;
  RunAlone(b.program(), 5, &lrs, &norms, &exec);
  ASSERT_EQ(lrs.size(), 5u);
  const std::vector<double> want = {0.25, 0.5, 0.3, 0.1, 0.1};
  double w_want = 0, d_want = 1;
  for (int s = 0; s < 5; ++s) {
    EXPECT_DOUBLE_EQ(lrs[s], want[s]) << "step " << s + 1;
    EXPECT_TRUE(std::isnan(norms[s])) << "no grad_norm_buffer, no norm";
    w_want -= want[s];
    d_want *= 1 - want[s] * 0.2;
  }
  EXPECT_NEAR((*exec->ReadBuffer("w"))[0], w_want, 1e-6);
  EXPECT_NEAR((*exec->ReadBuffer("d"))[1], d_want, 1e-6);
}

// SUM_SQUARES counts a gradient (scale 1) or not (scale 0, whatever it holds); their sum is the
// squared norm the worker reads back as grad_norm, and CLIP_COEFFICIENT's factor multiplies the
// gradient of the update that reads it.
TEST(ExecutorTest, TheGradientNormAndItsClipCoefficient) {
  ProgramBuilder b(0, 1);
  const int w = b.Buffer("w", {3}, v1::Buffer::PARAM);
  const int g1 = b.Buffer("w@grad", {3}, v1::Buffer::GRAD);
  const int g2 = b.Buffer("copy@grad", {2}, v1::Buffer::GRAD);
  const int s1 = b.Buffer("w@grad.sum_squares", {1});
  const int s2 = b.Buffer("copy@grad.sum_squares", {1});
  const int norm = b.Buffer("grad_norm_sq", {1}, v1::Buffer::LOSS);
  const int clip = b.Buffer("grad_clip", {1});
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  b.program().set_grad_norm_buffer(norm);
  b.program().set_lr(0.1);
  b.Init(w, v1::ParamInit::ZEROS, {3});
  b.Op(Instruction::FILL, {}, {loss})->set_scale(0.0f);
  b.Op(Instruction::FILL, {}, {g1})->set_scale(2.0f);
  b.Op(Instruction::FILL, {}, {g2})->set_scale(-7.0f);
  b.Op(Instruction::SUM_SQUARES, {g1}, {s1})->set_scale(1.0f);
  b.Op(Instruction::SUM_SQUARES, {g2}, {s2})->set_scale(0.0f);
  b.Op(Instruction::ADD, {s1, s2}, {norm});
  b.Op(Instruction::CLIP_COEFFICIENT, {norm}, {clip})->set_max_norm(1.5f);
  b.Op(Instruction::SGD, {w, g1, clip}, {w})->set_lr(0.1f);
  b.program().set_steps(1);
  std::vector<double> lrs, norms;
  std::unique_ptr<Executor> exec;
  RunAlone(b.program(), 1, &lrs, &norms, &exec);
  ASSERT_EQ(norms.size(), 1u);
  EXPECT_NEAR(norms[0], std::sqrt(12.0), 1e-6);  // 3 x 2^2; the copy counted nowhere here
  const double coefficient = 1.5 / (std::sqrt(12.0) + 1e-6);
  EXPECT_NEAR((*exec->ReadBuffer("grad_clip"))[0], coefficient, 1e-6);
  EXPECT_NEAR((*exec->ReadBuffer("w"))[2], -0.1 * coefficient * 2.0, 1e-6);
  // A norm under max_norm leaves the gradient as it is.
  b.program().mutable_instructions(6)->set_max_norm(100.0f);
  lrs.clear();
  norms.clear();
  RunAlone(b.program(), 1, &lrs, &norms, &exec);
  EXPECT_NEAR((*exec->ReadBuffer("w"))[0], -0.1 * 2.0, 1e-6);
}

// Program.eval: its instructions once per eval batch j (samples j*B .. j*B+B-1 of its own data,
// the same every time) over the training program's parameter, and the mean of the batches'
// losses, against float64; the training step's state is untouched by it.
TEST(ExecutorTest, EvalRunsItsBatchesOverTheTrainingParameters) {
  constexpr int64_t kSamples = 6, kF = 3, kB = 2;
  std::vector<float> xs(kSamples * kF), ys(kSamples);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.3 + i);
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = std::cos(1.0 + 3.0 * i);
  const std::string input = TempPath("eval_x.npy"), label = TempPath("eval_y.npy");
  ASSERT_TRUE(NpyFile::Write(input, {kSamples, kF}, xs.data()).ok());
  ASSERT_TRUE(NpyFile::Write(label, {kSamples, 1}, ys.data()).ok());
  ProgramBuilder b(0, 1);
  const int w = b.Buffer("w", {kF, 1}, v1::Buffer::PARAM);
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  b.Uniform(w, {kF, 1}, 0.5f);
  b.Op(Instruction::FILL, {}, {loss})->set_scale(0.0f);
  b.program().set_steps(4);
  // The evaluation's buffers and list.
  const int x = b.Buffer("input", {kB, kF}, v1::Buffer::DATA);
  const int y = b.Buffer("label", {kB, 1}, v1::Buffer::DATA);
  const int out = b.Buffer("out", {kB, 1});
  const int eval_loss = b.Buffer("eval loss", {1}, v1::Buffer::LOSS);
  v1::EvalProgram* eval = b.program().mutable_eval();
  eval->set_loss_buffer(eval_loss);
  eval->set_every(3);
  eval->set_batches(3);
  v1::Data* data = eval->mutable_data();
  data->set_source("npy");
  data->set_input(input);
  data->set_label(label);
  data->set_batch_size(kB);
  auto add = [&](Instruction::Op op, std::vector<int> in, std::vector<int> outs) {
    Instruction* ins = eval->add_instructions();
    ins->set_op(op);
    for (int i : in) ins->add_inputs(i);
    for (int o : outs) ins->add_outputs(o);
    return ins;
  };
  for (auto [op, buffer, width] : {std::make_tuple(Instruction::LOAD_INPUT, x, kF),
                                   std::make_tuple(Instruction::LOAD_LABEL, y, int64_t{1})}) {
    Instruction* load = add(op, {}, {buffer});
    load->mutable_box()->add_offsets(0);
    load->mutable_box()->add_offsets(0);
    load->mutable_box()->add_lengths(kB);
    load->mutable_box()->add_lengths(width);
  }
  add(Instruction::MATMUL, {x, w}, {out});
  add(Instruction::MSE_LOSS, {out, y}, {eval_loss})->set_scale(1.0f / kB);
  EXPECT_FALSE(EvaluatesAfter(b.program(), 1));
  EXPECT_TRUE(EvaluatesAfter(b.program(), 3));
  EXPECT_TRUE(EvaluatesAfter(b.program(), 4));  // the last step
  auto exec = Executor::Create(b.program(), nullptr);
  ASSERT_TRUE(exec.ok()) << exec.status();
  ASSERT_TRUE((*exec)->Initialize().ok());
  ASSERT_TRUE((*exec)->RunStep(1).ok());
  const std::vector<float> weight = *(*exec)->ReadBuffer("w");
  double want = 0;
  for (int64_t j = 0; j < 3; ++j) {
    double batch = 0;
    for (int64_t r = 0; r < kB; ++r) {
      const int64_t sample = j * kB + r;
      double p = 0;
      for (int64_t f = 0; f < kF; ++f) p += static_cast<double>(xs[sample * kF + f]) * weight[f];
      batch += (p - ys[sample]) * (p - ys[sample]) / kB;
    }
    want += batch / 3;
  }
  for (int twice = 0; twice < 2; ++twice) {  // the same batches every time
    absl::StatusOr<double> got = (*exec)->RunEval();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(*got, want, 1e-6 * std::max(1.0, want));
  }
  EXPECT_TRUE((*exec)->RunStep(2).ok()) << "a step after an evaluation";
  // An evaluation that would update a parameter is refused when the program is checked.
  v1::Program updating = b.program();
  Instruction* sgd = updating.mutable_eval()->add_instructions();
  sgd->set_op(Instruction::SGD);
  sgd->add_inputs(w);
  sgd->add_inputs(out);
  auto refused = Executor::Create(updating, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("an evaluation updates nothing"), std::string::npos)
      << refused.status();
}

TEST(ExecutorOpsTest, EveryOpHasOneHandler) {
  const google::protobuf::EnumDescriptor* ops = Instruction::Op_descriptor();
  for (int i = 0; i < ops->value_count(); ++i) {
    const auto op = static_cast<Instruction::Op>(ops->value(i)->number());
    if (op == Instruction::OP_UNSPECIFIED) {
      EXPECT_EQ(BuiltinOps().Find(op), nullptr);
    } else {
      EXPECT_NE(BuiltinOps().Find(op), nullptr) << ops->value(i)->name();
    }
  }
  for (Instruction::Op op : {Instruction::SEND, Instruction::RECV, Instruction::ALL_REDUCE,
                             Instruction::ALL_GATHER, Instruction::REDUCE_SCATTER,
                             Instruction::ALL_TO_ALL}) {
    EXPECT_TRUE(IsCommunication(op)) << Instruction::Op_Name(op);
  }
  EXPECT_FALSE(IsCommunication(Instruction::ATTENTION));
  EXPECT_FALSE(IsCommunication(Instruction::UNSTACK));
  // The planner sizes widening areas by common/program.h's list; the registry must agree.
  for (Instruction::Op op : BuiltinOps().ops()) {
    EXPECT_EQ(ComputesInF32(op), BuiltinOps().Find(op)->types.rule == ElementTypes::kF32)
        << Instruction::Op_Name(op);
  }

  OpRegistry registry;
  const OpHandler mul = *BuiltinOps().Find(Instruction::MUL);
  EXPECT_TRUE(registry.Register(Instruction::MUL, mul).ok());
  EXPECT_EQ(registry.Register(Instruction::MUL, mul).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Register(Instruction::ADD, OpHandler{}).code(),
            absl::StatusCode::kInvalidArgument);

  v1::Program p = TinyProgram();
  p.mutable_instructions(1)->set_op(static_cast<Instruction::Op>(99));
  ExpectRejected(p, nullptr, {"instruction 1", "unknown op 99"});
}

// A buffer of a one-op program: its shape and dtype.
struct BufferSpec {
  std::vector<int64_t> shape;
  v1::DType dtype = v1::F32;
};

// One `op` on zero-filled buffers in0, in1, ... (ids 0..) and out0, ... (after them), then
// `set` on the instruction: for Create's checks.
v1::Program OneOp(Instruction::Op op, const std::vector<BufferSpec>& ins,
                  const std::vector<BufferSpec>& outs,
                  const std::function<void(Instruction*)>& set = nullptr) {
  ProgramBuilder b(0, 1);
  std::vector<int> in_ids, out_ids;
  for (size_t i = 0; i < ins.size(); ++i) {
    in_ids.push_back(b.Buffer("in" + std::to_string(i), ins[i].shape, v1::Buffer::ACTIVATION,
                              ins[i].dtype));
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    out_ids.push_back(b.Buffer("out" + std::to_string(i), outs[i].shape, v1::Buffer::ACTIVATION,
                               outs[i].dtype));
  }
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  Instruction* ins_ = b.Op(op, in_ids, out_ids);
  if (set) set(ins_);
  return b.program();
}

void ExpectAccepted(const v1::Program& p) {
  absl::Status s = Executor::Create(p, nullptr).status();
  EXPECT_TRUE(s.ok()) << s;
}

// The instruction's box (a region of a tensor of shape `global`; global empty: none).
void SetRegion(Instruction* ins, const std::vector<int64_t>& offsets,
               const std::vector<int64_t>& lengths, const std::vector<int64_t>& global) {
  for (int64_t o : offsets) ins->mutable_box()->add_offsets(o);
  for (int64_t l : lengths) ins->mutable_box()->add_lengths(l);
  for (int64_t g : global) ins->add_global_shape(g);
}

// Buffer `id` holds the region at `offsets` of tensor `tensor` [global], initialized as that
// tensor's elements U(-bound, bound) (GlobalUniform).
void RegionUniform(ProgramBuilder& b, int id, const std::string& tensor,
                   const std::vector<int64_t>& global, const std::vector<int64_t>& offsets,
                   float bound) {
  const auto& shape = b.program().buffers(id).shape();
  v1::ParamInit* init = b.Init(id, v1::ParamInit::UNIFORM, global, offsets,
                               std::vector<int64_t>(shape.begin(), shape.end()));
  init->set_bound(bound);
  init->set_tensor_key(Fnv1a64(tensor));
}

// A parameter buffer `name` [shape], U(-bound, bound).
int UniformParam(ProgramBuilder& b, const std::string& name, std::vector<int64_t> shape,
                 float bound = 1.0f) {
  const int id = b.Buffer(name, shape, v1::Buffer::PARAM);
  b.Uniform(id, shape, bound);
  return id;
}

// Buffer `name` [shape] of dtype I32 or I64, loaded (LOAD_INPUT) from an .npy holding `ids`.
int LoadIds(ProgramBuilder& b, const std::string& name, const std::vector<int64_t>& shape,
            v1::DType dtype, const std::vector<int64_t>& ids) {
  const std::string path =
      TempPath(absl::StrCat(name, "_", DTypeName(dtype), ".npy"));
  if (dtype == v1::I32) {
    const std::vector<int32_t> narrow(ids.begin(), ids.end());
    EXPECT_TRUE(NpyFile::Write(path, shape, narrow.data()).ok());
  } else {
    EXPECT_TRUE(NpyFile::Write(path, shape, ids.data()).ok());
  }
  v1::Data* data = b.program().mutable_data();
  data->set_source("npy");
  data->set_input(path);
  data->set_batch_size(shape[0]);
  const int id = b.Buffer(name, shape, v1::Buffer::DATA, dtype);
  b.Load(Instruction::LOAD_INPUT, id, std::vector<int64_t>(shape.size(), 0), shape);
  return id;
}

// The executor after `steps` steps of the one-rank program p (null after a failure, reported).
std::unique_ptr<Executor> RunOne(const v1::Program& p, int steps = 1) {
  std::vector<std::vector<float>> losses;
  std::vector<std::unique_ptr<Executor>> execs;
  RunAll({p}, steps, &losses, &execs);
  return std::move(execs[0]);
}

std::vector<float> Read(const Executor& e, const std::string& name) {
  absl::StatusOr<std::vector<float>> v = e.ReadBuffer(name);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : std::vector<float>();
}

// c[m, n] = op(a) @ op(b) in double; a stored [m, k] ([k, m] when ta), b [k, n] ([n, k] when tb).
std::vector<double> MatmulReference(const std::vector<float>& a, const std::vector<float>& b,
                                    int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) {
        const double x = ta ? a[p * m + i] : a[i * k + p];
        const double y = tb ? b[j * k + p] : b[p * n + j];
        c[i * n + j] += x * y;
      }
    }
  }
  return c;
}

// contract 2: a [2,3,4] @ b [3,4,5] -> [2,5]; the same transposed, a [3,4,2]^T @ b [5,3,4]^T;
// contract 3: a [2,2,3,2] @ b [2,3,2,4] -> out [2,2,2] (m n = 8 elements in any shape).
TEST(ExecutorOpsTest, MatmulContractsSeveralAxes) {
  ProgramBuilder b(0, 1);
  const int a2 = UniformParam(b, "a2", {2, 3, 4});
  const int b2 = UniformParam(b, "b2", {3, 4, 5});
  const int at = UniformParam(b, "at", {3, 4, 2});
  const int bt = UniformParam(b, "bt", {5, 3, 4});
  const int a3 = UniformParam(b, "a3", {2, 2, 3, 2});
  const int b3 = UniformParam(b, "b3", {2, 3, 2, 4});
  const int c2 = b.Buffer("c2", {2, 5});
  const int ct = b.Buffer("ct", {2, 5});
  const int c3 = b.Buffer("c3", {2, 2, 2});
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  b.Op(Instruction::MATMUL, {a2, b2}, {c2})->set_contract(2);
  Instruction* t = b.Op(Instruction::MATMUL, {at, bt}, {ct});
  t->set_contract(2);
  t->set_transpose_a(true);
  t->set_transpose_b(true);
  b.Op(Instruction::MATMUL, {a3, b3}, {c3})->set_contract(3);
  auto e = RunOne(b.program());
  ASSERT_NE(e, nullptr);
  ExpectAllClose(Read(*e, "c2"),
                 MatmulReference(UniformValues("a2", 24, 1), UniformValues("b2", 60, 1), 2, 5,
                                 12, false, false),
                 1e-5, 1e-6, "c2");
  ExpectAllClose(Read(*e, "ct"),
                 MatmulReference(UniformValues("at", 24, 1), UniformValues("bt", 60, 1), 2, 5,
                                 12, true, true),
                 1e-5, 1e-6, "ct");
  ExpectAllClose(Read(*e, "c3"),
                 MatmulReference(UniformValues("a3", 24, 1), UniformValues("b3", 48, 1), 2, 4,
                                 12, false, false),
                 1e-5, 1e-6, "c3");

  auto contract = [](int c) { return [c](Instruction* ins) { ins->set_contract(c); }; };
  ExpectAccepted(OneOp(Instruction::MATMUL, {{{2, 3, 4}}, {{3, 4, 5}}}, {{{2, 5}}}, contract(2)));
  ExpectRejected(OneOp(Instruction::MATMUL, {{{2, 3, 4}}, {{3, 5, 5}}}, {{{2, 5}}}, contract(2)),
                 nullptr, {"instruction 0 (MATMUL)", "contracted sizes differ (contract 2): a "
                           "[2,3,4] contracts [3,4] (12) but b [3,5,5] contracts [3,5] (15)"});
  ExpectRejected(OneOp(Instruction::MATMUL, {{{3, 4, 2}}, {{4, 5}}}, {{{8, 5}}},
                       [](Instruction* ins) {
                         ins->set_contract(1);
                         ins->set_transpose_a(true);
                       }),
                 nullptr, {"contracted sizes differ (contract 1): a [3,4,2]^T contracts [3] (3) "
                           "but b [4,5] contracts [4] (4)"});
  ExpectRejected(OneOp(Instruction::MATMUL, {{{2, 3, 4}}, {{3, 4, 5}}}, {{{2, 4}}}, contract(2)),
                 nullptr, {"output is [2,4] (8 elements), expected 2 x 5 = 10 elements"});
  ExpectRejected(OneOp(Instruction::MATMUL, {{{2, 3, 4}}, {{3, 4, 5}}}, {{{2, 5}}}, contract(4)),
                 nullptr, {"contract 4 exceeds the rank of a [2,3,4] or b [3,4,5]"});
  ExpectRejected(OneOp(Instruction::MATMUL, {{{2, 3, 4}}, {{3, 4, 5}}}, {{{2, 5}}}, contract(-1)),
                 nullptr, {"contract -1 is negative"});
}

// ids [2,3] over a table shard [4,3]: rows 4..7 of a [10,3] vocabulary. Ids 3 and 11 fall
// outside the shard (zeros); id 4 appears twice (its gradient rows add).
v1::Program EmbeddingProgram(v1::DType ids_dtype) {
  ProgramBuilder b(0, 1);
  const int ids = LoadIds(b, "ids", {2, 3}, ids_dtype, {4, 7, 3, 11, 4, 5});
  const int table = b.Buffer("wte", {4, 3}, v1::Buffer::PARAM);
  RegionUniform(b, table, "wte", {10, 3}, {4, 0}, 1.0f);
  const int dy = UniformParam(b, "dy", {2, 3, 3});
  const int out = b.Buffer("emb", {2, 3, 3});
  const int grad = b.Buffer("wte@grad", {4, 3}, v1::Buffer::GRAD);
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  SetRegion(b.Op(Instruction::EMBEDDING, {ids, table}, {out}), {4, 0}, {4, 3}, {10, 3});
  SetRegion(b.Op(Instruction::EMBEDDING_GRAD, {ids, dy}, {grad}), {4, 0}, {4, 3}, {10, 3});
  return b.program();
}

TEST(ExecutorOpsTest, EmbeddingReadsItsVocabularyShard) {
  const std::vector<int64_t> ids = {4, 7, 3, 11, 4, 5};
  const std::vector<float> dy = UniformValues("dy", 18, 1.0f);
  std::vector<double> want_out(18, 0.0), want_grad(12, 0.0);
  for (int r = 0; r < 6; ++r) {
    const int64_t row = ids[r] - 4;
    if (row < 0 || row >= 4) continue;
    for (int c = 0; c < 3; ++c) {
      want_out[r * 3 + c] = GlobalUniform("wte", ids[r] * 3 + c, 1.0f);
      want_grad[row * 3 + c] += dy[r * 3 + c];
    }
  }
  for (v1::DType dtype : {v1::I32, v1::I64}) {
    auto e = RunOne(EmbeddingProgram(dtype));
    ASSERT_NE(e, nullptr);
    const std::string what(DTypeName(dtype));
    ExpectAllClose(Read(*e, "emb"), want_out, 0, 0, "emb, ids " + what);
    ExpectAllClose(Read(*e, "wte@grad"), want_grad, 1e-6, 1e-7, "wte@grad, ids " + what);
  }

  const BufferSpec ids_spec{{2, 3}, v1::I32};
  auto shard = [](Instruction* ins) { SetRegion(ins, {4, 0}, {4, 3}, {10, 3}); };
  ExpectAccepted(OneOp(Instruction::EMBEDDING, {ids_spec, {{4, 3}}}, {{{2, 3, 3}}}, shard));
  ExpectRejected(OneOp(Instruction::EMBEDDING, {{{2, 3}}, {{4, 3}}}, {{{2, 3, 3}}}, shard),
                 nullptr, {"instruction 0 (EMBEDDING)",
                           "input 0 (buffer 0 'in0' f32[2,3]) is f32; EMBEDDING's ids are i32 or "
                           "i64"});
  ExpectRejected(OneOp(Instruction::EMBEDDING, {ids_spec, {{4, 3, 1}}}, {{{2, 3, 3}}}),
                 nullptr, {"table (buffer 1 'in1' f32[4,3,1]) is not [rows, dim]"});
  ExpectRejected(OneOp(Instruction::EMBEDDING, {ids_spec, {{4, 3}}}, {{{2, 3, 4}}}, shard),
                 nullptr, {"output (buffer 2 'out0' f32[2,3,4]) holds 24 elements, expected 18 "
                           "(6 ids x dim 3)"});
  ExpectRejected(OneOp(Instruction::EMBEDDING, {ids_spec, {{4, 3}}}, {{{2, 9}}}, shard), nullptr,
                 {"output (buffer 2 'out0' f32[2,9]) does not end in dim 3 of table"});
  ExpectRejected(OneOp(Instruction::EMBEDDING, {ids_spec, {{4, 3}}}, {{{2, 3, 3}}},
                       [](Instruction* ins) { SetRegion(ins, {4}, {}, {}); }),
                 nullptr, {"box (offsets [4], lengths []) is not a region of table (buffer 1 "
                           "'in1' f32[4,3]): it needs 2 offsets"});
  ExpectRejected(OneOp(Instruction::EMBEDDING, {ids_spec, {{4, 3}}}, {{{2, 3, 3}}},
                       [](Instruction* ins) { SetRegion(ins, {8, 0}, {4, 3}, {10, 3}); }),
                 nullptr, {"table (buffer 1 'in1' f32[4,3]) at offsets [8,0] leaves global_shape "
                           "[10,3]"});
  ExpectRejected(OneOp(Instruction::EMBEDDING, {ids_spec, {{4, 3}}}, {{{2, 3, 3}}},
                       [](Instruction* ins) { SetRegion(ins, {4, 0}, {5, 3}, {}); }),
                 nullptr, {"box lengths [5,3] are not the shape of table (buffer 1"});
  ExpectRejected(OneOp(Instruction::EMBEDDING_GRAD, {ids_spec, {{2, 3, 3}}}, {{{4, 2}}}, shard),
                 nullptr, {"instruction 0 (EMBEDDING_GRAD)",
                           "dy (buffer 1 'in1' f32[2,3,3]) holds 18 elements, expected 12 (6 ids "
                           "x dim 2)"});
  ExpectRejected(OneOp(Instruction::EMBEDDING_GRAD, {ids_spec, {{2, 3, 3}}}, {{{2, 3}, v1::I32}}),
                 nullptr, {"output 0 (buffer 2 'out0' i32[2,3]) is i32; EMBEDDING_GRAD computes "
                           "in f32"});
}

// Positions of a [2,4] piece at sequence offset 8 (i64), and of a [3] piece at 5 (i32).
TEST(ExecutorOpsTest, PositionsStartAtTheBoxOffset) {
  ProgramBuilder b(0, 1);
  const int p64 = b.Buffer("pos64", {2, 4}, v1::Buffer::ACTIVATION, v1::I64);
  const int p32 = b.Buffer("pos32", {3}, v1::Buffer::ACTIVATION, v1::I32);
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  SetRegion(b.Op(Instruction::POSITIONS, {}, {p64}), {0, 8}, {2, 4}, {2, 16});
  SetRegion(b.Op(Instruction::POSITIONS, {}, {p32}), {5}, {3}, {});
  auto e = RunOne(b.program());
  ASSERT_NE(e, nullptr);
  ExpectAllClose(Read(*e, "pos64"), {8, 9, 10, 11, 8, 9, 10, 11}, 0, 0, "pos64");
  ExpectAllClose(Read(*e, "pos32"), {5, 6, 7}, 0, 0, "pos32");

  ExpectAccepted(OneOp(Instruction::POSITIONS, {}, {{{2, 4}, v1::I32}}));
  ExpectRejected(OneOp(Instruction::POSITIONS, {}, {{{2, 4}}}), nullptr,
                 {"instruction 0 (POSITIONS)",
                  "output 0 (buffer 0 'out0' f32[2,4]) is f32; POSITIONS's ids are i32 or i64"});
  ExpectRejected(OneOp(Instruction::POSITIONS, {}, {{{2, 4}, v1::I32}},
                       [](Instruction* ins) { SetRegion(ins, {8}, {4}, {}); }),
                 nullptr, {"is not a region of output (buffer 0 'out0' i32[2,4]): it needs 2 "
                           "offsets"});
  ExpectRejected(OneOp(Instruction::POSITIONS, {{{2}}}, {{{2, 4}, v1::I32}}), nullptr,
                 {"expects 0 inputs and 1 outputs, got 1 and 1"});
}

// x [4,6] dropped out whole, and its piece [2,3] at offsets [1,2] dropped out on its own: the
// piece's mask is the slice of the whole tensor's, as Philox draws it at step 2.
TEST(ExecutorOpsTest, DropoutOfABoxIsTheSliceOfTheFullTensor) {
  const float p = 0.3f;
  const uint64_t key = Fnv1a64("h.0.attn.resid_dropout");
  ProgramBuilder b(0, 1);
  const int x = UniformParam(b, "x", {4, 6});
  const int piece = b.Buffer("x.piece", {2, 3}, v1::Buffer::PARAM);
  RegionUniform(b, piece, "x", {4, 6}, {1, 2}, 1.0f);
  const int y = b.Buffer("y", {4, 6});
  const int y_piece = b.Buffer("y.piece", {2, 3});
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  Instruction* whole = b.Op(Instruction::DROPOUT, {x}, {y});
  whole->set_dropout_p(p);
  whole->set_dropout_key(key);
  Instruction* part = b.Op(Instruction::DROPOUT, {piece}, {y_piece});
  part->set_dropout_p(p);
  part->set_dropout_key(key);
  SetRegion(part, {1, 2}, {2, 3}, {4, 6});
  auto e = RunOne(b.program(), 2);
  ASSERT_NE(e, nullptr);

  const std::vector<float> xs = UniformValues("x", 24, 1.0f);
  const uint64_t stream = key + 2 * 0x9E3779B97F4A7C15ull;  // step 2
  const float keep_scale = 1.0f / (1.0f - p);
  std::vector<double> want;
  int dropped = 0;
  for (int64_t i = 0; i < 24; ++i) {
    const bool keep = PhiloxUnit(20240607, stream, i) >= p;
    want.push_back(keep ? xs[i] * keep_scale : 0.0f);
    dropped += keep ? 0 : 1;
  }
  EXPECT_GT(dropped, 0);
  EXPECT_LT(dropped, 24);
  const std::vector<float> got = Read(*e, "y");
  ExpectAllClose(got, want, 1e-7, 0, "y");
  std::vector<double> slice;
  for (int64_t r = 1; r < 3; ++r)
    for (int64_t c = 2; c < 5; ++c) slice.push_back(got[r * 6 + c]);
  ExpectAllClose(Read(*e, "y.piece"), slice, 0, 0, "y.piece");

  auto with_p = [](float dp) { return [dp](Instruction* ins) { ins->set_dropout_p(dp); }; };
  ExpectAccepted(OneOp(Instruction::DROPOUT, {{{2, 3}}}, {{{2, 3}}}, with_p(0.5f)));
  ExpectRejected(OneOp(Instruction::DROPOUT, {{{2, 3}}}, {{{2, 3}}}, with_p(1.0f)), nullptr,
                 {"instruction 0 (DROPOUT)", "dropout_p 1 is outside [0, 1)"});
  ExpectRejected(OneOp(Instruction::DROPOUT, {{{2, 3}}}, {{{2, 3}}},
                       [](Instruction* ins) { SetRegion(ins, {1, 2}, {2, 3}, {}); }),
                 nullptr, {"box at offsets [1,2] of input (buffer 0 'in0' f32[2,3]) has no "
                           "global_shape to index"});
  ExpectRejected(OneOp(Instruction::DROPOUT, {{{2, 3}}}, {{{2, 3}}},
                       [](Instruction* ins) { SetRegion(ins, {3, 2}, {2, 3}, {4, 6}); }),
                 nullptr, {"input (buffer 0 'in0' f32[2,3]) at offsets [3,2] leaves "
                           "global_shape [4,6]"});
  ExpectRejected(OneOp(Instruction::DROPOUT, {{{2, 3}}}, {{{2, 3}}},
                       [](Instruction* ins) { SetRegion(ins, {}, {}, {6}); }),
                 nullptr, {"global_shape [6] has 1 axes but input (buffer 0 'in0' f32[2,3]) has "
                           "2"});
  ExpectRejected(OneOp(Instruction::DROPOUT, {{{2, 3}}}, {{{3, 3}}}), nullptr,
                 {"input (buffer 0 'in0') is [2,3] but output (buffer 1 'out0') is [3,3]"});
}

// ---- Cross-entropy over a vocabulary sharded over `world` ranks ----

constexpr int64_t kCeRows = 3, kCeVocab = 5;
const std::vector<int64_t> kCeTargets = {4, 0, 2};

// logits [1, 3, 5] (B=1, T=3, vocabulary 5), rank r of 2 holding columns [3r, 3r + len):
// row max (all-reduced MAX), the parts (all-reduced SUM), the mean loss and its gradient.
v1::Program CrossEntropyProgram(int rank, int world) {
  const int64_t off = rank == 0 ? 0 : 3, len = world == 1 ? kCeVocab : (rank == 0 ? 3 : 2);
  ProgramBuilder b(rank, world);
  if (world > 1) b.Group(0, {0, 1}, "mp");
  const int targets = LoadIds(b, "targets", {1, kCeRows}, v1::I32, kCeTargets);
  const int logits = b.Buffer("logits", {1, kCeRows, len}, v1::Buffer::PARAM);
  RegionUniform(b, logits, "logits", {1, kCeRows, kCeVocab}, {0, 0, off}, 2.0f);
  const int m = b.Buffer("m", {1, kCeRows});
  const int sumexp = b.Buffer("sumexp", {1, kCeRows});
  const int tlogit = b.Buffer("tlogit", {1, kCeRows});
  const int loss = b.Buffer("loss", {1}, v1::Buffer::LOSS);
  const int d_sumexp = b.Buffer("sumexp@grad", {1, kCeRows}, v1::Buffer::GRAD);
  const int d_tlogit = b.Buffer("tlogit@grad", {1, kCeRows}, v1::Buffer::GRAD);
  const int dlogits = b.Buffer("logits@grad", {1, kCeRows, len}, v1::Buffer::GRAD);
  b.program().set_loss_buffer(loss);
  auto all_reduce = [&](int buf, v1::Placement::ReduceOp op) {
    if (world == 1) return;
    Instruction* ins = b.Op(Instruction::ALL_REDUCE, {buf}, {buf});
    ins->set_group(0);
    ins->set_reduce(op);
  };
  b.Op(Instruction::ROW_MAX, {logits}, {m});
  all_reduce(m, v1::Placement::MAX);
  SetRegion(b.Op(Instruction::CE_PARTS, {logits, m, targets}, {sumexp, tlogit}), {0, 0, off},
            {1, kCeRows, len}, {1, kCeRows, kCeVocab});
  all_reduce(sumexp, v1::Placement::SUM);
  all_reduce(tlogit, v1::Placement::SUM);
  b.Op(Instruction::CE_LOSS, {sumexp, m, tlogit}, {loss})->set_scale(1.0f / kCeRows);
  b.Op(Instruction::CE_LOSS_GRAD, {sumexp}, {d_sumexp, d_tlogit})->set_scale(1.0f / kCeRows);
  SetRegion(b.Op(Instruction::CE_PARTS_GRAD, {logits, m, targets, d_sumexp, d_tlogit}, {dlogits}),
            {0, 0, off}, {1, kCeRows, len}, {1, kCeRows, kCeVocab});
  return b.program();
}

TEST(ExecutorOpsTest, CrossEntropyPartsChainToTheMeanLossAndItsGradient) {
  // The hand-computed cross-entropy: mean over rows of logsumexp - the target's logit, and
  // (softmax - onehot) / rows.
  double want_loss = 0;
  std::vector<double> row_max(kCeRows), dlogits(kCeRows * kCeVocab);
  for (int64_t r = 0; r < kCeRows; ++r) {
    std::vector<double> l(kCeVocab);
    for (int64_t c = 0; c < kCeVocab; ++c) l[c] = GlobalUniform("logits", r * kCeVocab + c, 2.0f);
    row_max[r] = *std::max_element(l.begin(), l.end());
    double sum = 0;
    for (double v : l) sum += std::exp(v);
    want_loss += (std::log(sum) - l[kCeTargets[r]]) / kCeRows;
    for (int64_t c = 0; c < kCeVocab; ++c) {
      dlogits[r * kCeVocab + c] = (std::exp(l[c]) / sum - (c == kCeTargets[r] ? 1 : 0)) / kCeRows;
    }
  }
  std::vector<std::vector<float>> losses1, losses2;
  std::vector<std::unique_ptr<Executor>> single, sharded;
  RunAll({CrossEntropyProgram(0, 1)}, 1, &losses1, &single);
  RunAll({CrossEntropyProgram(0, 2), CrossEntropyProgram(1, 2)}, 1, &losses2, &sharded);
  ASSERT_NE(single[0], nullptr);
  EXPECT_NEAR(losses1[0][0], want_loss, 1e-5 * want_loss);
  ExpectAllClose(Read(*single[0], "m"), row_max, 0, 0, "m");
  ExpectAllClose(Read(*single[0], "logits@grad"), dlogits, 1e-5, 1e-6, "logits@grad");
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(sharded[r], nullptr);
    EXPECT_NEAR(losses2[r][0], want_loss, 1e-5 * want_loss) << "rank " << r;
    ExpectAllClose(Read(*sharded[r], "m"), row_max, 0, 0, "m (all-reduced max)");
    const int64_t off = r == 0 ? 0 : 3, len = r == 0 ? 3 : 2;
    std::vector<double> shard;
    for (int64_t row = 0; row < kCeRows; ++row)
      for (int64_t c = off; c < off + len; ++c) shard.push_back(dlogits[row * kCeVocab + c]);
    ExpectAllClose(Read(*sharded[r], "logits@grad"), shard, 1e-5, 1e-6,
                   "logits@grad of rank " + std::to_string(r));
  }

  const BufferSpec rows{{1, 3}}, targets{{1, 3}, v1::I64}, logits{{1, 3, 5}};
  ExpectAccepted(OneOp(Instruction::CE_PARTS, {logits, rows, targets}, {rows, rows}));
  ExpectRejected(OneOp(Instruction::CE_PARTS, {logits, rows, rows}, {rows, rows}), nullptr,
                 {"instruction 0 (CE_PARTS)",
                  "input 2 (buffer 2 'in2' f32[1,3]) is f32; CE_PARTS's ids are i32 or i64"});
  ExpectRejected(OneOp(Instruction::CE_PARTS, {logits, {{3, 1}}, targets}, {rows, {{4}}}),
                 nullptr, {"tlogit (buffer 4 'out1' f32[4]) holds 4 elements, expected 3 (one "
                           "per row of logits [1,3,5])"});
  ExpectRejected(OneOp(Instruction::CE_PARTS, {logits, rows, targets}, {rows, rows},
                       [](Instruction* ins) { ins->set_outputs(1, 3); }),
                 nullptr, {"outputs 0 and 1 are both buffer 3 'out0' f32[1,3]"});
  ExpectRejected(OneOp(Instruction::CE_PARTS, {logits, rows, targets}, {rows, rows},
                       [](Instruction* ins) { SetRegion(ins, {0, 0}, {}, {}); }),
                 nullptr, {"is not a region of logits (buffer 0 'in0' f32[1,3,5]): it needs 3 "
                           "offsets"});
  ExpectRejected(OneOp(Instruction::CE_PARTS_GRAD, {logits, rows, targets, rows, rows},
                       {{{1, 3, 4}}}),
                 nullptr, {"instruction 0 (CE_PARTS_GRAD)", "logits (buffer 0 'in0') is "
                           "[1,3,5] but output (buffer 5 'out0') is [1,3,4]"});
  ExpectRejected(OneOp(Instruction::CE_PARTS_GRAD, {logits, rows, targets, rows, rows},
                       {logits}, [](Instruction* ins) { ins->set_outputs(0, 0); }),
                 nullptr, {"output 0 (buffer 0 'in0' f32[1,3,5]) is also input 0; CE_PARTS_GRAD "
                           "writes its outputs apart from its inputs"});
  ExpectRejected(OneOp(Instruction::ROW_MAX, {logits}, {{{5}}}), nullptr,
                 {"instruction 0 (ROW_MAX)", "output (buffer 1 'out0' f32[5]) holds 5 elements, "
                  "expected 3 (one per row of logits [1,3,5])"});
  ExpectRejected(OneOp(Instruction::CE_LOSS, {rows, rows, {{2}}}, {{{1}}}), nullptr,
                 {"instruction 0 (CE_LOSS)", "tlogit (buffer 2 'in2' f32[2]) holds 2 elements, "
                  "expected 3 (one per element of sumexp (buffer 0 'in0' f32[1,3]))"});
  ExpectRejected(OneOp(Instruction::CE_LOSS, {rows, rows, rows}, {{{3}}}), nullptr,
                 {"output (buffer 3 'out0' f32[3]) holds 3 elements, expected 1 (the loss)"});
  ExpectRejected(OneOp(Instruction::CE_LOSS_GRAD, {rows}, {rows}), nullptr,
                 {"instruction 0 (CE_LOSS_GRAD)", "expects 1 inputs and 2 outputs, got 1 and 1"});
}

// MAX reduces only by all-reduce; a reduce-scatter sums or averages.
TEST(ExecutorOpsTest, ReduceScatterRejectsMax) {
  LocalCommunicatorFactory factory(std::make_shared<LocalWorld>(2, absl::Seconds(1)), 0);
  v1::Program p = AxisCollectivesProgram(0, TempPath("unused.npy"));
  p.mutable_instructions(2)->set_reduce(v1::Placement::MAX);
  // The data source is opened before decoding: give it a file.
  std::vector<float> xs(30, 1.0f);
  ASSERT_TRUE(NpyFile::Write(TempPath("unused.npy"), {2, 3, 5}, xs.data()).ok());
  ExpectRejected(p, &factory, {"instruction 2 (REDUCE_SCATTER)",
                               "REDUCE_SCATTER reduces with sum or avg, not max"});
}

// x f32 [2,3,4] unstacked along axis 1 and stacked back; positions i32 [2,5] unstacked along
// axis 0 and stacked along the last axis of [5,2] (a transpose).
TEST(ExecutorOpsTest, StackAndUnstackRoundTrip) {
  ProgramBuilder b(0, 1);
  const int x = UniformParam(b, "x", {2, 3, 4});
  std::vector<int> xs;
  for (int i = 0; i < 3; ++i) xs.push_back(b.Buffer("x" + std::to_string(i), {2, 4}));
  const int y = b.Buffer("y", {2, 3, 4});
  const int pos = b.Buffer("pos", {2, 5}, v1::Buffer::ACTIVATION, v1::I32);
  const int p0 = b.Buffer("p0", {5}, v1::Buffer::ACTIVATION, v1::I32);
  const int p1 = b.Buffer("p1", {5}, v1::Buffer::ACTIVATION, v1::I32);
  const int t = b.Buffer("t", {5, 2}, v1::Buffer::ACTIVATION, v1::I32);
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  b.Op(Instruction::UNSTACK, {x}, xs)->set_axis(1);
  b.Op(Instruction::STACK, xs, {y})->set_axis(1);
  SetRegion(b.Op(Instruction::POSITIONS, {}, {pos}), {0, 10}, {2, 5}, {});
  b.Op(Instruction::UNSTACK, {pos}, {p0, p1})->set_axis(0);
  b.Op(Instruction::STACK, {p0, p1}, {t})->set_axis(-1);
  auto e = RunOne(b.program());
  ASSERT_NE(e, nullptr);
  const std::vector<float> xv = UniformValues("x", 24, 1.0f);
  ExpectAllClose(Read(*e, "y"), std::vector<double>(xv.begin(), xv.end()), 0, 0, "y");
  for (int i = 0; i < 3; ++i) {
    std::vector<double> want;
    for (int o = 0; o < 2; ++o)
      for (int j = 0; j < 4; ++j) want.push_back(xv[(o * 3 + i) * 4 + j]);
    ExpectAllClose(Read(*e, "x" + std::to_string(i)), want, 0, 0, "x" + std::to_string(i));
  }
  ExpectAllClose(Read(*e, "p1"), {10, 11, 12, 13, 14}, 0, 0, "p1");
  ExpectAllClose(Read(*e, "t"), {10, 10, 11, 11, 12, 12, 13, 13, 14, 14}, 0, 0, "t");

  auto axis = [](int a) { return [a](Instruction* ins) { ins->set_axis(a); }; };
  ExpectAccepted(OneOp(Instruction::UNSTACK, {{{2, 3, 4}}}, {{{2, 4}}, {{2, 4}}, {{8}}}, axis(1)));
  ExpectRejected(OneOp(Instruction::UNSTACK, {{{2, 3, 4}}}, {{{2, 4}}, {{2, 4}}}, axis(1)),
                 nullptr, {"instruction 0 (UNSTACK)", "input (buffer 0 'in0' f32[2,3,4]) has 3 "
                           "along axis 1 but the instruction has 2 outputs"});
  ExpectRejected(OneOp(Instruction::UNSTACK, {{{2, 3, 4}}}, {{{2, 4}}, {{2, 3}}, {{2, 4}}},
                       axis(1)),
                 nullptr, {"output 1 (buffer 2 'out1' f32[2,3]) holds 6 elements, expected 8 "
                           "([2,4]: the input without axis 1)"});
  ExpectRejected(OneOp(Instruction::UNSTACK, {{{2, 3, 4}}}, {{{2, 4}}, {{2, 4}}, {{2, 4}}},
                       axis(3)),
                 nullptr, {"axis 3 out of range for [2,3,4]"});
  ExpectRejected(OneOp(Instruction::UNSTACK, {{{2, 3, 4}}}, {}, axis(1)), nullptr,
                 {"expects 1 or more outputs, got 0"});
  ExpectRejected(OneOp(Instruction::STACK, {{{5}, v1::I32}, {{5}}}, {{{5, 2}, v1::I32}}, axis(1)),
                 nullptr, {"instruction 0 (STACK)", "STACK moves one dtype: input 0 (buffer 0 "
                           "'in0' i32[5]) is i32 but input 1 (buffer 1 'in1' f32[5]) is f32"});
  ExpectRejected(OneOp(Instruction::STACK, {{{5}}, {{4}}}, {{{5, 2}}}, axis(-1)), nullptr,
                 {"input 1 (buffer 1 'in1' f32[4]) holds 4 elements, expected 5 ([5]: the output "
                  "without axis -1)"});
  ExpectRejected(OneOp(Instruction::STACK, {{{5}}, {{5}}}, {{{5, 3}}}, axis(-1)), nullptr,
                 {"output (buffer 2 'out0' f32[5,3]) has 3 along axis -1 but the instruction "
                  "has 2 inputs"});
}

// ---- Norms, activations, rotary embedding and attention against float64 ----

// x [2,3,4] rows of 4: layer norm and RMS norm, forward and backward.
TEST(ExecutorOpsTest, NormsMatchFloat64) {
  const float eps = 1e-5f;
  ProgramBuilder b(0, 1);
  const int x = UniformParam(b, "x", {2, 3, 4}, 2.0f);
  const int g = UniformParam(b, "g", {4});
  const int be = UniformParam(b, "be", {4});
  const int dy = UniformParam(b, "dy", {2, 3, 4});
  const int y = b.Buffer("y", {2, 3, 4});
  const int dx = b.Buffer("dx", {2, 3, 4});
  const int dg = b.Buffer("dg", {4});
  const int db = b.Buffer("db", {4});
  const int r = b.Buffer("r", {6, 4});
  const int rdx = b.Buffer("rdx", {2, 3, 4});
  const int rdg = b.Buffer("rdg", {4});
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  b.Op(Instruction::LAYER_NORM, {x, g, be}, {y})->set_eps(eps);
  b.Op(Instruction::LAYER_NORM_GRAD, {x, g, dy}, {dx, dg, db})->set_eps(eps);
  b.Op(Instruction::RMS_NORM, {x, g}, {r})->set_eps(eps);
  b.Op(Instruction::RMS_NORM_GRAD, {x, g, dy}, {rdx, rdg})->set_eps(eps);
  auto e = RunOne(b.program());
  ASSERT_NE(e, nullptr);

  const std::vector<float> xv = UniformValues("x", 24, 2.0f), gv = UniformValues("g", 4, 1.0f),
                           bv = UniformValues("be", 4, 1.0f), dyv = UniformValues("dy", 24, 1.0f);
  std::vector<double> wy(24), wdx(24), wdg(4, 0), wdb(4, 0), wr(24), wrdx(24), wrdg(4, 0);
  const int D = 4;
  for (int row = 0; row < 6; ++row) {
    const float* xr = &xv[row * D];
    const float* dyr = &dyv[row * D];
    double mean = 0, var = 0, squares = 0;
    for (int c = 0; c < D; ++c) mean += xr[c] / 4.0;
    for (int c = 0; c < D; ++c) {
      var += (xr[c] - mean) * (xr[c] - mean) / D;
      squares += static_cast<double>(xr[c]) * xr[c] / D;
    }
    const double inv = 1 / std::sqrt(var + eps), rinv = 1 / std::sqrt(squares + eps);
    double mean_dxhat = 0, mean_dxhat_xhat = 0, dot = 0;
    for (int c = 0; c < D; ++c) {
      const double xhat = (xr[c] - mean) * inv;
      wy[row * D + c] = xhat * gv[c] + bv[c];
      mean_dxhat += dyr[c] * gv[c] / D;
      mean_dxhat_xhat += dyr[c] * gv[c] * xhat / D;
      wdg[c] += dyr[c] * xhat;
      wdb[c] += dyr[c];
      wr[row * D + c] = xr[c] * rinv * gv[c];
      dot += static_cast<double>(dyr[c]) * gv[c] * xr[c];
      wrdg[c] += dyr[c] * xr[c] * rinv;
    }
    for (int c = 0; c < D; ++c) {
      const double xhat = (xr[c] - mean) * inv;
      wdx[row * D + c] = inv * (dyr[c] * gv[c] - mean_dxhat - xhat * mean_dxhat_xhat);
      wrdx[row * D + c] = dyr[c] * gv[c] * rinv - xr[c] * dot * rinv * rinv * rinv / D;
    }
  }
  ExpectAllClose(Read(*e, "y"), wy, 1e-5, 1e-6, "layer_norm y");
  ExpectAllClose(Read(*e, "dx"), wdx, 1e-5, 1e-6, "layer_norm dx");
  ExpectAllClose(Read(*e, "dg"), wdg, 1e-5, 1e-6, "layer_norm dgamma");
  ExpectAllClose(Read(*e, "db"), wdb, 1e-5, 1e-6, "layer_norm dbeta");
  ExpectAllClose(Read(*e, "r"), wr, 1e-5, 1e-6, "rms_norm y");
  ExpectAllClose(Read(*e, "rdx"), wrdx, 1e-5, 1e-6, "rms_norm dx");
  ExpectAllClose(Read(*e, "rdg"), wrdg, 1e-5, 1e-6, "rms_norm dgamma");

  const BufferSpec xs{{2, 3, 4}}, gs{{4}};
  ExpectAccepted(OneOp(Instruction::LAYER_NORM_GRAD, {xs, gs, xs}, {xs, gs, gs}));
  ExpectRejected(OneOp(Instruction::LAYER_NORM, {xs, {{3}}, gs}, {xs}), nullptr,
                 {"instruction 0 (LAYER_NORM)", "gamma (buffer 1 'in1' f32[3]) holds 3 elements, "
                  "expected 4 (the last dim of x [2,3,4])"});
  ExpectRejected(OneOp(Instruction::LAYER_NORM, {xs, gs, {{5}}}, {xs}), nullptr,
                 {"beta (buffer 2 'in2' f32[5]) holds 5 elements"});
  ExpectRejected(OneOp(Instruction::LAYER_NORM, {xs, gs, gs}, {{{2, 3, 5}}}), nullptr,
                 {"input (buffer 0 'in0') is [2,3,4] but output (buffer 3 'out0') is [2,3,5]"});
  ExpectRejected(OneOp(Instruction::LAYER_NORM, {xs, gs, gs}, {xs},
                       [](Instruction* ins) { ins->set_eps(-1.0f); }),
                 nullptr, {"eps -1 is negative"});
  ExpectRejected(OneOp(Instruction::LAYER_NORM_GRAD, {xs, gs, xs}, {xs, gs}), nullptr,
                 {"instruction 0 (LAYER_NORM_GRAD)", "expects 3 inputs and 3 outputs, got 3 and "
                  "2"});
  ExpectRejected(OneOp(Instruction::LAYER_NORM_GRAD, {xs, gs, xs}, {xs, {{5}}, gs}), nullptr,
                 {"dgamma (buffer 4 'out1' f32[5]) holds 5 elements, expected 4 (the last dim of "
                  "x [2,3,4])"});
  ExpectRejected(OneOp(Instruction::LAYER_NORM_GRAD, {xs, gs, xs}, {xs, gs, gs},
                       [](Instruction* ins) { ins->set_outputs(0, 2); }),
                 nullptr, {"output 0 (buffer 2 'in2' f32[2,3,4]) is also input 2; "
                           "LAYER_NORM_GRAD writes its outputs apart from its inputs"});
  ExpectRejected(OneOp(Instruction::RMS_NORM_GRAD, {xs, gs, {{2, 4}}}, {xs, gs}), nullptr,
                 {"instruction 0 (RMS_NORM_GRAD)", "x (buffer 0 'in0') is [2,3,4] but dy "
                  "(buffer 2 'in2') is [2,4]"});
  ExpectAccepted(OneOp(Instruction::RMS_NORM, {xs, gs}, {{{2, 3, 4}, v1::BF16}}));
  ExpectRejected(OneOp(Instruction::RMS_NORM, {xs, gs}, {{{2, 3, 4}, v1::I64}}), nullptr,
                 {"output 0 (buffer 2 'out0' i64[2,3,4]) is i64; RMS_NORM computes in f32 (bf16 "
                  "operands are widened)"});
}

TEST(ExecutorOpsTest, ActivationsAndMulMatchFloat64) {
  ProgramBuilder b(0, 1);
  const int a = UniformParam(b, "a", {2, 5}, 3.0f);
  const int dy = UniformParam(b, "dy", {2, 5});
  const std::vector<std::pair<Instruction::Op, std::string>> ops = {
      {Instruction::GELU_TANH, "gelu_tanh"}, {Instruction::GELU_TANH_GRAD, "gelu_tanh_grad"},
      {Instruction::SILU, "silu"},           {Instruction::SILU_GRAD, "silu_grad"},
      {Instruction::MUL, "mul"}};
  std::vector<int> outs;
  for (const auto& [op, name] : ops) outs.push_back(b.Buffer(name, {10}));
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  for (size_t i = 0; i < ops.size(); ++i) {
    const bool unary = ops[i].first == Instruction::GELU_TANH || ops[i].first == Instruction::SILU;
    b.Op(ops[i].first, unary ? std::vector<int>{a} : std::vector<int>{a, dy}, {outs[i]});
  }
  auto e = RunOne(b.program());
  ASSERT_NE(e, nullptr);
  const std::vector<float> av = UniformValues("a", 10, 3.0f), dv = UniformValues("dy", 10, 1.0f);
  std::vector<std::vector<double>> want(ops.size());
  const double k = std::sqrt(2.0 / std::acos(-1.0));
  for (int i = 0; i < 10; ++i) {
    const double x = av[i], g = dv[i];
    const double u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
    const double du = k * (1 + 3 * 0.044715 * x * x);
    const double sig = 1 / (1 + std::exp(-x));
    want[0].push_back(0.5 * x * (1 + t));
    want[1].push_back(g * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du));
    want[2].push_back(x * sig);
    want[3].push_back(g * sig * (1 + x * (1 - sig)));
    want[4].push_back(x * g);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    ExpectAllClose(Read(*e, ops[i].second), want[i], 1e-5, 1e-6, ops[i].second);
  }

  ExpectAccepted(OneOp(Instruction::MUL, {{{2, 5}}, {{10}}}, {{{5, 2}}}));
  ExpectRejected(OneOp(Instruction::MUL, {{{2, 5}}, {{2, 4}}}, {{{2, 5}}}), nullptr,
                 {"instruction 0 (MUL)", "a (buffer 0 'in0') is [2,5] but b (buffer 1 'in1') is "
                  "[2,4]"});
  ExpectRejected(OneOp(Instruction::SILU, {{{2, 5}}}, {{{2, 4}}}), nullptr,
                 {"instruction 0 (SILU)", "input (buffer 0 'in0') is [2,5] but output (buffer 1 "
                  "'out0') is [2,4]"});
  ExpectAccepted(OneOp(Instruction::GELU_TANH_GRAD, {{{2, 5}, v1::BF16}, {{2, 5}}}, {{{2, 5}}}));
  ExpectRejected(OneOp(Instruction::GELU_TANH_GRAD, {{{2, 5}, v1::I32}, {{2, 5}}}, {{{2, 5}}}),
                 nullptr, {"input 0 (buffer 0 'in0' i32[2,5]) is i32; GELU_TANH_GRAD computes "
                           "in f32"});
  ExpectRejected(OneOp(Instruction::SILU_GRAD, {{{2, 5}}}, {{{2, 5}}}), nullptr,
                 {"expects 2 inputs and 1 outputs, got 1 and 1"});
}

// x [1,3,2,4] (B, T, H, D) at sequence positions 5..7 of 16: ROPE, then ROPE_GRAD back to x.
TEST(ExecutorOpsTest, RopeRotatesAtTheBoxPositions) {
  const float theta = 10000.0f;
  ProgramBuilder b(0, 1);
  const int x = UniformParam(b, "x", {1, 3, 2, 4});
  const int y = b.Buffer("y", {1, 3, 2, 4});
  const int back = b.Buffer("back", {1, 3, 2, 4});
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  Instruction* rope = b.Op(Instruction::ROPE, {x}, {y});
  rope->set_theta(theta);
  SetRegion(rope, {0, 5, 0, 0}, {1, 3, 2, 4}, {1, 16, 2, 4});
  Instruction* grad = b.Op(Instruction::ROPE_GRAD, {y}, {back});
  grad->set_theta(theta);
  SetRegion(grad, {0, 5, 0, 0}, {1, 3, 2, 4}, {1, 16, 2, 4});
  auto e = RunOne(b.program());
  ASSERT_NE(e, nullptr);
  const std::vector<float> xv = UniformValues("x", 24, 1.0f);
  std::vector<double> want(24);
  for (int t = 0; t < 3; ++t) {
    for (int h = 0; h < 2; ++h) {
      const float* v = &xv[(t * 2 + h) * 4];
      for (int i = 0; i < 2; ++i) {
        const double angle = (5 + t) / std::pow(static_cast<double>(theta), 2.0 * i / 4);
        const double c = std::cos(angle), s = std::sin(angle);
        want[(t * 2 + h) * 4 + i] = v[i] * c - v[i + 2] * s;
        want[(t * 2 + h) * 4 + i + 2] = v[i + 2] * c + v[i] * s;
      }
    }
  }
  ExpectAllClose(Read(*e, "y"), want, 1e-5, 1e-5, "rope");
  ExpectAllClose(Read(*e, "back"), std::vector<double>(xv.begin(), xv.end()), 1e-5, 1e-5,
                 "rope_grad(rope(x))");

  auto with_theta = [](Instruction* ins) { ins->set_theta(10000.0f); };
  ExpectAccepted(OneOp(Instruction::ROPE, {{{1, 3, 2, 4}}}, {{{1, 3, 2, 4}}}, with_theta));
  ExpectRejected(OneOp(Instruction::ROPE, {{{3, 2, 4}}}, {{{3, 2, 4}}}, with_theta), nullptr,
                 {"instruction 0 (ROPE)", "input (buffer 0 'in0' f32[3,2,4]) is not [batch, seq, "
                  "heads, head_dim]"});
  ExpectRejected(OneOp(Instruction::ROPE, {{{1, 3, 2, 3}}}, {{{1, 3, 2, 3}}}, with_theta),
                 nullptr, {"input (buffer 0 'in0' f32[1,3,2,3]) has an odd head_dim"});
  ExpectRejected(OneOp(Instruction::ROPE, {{{1, 3, 2, 4}}}, {{{1, 3, 8}}}, with_theta), nullptr,
                 {"output (buffer 1 'out0' f32[1,3,8]) is not the shape of the input (buffer 0 "
                  "'in0' f32[1,3,2,4])"});
  ExpectRejected(OneOp(Instruction::ROPE_GRAD, {{{1, 3, 2, 4}}}, {{{1, 3, 2, 4}}}), nullptr,
                 {"instruction 0 (ROPE_GRAD)", "theta 0 is not positive (rope_theta)"});
  ExpectRejected(OneOp(Instruction::ROPE, {{{1, 3, 2, 4}}}, {{{1, 3, 2, 4}}},
                       [](Instruction* ins) {
                         ins->set_theta(10000.0f);
                         ins->set_outputs(0, 0);
                       }),
                 nullptr, {"output 0 (buffer 0 'in0' f32[1,3,2,4]) is also input 0"});
}

// Causal attention of q [B,T,H,D] over k, v [B,T,KVH,D] in float64, with dropout of the
// probabilities at global (batch_offset + b, head_offset + h, i, j) of [GB, GH, T, T], and its
// VJP. mask_scale: 1 / (1 - p) in float32, as the kernels apply it.
struct AttentionReference {
  std::vector<double> out, dq, dk, dv;
};

AttentionReference ReferenceAttention(const std::vector<float>& q, const std::vector<float>& k,
                                      const std::vector<float>& v, const std::vector<float>& dout,
                                      int64_t B, int64_t T, int64_t H, int64_t KVH, int64_t D,
                                      double scale, const DropoutSpec& dropout, int64_t GH,
                                      int64_t batch_offset, int64_t head_offset) {
  AttentionReference r;
  r.out.assign(q.size(), 0);
  r.dq.assign(q.size(), 0);
  r.dk.assign(k.size(), 0);
  r.dv.assign(k.size(), 0);
  const float keep_scale = 1.0f / (1.0f - dropout.p);
  auto qi = [&](int64_t b, int64_t i, int64_t h) { return ((b * T + i) * H + h) * D; };
  auto ki = [&](int64_t b, int64_t j, int64_t g) { return ((b * T + j) * KVH + g) * D; };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / KVH);
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> p(i + 1), mask(i + 1), dp(i + 1);
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d) s += static_cast<double>(q[qi(b, i, h) + d]) * k[ki(b, j, g) + d];
          p[j] = scale * s;
          max = std::max(max, p[j]);
        }
        for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - max));
        for (int64_t j = 0; j <= i; ++j) {
          p[j] /= sum;
          const int64_t e = (((batch_offset + b) * GH + head_offset + h) * T + i) * T + j;
          mask[j] = PhiloxUnit(dropout.seed, dropout.StreamKey(), e) >= dropout.p ? keep_scale : 0;
        }
        double dot = 0;  // sum_j p_j dp_j
        for (int64_t j = 0; j <= i; ++j) {
          double dpd = 0;
          for (int64_t d = 0; d < D; ++d) {
            r.out[qi(b, i, h) + d] += p[j] * mask[j] * v[ki(b, j, g) + d];
            r.dv[ki(b, j, g) + d] += p[j] * mask[j] * dout[qi(b, i, h) + d];
            dpd += static_cast<double>(dout[qi(b, i, h) + d]) * v[ki(b, j, g) + d];
          }
          dp[j] = dpd * mask[j];
          dot += p[j] * dp[j];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - dot) * scale;
          for (int64_t d = 0; d < D; ++d) {
            r.dq[qi(b, i, h) + d] += ds * k[ki(b, j, g) + d];
            r.dk[ki(b, j, g) + d] += ds * q[qi(b, i, h) + d];
          }
        }
      }
    }
  }
  return r;
}

// q [2,3,4,2] with 2 kv heads, the piece at batch 2 and head 4 of a [4,3,8,2] q (data and tensor
// parallel), dropout 0.25 at step 2.
TEST(ExecutorOpsTest, AttentionMatchesFloat64WithGroupedHeadsAndDropout) {
  const int64_t B = 2, T = 3, H = 4, KVH = 2, D = 2;
  const float scale = 1.0f / std::sqrt(2.0f), p = 0.25f;
  const uint64_t key = Fnv1a64("h.0.attn.attn_dropout");
  ProgramBuilder b(0, 1);
  const int q = UniformParam(b, "q", {B, T, H, D});
  const int k = UniformParam(b, "k", {B, T, KVH, D});
  const int v = UniformParam(b, "v", {B, T, KVH, D});
  const int dout = UniformParam(b, "dout", {B, T, H, D});
  const int out = b.Buffer("out", {B, T, H, D});
  const int dq = b.Buffer("dq", {B, T, H, D});
  const int dk = b.Buffer("dk", {B, T, KVH, D});
  const int dv = b.Buffer("dv", {B, T, KVH, D});
  b.program().set_loss_buffer(b.Buffer("loss", {1}, v1::Buffer::LOSS));
  for (Instruction* ins : {b.Op(Instruction::ATTENTION, {q, k, v}, {out}),
                           b.Op(Instruction::ATTENTION_GRAD, {q, k, v, dout}, {dq, dk, dv})}) {
    ins->set_scale(scale);
    ins->set_dropout_p(p);
    ins->set_dropout_key(key);
    SetRegion(ins, {2, 0, 4, 0}, {B, T, H, D}, {4, T, 8, D});
  }
  auto e = RunOne(b.program(), 2);
  ASSERT_NE(e, nullptr);
  DropoutSpec dropout;
  dropout.p = p;
  dropout.seed = 20240607;
  dropout.key = key;
  dropout.step = 2;
  const AttentionReference want = ReferenceAttention(
      UniformValues("q", 48, 1), UniformValues("k", 24, 1), UniformValues("v", 24, 1),
      UniformValues("dout", 48, 1), B, T, H, KVH, D, scale, dropout, 8, 2, 4);
  ExpectAllClose(Read(*e, "out"), want.out, 1e-4, 1e-5, "out");
  ExpectAllClose(Read(*e, "dq"), want.dq, 1e-4, 1e-5, "dq");
  ExpectAllClose(Read(*e, "dk"), want.dk, 1e-4, 1e-5, "dk");
  ExpectAllClose(Read(*e, "dv"), want.dv, 1e-4, 1e-5, "dv");
  // Without dropout and box: the whole tensor, nothing dropped.
  v1::Program plain = b.program();
  for (int i = 0; i < 2; ++i) {
    plain.mutable_instructions(i)->set_dropout_p(0);
    plain.mutable_instructions(i)->clear_box();
    plain.mutable_instructions(i)->clear_global_shape();
  }
  auto e2 = RunOne(plain);
  ASSERT_NE(e2, nullptr);
  dropout.p = 0;
  const AttentionReference want2 = ReferenceAttention(
      UniformValues("q", 48, 1), UniformValues("k", 24, 1), UniformValues("v", 24, 1),
      UniformValues("dout", 48, 1), B, T, H, KVH, D, scale, dropout, H, 0, 0);
  ExpectAllClose(Read(*e2, "out"), want2.out, 1e-4, 1e-5, "out without dropout");
  ExpectAllClose(Read(*e2, "dk"), want2.dk, 1e-4, 1e-5, "dk without dropout");

  const BufferSpec qs{{2, 3, 4, 2}}, kvs{{2, 3, 2, 2}};
  ExpectAccepted(OneOp(Instruction::ATTENTION_GRAD, {qs, kvs, kvs, qs}, {qs, kvs, kvs}));
  ExpectRejected(OneOp(Instruction::ATTENTION, {{{2, 3, 8}}, kvs, kvs}, {{{2, 3, 8}}}), nullptr,
                 {"instruction 0 (ATTENTION)", "q (buffer 0 'in0' f32[2,3,8]) is not [batch, "
                  "seq, heads, head_dim]"});
  ExpectRejected(OneOp(Instruction::ATTENTION, {{{2, 3, 3, 2}}, kvs, kvs}, {{{2, 3, 3, 2}}}),
                 nullptr, {"q (buffer 0 'in0' f32[2,3,3,2]) has 3 heads, not a multiple of the 2 "
                           "kv heads of k (buffer 1 'in1' f32[2,3,2,2])"});
  ExpectRejected(OneOp(Instruction::ATTENTION, {qs, kvs, {{2, 3, 1, 2}}}, {qs}), nullptr,
                 {"v (buffer 2 'in2' f32[2,3,1,2]) is not the shape of k (buffer 1 'in1' "
                  "f32[2,3,2,2])"});
  ExpectRejected(OneOp(Instruction::ATTENTION, {qs, {{2, 4, 2, 2}}, {{2, 4, 2, 2}}}, {qs}),
                 nullptr, {"k (buffer 1 'in1' f32[2,4,2,2]) and q (buffer 0 'in0' f32[2,3,4,2]) "
                           "differ in batch, seq or head_dim"});
  ExpectRejected(OneOp(Instruction::ATTENTION, {qs, kvs, kvs}, {qs},
                       [](Instruction* ins) { SetRegion(ins, {0, 0, 0, 0}, {}, {2, 6, 4, 2}); }),
                 nullptr, {"global_shape [2,6,4,2] of q (buffer 0 'in0' f32[2,3,4,2]): causal "
                           "attention needs every position and the whole head_dim"});
  ExpectRejected(OneOp(Instruction::ATTENTION, {qs, kvs, kvs}, {qs},
                       [](Instruction* ins) { ins->set_dropout_p(-0.5f); }),
                 nullptr, {"dropout_p -0.5 is outside [0, 1)"});
  ExpectRejected(OneOp(Instruction::ATTENTION_GRAD, {qs, kvs, kvs, qs}, {qs, qs, kvs}), nullptr,
                 {"instruction 0 (ATTENTION_GRAD)", "dk (buffer 5 'out1' f32[2,3,4,2]) is not "
                  "the shape of k (buffer 1 'in1' f32[2,3,2,2])"});
  ExpectRejected(OneOp(Instruction::ATTENTION_GRAD, {qs, kvs, kvs, qs}, {qs, kvs, kvs},
                       [](Instruction* ins) { ins->set_outputs(2, 5); }),
                 nullptr, {"outputs 1 and 2 are both buffer 5 'out1' f32[2,3,2,2]"});
  ExpectRejected(OneOp(Instruction::ATTENTION, {qs, kvs, kvs}, {qs},
                       [](Instruction* ins) { ins->set_scratch(0); }),
                 nullptr, {"has scratch buffer 0; only ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER "
                           "and ALL_TO_ALL pack through one, and ATTENTION has no bf16 operand "
                           "to widen there"});
}


// ---- bf16 storage: compute ops on float32 copies of their bf16 operands ----

// Builds a one-rank program whose "stored" float buffers are bf16 (or float32, the reference).
// Every float input is read FROM_FILE, so that both programs start from the same values.
class StorageProgram {
 public:
  StorageProgram(bool bf16, const std::string& init_from) : b_(0, 1), bf16_(bf16) {
    b_.program().set_init_from(init_from);
  }
  // A buffer stored as bf16 in the bf16 program; with `init`, read from the file.
  int Stored(const std::string& name, std::vector<int64_t> shape, bool init = true,
             v1::Buffer::Role role = v1::Buffer::ACTIVATION) {
    return Add(name, shape, bf16_ ? v1::BF16 : v1::F32, init, role);
  }
  // A float32 buffer in both programs.
  int F32(const std::string& name, std::vector<int64_t> shape, bool init = true,
          v1::Buffer::Role role = v1::Buffer::ACTIVATION) {
    return Add(name, shape, v1::F32, init, role);
  }
  ProgramBuilder& builder() { return b_; }

 private:
  int Add(const std::string& name, std::vector<int64_t> shape, v1::DType dtype, bool init,
          v1::Buffer::Role role) {
    const int id = b_.Buffer(name, shape, role, dtype);
    if (init) b_.Init(id, v1::ParamInit::FROM_FILE, shape);
    return id;
  }

  ProgramBuilder b_;
  const bool bf16_;
};

// Writes the FROM_FILE inputs of `p` into p.init_from(): U(-1, 1) rounded to bf16 (dtype.h),
// values both storages hold exactly.
void WriteBf16ExactInputs(const v1::Program& p) {
  std::vector<std::vector<float>> values;
  std::vector<SafetensorsFile::TensorToWrite> tensors;
  for (const v1::ParamInit& init : p.init()) {
    if (init.kind() != v1::ParamInit::FROM_FILE) continue;
    const std::vector<int64_t> shape(init.global_shape().begin(), init.global_shape().end());
    values.push_back(UniformValues(init.name(), Product(shape), 1.0f));
    for (float& v : values.back()) v = Bf16BitsToFloat(FloatToBf16Bits(v));
  }
  size_t i = 0;
  for (const v1::ParamInit& init : p.init()) {
    if (init.kind() != v1::ParamInit::FROM_FILE) continue;
    tensors.push_back({init.name(),
                       std::vector<int64_t>(init.global_shape().begin(), init.global_shape().end()),
                       values[i++].data()});
  }
  ASSERT_TRUE(SafetensorsFile::Write(p.init_from(), tensors).ok());
}

// Gives every instruction that widens bf16 operands one planned scratch buffer "widening", as
// large as the most any of them needs (WidenedBytes); returns that.
int64_t PlanWidening(v1::Program* p) {
  int64_t most = 0;
  for (const Instruction& ins : p->instructions()) {
    most = std::max(most, WidenedBytes(WidenedOperands(*p, ins)));
  }
  v1::Buffer* area = p->add_buffers();
  area->set_id(p->buffers_size() - 1);
  area->set_name("widening");
  area->add_shape(most / 4);
  area->set_role(v1::Buffer::SCRATCH);
  for (Instruction& ins : *p->mutable_instructions()) {
    if (!WidenedOperands(*p, ins).empty()) ins.set_scratch(area->id());
  }
  return most;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// After `steps` steps, every buffer of `storage` (bf16 storage) holds, bit for bit, what the
// same buffer of `reference` (float32, from the same bf16-exact inputs) holds, rounded to bf16
// (dtype.h) where `storage` stores bf16. Returns how many elements that rounding changed.
int ExpectRoundedReference(const v1::Program& storage, const v1::Program& reference, int steps,
                           const std::string& what) {
  std::unique_ptr<Executor> got = RunOne(storage, steps), want = RunOne(reference, steps);
  if (got == nullptr || want == nullptr) {
    ADD_FAILURE() << what << ": a program failed";
    return 0;
  }
  int rounded = 0;
  for (const v1::Buffer& b : storage.buffers()) {
    if (b.role() == v1::Buffer::SCRATCH) continue;
    const std::vector<float> g = Read(*got, b.name()), w = Read(*want, b.name());
    EXPECT_EQ(g.size(), w.size()) << what << " " << b.name();
    for (size_t i = 0; i < std::min(g.size(), w.size()); ++i) {
      const float expect = b.dtype() == v1::BF16 ? Bf16BitsToFloat(FloatToBf16Bits(w[i])) : w[i];
      rounded += expect != w[i];
      EXPECT_EQ(Bits(g[i]), Bits(expect))
          << what << ": " << b.name() << "[" << i << "] is " << g[i] << ", expected " << expect;
    }
  }
  return rounded;
}

// One step of MATMUL (bf16 operands, and bf16 times float32 into float32), ADD in place and ADD
// of one input, ACCUMULATE, LAYER_NORM_GRAD, GELU, EMBEDDING(_GRAD) with i32 ids, SGD of a bf16
// parameter and MSE_LOSS; each reads only the inputs (or its own output), so the float32
// program needs no rounding between instructions.
v1::Program ComputeOpsProgram(bool bf16) {
  StorageProgram sp(bf16, TempPath("bf16_storage_ops.safetensors"));
  ProgramBuilder& b = sp.builder();
  const int ids = LoadIds(b, "tokens", {2, 3}, v1::I32, {4, 7, 3, 9, 4, 0});
  const int a = sp.Stored("a", {3, 4});
  const int w = sp.Stored("w", {4, 5});
  const int y = sp.Stored("y", {3, 5}, false);
  const int wf = sp.F32("wf", {4, 5});
  const int yf = sp.F32("yf", {3, 5}, false);
  const int t = sp.Stored("t", {2, 3});
  const int u = sp.F32("u", {2, 3});
  const int s = sp.Stored("s", {2, 3});
  const int copy = sp.F32("copy", {2, 3}, false);
  const int g = sp.Stored("g", {2, 3});
  const int acc = sp.Stored("acc", {2, 3});
  const int x = sp.Stored("x", {2, 3, 4});
  const int gamma = sp.F32("gamma", {4});
  const int dy = sp.Stored("dy", {2, 3, 4});
  const int dx = sp.Stored("dx", {2, 3, 4}, false);
  const int dgamma = sp.F32("dgamma", {4}, false);
  const int dbeta = sp.Stored("dbeta", {4}, false);
  const int ga = sp.Stored("gelu", {3, 4}, false);
  const int table = sp.Stored("wte", {10, 3});
  const int emb = sp.Stored("emb", {2, 3, 3}, false);
  const int demb = sp.Stored("emb@grad", {2, 3, 3});
  const int dtable = sp.Stored("wte@grad", {10, 3}, false);
  const int param = sp.Stored("p", {2, 3}, true, v1::Buffer::PARAM);
  const int grad = sp.F32("p@grad", {2, 3});
  const int loss = sp.F32("loss", {1}, false, v1::Buffer::LOSS);
  b.program().set_loss_buffer(loss);
  b.Op(Instruction::MATMUL, {a, w}, {y}, "a @ w");
  b.Op(Instruction::MATMUL, {a, wf}, {yf}, "a @ wf");
  b.Op(Instruction::ADD, {t, u}, {t}, "t += u");
  b.Op(Instruction::ADD, {s}, {copy}, "copy = s");
  b.Op(Instruction::ACCUMULATE, {g}, {acc});
  b.Op(Instruction::LAYER_NORM_GRAD, {x, gamma, dy}, {dx, dgamma, dbeta})->set_eps(1e-5f);
  b.Op(Instruction::GELU, {a}, {ga});
  b.Op(Instruction::EMBEDDING, {ids, table}, {emb});
  b.Op(Instruction::EMBEDDING_GRAD, {ids, demb}, {dtable});
  Instruction* sgd = b.Op(Instruction::SGD, {param, grad}, {param});
  sgd->set_lr(0.1f);
  sgd->set_weight_decay(0.01f);
  b.Op(Instruction::MSE_LOSS, {u, g}, {loss})->set_scale(0.5f);
  return b.program();
}

// Two steps of ADAMW on a float32 parameter and states with a bf16 gradient.
v1::Program AdamWProgram(bool bf16) {
  StorageProgram sp(bf16, TempPath("bf16_storage_adamw.safetensors"));
  const int param = sp.F32("p", {3, 4}, true, v1::Buffer::PARAM);
  const int grad = sp.Stored("p@grad", {3, 4}, true, v1::Buffer::GRAD);
  const int m = sp.F32("p/adamw.m", {3, 4}, false, v1::Buffer::OPTIMIZER_STATE);
  const int v = sp.F32("p/adamw.v", {3, 4}, false, v1::Buffer::OPTIMIZER_STATE);
  sp.builder().program().set_loss_buffer(sp.F32("loss", {1}, false, v1::Buffer::LOSS));
  Instruction* adamw = sp.builder().Op(Instruction::ADAMW, {param, grad, m, v}, {param, m, v});
  adamw->set_lr(0.01f);
  adamw->set_beta1(0.9f);
  adamw->set_beta2(0.999f);
  adamw->set_eps(1e-8f);
  adamw->set_weight_decay(0.1f);
  return sp.builder().program();
}

// Bytes of the back-to-back arena of `p` (no Program.arena_bytes).
int64_t BackToBackArena(const v1::Program& p) {
  int64_t bytes = 0;
  for (const v1::Buffer& b : p.buffers()) bytes += ArenaAligned(BufferBytes(b));
  return bytes;
}

TEST(Bf16StorageTest, ComputeOpsGiveTheRoundedFloat32Results) {
  const v1::Program reference = ComputeOpsProgram(false);
  WriteBf16ExactInputs(reference);
  const v1::Program own = ComputeOpsProgram(true);
  v1::Program planned = own;
  // LAYER_NORM_GRAD widens the most: x, dy and dx (96 bytes each) and dbeta (16), 256 apart.
  EXPECT_EQ(PlanWidening(&planned), 3 * 256 + 16);
  EXPECT_GT(ExpectRoundedReference(own, reference, 1, "own scratch"), 0);
  EXPECT_GT(ExpectRoundedReference(planned, reference, 1, "planned scratch"), 0);

  // Beyond the arena (and the backend's own scratch, as much as the float32 program's), the
  // widening area is the executor's own scratch sized by WidenedBytes, or nothing.
  auto beyond_arena = [](const v1::Program& p) {
    std::unique_ptr<Executor> e = RunOne(p);
    return e == nullptr ? int64_t{-1} : e->last_step_peak_bytes() - BackToBackArena(p);
  };
  const int64_t backend = beyond_arena(reference);
  EXPECT_EQ(beyond_arena(own), backend + (3 * 256 + 16 + 63) / 64 * 64);  // 64-byte blocks
  EXPECT_EQ(beyond_arena(planned), backend);
}

TEST(Bf16StorageTest, AdamWWithABf16GradientMatchesFloat32) {
  const v1::Program reference = AdamWProgram(false);
  WriteBf16ExactInputs(reference);
  v1::Program planned = AdamWProgram(true);
  EXPECT_EQ(PlanWidening(&planned), 48);
  // Only the gradient is bf16, and it is only read: the float32 results agree exactly.
  EXPECT_EQ(ExpectRoundedReference(AdamWProgram(true), reference, 2, "own scratch"), 0);
  EXPECT_EQ(ExpectRoundedReference(planned, reference, 2, "planned scratch"), 0);
  std::unique_ptr<Executor> e = RunOne(reference, 2);
  ASSERT_NE(e, nullptr);
  EXPECT_NE(Read(*e, "p"), UniformValues("p", 12, 1.0f));  // it did train
}

TEST(Bf16StorageTest, APlannedScratchMustHoldTheCopiesApartFromTheOperands) {
  v1::Program p = ComputeOpsProgram(true);
  PlanWidening(&p);
  const int area = p.buffers_size() - 1;
  // MATMUL a @ w widens a, w and y: 48, 80 and 60 bytes at 0, 256 and 512.
  p.mutable_buffers(area)->set_shape(0, 142);
  ExpectRejected(p, nullptr, {"instruction 1 (MATMUL 'a @ w')",
                              "scratch buffer " + std::to_string(area) + " 'widening' f32[142] "
                              "holds 568 bytes; MATMUL widens 3 bf16 operands to float32 (572 "
                              "bytes) there"});
  p = ComputeOpsProgram(true);
  PlanWidening(&p);
  p.mutable_instructions(2)->set_scratch(p.instructions(2).outputs(0));
  ExpectRejected(p, nullptr, {"instruction 2 (MATMUL 'a @ wf')", "'yf' f32[3,5] is also the "
                              "instruction's output 0"});
  p = ComputeOpsProgram(true);
  p.mutable_instructions(3)->set_scratch(p.instructions(3).inputs(0));
  ExpectRejected(p, nullptr, {"instruction 3 (ADD 't += u')", "'t' bf16[2,3] is also the "
                              "instruction's input 0"});
  // A float32 program has nothing to widen: a scratch on a compute op is refused as before.
  p = ComputeOpsProgram(false);
  PlanWidening(&p);
  p.mutable_instructions(1)->set_scratch(p.buffers_size() - 1);
  ExpectRejected(p, nullptr, {"instruction 1 (MATMUL 'a @ w')", "has scratch buffer",
                              "and MATMUL has no bf16 operand to widen there"});
}

// Ops that move data keep their own rules for bf16: one dtype throughout, never widened, and no
// scratch unless they pack.
TEST(Bf16StorageTest, DataMovementOfBf16IsNotWidened) {
  const BufferSpec x{{2, 4}, v1::BF16};
  auto slice = [](Instruction* ins) {
    ins->set_axis(1);
    ins->set_length(2);
  };
  ExpectAccepted(OneOp(Instruction::SLICE, {x}, {{{2, 2}, v1::BF16}}, slice));
  ExpectRejected(OneOp(Instruction::SLICE, {x}, {{{2, 2}}}, slice), nullptr,
                 {"instruction 0 (SLICE)", "SLICE moves one dtype: input 0 (buffer 0 'in0' "
                  "bf16[2,4]) is bf16 but output 0 (buffer 1 'out0' f32[2,2]) is f32"});
  const absl::Status scratch =
      Executor::Create(OneOp(Instruction::SLICE, {x}, {{{2, 2}, v1::BF16}},
                             [&](Instruction* ins) {
                               slice(ins);
                               ins->set_scratch(2);  // the loss
                             }),
                       nullptr)
          .status();
  EXPECT_EQ(scratch.message(), "checking the program of rank 0 (job test): instruction 0 (SLICE): "
                               "has scratch buffer 2; only ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER "
                               "and ALL_TO_ALL pack through one");
  // CAST converts bf16 itself, with no copy: its program holds the arena and nothing else.
  v1::Program cast = OneOp(Instruction::CAST, {x}, {{{2, 4}}});
  std::unique_ptr<Executor> e = RunOne(cast);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->last_step_peak_bytes(), BackToBackArena(cast));
}

}  // namespace
}  // namespace weft
