#include "coordinator/job_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>

namespace weft::coordinator {
namespace {

std::string TempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/job_store_test.XXXXXX";
  char* dir = mkdtemp(templ.data());
  EXPECT_NE(dir, nullptr);
  return templ;
}

v1::JobSpec Spec(const std::string& name) {
  v1::JobSpec spec;
  spec.set_name(name);
  spec.mutable_mesh()->add_shape(2);
  spec.mutable_mesh()->add_dim_names("dp");
  spec.set_device("cpu");
  return spec;
}

v1::JobEvent StateEvent(const v1::Job& job, int64_t t) {
  v1::JobEvent e;
  e.set_job_id(job.id());
  e.set_time_ms(t);
  e.set_state(job.state());
  e.set_message(job.message());
  return e;
}

v1::JobEvent StepEvent(const std::string& job_id, int64_t step, double loss) {
  v1::JobEvent e;
  e.set_job_id(job_id);
  e.mutable_step()->set_step(step);
  e.mutable_step()->set_loss(loss);
  return e;
}

// A store whose pages are damaged does not open: the error names the file and the check, so the
// coordinator stops at start instead of serving while every call fails.
TEST(JobStoreTest, ADamagedStoreFailsItsIntegrityCheckAtOpen) {
  const std::string path = TempDir() + "/weft.db";
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 200; ++i) {
      auto job = (*store)->CreateJob(Spec(std::string(200, 'a' + i % 26)), i, "submitted");
      ASSERT_TRUE(job.ok()) << job.status();
    }
  }  // closed: the write-ahead log is checkpointed into the file
  {
    FILE* f = fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    fseek(f, 0, SEEK_END);
    ASSERT_GT(ftell(f), 4 * 4096) << "the store should span several pages";
    fseek(f, 2 * 4096 + 100, SEEK_SET);  // inside page 3: a table's b-tree page
    const std::string garbage(3000, '\xA5');
    fwrite(garbage.data(), 1, garbage.size(), f);
    fclose(f);
  }
  auto reopened = JobStore::Open(path);
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), absl::StatusCode::kDataLoss) << reopened.status();
  EXPECT_NE(reopened.status().message().find(path), absl::string_view::npos);
  EXPECT_NE(reopened.status().message().find("integrity check"), absl::string_view::npos);
}

TEST(JobStoreTest, CreatesSortableIdsAndKeepsSpec) {
  std::string dir = TempDir();
  auto store = JobStore::Open(dir + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto a = (*store)->CreateJob(Spec("a"), 100, "submitted");
  auto b = (*store)->CreateJob(Spec("b"), 200, "submitted");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->id(), "job-000001");
  EXPECT_EQ(b->id(), "job-000002");
  EXPECT_LT(a->id(), b->id());

  auto got = (*store)->GetJob(b->id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->spec().name(), "b");
  EXPECT_EQ(got->state(), v1::PENDING);
  EXPECT_EQ(got->create_time_ms(), 200);
  EXPECT_EQ((*store)->GetJob("job-9").status().code(), absl::StatusCode::kNotFound);

  auto events = (*store)->ListEvents(a->id());
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].state(), v1::PENDING);
}

