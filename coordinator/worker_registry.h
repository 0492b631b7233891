// The workers the coordinator knows, in registration order: connect, heartbeat, assign, drain,
// release, lost. It turns a worker's stream message into the (job, attempt, rank) it concerns,
// checking that the worker runs that rank of that attempt; the Coordinator routes the event to the
// attempt's JobRun. Not thread-safe: the Coordinator holds its lock around every call.
//
// E.g.
//   WorkerRegistry workers;
//   Worker* w = workers.Add(hello, "ipv4:10.0.0.1:5000", connection, now_ms);   // "worker-1"
//   workers.Assign(w, "job-000001", /*attempt=*/0, /*rank=*/0);
//   if (workers.Runs(*w, report.job_id(), report.attempt(), report.rank())) ...
//   workers.Drain(w, deadline_ms);       // its attempt ended; idle when it confirms
#ifndef WEFT_COORDINATOR_WORKER_REGISTRY_H_
#define WEFT_COORDINATOR_WORKER_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/job_run.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_connection.h"
#include "weft/v1/service.pb.h"

namespace weft::coordinator {

// A worker's message as an event of the rank it runs.
struct RankEvent {
  std::string job_id;
  int attempt = 0;
  JobRun::Event event;
};

class WorkerRegistry {
 public:
  enum class Status { kIdle, kBusy, kLost };
  struct Worker {
    std::string id;
    v1::Hello hello;
    std::string host;
    std::shared_ptr<WorkerConnection> connection;  // null once lost
    Status status = Status::kIdle;
    // While busy: the attempt it runs or, after that attempt ended, is still winding down.
    std::string job_id;
    int attempt = 0;
    int rank = -1;
    bool draining = false;            // its attempt ended; waiting for its TaskDone
    int64_t release_deadline_ms = 0;  // draining: counted idle again after this
    int64_t last_heartbeat_ms = 0;
    bool drained = false;  // kLost because it said Goodbye: listed as drained
  };

  // Registers a worker that said Hello from `peer` (gRPC's "ipv4:1.2.3.4:5678" form; its host
  // unless Hello names one). Its device kind defaults to cpu; a metrics address that is not a
  // short UTF-8 HOST:PORT is dropped. The caller sends Welcome.
  Worker* Add(const v1::Hello& hello, const std::string& peer,
              std::shared_ptr<WorkerConnection> connection, int64_t now_ms);
  // Null for an unknown id.
  Worker* Find(const std::string& worker_id);
  // Null for an unknown id or a lost worker; else its heartbeat is now.
  Worker* Heard(const std::string& worker_id, int64_t now_ms);
  // Whether the worker runs (or winds down) that rank of that attempt.
  static bool Runs(const Worker& w, const std::string& job_id, int attempt, int rank);
  // The event a worker's stream message makes for the rank it runs: a step or checkpoint report
  // of that rank, its TaskDone, or (Goodbye: it is drained) its loss. Nothing for a heartbeat, a
  // second Hello, or a report for a rank it does not run (logged and ignored); LogLines are not
  // events (the Coordinator stores them when Runs).
  std::optional<RankEvent> Interpret(Worker* w, const v1::WorkerMessage& msg);
  // Whether the worker may log for that rank: it runs it (or winds it down). Logged when not.
  bool MayLog(const Worker& w, const v1::LogLines& logs) const;
  // Marks the worker lost (drained: it left on purpose) and closes its stream; the loss of the
  // rank it was running, if any.
  std::optional<RankEvent> Lose(Worker* w, const std::string& why, bool drained);

  void Assign(Worker* w, const std::string& job_id, int attempt, int rank);
  void Release(Worker* w);
  // Told to cancel: idle when it confirms, or after `deadline_ms`.
  void Drain(Worker* w, int64_t deadline_ms);
  // An attempt ended: the `done` workers are idle again, the `draining` ones drain until
  // `deadline_ms` (Drain). Unknown and lost ones are skipped.
  void EndAttempt(const std::vector<std::string>& done, const std::vector<std::string>& draining,
                  int64_t deadline_ms);
  // Sends `msg` to each connected worker of `ids` (a send to a closed stream is dropped).
  void SendTo(const std::vector<std::string>& ids, const v1::CoordinatorMessage& msg);
  // Keeps at most a bounded number of lost workers listed, oldest forgotten first.
  void ForgetOldLost();
  // Forgets a worker whose stream closed before it was welcomed.
  void Remove(Worker* w);

  // Workers silent for longer than `timeout_ms`, oldest registration first.
  std::vector<Worker*> Silent(int64_t now_ms, int64_t timeout_ms);
  // Draining workers whose grace ran out.
  std::vector<Worker*> DrainOver(int64_t now_ms);

  // What the scheduler places jobs on: every worker not lost.
  std::vector<WorkerSlot> Slots() const;
  // Connected workers of device kind `kind` that are idle, or (with winding_down) idle or
  // draining an attempt that ended: what an elastic job may resize to.
  int64_t CountFree(const std::string& kind, bool winding_down) const;
  // The connected worker of `kind` with the most memory (its memory_bytes; 0 and empty when none
  // says).
  const Worker* LargestOfKind(const std::string& kind) const;
  std::vector<v1::WorkerInfo> List() const;
  // Closes every connected worker's stream (the coordinator shuts down).
  void CloseAll(const absl::Status& status);

 private:
  int64_t next_id_ = 0;
  std::vector<std::unique_ptr<Worker>> workers_;  // registration order
};

}  // namespace weft::coordinator

#endif  // WEFT_COORDINATOR_WORKER_REGISTRY_H_
