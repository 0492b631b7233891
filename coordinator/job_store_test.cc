#include "coordinator/job_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
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

// What the metrics' weft_jobs gauge shows: jobs counted by their stored state.
TEST(JobStoreTest, CountsJobsByState) {
  auto store = JobStore::Open(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->CountJobsByState()->empty());
  std::vector<v1::Job> jobs;
  for (const char* name : {"a", "b", "c"}) {
    auto job = (*store)->CreateJob(Spec(name), 1, "submitted");
    ASSERT_TRUE(job.ok()) << job.status();
    jobs.push_back(*job);
  }
  jobs[0].set_state(v1::RUNNING);
  ASSERT_TRUE((*store)->UpdateJob(jobs[0], nullptr).ok());
  jobs[1].set_state(v1::FAILED);
  ASSERT_TRUE((*store)->UpdateJob(jobs[1], nullptr).ok());
  auto counts = (*store)->CountJobsByState();
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (std::map<v1::JobState, int64_t>{
                         {v1::PENDING, 1}, {v1::RUNNING, 1}, {v1::FAILED, 1}}));
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

// Every page of the job's steps (GetJobSteps, page_size at a time), each after the step the one
// before ended on.
struct StepPages {
  std::vector<int64_t> steps;
  std::vector<double> losses;
  std::vector<int> sizes;     // each page's number of steps
  std::vector<v1::Job> jobs;  // each page's job record
};

