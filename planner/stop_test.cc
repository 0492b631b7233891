// StopCheck (stop.h): the planner stops at whichever of its checks first says stop, with that
// status and what it was doing, and plans as before when nothing does.
#include "planner/stop.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/jobspec/defaults.h"
#include "planner/planner.h"
#include "planner/test_util.h"

namespace weft::planner {
namespace {

// A pipeline of 2 stages and 96 micro-batches: more than a few dozen items per stage and buffers
// per Program, so the emitter's and the memory plan's own checks are reached too.
v1::JobSpec LongSpec() {
  testing::SpecBuilder b({2, 2}, {"pp", "dp"});
  b.Batch(192, {8}, {8}).AdamW();
  for (int i = 0; i < 4; ++i) {
    b.Linear(absl::StrCat("fc", i), 8, 8);
    if (i < 3) b.Act(absl::StrCat("act", i), "relu");
  }
  v1::JobSpec spec = b.Spec();
  spec.mutable_pipeline()->set_dim("pp");
  spec.mutable_pipeline()->set_schedule("1F1B");
  spec.mutable_pipeline()->set_micro_batches(96);
  ApplyJobSpecDefaults(&spec);
  return spec;
}

// Says stop (DEADLINE_EXCEEDED) at its `at`-th call, and counts its calls.
struct StopAt {
  int at = 0;
  int calls = 0;
  StopCheck Check() {
    return [this] {
      return ++calls == at ? absl::DeadlineExceededError("the call's deadline passed")
                           : absl::OkStatus();
    };
  }
};

TEST(StopCheckTest, PlanningStopsAtEveryCheckWithItsStatusAndWhatItWasDoing) {
  const v1::JobSpec spec = LongSpec();
  StopAt never;
  ASSERT_TRUE(PlanJob(spec, "job-1", 0, never.Check()).ok());
  const int checks = never.calls;
  // The passes, every tensor's checkpoint writers, and within each stage's Program.
  EXPECT_GT(checks, 20);
  std::set<std::string> doing;
  for (int at = 1; at <= checks; ++at) {
    SCOPED_TRACE(at);
    StopAt stop{at};
    absl::Status s = PlanJob(spec, "job-1", 0, stop.Check()).status();
    EXPECT_EQ(stop.calls, at);  // not asked again once it said stop
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_EQ(s.message().rfind("planning job test: ", 0), 0u) << s;
    const size_t where = s.message().find("stopped while ");
    ASSERT_NE(where, std::string::npos) << s;
    const size_t end = s.message().find(": the call's deadline passed");
    ASSERT_NE(end, std::string::npos) << s;
    doing.insert(std::string(s.message().substr(where, end - where)));
  }
  for (const std::string what : {"stopped while building the model",
                                 "stopped while choosing who writes fc0.weight to checkpoints",
                                 "stopped while emitting its instructions",
                                 "stopped while laying out its buffers",
                                 "stopped while checking the stages for deadlock"}) {
    EXPECT_EQ(doing.count(what), 1u) << what;
  }
}

TEST(StopCheckTest, ARanksProgramStopsWithTheRankNamed) {
  absl::StatusOr<std::shared_ptr<const Plan>> plan = PlanJob(LongSpec(), "job-1", 0);
  ASSERT_TRUE(plan.ok()) << plan.status();
  StopCheck cancelled = [] { return absl::CancelledError("the call was cancelled"); };
  absl::Status s = (*plan)->Program(3, Attempt{"job-1", 0}, cancelled).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(s.message(),
            "emitting rank 3: stopped while emitting its instructions: the call was cancelled");
  // Nothing stops it: the same Program as without a check.
  StopCheck go_on = [] { return absl::OkStatus(); };
  absl::StatusOr<v1::Program> checked = (*plan)->Program(3, Attempt{"job-1", 0}, go_on);
  absl::StatusOr<v1::Program> plain = (*plan)->Program(3);
  ASSERT_TRUE(checked.ok() && plain.ok());
  EXPECT_EQ(checked->SerializeAsString(), plain->SerializeAsString());
}

}  // namespace
}  // namespace weft::planner
