// weft-coordinator: plans jobs and streams programs to workers. Serves JobService,
// WorkerService, RendezvousService, gRPC health and reflection; keeps jobs in SQLite under
// --data_dir. SIGTERM, SIGINT or SIGHUP shuts it down gracefully (exit 0). Under a systemd
// Type=notify unit it sends READY=1 once it serves, WATCHDOG=1 while its background thread ticks
// (WatchdogSec=) and STOPPING=1 on SIGTERM.
//
// E.g.
//   weft-coordinator --listen 127.0.0.1:0 --data_dir /tmp/weft --port_file /tmp/weft/port
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/bearer_token.h"
#include "common/crash_point.h"
#include "common/open_file_limit.h"
#include "common/file_io.h"
#include "common/help_flags.h"
#include "common/host_port.h"
#include "common/memory_release.h"
#include "common/metrics_server.h"
#include "common/path_roots.h"
#include "common/systemd_notify.h"
#include "common/tls.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_store.h"
#include "coordinator/rpc/grpc_server.h"
#include "coordinator/data_dir_lock.h"
#include "coordinator/state_dir.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:7070", "HOST:PORT to serve on; port 0 picks one");
ABSL_FLAG(std::string, data_dir, "",
          "folder of the job store (weft.db); created if missing. Default: $STATE_DIRECTORY "
          "(systemd's StateDirectory=), else $XDG_STATE_HOME/weft, else "
          "$HOME/.local/state/weft");
ABSL_FLAG(std::string, port_file, "",
          "if set, the bound port is written here (atomically) once serving");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on at /metrics (port 0 picks one); empty: none");
ABSL_FLAG(std::string, metrics_port_file, "",
          "after the metrics server starts, write its port here (tests, scripts)");
ABSL_FLAG(int64_t, heartbeat_ms, 1000, "heartbeat interval told to workers");
ABSL_FLAG(int64_t, worker_timeout_ms, 10000, "a worker silent this long is lost");
ABSL_FLAG(int64_t, failure_settle_ms, 1000,
          "after a rank fails, how long the others' failures are gathered; the earliest is the "
          "job's cause");
ABSL_FLAG(int64_t, progress_floor_ms, 60000,
          "an attempt that completes no step for max(this, 10 x its median step time) restarts "
          "(a partition or a hung rank); 0: never");
ABSL_FLAG(int64_t, cancel_grace_ms, 5000,
          "how long workers of a cancelled job get to confirm before it is CANCELLED anyway");
ABSL_FLAG(std::string, placement, "topology",
          "how ranks go to workers: topology (the mesh's innermost dims inside a host) or "
          "registration (registration order, for comparison)");
ABSL_FLAG(int64_t, max_ranks, 65536,
          "the largest mesh a job may ask for; larger ones are refused (a GPT-2 124M of 65536 "
          "ranks plans in about 1 s on 2 cores)");
ABSL_FLAG(int64_t, max_log_lines, 10000,
          "the most log lines stored of one rank's attempt (weftctl logs); later ones are dropped "
          "and one line says how many");
ABSL_FLAG(absl::Duration, job_retention, absl::ZeroDuration(),
          "delete a job this long after it ended (SUCCEEDED, FAILED or CANCELLED), with its events "
          "and log lines, e.g. 720h; its checkpoints stay. 0: keep every job");
ABSL_FLAG(int64_t, max_ended_jobs, 0,
          "keep at most this many ended jobs, deleting the ones that ended first; 0: no bound");
ABSL_FLAG(std::string, data_root, "",
          "absolute folder: a job's data and init_from are read only from under it (symlinks and "
          ".. resolved first); empty: anywhere");
ABSL_FLAG(std::string, checkpoint_root, "",
          "absolute folder: a job's checkpoint.dir (and an init_from checkpoint) must lie under "
          "it; empty: anywhere");
ABSL_FLAG(std::string, client_token_file, "",
          "file holding the bearer token every JobService call must carry (weftctl --token_file); "
          "empty: JobService is open to anyone who reaches --listen");
ABSL_FLAG(std::string, worker_token_file, "",
          "file holding the bearer token every WorkerService and RendezvousService call must "
          "carry (weft-worker --token_file); empty: open");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM file of the certificate (its chain) to serve TLS with; needs --tls_key. Clients "
          "and workers check it with --tls_ca. Empty: plaintext");
