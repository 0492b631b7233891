// The coordinator's end of one worker's WorkerService.Connect stream, as the core sees it: a
// queue of CoordinatorMessages to deliver, and a way to end the stream. The gRPC adapter
// (rpc/grpc_worker_service.h) implements it over a ServerReaderWriter; tests implement it in
// memory and inspect what was sent.
//
// E.g.
//   v1::CoordinatorMessage msg;
//   msg.mutable_cancel()->set_job_id("job-000001");
//   if (!connection->Send(msg)) { /* the stream is gone; the worker is being marked lost */ }
//   connection->Close(absl::UnavailableError("no heartbeat for 10000 ms"));
#ifndef WEFT_COORDINATOR_WORKER_CONNECTION_H_
#define WEFT_COORDINATOR_WORKER_CONNECTION_H_

#include "absl/status/status.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

class WorkerConnection {
 public:
  virtual ~WorkerConnection() = default;
  // Queues `msg` for the worker, in order. Never blocks (the core calls it under its lock);
  // false once the connection is closed.
  virtual bool Send(const v1::CoordinatorMessage& msg) = 0;
  // Ends the stream with `status`; later Sends return false. Idempotent.
  virtual void Close(const absl::Status& status) = 0;
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_WORKER_CONNECTION_H_
