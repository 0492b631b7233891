#include "coordinator/trace_store.h"

#include <gtest/gtest.h>

#include <string>

namespace weft::coordinator {
namespace {

google::protobuf::RepeatedPtrField<v1::TraceSpan> Spans(int n, const std::string& name = "F") {
  google::protobuf::RepeatedPtrField<v1::TraceSpan> spans;
  for (int i = 0; i < n; ++i) {
    v1::TraceSpan* span = spans.Add();
    span->set_name(name);
    span->set_start_us(i);
    span->set_duration_us(1);
  }
  return spans;
}

TEST(TraceStoreTest, KeepsSpansByRankForTheAttemptBegun) {
  TraceStore traces(TraceLimits{});
  EXPECT_FALSE(traces.Get("job-1").has_value());
  traces.Begin("job-1", 0, {"worker-1", "worker-2"});
  traces.Add("job-1", 0, 1, Spans(2));
  traces.Add("job-1", 0, 0, Spans(1));
  traces.Add("job-1", 7, 0, Spans(5));  // another attempt: ignored
  traces.Add("job-1", 0, 2, Spans(5));  // no such rank: ignored
  auto trace = traces.Get("job-1");
  ASSERT_TRUE(trace.has_value());
  ASSERT_EQ(trace->ranks_size(), 2);
  EXPECT_EQ(trace->ranks(1).worker_id(), "worker-2");
  EXPECT_EQ(trace->ranks(0).spans_size(), 1);
  EXPECT_EQ(trace->ranks(1).spans_size(), 2);
  EXPECT_EQ(traces.total_spans(), 3);

  // A new attempt replaces the old one.
  traces.Begin("job-1", 1, {"worker-3"});
  trace = traces.Get("job-1");
  ASSERT_EQ(trace->ranks_size(), 1);
  EXPECT_EQ(trace->attempt(), 1);
  EXPECT_EQ(traces.total_spans(), 0);
}

TEST(TraceStoreTest, BoundsSpansPerJobAndForgetsOldestFinishedJobs) {
  TraceLimits limits;
  limits.max_spans_per_job = 10;
  limits.max_spans_total = 25;
  limits.max_finished_jobs = 2;
  TraceStore traces(limits);
  traces.Begin("a", 0, {"w"});
  traces.Add("a", 0, 0, Spans(8));
  traces.Add("a", 0, 0, Spans(8));
  auto a = traces.Get("a");
  EXPECT_EQ(a->ranks(0).spans_size(), 10);
  EXPECT_EQ(a->dropped_spans(), 6);

  traces.Begin("b", 0, {"w"});
  traces.Add("b", 0, 0, Spans(10));
  traces.Begin("c", 0, {"w"});
  traces.Add("c", 0, 0, Spans(10));
  // 30 spans, but a running job is never forgotten.
  EXPECT_TRUE(traces.Get("a").has_value());
  traces.Finish("b");
  traces.Finish("a");  // b finished first: it goes
  EXPECT_FALSE(traces.Get("b").has_value());
  EXPECT_TRUE(traces.Get("a").has_value());
  EXPECT_EQ(traces.total_spans(), 20);
  // Spans after the end are ignored.
  traces.Add("a", 0, 0, Spans(1));
  EXPECT_EQ(traces.Get("a")->dropped_spans(), 6);

  // At most 2 finished traces, however small.
  traces.Finish("c");
  traces.Begin("d", 0, {"w"});
  traces.Finish("d");
  EXPECT_FALSE(traces.Get("a").has_value());
  EXPECT_TRUE(traces.Get("c").has_value());
  EXPECT_TRUE(traces.Get("d").has_value());
}

}  // namespace
}  // namespace weft::coordinator
