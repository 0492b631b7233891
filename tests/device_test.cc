// Devices through the real daemons on a machine without a GPU (CI): a GPU worker that cannot
// start says why, a job that asks for cuda waits with a reason while only CPU workers are
// registered (and does not hold up cpu jobs), workers report their device, and `precision: bf16`
// trains the same numbers on 1 and 2 ranks as a float64 reference that rounds its matmul
// operands to bfloat16. Under --config=cuda (tag `cuda`) the same test checks the CUDA error text.
#include <grpcpp/grpcpp.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "common/jobspec/yaml.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"
#include "weft/v1/service.grpc.pb.h"
#include "worker/kernels/backend.h"

namespace weft::testing {
namespace {

using ::testing::HasSubstr;

class DeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    job_ = new MlpJob(MlpJob::Create());
    auto cluster = DaemonCluster::Start(2);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }

  static void TearDownTestSuite() {
    delete cluster_;
    delete job_;
  }

  static std::vector<v1::WorkerInfo> ListWorkers() { return cluster_->ListWorkers(); }
  static v1::Job GetJob(const std::string& id) { return cluster_->GetJob(id); }
  static CommandResult Weftctl(const std::vector<std::string>& args, int timeout_s = 60) {
    return cluster_->Weftctl(args, timeout_s);
  }

  static std::string Submit(const std::string& yaml) {
    auto spec = ParseJobSpecYaml(yaml, job_->dir);
    EXPECT_TRUE(spec.ok()) << spec.status();
    std::string id;
    grpc::Status s = cluster_->Submit(*spec, &id);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return id;
  }

  static MlpJob* job_;
  static DaemonCluster* cluster_;
};

MlpJob* DeviceTest::job_ = nullptr;
DaemonCluster* DeviceTest::cluster_ = nullptr;

TEST_F(DeviceTest, GpuWorkerWithoutAGpuExitsWithTheReason) {
  if (ProbeDevice("cuda:0").ok()) GTEST_SKIP() << "a GPU is present: tests/gpu/run.sh covers it";
  CommandResult r = RunCommand({BinaryPath("worker/weft-worker"), "--coordinator",
                                cluster_->address(), "--device", "cuda:0"},
                               60);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("weft-worker: --device=cuda:0: no usable CUDA device: "));
  if (CudaCompiled()) {
    // The CUDA runtime's own words: on a machine with the toolkit but no driver,
    // "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version
    // (cudaErrorInsufficientDriver)"; with a driver but no GPU, cudaErrorNoDevice.
    EXPECT_THAT(r.err, HasSubstr("cudaGetDeviceCount"));
    EXPECT_THAT(r.err, HasSubstr("(cudaError"));
  } else {
    EXPECT_THAT(r.err, HasSubstr("built without CUDA"));
  }
  // One line: the reason, not a log.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // It never registered.
  for (const v1::WorkerInfo& w : ListWorkers()) EXPECT_EQ(w.device().kind(), "cpu");

  CommandResult bad = RunCommand({BinaryPath("worker/weft-worker"), "--coordinator",
                                  cluster_->address(), "--device", "gpu:0"},
                                 60);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("unknown device \"gpu:0\": expected cpu, cuda or cuda:N"));
}

