#include "coordinator/rendezvous.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft::coordinator {
namespace {

// How often a waiter looks at its caller's cancellation flag.
constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(50);

}  // namespace

std::shared_ptr<Rendezvous::Scope> Rendezvous::FindOrCreate(const std::string& scope) {
  std::shared_ptr<Scope>& s = scopes_[scope];
  if (s == nullptr) s = std::make_shared<Scope>();
  return s;
}

absl::Status Rendezvous::Set(const std::string& scope, const std::string& key, std::string value) {
  if (scope.empty() || key.empty()) {
    return absl::InvalidArgumentError("rendezvous Set: scope and key must not be empty");
  }
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  FindOrCreate(scope)->values[key] = std::move(value);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Rendezvous::Get(const std::string& scope, const std::string& key) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  auto it = scopes_.find(scope);
  if (it != scopes_.end()) {
    auto v = it->second->values.find(key);
    if (v != it->second->values.end()) return v->second;
  }
  return absl::NotFoundError(absl::StrCat("rendezvous scope ", scope, " has no key ", key));
}

absl::Status Rendezvous::Wait(const std::string& scope, const std::vector<std::string>& keys,
                              absl::Duration timeout, const std::function<bool()>& cancelled) {
  const absl::Time deadline =
      timeout > absl::ZeroDuration() ? absl::Now() + timeout : absl::InfiniteFuture();
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  std::shared_ptr<Scope> s = FindOrCreate(scope);
  auto missing = [&]() {
    std::vector<std::string> out;
    for (const std::string& k : keys) {
      if (s->values.find(k) == s->values.end()) out.push_back(k);
    }
    return out;
  };
  auto ready = [&]() { return shut_down_ || s->dropped || missing().empty(); };
  while (true) {
    absl::Duration wait = std::min(kCancelPollInterval, deadline - absl::Now());
    mu_.AwaitWithTimeout(absl::Condition(&ready), std::max(wait, absl::ZeroDuration()));
    if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
    if (s->dropped) {
      return absl::AbortedError(absl::StrCat("rendezvous scope ", scope, " ended (job attempt over)"));
    }
    std::vector<std::string> absent = missing();
    if (absent.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rendezvous scope ", scope, ": still missing ", absl::StrJoin(absent, ", "),
                       " after ", absl::FormatDuration(timeout)));
    }
    if (cancelled && cancelled()) {
      return absl::CancelledError(absl::StrCat("rendezvous wait on ", scope, " cancelled"));
    }
  }
}

void Rendezvous::DropScope(const std::string& scope) {
  absl::MutexLock lock(&mu_);
  auto it = scopes_.find(scope);
  if (it == scopes_.end()) return;
  it->second->dropped = true;
  scopes_.erase(it);
}

void Rendezvous::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
}

int Rendezvous::ScopeCount() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(scopes_.size());
}

}  // namespace weft::coordinator
