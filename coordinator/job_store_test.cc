#include "coordinator/job_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

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
  auto page = (*store)->GetJobSteps(id, 0, 10);
  ASSERT_TRUE(page.ok()) << page.status();
  const v1::Job& job = page->job;
  EXPECT_EQ(job.state(), v1::SUCCEEDED);
  EXPECT_EQ(job.start_time_ms(), 150);
  EXPECT_EQ(job.end_time_ms(), 300);
  ASSERT_EQ(job.steps_size(), 2);
  EXPECT_EQ(job.steps(0).step(), 1);
  EXPECT_DOUBLE_EQ(job.steps(1).loss(), 0.25);
  EXPECT_EQ(page->next_after_step, 0);
  EXPECT_EQ((*store)->GetJob(id)->steps_size(), 0) << "GetJob reads no steps";

  auto events = (*store)->ListEvents(id);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 5u);
  EXPECT_EQ((*events)[1].state(), v1::RUNNING);
  EXPECT_EQ((*events)[2].step().step(), 1);
  EXPECT_EQ((*events)[4].state(), v1::SUCCEEDED);

  auto all = (*store)->ListJobSummaries(v1::JOB_STATE_UNSPECIFIED, "", 10);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->jobs.size(), 1u);
  EXPECT_EQ(all->jobs[0].last_step().step(), 2);
  // The next id continues after the stored ones.
  auto next = (*store)->CreateJob(Spec("b"), 400, "submitted");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->id(), "job-000002");
}

// The ids of a page's jobs.
std::vector<std::string> Ids(const JobSummaryPage& page) {
  std::vector<std::string> ids;
  for (const v1::JobSummary& job : page.jobs) ids.push_back(job.id());
  return ids;
}

// Pages of jobs, all or in one state, read a page at a time after the last id of the one before:
// every job once, in submit order.
TEST(JobStoreTest, PagesOfJobsCoverEveryJobOnceInSubmitOrder) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::string> all, pending;
  for (int i = 0; i < 7; ++i) {
    auto job = (*store)->CreateJob(Spec(absl::StrCat("j", i)), i, "submitted");
    ASSERT_TRUE(job.ok()) << job.status();
    all.push_back(job->id());
    if (i % 3 == 1) {
      job->set_state(v1::RUNNING);
      ASSERT_TRUE((*store)->UpdateJob(*job, nullptr).ok());
    } else {
      pending.push_back(job->id());
    }
  }
  // Reads every page of `state` by pages of `limit`; the sizes of the pages in *sizes.
  auto read_all = [&](v1::JobState state, int limit, std::vector<size_t>* sizes) {
    std::vector<std::string> ids;
    std::string after;
    for (;;) {
      auto page = (*store)->ListJobSummaries(state, after, limit);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok() || page->jobs.empty()) break;
      sizes->push_back(page->jobs.size());
      for (const std::string& id : Ids(*page)) ids.push_back(id);
      if (!page->more) break;
      after = page->jobs.back().id();
    }
    return ids;
  };
  std::vector<size_t> sizes;
  EXPECT_EQ(read_all(v1::JOB_STATE_UNSPECIFIED, 3, &sizes), all);
  EXPECT_EQ(sizes, (std::vector<size_t>{3, 3, 1}));
  sizes.clear();
  EXPECT_EQ(read_all(v1::PENDING, 2, &sizes), pending);
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 2, 1}));
  sizes.clear();
  EXPECT_EQ(read_all(v1::RUNNING, 2, &sizes), (std::vector<std::string>{all[1], all[4]}));
  EXPECT_EQ(sizes, (std::vector<size_t>{2}));
  sizes.clear();
  EXPECT_TRUE(read_all(v1::FAILED, 2, &sizes).empty());

  // A page that ends on the last job says no more follow.
  auto exact = (*store)->ListJobSummaries(v1::JOB_STATE_UNSPECIFIED, all[3], 3);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(Ids(*exact), (std::vector<std::string>{all[4], all[5], all[6]}));
  EXPECT_FALSE(exact->more);
  // The page after a job now in another state than the filter's still starts after it.
  auto after_running = (*store)->ListJobSummaries(v1::PENDING, all[1], 10);
  ASSERT_TRUE(after_running.ok());
  EXPECT_EQ(Ids(*after_running), (std::vector<std::string>{all[2], all[3], all[5], all[6]}));

  EXPECT_EQ((*store)->ListJobSummaries(v1::JOB_STATE_UNSPECIFIED, "job-000099", 3).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->ListJobSummaries(v1::JOB_STATE_UNSPECIFIED, "", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A summary holds what `weftctl list` prints and no spec or step history: the current attempt's
// last step, the spec's name and steps; a name or message longer than its bound is cut between
// characters.
TEST(JobStoreTest, SummaryHoldsTheLastStepOfTheCurrentAttemptAndBoundedText) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  v1::JobSpec spec = Spec(std::string(kSummaryNameBytes + 300, 'n'));
  spec.mutable_train()->set_steps(50);
  auto job = (*store)->CreateJob(spec, 1, "submitted");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  ASSERT_TRUE((*store)->AppendEvent(id, 0, StepEvent(id, 1, 0.5)).ok());
  ASSERT_TRUE((*store)->AppendEvent(id, 0, StepEvent(id, 2, 0.25)).ok());
  job->set_attempt(1);
  job->set_state(v1::RUNNING);
  // "x" then two-byte "é"s: byte 1024 is inside an "é", so the cut keeps 1023.
  std::string message = "x";
  for (int i = 0; i < 600; ++i) message += "\xc3\xa9";
  job->set_message(message);
  v1::JobEvent running = StateEvent(*job, 5);
  ASSERT_TRUE((*store)->UpdateJob(*job, &running).ok());

  auto page = (*store)->ListJobSummaries(v1::JOB_STATE_UNSPECIFIED, "", 10);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  v1::JobSummary summary = page->jobs[0];
  EXPECT_FALSE(summary.has_last_step()) << "attempt 1 reported no step yet";
  EXPECT_EQ(summary.name(), std::string(kSummaryNameBytes, 'n'));
  EXPECT_EQ(summary.message(), message.substr(0, kSummaryMessageBytes - 1));
  EXPECT_EQ(summary.total_steps(), 50);
  EXPECT_EQ(summary.attempt(), 1);
  EXPECT_EQ(summary.state(), v1::RUNNING);
  EXPECT_EQ(summary.create_time_ms(), 1);

  ASSERT_TRUE((*store)->AppendEvent(id, 1, StepEvent(id, 3, 0.125)).ok());
  page = (*store)->ListJobSummaries(v1::JOB_STATE_UNSPECIFIED, "", 10);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->jobs[0].last_step().step(), 3);
  EXPECT_DOUBLE_EQ(page->jobs[0].last_step().loss(), 0.125);
}

