// What deleting jobs costs the coordinator's job store (coordinator/job_store): a store of JOBS
// ended jobs, each with STEPS step events and LINES log lines (one rank), on this machine's disk;
// then the time of ListExpiredJobs (retention's query) and of DeleteJob per job, which holds the
// store's lock, and so delays the coordinator's other writes, for its whole transaction.
//
// Usage: bazel run //bench:job_store_bench -- [JOBS [STEPS [LINES [DIR]]]]
//        (defaults 20 1000 1000, a folder under /tmp; SQLite is the system's, optimized)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "coordinator/job_store.h"

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int Main(int argc, char** argv) {
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 20;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int lines = argc > 3 ? std::atoi(argv[3]) : 1000;
  std::string dir = argc > 4 ? argv[4] : "";
  if (jobs < 1 || steps < 0 || lines < 0) {
    std::fprintf(stderr, "usage: job_store_bench [JOBS [STEPS [LINES [DIR]]]]\n");
    return 2;
  }
  if (dir.empty()) {
    std::string templ = "/tmp/job_store_bench.XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) return 1;
    dir = templ;
  }
  std::filesystem::remove(dir + "/weft.db");
  auto store = weft::coordinator::JobStore::Open(dir + "/weft.db");
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  weft::v1::JobSpec spec;
  spec.set_name("bench");
  spec.mutable_mesh()->add_shape(1);
  google::protobuf::RepeatedPtrField<weft::v1::LogLine> batch;
  for (int i = 0; i < 64; ++i) {
    weft::v1::LogLine* line = batch.Add();
    line->set_time_ms(i);
    line->set_level("info");
    line->set_text(std::string(120, 'x'));
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> ids;
  for (int j = 0; j < jobs; ++j) {
    auto job = (*store)->CreateJob(spec, j, "submitted");
    if (!job.ok()) return 1;
    for (int s = 1; s <= steps; ++s) {
      weft::v1::JobEvent event;
      event.set_job_id(job->id());
      event.mutable_step()->set_step(s);
      event.mutable_step()->set_loss(1.0 / s);
      if (!(*store)->AppendEvent(job->id(), 0, event).ok()) return 1;
    }
    for (int n = 0; n < lines; n += batch.size()) {
      if (!(*store)->AppendLogLines(job->id(), 0, 0, batch, lines).ok()) return 1;
    }
    job->set_state(weft::v1::SUCCEEDED);
    job->set_end_time_ms(1000 + j);
    if (!(*store)->UpdateJob(*job, nullptr).ok()) return 1;
    ids.push_back(job->id());
  }
  std::printf("store: %d ended jobs x %d step events x %d log lines, written in %.1f s, %.1f MB\n",
              jobs, steps, lines, SecondsSince(start),
              std::filesystem::file_size(dir + "/weft.db") / 1e6);

  start = std::chrono::steady_clock::now();
  auto expired = (*store)->ListExpiredJobs(/*ended_before_ms=*/0, /*keep_newest=*/jobs / 2, 64);
  const double list_s = SecondsSince(start);
  if (!expired.ok()) return 1;
  std::printf("ListExpiredJobs (keep the newest %d, 64 at most): %zu jobs in %.3f ms\n", jobs / 2,
              expired->size(), list_s * 1e3);

  std::vector<double> times;
  for (const std::string& id : ids) {
    start = std::chrono::steady_clock::now();
    if (!(*store)->DeleteJob(id).ok()) return 1;
    times.push_back(SecondsSince(start));
  }
  std::sort(times.begin(), times.end());
  double sum = 0;
  for (double t : times) sum += t;
  std::printf("DeleteJob: mean %.2f ms, median %.2f ms, max %.2f ms (%zu jobs)\n",
              sum / times.size() * 1e3, times[times.size() / 2] * 1e3, times.back() * 1e3,
              times.size());
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
