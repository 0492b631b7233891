// `mesh: {auto: true}` through the real daemons: four workers that offer less memory than the
// fastest plan needs (--memory_limit), a cost profile stored with `weftctl calibrate`, and a tiny
// Llama (grouped-query attention) submitted with no strategy at all. The coordinator's search
// picks a plan that fits (never the fastest, which does not), says which in the job's first
// event, and the job trains to the 1-rank run's losses (1e-5) and the float64 reference's (1e-4).
// Without a profile the same spec is refused naming the command that stores one.
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/jobspec/yaml.h"
#include "nlohmann/json.hpp"
#include "gtest/gtest.h"
#include "common/cost_profile_json.h"
#include "planner/cost/cost_testing.h"
#include "planner/cost/search.h"
#include "tests/daemon_cluster.h"
#include "tests/transformer_job.h"

namespace weft::testing {
namespace {

using planner::cost::AddKernel;
using planner::cost::AddLink;

// Fixed figures (not measured: the pick must not depend on this machine's load): a slow link,
// so that what the plans send decides between them.
v1::CostProfile Profile() {
  v1::CostProfile p;
  p.set_kind("cpu");
  p.set_device("test profile");
  p.set_overlap_slowdown(1.2);
  p.set_measured_unix_ms(1);
  AddKernel(&p, v1::KernelCost::MATMUL, 5e-6, 2e-11);
  AddKernel(&p, v1::KernelCost::ATTENTION, 5e-6, 4e-11);
  AddKernel(&p, v1::KernelCost::MEMORY, 1e-6, 1e-10);
  AddLink(&p, v1::Instruction::ALL_REDUCE, v1::LinkCost::INTRA_HOST, 1e-4, 1e-9);
  AddLink(&p, v1::Instruction::SEND, v1::LinkCost::INTRA_HOST, 1e-4, 1e-9);
  return p;
}

TEST(AutoParallelTest, ThePickFitsTheWorkersMemoryAndTrainsToTheOneRankLosses) {
  const TransformerJob job = TransformerJob::Create("llama");
  const std::string auto_spec = job.WriteSpec("auto", "{auto: true, ranks: 4}");
  const std::string one_spec = job.WriteSpec("one", "{shape: [1], dim_names: [dp]}");
  const std::string profile_path = job.dir + "/profile.json";
  ASSERT_TRUE(WriteCostProfile(Profile(), profile_path).ok());

  // The search as the coordinator will run it, without a limit: the fastest plan and its peak.
  absl::StatusOr<v1::JobSpec> spec = LoadJobSpecFile(auto_spec);
  ASSERT_TRUE(spec.ok()) << spec.status();
  planner::cost::SearchOptions options;
  options.ranks = 4;
  options.host_of_slot.assign(4, "127.0.0.1");
  absl::StatusOr<planner::cost::SearchResult> free =
      planner::cost::SearchStrategies(*spec, options, Profile());
  ASSERT_TRUE(free.ok()) << free.status();
  const planner::cost::Candidate& fastest = free->ranked.front();
  // Workers that offer one byte less than it needs; some plans still fit.
  const int64_t limit = fastest.peak_bytes - 1;
  ASSERT_TRUE(std::any_of(free->ranked.begin(), free->ranked.end(),
                          [&](const auto& c) { return c.peak_bytes <= limit; }));

  DaemonClusterOptions cluster_options;
  cluster_options.cpu_workers = 4;
  cluster_options.worker_flags = {"--memory_limit", std::to_string(limit)};
  auto cluster = DaemonCluster::Start(cluster_options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;

  // No profile yet: refused, naming what stores one.
  std::string id;
  grpc::Status refused = c.Submit(*spec, &id);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("weftctl calibrate FILE"), std::string::npos)
      << refused.error_message();

  CommandResult stored = c.Weftctl({"calibrate", profile_path});
  ASSERT_EQ(stored.exit_code, 0) << stored.err;
  CommandResult workers = c.Weftctl({"workers"});
  EXPECT_NE(workers.out.find("cost profile cpu @ any host (test profile"), std::string::npos)
      << workers.out;

  ASSERT_TRUE(c.Submit(*spec, &id).ok());
  const std::vector<v1::JobEvent> events = c.Watch(id);
  const JobOutcome run = JobOutcome::Of(events);
  ASSERT_EQ(run.state, v1::SUCCEEDED) << run.message << c.Logs();
  // The first event names the pick: not the fastest plan, which does not fit.
  ASSERT_FALSE(events.empty());
  const std::string& first = events.front().message();
  EXPECT_NE(first.find("auto-parallel chose "), std::string::npos) << first;
  EXPECT_EQ(first.find("chose " + fastest.strategy.Label() + " of"), std::string::npos) << first;
  const v1::Job stored_job = c.GetJob(id);
  EXPECT_FALSE(stored_job.spec().mesh().auto_parallel());
  int64_t ranks = 1;
  for (int64_t d : stored_job.spec().mesh().shape()) ranks *= d;
  EXPECT_EQ(ranks, 4);
  // What the workers held stayed within what they offered.
  EXPECT_GT(run.peak_bytes, 0);
  EXPECT_LE(run.peak_bytes, limit);

  // The 1-rank run does not fit these workers: it runs on a local cluster of its own.
  CommandResult local = c.Weftctl({"local", "--ranks", "1", "--json", one_spec}, 180);
  ASSERT_EQ(local.exit_code, 0) << local.err;
  std::vector<v1::JobEvent> one_events;
  for (const std::string& line : std::vector<std::string>(absl::StrSplit(local.out, '\n'))) {
    if (line.rfind("{\"type\":\"step\"", 0) != 0) continue;
    v1::JobEvent e;
    e.mutable_step()->set_step(static_cast<int64_t>(nlohmann::json::parse(line)["step"]));
    e.mutable_step()->set_loss(nlohmann::json::parse(line)["loss"]);
    one_events.push_back(e);
  }
  const JobOutcome one = JobOutcome::Of(one_events);
  std::map<std::string, std::vector<double>> params;
  const std::vector<double> want = job.Reference(&params);
  const std::vector<double> got = run.LossList();
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(one.LossList().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], one.LossList()[i], 1e-5) << "step " << i + 1;
    EXPECT_NEAR(got[i], want[i], 1e-4) << "step " << i + 1;
  }
}

}  // namespace
}  // namespace weft::testing