StepPages ReadStepPages(JobStore& store, const std::string& id, int page_size) {
  StepPages out;
  int64_t after = 0;
  do {
    auto page = store.GetJobSteps(id, after, page_size);
    if (!page.ok()) {
      ADD_FAILURE() << page.status();
      break;
    }
    out.sizes.push_back(page->job.steps_size());
    for (const v1::StepMetrics& m : page->job.steps()) {
      out.steps.push_back(m.step());
      out.losses.push_back(m.loss());
    }
    out.jobs.push_back(page->job);
    after = page->next_after_step;
  } while (after != 0);
  return out;
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
  const StepPages pages = ReadStepPages(**store, id, 2);
  const std::vector<int64_t>& steps = pages.steps;
  const std::vector<double>& losses = pages.losses;
  const std::vector<int>& sizes = pages.sizes;
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

v1::RankError RankErrorOf(int rank, int64_t at_ms, const std::string& message) {
  v1::RankError e;
  e.set_rank(rank);
  e.set_worker(absl::StrCat("worker-", rank + 1));
  e.set_host("10.0.0.5");
  e.set_attempt(1);
  e.set_failed_at_ms(at_ms);
  e.set_message(message);
  return e;
}

// The rank errors are part of the job record: written by UpdateJob, read by every whole-job read
// (and a restart's), replaced or cleared by the next UpdateJob; summaries leave them out.
TEST(JobStoreTest, TheElasticStateIsStoredWithTheJobAndKeptAcrossARestart) {
  const std::string path = TempDir() + "/weft.db";
  std::string id;
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto job = (*store)->CreateJob(Spec("a"), 100, "submitted");
    ASSERT_TRUE(job.ok());
    id = job->id();
    EXPECT_EQ(job->elastic_size(), 0);
    job->set_state(v1::RUNNING);
    job->set_attempt(2);
    job->set_elastic_size(4);
    job->set_grows(1);
    for (const auto& [from, to] : std::vector<std::pair<int, int>>{{4, 2}, {2, 4}}) {
      v1::Resize* r = job->add_resizes();
      r->set_dim("dp");
      r->set_from_size(from);
      r->set_to_size(to);
      r->set_time_ms(200 + to);
    }
    ASSERT_TRUE((*store)->UpdateJob(*job, nullptr).ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto restarted = (*store)->RestartInterruptedJobs(900, "restarting");
  ASSERT_TRUE(restarted.ok());
  ASSERT_EQ(restarted->size(), 1u);
  for (const v1::Job& job : {(*restarted)[0], *(*store)->GetJob(id)}) {
    EXPECT_EQ(job.elastic_size(), 4);
    EXPECT_EQ(job.grows(), 1);
    ASSERT_EQ(job.resizes_size(), 2);
    EXPECT_EQ(job.resizes(0).to_size(), 2);
    EXPECT_EQ(job.resizes(1).time_ms(), 204);
  }
}

TEST(JobStoreTest, RankErrorsAreStoredWithTheJob) {
  const std::string path = TempDir() + "/weft.db";
  std::string id;
  {
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto job = (*store)->CreateJob(Spec("a"), 100, "submitted");
    ASSERT_TRUE(job.ok());
    id = job->id();
    job->set_state(v1::RUNNING);
    *job->add_rank_errors() = RankErrorOf(1, 500, "step 1: loading fc0.weight: checksum mismatch");
    *job->add_rank_errors() = RankErrorOf(0, 504, "worker lost: its stream broke");
    job->set_rank_errors_omitted(7);
    ASSERT_TRUE((*store)->UpdateJob(*job, nullptr).ok());
  }
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->GetJob(id);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->rank_errors_size(), 2);
  EXPECT_EQ(job->rank_errors(0).rank(), 1);
  EXPECT_EQ(job->rank_errors(0).worker(), "worker-2");
  EXPECT_EQ(job->rank_errors(0).host(), "10.0.0.5");
  EXPECT_EQ(job->rank_errors(0).attempt(), 1);
  EXPECT_EQ(job->rank_errors(0).failed_at_ms(), 500);
  EXPECT_EQ(job->rank_errors(0).message(), "step 1: loading fc0.weight: checksum mismatch");
  EXPECT_EQ(job->rank_errors(1).message(), "worker lost: its stream broke");
  EXPECT_EQ(job->rank_errors_omitted(), 7);
  auto steps = (*store)->GetJobSteps(id, 0, 10);
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(steps->job.rank_errors_size(), 2);
  auto running = (*store)->ListJobsInState(v1::RUNNING);
  ASSERT_TRUE(running.ok());
  ASSERT_EQ(running->size(), 1u);
  EXPECT_EQ((*running)[0].rank_errors_size(), 2);
  auto restarted = (*store)->RestartInterruptedJobs(900, "restarting");
  ASSERT_TRUE(restarted.ok());
  ASSERT_EQ(restarted->size(), 1u);
  EXPECT_EQ((*restarted)[0].rank_errors_size(), 2);
  EXPECT_EQ((*store)->GetJob(id)->rank_errors_size(), 2) << "a restart keeps them";

  v1::Job cleared = *job;
  cleared.clear_rank_errors();
  cleared.set_rank_errors_omitted(0);
  ASSERT_TRUE((*store)->UpdateJob(cleared, nullptr).ok());
  EXPECT_EQ((*store)->GetJob(id)->rank_errors_size(), 0);
  EXPECT_EQ((*store)->GetJob(id)->rank_errors_omitted(), 0);
}

google::protobuf::RepeatedPtrField<v1::LogLine> Lines(int64_t first_ms, int n,
                                                       const std::string& prefix) {
  google::protobuf::RepeatedPtrField<v1::LogLine> lines;
  for (int i = 0; i < n; ++i) {
    v1::LogLine* line = lines.Add();
    line->set_time_ms(first_ms + i);
    line->set_level(i == n - 1 ? "error" : "info");
    line->set_text(absl::StrCat(prefix, " ", i));
  }
  return lines;
}

// Every line GetLogLines gives for `query`, page after page of query.limit, as "aA rR #S text".
std::vector<std::string> ReadAllLines(JobStore& store, LogLineQuery query, int* pages = nullptr) {
  std::vector<std::string> out;
  if (pages != nullptr) *pages = 0;
  while (true) {
    absl::StatusOr<LogLinesPage> page = store.GetLogLines(query);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) return out;
    if (pages != nullptr) ++*pages;
    for (const v1::JobLogLine& line : page->lines) {
      out.push_back(absl::StrCat("a", line.attempt(), " r", line.rank(), " #", line.seq(), " ",
                                 line.text()));
    }
    if (!page->more) return out;
    EXPECT_FALSE(page->lines.empty());
    const v1::JobLogLine& last = page->lines.back();
    query.after = LogLinePosition{last.attempt(), last.time_ms(), last.rank(), last.seq()};
  }
}

