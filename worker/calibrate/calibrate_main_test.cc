// weft-calibrate as real processes on loopback (--quick): every rank exits 0 and rank 0's
// profile, read back as `weftctl calibrate` reads it (common/cost_profile_json.h), holds
// the kernels and the links of each group measured, with its size and scope, each pricing its
// unit.
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/cost_profile_json.h"
#include "common/file_io.h"
#include "common/subprocess.h"
#include "gtest/gtest.h"
#include "weft/v1/profile.pb.h"

namespace weft {
namespace {

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "weft", "/", path);
}

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(base != nullptr ? base : "/tmp", "/calibrate-XXXXXX");
  return mkdtemp(dir.data()) != nullptr ? dir : "";
}

// Runs weft-calibrate --quick as one process per entry of `hosts` (rank r binding hosts[r]) and
// returns rank 0's profile; failures are the test's.
v1::CostProfile Calibrate(const std::vector<std::string>& hosts) {
  const std::string dir = TempDir();
  EXPECT_FALSE(dir.empty());
  const std::string out = dir + "/profile.json";
  const int world = static_cast<int>(hosts.size());
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < world; ++r) {
    SubprocessOptions options;
    options.argv = {Runfile("worker/calibrate/weft-calibrate"),
                    absl::StrCat("--rank=", r),
                    absl::StrCat("--world=", world),
                    "--store=" + dir + "/store",
                    "--host=" + hosts[r],
                    "--quick",
                    "--timeout_s=60"};
    if (r == 0) options.argv.push_back("--out=" + out);
    options.stdout_path = absl::StrCat(dir, "/rank-", r, ".log");
    auto started = Subprocess::Start(options);
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return {};
    ranks.push_back(std::move(*started));
  }
  for (int r = 0; r < world; ++r) {
    const std::optional<ExitStatus> exit = ranks[r]->WaitFor(absl::Seconds(120));
    EXPECT_TRUE(exit.has_value()) << "rank " << r << " still runs";
    auto log = ReadFileToString(absl::StrCat(dir, "/rank-", r, ".log"));
    EXPECT_TRUE(exit.has_value() && exit->code == 0)
        << "rank " << r << " " << (exit ? exit->Describe() : "") << ":\n"
        << log.value_or("");
  }
  absl::StatusOr<v1::CostProfile> profile = ReadCostProfile(out);
  EXPECT_TRUE(profile.ok()) << profile.status();
  return profile.value_or(v1::CostProfile());
}

// The links of `profile` as "OP group_size SCOPE", each checked to price its bytes.
std::set<std::string> Links(const v1::CostProfile& profile) {
  std::set<std::string> links;
  for (const v1::LinkCost& l : profile.links()) {
    // alpha is 0 when a loaded machine bends the line up (calibrate_test).
    EXPECT_GE(l.fit().alpha_s(), 0) << l.DebugString();
    EXPECT_GT(l.fit().per_unit_s(), 0) << l.DebugString();
    links.insert(absl::StrCat(v1::Instruction::Op_Name(l.op()), " ", l.group_size(), " ",
                              v1::LinkCost::Scope_Name(l.scope())));
  }
  return links;
}

TEST(WeftCalibrateTest, TwoRanksOnOneHost) {
  const v1::CostProfile profile = Calibrate({"127.0.0.1", "127.0.0.1"});
  EXPECT_EQ(profile.kind(), "cpu");
  EXPECT_FALSE(profile.device().empty());
  EXPECT_GT(profile.measured_unix_ms(), 0);
  EXPECT_GE(profile.overlap_slowdown(), 1.0);

  std::set<std::pair<int, int>> kernels;  // (kind, dtype)
  for (const v1::KernelCost& k : profile.kernels()) {
    kernels.insert({k.kind(), k.dtype()});
    EXPECT_GT(k.fit().per_unit_s(), 0) << k.DebugString();
    EXPECT_GE(k.fit().alpha_s(), 0) << k.DebugString();
  }
  EXPECT_TRUE(kernels.count({v1::KernelCost::MATMUL, v1::F32})) << profile.DebugString();
  EXPECT_TRUE(kernels.count({v1::KernelCost::MEMORY, v1::F32})) << profile.DebugString();

  EXPECT_EQ(Links(profile),
            (std::set<std::string>{"ALL_REDUCE 2 INTRA_HOST", "ALL_GATHER 2 INTRA_HOST",
                                   "REDUCE_SCATTER 2 INTRA_HOST", "SEND 2 INTRA_HOST"}));
}

// Two addresses (127.0.0.2 is loopback too): the world of three crosses hosts, ranks 0 and 1
// are the pair on one, ranks 0 and 2 the pair across.
TEST(WeftCalibrateTest, ThreeRanksOnTwoAddresses) {
  const v1::CostProfile profile = Calibrate({"127.0.0.1", "127.0.0.1", "127.0.0.2"});
  std::set<std::string> want;
  for (const char* op : {"ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "SEND"}) {
    for (const char* group : {" 3 INTER_HOST", " 2 INTRA_HOST", " 2 INTER_HOST"}) {
      want.insert(absl::StrCat(op, group));
    }
  }
  EXPECT_EQ(Links(profile), want);
}

}  // namespace
}  // namespace weft
