// NcclTaskEnvironment: the environment of a GPU worker (weft-worker --device cuda:N). Each
// attempt's communicators are NCCL's, bootstrapped through the coordinator's RendezvousService
// (one rank of each group publishes the NCCL unique id there), and its executor runs the CUDA
// kernels on device N; the communicators order their stream against the kernels' stream.
//
// Built only under --config=cuda.
//
// E.g.
//   NcclTaskEnvironment env(channel, /*device_index=*/0, absl::Seconds(300));
//   Worker worker(options, ToDeviceInfo(*ProbeDevice("cuda:0")), &env, stub);
#ifndef WEFT_WORKER_NCCL_ENVIRONMENT_H_
#define WEFT_WORKER_NCCL_ENVIRONMENT_H_

#include <memory>

#include "absl/time/time.h"
#include "grpcpp/channel.h"
#include "worker/worker.h"

namespace weft {

class NcclTaskEnvironment : public TaskEnvironment {
 public:
  NcclTaskEnvironment(std::shared_ptr<grpc::ChannelInterface> coordinator, int device_index,
                      absl::Duration collective_timeout);
  absl::StatusOr<AttemptComms> MakeComms(const v1::Assignment& assignment) override;
  // Fails unless the program is for cuda; then CUDA kernels on device_index, with the NCCL
  // communicators (comm_factory, from MakeComms) ordered against their stream.
  absl::StatusOr<std::unique_ptr<Executor>> MakeExecutor(
      const v1::Program& program, CommunicatorFactory* comm_factory) override;

 private:
  const std::shared_ptr<grpc::ChannelInterface> coordinator_;
  const int device_index_;
  const absl::Duration collective_timeout_;
};

}  // namespace weft

#endif  // WEFT_WORKER_NCCL_ENVIRONMENT_H_