// A rank's lines are numbered from 1 per attempt; pages go by attempt, then time, then rank,
// then number, and cover every matching line once, whatever the page size.
TEST(JobStoreTest, LogLinesArePagedByAttemptTimeRankAndNumber) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->CreateJob(Spec("a"), 100, "submitted");
  ASSERT_TRUE(job.ok());
  const std::string id = job->id();
  // Attempt 1's lines are stored first: the order is by attempt, not arrival.
  ASSERT_TRUE((*store)->AppendLogLines(id, 1, 0, Lines(9000, 1, "restart"), 100).ok());
  ASSERT_TRUE((*store)->AppendLogLines(id, 0, 1, Lines(1000, 2, "r1"), 100).ok());
  ASSERT_TRUE((*store)->AppendLogLines(id, 0, 0, Lines(1001, 3, "r0"), 100).ok());
  ASSERT_TRUE((*store)->AppendLogLines(id, 0, 1, Lines(1001, 1, "r1 more"), 100).ok());
  auto other = (*store)->CreateJob(Spec("b"), 100, "submitted");
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*store)->AppendLogLines(other->id(), 0, 0, Lines(1000, 4, "other"), 100).ok());

  const std::vector<std::string> every = {
      "a0 r1 #1 r1 0",  // 1000
      "a0 r0 #1 r0 0",  // 1001
      "a0 r1 #2 r1 1",  // 1001
      "a0 r1 #3 r1 more 0",  // 1001
      "a0 r0 #2 r0 1",  // 1002
      "a0 r0 #3 r0 2",  // 1003
      "a1 r0 #1 restart 0",  // 9000
  };
  for (int limit : {1, 2, 3, 100}) {
    LogLineQuery query;
    query.job_id = id;
    query.limit = limit;
    int pages = 0;
    EXPECT_EQ(ReadAllLines(**store, query, &pages), every) << limit;
    EXPECT_EQ(pages, (7 + limit - 1) / limit) << limit;
  }
  LogLineQuery rank1;
  rank1.job_id = id;
  rank1.rank = 1;
  rank1.limit = 1;
  EXPECT_EQ(ReadAllLines(**store, rank1),
            (std::vector<std::string>{"a0 r1 #1 r1 0", "a0 r1 #2 r1 1", "a0 r1 #3 r1 more 0"}));
  LogLineQuery attempt1;
  attempt1.job_id = id;
  attempt1.attempt = 1;
  EXPECT_EQ(ReadAllLines(**store, attempt1), (std::vector<std::string>{"a1 r0 #1 restart 0"}));
  LogLineQuery since;
  since.job_id = id;
  since.since_ms = 1002;
  since.limit = 2;
  EXPECT_EQ(ReadAllLines(**store, since),
            (std::vector<std::string>{"a0 r0 #2 r0 1", "a0 r0 #3 r0 2", "a1 r0 #1 restart 0"}));
  // A page ends after max_bytes of text too (each text here is 4 or more bytes).
  LogLineQuery small;
  small.job_id = id;
  small.max_bytes = 4;
  auto page = (*store)->GetLogLines(small);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->lines.size(), 1u);
  EXPECT_TRUE(page->more);
  auto levels = (*store)->GetLogLines(rank1);
  ASSERT_TRUE(levels.ok());
  EXPECT_EQ(levels->lines[0].level(), "info");
  EXPECT_EQ(levels->lines[0].time_ms(), 1000);
}

// A rank's attempt keeps at most max_lines lines; one marker line after them counts every line
// dropped, with the time of the last; other ranks and attempts keep their own.
TEST(JobStoreTest, LogLinesBeyondTheBoundAreDroppedAndCounted) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->CreateJob(Spec("a"), 100, "submitted");
  ASSERT_TRUE(job.ok());
  const std::string id = job->id();
  ASSERT_TRUE((*store)->AppendLogLines(id, 0, 0, Lines(1000, 3, "x"), 5).ok());
  ASSERT_TRUE((*store)->AppendLogLines(id, 0, 0, Lines(2000, 4, "y"), 5).ok());  // 2 dropped
  ASSERT_TRUE((*store)->AppendLogLines(id, 0, 0, Lines(3000, 3, "z"), 5).ok());  // 3 more
  ASSERT_TRUE((*store)->AppendLogLines(id, 0, 1, Lines(4000, 5, "r1"), 5).ok());
  LogLineQuery rank0;
  rank0.job_id = id;
  rank0.rank = 0;
  auto page = (*store)->GetLogLines(rank0);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->lines.size(), 6u);
  EXPECT_EQ(page->lines[4].text(), "y 1");
  const v1::JobLogLine& marker = page->lines[5];
  EXPECT_EQ(marker.seq(), 6);
  EXPECT_EQ(marker.level(), "warning");
  EXPECT_EQ(marker.time_ms(), 3002);
  EXPECT_NE(marker.text().find("5 more lines of this rank dropped"), std::string::npos)
      << marker.text();
  EXPECT_NE(marker.text().find("at most 5 lines"), std::string::npos) << marker.text();
  LogLineQuery rank1 = rank0;
  rank1.rank = 1;
  page = (*store)->GetLogLines(rank1);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->lines.size(), 5u) << "exactly the bound: no marker";
  ASSERT_TRUE((*store)->AppendLogLines(id, 1, 0, Lines(5000, 1, "next attempt"), 5).ok());
  LogLineQuery attempt1 = rank0;
  attempt1.attempt = 1;
  page = (*store)->GetLogLines(attempt1);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->lines.size(), 1u);
  EXPECT_EQ(page->lines[0].seq(), 1);
}

