// Connection floods against the real daemons on 127.0.0.1, which need no token (issue 30, item 1):
// - 1,100 idle TCP connections to the coordinator's gRPC port and 1,100 to its metrics port, the
//   coordinator started under systemd's default soft open-file limit (1024) with a job running:
//   new clients are served during the flood (weftctl list and submit, health SERVING, a scrape),
//   the job SUCCEEDS, and the gRPC server closes the connections that never finish a handshake.
// - A coordinator whose hard limit is too low to raise (128) runs out of descriptors and gRPC
//   stops accepting for good: within seconds health says NOT_SERVING (asked over a connection
//   made before the flood), the log says why, and the systemd watchdog is no longer pinged, so a
//   supervisor restarts it.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>


#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/jobspec/yaml.h"
#include "common/subprocess.h"
#include "common/testing_files.h"
#include "common/testing_notify_socket.h"
#include "tests/cluster_fixture.h"
#include "tests/daemon_cluster.h"
#include "tests/process.h"

namespace weft::testing {
namespace {

constexpr int kFlood = 1100;

// Raises this process's soft open-file limit to its hard one; the limit now.
rlim_t RaiseOwnLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
  getrlimit(RLIMIT_NOFILE, &limit);
  return limit.rlim_cur;
}

// Idle TCP connections to 127.0.0.1:port that never send a byte; closed when it goes.
class IdleConnections {
 public:
  // Opens `count`; each connect gets 2 s (the kernel completes them into the server's accept
  // queue whether or not the server accepts). Stops at the first that fails.
  IdleConnections(int port, int count) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < count; ++i) {
      const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) return;
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
          errno != EINPROGRESS) {
        close(fd);
        return;
      }
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t len = sizeof(error);
      if (poll(&p, 1, 2000) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0 ||
          error != 0) {
        close(fd);
        return;
      }
      fds_.push_back(fd);
    }
  }
  ~IdleConnections() {
    for (int fd : fds_) close(fd);
  }
  int size() const { return static_cast<int>(fds_.size()); }
  // How many the server has closed: what it sent (gRPC's SETTINGS, an HTTP error) is read and
  // dropped, then a read sees the end of the stream or a reset.
  int ClosedByServer() const {
    int closed = 0;
    for (int fd : fds_) {
      char buffer[4096];
      ssize_t n;
      while ((n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT)) > 0) {
      }
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) ++closed;
    }
    return closed;
  }

 private:
  std::vector<int> fds_;
};

// GET /metrics on a new connection: the status line's code, or 0 when nothing answered in 5 s.
int Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return 0;
  }
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return 0;
  }
  char head[16] = {};
  const ssize_t n = recv(fd, head, sizeof(head) - 1, MSG_WAITALL);
  close(fd);
  int code = 0;
  if (n >= 12 && absl::StartsWith(head, "HTTP/1.1 ")) absl::SimpleAtoi(std::string(head + 9, 3), &code);
  return code;
}

