#include "client/event_format.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace weft::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::JobEvent StepEvent(int64_t step, double loss, double seconds, double sps) {
  v1::JobEvent e;
  e.set_job_id("job-1");
  e.mutable_step()->set_step(step);
  e.mutable_step()->set_loss(loss);
  e.mutable_step()->set_step_seconds(seconds);
  e.mutable_step()->set_samples_per_second(sps);
  return e;
}

v1::JobEvent StateEvent(v1::JobState state, const std::string& message) {
  v1::JobEvent e;
  e.set_job_id("job-1");
  e.set_state(state);
  e.set_message(message);
  return e;
}

// A step's learning rate and gradient norm in both forms, and the evaluation's event.
TEST(EventFormatTest, LearningRateNormAndEval) {
  v1::JobEvent step = StepEvent(4, 2.5, 0.5, 16);
  step.mutable_step()->set_lr(6e-4);
  step.mutable_step()->set_grad_norm(1.25);
  const nlohmann::json j = nlohmann::json::parse(FormatEventJson(step));
  EXPECT_EQ(j["lr"].get<double>(), 6e-4);
  EXPECT_EQ(j["grad_norm"].get<double>(), 1.25);
  EXPECT_EQ(FormatEventText(step, 10),
            "step 4/10  loss 2.5  lr 0.0006  grad norm 1.25  16 samples/s  (0.500 s)");
  v1::JobEvent eval;
  eval.set_job_id("job-1");
  eval.mutable_eval()->set_step(4);
  eval.mutable_eval()->set_loss(0.1 + 0.2);
  EXPECT_EQ(FormatEventJson(eval), "{\"type\":\"eval\",\"step\":4,\"loss\":0.30000000000000004}");
  EXPECT_EQ(FormatEventText(eval, 10), "eval after step 4/10  loss 0.3");
  EXPECT_EQ(FormatEventText(eval, 0), "eval after step 4  loss 0.3");
}

TEST(EventFormatTest, StepJsonLineRoundTripsTheLoss) {
  const double loss = 0.1 + 0.2;  // 0.30000000000000004: needs 17 digits
  const std::string line = FormatEventJson(StepEvent(3, loss, 0.014, 2345.5));
  EXPECT_EQ(line,
            "{\"type\":\"step\",\"step\":3,\"loss\":0.30000000000000004,\"lr\":0,"
            "\"grad_norm\":0,\"step_seconds\":0.014,\"samples_per_second\":2345.5,"
            "\"bytes_sent\":0,\"peak_bytes\":0}");
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["type"], "step");
  EXPECT_EQ(j["step"], 3);
  EXPECT_EQ(j["loss"].get<double>(), loss);
  EXPECT_EQ(std::strtod(JsonNumber(loss).c_str(), nullptr), loss);

  for (double v : {1.0 / 3.0, 1e-300, 123456789.123456789, 5e-324, 1.7976931348623157e308}) {
    EXPECT_EQ(std::strtod(JsonNumber(v).c_str(), nullptr), v) << JsonNumber(v);
  }
}

// bytes_sent is an exact integer: a 2-rank DP step of the seed MLP sends 33,554,432 bytes.
TEST(EventFormatTest, StepBytesSent) {
  v1::JobEvent event = StepEvent(4, 0.5, 0.2, 2560);
  event.mutable_step()->set_bytes_sent(33554432);
  const std::string line = FormatEventJson(event);
  EXPECT_THAT(line, HasSubstr(",\"bytes_sent\":33554432,"));
  EXPECT_EQ(nlohmann::json::parse(line)["bytes_sent"].get<int64_t>(), 33554432);
  EXPECT_EQ(FormatEventText(event, 10),
            "step 4/10  loss 0.5  2,560 samples/s  33.6 MB/step  (0.200 s)");
  event.mutable_step()->set_bytes_sent(int64_t{1} << 50);
  EXPECT_EQ(nlohmann::json::parse(FormatEventJson(event))["bytes_sent"].get<int64_t>(),
            int64_t{1} << 50);
}

