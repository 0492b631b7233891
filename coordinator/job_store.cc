#include "coordinator/job_store.h"

#include <sqlite3.h>

#include <functional>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "common/utf8.h"

namespace weft::coordinator {
namespace {

constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  seq INTEGER PRIMARY KEY,
  id TEXT NOT NULL UNIQUE,
  spec BLOB NOT NULL,
  state INTEGER NOT NULL,
  message TEXT NOT NULL DEFAULT '',
  create_time_ms INTEGER NOT NULL DEFAULT 0,
  start_time_ms INTEGER NOT NULL DEFAULT 0,
  end_time_ms INTEGER NOT NULL DEFAULT 0,
  attempt INTEGER NOT NULL DEFAULT 0,
  workers TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS events (
  job_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  step INTEGER,
  event BLOB NOT NULL,
  PRIMARY KEY (job_id, seq)
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, seq);
-- GetJob's pages of steps and ListJobs' last step of each job: an attempt's steps in order.
CREATE INDEX IF NOT EXISTS steps_by_attempt ON events (job_id, attempt, seq)
  WHERE step IS NOT NULL;
-- GetJob's pages of steps: each step's runs, the latest last.
CREATE INDEX IF NOT EXISTS steps_by_number ON events (job_id, step, seq)
  WHERE step IS NOT NULL;
)sql";

// One prepared statement, finalized when it goes out of scope.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  absl::Status status() const {
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("preparing SQL: ", sqlite3_errmsg(db_)));
  }
  void BindText(int i, const std::string& s) {
    sqlite3_bind_text(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void BindBlob(int i, const std::string& s) {
    sqlite3_bind_blob(stmt_, i, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
  }
  void BindInt(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void BindNull(int i) { sqlite3_bind_null(stmt_, i); }

  // True while there is a row; an error ends the loop and is kept in status().
  bool Step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) rc_ = rc;
    return false;
  }
  absl::Status Run() {
    while (Step()) {
    }
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("SQLite: ", sqlite3_errmsg(db_)));
  }
  absl::Status done_status() const {
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("SQLite: ", sqlite3_errmsg(db_)));
  }

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  std::string Bytes(int col) const {
    const void* p = sqlite3_column_blob(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    return p == nullptr ? std::string() : std::string(static_cast<const char*>(p), n);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

constexpr char kJobColumns[] =
    "id, spec, state, message, create_time_ms, start_time_ms, end_time_ms, attempt, workers";

absl::StatusOr<v1::Job> JobFromRow(const Statement& row) {
  v1::Job job;
  job.set_id(row.Bytes(0));
  if (!job.mutable_spec()->ParseFromString(row.Bytes(1))) {
    return absl::DataLossError(absl::StrCat("job ", job.id(), ": stored spec does not parse"));
  }
  job.set_state(static_cast<v1::JobState>(row.Int(2)));
  job.set_message(row.Bytes(3));
  job.set_create_time_ms(row.Int(4));
  job.set_start_time_ms(row.Int(5));
  job.set_end_time_ms(row.Int(6));
  job.set_attempt(static_cast<int32_t>(row.Int(7)));
  std::string workers = row.Bytes(8);
  if (!workers.empty()) {
    for (absl::string_view w : absl::StrSplit(workers, ',')) job.add_workers(std::string(w));
  }
  return job;
}

absl::StatusOr<v1::StepMetrics> StepFromEvent(const std::string& job_id, const std::string& bytes) {
  v1::JobEvent event;
  if (!event.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("job ", job_id, ": a stored event does not parse"));
  }
  return event.step();
}

// Adds to job's steps at most `limit` steps numbered above `after_step`, in step order, each as
// its latest attempt ran it (a restarted attempt runs again the steps after the checkpoint it
// resumed from; its figures replace the earlier ones). Returns the step after which the next
// page starts, 0 when none follows.
absl::StatusOr<int64_t> FillSteps(sqlite3* db, int64_t after_step, int limit, v1::Job* job) {
  Statement st(db,
               "SELECT e.step, e.event FROM events e WHERE e.job_id = ?1 AND e.step > ?2 AND "
               "e.seq = (SELECT MAX(seq) FROM events WHERE job_id = ?1 AND step = e.step) "
               "ORDER BY e.step LIMIT ?3;");
  RETURN_IF_ERROR(st.status());
  st.BindText(1, job->id());
  st.BindInt(2, after_step);
  st.BindInt(3, int64_t{limit} + 1);  // one more says whether a next page exists
  int64_t last = 0;
  while (st.Step()) {
    if (job->steps_size() == limit) return last;
    ASSIGN_OR_RETURN(*job->add_steps(), StepFromEvent(job->id(), st.Bytes(1)));
    last = st.Int(0);
  }
  RETURN_IF_ERROR(st.done_status());
  return 0;
}

// Jobs matching `where_sql` (whose parameters `bind` sets), in submit order, without steps.
absl::StatusOr<std::vector<v1::Job>> QueryJobs(sqlite3* db, const std::string& where_sql,
                                               const std::function<void(Statement*)>& bind) {
  Statement st(db, absl::StrCat("SELECT ", kJobColumns, " FROM jobs ", where_sql, " ORDER BY seq;"));
  RETURN_IF_ERROR(st.status());
  if (bind) bind(&st);
  std::vector<v1::Job> jobs;
  while (st.Step()) {
    ASSIGN_OR_RETURN(v1::Job job, JobFromRow(st));
    jobs.push_back(std::move(job));
  }
  RETURN_IF_ERROR(st.done_status());
  return jobs;
}

// A column after kJobColumns: the job's latest step event of its current attempt, or NULL.
constexpr char kLastStepColumn[] =
    "(SELECT events.event FROM events WHERE events.job_id = jobs.id AND "
    "events.attempt = jobs.attempt AND events.step IS NOT NULL ORDER BY events.seq DESC LIMIT 1)";

// A row of kJobColumns and kLastStepColumn as a summary.
absl::StatusOr<v1::JobSummary> SummaryFromRow(const Statement& row) {
  ASSIGN_OR_RETURN(v1::Job job, JobFromRow(row));
  v1::JobSummary summary;
  summary.set_id(job.id());
  summary.set_state(job.state());
  summary.set_message(std::string(Utf8Prefix(job.message(), kSummaryMessageBytes)));
  summary.set_create_time_ms(job.create_time_ms());
  summary.set_start_time_ms(job.start_time_ms());
  summary.set_end_time_ms(job.end_time_ms());
  summary.set_attempt(job.attempt());
  summary.set_name(std::string(Utf8Prefix(job.spec().name(), kSummaryNameBytes)));
  summary.set_total_steps(job.spec().train().steps());
  const std::string last_step = row.Bytes(9);
  if (!last_step.empty()) {
    ASSIGN_OR_RETURN(*summary.mutable_last_step(), StepFromEvent(job.id(), last_step));
  }
  return summary;
}

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string why = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(absl::StrCat("opening job store ", path, ": ", why));
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<JobStore> store(new JobStore(db));
  absl::MutexLock lock(&store->mu_);
  // WAL keeps readers off the writer's back; FULL sync makes a committed job record survive a
  // power loss too, not only a crash of this process (one fsync per event: steps are coarse).
  for (const char* sql : {"PRAGMA journal_mode=WAL;", "PRAGMA synchronous=FULL;"}) {
    absl::Status s = store->Exec(sql);
    if (!s.ok()) return Annotate(s, absl::StrCat("opening job store ", path));
  }
  // A damaged store must stop the coordinator here, not give one that serves while every call
  // fails: SQLite's quick_check reads every page and answers "ok" or what is wrong.
  std::string verdict;
  sqlite3_stmt* check = nullptr;
  rc = sqlite3_prepare_v2(store->db_, "PRAGMA quick_check(1);", -1, &check, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(check);
  if (rc == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(check, 0);
    verdict = text != nullptr ? reinterpret_cast<const char*>(text) : "";
  } else {
    verdict = sqlite3_errmsg(store->db_);
  }
  sqlite3_finalize(check);
  // Only damage is data loss; a busy or unreadable store may pass the check another time.
  const int code = rc & 0xFF;
  if (rc != SQLITE_ROW && code != SQLITE_CORRUPT && code != SQLITE_NOTADB) {
    return absl::UnavailableError(
        absl::StrCat("checking job store ", path, " (PRAGMA quick_check): ", verdict));
  }
  if (verdict != "ok") {
    return absl::DataLossError(absl::StrCat(
        "job store ", path, " fails SQLite's integrity check (", verdict,
        "); the coordinator will not serve from it: restore it from a backup, or move it aside "
        "to start with no jobs"));
  }
  absl::Status s = store->Exec(kSchema);
  if (!s.ok()) return Annotate(s, absl::StrCat("opening job store ", path));
  return store;
}

JobStore::~JobStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status JobStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string why = err != nullptr ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("SQLite: ", why));
  }
  return absl::OkStatus();
}