TEST(FloodTest, AThousandIdleConnectionsOnEachPortDoNotStopServingOrTheJob) {
  const rlim_t own = RaiseOwnLimit();
  if (own < 2 * kFlood + 256) GTEST_SKIP() << "this machine's hard open-file limit is " << own;
  const std::string dir = MakeTempDir("flood");
  DaemonClusterOptions options;
  // systemd's default soft limit; the coordinator raises it to the hard limit at start.
  options.coordinator_flags = {"--metrics_listen", "127.0.0.1:0", "--metrics_port_file",
                               dir + "/metrics.port"};
  options.worker_env = {{"WEFT_DEBUG_STEP_MS", "30"}};
  rlimit limit;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  const rlimit systemd_default{1024, limit.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &systemd_default), 0);  // inherited by the daemons
  auto cluster = DaemonCluster::Start(options);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  DaemonCluster& c = **cluster;
  int grpc_port = 0, metrics_port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(c.address().substr(c.address().rfind(':') + 1), &grpc_port));
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadFileOrEmpty(dir + "/metrics.port")),
                               &metrics_port));

  // A job of 150 paced steps (about 5 s), running when the flood starts.
  const MlpJob job = MlpJob::Create();
  auto spec = ParseJobSpecYaml(MlpSpec(job, "{shape: [1], dim_names: [dp]}", 150, "", false),
                               job.dir);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::string id;
  ASSERT_TRUE(c.Submit(*spec, &id).ok());
  ASSERT_TRUE(PollUntil([&] { return c.GetJob(id).steps_size() >= 3; }, absl::Seconds(60)).ok())
      << c.Logs();

  IdleConnections grpc_flood(grpc_port, kFlood);
  IdleConnections metrics_flood(metrics_port, kFlood);
  ASSERT_EQ(grpc_flood.size(), kFlood);
  ASSERT_EQ(metrics_flood.size(), kFlood);

  // New clients are served during the flood: each weftctl dials afresh.
  CommandResult list = c.Weftctl({"list"}, 30);
  EXPECT_EQ(list.exit_code, 0) << list.err;
  const std::string spec_file = job.dir + "/during_flood.yaml";
  WriteAll(spec_file, MlpSpec(job, "{shape: [1], dim_names: [dp]}", 3, "", false));
  CommandResult submit = c.Weftctl({"submit", "--check-local-files", spec_file}, 30);
  EXPECT_EQ(submit.exit_code, 0) << submit.err;
  EXPECT_EQ(HealthStatus(FreshChannel(c.address())), "SERVING");
  // The metrics server bounds its connections: a scrape is answered, once idle ones time out if
  // the bound is full.
  int code = 0;
  EXPECT_TRUE(PollUntil([&] { return (code = Scrape(metrics_port)) == 200; }, absl::Seconds(30),
                        absl::Milliseconds(200))
                  .ok())
      << "the last scrape: " << code;

  const JobOutcome outcome = JobOutcome::Of(c.Watch(id, 120));
  EXPECT_EQ(outcome.state, v1::SUCCEEDED) << outcome.message << c.Logs();
  EXPECT_EQ(outcome.losses.size(), 150u);

  // Connections that never finish a handshake are closed (gRPC's handshake timeout, 10 s), as are
  // the metrics server's idle ones.
  EXPECT_TRUE(PollUntil([&] { return grpc_flood.ClosedByServer() == kFlood; }, absl::Seconds(40),
                        absl::Milliseconds(500))
                  .ok())
      << grpc_flood.ClosedByServer() << " of " << kFlood << " gRPC connections closed";
  EXPECT_TRUE(PollUntil([&] { return metrics_flood.ClosedByServer() == kFlood; },
                        absl::Seconds(40), absl::Milliseconds(500))
                  .ok())
      << metrics_flood.ClosedByServer() << " of " << kFlood << " metrics connections closed";
  EXPECT_EQ(HealthStatus(FreshChannel(c.address())), "SERVING");
}

TEST(FloodTest, AServerOutOfDescriptorsSaysNotServingAndStopsPingingTheWatchdog) {
  const std::string dir = MakeTempDir("stall");
  absl::StatusOr<std::unique_ptr<NotifySocket>> notes = NotifySocket::Create();
  ASSERT_TRUE(notes.ok()) << notes.status();
  const std::string log = dir + "/coordinator.log";
  // A hard limit of 128: the coordinator cannot raise it, and 300 connections exhaust it.
  absl::StatusOr<std::unique_ptr<Subprocess>> coordinator = StartDaemon(
      {"/usr/bin/prlimit", "--nofile=128:128", BinaryPath("coordinator/weft-coordinator"),
       "--listen", "127.0.0.1:0", "--data_dir", dir + "/data", "--port_file", dir + "/port"},
      log, {{"NOTIFY_SOCKET", (*notes)->path()}, {"WATCHDOG_USEC", "1000000"}});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::StatusOr<int> port = WaitForPortFile(dir + "/port", **coordinator, absl::Seconds(30));
  ASSERT_TRUE(port.ok()) << port.status() << ReadFileOrEmpty(log);
  ASSERT_TRUE((*notes)
                  ->ReceiveMatching([](const std::string& m) { return m == "WATCHDOG=1"; },
                                    absl::Now() + absl::Seconds(30))
                  .ok())
      << ReadFileOrEmpty(log);
  // A client connected before the flood keeps its connection.
  std::shared_ptr<grpc::Channel> before = FreshChannel(absl::StrCat("127.0.0.1:", *port));
  ASSERT_EQ(HealthStatus(before), "SERVING");

  IdleConnections flood(*port, 300);
  ASSERT_EQ(flood.size(), 300);
  std::string health;
  ASSERT_TRUE(PollUntil([&] { return (health = HealthStatus(before)) == "NOT_SERVING"; },
                        absl::Seconds(60), absl::Milliseconds(500))
                  .ok())
      << health << "\n" << ReadFileOrEmpty(log);
  EXPECT_NE(ReadFileOrEmpty(log).find("the gRPC server has stopped accepting connections: "),
            std::string::npos)
      << ReadFileOrEmpty(log);
  // No ping from here on (WatchdogSec=1: one would come every 500 ms).
  (*notes)->Drain();
  absl::StatusOr<std::string> ping = (*notes)->ReceiveMatching(
      [](const std::string& m) { return m == "WATCHDOG=1"; }, absl::Now() + absl::Seconds(3));
  EXPECT_FALSE(ping.ok()) << "the watchdog was pinged after the server stopped accepting";
}

}  // namespace
}  // namespace weft::testing