// peak_bytes is the largest rank's memory peak, an exact integer; the text line shows it in MB.
TEST(EventFormatTest, StepPeakBytes) {
  v1::JobEvent event = StepEvent(4, 0.5, 0.2, 2560);
  event.mutable_step()->set_bytes_sent(33554432);
  event.mutable_step()->set_peak_bytes(12582912);
  const std::string line = FormatEventJson(event);
  EXPECT_THAT(line, HasSubstr(",\"bytes_sent\":33554432,\"peak_bytes\":12582912}"));
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["peak_bytes"].get<int64_t>(), 12582912);
  EXPECT_EQ(FormatEventText(event, 10),
            "step 4/10  loss 0.5  2,560 samples/s  33.6 MB/step  12.6 MB peak  (0.200 s)");
  event.mutable_step()->set_peak_bytes(int64_t{1} << 40);
  EXPECT_EQ(nlohmann::json::parse(FormatEventJson(event))["peak_bytes"].get<int64_t>(),
            int64_t{1} << 40);
  // A step without a peak (older workers) prints 0 in JSON and nothing in text.
  event.mutable_step()->set_peak_bytes(0);
  EXPECT_THAT(FormatEventJson(event), HasSubstr(",\"peak_bytes\":0}"));
  EXPECT_EQ(FormatEventText(event, 10),
            "step 4/10  loss 0.5  2,560 samples/s  33.6 MB/step  (0.200 s)");
}

TEST(EventFormatTest, NonFiniteNumbersAreNull) {
  const std::string line =
      FormatEventJson(StepEvent(1, std::numeric_limits<double>::quiet_NaN(), 0.5, 1));
  EXPECT_THAT(line, HasSubstr("\"loss\":null"));
  EXPECT_NO_THROW(nlohmann::json::parse(line));
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
}