ABSL_FLAG(std::string, tls_key, "", "PEM file of --tls_cert's private key, unencrypted");

namespace weft::coordinator {
namespace {

bool IsUnixAddress(const std::string& listen) {
  return absl::StartsWith(listen, "unix:") || absl::StartsWith(listen, "unix-abstract:");
}

// HOST:PORT with a port gRPC can bind: 0 (pick one) to 65535 ("[::1]:7070" for IPv6, ":7070"
// for every interface); unix: and unix-abstract: addresses are gRPC's to check.
absl::Status CheckListenAddress(const std::string& listen) {
  if (IsUnixAddress(listen)) return absl::OkStatus();
  std::string host;
  int port = 0;
  return ParseHostPort("--listen", listen, &host, &port, /*allow_empty_host=*/true);
}

// The certificate and key of --tls_cert and --tls_key, checked to be a pair; both empty without
// the flags. Errors name the flag and the file.
absl::StatusOr<rpc::ServerTls> ReadServerTls() {
  const std::string cert_path = absl::GetFlag(FLAGS_tls_cert);
  const std::string key_path = absl::GetFlag(FLAGS_tls_key);
  if (cert_path.empty() != key_path.empty()) {
    return absl::InvalidArgumentError(cert_path.empty()
                                          ? "--tls_key needs --tls_cert (the certificate it is for)"
                                          : "--tls_cert needs --tls_key (its private key)");
  }
  rpc::ServerTls tls;
  if (cert_path.empty()) return tls;
  absl::StatusOr<std::string> cert = ReadPemCertificates(cert_path);
  if (!cert.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_cert ", cert.status().message()));
  }
  absl::StatusOr<std::string> key = ReadPemPrivateKey(key_path);
  if (!key.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_key ", key.status().message()));
  }
  if (!CheckKeyMatchesCertificate(*cert, *key).ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--tls_key ", key_path,
                                                   " is not the private key of --tls_cert ",
                                                   cert_path));
  }
  tls.cert_pem = *std::move(cert);
  tls.key_pem = *std::move(key);
  return tls;
}

