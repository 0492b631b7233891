#include "tests/netns_hosts.h"

#include <errno.h>
#include <sched.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

std::string NamespaceOf(const std::string& proc) {
  std::error_code ec;
  return std::filesystem::read_symlink(proc + "/ns/net", ec).string();
}

}  // namespace

absl::Status& OwnNetwork() {
  static absl::Status* own = new absl::Status(absl::UnavailableError("main() did not make one"));
  return *own;
}

std::string Tool(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  for (const char* dir : {"/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return name;  // its exec fails, naming it
}

absl::Status RunTool(std::vector<std::string> argv) {
  const std::string line = absl::StrJoin(argv, " ");
  argv[0] = Tool(argv[0]);
  const CommandResult r = RunCommand(argv, 30);
  if (r.exit_code == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("`", line, "` failed (exit ", r.exit_code, "): ", r.err));
}

absl::Status EnterOwnNetworkNamespace() {
  if (unshare(CLONE_NEWNET) != 0) {
    return absl::UnavailableError(absl::StrCat("unshare(CLONE_NEWNET): ", strerror(errno)));
  }
  RETURN_IF_ERROR(RunTool({"ip", "link", "set", "lo", "up"}));
  std::ofstream forward("/proc/sys/net/ipv4/ip_forward");
  forward << "1\n";
  forward.close();
  if (!forward) return absl::InternalError("cannot write /proc/sys/net/ipv4/ip_forward");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Host>> Host::Start(int subnet) {
  std::unique_ptr<Host> host(new Host());
  host->address_ = absl::StrCat("10.213.", subnet, ".2");
  host->gateway_ = absl::StrCat("10.213.", subnet, ".1");
  host->link_ = absl::StrCat("host", subnet);
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
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"ip", "link", "add", host->link_, "type", "veth", "peer", "name", "eth0", "netns",
            absl::StrCat(host->holder_->pid())},
           {"ip", "address", "add", host->gateway_ + "/24", "dev", host->link_},
           {"ip", "link", "set", host->link_, "up"},
           host->In({"ip", "link", "set", "lo", "up"}),
           host->In({"ip", "address", "add", host->address_ + "/24", "dev", "eth0"}),
           host->In({"ip", "link", "set", "eth0", "up"}),
           host->In({"ip", "route", "add", "default", "via", host->gateway_}),
       }) {
    RETURN_IF_ERROR(RunTool(argv));
  }
  return host;
}

std::vector<std::string> Host::In(const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {Tool("nsenter"), "--net=" + netns_, "--", Tool(argv[0])};
  out.insert(out.end(), argv.begin() + 1, argv.end());
  return out;
}

// A blackhole routing rule discards what it matches without an ICMP error (an unreachable route
// would send one). (A rule rather than `tc ... action drop` or netem: the kernel this was written
// on has neither act_gact nor sch_netem, but routes by policy, as nearly every kernel does.)
absl::Status Partition(const Host& a, const Host& b, bool on) {
  for (const auto& [from, to] : {std::pair(&a, &b), std::pair(&b, &a)}) {
    RETURN_IF_ERROR(RunTool({"ip", "rule", on ? "add" : "del", "from", from->address(), "to",
                             to->address(), "blackhole"}));
  }
  return absl::OkStatus();
}

absl::Status ShapeLink(const Host& host, int mbit) {
  const std::vector<std::vector<std::string>> ends = {{"tc"}, host.In({"tc"})};
  const std::vector<std::string> devices = {host.link(), "eth0"};
  for (size_t i = 0; i < ends.size(); ++i) {
    std::vector<std::string> argv = ends[i];
    if (mbit <= 0) {
      argv.insert(argv.end(), {"qdisc", "del", "dev", devices[i], "root"});
    } else {
      // A burst of 64 KiB and up to 100 ms queued before drops: TCP sees a slow link, not a lossy
      // one.
      argv.insert(argv.end(), {"qdisc", "replace", "dev", devices[i], "root", "tbf", "rate",
                               absl::StrCat(mbit, "mbit"), "burst", "64kb", "latency", "100ms"});
    }
    RETURN_IF_ERROR(RunTool(argv));
  }
  return absl::OkStatus();
}

std::function<std::vector<std::string>(int, std::vector<std::string>)> WorkersOnHosts(
    const std::vector<std::unique_ptr<Host>>& hosts) {
  return [&hosts](int i, std::vector<std::string> argv) {
    const Host& host = *hosts.at(i % hosts.size());
    for (size_t k = 0; k + 1 < argv.size(); ++k) {
      if (argv[k] == "--coordinator") {
        argv[k + 1] = host.gateway() + argv[k + 1].substr(argv[k + 1].rfind(':'));
      }
    }
    argv.insert(argv.end(), {"--host", host.address()});
    return host.In(argv);
  };
}

}  // namespace weft::testing
