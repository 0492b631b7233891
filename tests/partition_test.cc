// A silent partition between two workers' hosts (issue 30, item 9), through the real daemons on
// networks the test makes: each worker runs on a host of its own, a network namespace joined by a
// veth pair to this process's namespace, which routes between the hosts and where the coordinator
// runs. A dp=2 job trains, its collectives (Gloo over TCP) going from one host to the other; then
// every packet between the two hosts is dropped, with no RST and no ICMP error, while the
// coordinator still reaches both (their heartbeats stay fresh). Before the progress watchdog the
// ranks waited in their collective for the collective timeout (300 s) with the job RUNNING; now
// the coordinator restarts the attempt once no step has completed for --progress_floor_ms, and
// once the partition heals the job SUCCEEDS with the losses of an uninterrupted run bit for bit.
//
// Everything the test makes lives in namespaces of its own: its process leaves the network
// namespace it was started in (the machine's, or bazel's sandbox's) in main(), so the veths,
// routes, rules and forwarding it sets up vanish with it and its children, however it ends, and
// runs in parallel do not meet. It names no namespace in /run/netns (`ip netns add`, which a
// sandbox's read-only /run refuses): a sleeping process holds each host's, reached through
// /proc/PID/ns/net. So it runs sandboxed like the other tests; bazel's linux-sandbox leaves root
// the capabilities it needs. Without the right to make a namespace (not root) it skips.
#include <errno.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/jobspec/yaml.h"
#include "common/status.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

// Whether this process has a network namespace of its own (set in main): UNAVAILABLE when it
// cannot have one here.
absl::Status& OwnNetwork() {
  static absl::Status* own = new absl::Status(absl::UnavailableError("main() did not make one"));
  return *own;
}

// The path of a system tool (a name with a slash is one already): bazel's test PATH leaves
// /usr/sbin (ip) out, and neither a Subprocess nor nsenter under that PATH would find it.
std::string Tool(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return name;  // its exec fails, naming it
}

// Runs a command (argv[0] a tool's name) to its end; an error with its stderr unless it exits 0.
absl::Status Run(std::vector<std::string> argv) {
  const std::string line = absl::StrJoin(argv, " ");
  argv[0] = Tool(argv[0]);
  const CommandResult r = RunCommand(argv, 30);
  if (r.exit_code == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("`", line, "` failed (exit ", r.exit_code, "): ", r.err));
}

// This process's own network namespace, entered before any thread starts: unshare moves only the
// calling thread, and every thread and child started after it (gRPC's, the daemons) inherits it.
// Its loopback is up (the test's calls reach the coordinator on 127.0.0.1) and it forwards
// between the hosts' veths: it is the network between them.
absl::Status EnterOwnNetworkNamespace() {
  if (unshare(CLONE_NEWNET) != 0) {
    return absl::UnavailableError(absl::StrCat("unshare(CLONE_NEWNET): ", strerror(errno)));
  }
  RETURN_IF_ERROR(Run({"ip", "link", "set", "lo", "up"}));
  std::ofstream forward("/proc/sys/net/ipv4/ip_forward");
  forward << "1\n";
  forward.close();
  if (!forward) return absl::InternalError("cannot write /proc/sys/net/ipv4/ip_forward");
  return absl::OkStatus();
}

std::string NamespaceOf(const std::string& proc) {
  std::error_code ec;
  return std::filesystem::read_symlink(proc + "/ns/net", ec).string();
}

