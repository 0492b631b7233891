#include "coordinator/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/utf8.h"
#include "spdlog/spdlog.h"

namespace weft::coordinator {
namespace {

// Lost workers stay listed (ListWorkers) up to this many, oldest forgotten first.
constexpr int kMaxLostWorkersListed = 256;

// "ipv4:127.0.0.1:5000" -> "127.0.0.1", "ipv6:[::1]:5000" -> "::1".
std::string HostOfPeer(const std::string& peer) {
  std::string addr = peer;
  size_t colon = addr.find(':');
  if (colon != std::string::npos && (addr.rfind("ipv4", 0) == 0 || addr.rfind("ipv6", 0) == 0)) {
    addr = addr.substr(colon + 1);
  }
  if (!addr.empty() && addr[0] == '[') {
    size_t end = addr.find(']');
    return end == std::string::npos ? addr : addr.substr(1, end - 1);
  }
  size_t last = addr.rfind(':');
  return last == std::string::npos ? addr : addr.substr(0, last);
}

}  // namespace

WorkerRegistry::Worker* WorkerRegistry::Add(const v1::Hello& hello, const std::string& peer,
                                            std::shared_ptr<WorkerConnection> connection,
                                            int64_t now_ms) {
  auto w = std::make_unique<Worker>();
  w->id = absl::StrCat("worker-", ++next_id_);
  w->hello = hello;
  if (w->hello.device().kind().empty()) w->hello.mutable_device()->set_kind("cpu");
  // Listed by ListWorkers for scrapers to find: a HOST:PORT, nothing longer or stranger.
  if (hello.metrics_address().size() > 256 || !IsValidUtf8(hello.metrics_address())) {
    w->hello.clear_metrics_address();
  }
  w->host = hello.host().empty() ? HostOfPeer(peer) : hello.host();
  w->connection = std::move(connection);
  w->last_heartbeat_ms = now_ms;
  workers_.push_back(std::move(w));
  return workers_.back().get();
}

WorkerRegistry::Worker* WorkerRegistry::Find(const std::string& worker_id) {
  for (auto& w : workers_) {
    if (w->id == worker_id) return w.get();
  }
  return nullptr;
}

WorkerRegistry::Worker* WorkerRegistry::Heard(const std::string& worker_id, int64_t now_ms) {
  Worker* w = Find(worker_id);
  if (w == nullptr || w->status == Status::kLost) return nullptr;
  w->last_heartbeat_ms = now_ms;
  return w;
}

bool WorkerRegistry::Runs(const Worker& w, const std::string& job_id, int attempt, int rank) {
  return w.status == Status::kBusy && w.job_id == job_id && w.attempt == attempt &&
         w.rank == rank;
}

void WorkerRegistry::Assign(Worker* w, const std::string& job_id, int attempt, int rank) {
  w->status = Status::kBusy;
  w->job_id = job_id;
  w->attempt = attempt;
  w->rank = rank;
  w->draining = false;
}

void WorkerRegistry::Release(Worker* w) {
  w->status = Status::kIdle;
  w->job_id.clear();
  w->attempt = 0;
  w->rank = -1;
  w->draining = false;
  w->release_deadline_ms = 0;
}

void WorkerRegistry::Drain(Worker* w, int64_t deadline_ms) {
  w->draining = true;
  w->release_deadline_ms = deadline_ms;
}

void WorkerRegistry::EndAttempt(const std::vector<std::string>& done,
                                const std::vector<std::string>& draining, int64_t deadline_ms) {
  for (const std::vector<std::string>* ids : {&done, &draining}) {
    for (const std::string& id : *ids) {
      Worker* w = Find(id);
      if (w == nullptr || w->status == Status::kLost) continue;
      if (ids == &done) {
        Release(w);
      } else {
        Drain(w, deadline_ms);
      }
    }
  }
}

void WorkerRegistry::SendTo(const std::vector<std::string>& ids,
                            const v1::CoordinatorMessage& msg) {
  for (const std::string& id : ids) {
    Worker* w = Find(id);
    if (w != nullptr && w->connection != nullptr) w->connection->Send(msg);
  }
}

std::optional<RankEvent> WorkerRegistry::Interpret(Worker* w, const v1::WorkerMessage& msg) {
  switch (msg.msg_case()) {
    case v1::WorkerMessage::kStep: {
      const v1::StepReport& r = msg.step();
      if (Runs(*w, r.job_id(), r.attempt(), r.rank())) {
        return RankEvent{r.job_id(), r.attempt(), JobRun::Step{r}};
      }
      spdlog::warn("{}: ignoring a step report for {} attempt {} rank {} (it runs {} attempt {} "
                   "rank {})", w->id, r.job_id(), r.attempt(), r.rank(), w->job_id, w->attempt,
                   w->rank);
      return std::nullopt;
    }
    case v1::WorkerMessage::kCheckpoint: {
      const v1::CheckpointReport& r = msg.checkpoint();
      if (Runs(*w, r.job_id(), r.attempt(), r.rank())) {
        return RankEvent{r.job_id(), r.attempt(), JobRun::Shard{r}};
      }
      spdlog::warn("{}: ignoring a checkpoint report for {} attempt {} rank {}", w->id,
                   r.job_id(), r.attempt(), r.rank());
      return std::nullopt;
    }
    case v1::WorkerMessage::kDone: {
      const v1::TaskDone& done = msg.done();
      if (w->status != Status::kBusy || w->job_id != done.job_id() ||
          w->attempt != done.attempt()) {
        spdlog::warn("{}: ignoring TaskDone for {} attempt {}", w->id, done.job_id(),
                     done.attempt());
        return std::nullopt;
      }
      return RankEvent{done.job_id(), done.attempt(),
                       JobRun::RankDone{w->rank, done.ok(), done.message(),
                                        done.failed_at_us() > 0 ? done.failed_at_us()
                                                                : done.failed_at_ms() * 1000}};
    }
    case v1::WorkerMessage::kHello:
      spdlog::warn("{}: ignoring a second Hello", w->id);
      return std::nullopt;
    case v1::WorkerMessage::kGoodbye: {
      // The worker's own words: kept short and valid UTF-8.
      const std::string reason = ReplaceInvalidUtf8(msg.goodbye().reason().substr(0, 256));
      return Lose(w, reason.empty() ? "the worker left" : reason, /*drained=*/true);
    }
    default:
      return std::nullopt;  // a heartbeat
  }
}

std::optional<RankEvent> WorkerRegistry::Lose(Worker* w, const std::string& why, bool drained) {
  const bool busy = w->status == Status::kBusy;
  w->status = Status::kLost;
  w->drained = drained;
  const char* gone = drained ? "drained" : "lost";
  if (w->connection != nullptr) {
    w->connection->Close(absl::UnavailableError(absl::StrCat(w->id, " ", gone, ": ", why)));
    w->connection = nullptr;
  }
  if (drained) {
    spdlog::info("{} drained: {}", w->id, why);
  } else {
    spdlog::warn("{} lost: {}", w->id, why);
  }
  if (!busy) return std::nullopt;
  return RankEvent{w->job_id, w->attempt, JobRun::WorkerLost{w->rank, why, drained}};
}

void WorkerRegistry::ForgetOldLost() {
  int lost = 0;
  for (const auto& w : workers_) lost += w->status == Status::kLost;
  for (auto it = workers_.begin(); lost > kMaxLostWorkersListed && it != workers_.end();) {
    if ((*it)->status == Status::kLost) {
      it = workers_.erase(it);
      --lost;
    } else {
      ++it;
    }
  }
}

void WorkerRegistry::Remove(Worker* w) {
  workers_.erase(std::remove_if(workers_.begin(), workers_.end(),
                                [w](const std::unique_ptr<Worker>& p) { return p.get() == w; }),
                 workers_.end());
}

std::vector<WorkerRegistry::Worker*> WorkerRegistry::Silent(int64_t now_ms, int64_t timeout_ms) {
  std::vector<Worker*> out;
  for (auto& w : workers_) {
    if (w->status != Status::kLost && now_ms - w->last_heartbeat_ms > timeout_ms) {
      out.push_back(w.get());
    }
  }
  return out;
}

std::vector<WorkerRegistry::Worker*> WorkerRegistry::DrainOver(int64_t now_ms) {
  std::vector<Worker*> out;
  for (auto& w : workers_) {
    if (w->status == Status::kBusy && w->draining && w->release_deadline_ms <= now_ms) {
      out.push_back(w.get());
    }
  }
  return out;
}

std::vector<WorkerSlot> WorkerRegistry::Slots() const {
  std::vector<WorkerSlot> slots;
  for (const auto& w : workers_) {
    if (w->status == Status::kLost) continue;
    slots.push_back({w->id, w->hello.device().kind(), w->status == Status::kIdle, w->hello.host()});
  }
  return slots;
}

int64_t WorkerRegistry::CountFree(const std::string& kind, bool winding_down) const {
  int64_t n = 0;
  for (const auto& w : workers_) {
    if (w->status == Status::kLost || w->hello.device().kind() != kind) continue;
    n += w->status == Status::kIdle || (winding_down && w->draining);
  }
  return n;
}

const WorkerRegistry::Worker* WorkerRegistry::LargestOfKind(const std::string& kind) const {
  const Worker* largest = nullptr;
  for (const auto& w : workers_) {
    if (w->status == Status::kLost || w->hello.device().kind() != kind) continue;
    if (w->hello.device().memory_bytes() > 0 &&
        (largest == nullptr ||
         w->hello.device().memory_bytes() > largest->hello.device().memory_bytes())) {
      largest = w.get();
    }
  }
  return largest;
}

std::vector<v1::WorkerInfo> WorkerRegistry::List() const {
  std::vector<v1::WorkerInfo> out;
  for (const auto& w : workers_) {
    v1::WorkerInfo info;
    info.set_worker_id(w->id);
    info.set_host(w->host);
    *info.mutable_device() = w->hello.device();
    info.set_pid(w->hello.pid());
    info.set_metrics_address(w->hello.metrics_address());
    info.set_last_heartbeat_ms(w->last_heartbeat_ms);
    switch (w->status) {
      case Status::kIdle:
        info.set_state("idle");
        break;
      case Status::kBusy:
        info.set_state("busy");
        info.set_job_id(w->job_id);
        info.set_rank(w->rank);
        break;
      case Status::kLost:
        info.set_state(w->drained ? "drained" : "lost");
        break;
    }
    out.push_back(std::move(info));
  }
  return out;
}

void WorkerRegistry::CloseAll(const absl::Status& status) {
  for (const auto& w : workers_) {
    if (w->connection != nullptr) w->connection->Close(status);
  }
}

bool WorkerRegistry::MayLog(const Worker& w, const v1::LogLines& logs) const {
  if (Runs(w, logs.job_id(), logs.attempt(), logs.rank())) return true;
  spdlog::warn("{}: ignoring {} log line(s) for {} attempt {} rank {} (it runs {} attempt {} rank "
               "{})", w.id, logs.lines_size(), logs.job_id(), logs.attempt(), logs.rank(),
               w.job_id, w.attempt, w.rank);
  return false;
}

}  // namespace weft::coordinator
