// Prometheus metrics through the real daemons on 127.0.0.1: a coordinator and two cpu workers
// started with --metrics_listen 127.0.0.1:0 (the coordinator's port from --metrics_port_file,
// the workers' addresses from ListWorkers, as a scraper's discovery would find them). A 2-rank
// data-parallel job is scraped while it runs and after it is cancelled: the coordinator's step
// counter and step-time histogram agree with the job's record, its buckets are cumulative, and
// each worker counts the steps it ran with their time split into compute, collective wait and
// data. A second job with checkpoints fills the checkpoint histogram and byte counter.
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/jobspec/yaml.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

// One scrape: every sample line "name{labels} value" by its "name{labels}".
std::map<std::string, double> Scrape(const std::string& host, int port) {
  httplib::Client client(host, port);
  httplib::Result got = client.Get("/metrics");
  EXPECT_TRUE(got) << host << ":" << port << ": " << httplib::to_string(got.error());
  if (!got) return {};
  EXPECT_EQ(got->status, 200);
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(got->body, '\n', absl::SkipEmpty())) {
    if (line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    EXPECT_TRUE(space != absl::string_view::npos &&
                absl::SimpleAtod(line.substr(space + 1), &value))
        << "not a sample: " << line;
    samples[std::string(line.substr(0, space))] = value;
  }
  return samples;
}

// HOST:PORT -> host, port.
void SplitAddress(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  ASSERT_NE(colon, std::string::npos) << address;
  *host = address.substr(0, colon);
  ASSERT_TRUE(absl::SimpleAtoi(address.substr(colon + 1), port)) << address;
}

// The histogram's buckets are cumulative up to +Inf, which equals _count.
void ExpectCumulative(const std::map<std::string, double>& m, const std::string& name,
                      const std::string& labels) {
  const std::string prefix = absl::StrCat(name, "_bucket{", labels, labels.empty() ? "" : ",");
  std::vector<std::pair<double, double>> by_bound;  // (upper bound, count), sorted by bound
  for (const auto& [key, count] : m) {
    if (key.rfind(prefix, 0) != 0) continue;
    const std::string bound = key.substr(prefix.size() + 4, key.size() - prefix.size() - 6);
    double b = 0;
    if (bound == "+Inf") {
      b = std::numeric_limits<double>::infinity();
    } else {
      EXPECT_TRUE(absl::SimpleAtod(bound, &b)) << key;
    }
    by_bound.push_back({b, count});
  }
  std::sort(by_bound.begin(), by_bound.end());
  ASSERT_GT(by_bound.size(), 1u) << name << "{" << labels << "} has no buckets";
  ASSERT_TRUE(std::isinf(by_bound.back().first)) << name << " has no +Inf bucket";
  for (size_t i = 1; i < by_bound.size(); ++i) {
    EXPECT_GE(by_bound[i].second, by_bound[i - 1].second) << name << " le " << by_bound[i].first;
  }
  const std::string count_key =
      labels.empty() ? name + "_count" : absl::StrCat(name, "_count{", labels, "}");
  ASSERT_TRUE(m.count(count_key)) << count_key;
  EXPECT_EQ(by_bound.back().second, m.at(count_key)) << name;
}

double Get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  EXPECT_NE(it, m.end()) << "no sample " << key;
  return it == m.end() ? -1 : it->second;
}

