// A CommunicatorFactory over one transport's factory (GlooCommunicatorFactory on CPU workers,
// NcclCommunicatorFactory on GPU workers) that owns the attempt's RendezvousStore for as long as
// its communicators may bootstrap through it.
//
// E.g.
//   auto factory = std::make_unique<RendezvousFactory<GlooCommunicatorFactory>>(
//       std::make_unique<RendezvousStore>(coordinator, scope, ticket, timeout), rank, host,
//       timeout);
//   comms.cancel = [store = factory->store()] { store->Cancel(); };
#ifndef WEFT_WORKER_RENDEZVOUS_FACTORY_H_
#define WEFT_WORKER_RENDEZVOUS_FACTORY_H_

#include <cstdint>
#include <memory>
#include <utility>

#include "absl/status/statusor.h"
#include "worker/comm/communicator.h"
#include "worker/comm/gloo/rendezvous_store.h"

namespace weft {

template <typename TransportFactory>
class RendezvousFactory : public CommunicatorFactory {
 public:
  // `args` are TransportFactory's constructor arguments after the store.
  template <typename... Args>
  explicit RendezvousFactory(std::unique_ptr<RendezvousStore> store, Args&&... args)
      : store_(std::move(store)), transport_(store_.get(), std::forward<Args>(args)...) {}

  absl::StatusOr<std::unique_ptr<Communicator>> Create(const v1::CommGroup& group) override {
    return transport_.Create(group);
  }
  int64_t bytes_sent() const override { return transport_.bytes_sent(); }
  RendezvousStore* store() { return store_.get(); }
  TransportFactory& transport() { return transport_; }

 private:
  // Owned; declared before transport_, so it outlives it.
  const std::unique_ptr<RendezvousStore> store_;
  TransportFactory transport_;
};

}  // namespace weft

#endif  // WEFT_WORKER_RENDEZVOUS_FACTORY_H_
