// The in-process worker stream: keeps every message the coordinator sent it, and whether (and
// why) it was closed. Tests and bench/coordinator_load drive a Coordinator through it without
// sockets; rpc/grpc_services.cc has the gRPC one.
//
// E.g.
//   auto stream = std::make_shared<RecordedConnection>();
//   ASSIGN_OR_RETURN(std::string id, coordinator->ConnectWorker(hello, "ipv4:127.0.0.1:1", stream));
//   std::vector<v1::Assignment> programs = stream->assignments();
#ifndef WEFT_COORDINATOR_RECORDED_CONNECTION_H_
#define WEFT_COORDINATOR_RECORDED_CONNECTION_H_

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/worker_connection.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

class RecordedConnection final : public WorkerConnection {
 public:
  bool Send(const v1::CoordinatorMessage& msg) override {
    absl::MutexLock lock(&mu_);
    if (closed_) return false;
    sent_.push_back(msg);
    return true;
  }
  void Close(const absl::Status& status) override {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    close_status_ = status;
  }
  std::vector<v1::CoordinatorMessage> sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }
  std::vector<v1::Assignment> assignments() {
    std::vector<v1::Assignment> out;
    for (const auto& m : sent()) {
      if (m.has_assignment()) out.push_back(m.assignment());
    }
    return out;
  }
  int cancels() {
    int n = 0;
    for (const auto& m : sent()) n += m.has_cancel();
    return n;
  }
  bool closed() {
    absl::MutexLock lock(&mu_);
    return closed_;
  }
  absl::Status close_status() {
    absl::MutexLock lock(&mu_);
    return close_status_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::CoordinatorMessage> sent_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status close_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_RECORDED_CONNECTION_H_
