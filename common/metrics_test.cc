#include "common/metrics.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/metrics_server.h"
#include "common/open_file_limit.h"

namespace weft {
namespace {

TEST(MetricsTest, CountersAndGaugesRenderWithTheirLabels) {
  MetricsRegistry registry;
  CounterFamily* steps = registry.AddCounter("weft_steps_total", "Steps done.", {"job"});
  GaugeFamily* workers = registry.AddGauge("weft_workers", "Workers.", {"state", "device"});
  GaugeFamily* unused = registry.AddGauge("weft_unused", "Never set.");
  steps->Add({"job-1"});
  steps->Add({"job-1"}, 2);
  steps->Add({"job-1"}, -5);  // ignored: counters only go up
  steps->Add({"job-2"}, 0.5);
  workers->Set({"idle", "cpu"}, 3);
  workers->Set({"idle", "cpu"}, 2);  // a gauge holds the last value set
  EXPECT_EQ(steps->Value({"job-1"}), 3);
  EXPECT_EQ(unused->SeriesCount(), 0);
  EXPECT_EQ(registry.Render(),
            "# HELP weft_steps_total Steps done.\n"
            "# TYPE weft_steps_total counter\n"
            "weft_steps_total{job=\"job-1\"} 3\n"
            "weft_steps_total{job=\"job-2\"} 0.5\n"
            "# HELP weft_workers Workers.\n"
            "# TYPE weft_workers gauge\n"
            "weft_workers{state=\"idle\",device=\"cpu\"} 2\n");
  steps->Remove({"job-1"});
  EXPECT_EQ(steps->SeriesCount(), 1);
  // Families lists them all, the one without series too.
  const std::vector<MetricFamilyInfo> families = registry.Families();
  ASSERT_EQ(families.size(), 3u);
  EXPECT_EQ(families[1].name, "weft_workers");
  EXPECT_EQ(families[1].type, "gauge");
  EXPECT_EQ(families[1].label_names, (std::vector<std::string>{"state", "device"}));
  EXPECT_EQ(families[2].name, "weft_unused");
}

// Buckets are cumulative, `le` is inclusive, +Inf counts everything, _sum and _count follow.
TEST(MetricsTest, HistogramBucketsAreCumulative) {
  MetricsRegistry registry;
  HistogramFamily* h = registry.AddHistogram("weft_step_seconds", "Step time.", {"job"},
                                             {0.1, 1, 0.01});  // sorted on the way in
  for (double v : {0.005, 0.01, 0.5, 0.5, 7.0}) h->Observe({"j"}, v);
  EXPECT_EQ(h->Count({"j"}), 5u);
  EXPECT_EQ(registry.Render(),
            "# HELP weft_step_seconds Step time.\n"
            "# TYPE weft_step_seconds histogram\n"
            "weft_step_seconds_bucket{job=\"j\",le=\"0.01\"} 2\n"
            "weft_step_seconds_bucket{job=\"j\",le=\"0.10000000000000001\"} 2\n"
            "weft_step_seconds_bucket{job=\"j\",le=\"1\"} 4\n"
            "weft_step_seconds_bucket{job=\"j\",le=\"+Inf\"} 5\n"
            "weft_step_seconds_sum{job=\"j\"} 8.0150000000000006\n"
            "weft_step_seconds_count{job=\"j\"} 5\n");
}

TEST(MetricsTest, LabelValuesAndHelpAreEscaped) {
  MetricsRegistry registry;
  GaugeFamily* g = registry.AddGauge("weft_x", "Line one\nback\\slash.", {"name"});
  g->Set({"a \"quoted\"\nname\\"}, 1);
  EXPECT_EQ(registry.Render(),
            "# HELP weft_x Line one\\nback\\\\slash.\n"
            "# TYPE weft_x gauge\n"
            "weft_x{name=\"a \\\"quoted\\\"\\nname\\\\\"} 1\n");
}

TEST(MetricsTest, CollectorsRunBeforeEachRender) {
  MetricsRegistry registry;
  GaugeFamily* g = registry.AddGauge("weft_renders", "Renders so far.");
  int renders = 0;
  registry.AddCollector([&] { g->Set({}, ++renders); });
  EXPECT_TRUE(absl::StrContains(registry.Render(), "weft_renders 1\n"));
  EXPECT_TRUE(absl::StrContains(registry.Render(), "weft_renders 2\n"));
}

// Raw-socket helpers for the server's limits: every connection non-blocking, every wait a poll
// with a deadline.

// A socket descriptor, closed when it goes.
class Socket {
 public:
  explicit Socket(int fd = -1) : fd_(fd) {}
  Socket(Socket&& other) : fd_(std::exchange(other.fd_, -1)) {}
  Socket& operator=(Socket&& other) {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Socket() {
    if (fd_ >= 0) close(fd_);
  }
  int fd() const { return fd_; }

 private:
  int fd_;
};

// A non-blocking connection to 127.0.0.1:port; fd -1 (and a test failure) when refused.
Socket ConnectLoopback(int port) {
  Socket socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (socket.fd() < 0 ||
      connect(socket.fd(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    ADD_FAILURE() << "connecting to 127.0.0.1:" << port << ": " << std::strerror(errno);
    return Socket();
  }
  fcntl(socket.fd(), F_SETFL, fcntl(socket.fd(), F_GETFL) | O_NONBLOCK);
  return socket;
}

// Waits until `fd` has one of `events` (or an error or hang-up) or `deadline` passes: revents,
// 0 at the deadline.
short WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return 0;
    pollfd p{fd, events, 0};
    const int ready = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready > 0) return p.revents;
    if (ready < 0 && errno != EINTR) return POLLERR;
  }
}

// Sends all of `data` by `deadline`: false when the peer closed or the deadline passed.
bool SendAll(int fd, const std::string& data, absl::Time deadline) {
  for (size_t sent = 0; sent < data.size();) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += n;
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      return false;
    } else if (!(WaitFor(fd, POLLOUT, deadline) & POLLOUT)) {
      return false;
    }
  }
  return true;
}