TEST(EventFormatTest, StateJsonLines) {
  EXPECT_EQ(FormatEventJson(StateEvent(v1::SUCCEEDED, "")),
            "{\"type\":\"state\",\"state\":\"SUCCEEDED\"}");
  EXPECT_EQ(FormatEventJson(StateEvent(v1::RUNNING, "on 4 workers")),
            "{\"type\":\"state\",\"state\":\"RUNNING\",\"message\":\"on 4 workers\"}");
  // A final failure always carries a message, even an empty one.
  EXPECT_EQ(FormatEventJson(StateEvent(v1::CANCELLED, "")),
            "{\"type\":\"state\",\"state\":\"CANCELLED\",\"message\":\"\"}");
  const std::string failed =
      FormatEventJson(StateEvent(v1::FAILED, "rank 2: \"fc0.weight\"\nbad\tshape \x01"));
  EXPECT_EQ(failed.find('\n'), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(failed);
  EXPECT_EQ(j["state"], "FAILED");
  EXPECT_EQ(j["message"], "rank 2: \"fc0.weight\"\nbad\tshape \x01");
  // Invalid UTF-8 must not throw.
  EXPECT_NO_THROW(FormatStateJson(v1::FAILED, std::string("\xff\xfe", 2)));
  v1::JobEvent empty;
  EXPECT_EQ(FormatEventJson(empty), "");
}

TEST(EventFormatTest, ReadableLines) {
  EXPECT_EQ(FormatEventText(StepEvent(3, 0.123456, 0.014, 2345.4), 10),
            "step 3/10  loss 0.123456  2,345 samples/s  (0.014 s)");
  EXPECT_EQ(FormatEventText(StepEvent(3, 0.5, 0, 0), 0), "step 3  loss 0.5");
  EXPECT_EQ(FormatEventText(StateEvent(v1::RUNNING, ""), 10), "state RUNNING");
  EXPECT_EQ(FormatEventText(StateEvent(v1::FAILED, "worker lost"), 10),
            "state FAILED: worker lost");
}

TEST(EventFormatTest, Helpers) {
  EXPECT_EQ(FormatThousands(0), "0");
  EXPECT_EQ(FormatThousands(999), "999");
  EXPECT_EQ(FormatThousands(1000), "1,000");
  EXPECT_EQ(FormatThousands(1234567.4), "1,234,567");
  EXPECT_EQ(FormatThousands(-1234), "-1,234");
  EXPECT_EQ(FormatAge(0, 5000), "-");
  EXPECT_EQ(FormatAge(1000, 46000), "45s");
  EXPECT_EQ(FormatAge(1, 1 + 12 * 60 * 1000), "12m");
  EXPECT_EQ(FormatAge(1, 1 + 3 * 3600 * 1000), "3h");
  EXPECT_EQ(FormatAge(1, 1 + int64_t{3} * 86400 * 1000), "3d");
  EXPECT_EQ(FormatAge(5000, 1000), "-");
  EXPECT_EQ(StateName(v1::PLANNING), "PLANNING");
}

TEST(EventFormatTest, Tables) {
  EXPECT_EQ(FormatTable({{"A", "BB"}, {"ccc", "d"}}), "A    BB\nccc  d\n");

  v1::Job job;
  job.set_id("job-1");
  job.mutable_spec()->set_name("quickstart");
  job.mutable_spec()->mutable_train()->set_steps(10);
  job.set_state(v1::RUNNING);
  job.set_create_time_ms(1000);
  v1::StepMetrics* m = job.add_steps();
  m->set_step(4);
  m->set_loss(0.25);
  v1::JobSummary summary;
  summary.set_id("job-1");
  summary.set_name("quickstart");
  summary.set_total_steps(10);
  summary.set_state(v1::RUNNING);
  summary.set_create_time_ms(1000);
  *summary.mutable_last_step() = *m;
  v1::JobSummary waiting;
  waiting.set_id("job-2");
  waiting.set_name("later");
  waiting.set_state(v1::PENDING);
  const std::string jobs = FormatJobsTable({summary, waiting}, 31000);
  EXPECT_THAT(jobs, HasSubstr("ID     NAME        STATE    STEPS  LOSS  AGE\n"));
  EXPECT_THAT(jobs, HasSubstr("job-1  quickstart  RUNNING  4/10   0.25  30s\n"));
  EXPECT_THAT(jobs, HasSubstr("job-2  later       PENDING  0      -     -\n"));

  v1::WorkerInfo w;
  w.set_worker_id("w-1");
  w.set_host("127.0.0.1");
  w.mutable_device()->set_kind("cpu");
  w.mutable_device()->set_cores(8);
  w.set_state("busy");
  w.set_job_id("job-1");
  w.set_rank(2);
  w.set_last_heartbeat_ms(1000);
  v1::WorkerInfo gpu = w;
  gpu.set_worker_id("w-2");
  gpu.mutable_device()->set_kind("cuda");
  gpu.mutable_device()->set_name("NVIDIA H100 80GB HBM3");
  gpu.mutable_device()->set_memory_bytes(int64_t{85} * 1000 * 1000 * 1000);
  gpu.mutable_device()->set_cores(132);
  gpu.mutable_device()->set_compute_capability("9.0");
  const std::string workers = FormatWorkersTable({w, gpu}, 3000);
  EXPECT_THAT(workers, HasSubstr("ID   HOST       DEVICE  "));
  EXPECT_THAT(workers, HasSubstr("w-1  127.0.0.1  cpu (8 cores)  "));
  EXPECT_THAT(workers, HasSubstr(
      "w-2  127.0.0.1  cuda NVIDIA H100 80GB HBM3 (79.2 GiB, cc 9.0, 132 SMs)  busy   job-1/2"));

  const std::string details = FormatJobDetails(job, 31000);
  EXPECT_THAT(details, HasSubstr("state:    RUNNING"));
  EXPECT_THAT(details, HasSubstr("steps:    4/10"));
  EXPECT_THAT(details, Not(HasSubstr("errors:")));
  EXPECT_THAT(details, Not(HasSubstr("eval:")));
  // The job's latest evaluation, when it has one.
  job.mutable_last_eval()->set_step(4);
  job.mutable_last_eval()->set_loss(2.25);
  EXPECT_THAT(FormatJobDetails(job, 31000), HasSubstr("\neval:     eval after step 4/10  loss 2.25\n"));
}

// Every rank's error, one line each, in the order the job holds them (earliest first), with the
// delay after the first; the ones not kept are counted.
// Times in the given zone, the duration from start to end (or to now while it runs), the runs so
// far, and which worker ran each rank.
TEST(EventFormatTest, JobDetailsShowTimesDurationAndWorkers) {
  v1::Job job;
  job.set_id("job-7");
  job.set_state(v1::SUCCEEDED);
  job.mutable_spec()->mutable_train()->set_max_restarts(2);
  job.set_attempt(1);
  const int64_t t0 = int64_t{1700000000} * 1000;  // 2023-11-14 22:13:20 UTC
  job.set_create_time_ms(t0);
  job.set_start_time_ms(t0 + 1500);
  job.set_end_time_ms(t0 + 1500 + 3723400);  // 1 h 2 min 3.4 s later
  job.add_workers("worker-2");
  job.add_workers("worker-5");
  const std::string details = FormatJobDetails(job, t0 + 7200 * 1000, absl::UTCTimeZone());
  EXPECT_THAT(details, HasSubstr("attempt:  1 (2 runs, train.max_restarts 2)\n"));
  EXPECT_THAT(details, HasSubstr("created:  2023-11-14 22:13:20.000 UTC (2h ago)\n"));
  EXPECT_THAT(details, HasSubstr("started:  2023-11-14 22:13:21.500 UTC\n"));
  EXPECT_THAT(details, HasSubstr("ended:    2023-11-14 23:15:24.900 UTC\n"));
  EXPECT_THAT(details, HasSubstr("duration: 1h 02m 03s\n"));
  EXPECT_THAT(details, HasSubstr("workers:  0: worker-2, 1: worker-5 (rank: worker)\n"));
  // With the workers' hosts (weftctl get asks ListWorkers): which ranks share a host.
  EXPECT_THAT(FormatJobDetails(job, t0 + 7200 * 1000, absl::UTCTimeZone(),
                               {{"worker-2", "10.0.0.4"}, {"worker-5", "10.0.0.5"}}),
              HasSubstr("workers:  0: worker-2 on 10.0.0.4, 1: worker-5 on 10.0.0.5 (rank: "
                        "worker on host)\n"));

  job.set_end_time_ms(0);
  job.set_state(v1::RUNNING);
  EXPECT_THAT(FormatJobDetails(job, t0 + 1500 + 4200, absl::UTCTimeZone()),
              HasSubstr("duration: 4.2s so far\n"));
  EXPECT_EQ(FormatDuration(125000), "2m 05s");
  EXPECT_EQ(FormatDuration(-5), "0.0s");
  job.set_start_time_ms(0);
  EXPECT_THAT(FormatJobDetails(job, t0, absl::UTCTimeZone()), Not(HasSubstr("duration:")));
}

// Text from a job record (a name stored before names were checked, a message quoting a worker's
// error) is printed with its control characters escaped: nothing a terminal acts on.
TEST(EventFormatTest, ControlCharactersArePrintedEscaped) {
  v1::JobSummary summary;
  summary.set_id("job-1");
  summary.set_name("evil\x1b[2J");
  EXPECT_THAT(FormatJobsTable({summary}, 0), HasSubstr("evil\\x1b[2J"));
  EXPECT_THAT(FormatJobsTable({summary}, 0), Not(HasSubstr("\x1b")));
  v1::Job job;
  job.mutable_spec()->set_name("a\rb");
  job.set_message("line\nforged");
  *job.add_rank_errors() = v1::RankError();
  job.mutable_rank_errors(0)->set_message("bell\a");
  const std::string details = FormatJobDetails(job, 0, absl::UTCTimeZone());
  EXPECT_THAT(details, HasSubstr("name:     a\\x0db\n"));
  EXPECT_THAT(details, HasSubstr("message:  line\\x0aforged\n"));
  EXPECT_THAT(details, HasSubstr("bell\\x07"));
  EXPECT_EQ(FormatStateText(v1::FAILED, "x\x1by"), "state FAILED: x\\x1by");
}

TEST(EventFormatTest, ElasticJobsShowTheirSizeAndEveryResize) {
  v1::Job job;
  job.set_id("job-8");
  job.set_state(v1::RUNNING);
  v1::JobSpec* spec = job.mutable_spec();
  spec->mutable_mesh()->add_shape(4);
  spec->mutable_mesh()->add_dim_names("dp");
  spec->mutable_train()->set_max_restarts(3);
  spec->mutable_train()->mutable_elastic()->set_dim("dp");
  spec->mutable_train()->mutable_elastic()->set_min(1);
  spec->mutable_train()->mutable_elastic()->set_wait_s(30);
  const int64_t t0 = int64_t{1700000000} * 1000;  // 2023-11-14 22:13:20 UTC
  job.set_create_time_ms(t0);
  EXPECT_THAT(FormatJobDetails(job, t0, absl::UTCTimeZone()),
              HasSubstr("elastic:  dp 4 of 4 (min 1, wait 30 s); 0 resizes\n"));

  v1::JobEvent shrink;
  v1::Resize* r = shrink.mutable_resize();
  r->set_dim("dp");
  r->set_from_size(4);
  r->set_to_size(2);
  r->set_micro_batches(2);
  r->set_world_size(2);
  r->set_time_ms(t0 + 1000);
  v1::Resize grow = *r;
  grow.set_from_size(2);
  grow.set_to_size(4);
  grow.set_micro_batches(1);
  grow.set_world_size(4);
  grow.set_step(40);
  grow.set_time_ms(t0 + 2500);
  EXPECT_EQ(FormatEventText(shrink, 100),
            "resize: shrink dp 4 -> 2 (2 ranks, 2 micro-batches) from the newest checkpoint");
  EXPECT_EQ(FormatEventJson(shrink),
            "{\"type\":\"resize\",\"dim\":\"dp\",\"from\":4,\"to\":2,\"micro_batches\":2,"
            "\"world_size\":2,\"step\":0}");
  EXPECT_EQ(FormatResizeText(grow),
            "resize: grow dp 2 -> 4 (4 ranks, 1 micro-batch) from the checkpoint of step 40");

  *job.add_resizes() = *r;
  *job.add_resizes() = grow;
  job.set_elastic_size(4);
  job.set_attempt(2);
  job.set_grows(1);
  const std::string details = FormatJobDetails(job, t0 + 3000, absl::UTCTimeZone());
  EXPECT_THAT(details, HasSubstr("attempt:  2 (3 runs, 1 begun by a grow, train.max_restarts 3)"));
  EXPECT_THAT(details,
              HasSubstr("elastic:  dp 4 of 4 (min 1, wait 30 s); 2 resizes\n"
                        "  22:13:21.000  resize: shrink dp 4 -> 2 (2 ranks, 2 micro-batches) from "
                        "the newest checkpoint\n"
                        "  22:13:22.500  resize: grow dp 2 -> 4 (4 ranks, 1 micro-batch) from the "
                        "checkpoint of step 40\n"));
}

// --json: 64-bit integers are numbers (proto3's mapping makes them strings), nested and
// repeated ones too; field names are the .proto's, as in the event lines.
TEST(EventFormatTest, ProtoJsonHas64BitIntegersAsNumbers) {
  v1::Job job;
  job.set_id("job-1");
  job.set_create_time_ms(int64_t{1700000000123});
  job.set_attempt(2);
  v1::StepMetrics* step = job.add_steps();
  step->set_step(3);
  step->set_bytes_sent(int64_t{9007199254740993});  // 2^53 + 1: exact, not a double
  step->set_loss(0.5);
  job.add_workers("worker-1");
  EXPECT_EQ(ProtoToJson(job),
            "{\"attempt\":2,\"create_time_ms\":1700000000123,\"id\":\"job-1\",\"steps\":[{"
            "\"bytes_sent\":9007199254740993,\"loss\":0.5,\"step\":3}],\"workers\":[\"worker-1\"]}");
  v1::ListWorkersResponse workers;
  v1::WorkerInfo* w = workers.add_workers();
  w->mutable_device()->set_memory_bytes(int64_t{25325268992});
  w->set_last_heartbeat_ms(5);
  EXPECT_EQ(ProtoToJson(workers),
            "{\"workers\":[{\"device\":{\"memory_bytes\":25325268992},\"last_heartbeat_ms\":5}]}");
}

// Watch lines: tokens/s for a job on token data, and the time left from a moving average of the
// step time (one slow step moves it by a fifth of the difference).
TEST(EventFormatTest, ProgressLinesHaveTokensPerSecondAndAnEta) {
  v1::JobSpec spec;
  spec.mutable_train()->set_steps(100);
  spec.mutable_data()->set_source("tokens");
  spec.mutable_data()->set_seq_len(64);
  StepProgress progress(spec);
  v1::StepMetrics step;
  step.set_step(1);
  step.set_loss(2.5);
  step.set_step_seconds(0.5);
  step.set_samples_per_second(16);
  EXPECT_THAT(progress.Line(step), HasSubstr("16 samples/s  1,024 tokens/s"));
  EXPECT_THAT(progress.Line(step), HasSubstr("ETA 49.5s"));  // 99 steps x 0.5 s
  step.set_step(2);
  step.set_step_seconds(3.0);  // 0.2 x 3 + 0.8 x 0.5 = 1.0 s a step, 98 left
  EXPECT_THAT(progress.Line(step), HasSubstr("ETA 1m 38s"));
  step.set_step(100);
  EXPECT_THAT(progress.Line(step), Not(HasSubstr("ETA")));

  v1::JobSpec synthetic;
  synthetic.mutable_train()->set_steps(10);
  StepProgress plain(synthetic);
  step.set_step(1);
  EXPECT_THAT(plain.Line(step), Not(HasSubstr("tokens/s")));
  EXPECT_THAT(plain.Line(step), HasSubstr("ETA 27.0s"));  // 9 x 3 s
}

TEST(EventFormatTest, JobDetailsListEveryRanksError) {
  v1::Job job;
  job.set_id("job-1");
  job.set_state(v1::FAILED);
  job.set_message("rank 1 (worker-3): rank 1: step 1: checksum mismatch; then ...");
  for (const auto& [rank, worker, at, message] :
       std::vector<std::tuple<int, std::string, int64_t, std::string>>{
           {1, "worker-3", 5000, "step 1: loading fc0.weight: checksum mismatch"},
           {0, "worker-2", 5012, "step 1: all_reduce on group 0: Connection closed by peer"}}) {
    v1::RankError* e = job.add_rank_errors();
    e->set_rank(rank);
    e->set_worker(worker);
    e->set_host("10.0.0.5");
    e->set_attempt(2);
    e->set_failed_at_ms(at);
    e->set_message(message);
  }
  job.set_rank_errors_omitted(3);
  const std::string details = FormatJobDetails(job, 31000);
  EXPECT_THAT(details,
              HasSubstr("errors:   5 ranks failed in attempt 2, earliest first\n"
                        "  rank 1 (worker worker-3 on host 10.0.0.5, attempt 2, +0 ms): step 1: "
                        "loading fc0.weight: checksum mismatch\n"
                        "  rank 0 (worker worker-2 on host 10.0.0.5, attempt 2, +12 ms): step 1: "
                        "all_reduce on group 0: Connection closed by peer\n"
                        "  and 3 more (not kept)\n"));
  v1::RankError bare;
  bare.set_rank(4);
  bare.set_message("worker lost");
  EXPECT_EQ(FormatRankError(bare, 0), "rank 4 (attempt 0, +0 ms): worker lost");
}

TEST(EventFormatTest, LogLines) {
  v1::JobLogLine line;
  line.set_attempt(1);
  line.set_rank(3);
  line.set_seq(12);
  line.set_time_ms(int64_t{1700000000} * 1000 + 215);  // 2023-11-14 22:13:20.215 UTC
  line.set_level("error");
  line.set_text("job-000001 attempt 1: rank 3: \"checksum\" mismatch");
  EXPECT_EQ(FormatLogLineText(line, absl::UTCTimeZone()),
            "attempt 1 rank 3  22:13:20.215 error    job-000001 attempt 1: rank 3: \"checksum\" "
            "mismatch");
  line.set_level("warning");
  EXPECT_THAT(FormatLogLineText(line, absl::UTCTimeZone()),
              HasSubstr("22:13:20.215 warning  job-000001"));
  EXPECT_EQ(FormatLogLineJson(line),
            "{\"type\":\"log\",\"attempt\":1,\"rank\":3,\"seq\":12,\"time_ms\":1700000000215,"
            "\"level\":\"warning\",\"text\":\"job-000001 attempt 1: rank 3: \\\"checksum\\\" "
            "mismatch\"}");
}

}  // namespace
}  // namespace weft::client
