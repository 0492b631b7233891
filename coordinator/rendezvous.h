// The rendezvous KV: an in-memory key/value store per job attempt ("<job_id>/<attempt>") that
// the attempt's workers use to bootstrap their collectives (a Gloo store, an NCCL unique id).
//
// A scope exists only while its attempt runs: the coordinator opens it when the attempt starts,
// which makes a random ticket that goes to the attempt's workers alone (their Assignment), drops
// it when the attempt ends, which frees its keys and wakes anything still waiting on it. Every
// call names the scope and its ticket: a scope that is not open is NOT_FOUND, a wrong ticket is
// PERMISSION_DENIED (holding the worker token is not enough to read or write another job's
// keys). What a scope holds is bounded by its RendezvousLimits, which scale with the attempt's
// mesh (RendezvousLimits::ForMesh): more is RESOURCE_EXHAUSTED, naming the figures.
//
// E.g.
//   Rendezvous kv;
//   ASSIGN_OR_RETURN(std::string ticket,
//                    kv.Open("job-000001/0", RendezvousLimits::ForMesh({2, 2})));
//   kv.Set("job-000001/0", ticket, "rank0/addr", "127.0.0.1:4100");
//   absl::Status s = kv.Wait("job-000001/0", ticket, {"rank0/addr", "rank1/addr"},
//                            absl::Seconds(30), [&] { return context->IsCancelled(); });
//   absl::StatusOr<std::string> addr = kv.Get("job-000001/0", ticket, "rank1/addr");
//   kv.DropScope("job-000001/0");
#ifndef WEFT_COORDINATOR_RENDEZVOUS_H_
#define WEFT_COORDINATOR_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace weft::coordinator {

// What one scope may hold. Bytes count keys and values together.
struct RendezvousLimits {
  int64_t max_keys = 0;
  int64_t max_bytes = 0;
  int64_t max_key_bytes = 0;
  int64_t max_value_bytes = 0;

  // For an attempt on a mesh of this shape. Collective groups run along mesh dims: a group along
  // dim d has shape[d] members, and each member bootstraps it by setting a few keys (Gloo: its
  // addresses, under a prefix that names the members; NCCL: one 128-byte id per group), so an
  // attempt needs a few keys per rank and dim, of sizes that grow with the group. The limits
  // allow 8 keys and 8 KiB per rank and dim, plus 512 bytes per member of each of its groups
  // (Gloo's full mesh can need an address per peer). Measured: a [2, 4] mesh's attempt held 32
  // keys and 4944 bytes (limits: 128 keys, 152 KiB); a [2, 2] pipeline with dp, 16 keys.
  static RendezvousLimits ForMesh(const std::vector<int64_t>& shape);
};

// What a scope holds now (keys are never removed, so it holds the most keys it ever held) and the
// most bytes it held (a value set again may be shorter).
struct RendezvousUsage {
  int64_t keys = 0;
  int64_t bytes = 0;
  int64_t peak_bytes = 0;
};

class Rendezvous {
 public:
  Rendezvous() = default;
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  // Opens a scope for an attempt and returns its ticket (128 random bits, hex):
  // ALREADY_EXISTS when it is open, INVALID_ARGUMENT for an empty scope.
  absl::StatusOr<std::string> Open(const std::string& scope, RendezvousLimits limits);
  // RESOURCE_EXHAUSTED past the scope's limits (the scope is unchanged).
  absl::Status Set(const std::string& scope, const std::string& ticket, const std::string& key,
                   std::string value);
  // NOT_FOUND when the key is absent.
  absl::StatusOr<std::string> Get(const std::string& scope, const std::string& ticket,
                                  const std::string& key);
  // Blocks until every key is present: DEADLINE_EXCEEDED after `timeout` (none when it is
  // zero or negative), CANCELLED when `cancelled` (polled) turns true, ABORTED when the scope is
  // dropped, UNAVAILABLE on Shutdown.
  absl::Status Wait(const std::string& scope, const std::string& ticket,
                    const std::vector<std::string>& keys, absl::Duration timeout,
                    const std::function<bool()>& cancelled);
  // Forgets the scope's keys and wakes its waiters; returns what it held (zeros when it was not
  // open).
  RendezvousUsage DropScope(const std::string& scope);
  // Wakes every waiter with UNAVAILABLE; later calls fail with UNAVAILABLE.
  void Shutdown();

  // Number of open scopes, for tests and logs.
  int ScopeCount();
  // NOT_FOUND when the scope is not open.
  absl::StatusOr<RendezvousUsage> Usage(const std::string& scope);

 private:
  struct Scope {
    std::string ticket;
    RendezvousLimits limits;
    std::map<std::string, std::string> values;
    int64_t bytes = 0;  // of the keys and values
    int64_t peak_bytes = 0;
    bool dropped = false;

    RendezvousUsage usage() const {
      return {static_cast<int64_t>(values.size()), bytes, peak_bytes};
    }
  };
  // The open scope whose ticket matches, or why not.
  absl::StatusOr<std::shared_ptr<Scope>> Find(const std::string& scope, const std::string& ticket)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Scope>> scopes_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_RENDEZVOUS_H_
