// A multi-host test bed on one machine: "hosts" made of Linux network namespaces, each joined by
// a veth pair to the test process's own namespace, which routes between them and where the
// coordinator runs (the tests run as root). Each worker runs inside a host with the host's own
// address, so ranks on one host talk inside it and ranks on two hosts cross the routed network,
// which a test can cut (Partition) or slow (ShapeLink).
//
// Everything lives in namespaces of the test's own: the test process leaves the namespace it was
// started in (the machine's, or bazel's sandbox's) in its main(), before any thread starts, so
// the veths, routes, rules and qdiscs it sets up vanish with it and its children however it ends,
// and parallel runs do not meet. No namespace is named in /run/netns (`ip netns add`, which a
// sandbox's read-only /run refuses): a sleeping process holds each host's, reached through
// /proc/PID/ns/net. Addresses are 10.213.<subnet>.0/24, touched nowhere else.
//
// E.g.
//   int main(int argc, char** argv) {   // the test's own main
//     ::testing::InitGoogleTest(&argc, argv);
//     weft::testing::OwnNetwork() = weft::testing::EnterOwnNetworkNamespace();
//     return RUN_ALL_TESTS();
//   }
//   ASSIGN_OR_RETURN(std::unique_ptr<Host> host, Host::Start(1));
//   options.worker_argv = WorkersOnHosts(hosts);   // worker i on hosts[i % hosts.size()]
#ifndef WEFT_TESTS_NETNS_HOSTS_H_
#define WEFT_TESTS_NETNS_HOSTS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"

namespace weft::testing {

// Whether this process has a network namespace of its own (set in main from
// EnterOwnNetworkNamespace): UNAVAILABLE when it cannot have one here (not root).
absl::Status& OwnNetwork();

// Moves this process into a network namespace of its own: call in main before any thread starts
// (unshare moves only the calling thread; every thread and child started after it inherits it).
// Its loopback is up (the test's calls reach the coordinator on 127.0.0.1) and it forwards
// between the hosts' veths.
absl::Status EnterOwnNetworkNamespace();

// The path of a system tool (a name with a slash is one already): bazel's test PATH leaves
// /usr/sbin (ip, tc) out.
std::string Tool(const std::string& name);

// Runs a command (argv[0] a tool's name) to its end; an error with its stderr unless it exits 0.
absl::Status RunTool(std::vector<std::string> argv);

// A host: a network namespace held by a sleeping process (so that it outlives the workers started
// in it), its eth0 at 10.213.<subnet>.2/24, joined by a veth pair ("host<subnet>") to this
// process's namespace, whose end is the host's gateway, 10.213.<subnet>.1.
class Host {
 public:
  static absl::StatusOr<std::unique_ptr<Host>> Start(int subnet);

  // Where a worker on it is reached (the worker's --host).
  const std::string& address() const { return address_; }
  // This namespace's address on the host's link: where the host reaches the coordinator.
  const std::string& gateway() const { return gateway_; }
  // The veth end in this namespace.
  const std::string& link() const { return link_; }
  // argv (argv[0] a tool's name or a path) run in the host's namespace; nsenter execs it, so the
  // process started is argv's.
  std::vector<std::string> In(const std::vector<std::string>& argv) const;

 private:
  Host() = default;

  std::string address_, gateway_, link_, netns_;
  std::unique_ptr<Subprocess> holder_;  // sleep, in the namespace; stopped with the Host
};

// A test on kHosts hosts (subnets 1 .. kHosts, in hosts_): skipped where this process has no
// network namespace of its own (not root). A cluster the test starts goes before its hosts.
template <int kHosts>
class HostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::IsUnavailable(OwnNetwork())) {
      GTEST_SKIP() << "no network namespace of the test's own here (it needs root): "
                   << OwnNetwork().message();
    }
    ASSERT_TRUE(OwnNetwork().ok()) << OwnNetwork();
    for (int subnet = 1; subnet <= kHosts; ++subnet) {
      absl::StatusOr<std::unique_ptr<Host>> host = Host::Start(subnet);
      ASSERT_TRUE(host.ok()) << host.status();
      hosts_.push_back(*std::move(host));
    }
  }

  std::vector<std::unique_ptr<Host>> hosts_;
};

// Drops (on: true) or passes again every packet between hosts a and b, both ways, where this
// namespace routes them: silently (a blackhole rule sends no ICMP error, and neither end hears of
// it, so no RST). The coordinator's traffic, to and from the gateways, is untouched.
absl::Status Partition(const Host& a, const Host& b, bool on);

// Limits the host's link to `mbit` Mbit/s each way (tc's token bucket on both veth ends), so that
// crossing hosts costs what a network does while inside a host stays fast. 0 removes the limit.
// (A rate, not a delay: the kernel this was written on has no sch_netem.)
absl::Status ShapeLink(const Host& host, int mbit);

// DaemonClusterOptions::worker_argv putting worker i on hosts[i % hosts.size()] (so workers
// register by turns across hosts): its command run in the host, its --host the host's address,
// and the coordinator dialled through the host's gateway.
std::function<std::vector<std::string>(int, std::vector<std::string>)> WorkersOnHosts(
    const std::vector<std::unique_ptr<Host>>& hosts);

}  // namespace weft::testing

#endif  // WEFT_TESTS_NETNS_HOSTS_H_
