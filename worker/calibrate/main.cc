// weft-calibrate: measures this host's cost profile (proto/weft/v1/profile.proto) and writes it
// as JSON (common/cost_profile_json.h) for `weftctl calibrate` and `weftctl plan --auto
// --profile`. One process per rank; the ranks meet through a Gloo FileStore in a folder they
// share (a fresh one per run) and each publishes the address it binds. Links are measured over
// the whole world (INTER_HOST when the ranks' addresses differ, else INTRA_HOST), and, when the
// world spans several addresses, over one pair on one address (INTRA_HOST) and one pair across
// two (INTER_HOST); ranks 0 and 1 measure what an all-reduce in flight costs a matmul. Then the
// kernels and the executor's cost per instruction: every rank at once (--kernels_together, as
// CPU workers sharing a host compute), rank 0 keeping its own. Rank 0 writes the profile. With
// --world 1 only the kernels are measured.
//
// E.g.
//   OMP_WAIT_POLICY=passive weft-calibrate --world 1 --out cpu.json
//   weft-calibrate --rank 0 --world 2 --store /shared/cal --host 10.0.0.1 --out cpu.json &
//   weft-calibrate --rank 1 --world 2 --store /shared/cal --host 10.0.0.2
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/cost_profile_json.h"
#include "common/help_flags.h"
#include "common/status.h"
#include "gloo/rendezvous/file_store.h"
#include "weft/v1/profile.pb.h"
#include "worker/calibrate/calibrate.h"
#include "worker/comm/gloo/gloo_communicator.h"
#include "worker/comm/gloo/gloo_status.h"
#include "worker/kernels/backend.h"

ABSL_FLAG(std::string, out, "", "Where rank 0 writes the profile (JSON); required on rank 0.");
ABSL_FLAG(int, rank, 0, "This process's rank, 0 .. world - 1.");
ABSL_FLAG(int, world, 1, "How many processes calibrate together; 1 measures the kernels only.");
ABSL_FLAG(std::string, store, "",
          "A folder every rank shares (a fresh one per run) for the Gloo FileStore; needed when "
          "world > 1.");
ABSL_FLAG(std::string, host, "127.0.0.1", "The address this rank binds and its peers reach.");
ABSL_FLAG(bool, quick, false, "Fewer, smaller shapes and sizes (a test's run: a few seconds).");
ABSL_FLAG(bool, verbose, false, "Print every shape's measured time and its fit's on stderr.");
ABSL_FLAG(bool, kernels_together, true,
          "Every rank measures the kernels at the same time, rank 0 keeping its own: what a "
          "worker computes while its host's other workers compute too (CPU workers sharing "
          "cores). false: rank 0 alone, once the others are done.");
ABSL_FLAG(int, timeout_s, 300, "How long a rank waits for the others at each rendezvous.");