template <typename Body>
absl::Status JobStore::InTransaction(Body body) {
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  absl::Status s = body();
  if (s.ok()) s = Exec("COMMIT;");
  if (!s.ok()) Exec("ROLLBACK;").IgnoreError();
  return s;
}

absl::Status JobStore::WriteJobRow(const v1::Job& job) {
  Statement st(db_,
               "UPDATE jobs SET state = ?1, message = ?2, create_time_ms = ?3, start_time_ms = ?4, "
               "end_time_ms = ?5, attempt = ?6, workers = ?7 WHERE id = ?8;");
  RETURN_IF_ERROR(st.status());
  st.BindInt(1, job.state());
  st.BindText(2, job.message());
  st.BindInt(3, job.create_time_ms());
  st.BindInt(4, job.start_time_ms());
  st.BindInt(5, job.end_time_ms());
  st.BindInt(6, job.attempt());
  st.BindText(7, absl::StrJoin(job.workers(), ","));
  st.BindText(8, job.id());
  RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("job ", job.id()));
  return absl::OkStatus();
}

absl::Status JobStore::InsertEvent(const std::string& job_id, int attempt,
                                   const v1::JobEvent& event) {
  Statement st(db_,
               "INSERT INTO events (job_id, seq, attempt, step, event) VALUES (?1, "
               "(SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job_id = ?1), ?2, ?3, ?4);");
  RETURN_IF_ERROR(st.status());
  st.BindText(1, job_id);
  st.BindInt(2, attempt);
  if (event.has_step()) {
    st.BindInt(3, event.step().step());
  } else {
    st.BindNull(3);
  }
  st.BindBlob(4, event.SerializeAsString());
  return st.Run();
}

