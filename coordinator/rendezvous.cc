#include "coordinator/rendezvous.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace weft::coordinator {
namespace {

// How often a waiter looks at its caller's cancellation flag.
constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(50);

// ForMesh's allowances (see its comment).
constexpr int64_t kBytesPerMember = 512;
constexpr int64_t kBytesPerRankAndDim = 8 << 10;
constexpr int64_t kKeysPerRankAndDim = 8;
// Floors, for the smallest meshes.
constexpr int64_t kMinKeys = 64;
constexpr int64_t kMinBytes = 64 << 10;
constexpr int64_t kMinKeyBytes = 256;
constexpr int64_t kMinValueBytes = 4 << 10;

// A key as errors show it: the caller's own, but cut (it can be long).
std::string Shown(const std::string& key) {
  constexpr size_t kShown = 64;
  return key.size() <= kShown ? key : absl::StrCat(key.substr(0, kShown), "...");
}

bool SameTicket(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace

RendezvousLimits RendezvousLimits::ForMesh(const std::vector<int64_t>& shape) {
  int64_t world = 1;
  for (int64_t s : shape) world *= std::max<int64_t>(s, 1);
  int64_t largest = 1, per_rank_bytes = 0;
  for (int64_t s : shape) {
    largest = std::max(largest, s);
    per_rank_bytes += kBytesPerRankAndDim + kBytesPerMember * s;
  }
  const int64_t dims = std::max<int64_t>(static_cast<int64_t>(shape.size()), 1);
  RendezvousLimits limits;
  limits.max_keys = std::max(kMinKeys, kKeysPerRankAndDim * dims * world);
  limits.max_bytes = std::max(kMinBytes, world * per_rank_bytes);
  // A Gloo key names its group's members ("group-<id>-<r0>.<r1>...": up to 11 bytes each).
  limits.max_key_bytes = std::max(kMinKeyBytes, 128 + 12 * largest);
  limits.max_value_bytes = std::max(kMinValueBytes, kBytesPerMember * largest);
  return limits;
}

absl::StatusOr<std::string> Rendezvous::Open(const std::string& scope, RendezvousLimits limits) {
  if (scope.empty()) return absl::InvalidArgumentError("rendezvous Open: the scope is empty");
  unsigned char random[16];
  if (RAND_bytes(random, sizeof(random)) != 1) {
    return absl::InternalError("rendezvous Open: OpenSSL's RAND_bytes failed");
  }
  std::string ticket = absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(random), sizeof(random)));
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  std::shared_ptr<Scope>& s = scopes_[scope];
  if (s != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("rendezvous scope ", scope, " is already open"));
  }
  s = std::make_shared<Scope>();
  s->ticket = ticket;
  s->limits = limits;
  return ticket;
}

absl::StatusOr<std::shared_ptr<Rendezvous::Scope>> Rendezvous::Find(const std::string& scope,
                                                                   const std::string& ticket) {
  if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
  auto it = scopes_.find(scope);
  if (it == scopes_.end()) {
    return absl::NotFoundError(absl::StrCat("rendezvous scope '", Shown(scope),
                                            "' is not open: no job attempt of that name is "
                                            "running (it ended, or never started)"));
  }
  if (!SameTicket(it->second->ticket, ticket)) {
    return absl::PermissionDeniedError(
        absl::StrCat("rendezvous scope ", scope, ": the ticket does not match; only the workers "
                     "assigned to that job attempt may use its keys"));
  }
  return it->second;
}

