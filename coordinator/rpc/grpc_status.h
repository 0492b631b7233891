// absl::Status <-> grpc::Status: the codes are the same numbers in both.
#ifndef WEFT_COORDINATOR_RPC_GRPC_STATUS_H_
#define WEFT_COORDINATOR_RPC_GRPC_STATUS_H_

#include <string>

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace weft::coordinator::rpc {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace weft::coordinator::rpc

#endif  // WEFT_COORDINATOR_RPC_GRPC_STATUS_H_
