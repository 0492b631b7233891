// RendezvousStore against a small in-process RendezvousService on 127.0.0.1 (port picked at run
// time), and two Gloo ranks bootstrapping through it.
#include "worker/comm/gloo/rendezvous_store.h"

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gloo/common/error.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "worker/comm/gloo/fake_rendezvous_service.h"
#include "worker/comm/gloo/gloo_communicator.h"

namespace weft {
namespace {

class RendezvousStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override { server_->Shutdown(); }

  std::unique_ptr<RendezvousStore> Store(const std::string& scope, absl::Duration timeout,
                                         const std::string& ticket = "ticket") {
    return std::make_unique<RendezvousStore>(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                            grpc::InsecureChannelCredentials()),
        scope, ticket, timeout);
  }

  FakeRendezvousService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(RendezvousStoreTest, SetThenGetAcrossClientsInOneScope) {
  auto a = Store("job-1/attempt-0", absl::Seconds(5));
  auto b = Store("job-1/attempt-0", absl::Seconds(5));
  std::vector<char> value = {'a', '\0', 'b'};
  a->set("k", value);
  EXPECT_EQ(b->get("k"), value);
  b->wait({"k"}, std::chrono::milliseconds(100));
}

TEST_F(RendezvousStoreTest, GetBlocksUntilSet) {
  auto a = Store("s", absl::Seconds(10));
  auto b = Store("s", absl::Seconds(10));
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    a->set("late", {'x'});
  });
  EXPECT_EQ(b->get("late"), std::vector<char>{'x'});
  setter.join();
}

TEST_F(RendezvousStoreTest, ScopesAreSeparate) {
  auto a = Store("attempt-0", absl::Seconds(5));
  auto b = Store("attempt-1", absl::Seconds(5));
  a->set("k", {'0'});
  EXPECT_THROW(b->wait({"k"}, std::chrono::milliseconds(200)), gloo::IoException);
}

TEST_F(RendezvousStoreTest, WaitTimesOut) {
  auto a = Store("s", absl::Seconds(5));
  try {
    a->wait({"never"}, std::chrono::milliseconds(200));
    FAIL() << "wait returned";
  } catch (const gloo::IoException& e) {
    EXPECT_NE(std::string(e.what()).find("Timed out waiting 200ms for never"), std::string::npos)
        << e.what();
  }
}

TEST_F(RendezvousStoreTest, CancelStopsAWaitInFlight) {
  auto a = Store("s", absl::Seconds(60));
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    a->Cancel();
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(a->wait({"never"}), gloo::IoException);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  canceller.join();
  EXPECT_THROW(a->set("k", {'1'}), gloo::IoException);
}

// Every call carries the store's ticket: a store holding another one for the scope neither
// reads, waits on nor writes its keys.
TEST_F(RendezvousStoreTest, EveryCallCarriesTheTicket) {
  auto owner = Store("job-1/0", absl::Seconds(5), "right");
  auto other = Store("job-1/0", absl::Seconds(5), "wrong");
  owner->set("k", {'1'});
  EXPECT_EQ(owner->get("k"), std::vector<char>{'1'});
  for (auto call : std::vector<std::function<void()>>{
           [&] { other->get("k"); }, [&] { other->wait({"k"}); },
           [&] { other->set("k", {'2'}); }}) {
    try {
      call();
      ADD_FAILURE() << "a call with the wrong ticket succeeded";
    } catch (const gloo::IoException& e) {
      EXPECT_NE(std::string(e.what()).find("ticket does not match"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(owner->get("k"), std::vector<char>{'1'});
}

TEST_F(RendezvousStoreTest, UnreachableCoordinatorIsAnError) {
  // Port 1 on loopback: nothing listens there.
  RendezvousStore store(
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()), "s", "ticket",
      absl::Seconds(1));
  EXPECT_THROW(store.wait({"k"}, std::chrono::milliseconds(100)), gloo::IoException);
}

TEST_F(RendezvousStoreTest, GlooRanksBootstrapThroughTheService) {
  v1::CommGroup group;
  group.set_id(1);
  group.add_ranks(0);
  group.add_ranks(1);
  group.set_mesh_dims("dp");
  std::vector<float> results(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto store = Store("job-7/attempt-0", absl::Seconds(20));
      GlooCommunicatorFactory factory(store.get(), r, "127.0.0.1", absl::Seconds(20));
      auto comm = factory.Create(group);
      ASSERT_TRUE(comm.ok()) << comm.status();
      float x = r + 1.0f;
      ASSERT_TRUE((*comm)->AllReduce(&x, 1, v1::F32, ReduceOp::kSum).ok());
      results[r] = x;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(results, (std::vector<float>{3.0f, 3.0f}));
}

TEST_F(RendezvousStoreTest, MissingRankTimesOutThroughTheService) {
  v1::CommGroup group;
  group.set_id(2);
  group.add_ranks(0);
  group.add_ranks(1);
  auto store = Store("job-8/attempt-0", absl::Seconds(1));
  GlooCommunicatorFactory factory(store.get(), 0, "127.0.0.1", absl::Seconds(1));
  auto comm = factory.Create(group);
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
}

}  // namespace
}  // namespace weft