int Run() {
  std::string data_dir = absl::GetFlag(FLAGS_data_dir);
  if (data_dir.empty()) {
    absl::StatusOr<std::string> state = DefaultStateDir(&std::getenv);
    if (!state.ok()) {
      spdlog::error("{}", std::string(state.status().message()));
      return 2;
    }
    data_dir = *std::move(state);
  }
  // Crash tests arm a crash point through the environment; a misspelt one fails here.
  if (absl::Status s = weft::CheckCrashPointEnv(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  if (ec) {
    spdlog::error("creating --data_dir {}: {}", data_dir, ec.message());
    return 1;
  }
  // Held until the process exits: no second coordinator writes this job store.
  absl::StatusOr<DataDirLock> data_dir_lock = DataDirLock::Acquire(data_dir);
  if (!data_dir_lock.ok()) {
    spdlog::error("{}", std::string(data_dir_lock.status().message()));
    return 2;
  }

  // Connections, streams and shards each hold a descriptor: the soft limit is raised to the hard.
  if (absl::StatusOr<int64_t> files = weft::RaiseOpenFileLimit(); files.ok()) {
    spdlog::info("open files: up to {}", *files);
  } else {
    spdlog::warn("{}", files.status().ToString());
  }
  // Signals are taken by sigwait below; block them before any thread starts so none gets them.
  // A shell starts background children with SIGINT ignored, and an ignored signal never becomes
  // pending: restore the default disposition first.
  // SIGHUP (a closed terminal) shuts it down gracefully too.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    signal(sig, SIG_DFL);
    sigaddset(&signals, sig);
  }
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A write to a socket whose peer died (a Gloo pair, a gRPC connection) must fail with EPIPE,
  // not kill this process: a survivor of a killed peer reports the error and is restarted.
  signal(SIGPIPE, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);

  // Flags first: a bad one must not touch the job store (opening it re-plans and fails jobs).
  rpc::ServiceTokens tokens;
  for (auto [flag, token] : {std::pair{&FLAGS_client_token_file, &tokens.client},
                             std::pair{&FLAGS_worker_token_file, &tokens.worker}}) {
    const std::string path = absl::GetFlag(*flag);
    if (path.empty()) continue;
    absl::StatusOr<std::string> read = ReadBearerTokenFile(path);
    if (!read.ok()) {
      spdlog::error("--{}: {}", flag == &FLAGS_client_token_file ? "client_token_file"
                                                                 : "worker_token_file",
                    std::string(read.status().message()));
      return 2;
    }
    *token = *std::move(read);
  }
  if (!tokens.client.empty() && tokens.client == tokens.worker) {
    spdlog::error("--client_token_file and --worker_token_file hold the same token: a client "
                  "could then act as a worker");
    return 2;
  }
  absl::StatusOr<rpc::ServerTls> tls = ReadServerTls();
  if (!tls.ok()) {
    spdlog::error("{}", std::string(tls.status().message()));
    return 2;
  }
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (absl::Status s = CheckListenAddress(listen); !s.ok()) {
    spdlog::error("{}", std::string(s.message()));
    return 2;
  }
  if (absl::GetFlag(FLAGS_max_ranks) < 1) {
    spdlog::error("--max_ranks must be at least 1");
    return 2;
  }
  absl::StatusOr<PathRoots> roots =
      PathRoots::Resolve(absl::GetFlag(FLAGS_data_root), absl::GetFlag(FLAGS_checkpoint_root));
  if (!roots.ok()) {
    spdlog::error("{}", std::string(roots.status().message()));
    return 2;
  }
  const std::string db_path = data_dir + "/weft.db";
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(db_path);
  if (!store.ok()) {
    spdlog::error("{}", store.status().ToString());
    return 1;
  }
  CoordinatorOptions options;
  options.heartbeat_interval_ms = absl::GetFlag(FLAGS_heartbeat_ms);
  options.worker_timeout_ms = absl::GetFlag(FLAGS_worker_timeout_ms);
  options.cancel_grace_ms = absl::GetFlag(FLAGS_cancel_grace_ms);
  options.failure_settle_ms = absl::GetFlag(FLAGS_failure_settle_ms);
  options.progress_floor_ms = absl::GetFlag(FLAGS_progress_floor_ms);
  options.max_ranks = absl::GetFlag(FLAGS_max_ranks);
  const std::string placement = absl::GetFlag(FLAGS_placement);
  if (placement != "topology" && placement != "registration") {
    spdlog::error("--placement: \"{}\"; use topology or registration", placement);
    return 2;
  }
  options.placement = placement == "topology" ? Placement::kTopology : Placement::kRegistration;
  options.cost_profiles_dir = data_dir + "/cost_profiles";
  options.max_log_lines = absl::GetFlag(FLAGS_max_log_lines);
  const absl::Duration retention = absl::GetFlag(FLAGS_job_retention);
  options.job_retention_ms = absl::ToInt64Milliseconds(retention);
  options.max_ended_jobs = absl::GetFlag(FLAGS_max_ended_jobs);
  // Every open under a root is resolved beneath it (the spec's paths are stored resolved): a
  // checkpoint folder swapped for a link mid-run leads nowhere outside.
  ConfineToRoots({roots->data, roots->checkpoint});
  options.roots = *std::move(roots);
  if (options.heartbeat_interval_ms <= 0 || options.worker_timeout_ms <= 0) {
    spdlog::error("--heartbeat_ms and --worker_timeout_ms must be positive");
    return 2;
  }
  if (options.max_log_lines <= 0) {
    spdlog::error("--max_log_lines must be positive");
    return 2;
  }
  if (retention < absl::ZeroDuration() || options.max_ended_jobs < 0) {
    spdlog::error("--job_retention and --max_ended_jobs must not be negative (0: no bound)");
    return 2;
  }
  if (options.job_retention_ms > 0 || options.max_ended_jobs > 0) {
    spdlog::info("retention: ended jobs are deleted {}{}{}",
                 options.job_retention_ms > 0
                     ? absl::StrCat(absl::FormatDuration(retention), " after they end")
                     : "",
                 options.job_retention_ms > 0 && options.max_ended_jobs > 0 ? ", and " : "",
                 options.max_ended_jobs > 0
                     ? absl::StrCat("beyond the ", options.max_ended_jobs, " that ended last")
                     : "");
  }
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      Coordinator::Create(std::move(*store), options);
  if (!coordinator.ok()) {
    spdlog::error("{}", coordinator.status().ToString());
    return 1;
  }
  (*coordinator)->Start();

  for (const auto& [token, what] : {std::pair{&tokens.client, "JobService (clients)"},
                                    std::pair{&tokens.worker, "WorkerService and "
                                                              "RendezvousService (workers)"}}) {
    if (token->empty()) spdlog::warn("{} open to anyone who reaches {}: no token file", what, listen);
  }
  const bool plaintext = tls->cert_pem.empty();
  if (plaintext && (!tokens.client.empty() || !tokens.worker.empty()) && !IsUnixAddress(listen)) {
    spdlog::warn("serving plaintext on {} (no --tls_cert): every call, its bearer token included, "
                 "can be read by anyone on the network path",
                 listen);
  }
  absl::StatusOr<std::unique_ptr<rpc::CoordinatorServer>> server =
      rpc::CoordinatorServer::Start(coordinator->get(), listen, tokens, *tls);
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  spdlog::info("serving {} on {} (port {}), job store {}", plaintext ? "plaintext" : "TLS", listen,
               (*server)->port(), db_path);
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    // Written atomically: a reader sees the whole port or nothing.
    absl::Status s = WriteFileAtomically(port_file, {absl::StrCat((*server)->port(), "\n")});
    if (!s.ok()) {
      spdlog::error("--port_file: {}", s.ToString());
      (*server)->Shutdown();
      return 1;
    }
  }
  std::unique_ptr<MetricsServer> metrics;
  if (const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
      !metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<MetricsServer>> started = MetricsServer::Start(
        metrics_listen, [c = coordinator->get()] { return c->RenderMetrics(); });
    if (!started.ok()) {
      spdlog::error("{}", std::string(started.status().message()));
      (*server)->Shutdown();
      return 2;
    }
    metrics = *std::move(started);
    spdlog::info("serving metrics on {}", metrics->url());
    if (const std::string file = absl::GetFlag(FLAGS_metrics_port_file); !file.empty()) {
      absl::Status s = WriteFileAtomically(file, {absl::StrCat(metrics->port(), "\n")});
      if (!s.ok()) {
        spdlog::error("--metrics_port_file: {}", s.ToString());
        (*server)->Shutdown();
        return 1;
      }
    }
  }
  // What clients dial: --listen with the port it got (port 0 picks one).
  const std::string address =
      IsUnixAddress(listen)
          ? listen
          : absl::StrCat(listen.substr(0, listen.rfind(':') + 1), (*server)->port());
  if (absl::Status s = systemd::NotifyReady(absl::StrCat("serving on ", address)); !s.ok()) {
    spdlog::warn("{}", s.ToString());
  }
  // What a connection flood's threads freed goes back to the system, rather than staying with
  // glibc's arenas for good (bench/hostile_load.sh).
  MemoryRelease memory_release(absl::Seconds(10));
  // The background thread ticks every 250 ms at most; a gap of the whole timeout means it, or
  // the coordinator's lock, is stuck. A server that stopped accepting connections is as stuck to
  // its clients.
  std::unique_ptr<systemd::Watchdog> watchdog = systemd::Watchdog::StartIfEnabled(
      "weft-coordinator",
      [c = coordinator->get(), s = server->get()](absl::Duration timeout) -> absl::Status {
        const absl::Duration since = c->SinceLastTick();
        if (since >= timeout) {
          return absl::DeadlineExceededError(absl::StrCat(
              "the coordinator's background thread has not ticked for ",
              absl::FormatDuration(absl::Trunc(since, absl::Milliseconds(1)))));
        }
        return s->Accepting();
      });

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("{}: shutting down",
               sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP");
  if (absl::Status s = systemd::NotifyStopping(); !s.ok()) spdlog::warn("{}", s.ToString());
  watchdog.reset();
  metrics.reset();
  (*server)->Shutdown();
  server->reset();
  coordinator->reset();
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace weft::coordinator

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "weft-coordinator --listen HOST:PORT [--data_dir DIR] [--port_file FILE] "
      "[--client_token_file F --worker_token_file G] [--tls_cert CERT --tls_key KEY]");
  weft::HelpListsFlagsOf("coordinator/main.cc", "weft-coordinator");
  absl::ParseCommandLine(argc, argv);
  spdlog::set_default_logger(spdlog::stderr_color_mt("weft-coordinator"));
  spdlog::set_pattern("%Y-%m-%d %H:%M:%S.%e %^%l%$ %v");
  return weft::coordinator::Run();
}
