// Tests' gRPC health checks (grpc.health.v1.Health/Check) through the generic stub, so that a
// test needs no health protos: what a load balancer or Kubernetes asks the coordinator.
//
// E.g.
//   EXPECT_EQ(HealthStatus(FreshChannel("127.0.0.1:7070")), "SERVING");
#ifndef WEFT_COMMON_TESTING_HEALTH_H_
#define WEFT_COMMON_TESTING_HEALTH_H_

#include <memory>
#include <string>

#include <grpcpp/channel.h>

namespace weft::testing {

// A channel of its own (its own connection, not one shared with other channels): a call on it
// shows whether the server accepts new connections.
std::shared_ptr<grpc::Channel> FreshChannel(const std::string& address);

// Health/Check (service "") over `channel`, with a 10 s deadline: "SERVING", "NOT_SERVING", or
// the call's error ("error <code>: <message>").
std::string HealthStatus(const std::shared_ptr<grpc::Channel>& channel);

}  // namespace weft::testing

#endif  // WEFT_COMMON_TESTING_HEALTH_H_
