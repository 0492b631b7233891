#include "common/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/metrics_server.h"

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

  // The port is taken while it serves; afterwards it is free again.
  const int port = (*server)->port();
  auto second = MetricsServer::Start("127.0.0.1:" + std::to_string(port), [] { return ""; });
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
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

}  // namespace
}  // namespace weft
