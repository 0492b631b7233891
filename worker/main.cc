// weft-worker: the worker daemon, one per device. Connects to the coordinator's WorkerService,
// runs the programs it is assigned, and reconnects when the coordinator goes away. Under a
// systemd Type=notify unit it sends READY=1 once the coordinator first welcomes it, STATUS= as
// it connects and disconnects, WATCHDOG=1 while its stream loop is alive (WatchdogSec=) and
// STOPPING=1 on SIGTERM. SIGTERM, SIGINT and SIGHUP drain it: it says Goodbye and exits 0.
//
// E.g.
//   weft-worker --coordinator=127.0.0.1:7070 --host=10.0.0.5
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/bearer_token.h"
#include "common/byte_size.h"
#include "common/coordinator_channel.h"
#include "common/crash_point.h"
#include "common/file_io.h"
#include "common/open_file_limit.h"
#include "common/help_flags.h"
#include "common/host_port.h"
#include "common/metrics_server.h"
#include "common/path_roots.h"
#include "common/systemd_notify.h"
#include "common/tls.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"
#include "worker/executor/executor.h"
#include "worker/kernels/backend.h"
#include "worker/task_log.h"
#include "worker/worker.h"
#ifdef WEFT_CUDA
#include "worker/nccl_environment.h"
#endif

ABSL_FLAG(std::string, coordinator, "", "Coordinator address HOST:PORT (required).");
ABSL_FLAG(std::string, device, "cpu",
          "Device to run on: cpu, or cuda:N (GPU N; needs a --config=cuda build and a GPU).");
ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address the other workers reach this worker's collectives on.");
ABSL_FLAG(std::string, memory_limit, "",
          "Memory offered to jobs, when less than the device has (e.g. 256MiB, 16GiB): told to "
          "the coordinator, which plans within it; empty: the device's.");
ABSL_FLAG(int, heartbeat_ms, 0, "Heartbeat interval; 0 uses the coordinator's.");
ABSL_FLAG(std::string, metrics_listen, "",
          "HOST:PORT to serve Prometheus metrics on at /metrics (port 0 picks one); empty: none. "
          "The coordinator lists where (weftctl workers --json: metrics_address)");
ABSL_FLAG(int, collective_timeout_s, 300,
          "Bound on every collective and on the rendezvous of each communicator.");
ABSL_FLAG(int, reconnect_deadline_s, 600,
          "Give up (exit 1) after this long without a stream to the coordinator.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the coordinator's worker token (its --worker_token_file), sent as a "
          "bearer token with every call; empty: none.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM file of the CA certificate(s) the coordinator's TLS certificate (its --tls_cert) "
          "must chain to; every call then goes over TLS. Empty: plaintext.");
ABSL_FLAG(std::string, tls_server_name, "",
          "The name the coordinator's certificate must hold, where it differs from the host of "
          "--coordinator; needs --tls_ca.");

