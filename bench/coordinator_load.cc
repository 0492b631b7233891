// The coordinator under load (bench/RESULTS.md, "Coordinator under load"): `--workers` simulated
// workers run `--jobs` jobs of workers/jobs ranks each and stream their step reports (and, every
// `--checkpoint_every` steps, their checkpoint reports) from `--threads` threads, as gRPC's stream
// threads would, into one Coordinator over a real SQLite job store. Prints the reports handled
// per second and the longest a report waited in HandleWorkerMessage (the coordinator's lock is
// held at most that long by anyone), then checks that every job SUCCEEDED with every step stored.
//
//   bazel run //bench:coordinator_load -- --workers=256 --jobs=16 --steps=50
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/checkpoint/checkpoint.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_store.h"
#include "coordinator/recorded_connection.h"

ABSL_FLAG(int, workers, 256, "simulated workers");
ABSL_FLAG(int, jobs, 16, "jobs, each of workers/jobs ranks");
ABSL_FLAG(int, steps, 50, "steps each rank reports");
ABSL_FLAG(int, checkpoint_every, 10, "a checkpoint report from every rank every this many steps");
ABSL_FLAG(int, threads, 16, "threads streaming the reports");
ABSL_FLAG(std::string, dir, "", "folder for the job store and checkpoints (default: a temp one)");

namespace weft::coordinator {
namespace {

using Clock = std::chrono::steady_clock;

class TinyPlan final : public JobPlan {
 public:
  explicit TinyPlan(int world) : world_(world) {}
  int world_size() const override { return world_; }
  absl::StatusOr<v1::Program> Program(int rank, const planner::Attempt& attempt,
                                      const planner::StopCheck&) const override {
    v1::Program p;
    p.set_job_id(attempt.job_id);
    p.set_attempt(attempt.attempt);
    p.set_rank(rank);
    p.set_world_size(world_);
    return p;
  }

 private:
  const int world_;
};

struct Rank {
  std::string worker;
  std::string job;
  int attempt = 0;
  int rank = 0;
};

int Run() {
  const int workers = absl::GetFlag(FLAGS_workers), jobs = absl::GetFlag(FLAGS_jobs);
  const int steps = absl::GetFlag(FLAGS_steps), every = absl::GetFlag(FLAGS_checkpoint_every);
  const int threads = absl::GetFlag(FLAGS_threads);
  const int ranks = workers / jobs;
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) dir = std::filesystem::temp_directory_path() / "weft_coordinator_load";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);

  auto store = JobStore::Open(dir + "/weft.db");
  if (!store.ok()) return std::fprintf(stderr, "%s\n", store.status().ToString().c_str()), 1;
  CoordinatorOptions options;
  options.failure_settle_ms = 0;
  options.worker_timeout_ms = 600000;
  options.prepare_spec = [](v1::JobSpec*) { return absl::OkStatus(); };
  options.world_size = [ranks](const v1::JobSpec&) { return int64_t{ranks}; };
  options.plan = [ranks](const v1::JobSpec&, const planner::StopCheck&)
      -> absl::StatusOr<std::shared_ptr<const JobPlan>> {
    return std::make_shared<TinyPlan>(ranks);
  };
  auto coordinator = Coordinator::Create(*std::move(store), options);
  if (!coordinator.ok()) return std::fprintf(stderr, "%s\n", coordinator.status().ToString().c_str()), 1;
  Coordinator& c = **coordinator;

  std::vector<std::shared_ptr<RecordedConnection>> streams;
  std::vector<std::string> ids;
  for (int w = 0; w < workers; ++w) {
    streams.push_back(std::make_shared<RecordedConnection>());
    v1::Hello hello;
    hello.set_pid(w + 1);
    ids.push_back(*c.ConnectWorker(hello, "ipv4:127.0.0.1:1", streams.back()));
  }
  std::vector<std::string> job_ids;
  for (int j = 0; j < jobs; ++j) {
    v1::JobSpec spec;
    spec.set_name(absl::StrCat("load-", j));
    spec.mutable_mesh()->add_shape(ranks);
    spec.mutable_mesh()->add_dim_names("dp");
    spec.mutable_data()->set_batch_size(ranks);
    spec.mutable_train()->set_steps(steps);
    spec.mutable_checkpoint()->set_dir(absl::StrCat(dir, "/ckpt-", j));
    absl::StatusOr<std::string> id = c.SubmitJob(spec);
    if (!id.ok()) return std::fprintf(stderr, "%s\n", id.status().ToString().c_str()), 1;
    job_ids.push_back(*id);
  }
  std::vector<Rank> all;
  for (int w = 0; w < workers; ++w) {
    const std::vector<v1::Assignment> assigned = streams[w]->assignments();
    if (assigned.empty()) return std::fprintf(stderr, "worker %d got no program\n", w), 1;
    const v1::Program& p = assigned.back().program();
    all.push_back({ids[w], p.job_id(), p.attempt(), p.rank()});
  }

