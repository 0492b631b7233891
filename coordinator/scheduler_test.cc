#include "coordinator/scheduler.h"

#include <gtest/gtest.h>

namespace weft::coordinator {
namespace {

std::vector<WorkerSlot> IdleCpu(int n, int first = 1) {
  std::vector<WorkerSlot> out;
  for (int i = 0; i < n; ++i) out.push_back({"worker-" + std::to_string(first + i), "cpu", true});
  return out;
}

TEST(SchedulerTest, WaitsWithAReasonWhenTooFewWorkers) {
  ScheduleDecision d = Schedule({{"job-000001", "cpu", 4}}, IdleCpu(2));
  EXPECT_TRUE(d.start.empty());
  EXPECT_EQ(d.waiting.at("job-000001"), "waiting for 4 idle cpu workers, 2 registered");
}

TEST(SchedulerTest, ReasonCountsIdleWorkersWhenSomeAreBusy) {
  std::vector<WorkerSlot> w = IdleCpu(3);
  w[0].idle = false;
  ScheduleDecision d = Schedule({{"job-000001", "cpu", 3}}, w);
  EXPECT_EQ(d.waiting.at("job-000001"), "waiting for 3 idle cpu workers, 3 registered, 2 idle");
}

TEST(SchedulerTest, AssignsRanksInRegistrationOrder) {
  std::vector<WorkerSlot> w = IdleCpu(4);
  w[1].idle = false;  // worker-2 busy
  ScheduleDecision d = Schedule({{"job-000001", "cpu", 2}}, w);
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].workers_by_rank, (std::vector<std::string>{"worker-1", "worker-3"}));
  EXPECT_TRUE(d.waiting.empty());
}

// Workers registered across two hosts by turns (a1 b1 a2 b2 ...), all idle cpu.
std::vector<WorkerSlot> TwoHosts(int per_host) {
  std::vector<WorkerSlot> out;
  for (int i = 1; i <= per_host; ++i) {
    for (const std::string host : {"a", "b"}) {
      out.push_back({host + std::to_string(i), "cpu", true, "10.0.0." + host});
    }
  }
  return out;
}

// Issue 31: ranks went to workers in registration order, so a [dp, mp] job on two hosts whose
// workers registered by turns had each mp pair across the hosts. The innermost dims now stay
// inside a host, the outer ones span hosts.
TEST(PlaceRanksTest, TheInnermostDimsStayInsideAHost) {
  const std::vector<WorkerSlot> w = TwoHosts(2);
  EXPECT_EQ(PlaceRanks({"j", "cpu", 4, {2, 2}}, w),
            (std::vector<std::string>{"a1", "a2", "b1", "b2"}));
  // mp = 4 over hosts of 2: no block fits; dp = 2 over mp = 2 as above.
  EXPECT_EQ(PlaceRanks({"j", "cpu", 4, {4}}, w),
            (std::vector<std::string>{"a1", "a2", "b1", "b2"}));
  // Three dims [pp, dp, mp] over hosts of 4: each host one pipeline stage, dp x mp inside it.
  EXPECT_EQ(PlaceRanks({"j", "cpu", 8, {2, 2, 2}}, TwoHosts(4)),
            (std::vector<std::string>{"a1", "a2", "a3", "a4", "b1", "b2", "b3", "b4"}));
}

TEST(PlaceRanksTest, AJobThatFitsOneHostStaysOnIt) {
  std::vector<WorkerSlot> w = TwoHosts(3);
  w[0].idle = false;  // a1 busy: host b has the most free workers
  std::vector<WorkerSlot> free;
  for (const WorkerSlot& s : w) {
    if (s.idle) free.push_back(s);
  }
  EXPECT_EQ(PlaceRanks({"j", "cpu", 3, {3}}, free), (std::vector<std::string>{"b1", "b2", "b3"}));
  // Two mp pairs with hosts of 2 (a) and 3 (b) free: a pair from each, none split.
  EXPECT_EQ(PlaceRanks({"j", "cpu", 4, {2, 2}}, free),
            (std::vector<std::string>{"b1", "b2", "a2", "a3"}));
  // Hosts of 3 and 3 and mp = 2: b's third worker is left, not split across a pair.
  EXPECT_EQ(PlaceRanks({"j", "cpu", 4, {1, 2, 2}}, TwoHosts(3)),
            (std::vector<std::string>{"a1", "a2", "b1", "b2"}));
}

