// The store writer: writes queued while a group is written go in the next group (one
// transaction); readers that Sync see every write queued before; events are published in queue
// order and only once stored; RunInOrder runs between two groups; Stop stores what is queued;
// AwaitRoom holds a producer while the backlog is over its bound.
#include "coordinator/store_writer.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/testing_files.h"
#include "gtest/gtest.h"

namespace weft::coordinator {
namespace {

class StoreWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = JobStore::Open(
        TempPath(std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
                 ".db"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    v1::JobSpec spec;
    spec.set_name("w");
    auto job = store_->CreateJob(spec, 1, "submitted");
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = *job;
  }

  JobWrite Step(int64_t step) {
    v1::JobEvent e;
    e.set_job_id(job_.id());
    e.set_time_ms(step);
    e.mutable_step()->set_step(step);
    e.mutable_step()->set_loss(1.0 / step);
    return JobWrite{job_.id(), 0, std::nullopt, e};
  }

  std::unique_ptr<JobStore> store_;
  v1::Job job_;
};

TEST_F(StoreWriterTest, ReadersSeeEveryWriteQueuedBeforeTheirSync) {
  std::vector<int64_t> published;
  absl::Mutex mu;
  StoreWriter writer(store_.get(), [&](const v1::JobEvent& e) {
    absl::MutexLock lock(&mu);
    published.push_back(e.step().step());
  });
  for (int s = 1; s <= 200; ++s) writer.Write(Step(s));
  v1::Job running = job_;
  running.set_state(v1::RUNNING);
  running.set_message("running on 1 worker");
  writer.Write(JobWrite{job_.id(), 0, running, std::nullopt});
  writer.Sync();
  auto page = store_->GetJobSteps(job_.id(), 0, 1000);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->job.steps_size(), 200);
  EXPECT_EQ(page->job.steps(199).step(), 200);
  EXPECT_EQ(page->job.state(), v1::RUNNING);
  EXPECT_EQ(page->job.message(), "running on 1 worker");
  absl::MutexLock lock(&mu);
  ASSERT_EQ(published.size(), 200u);
  for (int s = 1; s <= 200; ++s) EXPECT_EQ(published[s - 1], s) << "published in queue order";
  // 201 writes in fewer transactions than writes: what queued while one was written went in the
  // next.
  EXPECT_LT(writer.groups_written(), 201);
  EXPECT_GE(writer.largest_group(), 2);
}

TEST_F(StoreWriterTest, AFailedWriteIsNotPublishedAndTheOthersStand) {
  std::vector<std::string> published;
  StoreWriter writer(store_.get(), [&](const v1::JobEvent& e) { published.push_back(e.job_id()); });
  v1::Job ghost = job_;
  ghost.set_id("job-999999");  // never stored: its update fails alone
  v1::JobEvent ghost_event;
  ghost_event.set_job_id(ghost.id());
  writer.Write(Step(1));
  writer.Write(JobWrite{ghost.id(), 0, ghost, ghost_event});
  writer.Write(Step(2));
  writer.Sync();
  auto page = store_->GetJobSteps(job_.id(), 0, 10);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->job.steps_size(), 2);
  EXPECT_EQ(published, (std::vector<std::string>{job_.id(), job_.id()}));
}

TEST_F(StoreWriterTest, RunInOrderSeesTheWritesBeforeItAndNoneAfter) {
  StoreWriter writer(store_.get(), [&](const v1::JobEvent&) {});
  writer.Write(Step(1));
  writer.Write(Step(2));
  int seen = -1;
  writer.RunInOrder([&] {
    auto events = store_->ListEvents(job_.id());
    seen = events.ok() ? static_cast<int>(events->size()) : -2;
  });
  EXPECT_EQ(seen, 3);  // PENDING, then the two steps
}

TEST_F(StoreWriterTest, StopStoresWhatIsQueuedAndLaterWritesGoStraightThrough) {
  {
    StoreWriter writer(store_.get(), [](const v1::JobEvent&) {});
    for (int s = 1; s <= 50; ++s) writer.Write(Step(s));
    writer.Stop();
    writer.Write(Step(51));  // after Stop: written at once
    auto page = store_->GetJobSteps(job_.id(), 0, 100);
    ASSERT_TRUE(page.ok());
    EXPECT_EQ(page->job.steps_size(), 51);
  }
}

TEST_F(StoreWriterTest, AwaitRoomHoldsAProducerUntilTheBacklogIsWithinItsBound) {
  // The writer stalls publishing the first event until `release`: everything behind it backs up.
  absl::Notification release;
  StoreWriter writer(
      store_.get(), [&](const v1::JobEvent&) { release.WaitForNotification(); },
      /*max_backlog=*/8);
  for (int s = 1; s <= 20; ++s) writer.Write(Step(s));
  absl::Notification room;
  std::thread producer([&] {
    writer.AwaitRoom();
    room.Notify();
  });
  EXPECT_FALSE(room.WaitForNotificationWithTimeout(absl::Milliseconds(200)))
      << "20 writes queued, more than the bound of 8: the producer must wait";
  release.Notify();
  room.WaitForNotification();
  producer.join();
  writer.Sync();
  auto page = store_->GetJobSteps(job_.id(), 0, 100);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->job.steps_size(), 20) << "a producer that waited loses nothing";

  // Within the bound it does not wait at all.
  for (int s = 21; s <= 24; ++s) writer.Write(Step(s));
  writer.AwaitRoom();
}

}  // namespace
}  // namespace weft::coordinator
