// The real gRPC server in-process on 127.0.0.1 with a port picked at run time.
#include "coordinator/rpc/grpc_server.h"

#include <gtest/gtest.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <stdlib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
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

TEST_F(GrpcServerTest, HealthServiceSaysServing) {
  // grpc.health.v1.Health/Check with an empty HealthCheckRequest (service ""), through the
  // generic stub: the reply is HealthCheckResponse{status: SERVING} = bytes 08 01.
  grpc::GenericStub stub(channel_);
  grpc::Slice empty("", 0);
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(In(10000));
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                 &response, [&](grpc::Status s) {
                   status = s;
                   done.Notify();
                 });
  done.WaitForNotification();
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
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

TEST_F(GrpcServerTest, RendezvousSetGetWait) {
  auto stub = v1::RendezvousService::NewStub(channel_);
  {
    grpc::ClientContext c;
    v1::RendezvousSetRequest set;
    set.set_scope("job-000001/0");
    set.set_key("a");
    set.set_value("1");
    v1::RendezvousSetResponse r;
    ASSERT_TRUE(stub->Set(&c, set, &r).ok());
  }
  {
    grpc::ClientContext c;
    v1::RendezvousGetRequest get;
    get.set_scope("job-000001/0");
    get.set_key("a");
    v1::RendezvousGetResponse r;
    ASSERT_TRUE(stub->Get(&c, get, &r).ok());
    EXPECT_EQ(r.value(), "1");
  }
  {
    grpc::ClientContext c;
    v1::RendezvousGetRequest get;
    get.set_scope("job-000001/0");
    get.set_key("b");
    v1::RendezvousGetResponse r;
    EXPECT_EQ(stub->Get(&c, get, &r).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext c;
    v1::RendezvousWaitRequest wait;
    wait.set_scope("job-000001/0");
    wait.add_keys("a");
    wait.add_keys("b");
    wait.set_timeout_ms(100);
    v1::RendezvousWaitResponse r;
    EXPECT_EQ(stub->Wait(&c, wait, &r).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  {
    grpc::ClientContext c;
    v1::RendezvousWaitRequest wait;
    wait.set_scope("job-000001/0");
    wait.add_keys("a");
    wait.set_timeout_ms(1000);
    v1::RendezvousWaitResponse r;
    EXPECT_TRUE(stub->Wait(&c, wait, &r).ok());
  }
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

}  // namespace
}  // namespace weft::coordinator::rpc
