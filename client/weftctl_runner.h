// weftctl as a process, for the client tests that check its exit codes, stdout and stderr. The
// test's first argument is the binary (BUILD: args = ["$(location :weftctl)"], data = [":weftctl"]);
// RunWeftctl runs it (common/subprocess) with its output in files under TEST_TMPDIR, and
// FreshTestDir gives each test a folder of its own for the files it hands weftctl.
//
// E.g.
//   TEST(WeftctlPlanTest, Usage) {
//     const WeftctlResult r = RunWeftctl("plan");
//     EXPECT_EQ(r.exit_code, 2);
//     EXPECT_THAT(r.err, HasSubstr("'plan' needs SPEC"));
//   }
//   int main(int argc, char** argv) { return weft::client::RunWeftctlTests(argc, argv); }
#ifndef WEFT_CLIENT_WEFTCTL_RUNNER_H_
#define WEFT_CLIENT_WEFTCTL_RUNNER_H_

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace weft::client {

// How one run of weftctl ended.
struct WeftctlResult {
  int exit_code = -1;  // -1 when it did not exit (killed by a signal)
  std::string out, err;
};

// A test's main: initializes gtest, takes weftctl's path from the first argument (made absolute:
// tests may change folder) and runs all tests. Without it, prints "usage: TEST WEFTCTL" and
// returns 2. Tests with more arguments read argv[2...] before calling it.
int RunWeftctlTests(int argc, char** argv);

// TEST_TMPDIR/<prefix><the running test's name>, emptied and created, so that a test starts
// from nothing whatever an earlier run left there.
std::string FreshTestDir(const std::string& prefix = "");

// Runs weftctl with args and waits for it; one still running after `timeout` is stopped (with
// its process group) and its exit_code is -1.
WeftctlResult RunWeftctl(const std::vector<std::string>& args,
                         absl::Duration timeout = absl::Seconds(240));
// The same with args split on spaces (so none may hold a space).
WeftctlResult RunWeftctl(const std::string& args);

}  // namespace weft::client

#endif  // WEFT_CLIENT_WEFTCTL_RUNNER_H_
