// Topology-aware placement through the real daemons (issue 31) on the multi-host test bed
// (tests/netns_hosts): two hosts of two workers each, the workers started by turns (a, b, a, b),
// so that registration order alternates hosts. The coordinator gave ranks to workers in
// registration order, which put each mp pair of a [dp, mp] job across the two hosts; now the
// innermost mesh dim stays inside a host and dp spans them, `weftctl get` shows each rank's host,
// and the job computes the single-device numbers as on any placement.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/jobspec/yaml.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/netns_hosts.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

using TopologyTest = HostsTest<2>;

TEST_F(TopologyTest, AnMpGroupStaysInsideAHostAndDpSpansThem) {
  const std::vector<std::unique_ptr<Host>>& hosts = hosts_;
  DaemonClusterOptions options;
  options.cpu_workers = 4;
  options.coordinator_flags = {"--listen", "0.0.0.0:0"};
  options.worker_argv = WorkersOnHosts(hosts);
  auto cluster = DaemonCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  std::map<std::string, std::string> host_of;  // worker id -> host
  std::string registered;
  for (const v1::WorkerInfo& w : c.ListWorkers()) {
    host_of[w.worker_id()] = w.host();
    absl::StrAppend(&registered, " ", w.worker_id(), "@", w.host());
  }
  ASSERT_EQ(host_of.size(), 4u);
  std::cout << "registered:" << registered << std::endl;

  const MlpJob job = MlpJob::Create();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(
      MlpSpec(job, "{shape: [2, 2], dim_names: [dp, mp]}", MlpJob::kSteps, "", false,
              {{"fc0", "placements: {weight: [Replicate(), Shard(1)], bias: [Replicate(), "
                       "Shard(0)]}"},
               {"fc1", "placements: {weight: [Replicate(), Shard(0)]}"}}),
      job.dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string id;
  const grpc::Status submitted = c.Submit(*spec, &id);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  const JobOutcome outcome = JobOutcome::Of(c.Watch(id, 120));
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();
  ExpectLossesNear(outcome.LossList(), job.ReferenceLosses(), 1e-4, "[dp, mp] on two hosts");

  const v1::Job record = c.GetJob(id);
  ASSERT_EQ(record.workers_size(), 4);
  std::vector<std::string> rank_hosts;
  for (const std::string& w : record.workers()) rank_hosts.push_back(host_of.at(w));
  EXPECT_EQ(rank_hosts[0], rank_hosts[1]) << "mp pair of dp 0 split across hosts";
  EXPECT_EQ(rank_hosts[2], rank_hosts[3]) << "mp pair of dp 1 split across hosts";
  EXPECT_NE(rank_hosts[0], rank_hosts[2]) << "both dp replicas on one host";

  const CommandResult get = c.Weftctl({"get", id});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  for (int r = 0; r < 4; ++r) {
    EXPECT_NE(get.out.find(absl::StrCat(r, ": ", record.workers(r), " on ", rank_hosts[r])),
              std::string::npos)
        << get.out;
  }
  EXPECT_NE(get.out.find("(rank: worker on host)"), std::string::npos) << get.out;
}

}  // namespace
}  // namespace weft::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  weft::testing::OwnNetwork() = weft::testing::EnterOwnNetworkNamespace();
  return RUN_ALL_TESTS();
}