TEST(PlaceRanksTest, WhenNoBlockFitsRanksFillHostsInOrder) {
  // mp = 3 over hosts of 2 and 2: no host holds a group; ranks still fill host by host.
  std::vector<WorkerSlot> w = TwoHosts(2);
  w.pop_back();  // b2 gone: a has 2, b has 1
  EXPECT_EQ(PlaceRanks({"j", "cpu", 3, {3}}, w), (std::vector<std::string>{"a1", "a2", "b1"}));
}

TEST(SchedulerTest, StartsJobsWithTheirRanksPlacedByHost) {
  ScheduleDecision d = Schedule({{"job-000001", "cpu", 4, {2, 2}}}, TwoHosts(2));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].workers_by_rank, (std::vector<std::string>{"a1", "a2", "b1", "b2"}));
}

TEST(SchedulerTest, RegistrationPlacementKeepsRegistrationOrder) {
  ScheduleDecision d =
      Schedule({{"job-000001", "cpu", 4, {2, 2}}}, TwoHosts(2), Placement::kRegistration);
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].workers_by_rank, (std::vector<std::string>{"a1", "b1", "a2", "b2"}));
}

TEST(SchedulerTest, StartsSeveralJobsOnDisjointWorkers) {
  ScheduleDecision d = Schedule({{"job-000001", "cpu", 2}, {"job-000002", "cpu", 2}}, IdleCpu(4));
  ASSERT_EQ(d.start.size(), 2u);
  EXPECT_EQ(d.start[0].workers_by_rank, (std::vector<std::string>{"worker-1", "worker-2"}));
  EXPECT_EQ(d.start[1].workers_by_rank, (std::vector<std::string>{"worker-3", "worker-4"}));
}

TEST(SchedulerTest, KeepsSubmitOrderWithinADeviceKind) {
  // job 1 needs 4 of the 4 registered workers, 2 of them busy; job 2 would fit, but must not
  // overtake it.
  std::vector<WorkerSlot> w = IdleCpu(4);
  w[0].idle = w[1].idle = false;
  ScheduleDecision d = Schedule({{"job-000001", "cpu", 4}, {"job-000002", "cpu", 1}}, w);
  EXPECT_TRUE(d.start.empty());
  EXPECT_NE(d.waiting.at("job-000002").find("queued behind job-000001"), std::string::npos)
      << d.waiting.at("job-000002");
}

TEST(SchedulerTest, AJobLargerThanTheRegisteredWorkersDoesNotHoldBackSmallerOnes) {
  // job 1 needs 4 of a cluster of 2: it waits for workers to register, job 2 runs meanwhile.
  ScheduleDecision d = Schedule({{"job-000001", "cpu", 4}, {"job-000002", "cpu", 1}}, IdleCpu(2));
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].job_id, "job-000002");
  EXPECT_EQ(d.waiting.at("job-000001"), "waiting for 4 idle cpu workers, 2 registered");
}

TEST(SchedulerTest, MatchesDeviceKind) {
  std::vector<WorkerSlot> w = {{"worker-1", "cpu", true}, {"worker-2", "cuda", true},
                               {"worker-3", "cuda", true}};
  ScheduleDecision d = Schedule({{"job-000001", "cuda:0", 2}, {"job-000002", "", 1}}, w);
  ASSERT_EQ(d.start.size(), 2u);
  EXPECT_EQ(d.start[0].workers_by_rank, (std::vector<std::string>{"worker-2", "worker-3"}));
  EXPECT_EQ(d.start[1].workers_by_rank, (std::vector<std::string>{"worker-1"}));
}

TEST(SchedulerTest, AJobOfAnotherKindIsNotBlocked) {
  std::vector<WorkerSlot> w = {{"worker-1", "cpu", true}};
  ScheduleDecision d = Schedule({{"job-000001", "cuda", 1}, {"job-000002", "cpu", 1}}, w);
  ASSERT_EQ(d.start.size(), 1u);
  EXPECT_EQ(d.start[0].job_id, "job-000002");
  EXPECT_EQ(d.waiting.at("job-000001"), "waiting for 1 idle cuda worker, 0 registered");
}

TEST(SchedulerTest, DeviceKindOfDeviceStrings) {
  EXPECT_EQ(DeviceKind(""), "cpu");
  EXPECT_EQ(DeviceKind("cpu"), "cpu");
  EXPECT_EQ(DeviceKind("cuda:3"), "cuda");
}

}  // namespace
}  // namespace weft::coordinator
