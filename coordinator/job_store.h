// The coordinator's durable record of jobs: an embedded SQLite database (WAL mode) holding every
// job (its spec as a serialized proto, state, message, times, attempt, assigned workers, the rank
// errors of its latest failed attempt), every JobEvent it emitted and the lines its workers logged
// while they ran its ranks. Each state change is written, together with its event, in one
// transaction before the coordinator publishes it, so a coordinator restart loses no job record.
// A store made by an older coordinator opens as is: Open adds what it lacks (the log table, the
// rank_errors column). A job that ended can be deleted, with its events and lines (DeleteJob; the
// coordinator's retention finds them with ListExpiredJobs); job ids are never given twice.
//
// E.g.
//   ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store, JobStore::Open(data_dir + "/weft.db"));
//   ASSIGN_OR_RETURN(v1::Job job, store->CreateJob(spec, now_ms, "submitted"));
//   job.set_state(v1::RUNNING);
//   RETURN_IF_ERROR(store->UpdateJob(job, &running_event));
//   ASSIGN_OR_RETURN(JobStepsPage page, store->GetJobSteps(job.id(), 0, 1000));  // 1000 steps
//   ASSIGN_OR_RETURN(JobSummaryPage jobs, store->ListJobSummaries(v1::RUNNING, "", 100));
//   RETURN_IF_ERROR(store->AppendLogLines(job.id(), /*attempt=*/0, /*rank=*/1, batch.lines(),
//                                         /*max_lines=*/10000));
//   LogLineQuery query;
//   query.job_id = job.id();
//   query.rank = 1;
//   ASSIGN_OR_RETURN(LogLinesPage logs, store->GetLogLines(query));  // rank 1's first 1000
#ifndef WEFT_COORDINATOR_JOB_STORE_H_
#define WEFT_COORDINATOR_JOB_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/service.pb.h"

struct sqlite3;

namespace weft::coordinator {

// A summary cuts a job's name and message to these (names are bounded at submit, but a store
// may hold a job submitted before they were).
inline constexpr size_t kSummaryNameBytes = 256;
inline constexpr size_t kSummaryMessageBytes = 1024;

// One page of ListJobSummaries.
struct JobSummaryPage {
  std::vector<v1::JobSummary> jobs;  // in submit order
  bool more = false;                 // jobs match after the last of these
};

// One page of GetJobSteps: the job with some of its steps' metrics.
struct JobStepsPage {
  v1::Job job;
  // The step after which the next page starts (GetJobSteps' after_step); 0 when these steps are
  // the last stored.
  int64_t next_after_step = 0;
};

// Where a page of log lines starts: after this line, in GetLogLines' order.
struct LogLinePosition {
  int32_t attempt = 0;
  int64_t time_ms = 0;
  int32_t rank = 0;
  int64_t seq = 0;
};

// Which of a job's log lines GetLogLines returns.
struct LogLineQuery {
  std::string job_id;
  std::optional<int32_t> rank;     // absent: every rank
  std::optional<int32_t> attempt;  // absent: every attempt
  int64_t since_ms = 0;            // only lines logged at or after this time
  std::optional<LogLinePosition> after;  // absent: from the first line
  int limit = 1000;                // lines, > 0
  size_t max_bytes = 2 << 20;      // of text: the page ends after the line that passes it
};

// One page of GetLogLines.
struct LogLinesPage {
  std::vector<v1::JobLogLine> lines;
  bool more = false;  // lines follow the last of these
};

// A stored log line's text is cut to this many bytes, its level to kLogLevelBytes (workers cut
// theirs already).
inline constexpr size_t kLogLineBytes = 4096;
inline constexpr size_t kLogLevelBytes = 16;

// One write of JobStore::WriteBatch: the job's mutable fields (when `job` is set), then the event
// (when set) of the job's `attempt`.
struct JobWrite {
  std::string job_id;
  int attempt = 0;
  std::optional<v1::Job> job;
  std::optional<v1::JobEvent> event;
};

// Whether a store error means the store cannot take writes now but may later: RESOURCE_EXHAUSTED
// (its disk is full) or UNAVAILABLE (an I/O error, the file busy or read-only).
bool IsRetriableStoreError(const absl::Status& status);

class JobStore {
 public:
  // Opens (creating if needed) the database at `path`; its folder must exist.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Stores a new PENDING job with the next id ("job-000001", sortable) and its first event.
  absl::StatusOr<v1::Job> CreateJob(const v1::JobSpec& spec, int64_t now_ms,
                                    const std::string& message);

  // Writes job's mutable fields (state, message, times, attempt, workers, rank errors; not spec
  // or steps) and, when `event` is set, appends it: one transaction. NOT_FOUND for an unknown id.
  absl::Status UpdateJob(const v1::Job& job, const v1::JobEvent* event);

  // Appends one event (e.g. a step) of the job's given attempt.
  absl::Status AppendEvent(const std::string& job_id, int attempt, const v1::JobEvent& event);

