#include "coordinator/job_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/job_state.h"
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
  workers TEXT NOT NULL DEFAULT '',
  -- A Job holding only rank_errors and rank_errors_omitted, serialized; NULL: none.
  rank_errors BLOB,
  -- A Job holding only its train.elastic state (elastic_size, grows, resizes), serialized; NULL:
  -- none. Added by Migrate to older stores.
  elastic BLOB
);
CREATE TABLE IF NOT EXISTS events (
  job_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  attempt INTEGER NOT NULL,
  step INTEGER,
  event BLOB NOT NULL,
  -- An evaluation's step (JobEvent.eval); NULL for other events. Added by Migrate to older stores.
  eval_step INTEGER,
  PRIMARY KEY (job_id, seq)
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, seq);
-- GetJob's pages of steps and ListJobs' last step of each job: an attempt's steps in order.
CREATE INDEX IF NOT EXISTS steps_by_attempt ON events (job_id, attempt, seq)
  WHERE step IS NOT NULL;
-- GetJob's pages of steps: each step's runs, the latest last.
CREATE INDEX IF NOT EXISTS steps_by_number ON events (job_id, step, seq)
  WHERE step IS NOT NULL;
-- The lines workers logged while they ran a job's ranks; seq numbers a rank's lines in an attempt
-- from 1. A marker row (seq = the bound + 1) counts the lines dropped beyond the bound.
CREATE TABLE IF NOT EXISTS log_lines (
  job_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  time_ms INTEGER NOT NULL,
  level TEXT NOT NULL,
  text TEXT NOT NULL,
  dropped INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (job_id, attempt, rank, seq)
) WITHOUT ROWID;
-- GetJobLogs' pages: every rank's lines in order of time, and one rank's.
CREATE INDEX IF NOT EXISTS log_lines_by_time ON log_lines (job_id, attempt, time_ms, rank, seq);
CREATE INDEX IF NOT EXISTS log_lines_by_rank ON log_lines (job_id, rank, attempt, time_ms, seq);
-- Ended jobs by when they ended, for retention (end_time_ms is set when a job reaches a final
-- state).
CREATE INDEX IF NOT EXISTS jobs_by_end ON jobs (end_time_ms) WHERE end_time_ms > 0;
-- Counters that must never go back: the seq of the last job ever created (deleting the newest job
-- must not give its id to the next one).
CREATE TABLE IF NOT EXISTS counters (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
)sql";

