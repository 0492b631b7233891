#include "coordinator/rpc/open_call_guard.h"

#include <map>
#include <utility>

#include <grpcpp/server_context.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/bearer_token.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator::rpc {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr absl::Duration kLogEvery = absl::Minutes(1);

const char* Describe(OpenCallGuard::Kind kind) {
  return kind == OpenCallGuard::Kind::kReflection ? "server reflection stream"
                                                  : "health Watch stream";
}

// One per bounded call: admits it when its metadata arrives, releases it when the call ends
// (gRPC destroys a call's interceptors with the call).
class GuardInterceptor : public grpc::experimental::Interceptor {
 public:
  GuardInterceptor(std::shared_ptr<OpenCallGuard> guard, grpc::experimental::ServerRpcInfo* info,
                   OpenCallGuard::Kind kind)
      : guard_(std::move(guard)), info_(info), kind_(kind) {}
  ~GuardInterceptor() override {
    if (admitted_) guard_->Release(kind_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      std::multimap<grpc::string_ref, grpc::string_ref>* metadata =
          methods->GetRecvInitialMetadata();
      std::string authorization;
      bool has_authorization = false;
      if (metadata != nullptr) {
        auto it = metadata->find(kAuthorizationKey);
        if (it != metadata->end()) {
          authorization.assign(it->second.data(), it->second.size());
          has_authorization = true;
        }
      }
      admitted_ = guard_->Admit(kind_, has_authorization ? &authorization : nullptr);
      // The handler still runs, but on a cancelled call: its first read fails and it returns.
      if (!admitted_) info_->server_context()->TryCancel();
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<OpenCallGuard> guard_;
  grpc::experimental::ServerRpcInfo* const info_;  // not owned; outlives this interceptor
  const OpenCallGuard::Kind kind_;
  bool admitted_ = false;
};

class GuardFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit GuardFactory(std::shared_ptr<OpenCallGuard> guard) : guard_(std::move(guard)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const OpenCallGuard::Kind kind = OpenCallGuard::KindOf(info->method());
    if (kind == OpenCallGuard::Kind::kOther) return nullptr;  // the services check their own
    return new GuardInterceptor(guard_, info, kind);
  }

 private:
  const std::shared_ptr<OpenCallGuard> guard_;
};

}  // namespace

OpenCallGuard::Kind OpenCallGuard::KindOf(absl::string_view method) {
  // Both generations of the reflection service (v1alpha is what gRPC 1.51 serves).
  if (absl::StartsWith(method, "/grpc.reflection.")) return Kind::kReflection;
  if (method == "/grpc.health.v1.Health/Watch") return Kind::kHealthWatch;
  return Kind::kOther;
}

OpenCallGuard::OpenCallGuard(std::string client_token, Limits limits)
    : client_token_(std::move(client_token)), limits_(limits) {}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> OpenCallGuard::Factory() {
  return std::make_unique<GuardFactory>(shared_from_this());
}

std::atomic<int>& OpenCallGuard::Counter(Kind kind) {
  return kind == Kind::kReflection ? reflection_ : health_watches_;
}

int OpenCallGuard::open(Kind kind) const {
  if (kind == Kind::kReflection) return reflection_.load();
  if (kind == Kind::kHealthWatch) return health_watches_.load();
  return 0;
}

bool OpenCallGuard::Admit(Kind kind, const std::string* authorization) {
  if (kind == Kind::kOther) return true;
  if (kind == Kind::kReflection && !client_token_.empty() &&
      (authorization == nullptr || !BearerMatches(*authorization, client_token_))) {
    LogRefusal(kind, "without the client token");
    return false;
  }
  const int bound =
      kind == Kind::kReflection ? limits_.max_reflection_streams : limits_.max_health_watches;
  std::atomic<int>& open = Counter(kind);
  int now = open.load();
  while (true) {
    if (now >= bound) {
      LogRefusal(kind, absl::StrCat("over the bound of ", bound, " open at once"));
      return false;
    }
    if (open.compare_exchange_weak(now, now + 1)) return true;
  }
}

void OpenCallGuard::Release(Kind kind) {
  if (kind != Kind::kOther) Counter(kind).fetch_sub(1);
}

void OpenCallGuard::LogRefusal(Kind kind, absl::string_view why) {
  refused_.fetch_add(1);
  std::atomic<int64_t>& last = last_log_ns_[static_cast<int>(kind)];
  const int64_t now = absl::GetCurrentTimeNanos();
  int64_t before = last.load();
  if (now - before < absl::ToInt64Nanoseconds(kLogEvery)) return;
  if (!last.compare_exchange_strong(before, now)) return;  // another thread logs this minute
  spdlog::warn("cancelled a {} {} ({} refused so far; logged at most once a minute)",
               Describe(kind), std::string(why), refused_.load());
}

}  // namespace weft::coordinator::rpc