TEST(JobStoreTest, PersistsStateEventsAndStepsAcrossReopen) {
  std::string dir = TempDir();
  std::string id;
  {
    auto store = JobStore::Open(dir + "/weft.db");
    ASSERT_TRUE(store.ok()) << store.status();
    auto job = (*store)->CreateJob(Spec("a"), 100, "submitted");
    ASSERT_TRUE(job.ok());
    id = job->id();
    job->set_state(v1::RUNNING);
    job->set_message("running on 2 workers");
    job->set_start_time_ms(150);
    job->add_workers("worker-1");
    job->add_workers("worker-2");
    v1::JobEvent running = StateEvent(*job, 150);
    ASSERT_TRUE((*store)->UpdateJob(*job, &running).ok());
    ASSERT_TRUE((*store)->AppendEvent(id, 0, StepEvent(id, 1, 0.5)).ok());
    ASSERT_TRUE((*store)->AppendEvent(id, 0, StepEvent(id, 2, 0.25)).ok());
    job->set_state(v1::SUCCEEDED);
    job->set_end_time_ms(300);
    job->clear_workers();
    v1::JobEvent done = StateEvent(*job, 300);
    ASSERT_TRUE((*store)->UpdateJob(*job, &done).ok());
  }
  auto store = JobStore::Open(dir + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->GetJob(id);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::SUCCEEDED);
  EXPECT_EQ(job->start_time_ms(), 150);
  EXPECT_EQ(job->end_time_ms(), 300);
  ASSERT_EQ(job->steps_size(), 2);
  EXPECT_EQ(job->steps(0).step(), 1);
  EXPECT_DOUBLE_EQ(job->steps(1).loss(), 0.25);

  auto events = (*store)->ListEvents(id);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 5u);
  EXPECT_EQ((*events)[1].state(), v1::RUNNING);
  EXPECT_EQ((*events)[2].step().step(), 1);
  EXPECT_EQ((*events)[4].state(), v1::SUCCEEDED);

  auto all = (*store)->ListJobs();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 1u);
  EXPECT_EQ((*all)[0].steps_size(), 2);
  // The next id continues after the stored ones.
  auto next = (*store)->CreateJob(Spec("b"), 400, "submitted");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->id(), "job-000002");
}

TEST(JobStoreTest, RestartFailsRunningJobsAndKeepsPendingOnes) {
  std::string dir = TempDir();
  auto store = JobStore::Open(dir + "/weft.db");
  ASSERT_TRUE(store.ok());
  auto pending = (*store)->CreateJob(Spec("p"), 1, "submitted");
  auto running = (*store)->CreateJob(Spec("r"), 2, "submitted");
  auto planning = (*store)->CreateJob(Spec("q"), 3, "submitted");
  auto done = (*store)->CreateJob(Spec("d"), 4, "submitted");
  running->set_state(v1::RUNNING);
  ASSERT_TRUE((*store)->UpdateJob(*running, nullptr).ok());
  planning->set_state(v1::PLANNING);
  ASSERT_TRUE((*store)->UpdateJob(*planning, nullptr).ok());
  done->set_state(v1::SUCCEEDED);
  ASSERT_TRUE((*store)->UpdateJob(*done, nullptr).ok());
  store->reset();

  store = JobStore::Open(dir + "/weft.db");
  ASSERT_TRUE(store.ok());
  auto failed = (*store)->FailInterruptedJobs(10, "coordinator restarted while the job was running");
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(*failed, (std::vector<std::string>{running->id(), planning->id()}));
  auto r = (*store)->GetJob(running->id());
  EXPECT_EQ(r->state(), v1::FAILED);
  EXPECT_EQ(r->message(), "coordinator restarted while the job was running");
  EXPECT_EQ(r->end_time_ms(), 10);
  auto events = (*store)->ListEvents(running->id());
  EXPECT_EQ(events->back().state(), v1::FAILED);
  EXPECT_EQ((*store)->GetJob(done->id())->state(), v1::SUCCEEDED);

  auto still_pending = (*store)->ListJobsInState(v1::PENDING);
  ASSERT_TRUE(still_pending.ok());
  ASSERT_EQ(still_pending->size(), 1u);
  EXPECT_EQ((*still_pending)[0].id(), pending->id());
}

TEST(JobStoreTest, UpdateOfUnknownJobIsNotFound) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok());
  v1::Job job;
  job.set_id("job-000042");
  EXPECT_EQ((*store)->UpdateJob(job, nullptr).code(), absl::StatusCode::kNotFound);
}

TEST(JobStoreTest, OpenInMissingFolderFails) {
  auto store = JobStore::Open("/nonexistent/folder/weft.db");
  EXPECT_FALSE(store.ok());
}

}  // namespace
}  // namespace weft::coordinator
