// The real gRPC server in-process on 127.0.0.1 with a port picked at run time.
#include "coordinator/rpc/grpc_server.h"

#include <gtest/gtest.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/impl/codegen/sync_stream.h>
#include <grpcpp/security/credentials.h>
#include <stdlib.h>

#include <chrono>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/coordinator_channel.h"
#include "common/subprocess.h"
#include "common/testing_health.h"
#include "common/testing_tls.h"
#include "common/tls.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_store.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft::coordinator::rpc {
namespace {

std::string TempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/grpc_server_test.XXXXXX";
  EXPECT_NE(mkdtemp(templ.data()), nullptr);
  return templ;
}

std::chrono::system_clock::time_point In(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

class GrpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = JobStore::Open(TempDir() + "/weft.db");
    ASSERT_TRUE(store.ok()) << store.status();
    CoordinatorOptions options;
    options.heartbeat_interval_ms = 200;
    auto c = Coordinator::Create(std::move(*store), options);
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    coordinator_->Start();
    auto server = CoordinatorServer::Start(coordinator_.get(), "127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GrpcServerTest, SubmitJobWithABadSpecIsInvalidArgument) {
  auto stub = v1::JobService::NewStub(channel_);
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_name("empty");  // no mesh, no layers
  v1::SubmitJobResponse response;
  grpc::ClientContext context;
  context.set_deadline(In(10000));
  grpc::Status s = stub->SubmitJob(&context, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_FALSE(s.error_message().empty());

  grpc::ClientContext list_context;
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub->ListJobs(&list_context, v1::ListJobsRequest(), &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 0);

  grpc::ClientContext get_context;
  v1::GetJobRequest get;
  get.set_job_id("job-000001");
  v1::Job job;
  EXPECT_EQ(stub->GetJob(&get_context, get, &job).error_code(), grpc::StatusCode::NOT_FOUND);
}

// ListJobs and GetJob over the wire, with pages of 2 and 3: an empty request (an old client's)
// gets the first page and a token, a larger page_size gets the bound, a bad token is refused
// naming it; a summary read as the Job an old client expects still gives its id, state and last
// step.
TEST(GrpcPagingTest, ListJobsAndGetJobPageOverTheWire) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    v1::JobSpec spec;
    spec.set_name(absl::StrCat("done-", i));
    auto job = (*store)->CreateJob(spec, 1000 + i, "submitted");
    ASSERT_TRUE(job.ok()) << job.status();
    ids.push_back(job->id());
    for (int step = 1; step <= 5; ++step) {
      v1::JobEvent event;
      event.set_job_id(job->id());
      event.mutable_step()->set_step(step);
      event.mutable_step()->set_loss(1.0 / step);
      ASSERT_TRUE((*store)->AppendEvent(job->id(), 0, event).ok());
    }
    job->set_state(v1::SUCCEEDED);
    ASSERT_TRUE((*store)->UpdateJob(*job, nullptr).ok());
  }
  google::protobuf::RepeatedPtrField<v1::LogLine> lines;
  for (int i = 0; i < 3; ++i) {
    v1::LogLine* line = lines.Add();
    line->set_time_ms(2000 + i);
    line->set_level("info");
    line->set_text(absl::StrCat("line ", i));
  }
  ASSERT_TRUE((*store)->AppendLogLines(ids[0], 0, 0, lines, 100).ok());
  CoordinatorOptions options;
  options.pages.jobs_default = 2;
  options.pages.jobs_max = 2;
  options.pages.steps_default = 2;
  options.pages.steps_max = 3;
  auto coordinator = Coordinator::Create(std::move(*store), options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  auto server = CoordinatorServer::Start(coordinator->get(), "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::JobService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  auto list = [&](const v1::ListJobsRequest& request, v1::ListJobsResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(In(10000));
    return stub->ListJobs(&context, request, response);
  };
  auto get = [&](const v1::GetJobRequest& request, v1::Job* response) {
    grpc::ClientContext context;
    context.set_deadline(In(10000));
    return stub->GetJob(&context, request, response);
  };

  v1::ListJobsResponse first;
  ASSERT_TRUE(list(v1::ListJobsRequest(), &first).ok());
  ASSERT_EQ(first.jobs_size(), 2);
  EXPECT_EQ(first.jobs(0).id(), ids[0]);
  EXPECT_EQ(first.jobs(0).name(), "done-0");
  EXPECT_EQ(first.jobs(1).id(), ids[1]);
  EXPECT_EQ(first.next_page_token(), ids[1]);
  v1::Job as_old_client_reads_it;
  ASSERT_TRUE(as_old_client_reads_it.ParseFromString(first.jobs(0).SerializeAsString()));
  EXPECT_EQ(as_old_client_reads_it.id(), ids[0]);
  EXPECT_EQ(as_old_client_reads_it.state(), v1::SUCCEEDED);
  EXPECT_EQ(as_old_client_reads_it.create_time_ms(), 1000);
  ASSERT_EQ(as_old_client_reads_it.steps_size(), 1);
  EXPECT_EQ(as_old_client_reads_it.steps(0).step(), 5);
  EXPECT_EQ(as_old_client_reads_it.rank_errors_size(), 0);  // Job reserves the summary's fields

  v1::ListJobsRequest next;
  next.set_page_size(5000);
  next.set_page_token(first.next_page_token());
  v1::ListJobsResponse last;
  ASSERT_TRUE(list(next, &last).ok());
  ASSERT_EQ(last.jobs_size(), 1);
  EXPECT_EQ(last.jobs(0).id(), ids[2]);
  EXPECT_EQ(last.next_page_token(), "");
  v1::ListJobsRequest big;
  big.set_page_size(5000);
  v1::ListJobsResponse clamped;
  ASSERT_TRUE(list(big, &clamped).ok());
  EXPECT_EQ(clamped.jobs_size(), 2);

  v1::ListJobsRequest bad;
  bad.set_page_token("job-999999");
  v1::ListJobsResponse unused;
  grpc::Status refused = list(bad, &unused);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message().rfind("page_token: ", 0), 0u) << refused.error_message();

  v1::GetJobRequest request;
  request.set_job_id(ids[1]);
  std::vector<int> sizes;
  int64_t steps = 0;
  do {
    v1::Job page;
    ASSERT_TRUE(get(request, &page).ok());
    EXPECT_EQ(page.spec().name(), "done-1");
    sizes.push_back(page.steps_size());
    for (const v1::StepMetrics& m : page.steps()) EXPECT_EQ(m.step(), ++steps);
    request.set_steps_page_size(3);
    request.set_steps_page_token(page.next_steps_page_token());
  } while (!request.steps_page_token().empty());
  EXPECT_EQ(sizes, (std::vector<int>{2, 3}));
  request.set_steps_page_token("garbage");
  v1::Job job;
  refused = get(request, &job);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message().rfind("steps_page_token: ", 0), 0u) << refused.error_message();

  // GetJobLogs: a page of 2, then the last line; a bad rank names the field.
  auto logs = [&](const v1::GetJobLogsRequest& request, v1::GetJobLogsResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(In(10000));
    return stub->GetJobLogs(&context, request, response);
  };
  v1::GetJobLogsRequest log_request;
  log_request.set_job_id(ids[0]);
  log_request.set_rank(0);
  log_request.set_page_size(2);
  v1::GetJobLogsResponse log_page;
  ASSERT_TRUE(logs(log_request, &log_page).ok());
  ASSERT_EQ(log_page.lines_size(), 2);
  EXPECT_EQ(log_page.lines(0).text(), "line 0");
  EXPECT_EQ(log_page.lines(1).seq(), 2);
  ASSERT_FALSE(log_page.next_page_token().empty());
  log_request.set_page_token(log_page.next_page_token());
  ASSERT_TRUE(logs(log_request, &log_page).ok());
  ASSERT_EQ(log_page.lines_size(), 1);
  EXPECT_EQ(log_page.lines(0).text(), "line 2");
  EXPECT_EQ(log_page.next_page_token(), "");
  log_request.set_rank(7);
  refused = logs(log_request, &log_page);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message().rfind("rank: ", 0), 0u) << refused.error_message();
  (*server)->Shutdown();
}

