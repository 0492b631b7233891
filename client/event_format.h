// How weftctl prints jobs, workers and job events: JSON lines for programs (--json) and
// readable lines and tables for people. Pure functions of the protos (and "now" for ages), so
// the formats are unit-tested without a coordinator.
//
// E.g.
//   FormatEventJson(event)
//     -> {"type":"step","step":3,"loss":0.12345678901234566,"step_seconds":0.014,...}
//   FormatEventText(event, /*total_steps=*/10)
//     -> step 3/10  loss 0.123457  2,345 samples/s  33.6 MB/step  12.6 MB peak  (0.014 s)
#ifndef WEFT_CLIENT_EVENT_FORMAT_H_
#define WEFT_CLIENT_EVENT_FORMAT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/profile.pb.h"
#include "weft/v1/service.pb.h"

namespace weft::client {

// "SUCCEEDED", "RUNNING", ...
std::string StateName(v1::JobState state);

// A JSON number that parses back to exactly `value` (%.17g); null when not finite, since JSON
// has no NaN or infinity.
std::string JsonNumber(double value);
std::string JsonString(const std::string& value);

// {"type":"step","step":S,"loss":L,"lr":R,"grad_norm":G,"step_seconds":T,
//  "samples_per_second":X,"bytes_sent":N,"peak_bytes":P} where R is the learning rate the step's
// update applied, G the global gradient norm before clipping, N the payload bytes all ranks'
// communicators sent during the step and P the most bytes any one rank's kernels held at once
// during it (integers).
std::string FormatStepJson(const v1::StepMetrics& step);
// {"type":"eval","step":S,"loss":L}: the held-out loss after step S's update.
std::string FormatEvalJson(const v1::EvalMetrics& eval);
// "eval after step 4/10  loss 2.34567" (total_steps 0: "eval after step 4").
std::string FormatEvalText(const v1::EvalMetrics& eval, int64_t total_steps);
// {"type":"state","state":"FAILED","message":"..."}; the message is always present for FAILED
// and CANCELLED, and for other states when non-empty.
std::string FormatStateJson(v1::JobState state, const std::string& message);
// {"type":"checkpoint","step":S,"bytes":N,"seconds":T,"path":"<dir>/step-<S>"}
std::string FormatSavedJson(const v1::CheckpointSaved& saved);
// One of the above (or a restart's); empty for an event of none of those kinds.
std::string FormatEventJson(const v1::JobEvent& event);

// "step 3/10  loss 0.123457  lr 0.0006  grad norm 1.234  2,345 samples/s  33.6 MB/step
// 12.6 MB peak  (0.014 s)" (total_steps 0: "step 3"; MB = 10^6 bytes: sent by all ranks, and the
// largest rank's memory peak; each left out when 0, lr and grad norm when both are)
// With tokens_per_sample (a job on token data: its seq_len), tokens per second after samples.
std::string FormatStepText(const v1::StepMetrics& step, int64_t total_steps,
                           int64_t tokens_per_sample = 0);

// The progress lines of a watched job: FormatStepText, then tokens per second for a job on
// token data (samples/s x seq_len) and the time left, "ETA 1m 05s": the steps left times an
// exponential moving average of the step time (weight 0.2 on the newest, so one slow step, a
// checkpoint's, moves it little). No ETA on the last step, or without a step time.
//
// E.g.
//   StepProgress progress(job.spec());
//   PrintLine(progress.Line(event.step()));  // "step 3/10  loss 0.5 ... ETA 2.1s"
class StepProgress {
 public:
  explicit StepProgress(const v1::JobSpec& spec);
  std::string Line(const v1::StepMetrics& step);