TEST_F(DeviceTest, WorkersReportTheirDevice) {
  std::vector<v1::WorkerInfo> workers = ListWorkers();
  ASSERT_EQ(workers.size(), 2u);
  for (const v1::WorkerInfo& w : workers) {
    EXPECT_EQ(w.device().kind(), "cpu");
    EXPECT_FALSE(w.device().name().empty());
    EXPECT_GT(w.device().cores(), 0);
    EXPECT_GT(w.device().memory_bytes(), 0);
  }
  CommandResult table = Weftctl({"workers"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("DEVICE"));
  EXPECT_THAT(table.out, HasSubstr(absl::StrCat("cpu (", workers[0].device().cores(), " cores, ")));
  CommandResult json = Weftctl({"workers", "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr(workers[0].device().name()));
}

TEST_F(DeviceTest, CudaJobWaitsWithAReasonAndCpuJobsStillRun) {
  const std::string cuda_job =
      Submit(job_->SpecYaml("{shape: [2], dim_names: [dp]}", "device: cuda\n"));
  // SubmitJob schedules before it returns: the job is already waiting, with its reason; it is
  // still waiting after the cpu job below has run.
  v1::Job waiting = GetJob(cuda_job);
  EXPECT_EQ(waiting.state(), v1::PENDING);
  EXPECT_EQ(waiting.message(), "waiting for 2 idle cuda workers, 0 registered");
  CommandResult get = Weftctl({"get", cuda_job});
  EXPECT_THAT(get.out, HasSubstr("waiting for 2 idle cuda workers, 0 registered"));

  // The cpu workers are not held for it: a cpu job submitted after it runs, with the right numbers.
  const std::string spec = job_->WriteSpec("cpu.yaml", job_->SpecYaml("{shape: [2], dim_names: [dp]}"));
  // The client sees the cluster's files at the same paths.
  CommandResult r = Weftctl({"submit", "--check-local-files", spec, "--watch", "--json"}, 180);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  std::string state;
  std::vector<double> losses = ParseStepLosses(r.out, &state);
  EXPECT_EQ(state, "SUCCEEDED");
  std::vector<double> want = job_->ReferenceLosses();
  ASSERT_EQ(losses.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_LT(RelDiff(losses[i], want[i]), 1e-4) << i;

  // Still waiting, and it can be cancelled.
  EXPECT_EQ(GetJob(cuda_job).state(), v1::PENDING);
  EXPECT_EQ(Weftctl({"cancel", cuda_job}).exit_code, 0);
  EXPECT_EQ(GetJob(cuda_job).state(), v1::CANCELLED);
}

TEST(LocalGpuClusterTest, WithoutAGpuFailsFastNamingTheCudaError) {
  if (ProbeDevice("cuda:0").ok()) GTEST_SKIP() << "a GPU is present: tests/gpu/run.sh covers it";
  MlpJob job = MlpJob::Create();
  const std::string spec = job.WriteSpec("one.yaml", job.SpecYaml("{shape: [1]}"));
  CommandResult r = RunCommand({BinaryPath("client/weftctl"), "local", "--device", "cuda",
                                "--coordinator_bin", BinaryPath("coordinator/weft-coordinator"),
                                "--worker_bin", BinaryPath("worker/weft-worker"), spec},
                               120);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("worker-0"));
  EXPECT_THAT(r.err, HasSubstr("--device=cuda:0: no usable CUDA device: "));
}

// The MLP on `mesh` (`ranks` workers) with `extra` spec keys, through `weftctl local`: its losses.
std::vector<double> Losses(const MlpJob& job, const std::string& file, const std::string& mesh,
                           int ranks, const std::string& extra,
                           const std::map<std::string, std::string>& layers = {}) {
  return RunLocalLosses(job.WriteSpec(file, job.SpecYaml(mesh, extra, layers)), ranks);
}

TEST(PrecisionTest, Bf16TrainsLikeARoundingReferenceOnOneAndTwoRanks) {
  MlpJob job = MlpJob::Create();
  const std::vector<double> exact = job.ReferenceLosses(false);
  const std::vector<double> bf16 = job.ReferenceLosses(true);
  const std::string bf16_key = "precision: bf16\n";
  // The three runs share one cluster.
  absl::StatusOr<std::unique_ptr<DaemonCluster>> cluster = DaemonCluster::Start(2);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto losses = [&](const std::string& file, const std::string& mesh,
                    const std::map<std::string, std::string>& layers = {}) {
    return RunClusterLosses(**cluster, job.WriteSpec(file, job.SpecYaml(mesh, bf16_key, layers)));
  };
  const std::vector<double> one = losses("bf16_1.yaml", "{shape: [1]}");
  const std::vector<double> dp2 = losses("bf16_dp2.yaml", "{shape: [2], dim_names: [dp]}");
  const std::vector<double> mp2 =
      losses("bf16_mp2.yaml", "{shape: [2], dim_names: [mp]}", ColRowOverMp());
  ASSERT_EQ(one.size(), bf16.size());
  ASSERT_EQ(dp2.size(), bf16.size());
  ASSERT_EQ(mp2.size(), bf16.size());
  bool differs_from_f32 = false;
  for (size_t i = 0; i < bf16.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "step " << i + 1);
    // bf16 rounding is elementwise on the operands, so sharding does not change it: the ranks
    // agree to float32 summation order, and the rounding reference to about 1e-3 (an operand
    // that sits on a rounding boundary in float64 may round the other way in float32).
    EXPECT_LT(RelDiff(dp2[i], one[i]), 1e-5);
    EXPECT_LT(RelDiff(mp2[i], one[i]), 1e-5);
    EXPECT_LT(RelDiff(one[i], bf16[i]), 1e-3);
    if (RelDiff(one[i], exact[i]) > 1e-4) differs_from_f32 = true;
  }
  EXPECT_TRUE(differs_from_f32) << "precision: bf16 ran as float32";
}

// On a GPU node (tests/gpu/run.sh sets WEFT_REQUIRE_GPU=1, so there it cannot skip): the job
// on cuda trains the numbers of the float64 reference and of the same job on cpu, on one GPU and,
// with two, data-, tensor- and pipeline-parallel over NCCL; bf16 matches its rounding reference.
TEST(GpuRunTest, MlpOnCudaMatchesCpuAndFloat64) {
  absl::StatusOr<DeviceDescription> gpu = ProbeDevice("cuda:0");
  if (!gpu.ok()) {
    const char* require = std::getenv("WEFT_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1") {
      FAIL() << "WEFT_REQUIRE_GPU=1 but " << gpu.status();
    }
    GTEST_SKIP() << gpu.status();
  }
  MlpJob job = MlpJob::Create();
  const std::vector<double> want = job.ReferenceLosses();
  const std::string on_cuda = "device: cuda\n";
  const std::vector<double> cpu = Losses(job, "cpu1.yaml", "{shape: [1]}", 1, "");
  const std::vector<double> cuda = Losses(job, "cuda1.yaml", "{shape: [1]}", 1, on_cuda);
  ASSERT_EQ(cuda.size(), want.size());
  ASSERT_EQ(cpu.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LT(RelDiff(cuda[i], want[i]), 1e-4) << "step " << i + 1;
    EXPECT_LT(RelDiff(cuda[i], cpu[i]), 1e-5) << "step " << i + 1;
  }
  const std::vector<double> bf16_want = job.ReferenceLosses(/*bf16_matmul=*/true);
  const std::vector<double> bf16 =
      Losses(job, "cuda1_bf16.yaml", "{shape: [1]}", 1, on_cuda + "precision: bf16\n");
  ASSERT_EQ(bf16.size(), bf16_want.size());
  for (size_t i = 0; i < bf16.size(); ++i) {
    EXPECT_LT(RelDiff(bf16[i], bf16_want[i]), 1e-3) << "step " << i + 1;
  }

  if (!ProbeDevice("cuda:1").ok()) {
    GTEST_SKIP() << "one GPU: the NCCL runs need two (cuda:1: " << ProbeDevice("cuda:1").status()
                 << ")";
  }
  const std::vector<double> dp2 =
      Losses(job, "cuda_dp2.yaml", "{shape: [2], dim_names: [dp]}", 2, on_cuda);
  const std::vector<double> mp2 =
      Losses(job, "cuda_mp2.yaml", "{shape: [2], dim_names: [mp]}", 2, on_cuda, ColRowOverMp());
  // Pipeline stages hand activations and gradients over with ncclSend/ncclRecv.
  const std::vector<double> pp2 =
      Losses(job, "cuda_pp2.yaml", "{shape: [2], dim_names: [pp]}", 2,
             on_cuda + "pipeline: {dim: pp, schedule: 1F1B, micro_batches: 2}\n");
  ASSERT_EQ(dp2.size(), want.size());
  ASSERT_EQ(mp2.size(), want.size());
  ASSERT_EQ(pp2.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LT(RelDiff(dp2[i], cuda[i]), 1e-5) << "step " << i + 1;
    EXPECT_LT(RelDiff(mp2[i], cuda[i]), 1e-5) << "step " << i + 1;
    EXPECT_LT(RelDiff(pp2[i], cuda[i]), 1e-5) << "step " << i + 1;
    EXPECT_LT(RelDiff(dp2[i], want[i]), 1e-4) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace weft::testing