  // The writes in order, in one transaction (one fsync for all of them: the coordinator's store
  // writer groups what queued while the last batch was written). Each write stands alone: one
  // that fails (a job deleted meanwhile: NOT_FOUND) is rolled back by itself, and its status is
  // the one at its index. When the store cannot take writes now (IsRetriableStoreError: SQLite's
  // disk full, I/O, busy or read-only errors), none of the batch is stored and every status says
  // so.
  std::vector<absl::Status> WriteBatch(const std::vector<JobWrite>& writes);

  // Called at the start of every write (tests: which thread writes, and under which lock).
  void SetWriteObserver(std::function<void()> observer);

  // The job without its step metrics. NOT_FOUND for an unknown id ("job-000007 was deleted" for
  // one the store gave and deleted).
  absl::StatusOr<v1::Job> GetJob(const std::string& job_id);
  // The job with at most `limit` (> 0) of its steps numbered above `after_step` (0: from the
  // first), in step order, each as its latest attempt ran it. NOT_FOUND for an unknown id.
  absl::StatusOr<JobStepsPage> GetJobSteps(const std::string& job_id, int64_t after_step,
                                           int limit);
  // At most `limit` (> 0) jobs as summaries, in submit order: those submitted after the job
  // `after_id` (empty: from the first) in `state` (JOB_STATE_UNSPECIFIED: any). Read a page at a
  // time on the submit-order key, never every job. NOT_FOUND when after_id names no job the
  // store ever held (a deleted job's id still says where its page ended).
  absl::StatusOr<JobSummaryPage> ListJobSummaries(v1::JobState state, const std::string& after_id,
                                                  int limit);
  // Jobs in `state`, in submit order, without step metrics.
  absl::StatusOr<std::vector<v1::Job>> ListJobsInState(v1::JobState state);
  // How many jobs are in each state (states with none are absent).
  absl::StatusOr<std::map<v1::JobState, int64_t>> CountJobsByState();
  // Every event of the job in the order it was stored. NOT_FOUND for an unknown (or deleted) job.
  absl::StatusOr<std::vector<v1::JobEvent>> ListEvents(const std::string& job_id);

  // Appends lines a worker logged as `rank` of the job's `attempt`, numbered on from that rank's
  // last (seq from 1), in one transaction. A rank's attempt keeps at most max_lines (> 0) lines;
  // the ones after are dropped and counted by one marker line (seq max_lines + 1, level
  // "warning", the time of the last dropped line) that says how many. NOT_FOUND when the job is
  // not stored (it was deleted).
  absl::Status AppendLogLines(const std::string& job_id, int attempt, int rank,
                              const google::protobuf::RepeatedPtrField<v1::LogLine>& lines,
                              int64_t max_lines);
  // At most query.limit of the job's lines that match the query, ordered by attempt, time, rank
  // and seq (each page a range of the (job, attempt, time, rank, seq) index, or its per-rank
  // twin, so a page costs its rows). NOT_FOUND for an unknown (or deleted) job.
  absl::StatusOr<LogLinesPage> GetLogLines(const LogLineQuery& query);

  // Deletes a job that ended (SUCCEEDED, FAILED or CANCELLED) with its events and log lines, in
  // one transaction, and returns it as it was (without steps). NOT_FOUND for an unknown id,
  // FAILED_PRECONDITION for a job that has not ended. Its id is not given to another job.
  absl::StatusOr<v1::Job> DeleteJob(const std::string& job_id);
  // At most `limit` (> 0) ended jobs, oldest ending first, that retention deletes: those that
  // ended before ended_before_ms (0: none by age) and those past the keep_newest that ended last
  // (0: none by count).
  absl::StatusOr<std::vector<std::string>> ListExpiredJobs(int64_t ended_before_ms,
                                                           int64_t keep_newest, int limit);

  // After a coordinator restart: every job that was PLANNING or RUNNING becomes RESTARTING as
  // its next attempt, with `message` and an event; one that was RESTARTING stays so. Returns
  // those jobs, in submit order.
  absl::StatusOr<std::vector<v1::Job>> RestartInterruptedJobs(int64_t now_ms,
                                                              const std::string& message);

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}

  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings a store made by an older coordinator up to this schema.
  absl::Status Migrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `column` (with its type) to `table` unless the table has it (SQLite has no ADD COLUMN
  // IF NOT EXISTS).
  absl::Status AddColumnIfMissing(const std::string& table, const std::string& column,
                                  const std::string& type) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // NOT_FOUND says "was deleted" for an id the store gave and no longer holds.
  absl::StatusOr<v1::Job> GetJobLocked(const std::string& job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's seq. NOT_FOUND "job-000007 was deleted" for an id the store gave and no longer
  // holds (allow_deleted: that id's seq all the same), "no job X" for any other.
  absl::StatusOr<int64_t> SeqOfJobLocked(const std::string& job_id, bool allow_deleted = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The seq of the last job ever created (0: none).
  absl::StatusOr<int64_t> LastSeqLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WriteJobRow(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InsertEvent(const std::string& job_id, int attempt, const v1::JobEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT, rolling back on error.
  template <typename Body>
  absl::Status InTransaction(Body body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  void ObserveWrite();
  std::function<void()> write_observer_;  // set before the store is shared
  absl::Mutex mu_;
  sqlite3* db_ ABSL_GUARDED_BY(mu_);  // owned
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_JOB_STORE_H_
