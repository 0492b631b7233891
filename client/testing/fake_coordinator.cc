// A stand-in for weft-coordinator in weftctl's own tests: the same flags (--listen, --port_file,
// --data_dir), a JobService that reports 64 idle workers, accepts any job, and plays a scripted
// run of it on WatchJob (RUNNING, one step event per train step, SUCCEEDED). A job named
// "hang" stops after its first step and waits until the client goes away; one named "fail"
// ends FAILED. ListJobs gives pages of at most 2 jobs (ids in string order) and GetJob pages of
// at most 4 of the scripted run's steps, so that weftctl follows page tokens. GetJobTrace of a
// job submitted with trace returns a scripted timeline: per rank of the mesh and train step, a
// forward slice and an all-reduce. GetJobLogs returns three scripted lines per rank ("rank R line
// I", one second apart, the ranks' interleaved by time) in pages of at most 2 lines.
//
// E.g.
//   fake_coordinator --listen 127.0.0.1:0 --port_file /tmp/port --data_dir /tmp/data
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/jobspec/yaml.h"
#include "grpcpp/grpcpp.h"
#include "weft/v1/service.grpc.pb.h"

namespace {

using weft::v1::Job;

constexpr int kPageSize = 2;

class FakeJobService final : public weft::v1::JobService::Service {
 public:
  grpc::Status SubmitJob(grpc::ServerContext*, const weft::v1::SubmitJobRequest* req,
                         weft::v1::SubmitJobResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string id = "job-" + std::to_string(jobs_.size() + 1);
    Job& job = jobs_[id];
    job.set_id(id);
    if (!req->spec_yaml().empty()) {
      // As weftctl sends a spec by default: its YAML, whose files the cluster checks.
      weft::JobSpecYamlOptions syntax_only;
      syntax_only.read_files = false;
      absl::StatusOr<weft::v1::JobSpec> spec =
          weft::ParseJobSpecYaml(req->spec_yaml(), req->spec_dir(), syntax_only);
      if (!spec.ok()) {
        jobs_.erase(id);
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(spec.status().message()));
      }
      *job.mutable_spec() = *spec;
    } else {
      *job.mutable_spec() = req->spec();
    }
    job.set_state(weft::v1::PENDING);
    resp->set_job_id(id);
    return grpc::Status::OK;
  }
  grpc::Status GetJob(grpc::ServerContext*, const weft::v1::GetJobRequest* req,
                      Job* job) override {
    if (grpc::Status found = CopyJob(req->job_id(), job); !found.ok()) return found;
    // The scripted run's steps, at most kPageSize * 2 a page; the token is the last step's number.
    int64_t after = 0;
    if (!req->steps_page_token().empty()) after = std::stoll(req->steps_page_token());
    const int size = req->steps_page_size() > 0 ? std::min(req->steps_page_size(), 2 * kPageSize)
                                                : 2 * kPageSize;
    const int64_t total = job->spec().train().steps();
    for (int64_t s = after + 1; s <= std::min(after + size, total); ++s) {
      job->add_steps()->set_step(s);
    }
    if (after + size < total) job->set_next_steps_page_token(std::to_string(after + size));
    return grpc::Status::OK;
  }
  grpc::Status ListJobs(grpc::ServerContext*, const weft::v1::ListJobsRequest* req,
                        weft::v1::ListJobsResponse* resp) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int size = req->page_size() > 0 ? std::min(req->page_size(), kPageSize) : kPageSize;
    auto it = req->page_token().empty() ? jobs_.begin() : jobs_.upper_bound(req->page_token());
    for (; it != jobs_.end(); ++it) {
      const auto& [id, job] = *it;
      if (req->state() != weft::v1::JOB_STATE_UNSPECIFIED && job.state() != req->state()) continue;
      if (resp->jobs_size() == size) {
        resp->set_next_page_token(resp->jobs(size - 1).id());
        break;
      }
      weft::v1::JobSummary* summary = resp->add_jobs();
      summary->set_id(id);
      summary->set_name(job.spec().name());
      summary->set_state(job.state());
      summary->set_total_steps(job.spec().train().steps());
    }
    return grpc::Status::OK;
  }
  grpc::Status CancelJob(grpc::ServerContext*, const weft::v1::CancelJobRequest* req,
                         Job* job) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(req->job_id());
    if (it == jobs_.end()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + req->job_id());
    }
    it->second.set_state(weft::v1::CANCELLED);
    *job = it->second;
    return grpc::Status::OK;
  }
  grpc::Status WatchJob(grpc::ServerContext* ctx, const weft::v1::WatchJobRequest* req,
                        grpc::ServerWriter<weft::v1::JobEvent>* writer) override {
    Job job;
    if (grpc::Status found = CopyJob(req->job_id(), &job); !found.ok()) return found;
    weft::v1::JobEvent e;
    e.set_job_id(job.id());
    e.set_state(weft::v1::RUNNING);
    writer->Write(e);
    for (int64_t s = 1; s <= job.spec().train().steps(); ++s) {
      weft::v1::JobEvent step;
      step.set_job_id(job.id());
      step.mutable_step()->set_step(s);
      step.mutable_step()->set_loss(1.0 / (3.0 * s));
      step.mutable_step()->set_step_seconds(0.01);
      step.mutable_step()->set_samples_per_second(3200);
      writer->Write(step);
      if (job.spec().name() == "hang") {
        // The scripted hang: the stream stays open until the client goes. The synchronous API
        // has no notification of a cancel, so it is polled.
        while (!ctx->IsCancelled()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return grpc::Status::CANCELLED;
      }
    }
    weft::v1::JobEvent done;
    done.set_job_id(job.id());
    if (job.spec().name() == "fail") {
      done.set_state(weft::v1::FAILED);
      done.set_message("rank 1: scripted failure");
    } else {
      done.set_state(weft::v1::SUCCEEDED);
    }
    writer->Write(done);
    return grpc::Status::OK;
  }
  grpc::Status GetJobTrace(grpc::ServerContext*, const weft::v1::GetJobRequest* req,
                           weft::v1::JobTrace* trace) override {
    Job job;
    if (grpc::Status found = CopyJob(req->job_id(), &job); !found.ok()) return found;
    if (!job.spec().trace()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "job " + job.id() + " was not submitted with trace: true");
    }
    int64_t ranks = 1;
    for (int64_t d : job.spec().mesh().shape()) ranks *= d;
    const int64_t base_us = 1700000000000000;
    for (int64_t r = 0; r < ranks; ++r) {
      weft::v1::RankTrace* rank = trace->add_ranks();
      rank->set_rank(static_cast<int32_t>(r));
      rank->set_worker_id("w-" + std::to_string(r));
      for (int64_t s = 1; s <= job.spec().train().steps(); ++s) {
        weft::v1::TraceSpan* f = rank->add_spans();
        f->set_name("F mb0 c0");
        f->set_category("forward");
        f->set_start_us(base_us + s * 1000 + r * 10);
        f->set_duration_us(300);
        f->set_micro_batch(0);
        f->set_chunk(0);
        weft::v1::TraceSpan* ar = rank->add_spans();
        ar->set_name("all_reduce fc0.weight@grad");
        ar->set_category("collective");
        ar->set_start_us(f->start_us() + f->duration_us());
        ar->set_duration_us(200);
        ar->set_micro_batch(-1);
        ar->set_chunk(-1);
      }
    }
    return grpc::Status::OK;
  }
  grpc::Status GetJobLogs(grpc::ServerContext*, const weft::v1::GetJobLogsRequest* req,
                          weft::v1::GetJobLogsResponse* resp) override {
    Job job;
    if (grpc::Status found = CopyJob(req->job_id(), &job); !found.ok()) return found;
    int64_t ranks = 1;
    for (int64_t d : job.spec().mesh().shape()) ranks *= d;
    std::vector<weft::v1::JobLogLine> lines;  // in time order
    for (int i = 1; i <= 3; ++i) {
      for (int64_t r = 0; r < ranks; ++r) {
        if (req->has_rank() && req->rank() != r) continue;
        weft::v1::JobLogLine& line = lines.emplace_back();
        line.set_rank(static_cast<int32_t>(r));
        line.set_seq(i);
        line.set_time_ms(1700000000000 + i * 1000 + r);
        line.set_level(i == 3 ? "error" : "info");
        line.set_text("rank " + std::to_string(r) + " line " + std::to_string(i));
      }
    }
    // The token is the index of the page's first line.
    const size_t first = req->page_token().empty() ? 0 : std::stoul(req->page_token());
    const size_t end = std::min(lines.size(), first + kPageSize);
    for (size_t i = first; i < end; ++i) *resp->add_lines() = lines[i];
    if (end < lines.size()) resp->set_next_page_token(std::to_string(end));
    return grpc::Status::OK;
  }
  grpc::Status ListWorkers(grpc::ServerContext*, const weft::v1::ListWorkersRequest*,
                           weft::v1::ListWorkersResponse* resp) override {
    for (int i = 0; i < 64; ++i) {
      weft::v1::WorkerInfo* w = resp->add_workers();
      w->set_worker_id("w-" + std::to_string(i));
      w->set_state("idle");
    }
    return grpc::Status::OK;
  }

 private:
  // The job, copied; NOT_FOUND naming it when there is none.
  grpc::Status CopyJob(const std::string& id, Job* job) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "no job " + id);
    *job = it->second;
    return grpc::Status::OK;
  }

  std::mutex mu_;
  std::map<std::string, Job> jobs_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:0", port_file;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--listen") listen = argv[i + 1];
    if (flag == "--port_file") port_file = argv[i + 1];
  }
  FakeJobService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "fake_coordinator: cannot listen on " << listen << std::endl;
    return 1;
  }
  {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << port << "\n";
    std::rename(tmp.c_str(), port_file.c_str());
  }
  std::cerr << "fake_coordinator: listening on port " << port << std::endl;
  server->Wait();
  return 0;
}
