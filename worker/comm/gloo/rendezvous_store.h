// RendezvousStore: a gloo::rendezvous::Store over the coordinator's RendezvousService, so Gloo
// bootstraps each job attempt through the coordinator instead of a shared file system or Redis.
// Keys live in the attempt's scope (Assignment.rendezvous_scope), every call carrying the scope's
// ticket (Assignment.rendezvous_ticket); GlooCommunicatorFactory adds a "group-<id>/" prefix per
// group on top.
//
// Gloo's Store contract is blocking and exception-based: `get` waits until the key exists (here
// Wait then Get), and failures throw gloo::IoException, which GlooCommunicatorFactory turns back
// into an absl::Status at its boundary. A timeout's message starts with "Timed out".
//
// E.g.
//   RendezvousStore store(grpc::CreateChannel("127.0.0.1:7070",
//                                             grpc::InsecureChannelCredentials()),
//                         assignment.rendezvous_scope(), assignment.rendezvous_ticket(),
//                         absl::Seconds(300));
//   GlooCommunicatorFactory factory(&store, program.rank(), "127.0.0.1", absl::Seconds(300));
#ifndef WEFT_WORKER_COMM_GLOO_RENDEZVOUS_STORE_H_
#define WEFT_WORKER_COMM_GLOO_RENDEZVOUS_STORE_H_

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "weft/v1/service.grpc.pb.h"

namespace weft {

class RendezvousStore : public gloo::rendezvous::Store {
 public:
  // `wait_timeout` bounds `get` and the timeout-less `wait`; Gloo passes its own timeout to the
  // other `wait`.
  RendezvousStore(std::shared_ptr<grpc::ChannelInterface> channel, std::string scope,
                  std::string ticket, absl::Duration wait_timeout);
  RendezvousStore(std::unique_ptr<v1::RendezvousService::StubInterface> stub, std::string scope,
                  std::string ticket, absl::Duration wait_timeout);
  ~RendezvousStore() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // Fails every call in flight and every later one (a cancelled job stops waiting for peers
  // that will never come). Thread-safe.
  void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& scope() const { return scope_; }

 private:
  // Registers `ctx` for Cancel(); throws if already cancelled.
  void Track(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(mu_);
  void Untrack(grpc::ClientContext* ctx) ABSL_LOCKS_EXCLUDED(mu_);

  const std::unique_ptr<v1::RendezvousService::StubInterface> stub_;
  const std::string scope_;
  const std::string ticket_;
  const std::chrono::milliseconds wait_timeout_;

  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);  // not owned
};

}  // namespace weft

#endif  // WEFT_WORKER_COMM_GLOO_RENDEZVOUS_STORE_H_