// Makes the database at `path` with `sql`: a store as an older coordinator left it.
void WriteRawStore(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
      << (err != nullptr ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

// A store made before the log table and the rank_errors column existed opens, keeps its jobs and
// takes both.
TEST(JobStoreTest, AStoreOfAnOlderSchemaOpensAndGainsLogsAndRankErrors) {
  const std::string path = TempDir() + "/weft.db";
  {
    const std::string spec_hex = absl::BytesToHexString(Spec("old").SerializeAsString());
    // The schema as coordinators before issue 14's logs made it.
    const std::string sql = absl::StrCat(R"sql(
      CREATE TABLE jobs (
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, spec BLOB NOT NULL,
        state INTEGER NOT NULL, message TEXT NOT NULL DEFAULT '',
        create_time_ms INTEGER NOT NULL DEFAULT 0, start_time_ms INTEGER NOT NULL DEFAULT 0,
        end_time_ms INTEGER NOT NULL DEFAULT 0, attempt INTEGER NOT NULL DEFAULT 0,
        workers TEXT NOT NULL DEFAULT '');
      CREATE TABLE events (
        job_id TEXT NOT NULL, seq INTEGER NOT NULL, attempt INTEGER NOT NULL, step INTEGER,
        event BLOB NOT NULL, PRIMARY KEY (job_id, seq));
      CREATE INDEX jobs_by_state ON jobs (state, seq);
      INSERT INTO jobs (seq, id, spec, state, message, create_time_ms)
        VALUES (1, 'job-000001', X')sql",
                                         spec_hex, R"sql(', 5, 'rank 1 failed', 100);)sql");
    ASSERT_NO_FATAL_FAILURE(WriteRawStore(path, sql));
  }
  for (int open = 0; open < 2; ++open) {  // and again, migrated
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto job = (*store)->GetJob("job-000001");
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->spec().name(), "old");
    EXPECT_EQ(job->state(), v1::FAILED);
    EXPECT_EQ(job->message(), "rank 1 failed");
    if (open == 0) {
      EXPECT_EQ(job->rank_errors_size(), 0);
      *job->add_rank_errors() = RankErrorOf(1, 500, "checksum mismatch");
      ASSERT_TRUE((*store)->UpdateJob(*job, nullptr).ok());
      ASSERT_TRUE((*store)->AppendLogLines(job->id(), 0, 1, Lines(1000, 2, "l"), 10).ok());
    } else {
      ASSERT_EQ(job->rank_errors_size(), 1);
      EXPECT_EQ(job->rank_errors(0).message(), "checksum mismatch");
      LogLineQuery query;
      query.job_id = job->id();
      EXPECT_EQ(ReadAllLines(**store, query),
                (std::vector<std::string>{"a0 r1 #1 l 0", "a0 r1 #2 l 1"}));
      // The next id follows the jobs the older store made, even once they are deleted.
      ASSERT_TRUE((*store)->DeleteJob("job-000001").ok());
      auto next = (*store)->CreateJob(Spec("new"), 200, "submitted");
      ASSERT_TRUE(next.ok()) << next.status();
      EXPECT_EQ(next->id(), "job-000002");
    }
  }
}

v1::JobEvent EvalEvent(const std::string& job_id, int64_t step, double loss) {
  v1::JobEvent e;
  e.set_job_id(job_id);
  e.mutable_eval()->set_step(step);
  e.mutable_eval()->set_loss(loss);
  return e;
}

// The rows `sql` selects from the database at `path` (read through a connection of its own), each
// as its columns joined by "|", NULL as "NULL".
std::vector<std::string> RawRows(const std::string& path, const std::string& sql) {
  std::vector<std::string> rows;
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  while (st != nullptr && sqlite3_step(st) == SQLITE_ROW) {
    std::string row;
    for (int c = 0; c < sqlite3_column_count(st); ++c) {
      if (c > 0) row += "|";
      const unsigned char* text = sqlite3_column_text(st, c);
      row += text == nullptr ? "NULL" : reinterpret_cast<const char*>(text);
    }
    rows.push_back(row);
  }
  sqlite3_finalize(st);
  sqlite3_close(db);
  return rows;
}

// An evaluation is stored as an event with its step in eval_step (and no step: it is not one);
// GetJob's last_eval is the job's latest evaluation by the order stored, in any attempt (a
// restart that evaluates an earlier step again replaces a later one), none for a job that has
// none. Pages of steps, the summary's last step and the events list are as without evaluations,
// the evaluations among the events in their place.
TEST(JobStoreTest, EvaluationsAreStoredWithTheirStepAndTheLatestIsTheJobsLastEval) {
  const std::string path = TempDir() + "/weft.db";
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto job = (*store)->CreateJob(Spec("a"), 1, "submitted");
  auto other = (*store)->CreateJob(Spec("b"), 2, "submitted");
  ASSERT_TRUE(job.ok() && other.ok());
  const std::string id = job->id();
  auto got = (*store)->GetJob(id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_last_eval()) << "no evaluation yet";

  for (const v1::JobEvent& e :
       {StepEvent(id, 1, 4.0), StepEvent(id, 2, 3.0), EvalEvent(id, 2, 3.5),
        StepEvent(id, 3, 2.0), StepEvent(id, 4, 1.0), EvalEvent(id, 4, 2.5)}) {
    ASSERT_TRUE((*store)->AppendEvent(id, 0, e).ok());
  }
  got = (*store)->GetJob(id);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_last_eval());
  EXPECT_EQ(got->last_eval().step(), 4);
  EXPECT_DOUBLE_EQ(got->last_eval().loss(), 2.5);
  got = (*store)->GetJob(other->id());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_last_eval()) << "another job's evaluations are not this one's";
  // The rows: (seq, step, eval_step); the first is the job's PENDING event.
  EXPECT_EQ(RawRows(path, "SELECT seq, step, eval_step FROM events WHERE job_id = '" + id +
                              "' ORDER BY seq;"),
            (std::vector<std::string>{"1|NULL|NULL", "2|1|NULL", "3|2|NULL", "4|NULL|2",
                                      "5|3|NULL", "6|4|NULL", "7|NULL|4"}));

  // Attempt 1 resumes after step 2 and evaluates after its step 3: that is now the latest, though
  // attempt 0 evaluated a later step.
  job->set_attempt(1);
  job->set_state(v1::RUNNING);
  v1::JobEvent restarted = StateEvent(*job, 5);
  ASSERT_TRUE((*store)->UpdateJob(*job, &restarted).ok());
  ASSERT_TRUE((*store)->AppendEvent(id, 1, StepEvent(id, 3, 1.75)).ok());
  ASSERT_TRUE((*store)->AppendEvent(id, 1, EvalEvent(id, 3, 3.25)).ok());
  got = (*store)->GetJob(id);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_last_eval());
  EXPECT_EQ(got->last_eval().step(), 3);
  EXPECT_DOUBLE_EQ(got->last_eval().loss(), 3.25);
  EXPECT_EQ(got->steps_size(), 0) << "GetJob reads no steps";

  // Pages of steps: each step once, as its latest attempt ran it; no evaluation among them.
  const StepPages pages = ReadStepPages(**store, id, 2);
  for (const v1::Job& page : pages.jobs) {
    EXPECT_EQ(page.last_eval().step(), 3) << "every page has the job's last_eval";
  }
  EXPECT_EQ(pages.steps, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(pages.losses, (std::vector<double>{4.0, 3.0, 1.75, 1.0}));
  EXPECT_EQ(pages.sizes, (std::vector<int>{2, 2}));

  // The summary's last step is attempt 1's step 3, though an evaluation was stored after it.
  auto summaries = (*store)->ListJobSummaries(v1::JOB_STATE_UNSPECIFIED, "", 10);
  ASSERT_TRUE(summaries.ok()) << summaries.status();
  ASSERT_EQ(summaries->jobs.size(), 2u);
  ASSERT_TRUE(summaries->jobs[0].has_last_step());
  EXPECT_EQ(summaries->jobs[0].last_step().step(), 3);
  EXPECT_DOUBLE_EQ(summaries->jobs[0].last_step().loss(), 1.75);

  auto events = (*store)->ListEvents(id);
  ASSERT_TRUE(events.ok()) << events.status();
  std::vector<std::string> kinds;
  for (const v1::JobEvent& e : *events) {
    kinds.push_back(e.has_step()   ? absl::StrCat("step ", e.step().step())
                    : e.has_eval() ? absl::StrCat("eval ", e.eval().step())
                                   : v1::JobState_Name(e.state()));
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"PENDING", "step 1", "step 2", "eval 2", "step 3",
                                             "step 4", "eval 4", "RUNNING", "step 3", "eval 3"}));

  // The evaluation is read back after a reopen, and goes with the job when it is deleted.
  job->set_state(v1::SUCCEEDED);
  job->set_end_time_ms(9);
  ASSERT_TRUE((*store)->UpdateJob(*job, nullptr).ok());
  store->reset();
  auto reopened = JobStore::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  got = (*reopened)->GetJob(id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->last_eval().step(), 3);
  ASSERT_TRUE((*reopened)->DeleteJob(id).ok());
  EXPECT_TRUE(RawRows(path, "SELECT seq FROM events WHERE eval_step IS NOT NULL;").empty());
}

