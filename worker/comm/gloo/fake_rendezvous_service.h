// FakeRendezvousService: an in-memory RendezvousService for tests (the coordinator's contract,
// kept minimal): a map per scope; Wait blocks until every key is set or timeout_ms passes. A
// scope belongs to the ticket its first call carried: a call with another is PERMISSION_DENIED.
//
// E.g.
//   FakeRendezvousService service;
//   builder.RegisterService(&service);
#ifndef WEFT_WORKER_COMM_GLOO_FAKE_RENDEZVOUS_SERVICE_H_
#define WEFT_WORKER_COMM_GLOO_FAKE_RENDEZVOUS_SERVICE_H_

#include <algorithm>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft {

class FakeRendezvousService final : public v1::RendezvousService::Service {
 public:
  grpc::Status Set(grpc::ServerContext*, const v1::RendezvousSetRequest* req,
                   v1::RendezvousSetResponse*) override {
    absl::MutexLock lock(&mu_);
    if (!TicketFits(req->scope(), req->ticket())) return WrongTicket();
    kv_[req->scope()][req->key()] = req->value();
    return grpc::Status::OK;
  }
  grpc::Status Get(grpc::ServerContext*, const v1::RendezvousGetRequest* req,
                   v1::RendezvousGetResponse* resp) override {
    absl::MutexLock lock(&mu_);
    if (!TicketFits(req->scope(), req->ticket())) return WrongTicket();
    auto scope = kv_.find(req->scope());
    if (scope == kv_.end() || scope->second.count(req->key()) == 0) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, req->key());
    }
    resp->set_value(scope->second[req->key()]);
    return grpc::Status::OK;
  }
  grpc::Status Wait(grpc::ServerContext* ctx, const v1::RendezvousWaitRequest* req,
                    v1::RendezvousWaitResponse*) override {
    const absl::Time deadline = absl::Now() + absl::Milliseconds(req->timeout_ms());
    absl::MutexLock lock(&mu_);
    if (!TicketFits(req->scope(), req->ticket())) return WrongTicket();
    auto all_present = [&]() {
      auto scope = kv_.find(req->scope());
      for (const std::string& k : req->keys()) {
        if (scope == kv_.end() || scope->second.count(k) == 0) return false;
      }
      return true;
    };
    while (!all_present()) {
      if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "keys not set in time");
      }
      mu_.AwaitWithTimeout(absl::Condition(&all_present), std::min(left, absl::Milliseconds(100)));
    }
    return grpc::Status::OK;
  }

 private:
  bool TicketFits(const std::string& scope, const std::string& ticket)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return tickets_.emplace(scope, ticket).first->second == ticket;
  }
  static grpc::Status WrongTicket() {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "the ticket does not match");
  }

  absl::Mutex mu_;
  std::map<std::string, std::string> tickets_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, std::string>> kv_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_WORKER_COMM_GLOO_FAKE_RENDEZVOUS_SERVICE_H_