 private:
  const int64_t total_steps_;
  const int64_t tokens_per_sample_;  // 0: not a token job
  double average_seconds_ = 0;       // 0: no step seen yet
};
// "state RUNNING" or "state FAILED: <message>"
std::string FormatStateText(v1::JobState state, const std::string& message);
// "checkpoint step 100  12.3 MB  (0.045 s)  /data/ckpt/step-100"
std::string FormatSavedText(const v1::CheckpointSaved& saved);
// A restart event: {"type":"restart","attempt","restarts_left","rank","worker","host","cause"};
// as text "restart: attempt 1 failed rank 1 on worker-2 (127.0.0.1): <cause>; 1 restart left"
// (attempts counted from 1 in text, from 0 in JSON as in Job.attempt).
std::string FormatRestartJson(const v1::Restart& restart);
std::string FormatRestartText(const v1::Restart& restart);
// A Resize event (train.elastic): {"type":"resize","dim":"dp","from":4,"to":2,...}, or
// "resize: shrink dp 4 -> 2 (2 ranks, 2 micro-batches) from the newest checkpoint".
std::string FormatResizeJson(const v1::Resize& resize);
std::string FormatResizeText(const v1::Resize& resize);
std::string FormatEventText(const v1::JobEvent& event, int64_t total_steps);

// 2345.6 -> "2,346"
std::string FormatThousands(double value);
// Milliseconds -> "45s", "12m", "3h", "2d"; "-" for a time not set or in the future.
std::string FormatAge(int64_t then_ms, int64_t now_ms);

// Left-aligned columns separated by two spaces, the first row being the header.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// Columns: ID NAME STATE STEPS LOSS AGE.
std::string FormatJobsTable(const std::vector<v1::JobSummary>& jobs, int64_t now_ms);
// Columns: ID HOST DEVICE STATE JOB/RANK HEARTBEAT.
// A worker's device in one cell: "cpu (8 cores, 31.3 GiB)", or
// "cuda NVIDIA H100 80GB HBM3 (79.2 GiB, cc 9.0, 132 SMs)".
std::string FormatDevice(const v1::DeviceInfo& device);

std::string FormatWorkersTable(const std::vector<v1::WorkerInfo>& workers, int64_t now_ms);

// `weftctl workers`' cost profile lines, one per profile: kind and host, when and on what it was
// measured, and its headline figures (f32 matmul GFLOP/s, memory GB/s, each measured all-reduce
// and send: fixed cost and GB/s, by group size and scope); then, for each worker kind without
// one, that `mesh: {auto: true}` jobs of that kind cannot be searched.
std::string FormatCostProfiles(const std::vector<v1::CostProfile>& profiles,
                               const std::vector<v1::WorkerInfo>& workers);
// A few "key: value" lines about one job; then its rank errors, one line each, earliest first:
//   errors:   2 ranks failed in attempt 0, earliest first
//     rank 1 (worker worker-3 on host 10.0.0.5, attempt 0, +0 ms): step 1: loading ...
//     rank 0 (worker worker-2 on host 10.0.0.4, attempt 0, +4 ms): step 1: all_reduce ...
// Times (created, started, ended) in `tz`; the duration from start to end, or to now while it
// runs; the ranks' workers (kept after the job ended: its last attempt's), each with its host
// where `hosts` (worker id -> host, from ListWorkers) knows it: which ranks share a host.
std::string FormatJobDetails(const v1::Job& job, int64_t now_ms,
                             absl::TimeZone tz = absl::LocalTimeZone(),
                             const std::map<std::string, std::string>& hosts = {});
// A message as `--json` prints it: proto3's JSON mapping with the .proto's field names (as the
// event lines use), except that 64-bit integers are JSON numbers rather than strings.
std::string ProtoToJson(const google::protobuf::Message& message);
// "1h 02m 03s", "2m 05s", "4.2s".
std::string FormatDuration(int64_t ms);
// "rank 1 (worker worker-3 on host 10.0.0.5, attempt 0, +4 ms): <message>", the time after
// `first_ms` (the earliest error's).
std::string FormatRankError(const v1::RankError& error, int64_t first_ms);

// A line of `weftctl logs`: "attempt 0 rank 1  14:03:07.215 error    <text>", the time of day
// in `tz` (weftctl: the local zone) with milliseconds, the level padded to 7 ("warning").
std::string FormatLogLineText(const v1::JobLogLine& line, absl::TimeZone tz);
// {"type":"log","attempt":0,"rank":1,"seq":12,"time_ms":1700000000123,"level":"error",
//  "text":"..."}
std::string FormatLogLineJson(const v1::JobLogLine& line);

}  // namespace weft::client

#endif  // WEFT_CLIENT_EVENT_FORMAT_H_