// A worker's host: a network namespace held by a sleeping process (so that it outlives the
// workers started in it), its eth0 at 10.213.<subnet>.2/24, joined by a veth pair to this
// process's namespace, whose end is the host's gateway, 10.213.<subnet>.1. The subnet is the
// test's own; no address outside the namespaces it made is touched.
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<Host> host, Host::Start(1));
//   StartDaemon(host->In({worker, "--host", host->address(), ...}), log);
class Host {
 public:
  static absl::StatusOr<std::unique_ptr<Host>> Start(int subnet) {
    std::unique_ptr<Host> host(new Host());
    host->address_ = absl::StrCat("10.213.", subnet, ".2");
    host->gateway_ = absl::StrCat("10.213.", subnet, ".1");
    const std::string dir = MakeTempDir("host");
    absl::StatusOr<std::unique_ptr<Subprocess>> holder =
        StartDaemon({Tool("unshare"), "--net", Tool("sleep"), "infinity"}, dir + "/holder.log");
    if (!holder.ok()) return holder.status();
    host->holder_ = *std::move(holder);
    const std::string proc = absl::StrCat("/proc/", host->holder_->pid());
    // unshare execs sleep once its namespace is made: until then the pid is in this one's.
    const absl::Status unshared = PollUntil(
        [&] {
          const std::string ns = NamespaceOf(proc);
          return !ns.empty() && ns != NamespaceOf("/proc/thread-self");
        },
        absl::Seconds(10), absl::Milliseconds(10));
    if (!unshared.ok()) {
      return absl::InternalError(absl::StrCat("the host's namespace was not made: ",
                                              ReadFileOrEmpty(dir + "/holder.log")));
    }
    host->netns_ = proc + "/ns/net";
    const std::string veth = absl::StrCat("host", subnet);
    for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
             {"ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns",
              absl::StrCat(host->holder_->pid())},
             {"ip", "address", "add", host->gateway_ + "/24", "dev", veth},
             {"ip", "link", "set", veth, "up"},
             host->In({"ip", "link", "set", "lo", "up"}),
             host->In({"ip", "address", "add", host->address_ + "/24", "dev", "eth0"}),
             host->In({"ip", "link", "set", "eth0", "up"}),
             host->In({"ip", "route", "add", "default", "via", host->gateway_}),
         }) {
      RETURN_IF_ERROR(Run(argv));
    }
    return host;
  }

  // Where its worker's collectives are reached (the worker's --host).
  const std::string& address() const { return address_; }
  // This namespace's address on the host's link: where the host reaches the coordinator.
  const std::string& gateway() const { return gateway_; }
  // argv (argv[0] a tool's name or a path) run in the host's namespace; nsenter execs it, so
  // the process started is argv's.
  std::vector<std::string> In(const std::vector<std::string>& argv) const {
    std::vector<std::string> out = {Tool("nsenter"), "--net=" + netns_, "--", Tool(argv[0])};
    out.insert(out.end(), argv.begin() + 1, argv.end());
    return out;
  }

 private:
  Host() = default;

  std::string address_, gateway_, netns_;
  std::unique_ptr<Subprocess> holder_;  // sleep, in the namespace; stopped with the Host
};

// Drops (on: true) or passes again every packet between hosts a and b where this namespace
// routes them, in both directions. A blackhole routing rule discards what it matches without an
// ICMP error (an unreachable route would send one), and neither end hears of it, so no RST: the
// TCP connections between the workers just stop delivering. The coordinator's traffic, to and
// from the gateways, matches neither rule. (A rule rather than `tc ... action drop` or netem: the
// kernel this was written on has neither act_gact nor sch_netem, but routes by policy, as nearly
// every kernel does.)
absl::Status Partition(const Host& a, const Host& b, bool on) {
  for (const auto& [from, to] : {std::pair(&a, &b), std::pair(&b, &a)}) {
    RETURN_IF_ERROR(Run({"ip", "rule", on ? "add" : "del", "from", from->address(), "to",
                         to->address(), "blackhole"}));
  }
  return absl::OkStatus();
}

constexpr int kSteps = 100;
// Steps of about 50 ms: ~5 s of training, so the watchdog's 10 x median stays under its floor.
constexpr char kStepMs[] = "50";
constexpr char kProgressFloorMs[] = "2000";