namespace weft::calibrate {
namespace {

// A group whose links are measured, and where its members are.
struct LinkGroup {
  v1::CommGroup group;
  v1::LinkCost::Scope scope;
};

v1::CommGroup Group(int id, const std::vector<int>& ranks, const std::string& what) {
  v1::CommGroup g;
  g.set_id(id);
  for (int r : ranks) g.add_ranks(r);
  g.set_mesh_dims(what);
  return g;
}

// The groups measured, from each rank's address: the world; across several addresses, the two
// lowest ranks of the first address holding two (INTRA_HOST) and rank 0 with the first rank on
// another address (INTER_HOST). Ids 1 to 3; 4 is the overlap pair.
std::vector<LinkGroup> LinkGroups(const std::vector<std::string>& hosts) {
  const int world = static_cast<int>(hosts.size());
  std::vector<int> all;
  for (int r = 0; r < world; ++r) all.push_back(r);
  const bool spans = std::set<std::string>(hosts.begin(), hosts.end()).size() > 1;
  std::vector<LinkGroup> groups = {
      {Group(1, all, "world"), spans ? v1::LinkCost::INTER_HOST : v1::LinkCost::INTRA_HOST}};
  if (!spans) return groups;
  for (int a = 0; a < world && groups.size() < 2; ++a) {
    for (int b = a + 1; b < world; ++b) {
      if (hosts[a] == hosts[b]) {
        groups.push_back({Group(2, {a, b}, "intra-host pair"), v1::LinkCost::INTRA_HOST});
        break;
      }
    }
  }
  for (int b = 1; b < world; ++b) {
    if (hosts[b] != hosts[0]) {
      groups.push_back({Group(3, {0, b}, "inter-host pair"), v1::LinkCost::INTER_HOST});
      break;
    }
  }
  return groups;
}

bool IsMember(const v1::CommGroup& g, int rank) {
  return std::find(g.ranks().begin(), g.ranks().end(), rank) != g.ranks().end();
}

std::string LinksKey(const v1::CommGroup& g) { return absl::StrCat("calibrate-links-", g.id()); }
std::string HostKey(int rank) { return absl::StrCat("calibrate-host-", rank); }

absl::Status Set(gloo::rendezvous::Store& store, const std::string& key, const std::string& v) {
  try {
    store.set(key, std::vector<char>(v.begin(), v.end()));
  } catch (...) {
    return FromGlooException(std::current_exception(), "publishing " + key);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Get(gloo::rendezvous::Store& store, const std::string& key,
                                absl::Duration timeout) {
  try {
    store.wait({key}, absl::ToChronoMilliseconds(timeout));
    const std::vector<char> v = store.get(key);
    return std::string(v.begin(), v.end());
  } catch (...) {
    return FromGlooException(std::current_exception(), "waiting for " + key);
  }
}

struct Flags {
  std::string out;
  int rank = 0;
  int world = 1;
  std::string store;
  std::string host;
  bool quick = false;
  bool verbose = false;
  bool kernels_together = true;
  absl::Duration timeout;
};

// --verbose: "rank 0: MATMUL f32 [1024,1024,1024,0]: 24.1 ms (p90 25.3 ms), fit 23.5 ms".
TimingReport Report(const Flags& flags) {
  if (!flags.verbose) return nullptr;
  return [rank = flags.rank](const Timing& t, const v1::LinearFit& fit) {
    std::fprintf(stderr, "rank %d: %s: %.4g ms (p90 %.4g ms), fit %.4g ms\n", rank, t.what.c_str(),
                 t.median_s * 1e3, t.p90_s * 1e3,
                 (fit.alpha_s() + fit.per_unit_s() * t.units) * 1e3);
  };
}

// This rank's share of the links: every group it is in, measured; the first member of each
// publishes the group's costs for rank 0.
absl::Status MeasureLinkGroups(const Flags& flags, gloo::rendezvous::Store& store,
                               GlooCommunicatorFactory& factory,
                               const std::vector<LinkGroup>& groups) {
  for (const LinkGroup& g : groups) {
    if (!IsMember(g.group, flags.rank)) continue;
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, factory.Create(g.group));
    ASSIGN_OR_RETURN(
        std::vector<v1::LinkCost> links,
        MeasureLinks(*comm, {.scope = g.scope, .quick = flags.quick, .report = Report(flags)}));
    if (comm->rank() != 0) continue;
    v1::CostProfile published;
    for (v1::LinkCost& l : links) *published.add_links() = std::move(l);
    RETURN_IF_ERROR(Set(store, LinksKey(g.group), published.SerializeAsString()));
  }
  return absl::OkStatus();
}

absl::Status Run(const Flags& flags) {
  if (flags.world < 1 || flags.rank < 0 || flags.rank >= flags.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank ", flags.rank, " --world ", flags.world, ": need 0 <= rank < world"));
  }
  if (flags.rank == 0 && flags.out.empty()) {
    return absl::InvalidArgumentError("--out FILE is required on rank 0");
  }
  v1::CostProfile profile;
  profile.set_kind("cpu");
  profile.set_overlap_slowdown(1.0);

  std::unique_ptr<gloo::rendezvous::FileStore> store;
  std::vector<LinkGroup> groups;
  if (flags.world > 1) {
    if (flags.store.empty()) {
      return absl::InvalidArgumentError("--store DIR is required when --world > 1");
    }
    std::error_code error;
    std::filesystem::create_directories(flags.store, error);
    if (error) {
      return absl::InternalError(
          absl::StrCat(flags.store, ": cannot create the store folder: ", error.message()));
    }
    store = std::make_unique<gloo::rendezvous::FileStore>(flags.store);
    RETURN_IF_ERROR(Set(*store, HostKey(flags.rank), flags.host));
    std::vector<std::string> hosts;
    for (int r = 0; r < flags.world; ++r) {
      ASSIGN_OR_RETURN(std::string host, Get(*store, HostKey(r), flags.timeout));
      hosts.push_back(host);
    }
    groups = LinkGroups(hosts);

    GlooCommunicatorFactory factory(store.get(), flags.rank, flags.host, flags.timeout);
    RETURN_IF_ERROR(MeasureLinkGroups(flags, *store, factory, groups));
    if (flags.rank <= 1) {
      ASSIGN_OR_RETURN(std::unique_ptr<Communicator> pair,
                       factory.Create(Group(4, {0, 1}, "overlap pair")));
      ASSIGN_OR_RETURN(double slowdown, MeasureOverlapSlowdown(*pair, flags.quick));
      profile.set_overlap_slowdown(slowdown);
    }
  }
  const bool together = flags.kernels_together && flags.world > 1;
  if (together) {
    // Every rank starts the kernels at once: each gets what a worker does while the others on
    // its host compute too.
    RETURN_IF_ERROR(Set(*store, absl::StrCat("kernels-", flags.rank), "ready"));
    for (int r = 0; r < flags.world; ++r) {
      RETURN_IF_ERROR(Get(*store, absl::StrCat("kernels-", r), flags.timeout).status());
    }
  } else if (flags.rank != 0) {
    return absl::OkStatus();
  }
  // The kernels last: together, or once the other ranks are done and the cores are rank 0's.
  ASSIGN_OR_RETURN(DeviceDescription device, ProbeDevice("cpu"));
  profile.set_device(
      absl::StrCat(device.name, ", ", device.cores, " threads",
                   together ? absl::StrCat(", ", flags.world, " ranks at once") : ""));
  ASSIGN_OR_RETURN(std::vector<v1::KernelCost> kernels,
                   MeasureKernels({.quick = flags.quick, .report = Report(flags)}));
  if (flags.rank != 0) return absl::OkStatus();
  for (v1::KernelCost& k : kernels) *profile.add_kernels() = std::move(k);
  ASSIGN_OR_RETURN(double overhead, MeasureInstructionOverhead(flags.quick));
  profile.set_instruction_overhead_s(overhead);
  for (const LinkGroup& g : groups) {
    ASSIGN_OR_RETURN(std::string bytes, Get(*store, LinksKey(g.group), flags.timeout));
    v1::CostProfile published;
    if (!published.ParseFromString(bytes)) {
      return absl::DataLossError(absl::StrCat(LinksKey(g.group), ": not a CostProfile"));
    }
    for (const v1::LinkCost& l : published.links()) *profile.add_links() = l;
  }
  profile.set_measured_unix_ms(absl::ToUnixMillis(absl::Now()));
  return WriteCostProfile(profile, flags.out);
}

}  // namespace
}  // namespace weft::calibrate

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "weft-calibrate --out FILE [--world N --rank R --store DIR --host ADDR] [--quick]");
  weft::HelpListsFlagsOf("worker/calibrate/main.cc", "weft-calibrate");
  absl::ParseCommandLine(argc, argv);
  // libgomp reads its wait policy when it loads: spinning OpenMP threads would compete with
  // OpenBLAS's for the cores and skew every figure.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr) {
    std::fprintf(stderr,
                 "weft-calibrate: OMP_WAIT_POLICY is unset; set OMP_WAIT_POLICY=passive as the "
                 "worker runs\n");
  }
  const weft::calibrate::Flags flags = {.out = absl::GetFlag(FLAGS_out),
                                        .rank = absl::GetFlag(FLAGS_rank),
                                        .world = absl::GetFlag(FLAGS_world),
                                        .store = absl::GetFlag(FLAGS_store),
                                        .host = absl::GetFlag(FLAGS_host),
                                        .quick = absl::GetFlag(FLAGS_quick),
                                        .verbose = absl::GetFlag(FLAGS_verbose),
                                        .kernels_together = absl::GetFlag(FLAGS_kernels_together),
                                        .timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s))};
  const absl::Status status = weft::calibrate::Run(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "weft-calibrate (rank %d): %s\n", flags.rank, status.ToString().c_str());
    return 1;
  }
  return 0;
}