ABSL_FLAG(std::string, data_root, "",
          "Absolute folder: jobs read their data and init_from only from under it (symlinks and "
          ".. resolved first); empty: anywhere.");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Absolute folder: jobs read and write checkpoints only under it; empty: anywhere.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "weft-worker --coordinator=HOST:PORT [--device=cpu] [--host=ADDR] [--token_file=F] "
      "[--tls_ca=CA]");
  weft::HelpListsFlagsOf("worker/main.cc", "weft-worker");
  absl::ParseCommandLine(argc, argv);

  auto logger = spdlog::stderr_logger_mt("weft-worker");
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %L weft-worker] %v");
  // What is logged while a task runs also goes to the coordinator (weftctl logs). Added before
  // any other thread starts: a logger's sinks are not to change while it logs.
  auto task_log = std::make_shared<weft::TaskLogSink>();
  logger->sinks().push_back(task_log);
  spdlog::set_default_logger(logger);

  // libgomp reads its wait policy when it loads, so only the environment can set it.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && absl::GetFlag(FLAGS_device) == "cpu") {
    spdlog::warn(
        "OMP_WAIT_POLICY is unset: the CPU kernels' OpenMP threads will spin between loops and "
        "compete with OpenBLAS's for the cores; set OMP_WAIT_POLICY=passive (weftctl local, the "
        "systemd unit and the container images do)");
  }

  // Crash tests arm a crash point through the environment; a misspelt one fails here.
  if (const absl::Status s = weft::CheckCrashPointEnv(); !s.ok()) {
    std::fprintf(stderr, "weft-worker: %s\n", s.ToString().c_str());
    return 2;
  }
  const std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (coordinator.empty()) {
    std::fprintf(stderr, "weft-worker: --coordinator=HOST:PORT is required\n");
    return 2;
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  const absl::StatusOr<std::pair<std::string, int>> parsed = weft::ParseDevice(device);
  if (!parsed.ok()) {
    std::fprintf(stderr, "weft-worker: --device=%s: %s\n", device.c_str(),
                 std::string(parsed.status().message()).c_str());
    return 2;
  }
  // Probed before anything starts: a GPU worker without a usable GPU exits at once with the
  // CUDA error, instead of registering and failing every job it is given.
  const absl::StatusOr<weft::DeviceDescription> described = weft::ProbeDevice(device);
  if (!described.ok()) {
    std::fprintf(stderr, "weft-worker: --device=%s: %s\n", device.c_str(),
                 std::string(described.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_collective_timeout_s) <= 0 || absl::GetFlag(FLAGS_heartbeat_ms) < 0) {
    std::fprintf(stderr,
                 "weft-worker: --collective_timeout_s must be > 0 and --heartbeat_ms >= 0\n");
    return 2;
  }

  // After the device probe, whose refusal is one line on stderr. Connections, streams and shards
  // each hold a descriptor: the soft limit is raised to the hard.
  if (absl::StatusOr<int64_t> files = weft::RaiseOpenFileLimit(); files.ok()) {
    spdlog::info("open files: up to {}", *files);
  } else {
    spdlog::warn("{}", files.status().ToString());
  }
  // SIGTERM, SIGINT and SIGHUP (a closed terminal) are taken by sigtimedwait below, not by a
  // handler: block them before any thread (gRPC's included) starts, so every thread inherits the
  // mask. Each drains the worker: it says Goodbye before it exits.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A write to a socket whose peer died (a Gloo pair, a gRPC connection) must fail with EPIPE,
  // not kill this process: a survivor of a killed peer reports the error and is restarted.
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<weft::PathRoots> roots = weft::PathRoots::Resolve(
      absl::GetFlag(FLAGS_data_root), absl::GetFlag(FLAGS_checkpoint_root));
  if (!roots.ok()) {
    std::fprintf(stderr, "weft-worker: %s\n", std::string(roots.status().message()).c_str());
    return 2;
  }

  // Every open under a root is resolved beneath it, at every save and load: a folder swapped for
  // a link after the task's paths were checked leads nowhere outside.
  weft::ConfineToRoots({roots->data, roots->checkpoint});

  weft::WorkerOptions options;
  options.coordinator = coordinator;
  options.roots = *std::move(roots);
  options.host = absl::GetFlag(FLAGS_host);
  if (const std::string limit = absl::GetFlag(FLAGS_memory_limit); !limit.empty()) {
    absl::StatusOr<int64_t> bytes = weft::ParseByteSize(limit);
    if (!bytes.ok()) {
      std::fprintf(stderr, "weft-worker: --memory_limit: %s\n",
                   std::string(bytes.status().message()).c_str());
      return 2;
    }
    options.memory_limit_bytes = *bytes;
  }
  options.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_ms));
  options.reconnect_deadline = absl::Seconds(absl::GetFlag(FLAGS_reconnect_deadline_s));
  options.task_log = task_log;
  // Ready once registered: systemd then counts the unit started. Called on Run's thread only.
  options.on_connection = [ready = false](bool connected, const std::string& what) mutable {
    absl::Status s = connected && !ready ? weft::systemd::NotifyReady(what)
                                         : weft::systemd::NotifyStatus(what);
    ready = ready || connected;
    if (!s.ok()) spdlog::warn("{}", s.ToString());
  };

  weft::CoordinatorChannelOptions connection;
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    absl::StatusOr<std::string> read = weft::ReadBearerTokenFile(path);
    if (!read.ok()) {
      spdlog::error("--token_file: {}", std::string(read.status().message()));
      return 2;
    }
    connection.token = *std::move(read);
  }
  if (const std::string path = absl::GetFlag(FLAGS_tls_ca); !path.empty()) {
    absl::StatusOr<std::string> read = weft::ReadPemCertificates(path);
    if (!read.ok()) {
      spdlog::error("--tls_ca {}", std::string(read.status().message()));
      return 2;
    }
    connection.tls_ca_pem = *std::move(read);
  }
  connection.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
  if (!connection.tls_server_name.empty() && connection.tls_ca_pem.empty()) {
    spdlog::error("--tls_server_name needs --tls_ca (it names the certificate TLS checks)");
    return 2;
  }
  // Every call of this worker (its stream, the rendezvous of its communicators) goes over this
  // one channel, with the token and TLS.
  std::shared_ptr<grpc::Channel> channel = weft::NewCoordinatorChannel(coordinator, connection);
  const absl::Duration collective_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_collective_timeout_s));
  std::unique_ptr<weft::TaskEnvironment> env;
  if (parsed->first == "cpu") {
    env = std::make_unique<weft::GlooTaskEnvironment>(channel, options.host, collective_timeout,
                                                      &weft::Executor::Create);
  } else {
#ifdef WEFT_CUDA
    env = std::make_unique<weft::NcclTaskEnvironment>(channel, parsed->second,
                                                      collective_timeout);
#endif
  }
  std::unique_ptr<weft::MetricsServer> metrics_server;
  if (const std::string listen = absl::GetFlag(FLAGS_metrics_listen); !listen.empty()) {
    auto metrics = std::make_shared<weft::WorkerMetrics>(parsed->first);
    absl::StatusOr<std::unique_ptr<weft::MetricsServer>> started = weft::MetricsServer::Start(
        listen, [metrics] { return metrics->registry().Render(); });
    if (!started.ok()) {
      spdlog::error("{}", std::string(started.status().message()));
      return 2;
    }
    metrics_server = *std::move(started);
    // A wildcard listen address is no address to scrape: peers reach this worker at --host.
    const std::string& bound = metrics_server->host();
    const bool wildcard = bound == "0.0.0.0" || bound == "::" || bound == "*";
    options.metrics = metrics;
    options.metrics_address =
        wildcard ? weft::JoinHostPort(options.host, metrics_server->port())
                 : metrics_server->address();
    spdlog::info("serving metrics on http://{}/metrics", options.metrics_address);
  }
  weft::Worker worker(options, weft::ToDeviceInfo(*described), env.get(),
                      weft::v1::WorkerService::NewStub(channel));
  spdlog::info("pid {}, coordinator {} ({}), device {} ({}), collectives on {}", getpid(),
               coordinator, connection.tls_ca_pem.empty() ? "plaintext" : "TLS", device,
               described->name, options.host);

  absl::Status status;
  std::atomic<bool> done{false};
  std::thread runner([&] {
    status = worker.Run();
    done = true;
  });
  std::unique_ptr<weft::systemd::Watchdog> watchdog = weft::systemd::Watchdog::StartIfEnabled(
      "weft-worker", [&worker](absl::Duration timeout) { return worker.CheckAlive(timeout); });
  while (!done) {
    const timespec tick = {0, 200 * 1000 * 1000};
    const int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
      const char* name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP";
      spdlog::info("{}: shutting down", name);
      if (absl::Status s = weft::systemd::NotifyStopping(); !s.ok()) {
        spdlog::warn("{}", s.ToString());
      }
      worker.Shutdown(absl::StrCat(name, ": the worker is shutting down"));
      break;
    }
  }
  runner.join();
  watchdog.reset();
  metrics_server.reset();
  if (!status.ok()) {
    spdlog::error("{}", std::string(status.message()));
    return 1;
  }
  return 0;
}
