// OpenCallGuard: bounds the coordinator's calls that its own services do not authenticate: gRPC
// server reflection (grpc.reflection.*, whose streams each hold a server thread for as long as
// the client keeps them open) and health's Watch streams. Without a bound, about 1,000 idle
// reflection streams, which need no token, took every thread of the server's pool, and every
// other call then failed RESOURCE_EXHAUSTED (issue 30).
//
// - Reflection asks for the client token when the coordinator has one (`authorization: Bearer
//   <client token>`, as JobService does): it lists the services, which is a client's business.
// - At most `max_reflection_streams` reflection streams and `max_health_watches` health Watch
//   streams are open at once; a call beyond the bound is cancelled as it starts, and the guard
//   logs it (at most once a minute per kind).
// A refused call ends CANCELLED: a gRPC C++ server interceptor can cancel a call but not give it
// a status of its own (gRPC 1.51). Health's Check (unary, what load balancers and Kubernetes ask)
// is never bounded.
//
// E.g.
//   auto guard = std::make_shared<OpenCallGuard>(tokens.client, OpenCallGuard::Limits{});
//   std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> f;
//   f.push_back(guard->Factory());
//   builder.experimental().SetInterceptorCreators(std::move(f));
#ifndef WEFT_COORDINATOR_RPC_OPEN_CALL_GUARD_H_
#define WEFT_COORDINATOR_RPC_OPEN_CALL_GUARD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <grpcpp/support/server_interceptor.h>

#include "absl/strings/string_view.h"

namespace weft::coordinator::rpc {

class OpenCallGuard : public std::enable_shared_from_this<OpenCallGuard> {
 public:
  struct Limits {
    // grpcurl and similar tools open one at a time; a few dozen is generous.
    int max_reflection_streams = 16;
    // A health Watch is one per watching client (a proxy, a sidecar).
    int max_health_watches = 256;
  };
  // What a call is to the guard, by its method name.
  enum class Kind { kOther, kReflection, kHealthWatch };
  static Kind KindOf(absl::string_view method);

  // `client_token` empty: reflection is open, as the JobService is.
  OpenCallGuard(std::string client_token, Limits limits);

  // A factory for ServerBuilder::experimental().SetInterceptorCreators; it shares this guard.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> Factory();

  // Open bounded calls now, and calls refused so far (by the token or the bound).
  int open(Kind kind) const;
  int64_t refused() const { return refused_.load(); }

  // Whether a call of `kind` whose authorization metadata is `authorization` (null: none) may
  // start; if so it counts as open until Release(kind). Logs a refusal.
  bool Admit(Kind kind, const std::string* authorization);
  void Release(Kind kind);

 private:
  std::atomic<int>& Counter(Kind kind);
  void LogRefusal(Kind kind, absl::string_view why);

  const std::string client_token_;
  const Limits limits_;
  std::atomic<int> reflection_{0};
  std::atomic<int> health_watches_{0};
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> last_log_ns_[3] = {};
};

}  // namespace weft::coordinator::rpc

#endif  // WEFT_COORDINATOR_RPC_OPEN_CALL_GUARD_H_
