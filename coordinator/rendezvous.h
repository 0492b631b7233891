// The rendezvous KV: an in-memory key/value store per scope ("<job_id>/<attempt>") that a job
// attempt's workers use to bootstrap their collectives (a Gloo store, an NCCL unique id). Wait
// blocks until every key it names is present. When the attempt ends the coordinator drops its
// scope, which wakes anything still waiting on it.
//
// E.g.
//   Rendezvous kv;
//   kv.Set("job-000001/0", "rank0/addr", "127.0.0.1:4100");
//   absl::Status s = kv.Wait("job-000001/0", {"rank0/addr", "rank1/addr"}, absl::Seconds(30),
//                            [&] { return context->IsCancelled(); });
//   absl::StatusOr<std::string> addr = kv.Get("job-000001/0", "rank1/addr");
//   kv.DropScope("job-000001/0");
#ifndef WEFT_COORDINATOR_RENDEZVOUS_H_
#define WEFT_COORDINATOR_RENDEZVOUS_H_

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

class Rendezvous {
 public:
  Rendezvous() = default;
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  absl::Status Set(const std::string& scope, const std::string& key, std::string value);
  // NOT_FOUND when the key is absent.
  absl::StatusOr<std::string> Get(const std::string& scope, const std::string& key);
  // Blocks until every key is present: DEADLINE_EXCEEDED after `timeout` (none when it is
  // zero or negative), CANCELLED when `cancelled` (polled) turns true, ABORTED when the scope is
  // dropped, UNAVAILABLE on Shutdown.
  absl::Status Wait(const std::string& scope, const std::vector<std::string>& keys,
                    absl::Duration timeout, const std::function<bool()>& cancelled);
  // Forgets the scope's keys and wakes its waiters.
  void DropScope(const std::string& scope);
  // Wakes every waiter with UNAVAILABLE; later calls fail with UNAVAILABLE.
  void Shutdown();

  // Number of live scopes, for tests and logs.
  int ScopeCount();

 private:
  struct Scope {
    std::map<std::string, std::string> values;
    bool dropped = false;
  };
  std::shared_ptr<Scope> FindOrCreate(const std::string& scope) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Scope>> scopes_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_RENDEZVOUS_H_