// What the peer sends until it closes (or resets) the connection, or `deadline` passes: closed
// is false then.
struct Received {
  std::string data;
  bool closed = false;
};
Received ReadUntilClosed(int fd, absl::Time deadline) {
  Received got;
  char buffer[16 << 10];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      got.data.append(buffer, n);
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      got.closed = true;  // EOF, or ECONNRESET from a close with our data still unread
      return got;
    } else if (WaitFor(fd, POLLIN, deadline) == 0) {
      return got;
    }
  }
}

// One HTTP exchange on a new connection that asks the server to close it after its answer: the
// whole answer, status line first.
std::string Exchange(int port, const std::string& request) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  Socket socket = ConnectLoopback(port);
  if (socket.fd() < 0 || !SendAll(socket.fd(), request, deadline)) return "";
  return ReadUntilClosed(socket.fd(), deadline).data;
}

constexpr char kScrape[] = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

// A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); -1 when absent.
int64_t ProcessStatusBytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (!absl::StartsWith(line, field + ":")) continue;
    int64_t kb = 0;
    absl::string_view value = absl::string_view(line).substr(field.size() + 1);
    absl::ConsumeSuffix(&value, " kB");  // "VmRSS:\t  123456 kB"
    if (absl::SimpleAtoi(value, &kb)) return kb << 10;
  }
  return -1;
}

// Resets the peak resident size (VmHWM) to the current one, so that VmHWM afterwards is the peak
// since now; false where the kernel does not allow it.
bool ResetPeakResidentSize() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return clear_refs.good();
}

int OpenDescriptors() {
  return static_cast<int>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                        std::filesystem::directory_iterator()));
}

// `prefix` and then 'a's with no line end, up to `total` bytes in 64 KiB sends, stopping as soon
// as the server answers or closes the connection: how much was sent, what came back, and the
// most the process's resident size grew meanwhile (the server runs in this process).
struct Flood {
  int64_t sent = 0;
  Received answer;
  int64_t resident_growth = 0;
};
Flood SendUntilRefused(int port, const std::string& prefix, int64_t total) {
  Flood flood;
  const bool peak_reset = ResetPeakResidentSize();
  const int64_t resident_before = ProcessStatusBytes("VmRSS");
  int64_t resident_most = resident_before;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  Socket socket = ConnectLoopback(port);
  if (socket.fd() < 0) return flood;
  // A fixed send buffer (128 KiB: the kernel doubles what it is given) rather than one that grows
  // to 4 MiB: what was sent is then what the server took in, give or take its receive buffer.
  const int send_buffer = 64 << 10;
  setsockopt(socket.fd(), SOL_SOCKET, SO_SNDBUF, &send_buffer, sizeof(send_buffer));
  if (!SendAll(socket.fd(), prefix, deadline)) return flood;
  flood.sent = prefix.size();
  const std::string chunk(64 << 10, 'a');
  while (flood.sent < total) {
    const short ready = WaitFor(socket.fd(), POLLIN | POLLOUT, deadline);
    if (ready == 0 || (ready & (POLLIN | POLLHUP | POLLERR))) break;  // answered or closed
    const ssize_t n = send(socket.fd(), chunk.data(),
                           std::min<int64_t>(chunk.size(), total - flood.sent), MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) break;  // EPIPE, ECONNRESET: closed
    if (n > 0) flood.sent += n;
    // Sampled as well, where the peak cannot be reset.
    if (n > 0 && flood.sent % (1 << 20) < n) {
      resident_most = std::max(resident_most, ProcessStatusBytes("VmRSS"));
    }
  }
  flood.answer = ReadUntilClosed(socket.fd(), deadline);
  resident_most = std::max(resident_most, ProcessStatusBytes("VmRSS"));
  if (peak_reset) resident_most = std::max(resident_most, ProcessStatusBytes("VmHWM"));
  flood.resident_growth = resident_most - resident_before;
  return flood;
}