// SQLite's failure as a status: RESOURCE_EXHAUSTED for a full disk and UNAVAILABLE for the other
// failures of a store that cannot take a write now but could later (an I/O error, the file busy
// or read-only), so that the writer retries them (IsRetriableStoreError); INTERNAL otherwise (the
// write itself is wrong).
absl::Status SqliteStatus(int rc, const std::string& why) {
  switch (rc & 0xff) {  // the primary code of an extended one
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(absl::StrCat("SQLite: ", why));
    case SQLITE_IOERR:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_NOMEM:
    case SQLITE_READONLY:
      return absl::UnavailableError(absl::StrCat("SQLite: ", why));
    default:
      return absl::InternalError(absl::StrCat("SQLite: ", why));
  }
}

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
  // For the next run of the statement, its bindings replaced one by one.
  void Reset() { sqlite3_reset(stmt_); }

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
    return done_status();
  }
  absl::Status done_status() const {
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return SqliteStatus(rc_, sqlite3_errmsg(db_));
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
// kJobColumns, the rank errors and the elastic state: a whole job record (summaries leave them
// out).
constexpr char kFullJobColumns[] =
    "id, spec, state, message, create_time_ms, start_time_ms, end_time_ms, attempt, workers, "
    "rank_errors, elastic";

// The elastic column: a Job holding only its elastic state; empty when it has none.
std::string ElasticBlob(const v1::Job& job) {
  if (job.elastic_size() == 0 && job.grows() == 0 && job.resizes_size() == 0) return "";
  v1::Job holder;
  holder.set_elastic_size(job.elastic_size());
  holder.set_grows(job.grows());
  *holder.mutable_resizes() = job.resizes();
  return holder.SerializeAsString();
}

// The rank_errors column: a Job holding only them, so no storage message of its own is needed.
std::string RankErrorsBlob(const v1::Job& job) {
  v1::Job holder;
  *holder.mutable_rank_errors() = job.rank_errors();
  holder.set_rank_errors_omitted(job.rank_errors_omitted());
  return holder.SerializeAsString();
}

// A column holding part of a Job (the rank errors, the elastic state: a Job with only those
// fields set), merged into `job`, which has none of them yet.
absl::Status MergeJobPart(const std::string& blob, const std::string& what, v1::Job* job) {
  if (blob.empty() || job->MergeFromString(blob)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("job ", job->id(), ": its stored ", what,
                                          " does not parse"));
}

// A row of kJobColumns (of kFullJobColumns when `full`) as a Job.
absl::StatusOr<v1::Job> JobFromRow(const Statement& row, bool full) {
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
  if (full) {
    RETURN_IF_ERROR(MergeJobPart(row.Bytes(9), "rank error list", &job));
    RETURN_IF_ERROR(MergeJobPart(row.Bytes(10), "elastic state", &job));
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
  Statement st(db,
               absl::StrCat("SELECT ", kFullJobColumns, " FROM jobs ", where_sql, " ORDER BY seq;"));
  RETURN_IF_ERROR(st.status());
  if (bind) bind(&st);
  std::vector<v1::Job> jobs;
  while (st.Step()) {
    ASSIGN_OR_RETURN(v1::Job job, JobFromRow(st, /*full=*/true));
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
  ASSIGN_OR_RETURN(v1::Job job, JobFromRow(row, /*full=*/false));
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

// The marker line of a rank's attempt that dropped `dropped` lines beyond max_lines.
std::string DroppedLinesText(int64_t dropped, int64_t max_lines) {
  return absl::StrCat("[weft] ", dropped, " more line", dropped == 1 ? "" : "s",
                      " of this rank dropped: the coordinator keeps at most ", max_lines,
                      " lines of a rank's attempt (--max_log_lines); the worker's own log has "
                      "them all");
}

// The seq a job id was made from ("job-000042": 42), or nullopt for a string no job id has.
std::optional<int64_t> SeqOfJobId(const std::string& id) {
  absl::string_view digits(id);
  int64_t seq = 0;
  // Only the form CreateJob writes: "job-3" and "job-0000003" name no job.
  if (!absl::ConsumePrefix(&digits, "job-") || !absl::SimpleAtoi(digits, &seq) ||
      absl::StrFormat("job-%06d", seq) != id) {
    return std::nullopt;
  }
  return seq;
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
  if (s.ok()) s = store->Migrate();
  if (!s.ok()) return Annotate(s, absl::StrCat("opening job store ", path));
  return store;
}

absl::Status JobStore::AddColumnIfMissing(const std::string& table, const std::string& column,
                                          const std::string& type) {
  Statement columns(db_, "SELECT name FROM pragma_table_info(?1);");
  RETURN_IF_ERROR(columns.status());
  columns.BindText(1, table);
  bool has = false;
  while (columns.Step()) has |= columns.Bytes(0) == column;
  RETURN_IF_ERROR(columns.done_status());
  if (has) return absl::OkStatus();
  return Annotate(
      Exec(absl::StrCat("ALTER TABLE ", table, " ADD COLUMN ", column, " ", type, ";").c_str()),
      absl::StrCat("adding the ", column, " column to the ", table, " table"));
}

absl::Status JobStore::Migrate() {
  // kSchema made the tables and indexes an older store lacks; the columns added to a table since
  // it was first made are added here.
  RETURN_IF_ERROR(AddColumnIfMissing("jobs", "rank_errors", "BLOB"));
  RETURN_IF_ERROR(AddColumnIfMissing("jobs", "elastic", "BLOB"));
  RETURN_IF_ERROR(AddColumnIfMissing("events", "eval_step", "INTEGER"));
  // GetJob's latest evaluation (made here: the column may have just been added).
  RETURN_IF_ERROR(Annotate(Exec("CREATE INDEX IF NOT EXISTS evals_by_job ON events (job_id, seq) "
                                "WHERE eval_step IS NOT NULL;"),
                           "indexing the evaluations"));
  // A store older than the counter: its last job made is its largest seq, before any delete.
  RETURN_IF_ERROR(Annotate(Exec("INSERT OR IGNORE INTO counters (name, value) SELECT 'jobs', "
                                "COALESCE(MAX(seq), 0) FROM jobs;"),
                           "counting the jobs the store made"));
  return absl::OkStatus();
}

JobStore::~JobStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status JobStore::Exec(const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string why = err != nullptr ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return SqliteStatus(sqlite3_extended_errcode(db_), why);
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
               "end_time_ms = ?5, attempt = ?6, workers = ?7, rank_errors = ?9, elastic = ?10 "
               "WHERE id = ?8;");
  RETURN_IF_ERROR(st.status());
  st.BindInt(1, job.state());
  st.BindText(2, job.message());
  st.BindInt(3, job.create_time_ms());
  st.BindInt(4, job.start_time_ms());
  st.BindInt(5, job.end_time_ms());
  st.BindInt(6, job.attempt());
  st.BindText(7, absl::StrJoin(job.workers(), ","));
  st.BindText(8, job.id());
  if (job.rank_errors_size() > 0 || job.rank_errors_omitted() > 0) {
    st.BindBlob(9, RankErrorsBlob(job));
  } else {
    st.BindNull(9);
  }
  if (const std::string elastic = ElasticBlob(job); !elastic.empty()) {
    st.BindBlob(10, elastic);
  } else {
    st.BindNull(10);
  }
  RETURN_IF_ERROR(st.Run());
  if (sqlite3_changes(db_) == 0) return absl::NotFoundError(absl::StrCat("job ", job.id()));
  return absl::OkStatus();
}

absl::Status JobStore::InsertEvent(const std::string& job_id, int attempt,
                                   const v1::JobEvent& event) {
  Statement st(db_,
               "INSERT INTO events (job_id, seq, attempt, step, event, eval_step) VALUES (?1, "
               "(SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job_id = ?1), ?2, ?3, ?4, "
               "?5);");
  RETURN_IF_ERROR(st.status());
  st.BindText(1, job_id);
  st.BindInt(2, attempt);
  if (event.has_step()) {
    st.BindInt(3, event.step().step());
  } else {
    st.BindNull(3);
  }
  st.BindBlob(4, event.SerializeAsString());
  if (event.has_eval()) {
    st.BindInt(5, event.eval().step());
  } else {
    st.BindNull(5);
  }
  return st.Run();
}

absl::StatusOr<v1::Job> JobStore::CreateJob(const v1::JobSpec& spec, int64_t now_ms,
                                            const std::string& message) {
  ObserveWrite();
  absl::MutexLock lock(&mu_);
  v1::Job job;
  absl::Status s = InTransaction([&]() -> absl::Status {
    // After the last job ever created, deleted or not.
    ASSIGN_OR_RETURN(const int64_t last, LastSeqLocked());
    const int64_t seq = last + 1;
    Statement count(db_, "INSERT OR REPLACE INTO counters (name, value) VALUES ('jobs', ?1);");
    RETURN_IF_ERROR(count.status());
    count.BindInt(1, seq);
    RETURN_IF_ERROR(count.Run());
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
  ObserveWrite();
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
  ObserveWrite();
  absl::MutexLock lock(&mu_);
  return Annotate(InsertEvent(job_id, attempt, event),
                  absl::StrCat("storing an event of job ", job_id));
}

bool IsRetriableStoreError(const absl::Status& status) {
  return absl::IsResourceExhausted(status) || absl::IsUnavailable(status);
}

std::vector<absl::Status> JobStore::WriteBatch(const std::vector<JobWrite>& writes) {
  ObserveWrite();
  absl::MutexLock lock(&mu_);
  std::vector<absl::Status> statuses(writes.size());
  absl::Status begun = Exec("BEGIN IMMEDIATE;");
  if (!begun.ok()) {
    for (absl::Status& s : statuses) s = Annotate(begun, "storing a batch of job writes");
    return statuses;
  }
  for (size_t i = 0; i < writes.size(); ++i) {
    const JobWrite& w = writes[i];
    absl::Status s = Exec("SAVEPOINT job_write;");
    if (s.ok() && w.job.has_value()) s = WriteJobRow(*w.job);
    if (s.ok() && w.event.has_value()) s = InsertEvent(w.job_id, w.attempt, *w.event);
    if (s.ok()) {
      s = Exec("RELEASE job_write;");
    } else {
      Exec("ROLLBACK TO job_write;").IgnoreError();
      Exec("RELEASE job_write;").IgnoreError();
    }
    if (IsRetriableStoreError(s)) {
      // The store cannot take writes now (a full disk): none of the batch is stored, so that
      // the writer, which tries them again, keeps their order.
      Exec("ROLLBACK;").IgnoreError();
      for (absl::Status& each : statuses) each = Annotate(s, "storing a batch of job writes");
      return statuses;
    }
    statuses[i] = Annotate(s, absl::StrCat("storing job ", w.job_id));
  }
  absl::Status committed = Exec("COMMIT;");
  if (!committed.ok()) {
    Exec("ROLLBACK;").IgnoreError();
    for (absl::Status& s : statuses) s = Annotate(committed, "storing a batch of job writes");
  }
  return statuses;
}

void JobStore::SetWriteObserver(std::function<void()> observer) {
  write_observer_ = std::move(observer);
}

void JobStore::ObserveWrite() {
  if (write_observer_) write_observer_();
}

absl::StatusOr<v1::Job> JobStore::GetJobLocked(const std::string& job_id) {
  ASSIGN_OR_RETURN(
      std::vector<v1::Job> jobs,
      QueryJobs(db_, "WHERE id = ?1", [&](Statement* st) { st->BindText(1, job_id); }));
  if (jobs.empty()) return SeqOfJobLocked(job_id).status();  // why not
  // The latest evaluation the job reported.
  Statement eval(db_,
                 "SELECT event FROM events WHERE job_id = ?1 AND eval_step IS NOT NULL "
                 "ORDER BY seq DESC LIMIT 1;");
  RETURN_IF_ERROR(eval.status());
  eval.BindText(1, job_id);
  if (eval.Step()) {
    v1::JobEvent event;
    if (!event.ParseFromString(eval.Bytes(0))) {
      return absl::DataLossError(absl::StrCat("job ", job_id, ": a stored event does not parse"));
    }
    *jobs[0].mutable_last_eval() = event.eval();
  }
  RETURN_IF_ERROR(eval.done_status());
  return std::move(jobs[0]);
}

absl::StatusOr<int64_t> JobStore::SeqOfJobLocked(const std::string& job_id, bool allow_deleted) {
  Statement find(db_, "SELECT seq FROM jobs WHERE id = ?1;");
  RETURN_IF_ERROR(find.status());
  find.BindText(1, job_id);
  if (find.Step()) return find.Int(0);
  RETURN_IF_ERROR(find.done_status());
  const std::optional<int64_t> seq = SeqOfJobId(job_id);
  ASSIGN_OR_RETURN(const int64_t last, LastSeqLocked());
  if (!seq.has_value() || *seq < 1 || *seq > last) {
    return absl::NotFoundError(absl::StrCat("no job ", job_id));
  }
  if (!allow_deleted) return absl::NotFoundError(absl::StrCat("job ", job_id, " was deleted"));
  return *seq;
}

absl::StatusOr<int64_t> JobStore::LastSeqLocked() {
  // Migrate fills the counter for a store made before it; CreateJob raises it.
  Statement st(db_, "SELECT value FROM counters WHERE name = 'jobs';");
  RETURN_IF_ERROR(st.status());
  if (!st.Step()) {
    RETURN_IF_ERROR(st.done_status());
    return absl::InternalError("SQLite: no row for the last job's seq");
  }
  return st.Int(0);
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
    // A page whose last job was deleted meanwhile still ends at its seq.
    ASSIGN_OR_RETURN(after_seq, SeqOfJobLocked(after_id, /*allow_deleted=*/true));
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

absl::StatusOr<std::map<v1::JobState, int64_t>> JobStore::CountJobsByState() {
  absl::MutexLock lock(&mu_);
  Statement st(db_, "SELECT state, COUNT(*) FROM jobs GROUP BY state;");
  RETURN_IF_ERROR(st.status());
  std::map<v1::JobState, int64_t> counts;
  while (st.Step()) counts[static_cast<v1::JobState>(st.Int(0))] = st.Int(1);
  RETURN_IF_ERROR(st.done_status());
  return counts;
}

absl::StatusOr<std::vector<v1::JobEvent>> JobStore::ListEvents(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  // The job may have been deleted since the caller read it: say so rather than list nothing.
  RETURN_IF_ERROR(SeqOfJobLocked(job_id).status());
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

absl::Status JobStore::AppendLogLines(const std::string& job_id, int attempt, int rank,
                                      const google::protobuf::RepeatedPtrField<v1::LogLine>& lines,
                                      int64_t max_lines) {
  ObserveWrite();
  if (max_lines <= 0) return absl::InvalidArgumentError("a bound of log lines must be positive");
  if (lines.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  absl::Status s = InTransaction([&]() -> absl::Status {
    // A worker still winding down a job's rank may log after the job was deleted.
    RETURN_IF_ERROR(SeqOfJobLocked(job_id).status());
    // The rank's last line (the primary key's last entry for it: no scan).
    Statement last(db_,
                   "SELECT COALESCE(MAX(seq), 0) FROM log_lines WHERE job_id = ?1 AND "
                   "attempt = ?2 AND rank = ?3;");
    RETURN_IF_ERROR(last.status());
    last.BindText(1, job_id);
    last.BindInt(2, attempt);
    last.BindInt(3, rank);
    if (!last.Step()) return last.done_status();
    int64_t seq = std::min(last.Int(0), max_lines);  // past the bound: the marker's
    Statement ins(db_,
                  "INSERT INTO log_lines (job_id, attempt, rank, seq, time_ms, level, text) "
                  "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7);");
    RETURN_IF_ERROR(ins.status());
    int kept = 0;
    for (const v1::LogLine& line : lines) {
      if (seq == max_lines) break;
      ins.Reset();
      ins.BindText(1, job_id);
      ins.BindInt(2, attempt);
      ins.BindInt(3, rank);
      ins.BindInt(4, ++seq);
      ins.BindInt(5, line.time_ms());
      // Workers cut theirs already; a stored line is bounded whatever sent it.
      ins.BindText(6, std::string(Utf8Prefix(line.level(), kLogLevelBytes)));
      ins.BindText(7, std::string(Utf8Prefix(line.text(), kLogLineBytes)));
      RETURN_IF_ERROR(ins.Run());
      ++kept;
    }
    const int64_t dropped = lines.size() - kept;
    if (dropped == 0) return absl::OkStatus();
    // One marker line counts every line dropped so far.
    Statement marker(db_,
                     "SELECT dropped FROM log_lines WHERE job_id = ?1 AND attempt = ?2 AND "
                     "rank = ?3 AND seq = ?4;");
    RETURN_IF_ERROR(marker.status());
    marker.BindText(1, job_id);
    marker.BindInt(2, attempt);
    marker.BindInt(3, rank);
    marker.BindInt(4, max_lines + 1);
    const int64_t before = marker.Step() ? marker.Int(0) : 0;
    RETURN_IF_ERROR(marker.done_status());
    Statement put(db_,
                  "INSERT OR REPLACE INTO log_lines (job_id, attempt, rank, seq, time_ms, level, "
                  "text, dropped) VALUES (?1, ?2, ?3, ?4, ?5, 'warning', ?6, ?7);");
    RETURN_IF_ERROR(put.status());
    put.BindText(1, job_id);
    put.BindInt(2, attempt);
    put.BindInt(3, rank);
    put.BindInt(4, max_lines + 1);
    put.BindInt(5, lines.rbegin()->time_ms());
    put.BindText(6, DroppedLinesText(before + dropped, max_lines));
    put.BindInt(7, before + dropped);
    return put.Run();
  });
  return Annotate(s, absl::StrCat("storing log lines of job ", job_id, " attempt ", attempt,
                                  " rank ", rank));
}

absl::StatusOr<LogLinesPage> JobStore::GetLogLines(const LogLineQuery& query) {
  if (query.limit <= 0) return absl::InvalidArgumentError("a page of log lines needs a limit");
  // One rank's lines are a range of log_lines_by_rank, where the rank is fixed and the order
  // is (attempt, time, seq); every rank's, of log_lines_by_time.
  std::string sql =
      "SELECT attempt, rank, seq, time_ms, level, text FROM log_lines WHERE job_id = ?1 AND "
      "time_ms >= ?2";
  if (query.rank.has_value()) absl::StrAppend(&sql, " AND rank = ?3");
  if (query.attempt.has_value()) absl::StrAppend(&sql, " AND attempt = ?4");
  if (query.after.has_value()) {
    absl::StrAppend(&sql, query.rank.has_value()
                              ? " AND (attempt, time_ms, seq) > (?5, ?6, ?8)"
                              : " AND (attempt, time_ms, rank, seq) > (?5, ?6, ?7, ?8)");
  }
  absl::StrAppend(&sql, " ORDER BY attempt, time_ms, rank, seq LIMIT ?9;");
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(SeqOfJobLocked(query.job_id).status());
  Statement st(db_, sql);
  RETURN_IF_ERROR(st.status());
  st.BindText(1, query.job_id);
  st.BindInt(2, query.since_ms);
  if (query.rank.has_value()) st.BindInt(3, *query.rank);
  if (query.attempt.has_value()) st.BindInt(4, *query.attempt);
  if (query.after.has_value()) {
    st.BindInt(5, query.after->attempt);
    st.BindInt(6, query.after->time_ms);
    st.BindInt(7, query.after->rank);
    st.BindInt(8, query.after->seq);
  }
  st.BindInt(9, int64_t{query.limit} + 1);  // one more says whether a next page exists
  LogLinesPage page;
  size_t bytes = 0;
  while (st.Step()) {
    if (static_cast<int>(page.lines.size()) == query.limit || bytes >= query.max_bytes) {
      page.more = true;
      break;
    }
    v1::JobLogLine& line = page.lines.emplace_back();
    line.set_attempt(static_cast<int32_t>(st.Int(0)));
    line.set_rank(static_cast<int32_t>(st.Int(1)));
    line.set_seq(st.Int(2));
    line.set_time_ms(st.Int(3));
    line.set_level(st.Bytes(4));
    line.set_text(st.Bytes(5));
    bytes += line.text().size();
  }
  RETURN_IF_ERROR(st.done_status());
  return page;
}

absl::StatusOr<v1::Job> JobStore::DeleteJob(const std::string& job_id) {
  ObserveWrite();
  absl::MutexLock lock(&mu_);
  v1::Job job;
  absl::Status s = InTransaction([&]() -> absl::Status {
    ASSIGN_OR_RETURN(job, GetJobLocked(job_id));
    if (!IsFinalState(job.state())) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job.state()),
                       ": only a job that ended is deleted"));
    }
    for (const char* sql : {"DELETE FROM log_lines WHERE job_id = ?1;",
                            "DELETE FROM events WHERE job_id = ?1;",
                            "DELETE FROM jobs WHERE id = ?1;"}) {
      Statement st(db_, sql);
      RETURN_IF_ERROR(st.status());
      st.BindText(1, job_id);
      RETURN_IF_ERROR(st.Run());
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return job;
}

absl::StatusOr<std::vector<std::string>> JobStore::ListExpiredJobs(int64_t ended_before_ms,
                                                                   int64_t keep_newest,
                                                                   int limit) {
  if (limit <= 0) return absl::InvalidArgumentError("a list of expired jobs needs a limit");
  absl::MutexLock lock(&mu_);
  // One walk of jobs_by_end, oldest ending first, under one LIMIT: a job past either rule counts
  // once.
  const std::string final_states =
      absl::StrCat("state IN (", v1::SUCCEEDED, ", ", v1::FAILED, ", ", v1::CANCELLED, ")");
  Statement st(db_, absl::StrCat(
                        "SELECT id FROM jobs WHERE end_time_ms > 0 AND ", final_states,
                        " AND (end_time_ms < ?1 OR (?2 > 0 AND seq IN (SELECT seq FROM jobs WHERE "
                        "end_time_ms > 0 AND ", final_states,
                        " ORDER BY end_time_ms DESC, seq DESC LIMIT -1 OFFSET ?2))) "
                        "ORDER BY end_time_ms, seq LIMIT ?3;"));
  RETURN_IF_ERROR(st.status());
  st.BindInt(1, ended_before_ms);
  st.BindInt(2, keep_newest);
  st.BindInt(3, limit);
  std::vector<std::string> ids;
  while (st.Step()) ids.push_back(st.Bytes(0));
  RETURN_IF_ERROR(st.done_status());
  return ids;
}

absl::StatusOr<std::vector<v1::Job>> JobStore::RestartInterruptedJobs(
    int64_t now_ms, const std::string& message) {
  ObserveWrite();
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
