// weft-calibrate as two processes on 127.0.0.1 (--world 2 --quick): both exit 0 and rank 0's
// profile, read back through protobuf's JSON mapping as planner/cost ReadProfile reads it, holds
// the kernels and every link of a two-rank group on one host, each pricing its unit.
#include <cstdlib>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/file_io.h"
#include "common/subprocess.h"
#include "google/protobuf/util/json_util.h"
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

TEST(WeftCalibrateTest, TwoRanksOnOneHost) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  const std::string out = dir + "/profile.json";
  std::unique_ptr<Subprocess> ranks[2];
  for (int r = 0; r < 2; ++r) {
    SubprocessOptions options;
    options.argv = {Runfile("worker/calibrate/weft-calibrate"),
                    "--rank", std::to_string(r), "--world", "2", "--store", dir + "/store",
                    "--host", "127.0.0.1", "--quick", "--timeout_s", "60"};
    if (r == 0) options.argv.insert(options.argv.end(), {"--out", out});
    options.stdout_path = absl::StrCat(dir, "/rank-", r, ".log");
    auto started = Subprocess::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    ranks[r] = std::move(*started);
  }
  for (int r = 0; r < 2; ++r) {
    const std::optional<ExitStatus> exit = ranks[r]->WaitFor(absl::Seconds(120));
    ASSERT_TRUE(exit.has_value()) << "rank " << r << " still runs";
    auto log = ReadFileToString(absl::StrCat(dir, "/rank-", r, ".log"));
    EXPECT_EQ(exit->code, 0) << "rank " << r << " " << exit->Describe() << ":\n"
                             << log.value_or("");
  }

  auto text = ReadFileToString(out);
  ASSERT_TRUE(text.ok()) << text.status();
  v1::CostProfile profile;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(*text, &profile).ok()) << *text;
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
  EXPECT_TRUE(kernels.count({v1::KernelCost::MATMUL, v1::F32})) << *text;
  EXPECT_TRUE(kernels.count({v1::KernelCost::MEMORY, v1::F32})) << *text;

  std::set<int> ops;
  for (const v1::LinkCost& l : profile.links()) {
    EXPECT_EQ(l.group_size(), 2) << l.DebugString();
    EXPECT_EQ(l.scope(), v1::LinkCost::INTRA_HOST) << l.DebugString();
    EXPECT_GE(l.fit().alpha_s(), 0) << l.DebugString();  // 0 on a loaded machine (calibrate_test)
    EXPECT_GT(l.fit().per_unit_s(), 0) << l.DebugString();
    ops.insert(l.op());
  }
  EXPECT_EQ(ops, (std::set<int>{v1::Instruction::ALL_REDUCE, v1::Instruction::ALL_GATHER,
                                v1::Instruction::REDUCE_SCATTER, v1::Instruction::SEND}));
}

}  // namespace
}  // namespace weft