TEST(MetricsServerTest, ServesMetricsOverHttp) {
  MetricsRegistry registry;
  registry.AddCounter("weft_scrapes_total", "Scrapes.")->Add({});
  auto server = MetricsServer::Start("127.0.0.1:0", [&] { return registry.Render(); });
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  EXPECT_EQ((*server)->url(), "http://127.0.0.1:" + std::to_string((*server)->port()) + "/metrics");

  httplib::Client client("127.0.0.1", (*server)->port());
  httplib::Result got = client.Get("/metrics");
  ASSERT_TRUE(got) << httplib::to_string(got.error());
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_TRUE(absl::StrContains(got->body, "weft_scrapes_total 1\n")) << got->body;
  httplib::Result other = client.Get("/other");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  // HEAD as GET without the body; no other method.
  httplib::Result head = client.Head("/metrics");
  ASSERT_TRUE(head) << httplib::to_string(head.error());
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->body, "");
  httplib::Result post = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post) << httplib::to_string(post.error());
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(post->get_header_value("Allow"), "GET, HEAD");

  // The port is taken while it serves; afterwards it is free again.
  const int port = (*server)->port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto second = MetricsServer::Start(address, [] { return ""; });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(second.status().message(),
                                "--metrics_listen " + address + ": cannot listen there"))
      << second.status();
  server->reset();
  auto again = MetricsServer::Start("127.0.0.1:" + std::to_string(port), [] { return ""; });
  EXPECT_TRUE(again.ok()) << again.status();
}

TEST(MetricsServerTest, MalformedAddressesAreRefusedNamingTheFlag) {
  for (const std::string bad : {"127.0.0.1", "127.0.0.1:99999", ":9100", "host:-1", "host:9x"}) {
    auto server = MetricsServer::Start(bad, [] { return ""; });
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_TRUE(absl::StrContains(server.status().message(), "--metrics_listen " + bad))
        << server.status();
  }
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHostPort("--x", "[::1]:9100", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 9100);
  EXPECT_EQ(JoinHostPort(host, port), "[::1]:9100");
  EXPECT_EQ(JoinHostPort("10.0.0.5", 9471), "10.0.0.5:9471");
  // Every interface, where the caller allows it (the coordinator's --listen ":7070").
  EXPECT_FALSE(ParseHostPort("--x", ":7070", &host, &port).ok());
  ASSERT_TRUE(ParseHostPort("--x", ":7070", &host, &port, /*allow_empty_host=*/true).ok());
  EXPECT_EQ(host, "");
  EXPECT_EQ(port, 7070);
  EXPECT_EQ(ParseHostPort("--listen", ":123456", &host, &port, true).message(),
            "--listen :123456: expected HOST:PORT with a port from 0 (any free one) to 65535");
}