// HealthCheckResponse{status: SERVING} (08 01) to a Check of service "".
TEST_F(GrpcServerTest, HealthServiceSaysServing) {
  EXPECT_EQ(weft::testing::HealthStatus(channel_), "SERVING");
}

// A server reflection stream (ServerReflectionInfo, bidi, raw bytes), as grpcurl opens one.
struct ReflectionStream {
  std::shared_ptr<grpc::Channel> channel;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream;

  ReflectionStream(std::shared_ptr<grpc::Channel> on, const std::string& token)
      : channel(std::move(on)) {
    context.set_deadline(In(30000));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    stream.reset(grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::
                     Create(channel.get(),
                            grpc::internal::RpcMethod(
                                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                grpc::internal::RpcMethod::BIDI_STREAMING),
                            &context));
  }
  // Asks ServerReflectionRequest{list_services: "*"}; the reply's bytes, or nullopt when the
  // stream ended instead.
  std::optional<std::string> ListServices() {
    const std::string ask("\x3a\x01*", 3);
    grpc::Slice slice(ask);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer reply;
    if (!stream->Write(request) || !stream->Read(&reply)) return std::nullopt;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    if (reply.Dump(&slices).ok()) {
      for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
    return bytes;
  }
  grpc::Status Close() {
    stream->WritesDone();
    return stream->Finish();
  }
};

// Server reflection needs no token of its own: its streams are bounded, so that idle ones cannot
// take every server thread (about 1,000 did, and every other call failed RESOURCE_EXHAUSTED).
TEST_F(GrpcServerTest, ReflectionStreamsAreBounded) {
  const int bound = OpenCallGuard::Limits().max_reflection_streams;
  std::vector<std::unique_ptr<ReflectionStream>> open;
  for (int i = 0; i < bound; ++i) {
    open.push_back(std::make_unique<ReflectionStream>(channel_, ""));
    std::optional<std::string> reply = open.back()->ListServices();
    ASSERT_TRUE(reply.has_value()) << "stream " << i;
    EXPECT_NE(reply->find("weft.v1.JobService"), std::string::npos);
  }
  EXPECT_EQ(server_->guard().open(OpenCallGuard::Kind::kReflection), bound);
  {
    ReflectionStream over(channel_, "");
    EXPECT_FALSE(over.ListServices().has_value());
    EXPECT_EQ(over.Close().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_EQ(server_->guard().refused(), 1);
  // The services still answer while the bound is full.
  auto stub = v1::JobService::NewStub(channel_);
  grpc::ClientContext list_context;
  list_context.set_deadline(In(10000));
  v1::ListJobsResponse jobs;
  EXPECT_TRUE(stub->ListJobs(&list_context, v1::ListJobsRequest(), &jobs).ok());
  // A stream that ends frees its place.
  EXPECT_TRUE(open.back()->Close().ok());
  open.pop_back();
  ASSERT_TRUE(PollUntil([&] { return server_->guard().open(OpenCallGuard::Kind::kReflection) < bound; },
                        absl::Seconds(10))
                  .ok());
  ReflectionStream again(channel_, "");
  EXPECT_TRUE(again.ListServices().has_value());
  EXPECT_TRUE(again.Close().ok());
  for (auto& stream : open) EXPECT_TRUE(stream->Close().ok());
}

TEST(OpenCallGuardTest, CountsOnlyTheUnauthenticatedStreams) {
  using Kind = OpenCallGuard::Kind;
  EXPECT_EQ(OpenCallGuard::KindOf("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"),
            Kind::kReflection);
  EXPECT_EQ(OpenCallGuard::KindOf("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"),
            Kind::kReflection);
  EXPECT_EQ(OpenCallGuard::KindOf("/grpc.health.v1.Health/Watch"), Kind::kHealthWatch);
  EXPECT_EQ(OpenCallGuard::KindOf("/grpc.health.v1.Health/Check"), Kind::kOther);
  EXPECT_EQ(OpenCallGuard::KindOf("/weft.v1.JobService/WatchJob"), Kind::kOther);
  OpenCallGuard guard("", {.max_reflection_streams = 1, .max_health_watches = 2});
  EXPECT_TRUE(guard.Admit(Kind::kHealthWatch, nullptr));
  EXPECT_TRUE(guard.Admit(Kind::kHealthWatch, nullptr));
  EXPECT_FALSE(guard.Admit(Kind::kHealthWatch, nullptr));
  EXPECT_TRUE(guard.Admit(Kind::kReflection, nullptr));
  EXPECT_EQ(guard.open(Kind::kHealthWatch), 2);
  guard.Release(Kind::kHealthWatch);
  EXPECT_TRUE(guard.Admit(Kind::kHealthWatch, nullptr));
  EXPECT_TRUE(guard.Admit(Kind::kOther, nullptr));  // never counted
  EXPECT_EQ(guard.refused(), 1);
}

TEST_F(GrpcServerTest, ConnectWithoutHelloIsInvalidArgument) {
  auto stub = v1::WorkerService::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(In(10000));
  auto stream = stub->Connect(&context);
  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat();
  stream->Write(heartbeat);
  stream->WritesDone();
  v1::CoordinatorMessage msg;
  EXPECT_FALSE(stream->Read(&msg));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(GrpcServerTest, WorkerIsWelcomedListedAndLostWhenItLeaves) {
  auto stub = v1::WorkerService::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = stub->Connect(&context);
  v1::WorkerMessage hello;
  hello.mutable_hello()->mutable_device()->set_kind("cpu");
  hello.mutable_hello()->set_pid(42);
  ASSERT_TRUE(stream->Write(hello));
  v1::CoordinatorMessage welcome;
  ASSERT_TRUE(stream->Read(&welcome));
  ASSERT_TRUE(welcome.has_welcome());
  EXPECT_EQ(welcome.welcome().heartbeat_interval_ms(), 200);
  const std::string id = welcome.welcome().worker_id();

  auto jobs = v1::JobService::NewStub(channel_);
  auto list = [&] {
    grpc::ClientContext c;
    v1::ListWorkersResponse r;
    EXPECT_TRUE(jobs->ListWorkers(&c, v1::ListWorkersRequest(), &r).ok());
    return r;
  };
  v1::ListWorkersResponse workers = list();
  ASSERT_EQ(workers.workers_size(), 1);
  EXPECT_EQ(workers.workers(0).worker_id(), id);
  EXPECT_EQ(workers.workers(0).state(), "idle");
  EXPECT_EQ(workers.workers(0).host(), "127.0.0.1");  // from the peer address
  EXPECT_EQ(workers.workers(0).pid(), 42);

  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat();
  ASSERT_TRUE(stream->Write(heartbeat));
  stream->WritesDone();
  EXPECT_FALSE(stream->Read(&welcome));
  EXPECT_TRUE(stream->Finish().ok());
  // Polled (2 s at most): the state is only visible through ListWorkers.
  for (int i = 0; i < 100 && list().workers(0).state() != "lost"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(list().workers(0).state(), "lost");
}

// Through the server: the scope's ticket sets, gets and waits; another ticket, a scope that is
// not open, and a value past the attempt's bounds are refused with their own codes.
TEST_F(GrpcServerTest, RendezvousSetGetWait) {
  absl::StatusOr<std::string> opened =
      coordinator_->rendezvous()->Open("job-000001/0", RendezvousLimits::ForMesh({2}));
  ASSERT_TRUE(opened.ok()) << opened.status();
  const std::string ticket = *opened;
  auto stub = v1::RendezvousService::NewStub(channel_);
  auto set = [&](const std::string& scope, const std::string& with, const std::string& value) {
    grpc::ClientContext c;
    v1::RendezvousSetRequest set;
    set.set_scope(scope);
    set.set_ticket(with);
    set.set_key("a");
    set.set_value(value);
    v1::RendezvousSetResponse r;
    return stub->Set(&c, set, &r);
  };
  auto get = [&](const std::string& with, const std::string& key, std::string* value) {
    grpc::ClientContext c;
    v1::RendezvousGetRequest get;
    get.set_scope("job-000001/0");
    get.set_ticket(with);
    get.set_key(key);
    v1::RendezvousGetResponse r;
    grpc::Status s = stub->Get(&c, get, &r);
    *value = r.value();
    return s;
  };
  auto wait = [&](const std::vector<std::string>& keys, int64_t timeout_ms) {
    grpc::ClientContext c;
    v1::RendezvousWaitRequest wait;
    wait.set_scope("job-000001/0");
    wait.set_ticket(ticket);
    for (const std::string& k : keys) wait.add_keys(k);
    wait.set_timeout_ms(timeout_ms);
    v1::RendezvousWaitResponse r;
    return stub->Wait(&c, wait, &r);
  };
  ASSERT_TRUE(set("job-000001/0", ticket, "1").ok());
  std::string value;
  ASSERT_TRUE(get(ticket, "a", &value).ok());
  EXPECT_EQ(value, "1");
  EXPECT_EQ(get(ticket, "b", &value).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(wait({"a", "b"}, 100).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(wait({"a"}, 1000).ok());

  grpc::Status forged = get("0123456789abcdef0123456789abcdef", "a", &value);
  EXPECT_EQ(forged.error_code(), grpc::StatusCode::PERMISSION_DENIED) << forged.error_message();
  EXPECT_EQ(value, "");
  EXPECT_EQ(set("job-000001/0", "", "2").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(set("job-000002/0", ticket, "2").error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::Status big = set("job-000001/0", ticket, std::string(1 << 20, 'x'));
  EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << big.error_message();
  EXPECT_NE(big.error_message().find("1048576 bytes, over the attempt's limit"),
            std::string::npos) << big.error_message();
  ASSERT_TRUE(get(ticket, "a", &value).ok());
  EXPECT_EQ(value, "1");
}

TEST_F(GrpcServerTest, ShutdownEndsOpenStreams) {
  auto stub = v1::WorkerService::NewStub(channel_);
  grpc::ClientContext context;
  auto stream = stub->Connect(&context);
  v1::WorkerMessage hello;
  hello.mutable_hello()->mutable_device()->set_kind("cpu");
  ASSERT_TRUE(stream->Write(hello));
  v1::CoordinatorMessage msg;
  ASSERT_TRUE(stream->Read(&msg));

  auto start = std::chrono::steady_clock::now();
  server_->Shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1500));
  EXPECT_FALSE(stream->Read(&msg));
  EXPECT_FALSE(stream->Finish().ok());
}

// With tokens: JobService takes only the client token, WorkerService and RendezvousService only
// the worker token; a call without one, or with the other role's, is UNAUTHENTICATED and its
// message never quotes a token; health stays open.
class GrpcServerAuthTest : public ::testing::Test {
 protected:
  static constexpr char kClient[] = "client-secret-1";
  static constexpr char kWorker[] = "worker-secret-2";

  void SetUp() override {
    auto store = JobStore::Open(TempDir() + "/weft.db");
    ASSERT_TRUE(store.ok()) << store.status();
    auto c = Coordinator::Create(std::move(*store), CoordinatorOptions());
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    coordinator_->Start();
    auto server = CoordinatorServer::Start(coordinator_.get(), "127.0.0.1:0", {kClient, kWorker});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }
  std::shared_ptr<grpc::Channel> Channel(const std::string& token) const {
    return NewCoordinatorChannel(absl::StrCat("127.0.0.1:", server_->port()), {token});
  }
  // Every JobService method's status with `token`.
  std::vector<grpc::Status> JobCalls(const std::string& token) const {
    auto stub = v1::JobService::NewStub(Channel(token));
    std::vector<grpc::Status> out;
    auto call = [&](auto method, const auto& request, auto* response) {
      grpc::ClientContext c;
      c.set_deadline(In(10000));
      out.push_back(((*stub).*method)(&c, request, response));
    };
    v1::SubmitJobRequest submit;
    submit.mutable_spec()->set_name("x");
    v1::SubmitJobResponse submitted;
    call(&v1::JobService::Stub::SubmitJob, submit, &submitted);
    v1::GetJobRequest get;
    get.set_job_id("job-000001");
    v1::Job job;
    call(&v1::JobService::Stub::GetJob, get, &job);
    v1::ListJobsResponse jobs;
    call(&v1::JobService::Stub::ListJobs, v1::ListJobsRequest(), &jobs);
    v1::CancelJobRequest cancel;
    cancel.set_job_id("job-000001");
    call(&v1::JobService::Stub::CancelJob, cancel, &job);
    v1::ListWorkersResponse workers;
    call(&v1::JobService::Stub::ListWorkers, v1::ListWorkersRequest(), &workers);
    v1::JobTrace trace;
    call(&v1::JobService::Stub::GetJobTrace, get, &trace);
    v1::GetJobLogsRequest logs;
    logs.set_job_id("job-000001");
    logs.set_rank(0);
    v1::GetJobLogsResponse lines;
    call(&v1::JobService::Stub::GetJobLogs, logs, &lines);
    grpc::ClientContext watch_context;
    watch_context.set_deadline(In(10000));
    v1::WatchJobRequest watch;
    watch.set_job_id("job-000001");
    auto reader = stub->WatchJob(&watch_context, watch);
    v1::JobEvent event;
    while (reader->Read(&event)) {
    }
    out.push_back(reader->Finish());
    return out;
  }
  grpc::Status ConnectWorker(const std::string& token, bool* welcomed) const {
    auto stub = v1::WorkerService::NewStub(Channel(token));
    grpc::ClientContext context;
    context.set_deadline(In(10000));
    auto stream = stub->Connect(&context);
    v1::WorkerMessage hello;
    hello.mutable_hello()->mutable_device()->set_kind("cpu");
    v1::CoordinatorMessage msg;
    *welcomed = stream->Write(hello) && stream->Read(&msg) && msg.has_welcome();
    if (*welcomed) context.TryCancel();  // else Finish gives the server's status
    return stream->Finish();
  }
  // Set, Get and Wait of RendezvousService with `token`.
  std::vector<grpc::Status> RendezvousCalls(const std::string& token) {
    auto stub = v1::RendezvousService::NewStub(Channel(token));
    std::vector<grpc::Status> out;
    if (ticket_.empty()) {
      ticket_ = coordinator_->rendezvous()
                    ->Open("job-000001/0", RendezvousLimits::ForMesh({1}))
                    .value_or("");
    }
    {
      grpc::ClientContext c;
      c.set_deadline(In(10000));
      v1::RendezvousSetRequest set;
      set.set_scope("job-000001/0");
      set.set_ticket(ticket_);
      set.set_key("k");
      set.set_value("v");
      v1::RendezvousSetResponse r;
      out.push_back(stub->Set(&c, set, &r));
    }
    {
      grpc::ClientContext c;
      c.set_deadline(In(10000));
      v1::RendezvousGetRequest get;
      get.set_scope("job-000001/0");
      get.set_ticket(ticket_);
      get.set_key("k");
      v1::RendezvousGetResponse r;
      out.push_back(stub->Get(&c, get, &r));
    }
    {
      grpc::ClientContext c;
      c.set_deadline(In(10000));
      v1::RendezvousWaitRequest wait;
      wait.set_scope("job-000001/0");
      wait.set_ticket(ticket_);
      wait.add_keys("k");
      wait.set_timeout_ms(1000);
      v1::RendezvousWaitResponse r;
      out.push_back(stub->Wait(&c, wait, &r));
    }
    return out;
  }

  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorServer> server_;
  std::string ticket_;  // of the scope RendezvousCalls use, once opened
};

void ExpectRefused(const grpc::Status& s, const std::string& service, const std::string& what) {
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << what << ": " << s.error_message();
  EXPECT_NE(s.error_message().find(service), std::string::npos) << what << ": " << s.error_message();
  for (const char* token : {"client-secret-1", "worker-secret-2"}) {
    EXPECT_EQ(s.error_message().find(token), std::string::npos) << what << " quotes a token";
  }
}

TEST_F(GrpcServerAuthTest, JobServiceTakesOnlyTheClientToken) {
  for (const auto& [token, what] : {std::pair<std::string, std::string>{"", "no token"},
                                    {kWorker, "the worker token"},
                                    {"client-secret-", "a prefix of the client token"}}) {
    const std::vector<grpc::Status> calls = JobCalls(token);
    ASSERT_EQ(calls.size(), 8u);
    for (size_t i = 0; i < calls.size(); ++i) {
      ExpectRefused(calls[i], "weft.v1.JobService", what + ", call " + std::to_string(i));
    }
  }
  const std::vector<grpc::Status> calls = JobCalls(kClient);
  EXPECT_EQ(calls[0].error_code(), grpc::StatusCode::INVALID_ARGUMENT);  // the spec, not the token
  EXPECT_EQ(calls[1].error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(calls[2].ok()) << calls[2].error_message();
  EXPECT_TRUE(calls[4].ok()) << calls[4].error_message();
  EXPECT_EQ(calls[6].error_code(), grpc::StatusCode::NOT_FOUND);  // GetJobLogs: no such job
}

TEST_F(GrpcServerAuthTest, WorkerServicesTakeOnlyTheWorkerToken) {
  bool welcomed = true;
  for (const auto& [token, what] : {std::pair<std::string, std::string>{"", "no token"},
                                    {kClient, "the client token"},
                                    {"worker-secret-", "a prefix of the worker token"}}) {
    ExpectRefused(ConnectWorker(token, &welcomed), "weft.v1.WorkerService", what);
    EXPECT_FALSE(welcomed) << what;
    const std::vector<grpc::Status> calls = RendezvousCalls(token);
    ASSERT_EQ(calls.size(), 3u);
    for (size_t i = 0; i < calls.size(); ++i) {
      ExpectRefused(calls[i], "weft.v1.RendezvousService", what + ", call " + std::to_string(i));
    }
  }
  ConnectWorker(kWorker, &welcomed);
  EXPECT_TRUE(welcomed);
  for (const grpc::Status& s : RendezvousCalls(kWorker)) EXPECT_TRUE(s.ok()) << s.error_message();
}

TEST_F(GrpcServerAuthTest, HealthStaysOpen) {
  EXPECT_EQ(weft::testing::HealthStatus(Channel("")), "SERVING");
}

// With a client token, reflection asks for it too: it lists the services, a client's business.
TEST_F(GrpcServerAuthTest, ReflectionTakesOnlyTheClientToken) {
  for (const std::string& token : {std::string(), std::string(kWorker)}) {
    ReflectionStream refused(Channel(""), token);
    EXPECT_FALSE(refused.ListServices().has_value()) << token;
    EXPECT_EQ(refused.Close().error_code(), grpc::StatusCode::CANCELLED) << token;
  }
  ReflectionStream allowed(Channel(""), kClient);
  std::optional<std::string> reply = allowed.ListServices();
  ASSERT_TRUE(reply.has_value());
  EXPECT_NE(reply->find("weft.v1.JobService"), std::string::npos);
  EXPECT_TRUE(allowed.Close().ok());
}

// With a certificate: a channel that checks it against its CA gets through (tokens as before);
// a plaintext channel, one that trusts another CA and one that expects another name get no call
// through, nor does a TLS channel to a plaintext server. Each is UNAVAILABLE.
class GrpcServerTlsTest : public ::testing::Test {
 protected:
  static constexpr char kClient[] = "client-secret-1";

  void SetUp() override {
    const std::string dir = TempDir();
    absl::StatusOr<TestCertificate> server = MakeSelfSignedCertificate(dir, "server");
    absl::StatusOr<TestCertificate> other = MakeSelfSignedCertificate(dir, "other");
    ASSERT_TRUE(server.ok()) << server.status();
    ASSERT_TRUE(other.ok()) << other.status();
    absl::StatusOr<std::string> cert = ReadPemCertificates(server->cert_path);
    absl::StatusOr<std::string> key = ReadPemPrivateKey(server->key_path);
    absl::StatusOr<std::string> other_cert = ReadPemCertificates(other->cert_path);
    ASSERT_TRUE(cert.ok() && key.ok() && other_cert.ok());
    ca_ = *cert;
    other_ca_ = *other_cert;
    auto store = JobStore::Open(dir + "/weft.db");
    ASSERT_TRUE(store.ok()) << store.status();
    auto c = Coordinator::Create(std::move(*store), CoordinatorOptions());
    ASSERT_TRUE(c.ok()) << c.status();
    coordinator_ = std::move(*c);
    coordinator_->Start();
    auto started = CoordinatorServer::Start(coordinator_.get(), "127.0.0.1:0", {kClient, "w"},
                                            {*cert, *key});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(*started);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }
  // ListJobs through a channel with `options` to `port`.
  static grpc::Status ListJobs(int port, const CoordinatorChannelOptions& options) {
    auto stub = v1::JobService::NewStub(
        NewCoordinatorChannel(absl::StrCat("127.0.0.1:", port), options));
    grpc::ClientContext context;
    context.set_deadline(In(10000));
    v1::ListJobsResponse jobs;
    return stub->ListJobs(&context, v1::ListJobsRequest(), &jobs);
  }

  std::string ca_, other_ca_;
  std::unique_ptr<Coordinator> coordinator_;
  std::unique_ptr<CoordinatorServer> server_;
};

TEST_F(GrpcServerTlsTest, OnlyChannelsThatTrustTheCertificateGetThrough) {
  const grpc::Status trusted = ListJobs(server_->port(), {kClient, ca_});
  EXPECT_TRUE(trusted.ok()) << trusted.error_message();
  // The certificate names localhost too.
  const grpc::Status named = ListJobs(server_->port(), {kClient, ca_, "localhost"});
  EXPECT_TRUE(named.ok()) << named.error_message();
  // TLS comes before the token: without one the call gets through TLS and is refused.
  EXPECT_EQ(ListJobs(server_->port(), {"", ca_}).error_code(), grpc::StatusCode::UNAUTHENTICATED);

  for (const auto& [options, what] :
       {std::pair<CoordinatorChannelOptions, std::string>{{kClient}, "plaintext"},
        {{kClient, other_ca_}, "another CA"},
        {{kClient, ca_, "weft.example.com"}, "another name"}}) {
    const grpc::Status s = ListJobs(server_->port(), options);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << what << ": " << s.error_message();
  }
}

TEST_F(GrpcServerTlsTest, ATlsChannelToAPlaintextServerGetsNoCallThrough) {
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto c = Coordinator::Create(std::move(*store), CoordinatorOptions());
  ASSERT_TRUE(c.ok()) << c.status();
  (*c)->Start();
  auto plain = CoordinatorServer::Start(c->get(), "127.0.0.1:0");
  ASSERT_TRUE(plain.ok()) << plain.status();
  const grpc::Status s = ListJobs((*plain)->port(), {"", ca_});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  (*plain)->Shutdown();
}

// A SubmitJob's planning (here a stand-in that plans until its StopCheck says stop) is held
// neither past the call's deadline nor past the server's shutdown: the client's deadline of
// 50 ms stops it with DEADLINE_EXCEEDED and the coordinator serves on; Shutdown stops the next
// one, UNAVAILABLE, and returns.
TEST(GrpcSubmitPlanningTest, TheCallsDeadlineAndShutdownStopAPlanInProgress) {
  absl::Mutex mu;
  int planning = 0;
  std::vector<absl::Status> stopped;
  CoordinatorOptions options;
  options.prepare_spec = [](v1::JobSpec*) { return absl::OkStatus(); };
  options.plan = [&](const v1::JobSpec&, const planner::StopCheck& stop)
      -> absl::StatusOr<std::shared_ptr<const JobPlan>> {
    {
      absl::MutexLock lock(&mu);
      ++planning;
    }
    absl::Status s;
    while ((s = stop()).ok()) absl::SleepFor(absl::Milliseconds(1));
    absl::MutexLock lock(&mu);
    stopped.push_back(s);
    return s;
  };
  auto store = JobStore::Open(TempDir() + "/weft.db");
  ASSERT_TRUE(store.ok()) << store.status();
  auto c = Coordinator::Create(std::move(*store), options);
  ASSERT_TRUE(c.ok()) << c.status();
  (*c)->Start();
  auto server = CoordinatorServer::Start(c->get(), "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub = v1::JobService::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", (*server)->port()), grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest request;
  request.mutable_spec()->set_name("endless");
  request.mutable_spec()->mutable_mesh()->add_shape(1);
  request.mutable_spec()->mutable_mesh()->add_dim_names("dp");
  auto stops = [&](size_t n) {
    absl::MutexLock lock(&mu);
    auto enough = [&] { return stopped.size() >= n; };
    return mu.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(60));  // a safety bound
  };

  {
    grpc::ClientContext context;
    context.set_deadline(In(50));
    v1::SubmitJobResponse response;
    const grpc::Status s = stub->SubmitJob(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  }
  ASSERT_TRUE(stops(1));
  {
    // The server's deadline is set when the call arrives, a little after the client's: either it
    // passes first, or the client's runs out first and the cancellation that follows stops it.
    absl::MutexLock lock(&mu);
    const bool deadline = stopped[0].code() == absl::StatusCode::kDeadlineExceeded &&
                          stopped[0].message() == "the call's deadline passed";
    const bool cancelled = stopped[0].code() == absl::StatusCode::kCancelled &&
                           stopped[0].message() == "the call was cancelled";
    EXPECT_TRUE(deadline || cancelled) << stopped[0];
  }
  grpc::ClientContext list_context;
  list_context.set_deadline(In(10000));
  v1::ListJobsResponse jobs;
  const grpc::Status listed = stub->ListJobs(&list_context, v1::ListJobsRequest(), &jobs);
  EXPECT_TRUE(listed.ok()) << listed.error_message();
  EXPECT_EQ(jobs.jobs_size(), 0);

  grpc::Status submitted;
  std::thread submit([&] {
    grpc::ClientContext context;
    context.set_deadline(In(600000));
    v1::SubmitJobResponse response;
    submitted = stub->SubmitJob(&context, request, &response);
  });
  {
    absl::MutexLock lock(&mu);
    auto second = [&] { return planning >= 2; };
    ASSERT_TRUE(mu.AwaitWithTimeout(absl::Condition(&second), absl::Seconds(60)));
  }
  absl::Notification shut_down;
  std::thread shutdown([&] {
    (*server)->Shutdown();
    shut_down.Notify();
  });
  ASSERT_TRUE(shut_down.WaitForNotificationWithTimeout(absl::Seconds(60)))
      << "the server's shutdown waited for a SubmitJob still planning";
  shutdown.join();
  submit.join();
  EXPECT_FALSE(submitted.ok());
  ASSERT_TRUE(stops(2));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(stopped[1].code(), absl::StatusCode::kUnavailable) << stopped[1];
  EXPECT_EQ(stopped[1].message(), "the coordinator is shutting down");
}

}  // namespace
}  // namespace weft::coordinator::rpc