  std::atomic<int64_t> reports{0};
  std::vector<std::vector<double>> waits(threads);  // microseconds, per thread
  auto send = [&](int t, const std::string& worker, const v1::WorkerMessage& msg) {
    const Clock::time_point start = Clock::now();
    c.HandleWorkerMessage(worker, msg);
    waits[t].push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    ++reports;
  };
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int s = 1; s <= steps; ++s) {
        for (size_t i = t; i < all.size(); i += threads) {
          const Rank& r = all[i];
          v1::WorkerMessage msg;
          v1::StepReport* step = msg.mutable_step();
          step->set_job_id(r.job);
          step->set_attempt(r.attempt);
          step->set_rank(r.rank);
          step->set_step(s);
          step->set_loss(1.0 / s);
          step->set_step_seconds(0.1);
          send(t, r.worker, msg);
          if (every > 0 && s % every == 0) {
            v1::WorkerMessage ckpt;
            v1::CheckpointReport* report = ckpt.mutable_checkpoint();
            report->set_job_id(r.job);
            report->set_attempt(r.attempt);
            report->set_rank(r.rank);
            report->set_step(s);
            const int j = std::stoi(r.job.substr(r.job.rfind('-') + 1)) - 1;
            std::filesystem::create_directories(
                checkpoint::StagingDir(absl::StrCat(dir, "/ckpt-", j), s));
            send(t, r.worker, ckpt);
          }
        }
      }
    });
  }
  for (std::thread& th : pool) th.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const Rank& r : all) {
    v1::WorkerMessage done;
    done.mutable_done()->set_job_id(r.job);
    done.mutable_done()->set_attempt(r.attempt);
    done.mutable_done()->set_ok(true);
    c.HandleWorkerMessage(r.worker, done);
  }

  std::vector<double> all_waits;
  for (const auto& w : waits) all_waits.insert(all_waits.end(), w.begin(), w.end());
  std::sort(all_waits.begin(), all_waits.end());
  const auto pct = [&](double q) { return all_waits[static_cast<size_t>(q * (all_waits.size() - 1))]; };
  std::printf("coordinator_load: %d workers, %d jobs of %d ranks, %d steps, checkpoint every %d, "
              "%d threads\n", workers, jobs, ranks, steps, every, threads);
  std::printf("reports: %lld in %.2f s = %.0f reports/s\n", static_cast<long long>(reports.load()),
              seconds, reports.load() / seconds);
  std::printf("HandleWorkerMessage: median %.0f us, p99 %.0f us, max %.0f us\n", pct(0.5),
              pct(0.99), all_waits.back());

  // Every job SUCCEEDED (its last commit done) with every step stored.
  int bad = 0;
  for (const std::string& id : job_ids) {
    v1::Job job;
    for (int tries = 0; tries < 600; ++tries) {
      v1::GetJobRequest request;
      request.set_job_id(id);
      request.set_steps_page_size(steps + 10);
      job = *c.GetJob(request);
      if (job.state() == v1::SUCCEEDED || job.state() == v1::FAILED) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (job.state() != v1::SUCCEEDED || job.steps_size() != steps) {
      std::printf("job %s: %s, %d steps stored: %s\n", id.c_str(),
                  v1::JobState_Name(job.state()).c_str(), job.steps_size(), job.message().c_str());
      ++bad;
    }
  }
  std::printf("coordinator lock: held %.1f ms at the longest; %lld store writes under it; %lld "
              "store transactions, the largest of %lld writes\n",
              absl::ToDoubleMilliseconds(c.longest_lock_hold()),
              static_cast<long long>(c.store_writes_under_lock()),
              static_cast<long long>(c.store_groups_written()),
              static_cast<long long>(c.store_largest_group()));
  std::printf("jobs: %d of %d SUCCEEDED with all %d steps stored\n", jobs - bad, jobs, steps);
  c.Shutdown();
  std::filesystem::remove_all(dir);
  return bad == 0 ? 0 : 1;
}

}  // namespace
}  // namespace weft::coordinator

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return weft::coordinator::Run();
}
