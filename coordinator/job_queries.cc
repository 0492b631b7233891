#include "coordinator/job_queries.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace weft::coordinator {
namespace {

// The size of a page a request asks for: `asked`, the default when 0, at most the bound (a
// larger request gets a page of the bound, as Google's API guide AIP-158 has it).
absl::StatusOr<int> PageSize(int asked, int default_size, int max_size, const char* field) {
  if (asked < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": ", asked, " is negative (0 asks for ", default_size, ", at most ", max_size,
        " are given)"));
  }
  return asked == 0 ? default_size : std::min(asked, max_size);
}

// GetJobLogs' page_token: the position of the page before's last line, "attempt:time:rank:seq".
std::string LogsPageToken(const v1::JobLogLine& last) {
  return absl::StrCat(last.attempt(), ":", last.time_ms(), ":", last.rank(), ":", last.seq());
}

absl::StatusOr<LogLinePosition> ParseLogsPageToken(const std::string& token) {
  std::vector<std::string> parts = absl::StrSplit(token, ':');
  LogLinePosition after;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &after.attempt) ||
      !absl::SimpleAtoi(parts[1], &after.time_ms) || !absl::SimpleAtoi(parts[2], &after.rank) ||
      !absl::SimpleAtoi(parts[3], &after.seq) || after.attempt < 0 || after.rank < 0 ||
      after.seq <= 0) {
    return absl::InvalidArgumentError(
        "page_token: not a next_page_token of GetJobLogs (leave it empty for the first page)");
  }
  return after;
}

}  // namespace

absl::StatusOr<v1::Job> JobQueries::GetJob(const v1::GetJobRequest& request) const {
  ASSIGN_OR_RETURN(const int page_size,
                   PageSize(request.steps_page_size(), limits_.steps_default, limits_.steps_max,
                            "steps_page_size"));
  // The token is the last step of the page before, in decimal.
  int64_t after_step = 0;
  if (!request.steps_page_token().empty() &&
      (!absl::SimpleAtoi(request.steps_page_token(), &after_step) || after_step <= 0)) {
    return absl::InvalidArgumentError(
        "steps_page_token: not a next_steps_page_token of GetJob (leave it empty for the first "
        "page)");
  }
  ASSIGN_OR_RETURN(JobStepsPage page,
                   store_->GetJobSteps(request.job_id(), after_step, page_size));
  if (page.next_after_step > 0) {
    page.job.set_next_steps_page_token(absl::StrCat(page.next_after_step));
  }
  return std::move(page.job);
}

absl::StatusOr<v1::ListJobsResponse> JobQueries::ListJobs(
    const v1::ListJobsRequest& request) const {
  ASSIGN_OR_RETURN(const int page_size, PageSize(request.page_size(), limits_.jobs_default,
                                                 limits_.jobs_max, "page_size"));
  if (!v1::JobState_IsValid(request.state())) {
    return absl::InvalidArgumentError(
        absl::StrCat("state: ", static_cast<int>(request.state()), " is not a JobState"));
  }
  // The token is the last job id of the page before: the next page starts after it, whatever
  // became of that job since.
  absl::StatusOr<JobSummaryPage> page =
      store_->ListJobSummaries(request.state(), request.page_token(), page_size);
  if (absl::IsNotFound(page.status())) {
    return absl::InvalidArgumentError(
        "page_token: not a next_page_token of ListJobs (it names no job; leave it empty for the "
        "first page)");
  }
  if (!page.ok()) return page.status();
  v1::ListJobsResponse response;
  for (v1::JobSummary& job : page->jobs) *response.add_jobs() = std::move(job);
  if (page->more) response.set_next_page_token(response.jobs().rbegin()->id());
  return response;
}

absl::StatusOr<v1::GetJobLogsResponse> JobQueries::GetJobLogs(
    const v1::GetJobLogsRequest& request) const {
  ASSIGN_OR_RETURN(const int page_size, PageSize(request.page_size(), limits_.logs_default,
                                                 limits_.logs_max, "page_size"));
  ASSIGN_OR_RETURN(const v1::Job job, store_->GetJob(request.job_id()));
  LogLineQuery query;
  query.job_id = job.id();
  query.limit = page_size;
  query.max_bytes = limits_.logs_max_bytes;
  if (request.has_rank()) {
    const int64_t world = world_size_(job.spec());
    if (request.rank() < 0 || request.rank() >= world) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank: ", request.rank(), " is not a rank of job ", job.id(), " (ranks 0..",
                       world - 1, "; leave it unset for every rank)"));
    }
    query.rank = request.rank();
  }
  if (request.has_attempt()) {
    if (request.attempt() < 0 || request.attempt() > job.attempt()) {
      return absl::InvalidArgumentError(
          absl::StrCat("attempt: ", request.attempt(), " is not an attempt of job ", job.id(),
                       " (attempts 0..", job.attempt(), "; leave it unset for every attempt)"));
    }
    query.attempt = request.attempt();
  }
  if (request.since_ms() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("since_ms: ", request.since_ms(), " is negative (0: every line)"));
  }
  query.since_ms = request.since_ms();
  if (!request.page_token().empty()) {
    ASSIGN_OR_RETURN(query.after, ParseLogsPageToken(request.page_token()));
  }
  ASSIGN_OR_RETURN(LogLinesPage page, store_->GetLogLines(query));
  v1::GetJobLogsResponse response;
  for (v1::JobLogLine& line : page.lines) *response.add_lines() = std::move(line);
  if (page.more) response.set_next_page_token(LogsPageToken(*response.lines().rbegin()));
  return response;
}

}  // namespace weft::coordinator