// A store made before evaluations (an events table without eval_step) opens: the column and the
// evals_by_job index are added, its steps read as before, and evaluations are stored and read;
// it opens again, migrated.
TEST(JobStoreTest, AStoreWithoutTheEvalStepColumnOpensAndGainsEvaluations) {
  const std::string path = TempDir() + "/weft.db";
  {
    // The schema as coordinators before evaluations made it (jobs and events; the tables and
    // indexes that have not changed are made by Open as for a new store).
    const std::string sql = absl::StrCat(R"sql(
      CREATE TABLE jobs (
        seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, spec BLOB NOT NULL,
        state INTEGER NOT NULL, message TEXT NOT NULL DEFAULT '',
        create_time_ms INTEGER NOT NULL DEFAULT 0, start_time_ms INTEGER NOT NULL DEFAULT 0,
        end_time_ms INTEGER NOT NULL DEFAULT 0, attempt INTEGER NOT NULL DEFAULT 0,
        workers TEXT NOT NULL DEFAULT '', rank_errors BLOB);
      CREATE TABLE events (
        job_id TEXT NOT NULL, seq INTEGER NOT NULL, attempt INTEGER NOT NULL, step INTEGER,
        event BLOB NOT NULL, PRIMARY KEY (job_id, seq));
      CREATE INDEX jobs_by_state ON jobs (state, seq);
      CREATE INDEX steps_by_attempt ON events (job_id, attempt, seq) WHERE step IS NOT NULL;
      CREATE INDEX steps_by_number ON events (job_id, step, seq) WHERE step IS NOT NULL;
      CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
      INSERT INTO counters (name, value) VALUES ('jobs', 1);
      INSERT INTO jobs (seq, id, spec, state, message, create_time_ms)
        VALUES (1, 'job-000001', X')sql",
                                         absl::BytesToHexString(Spec("old").SerializeAsString()),
                                         R"sql(', 3, 'running', 100);
      INSERT INTO events (job_id, seq, attempt, step, event) VALUES
        ('job-000001', 1, 0, 1, X')sql",
      absl::BytesToHexString(StepEvent("job-000001", 1, 0.5).SerializeAsString()),
                                         R"sql('),
        ('job-000001', 2, 0, 2, X')sql",
      absl::BytesToHexString(StepEvent("job-000001", 2, 0.25).SerializeAsString()),
                                         R"sql(');)sql");
    ASSERT_NO_FATAL_FAILURE(WriteRawStore(path, sql));
  }
  for (int open = 0; open < 2; ++open) {  // and again, migrated
    auto store = JobStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(RawRows(path, "SELECT COUNT(*) FROM pragma_table_info('events') "
                            "WHERE name = 'eval_step';"),
              std::vector<std::string>{"1"});
    EXPECT_EQ(RawRows(path, "SELECT tbl_name FROM sqlite_master WHERE type = 'index' AND "
                            "name = 'evals_by_job';"),
              std::vector<std::string>{"events"});
    auto page = (*store)->GetJobSteps("job-000001", 0, 10);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_EQ(page->job.spec().name(), "old");
    ASSERT_EQ(page->job.steps_size(), open == 0 ? 2 : 3);
    EXPECT_DOUBLE_EQ(page->job.steps(1).loss(), 0.25);
    if (open == 0) {
      EXPECT_FALSE(page->job.has_last_eval());
      ASSERT_TRUE((*store)->AppendEvent("job-000001", 0, EvalEvent("job-000001", 2, 0.75)).ok());
      ASSERT_TRUE((*store)->AppendEvent("job-000001", 0, StepEvent("job-000001", 3, 0.125)).ok());
    } else {
      ASSERT_TRUE(page->job.has_last_eval());
      EXPECT_EQ(page->job.last_eval().step(), 2);
      EXPECT_DOUBLE_EQ(page->job.last_eval().loss(), 0.75);
      EXPECT_EQ(page->job.steps(2).step(), 3) << "the step after the evaluation";
      EXPECT_EQ(RawRows(path, "SELECT seq, step, eval_step FROM events ORDER BY seq;"),
                (std::vector<std::string>{"1|1|NULL", "2|2|NULL", "3|NULL|2", "4|3|NULL"}));
    }
  }
}

// A job that ended goes with its events and log lines, and nothing of the other jobs; one that
// has not ended stays whole. No id is given twice, across a reopen too; a deleted job's id is
// told apart from one never given, and still pages on.
TEST(JobStoreTest, DeletingAnEndedJobRemovesItsEventsAndLinesAndNeverReusesItsId) {
  const std::string path = TempDir() + "/weft.db";
  auto store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<v1::Job> jobs;
  for (const char* name : {"kept", "running", "deleted"}) {
    auto job = (*store)->CreateJob(Spec(name), 100, "submitted");
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE((*store)->AppendEvent(job->id(), 0, StepEvent(job->id(), 1, 2.5)).ok());
    ASSERT_TRUE((*store)->AppendLogLines(job->id(), 0, 0, Lines(1000, 2, name), 10).ok());
    jobs.push_back(*job);
  }
  jobs[0].set_state(v1::SUCCEEDED);
  jobs[0].set_end_time_ms(300);
  jobs[1].set_state(v1::RUNNING);
  jobs[2].set_state(v1::FAILED);
  jobs[2].set_end_time_ms(400);
  jobs[2].set_message("rank 0 failed");
  for (const v1::Job& job : jobs) ASSERT_TRUE((*store)->UpdateJob(job, nullptr).ok());

  auto running = (*store)->DeleteJob(jobs[1].id());
  EXPECT_EQ(running.status().code(), absl::StatusCode::kFailedPrecondition) << running.status();
  EXPECT_NE(running.status().message().find("RUNNING"), absl::string_view::npos);
  auto deleted = (*store)->DeleteJob(jobs[2].id());
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->spec().name(), "deleted");
  EXPECT_EQ(deleted->message(), "rank 0 failed");
  auto get = (*store)->GetJob(jobs[2].id());
  EXPECT_EQ(get.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(get.status().message(), "job job-000003 was deleted");
  EXPECT_EQ((*store)->GetJob("job-000009").status().message(), "no job job-000009");
  // Only ids in the form the store gives are told apart.
  EXPECT_EQ((*store)->GetJob("job-3").status().message(), "no job job-3");
  EXPECT_EQ((*store)->DeleteJob(jobs[2].id()).status().code(), absl::StatusCode::kNotFound);
  // A page that ended at the deleted job goes on after it.
  ASSERT_TRUE((*store)->DeleteJob(jobs[0].id()).ok());
  auto page = (*store)->ListJobSummaries(v1::JOB_STATE_UNSPECIFIED, jobs[0].id(), 10);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs.size(), 1u);
  EXPECT_EQ(page->jobs[0].id(), jobs[1].id());
  EXPECT_EQ((*store)->ListJobSummaries(v1::JOB_STATE_UNSPECIFIED, "job-000009", 10)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->ListEvents(jobs[2].id()).status().message(), "job job-000003 was deleted");
  LogLineQuery gone;
  gone.job_id = jobs[2].id();
  EXPECT_EQ((*store)->GetLogLines(gone).status().code(), absl::StatusCode::kNotFound);
  // A worker winding down the deleted job's rank logs again: nothing is stored for it.
  EXPECT_EQ((*store)->AppendLogLines(jobs[2].id(), 0, 0, Lines(2000, 1, "late"), 10).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->GetLogLines(gone).status().code(), absl::StatusCode::kNotFound);

  // The running job keeps its step and lines.
  auto job = (*store)->GetJobSteps(jobs[1].id(), 0, 10);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->job.steps_size(), 1);
  LogLineQuery lines;
  lines.job_id = jobs[1].id();
  EXPECT_EQ(ReadAllLines(**store, lines).size(), 2u);
  auto counts = (*store)->CountJobsByState();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts, (std::map<v1::JobState, int64_t>{{v1::RUNNING, 1}}));

  // job-000003 was the newest; the next job is job-000004, after a reopen too.
  auto next = (*store)->CreateJob(Spec("next"), 500, "submitted");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->id(), "job-000004");
  next->set_state(v1::CANCELLED);
  next->set_end_time_ms(600);
  ASSERT_TRUE((*store)->UpdateJob(*next, nullptr).ok());
  ASSERT_TRUE((*store)->DeleteJob(next->id()).ok());
  store->reset();
  auto reopened = JobStore::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto after = (*reopened)->CreateJob(Spec("after"), 700, "submitted");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->id(), "job-000005");
}

