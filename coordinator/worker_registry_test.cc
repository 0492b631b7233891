// The worker registry turns a worker's stream messages into events of the rank it runs, and
// ignores what a worker sends about a rank it does not run.
#include "coordinator/worker_registry.h"

#include <memory>
#include <vector>

#include "coordinator/recorded_connection.h"
#include "gtest/gtest.h"

namespace weft::coordinator {
namespace {

TEST(WorkerRegistryTest, AddNamesTheHostFromThePeerUnlessHelloDoes) {
  WorkerRegistry workers;
  v1::Hello hello;
  auto* a = workers.Add(hello, "ipv4:10.1.2.3:5000", std::make_shared<RecordedConnection>(), 7);
  EXPECT_EQ(a->id, "worker-1");
  EXPECT_EQ(a->host, "10.1.2.3");
  EXPECT_EQ(a->hello.device().kind(), "cpu");
  EXPECT_EQ(workers.Add(hello, "ipv6:[::1]:5000", std::make_shared<RecordedConnection>(), 7)->host, "::1");
  hello.set_host("node-7");
  EXPECT_EQ(workers.Add(hello, "ipv4:10.1.2.3:5000", std::make_shared<RecordedConnection>(), 7)->host,
            "node-7");
}

TEST(WorkerRegistryTest, ReportsOfTheRankItRunsBecomeThatRanksEvents) {
  WorkerRegistry workers;
  auto* w = workers.Add(v1::Hello(), "ipv4:10.0.0.1:1", std::make_shared<RecordedConnection>(), 0);
  workers.Assign(w, "job-000001", 2, 3);
  v1::WorkerMessage step;
  step.mutable_step()->set_job_id("job-000001");
  step.mutable_step()->set_attempt(2);
  step.mutable_step()->set_rank(3);
  std::optional<RankEvent> e = workers.Interpret(w, step);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->job_id, "job-000001");
  EXPECT_EQ(e->attempt, 2);
  EXPECT_TRUE(std::holds_alternative<JobRun::Step>(e->event));
  // Another rank, another attempt: ignored.
  step.mutable_step()->set_rank(4);
  EXPECT_FALSE(workers.Interpret(w, step).has_value());
  step.mutable_step()->set_rank(3);
  step.mutable_step()->set_attempt(1);
  EXPECT_FALSE(workers.Interpret(w, step).has_value());

  v1::WorkerMessage done;
  done.mutable_done()->set_job_id("job-000001");
  done.mutable_done()->set_attempt(2);
  done.mutable_done()->set_ok(false);
  done.mutable_done()->set_message("rank 3: oom");
  done.mutable_done()->set_failed_at_ms(1234);
  e = workers.Interpret(w, done);
  ASSERT_TRUE(e.has_value());
  const auto& rank_done = std::get<JobRun::RankDone>(e->event);
  EXPECT_EQ(rank_done.rank, 3);
  EXPECT_FALSE(rank_done.ok);
  EXPECT_EQ(rank_done.failed_at_us, 1234000);
  // A heartbeat is no event.
  EXPECT_FALSE(workers.Interpret(w, v1::WorkerMessage()).has_value());
}

TEST(WorkerRegistryTest, GoodbyeDrainsTheWorkerAndLosesItsRank) {
  WorkerRegistry workers;
  auto stream = std::make_shared<RecordedConnection>();
  auto* w = workers.Add(v1::Hello(), "ipv4:10.0.0.1:1", stream, 0);
  workers.Assign(w, "job-000001", 0, 1);
  v1::WorkerMessage bye;
  bye.mutable_goodbye()->set_reason("node drained for maintenance");
  std::optional<RankEvent> e = workers.Interpret(w, bye);
  ASSERT_TRUE(e.has_value());
  const auto& lost = std::get<JobRun::WorkerLost>(e->event);
  EXPECT_EQ(lost.rank, 1);
  EXPECT_TRUE(lost.drained);
  EXPECT_EQ(lost.why, "node drained for maintenance");
  EXPECT_TRUE(stream->closed());
  EXPECT_EQ(workers.List()[0].state(), "drained");
  EXPECT_EQ(workers.Heard(w->id, 5), nullptr) << "a lost worker is not heard again";
}

TEST(WorkerRegistryTest, SilentAndDrainOver) {
  WorkerRegistry workers;
  auto* a = workers.Add(v1::Hello(), "ipv4:10.0.0.1:1", std::make_shared<RecordedConnection>(), 0);
  auto* b = workers.Add(v1::Hello(), "ipv4:10.0.0.2:1", std::make_shared<RecordedConnection>(), 0);
  workers.Heard(b->id, 900);
  std::vector<WorkerRegistry::Worker*> silent = workers.Silent(1001, 1000);
  ASSERT_EQ(silent.size(), 1u);
  EXPECT_EQ(silent[0], a);
  workers.Assign(b, "job-000001", 0, 0);
  workers.Drain(b, 2000);
  EXPECT_TRUE(workers.DrainOver(1999).empty());
  ASSERT_EQ(workers.DrainOver(2000).size(), 1u);
}

}  // namespace
}  // namespace weft::coordinator