// The security review's 100 MB request line and header line (issue 30): refused after about the
// per-connection memory limit, without the server holding them.
TEST(MetricsServerTest, OverlongRequestLineAndHeaderAreRefusedWithoutBeingBuffered) {
  auto server = MetricsServer::Start("127.0.0.1:0", [] { return "weft_up 1\n"; });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  constexpr int64_t kTotal = 100 << 20;
  // What may be sent before the refusal arrives: the memory limit the server reads, plus what the
  // kernel buffers between (the client's send buffer, fixed at 128 KiB below, and the server's
  // receive buffer, 128 KiB by default): 1 MiB is 32 times the limit.
  constexpr int64_t kMostSent = 1 << 20;
  const struct {
    std::string what, prefix, status;
  } cases[] = {
      {"request line", "GET /", "HTTP/1.1 414"},
      {"header line", "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Long: ", "HTTP/1.1 431"},
  };
  for (const auto& c : cases) {
    const Flood flood = SendUntilRefused(port, c.prefix, kTotal);
    std::cout << "a 100 MiB " << c.what << ": refused after " << flood.sent << " bytes sent ("
              << (flood.answer.data.empty() ? "connection reset"
                                            : flood.answer.data.substr(0, 12))
              << "), resident size grew " << flood.resident_growth << " bytes at most\n";
    EXPECT_LT(flood.sent, kMostSent) << c.what;
    EXPECT_TRUE(flood.answer.closed) << c.what;
    // The answer is lost where the server's close resets the connection before it is read.
    if (!flood.answer.data.empty()) {
      EXPECT_TRUE(absl::StartsWith(flood.answer.data, c.status)) << flood.answer.data;
    }
    EXPECT_LT(flood.resident_growth, 8 << 20) << c.what;
  }
  // A request of ordinary size, a long header among them, is still answered.
  const std::string answer = Exchange(
      port, absl::StrCat("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ",
                         std::string(8 << 10, 't'), "\r\nConnection: close\r\n\r\n"));
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer.substr(0, 100);
  EXPECT_TRUE(absl::EndsWith(answer, "\r\n\r\nweft_up 1\n")) << answer;
}

// The review's 2,000 partial requests (issue 30): all held open at once by the server, a scrape
// on a new connection beside them is answered at once.
TEST(MetricsServerTest, AScrapeIsAnsweredBesideTwoThousandStalledRequests) {
  constexpr int kStalled = 2000;
  // Both ends of every connection are in this process, and the server takes at most half the
  // open-file limit.
  constexpr int64_t kFilesNeeded = 2 * kStalled + 256;
  absl::StatusOr<int64_t> files = RaiseOpenFileLimit();
  ASSERT_TRUE(files.ok()) << files.status();
  if (*files < kFilesNeeded) {
    GTEST_SKIP() << "needs " << kFilesNeeded << " open files (" << kStalled
                 << " connections, both ends in this process); the hard RLIMIT_NOFILE is "
                 << *files;
  }
  MetricsRegistry registry;
  registry.AddCounter("weft_scrapes_total", "Scrapes.")->Add({});
  auto server = MetricsServer::Start("127.0.0.1:0", [&] { return registry.Render(); });
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();

  const int64_t resident_before = ProcessStatusBytes("VmRSS");
  const int descriptors_before = OpenDescriptors();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  std::vector<Socket> stalled;
  for (int i = 0; i < kStalled; ++i) {
    stalled.push_back(ConnectLoopback(port));
    ASSERT_GE(stalled.back().fd(), 0);
    ASSERT_TRUE(SendAll(stalled.back().fd(), "GET /metrics HTTP/1.1\r\nHost: x\r\n", deadline));
  }
  // The server has accepted them all when this process holds both ends of each.
  while (OpenDescriptors() < descriptors_before + 2 * kStalled && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));  // polling a condition, with a deadline
  }
  ASSERT_GE(OpenDescriptors(), descriptors_before + 2 * kStalled)
      << "the server did not accept all " << kStalled << " connections";
  const int64_t resident_growth = ProcessStatusBytes("VmRSS") - resident_before;

  const absl::Time start = absl::Now();
  const std::string answer = Exchange(port, kScrape);
  const absl::Duration latency = absl::Now() - start;
  std::cout << "a scrape beside " << kStalled << " stalled requests: answered in "
            << absl::FormatDuration(latency) << "; the " << kStalled
            << " connections (both ends) added " << resident_growth << " bytes resident\n";
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer.substr(0, 100);
  EXPECT_TRUE(absl::StrContains(answer, "\r\n\r\n# HELP weft_scrapes_total Scrapes.\n")) << answer;
  EXPECT_LT(latency, absl::Seconds(2));
}