// Retention's candidates: ended jobs that ended before a time, and those beyond the newest N to
// end, oldest ending first; jobs that have not ended never.
TEST(JobStoreTest, ExpiredJobsAreTheEndedOnesPastTheAgeOrCount) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  // Submitted in this order, ending at these times (0: not ended).
  const std::vector<std::pair<v1::JobState, int64_t>> jobs = {
      {v1::SUCCEEDED, 500}, {v1::RUNNING, 0},  {v1::FAILED, 100},
      {v1::CANCELLED, 300}, {v1::PENDING, 0},  {v1::SUCCEEDED, 900}};
  std::vector<std::string> ids;
  for (const auto& [state, end] : jobs) {
    auto job = (*store)->CreateJob(Spec("j"), 50, "submitted");
    ASSERT_TRUE(job.ok());
    job->set_state(state);
    job->set_end_time_ms(end);
    ASSERT_TRUE((*store)->UpdateJob(*job, nullptr).ok());
    ids.push_back(job->id());
  }
  auto expired = [&](int64_t before, int64_t keep, int limit) {
    auto list = (*store)->ListExpiredJobs(before, keep, limit);
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? *list : std::vector<std::string>{};
  };
  using Ids = std::vector<std::string>;
  EXPECT_EQ(expired(0, 0, 100), Ids{});
  EXPECT_EQ(expired(400, 0, 100), (Ids{ids[2], ids[3]}));
  EXPECT_EQ(expired(10000, 0, 100), (Ids{ids[2], ids[3], ids[0], ids[5]}));
  EXPECT_EQ(expired(10000, 0, 3), (Ids{ids[2], ids[3], ids[0]}));
  EXPECT_EQ(expired(0, 1, 100), (Ids{ids[2], ids[3], ids[0]}));
  EXPECT_EQ(expired(0, 3, 100), (Ids{ids[2]}));
  EXPECT_EQ(expired(0, 4, 100), Ids{});
  // Either rule: older than 400, or beyond the newest 2.
  EXPECT_EQ(expired(400, 2, 100), (Ids{ids[2], ids[3]}));
  EXPECT_EQ(expired(200, 2, 100), (Ids{ids[2], ids[3]}));
  EXPECT_EQ(expired(200, 2, 1), (Ids{ids[2]}));
  EXPECT_EQ((*store)->ListExpiredJobs(1, 1, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
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