// Steps come a page at a time, in step order, each once, as its latest attempt ran it; each page
// starts after the step the one before ended on.
TEST(JobStoreTest, PagesOfStepsHoldEachStepOnceAsItsLatestAttemptRanIt) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->CreateJob(Spec("a"), 1, "submitted");
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string id = job->id();
  for (int step = 1; step <= 4; ++step) {
    ASSERT_TRUE((*store)->AppendEvent(id, 0, StepEvent(id, step, 1.0 / step)).ok());
  }
  job->set_attempt(1);
  job->set_state(v1::RUNNING);
  v1::JobEvent restarted = StateEvent(*job, 5);
  ASSERT_TRUE((*store)->UpdateJob(*job, &restarted).ok());
  for (int step = 3; step <= 7; ++step) {  // the restart resumed from step 2
    ASSERT_TRUE((*store)->AppendEvent(id, 1, StepEvent(id, step, 2.0 / step)).ok());
    if (step == 5) {  // a state event among the steps
      v1::JobEvent again = StateEvent(*job, 6);
      ASSERT_TRUE((*store)->UpdateJob(*job, &again).ok());
    }
  }
  std::vector<int64_t> steps;
  std::vector<double> losses;
  std::vector<int> sizes;
  int64_t after = 0;
  do {
    auto page = (*store)->GetJobSteps(id, after, 2);
    ASSERT_TRUE(page.ok()) << page.status();
    sizes.push_back(page->job.steps_size());
    for (const v1::StepMetrics& m : page->job.steps()) {
      steps.push_back(m.step());
      losses.push_back(m.loss());
    }
    after = page->next_after_step;
  } while (after != 0);
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(sizes, (std::vector<int>{2, 2, 2, 1}));
  EXPECT_DOUBLE_EQ(losses[1], 1.0 / 2);  // attempt 0's
  EXPECT_DOUBLE_EQ(losses[2], 2.0 / 3);  // attempt 1's
  EXPECT_DOUBLE_EQ(losses[3], 2.0 / 4);

  auto all = (*store)->GetJobSteps(id, 0, 7);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->job.steps_size(), 7);
  EXPECT_EQ(all->next_after_step, 0) << "exactly the last step: no next page";
  EXPECT_EQ((*store)->GetJobSteps("job-000099", 0, 2).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(JobStoreTest, RestartRestartsRunningJobsAndKeepsPendingOnes) {
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
  auto restarting = (*store)->RestartInterruptedJobs(10, "the coordinator restarted");
  ASSERT_TRUE(restarting.ok()) << restarting.status();
  ASSERT_EQ(restarting->size(), 2u);
  EXPECT_EQ((*restarting)[0].id(), running->id());
  EXPECT_EQ((*restarting)[1].id(), planning->id());
  auto r = (*store)->GetJob(running->id());
  EXPECT_EQ(r->state(), v1::RESTARTING);
  EXPECT_EQ(r->attempt(), 1);
  EXPECT_EQ(r->message(), "the coordinator restarted");
  EXPECT_EQ(r->end_time_ms(), 0);
  auto events = (*store)->ListEvents(running->id());
  EXPECT_EQ(events->back().state(), v1::RESTARTING);
  // Again (the coordinator restarted once more before the job ran): still the same attempt.
  restarting = (*store)->RestartInterruptedJobs(20, "again");
  ASSERT_TRUE(restarting.ok());
  EXPECT_EQ((*store)->GetJob(running->id())->attempt(), 1);
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