absl::StatusOr<v1::Job> JobStore::CreateJob(const v1::JobSpec& spec, int64_t now_ms,
                                            const std::string& message) {
  absl::MutexLock lock(&mu_);
  v1::Job job;
  absl::Status s = InTransaction([&]() -> absl::Status {
    Statement next(db_, "SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs;");
    RETURN_IF_ERROR(next.status());
    if (!next.Step()) return next.done_status();
    int64_t seq = next.Int(0);
    job.set_id(absl::StrFormat("job-%06d", seq));
    *job.mutable_spec() = spec;
    job.set_state(v1::PENDING);
    job.set_message(message);
    job.set_create_time_ms(now_ms);

    Statement ins(db_, "INSERT INTO jobs (seq, id, spec, state, message, create_time_ms) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6);");
    RETURN_IF_ERROR(ins.status());
    ins.BindInt(1, seq);
    ins.BindText(2, job.id());
    ins.BindBlob(3, spec.SerializeAsString());
    ins.BindInt(4, job.state());
    ins.BindText(5, message);
    ins.BindInt(6, now_ms);
    RETURN_IF_ERROR(ins.Run());

    v1::JobEvent event;
    event.set_job_id(job.id());
    event.set_time_ms(now_ms);
    event.set_state(v1::PENDING);
    event.set_message(message);
    return InsertEvent(job.id(), job.attempt(), event);
  });
  if (!s.ok()) return Annotate(s, "storing a new job");
  return job;
}

absl::Status JobStore::UpdateJob(const v1::Job& job, const v1::JobEvent* event) {
  absl::MutexLock lock(&mu_);
  return Annotate(InTransaction([&]() -> absl::Status {
                    RETURN_IF_ERROR(WriteJobRow(job));
                    if (event != nullptr) RETURN_IF_ERROR(InsertEvent(job.id(), job.attempt(), *event));
                    return absl::OkStatus();
                  }),
                  absl::StrCat("storing job ", job.id()));
}

absl::Status JobStore::AppendEvent(const std::string& job_id, int attempt,
                                   const v1::JobEvent& event) {
  absl::MutexLock lock(&mu_);
  return Annotate(InsertEvent(job_id, attempt, event),
                  absl::StrCat("storing an event of job ", job_id));
}

absl::StatusOr<v1::Job> JobStore::GetJobLocked(const std::string& job_id) {
  ASSIGN_OR_RETURN(
      std::vector<v1::Job> jobs,
      QueryJobs(db_, "WHERE id = ?1", [&](Statement* st) { st->BindText(1, job_id); }));
  if (jobs.empty()) return absl::NotFoundError(absl::StrCat("no job ", job_id));
  return std::move(jobs[0]);
}