v1::JobSpec Spec(const MlpJob& job, const std::string& dir, int max_restarts) {
  std::string yaml = MlpSpec(job, "{shape: [2], dim_names: [dp]}", kSteps,
                             absl::StrCat("{dir: ", dir, ", every: 5}"), false);
  const std::string train = "train: {";
  yaml.replace(yaml.find(train), train.size(),
               absl::StrCat("train: {max_restarts: ", max_restarts, ", "));
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(yaml, job.dir);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

TEST(PartitionTest, ASilentPartitionBetweenTwoWorkersHostsIsRestartedByTheProgressWatchdog) {
  if (absl::IsUnavailable(OwnNetwork())) {
    GTEST_SKIP() << "no network namespace of the test's own here (it needs root): "
                 << OwnNetwork().message();
  }
  ASSERT_TRUE(OwnNetwork().ok()) << OwnNetwork();
  // Declared before the cluster, so that they are stopped after its workers.
  std::vector<std::unique_ptr<Host>> hosts;
  for (int subnet : {1, 2}) {
    absl::StatusOr<std::unique_ptr<Host>> host = Host::Start(subnet);
    ASSERT_TRUE(host.ok()) << host.status();
    hosts.push_back(*std::move(host));
  }

  DaemonClusterOptions options;
  options.cpu_workers = 2;
  // The coordinator on every address of this namespace: the test's calls come from 127.0.0.1,
  // each worker's through its gateway. Workers lost 2 s after their last heartbeat (every 200 ms).
  options.coordinator_flags = {
      "--listen",       "0.0.0.0:0", "--progress_floor_ms", kProgressFloorMs,
      "--heartbeat_ms", "200",       "--worker_timeout_ms", "2000"};
  options.worker_env = {{"WEFT_DEBUG_STEP_MS", kStepMs}};
  // The default, said out loud: the partition is not what the collective timeout finds.
  options.worker_flags = {"--collective_timeout_s", "300"};
  options.worker_argv = [&hosts](int i, std::vector<std::string> argv) {
    const Host& host = *hosts.at(i);
    for (size_t k = 0; k + 1 < argv.size(); ++k) {
      if (argv[k] == "--coordinator") {
        argv[k + 1] = host.gateway() + argv[k + 1].substr(argv[k + 1].rfind(':'));
      }
    }
    argv.insert(argv.end(), {"--host", host.address()});
    return host.In(argv);
  };
  auto cluster = DaemonCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  std::vector<std::string> worker_hosts;
  for (const v1::WorkerInfo& w : c.ListWorkers()) worker_hosts.push_back(w.host());
  std::sort(worker_hosts.begin(), worker_hosts.end());
  ASSERT_EQ(worker_hosts, (std::vector<std::string>{"10.213.1.2", "10.213.2.2"}));

  // The uninterrupted run, on the same hosts: its collectives cross the routed network too.
  const MlpJob job = MlpJob::Create();
  std::string id;
  ASSERT_TRUE(c.Submit(Spec(job, "straight", 0), &id).ok());
  const JobOutcome straight = JobOutcome::Of(c.Watch(id, 120));
  ASSERT_EQ(straight.state, v1::SUCCEEDED) << straight.message << c.Logs();
  ASSERT_EQ(straight.losses.size(), static_cast<size_t>(kSteps));

  std::string partitioned;
  ASSERT_TRUE(c.Submit(Spec(job, "partitioned", 1), &partitioned).ok());
  ASSERT_TRUE(
      PollUntil([&] { return c.GetJob(partitioned).steps_size() >= 10; }, absl::Seconds(60)).ok())
      << c.GetJob(partitioned).DebugString() << c.Logs();
  ASSERT_EQ(Partition(*hosts[0], *hosts[1], true), absl::OkStatus());
  const absl::Time cut = absl::Now();
  // Well inside the collective timeout (300 s): only the watchdog restarts it this soon.
  ASSERT_TRUE(PollUntil([&] { return c.GetJob(partitioned).state() == v1::RESTARTING; },
                        absl::Seconds(60), absl::Milliseconds(50))
                  .ok())
      << c.GetJob(partitioned).DebugString() << c.Logs();
  std::cout << "the partition was found after " << absl::FormatDuration(absl::Now() - cut)
            << std::endl;
  // Both workers' heartbeats went on through it: neither is lost.
  for (const v1::WorkerInfo& w : c.ListWorkers()) {
    EXPECT_NE(w.state(), "lost") << w.DebugString();
  }
  ASSERT_EQ(Partition(*hosts[0], *hosts[1], false), absl::OkStatus());

  const std::vector<v1::JobEvent> events = c.Watch(partitioned, 120);
  const JobOutcome outcome = JobOutcome::Of(events);
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();
  EXPECT_EQ(outcome.losses, straight.losses);
  EXPECT_EQ(c.GetJob(partitioned).attempt(), 1);
  // One restart, the watchdog's (rank -1): no rank saw an error it could report (the partition
  // was silent) and no worker was lost.
  int restarts = 0;
  bool resumed = false;
  for (const v1::JobEvent& e : events) {
    if (e.has_restart()) {
      ++restarts;
      EXPECT_EQ(e.restart().rank(), -1);
      EXPECT_NE(e.restart().cause().find("no step completed for "), std::string::npos)
          << e.restart().cause();
      EXPECT_NE(e.restart().cause().find("its workers cannot reach each other"), std::string::npos)
          << e.restart().cause();
    }
    resumed |= e.has_state() && e.state() == v1::RUNNING &&
               e.message().find("restart 1 of 1, resuming from ") != std::string::npos &&
               e.message().find("partitioned/step-") != std::string::npos;
  }
  EXPECT_EQ(restarts, 1);
  EXPECT_TRUE(resumed) << "the second attempt did not resume from a checkpoint";
}

}  // namespace
}  // namespace weft::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  weft::testing::OwnNetwork() = weft::testing::EnterOwnNetworkNamespace();
  return RUN_ALL_TESTS();
}
