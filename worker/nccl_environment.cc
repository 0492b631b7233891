#include "worker/nccl_environment.h"

#include <utility>

#include "common/status.h"
#include "worker/comm/gloo/rendezvous_store.h"
#include "worker/comm/nccl/nccl_communicator.h"
#include "worker/kernels/backend.h"
#include "worker/rendezvous_factory.h"

namespace weft {
namespace {

using RendezvousNcclFactory = RendezvousFactory<NcclCommunicatorFactory>;

}  // namespace

NcclTaskEnvironment::NcclTaskEnvironment(std::shared_ptr<grpc::ChannelInterface> coordinator,
                                         int device_index, absl::Duration collective_timeout)
    : coordinator_(std::move(coordinator)),
      device_index_(device_index),
      collective_timeout_(collective_timeout) {}

absl::StatusOr<AttemptComms> NcclTaskEnvironment::MakeComms(const v1::Assignment& assignment) {
  auto factory = std::make_unique<RendezvousNcclFactory>(
      std::make_unique<RendezvousStore>(coordinator_, assignment.rendezvous_scope(),
                                        assignment.rendezvous_ticket(),
                                        collective_timeout_),
      assignment.program().rank(), device_index_, collective_timeout_);
  RendezvousStore* store = factory->store();
  RendezvousNcclFactory* nccl = factory.get();
  AttemptComms comms;
  comms.factory = std::move(factory);
  // Stops a rendezvous in progress and any collective waiting for a peer.
  comms.cancel = [store, nccl] {
    store->Cancel();
    nccl->transport().Cancel();
  };
  return comms;
}

absl::StatusOr<std::unique_ptr<Executor>> NcclTaskEnvironment::MakeExecutor(
    const v1::Program& program, CommunicatorFactory* comm_factory) {
  RETURN_IF_ERROR(CheckProgramDevice(program, "cuda"));
  ASSIGN_OR_RETURN(std::unique_ptr<Kernels> kernels,
                   NewKernels(KernelOptionsFor(program, device_index_)));
  // MakeComms made comm_factory; the executor creates the communicators in Initialize, after
  // this, so each one sees the compute stream.
  if (comm_factory != nullptr) {
    static_cast<RendezvousNcclFactory*>(comm_factory)->transport().SetComputeStream(
        kernels->stream());
  }
  return Executor::CreateWithKernels(program, comm_factory, std::move(kernels));
}

}  // namespace weft
