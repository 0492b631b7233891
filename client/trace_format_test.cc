#include "client/trace_format.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace weft::client {
namespace {

v1::JobTrace TwoRanks() {
  v1::JobTrace trace;
  for (int r = 0; r < 2; ++r) {
    v1::RankTrace* rank = trace.add_ranks();
    rank->set_rank(r);
    rank->set_worker_id("worker-" + std::to_string(r + 1));
    for (int mb = 0; mb < 2; ++mb) {
      v1::TraceSpan* span = rank->add_spans();
      span->set_name("F mb" + std::to_string(mb) + " c0");
      span->set_category("forward");
      span->set_start_us(1700000000000000 + 1000 * r + 100 * mb);
      span->set_duration_us(50);
      span->set_micro_batch(mb);
      span->set_chunk(0);
    }
  }
  v1::TraceSpan* opt = trace.mutable_ranks(1)->add_spans();
  opt->set_name("optimizer \"sgd\"");
  opt->set_category("optimizer");
  opt->set_start_us(1700000000000000 + 5000);
  opt->set_duration_us(7);
  opt->set_micro_batch(-1);
  opt->set_chunk(-1);
  return trace;
}

TEST(TraceFormatTest, OneProcessPerRankAndSpansRelativeToTheEarliest) {
  const nlohmann::json doc = nlohmann::json::parse(FormatChromeTrace(TwoRanks()));
  ASSERT_TRUE(doc["traceEvents"].is_array());
  std::set<int> named;
  int spans = 0;
  int64_t earliest = -1;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") {
        named.insert(e["pid"].get<int>());
        EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(e["pid"].get<int>()) +
                                         " (worker-" + std::to_string(e["pid"].get<int>() + 1) +
                                         ")");
      }
      continue;
    }
    ++spans;
    EXPECT_EQ(e["ph"], "X");
    EXPECT_EQ(e["tid"], 0);
    EXPECT_TRUE(e["args"].contains("micro_batch"));
    EXPECT_TRUE(e["args"].contains("chunk"));
    EXPECT_GT(e["dur"].get<int64_t>(), 0);
    const int64_t ts = e["ts"].get<int64_t>();
    if (earliest < 0 || ts < earliest) earliest = ts;
  }
  EXPECT_EQ(named, (std::set<int>{0, 1}));
  EXPECT_EQ(spans, 5);
  EXPECT_EQ(earliest, 0);

  // Rank 1's second forward and the optimizer, with its quoted name.
  const nlohmann::json& events = doc["traceEvents"];
  bool found = false;
  for (const nlohmann::json& e : events) {
    if (e["name"] == "optimizer \"sgd\"") {
      found = true;
      EXPECT_EQ(e["pid"], 1);
      EXPECT_EQ(e["cat"], "optimizer");
      EXPECT_EQ(e["ts"], 5000);
      EXPECT_EQ(e["dur"], 7);
      EXPECT_EQ(e["args"]["micro_batch"], -1);
    }
    if (e["name"] == "F mb1 c0" && e["pid"] == 1) {
      EXPECT_EQ(e["ts"], 1100);
      EXPECT_EQ(e["args"]["micro_batch"], 1);
      EXPECT_EQ(e["args"]["chunk"], 0);
    }
  }
  EXPECT_TRUE(found);
}

// A collective that ran on the communicators' thread (lane 1) goes on thread 1 of its rank, and
// the rank's two threads are named; a rank without such spans keeps one unnamed row.
TEST(TraceFormatTest, CollectivesOnTheirOwnLane) {
  v1::JobTrace trace = TwoRanks();
  v1::TraceSpan* async = trace.mutable_ranks(0)->add_spans();
  async->set_name("all_reduce fc0.weight@grad");
  async->set_category("collective");
  async->set_start_us(1700000000000000 + 50);
  async->set_duration_us(30);
  async->set_micro_batch(-1);
  async->set_chunk(-1);
  async->set_lane(1);
  const nlohmann::json doc = nlohmann::json::parse(FormatChromeTrace(trace));
  std::set<std::pair<int, int>> threads;
  bool found = false;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      threads.insert({e["pid"].get<int>(), e["tid"].get<int>()});
      EXPECT_EQ(e["args"]["name"], e["tid"] == 0 ? "executor" : "collectives");
    }
    if (e["ph"] == "X" && e["name"] == "all_reduce fc0.weight@grad") {
      found = true;
      EXPECT_EQ(e["tid"], 1);
      EXPECT_EQ(e["pid"], 0);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(threads, (std::set<std::pair<int, int>>{{0, 0}, {0, 1}}));
}

TEST(TraceFormatTest, EmptyTraceIsAValidDocument) {
  const nlohmann::json doc = nlohmann::json::parse(FormatChromeTrace(v1::JobTrace()));
  EXPECT_TRUE(doc["traceEvents"].empty());
}

TEST(TraceFormatTest, SummaryCountsSpansAndDrops) {
  v1::JobTrace trace = TwoRanks();
  EXPECT_EQ(TraceSummary(trace), "2 ranks, 5 spans");
  trace.set_dropped_spans(1234);
  EXPECT_EQ(TraceSummary(trace), "2 ranks, 5 spans, 1,234 dropped by the coordinator's bound");
}

TEST(TraceFormatTest, WriteNamesAnUnwritablePath) {
  absl::Status s = WriteChromeTrace(TwoRanks(), "/nonexistent-dir/trace.json");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/trace.json"), std::string::npos) << s;
}

}  // namespace
}  // namespace weft::client