TEST(MetricsTest, ARunningJobIsScrapedFromTheCoordinatorAndItsWorkers) {
  const std::string dir = MakeTempDir("metrics");
  DaemonClusterOptions options;
  options.cpu_workers = 2;
  options.coordinator_flags = {"--metrics_listen", "127.0.0.1:0", "--metrics_port_file",
                               dir + "/metrics.port"};
  options.worker_flags = {"--metrics_listen", "127.0.0.1:0"};
  auto started = DaemonCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  DaemonCluster& cluster = **started;
  int coordinator_port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFileOrEmpty(dir + "/metrics.port")),
                               &coordinator_port));
  std::vector<std::pair<std::string, int>> workers;
  std::map<std::string, std::string> worker_ids;  // address -> id
  for (const v1::WorkerInfo& w : cluster.ListWorkers()) {
    std::string host;
    int port = 0;
    SplitAddress(w.metrics_address(), &host, &port);
    workers.push_back({host, port});
    worker_ids[w.metrics_address()] = w.worker_id();
  }
  ASSERT_EQ(workers.size(), 2u);

  // A long job, scraped while it runs.
  const MlpJob mlp = MlpJob::Create();
  auto spec = ParseJobSpecYaml(MlpSpec(mlp, "{shape: [2], dim_names: [dp]}", 1000000, "", false),
                               mlp.dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string id;
  ASSERT_TRUE(cluster.Submit(*spec, &id).ok());
  const std::string job = absl::StrCat("job=\"", id, "\",name=\"", spec->name(), "\"");
  std::map<std::string, double> m;
  for (int i = 0; i < 600; ++i) {
    m = Scrape("127.0.0.1", coordinator_port);
    if (m[absl::StrCat("weft_job_steps_total{", job, "}")] >= 5) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GE(Get(m, absl::StrCat("weft_job_steps_total{", job, "}")), 5) << cluster.Logs();
  EXPECT_EQ(Get(m, "weft_jobs{state=\"RUNNING\"}"), 1);
  EXPECT_EQ(Get(m, "weft_jobs{state=\"PENDING\"}"), 0);
  EXPECT_EQ(Get(m, "weft_workers{state=\"busy\",device=\"cpu\"}"), 2);
  EXPECT_GT(Get(m, absl::StrCat("weft_job_samples_per_second{", job, "}")), 0);
  EXPECT_GT(Get(m, absl::StrCat("weft_job_bytes_sent_per_step{", job, "}")), 0);
  ExpectCumulative(m, "weft_job_step_seconds", job);
  for (const auto& [host, port] : workers) {
    std::map<std::string, double> w = Scrape(host, port);
    EXPECT_GE(Get(w, "weft_worker_steps_total"), 1);
    ExpectCumulative(w, "weft_worker_step_seconds", "");
  }

  // Cancelled: the figures are final, and agree.
  CommandResult cancelled = cluster.Weftctl({"cancel", id});
  ASSERT_EQ(cancelled.exit_code, 0) << cancelled.err;
  for (int i = 0; i < 600 && cluster.GetJob(id).state() != v1::CANCELLED; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(cluster.GetJob(id).state(), v1::CANCELLED);
  for (int i = 0; i < 600; ++i) {  // both workers idle again
    m = Scrape("127.0.0.1", coordinator_port);
    if (m["weft_workers{state=\"idle\",device=\"cpu\"}"] == 2) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_EQ(Get(m, "weft_workers{state=\"idle\",device=\"cpu\"}"), 2);
  EXPECT_EQ(Get(m, "weft_jobs{state=\"CANCELLED\"}"), 1);
  EXPECT_EQ(Get(m, "weft_jobs{state=\"RUNNING\"}"), 0);
  const double steps = Get(m, absl::StrCat("weft_job_steps_total{", job, "}"));
  const v1::Job record = cluster.GetJob(id);
  ASSERT_GT(record.steps_size(), 0);
  EXPECT_EQ(steps, record.steps(record.steps_size() - 1).step()) << "the job's last step";
  EXPECT_EQ(Get(m, absl::StrCat("weft_job_step_seconds_count{", job, "}")), steps);
  EXPECT_EQ(Get(m, "weft_steps_total"), steps);
  ExpectCumulative(m, "weft_job_step_seconds", job);
  for (const auto& [host, port] : workers) {
    // The worker counts its task once the task has wound down, which may be just after the
    // coordinator has its TaskDone and lists it idle.
    std::map<std::string, double> w = Scrape(host, port);
    for (int i = 0; i < 600 && w.count("weft_worker_tasks_total{result=\"cancelled\"}") == 0;
         ++i) {
      absl::SleepFor(absl::Milliseconds(50));
      w = Scrape(host, port);
    }
    const std::string what = absl::StrCat("worker at ", host, ":", port);
    const double ran = Get(w, "weft_worker_steps_total");
    // A rank may have run one step more than both ranks reported when the cancel came.
    EXPECT_GE(ran, steps) << what;
    EXPECT_LE(ran, steps + 1) << what;
    for (const char* phase : {"compute", "collective_wait", "data"}) {
      const std::string labels = absl::StrCat("phase=\"", phase, "\"");
      EXPECT_EQ(Get(w, absl::StrCat("weft_worker_step_phase_seconds_count{", labels, "}")), ran)
          << what << " " << phase;
      EXPECT_GT(Get(w, absl::StrCat("weft_worker_step_phase_seconds_sum{", labels, "}")), 0)
          << what << " " << phase << ": every step all-reduces, loads a batch and computes";
      ExpectCumulative(w, "weft_worker_step_phase_seconds", labels);
    }
    EXPECT_GT(Get(w, "weft_worker_bytes_sent_total"), 0) << what;
    EXPECT_GT(Get(w, "weft_worker_allocator_peak_bytes"), 0) << what;
    EXPECT_EQ(Get(w, "weft_worker_tasks_total{result=\"cancelled\"}"), 1) << what;
    const std::string info = absl::StrCat("weft_worker_info{worker=\"",
                                          worker_ids[absl::StrCat(host, ":", port)],
                                          "\",device=\"cpu\"}");
    EXPECT_EQ(Get(w, info), 1) << what;
  }

  // A job with a checkpoint every 2 steps of 6: three commits.
  const std::string ckpt = mlp.dir + "/ckpt";
  auto saving = ParseJobSpecYaml(
      MlpSpec(mlp, "{shape: [2], dim_names: [dp]}", 6, "{dir: " + ckpt + ", every: 2}", false),
      mlp.dir);
  ASSERT_TRUE(saving.ok()) << saving.status();
  std::string second;
  ASSERT_TRUE(cluster.Submit(*saving, &second).ok());
  JobOutcome outcome = JobOutcome::Of(cluster.Watch(second));
  ASSERT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message;
  m = Scrape("127.0.0.1", coordinator_port);
  const std::string saved = absl::StrCat("job=\"", second, "\",name=\"", saving->name(), "\"");
  EXPECT_EQ(Get(m, absl::StrCat("weft_checkpoint_seconds_count{", saved, "}")), 3);
  int64_t bytes = 0;
  for (const v1::CheckpointSaved& s : outcome.saves) bytes += s.bytes();
  EXPECT_EQ(Get(m, absl::StrCat("weft_checkpoint_bytes_total{", saved, "}")), bytes);
  EXPECT_GT(bytes, 0);
  EXPECT_EQ(Get(m, absl::StrCat("weft_job_steps_total{", saved, "}")), 6);
  EXPECT_EQ(Get(m, "weft_steps_total"), steps + 6);
  EXPECT_EQ(Get(m, "weft_jobs{state=\"SUCCEEDED\"}"), 1);
  EXPECT_EQ(m.count("weft_restarts_total"), 0u) << "no job restarted";
}

}  // namespace
}  // namespace weft::testing
