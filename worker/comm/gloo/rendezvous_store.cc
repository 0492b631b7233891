#include "worker/comm/gloo/rendezvous_store.h"

#include <algorithm>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gloo/common/error.h"
#include "grpcpp/grpcpp.h"

namespace weft {
namespace {

// Set and Get answer at once; give a slow coordinator this long before failing.
constexpr std::chrono::seconds kRpcTimeout(30);
// Wait's own timeout is enforced by the server; the RPC deadline only catches a silent one.
constexpr std::chrono::seconds kWaitSlack(5);

std::chrono::system_clock::time_point Deadline(std::chrono::milliseconds d) {
  return std::chrono::system_clock::now() + d;
}

}  // namespace

RendezvousStore::RendezvousStore(std::shared_ptr<grpc::ChannelInterface> channel,
                                 std::string scope, std::string ticket,
                                 absl::Duration wait_timeout)
    : RendezvousStore(v1::RendezvousService::NewStub(std::move(channel)), std::move(scope),
                      std::move(ticket), wait_timeout) {}

RendezvousStore::RendezvousStore(std::unique_ptr<v1::RendezvousService::StubInterface> stub,
                                 std::string scope, std::string ticket,
                                 absl::Duration wait_timeout)
    : stub_(std::move(stub)),
      scope_(std::move(scope)),
      ticket_(std::move(ticket)),
      wait_timeout_(std::max<int64_t>(1, absl::ToInt64Milliseconds(wait_timeout))) {}

RendezvousStore::~RendezvousStore() = default;

void RendezvousStore::Track(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  if (cancelled_) {
    throw gloo::IoException(absl::StrCat("rendezvous scope ", scope_, ": cancelled"));
  }
  in_flight_.insert(ctx);
}

void RendezvousStore::Untrack(grpc::ClientContext* ctx) {
  absl::MutexLock lock(&mu_);
  in_flight_.erase(ctx);
}

void RendezvousStore::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
}

void RendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(kRpcTimeout));
  ctx.set_wait_for_ready(true);
  Track(&ctx);
  absl::Cleanup untrack = [&] { Untrack(&ctx); };
  v1::RendezvousSetRequest req;
  req.set_scope(scope_);
  req.set_ticket(ticket_);
  req.set_key(key);
  req.set_value(std::string(data.begin(), data.end()));
  v1::RendezvousSetResponse resp;
  grpc::Status s = stub_->Set(&ctx, req, &resp);
  if (!s.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous set of ", key, " in scope ", scope_, ": ",
                                         s.error_message()));
  }
}

std::vector<char> RendezvousStore::get(const std::string& key) {
  wait({key}, wait_timeout_);
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(kRpcTimeout));
  ctx.set_wait_for_ready(true);
  Track(&ctx);
  absl::Cleanup untrack = [&] { Untrack(&ctx); };
  v1::RendezvousGetRequest req;
  req.set_scope(scope_);
  req.set_ticket(ticket_);
  req.set_key(key);
  v1::RendezvousGetResponse resp;
  grpc::Status s = stub_->Get(&ctx, req, &resp);
  if (!s.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous get of ", key, " in scope ", scope_, ": ",
                                         s.error_message()));
  }
  return std::vector<char>(resp.value().begin(), resp.value().end());
}

void RendezvousStore::wait(const std::vector<std::string>& keys) { wait(keys, wait_timeout_); }

void RendezvousStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  // Gloo passes kNoTimeout (zero) for "no timeout"; use ours instead of waiting forever.
  const std::chrono::milliseconds t = timeout.count() > 0 ? timeout : wait_timeout_;
  grpc::ClientContext ctx;
  ctx.set_deadline(Deadline(t + kWaitSlack));
  ctx.set_wait_for_ready(true);
  Track(&ctx);
  absl::Cleanup untrack = [&] { Untrack(&ctx); };
  v1::RendezvousWaitRequest req;
  req.set_scope(scope_);
  req.set_ticket(ticket_);
  for (const std::string& k : keys) req.add_keys(k);
  req.set_timeout_ms(t.count());
  v1::RendezvousWaitResponse resp;
  grpc::Status s = stub_->Wait(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    throw gloo::IoException(absl::StrCat("Timed out waiting ", t.count(), "ms for ",
                                         absl::StrJoin(keys, ","), " in rendezvous scope ",
                                         scope_));
  }
  if (!s.ok()) {
    throw gloo::IoException(absl::StrCat("rendezvous wait for ", absl::StrJoin(keys, ","),
                                         " in scope ", scope_, ": ", s.error_message()));
  }
}

}  // namespace weft
