// Every channel to the coordinator is made here: weftctl's (JobService), a worker's stream
// (WorkerService) and the rendezvous of its communicators (RendezvousService), so that each
// carries the same credentials. A call sends the role's bearer token (common/bearer_token.h);
// with a CA certificate the channel is TLS and checks the coordinator's certificate against it
// (common/tls.h), else it is plaintext, token included.
//
// E.g.
//   CoordinatorChannelOptions options;
//   ASSIGN_OR_RETURN(options.token, ReadBearerTokenFile("/run/credentials/weft-worker/token"));
//   ASSIGN_OR_RETURN(options.tls_ca_pem, ReadPemCertificates("/etc/weft/ca.crt"));
//   std::shared_ptr<grpc::Channel> channel = NewCoordinatorChannel("10.0.0.5:7070", options);
#ifndef WEFT_COMMON_COORDINATOR_CHANNEL_H_
#define WEFT_COMMON_COORDINATOR_CHANNEL_H_

#include <memory>
#include <string>

#include "grpcpp/grpcpp.h"

namespace weft {

struct CoordinatorChannelOptions {
  // Sent as `authorization: Bearer <token>` with every call; empty: none.
  std::string token;
  // PEM certificates the coordinator's certificate must chain to; empty: plaintext.
  std::string tls_ca_pem;
  // The name the coordinator's certificate must hold, where it is not the address's host (a
  // certificate for weft.example.com reached at 10.0.0.5); empty: the host. TLS only.
  std::string tls_server_name;
};

std::shared_ptr<grpc::Channel> NewCoordinatorChannel(
    const std::string& address, const CoordinatorChannelOptions& options,
    grpc::ChannelArguments args = grpc::ChannelArguments());

}  // namespace weft

#endif  // WEFT_COMMON_COORDINATOR_CHANNEL_H_