absl::Status Rendezvous::Set(const std::string& scope, const std::string& ticket,
                             const std::string& key, std::string value) {
  if (key.empty()) return absl::InvalidArgumentError("rendezvous Set: the key is empty");
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<Scope>> found = Find(scope, ticket);
  if (!found.ok()) return found.status();
  Scope& s = **found;
  const RendezvousLimits& limit = s.limits;
  const int64_t key_bytes = static_cast<int64_t>(key.size());
  const int64_t value_bytes = static_cast<int64_t>(value.size());
  if (key_bytes > limit.max_key_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous scope ", scope, ": key '", Shown(key), "' is ", key_bytes,
                     " bytes, over the attempt's limit of ", limit.max_key_bytes));
  }
  if (value_bytes > limit.max_value_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("rendezvous scope ", scope, ": the value of '", Shown(key), "' is ",
                     value_bytes, " bytes, over the attempt's limit of ", limit.max_value_bytes));
  }
  auto old = s.values.find(key);
  const int64_t keys = static_cast<int64_t>(s.values.size()) + (old == s.values.end() ? 1 : 0);
  const int64_t bytes = s.bytes + key_bytes + value_bytes -
                        (old == s.values.end() ? 0 : key_bytes + old->second.size());
  if (keys > limit.max_keys || bytes > limit.max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rendezvous scope ", scope, ": setting '", Shown(key), "' would hold ", keys, " keys and ",
        bytes, " bytes, over the attempt's limit of ", limit.max_keys, " keys and ",
        limit.max_bytes, " bytes"));
  }
  s.values[key] = std::move(value);
  s.bytes = bytes;
  s.peak_bytes = std::max(s.peak_bytes, bytes);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Rendezvous::Get(const std::string& scope, const std::string& ticket,
                                            const std::string& key) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<Scope>> found = Find(scope, ticket);
  if (!found.ok()) return found.status();
  auto v = (*found)->values.find(key);
  if (v == (*found)->values.end()) {
    return absl::NotFoundError(absl::StrCat("rendezvous scope ", scope, " has no key '",
                                            Shown(key), "'"));
  }
  return v->second;
}

absl::Status Rendezvous::Wait(const std::string& scope, const std::string& ticket,
                              const std::vector<std::string>& keys, absl::Duration timeout,
                              const std::function<bool()>& cancelled) {
  const absl::Time deadline =
      timeout > absl::ZeroDuration() ? absl::Now() + timeout : absl::InfiniteFuture();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::shared_ptr<Scope>> found = Find(scope, ticket);
  if (!found.ok()) return found.status();
  const std::shared_ptr<Scope> s = *std::move(found);
  // Waiting for more keys than the scope may hold could never end.
  if (static_cast<int64_t>(keys.size()) > s->limits.max_keys) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous wait on ", scope, ": ", keys.size(),
                     " keys asked for, more than the attempt's limit of ", s->limits.max_keys));
  }
  auto missing = [&]() {
    std::vector<std::string> out;
    for (const std::string& k : keys) {
      if (s->values.find(k) == s->values.end()) out.push_back(Shown(k));
    }
    return out;
  };
  auto ready = [&]() { return shut_down_ || s->dropped || missing().empty(); };
  while (true) {
    absl::Duration wait = std::min(kCancelPollInterval, deadline - absl::Now());
    mu_.AwaitWithTimeout(absl::Condition(&ready), std::max(wait, absl::ZeroDuration()));
    if (shut_down_) return absl::UnavailableError("coordinator is shutting down");
    if (s->dropped) {
      return absl::AbortedError(
          absl::StrCat("rendezvous scope ", scope, " ended (job attempt over)"));
    }
    std::vector<std::string> absent = missing();
    if (absent.empty()) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      constexpr size_t kNamed = 8;
      const size_t more = absent.size() > kNamed ? absent.size() - kNamed : 0;
      absent.resize(std::min(absent.size(), kNamed));
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous scope ", scope, ": still missing ", absl::StrJoin(absent, ", "),
          more > 0 ? absl::StrCat(" and ", more, " more") : "", " after ",
          absl::FormatDuration(timeout)));
    }
    if (cancelled && cancelled()) {
      return absl::CancelledError(absl::StrCat("rendezvous wait on ", scope, " cancelled"));
    }
  }
}

RendezvousUsage Rendezvous::DropScope(const std::string& scope) {
  absl::MutexLock lock(&mu_);
  auto it = scopes_.find(scope);
  if (it == scopes_.end()) return {};
  it->second->dropped = true;
  const RendezvousUsage usage = it->second->usage();
  scopes_.erase(it);
  return usage;
}

void Rendezvous::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
}

int Rendezvous::ScopeCount() {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(scopes_.size());
}

absl::StatusOr<RendezvousUsage> Rendezvous::Usage(const std::string& scope) {
  absl::MutexLock lock(&mu_);
  auto it = scopes_.find(scope);
  if (it == scopes_.end()) {
    return absl::NotFoundError(absl::StrCat("rendezvous scope ", scope, " is not open"));
  }
  return it->second->usage();
}

}  // namespace weft::coordinator