absl::StatusOr<v1::Job> JobStore::GetJob(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  return GetJobLocked(job_id);
}

absl::StatusOr<JobStepsPage> JobStore::GetJobSteps(const std::string& job_id,
                                                   int64_t after_step, int limit) {
  if (limit <= 0) return absl::InvalidArgumentError("a page of steps needs a positive limit");
  absl::MutexLock lock(&mu_);
  JobStepsPage page;
  ASSIGN_OR_RETURN(page.job, GetJobLocked(job_id));
  ASSIGN_OR_RETURN(page.next_after_step, FillSteps(db_, after_step, limit, &page.job));
  return page;
}

absl::StatusOr<JobSummaryPage> JobStore::ListJobSummaries(v1::JobState state,
                                                          const std::string& after_id, int limit) {
  if (limit <= 0) return absl::InvalidArgumentError("a page of jobs needs a positive limit");
  absl::MutexLock lock(&mu_);
  int64_t after_seq = 0;
  if (!after_id.empty()) {
    Statement find(db_, "SELECT seq FROM jobs WHERE id = ?1;");
    RETURN_IF_ERROR(find.status());
    find.BindText(1, after_id);
    if (!find.Step()) {
      RETURN_IF_ERROR(find.done_status());
      return absl::NotFoundError("no job has that id");
    }
    after_seq = find.Int(0);
  }
  // Keyset paging: seq (or (state, seq) with a state) is an index, so a page costs its rows.
  Statement st(db_, absl::StrCat("SELECT ", kJobColumns, ", ", kLastStepColumn,
                                 " FROM jobs WHERE seq > ?1",
                                 state != v1::JOB_STATE_UNSPECIFIED ? " AND state = ?2" : "",
                                 " ORDER BY seq LIMIT ?3;"));
  RETURN_IF_ERROR(st.status());
  st.BindInt(1, after_seq);
  st.BindInt(2, state);
  st.BindInt(3, int64_t{limit} + 1);  // one more says whether a next page exists
  JobSummaryPage page;
  while (st.Step()) {
    if (static_cast<int>(page.jobs.size()) == limit) {
      page.more = true;
      break;
    }
    ASSIGN_OR_RETURN(v1::JobSummary summary, SummaryFromRow(st));
    page.jobs.push_back(std::move(summary));
  }
  RETURN_IF_ERROR(st.done_status());
  return page;
}

absl::StatusOr<std::vector<v1::Job>> JobStore::ListJobsInState(v1::JobState state) {
  absl::MutexLock lock(&mu_);
  return QueryJobs(db_, "WHERE state = ?1", [&](Statement* st) { st->BindInt(1, state); });
}

absl::StatusOr<std::vector<v1::JobEvent>> JobStore::ListEvents(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Statement st(db_, "SELECT event FROM events WHERE job_id = ?1 ORDER BY seq;");
  RETURN_IF_ERROR(st.status());
  st.BindText(1, job_id);
  std::vector<v1::JobEvent> events;
  while (st.Step()) {
    v1::JobEvent event;
    if (!event.ParseFromString(st.Bytes(0))) {
      return absl::DataLossError(absl::StrCat("job ", job_id, ": a stored event does not parse"));
    }
    events.push_back(std::move(event));
  }
  RETURN_IF_ERROR(st.done_status());
  return events;
}

absl::StatusOr<std::vector<v1::Job>> JobStore::RestartInterruptedJobs(
    int64_t now_ms, const std::string& message) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> restarting;
  absl::Status s = InTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::vector<v1::Job> jobs,
                     QueryJobs(db_,
                               absl::StrCat("WHERE state IN (", v1::PLANNING, ", ", v1::RUNNING,
                                            ", ", v1::RESTARTING, ")"),
                               nullptr));
    for (v1::Job& job : jobs) {
      // A RESTARTING job already counts its next attempt.
      if (job.state() != v1::RESTARTING) job.set_attempt(job.attempt() + 1);
      job.set_state(v1::RESTARTING);
      job.set_message(message);
      job.clear_workers();
      RETURN_IF_ERROR(WriteJobRow(job));
      v1::JobEvent event;
      event.set_job_id(job.id());
      event.set_time_ms(now_ms);
      event.set_state(v1::RESTARTING);
      event.set_message(message);
      RETURN_IF_ERROR(InsertEvent(job.id(), job.attempt(), event));
      restarting.push_back(std::move(job));
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return Annotate(s, "restarting jobs interrupted by a coordinator restart");
  return restarting;
}

}  // namespace weft::coordinator