// bench/hostile_load.sh: connections that each send a byte of their request every second (well
// inside the inactivity timeout) held every slot for as long as they kept on. Each is now closed
// once its request deadline passes, however it keeps sending, and a scrape is served.
TEST(MetricsServerTest, ARequestDrippedByteByBytePastItsDeadlineIsClosed) {
  constexpr int kDripping = 20;
  const absl::Duration request_deadline = absl::Seconds(3);
  MetricsRegistry registry;
  registry.AddCounter("weft_scrapes_total", "Scrapes.")->Add({});
  auto server = MetricsServer::Start("127.0.0.1:0", [&] { return registry.Render(); },
                                     request_deadline);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + request_deadline + absl::Seconds(10);
  std::vector<Socket> dripping;
  for (int i = 0; i < kDripping; ++i) {
    dripping.push_back(ConnectLoopback(port));
    ASSERT_GE(dripping.back().fd(), 0);
  }
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaa";
  std::vector<absl::Duration> closed_after(kDripping, absl::InfiniteDuration());
  int open = kDripping;
  for (size_t sent = 0; open > 0 && absl::Now() < give_up; ++sent) {
    for (int i = 0; i < kDripping; ++i) {
      if (closed_after[i] != absl::InfiniteDuration()) continue;
      const char byte = request[sent % request.size()];
      pollfd p{dripping[i].fd(), POLLIN, 0};
      const bool hung_up = ::poll(&p, 1, 0) > 0;
      if (hung_up || ::send(dripping[i].fd(), &byte, 1, MSG_NOSIGNAL) != 1) {
        closed_after[i] = absl::Now() - start;
        --open;
      }
    }
    absl::SleepFor(absl::Milliseconds(500));  // the drip's pace, not a wait for a condition
  }
  for (int i = 0; i < kDripping; ++i) {
    EXPECT_GE(closed_after[i], request_deadline) << "closed before its deadline: " << i;
    EXPECT_LT(closed_after[i], request_deadline + absl::Seconds(5)) << "connection " << i;
  }
  EXPECT_EQ((*server)->deadline_closes(), kDripping);
  // A scrape is answered as before.
  const std::string answer = Exchange(port, kScrape);
  EXPECT_TRUE(absl::StartsWith(answer, "HTTP/1.1 200")) << answer.substr(0, 100);
  EXPECT_TRUE(absl::StrContains(answer, "# HELP weft_scrapes_total Scrapes.")) << answer;
}

// A connection that sends nothing, or stops halfway through its request, is closed after the
// inactivity timeout (and not before).
TEST(MetricsServerTest, SilentConnectionsAreClosedAfterTheInactivityTimeout) {
  auto server = MetricsServer::Start("127.0.0.1:0", [] { return ""; });
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Duration timeout = absl::Seconds(MetricsServer::kInactivityTimeoutSeconds);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout + absl::Seconds(5);
  Socket silent = ConnectLoopback((*server)->port());
  Socket halfway = ConnectLoopback((*server)->port());
  ASSERT_TRUE(SendAll(halfway.fd(), "GET /metrics HTTP/1.1\r\nHost:", deadline));
  for (const Socket* socket : {&silent, &halfway}) {
    const Received got = ReadUntilClosed(socket->fd(), deadline);
    const absl::Duration closed_after = absl::Now() - start;
    std::cout << (socket == &silent ? "a silent connection" : "a stalled request")
              << ": closed after " << absl::FormatDuration(closed_after) << "\n";
    EXPECT_TRUE(got.closed) << "still open after " << absl::FormatDuration(closed_after);
    EXPECT_EQ(got.data, "");
    EXPECT_GE(closed_after, timeout - absl::Milliseconds(500));
    EXPECT_LE(closed_after, timeout + absl::Seconds(3));
  }
}

// Hosts are names or addresses, IPv6 in brackets.
TEST(MetricsServerTest, ListensOnNamesAndIpv6Addresses) {
  auto named = MetricsServer::Start("localhost:0", [] { return "weft_up 1\n"; });
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ((*named)->address(), "localhost:" + std::to_string((*named)->port()));
  httplib::Client by_name("localhost", (*named)->port());
  httplib::Result got = by_name.Get("/metrics");
  ASSERT_TRUE(got) << httplib::to_string(got.error());
  EXPECT_EQ(got->body, "weft_up 1\n");

  auto v6 = MetricsServer::Start("[::1]:0", [] { return "weft_up 1\n"; });
  if (!v6.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << v6.status();
  EXPECT_EQ((*v6)->url(), "http://[::1]:" + std::to_string((*v6)->port()) + "/metrics");
  httplib::Client by_address("::1", (*v6)->port());
  got = by_address.Get("/metrics");
  ASSERT_TRUE(got) << httplib::to_string(got.error());
  EXPECT_EQ(got->body, "weft_up 1\n");
}

}  // namespace
}  // namespace weft
