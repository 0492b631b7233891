#include "coordinator/step_aggregator.h"

#include <gtest/gtest.h>

namespace weft::coordinator {
namespace {

v1::StepReport Report(int rank, int64_t step, double loss, double seconds) {
  v1::StepReport r;
  r.set_job_id("job-000001");
  r.set_rank(rank);
  r.set_step(step);
  r.set_loss(loss);
  r.set_step_seconds(seconds);
  return r;
}

TEST(StepAggregatorTest, EmitsWhenAllRanksReported) {
  StepAggregator agg(/*world_size=*/3, /*batch_size=*/12);
  auto a = agg.Add(Report(1, 1, 9.0, 0.5));
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());
  auto b = agg.Add(Report(0, 1, 0.75, 0.25));
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->has_value());
  auto c = agg.Add(Report(2, 1, 9.0, 1.5));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(c->has_value());
  const v1::StepMetrics& m = (*c)->metrics;
  EXPECT_EQ(m.step(), 1);
  EXPECT_DOUBLE_EQ(m.loss(), 0.75);          // rank 0's
  EXPECT_DOUBLE_EQ(m.step_seconds(), 1.5);   // the slowest rank
  EXPECT_DOUBLE_EQ(m.samples_per_second(), 8.0);  // 12 / 1.5
  EXPECT_EQ(agg.incomplete_steps(), 0);
}

// Traffic is a sum over ranks: each rank reports what its own communicators sent.
TEST(StepAggregatorTest, SumsBytesSentOverRanks) {
  StepAggregator agg(3, 12);
  for (int rank = 0; rank < 3; ++rank) {
    v1::StepReport r = Report(rank, 1, 0.5, 0.1);
    r.set_bytes_sent(1000 * (rank + 1));
    auto m = agg.Add(r);
    ASSERT_TRUE(m.ok()) << m.status();
    if (rank < 2) {
      EXPECT_FALSE(m->has_value());
    } else {
      ASSERT_TRUE(m->has_value());
      EXPECT_EQ((*m)->metrics.bytes_sent(), 6000);
    }
  }
  // Ranks that send nothing (1-rank runs, reports from older workers) sum to 0.
  auto only = StepAggregator(1, 4).Add(Report(0, 1, 0.5, 0.1));
  ASSERT_TRUE(only.ok() && only->has_value());
  EXPECT_EQ((*only)->metrics.bytes_sent(), 0);
}

// Memory is per device: the step's peak is the largest rank's, not a sum.
TEST(StepAggregatorTest, PeakBytesIsTheMaxOverRanks) {
  StepAggregator agg(3, 12);
  const int64_t peaks[3] = {5000, 9000, 7000};
  for (int rank : {2, 0, 1}) {
    v1::StepReport r = Report(rank, 1, 0.5, 0.1);
    r.set_peak_bytes(peaks[rank]);
    auto m = agg.Add(r);
    ASSERT_TRUE(m.ok()) << m.status();
    if (rank != 1) {
      EXPECT_FALSE(m->has_value());
    } else {
      ASSERT_TRUE(m->has_value());
      EXPECT_EQ((*m)->metrics.peak_bytes(), 9000);
    }
  }
  // Ranks that report no peak (older workers) give 0.
  auto only = StepAggregator(1, 4).Add(Report(0, 1, 0.5, 0.1));
  ASSERT_TRUE(only.ok() && only->has_value());
  EXPECT_EQ((*only)->metrics.peak_bytes(), 0);
}

TEST(StepAggregatorTest, KeepsStepsApart) {
  StepAggregator agg(2, 4);
  ASSERT_TRUE(agg.Add(Report(0, 1, 1.0, 1)).ok());
  ASSERT_TRUE(agg.Add(Report(0, 2, 2.0, 1)).ok());
  EXPECT_EQ(agg.incomplete_steps(), 2);
  auto s1 = agg.Add(Report(1, 1, 0, 1));
  ASSERT_TRUE(s1.ok() && s1->has_value());
  EXPECT_DOUBLE_EQ((*s1)->metrics.loss(), 1.0);
  auto s2 = agg.Add(Report(1, 2, 0, 2));
  ASSERT_TRUE(s2.ok() && s2->has_value());
  EXPECT_DOUBLE_EQ((*s2)->metrics.loss(), 2.0);
  EXPECT_DOUBLE_EQ((*s2)->metrics.samples_per_second(), 2.0);
}

TEST(StepAggregatorTest, RejectsBadReports) {
  StepAggregator agg(2, 4);
  EXPECT_FALSE(agg.Add(Report(2, 1, 0, 1)).ok());   // rank out of range
  EXPECT_FALSE(agg.Add(Report(0, 0, 0, 1)).ok());   // steps count from 1
  ASSERT_TRUE(agg.Add(Report(0, 1, 0, 1)).ok());
  EXPECT_FALSE(agg.Add(Report(0, 1, 0, 1)).ok());   // twice
  ASSERT_TRUE(agg.Add(Report(1, 1, 0, 1)).ok());
  EXPECT_FALSE(agg.Add(Report(1, 1, 0, 1)).ok());   // after it was complete
}

// The learning rate, gradient norm and eval loss are rank 0's (every rank holds the same); only a
// step that evaluated carries an EvalMetrics.
TEST(StepAggregatorTest, CarriesLearningRateNormAndEval) {
  StepAggregator agg(2, 4);
  for (int64_t step : {1, 2}) {
    for (int rank : {1, 0}) {
      v1::StepReport r = Report(rank, step, 0.5, 0.1);
      r.set_lr(rank == 0 ? 0.001 * step : 9.0);
      r.set_grad_norm(rank == 0 ? 2.5 : 9.0);
      if (step == 2) r.set_eval_loss(rank == 0 ? 1.25 : 9.0);
      auto m = agg.Add(r);
      ASSERT_TRUE(m.ok()) << m.status();
      if (rank == 1) {
        EXPECT_FALSE(m->has_value());
        continue;
      }
      ASSERT_TRUE(m->has_value());
      EXPECT_DOUBLE_EQ((*m)->metrics.lr(), 0.001 * step);
      EXPECT_DOUBLE_EQ((*m)->metrics.grad_norm(), 2.5);
      EXPECT_EQ((*m)->eval.has_value(), step == 2);
      if (step == 2) {
        EXPECT_EQ((*m)->eval->step(), 2);
        EXPECT_DOUBLE_EQ((*m)->eval->loss(), 1.25);
      }
    }
  }
}

TEST(StepAggregatorTest, ZeroTimeGivesZeroThroughput) {
  StepAggregator agg(1, 4);
  auto m = agg.Add(Report(0, 1, 0.5, 0));
  ASSERT_TRUE(m.ok() && m->has_value());
  EXPECT_EQ((*m)->metrics.samples_per_second(), 0.0);
}

}  // namespace
}  // namespace weft::coordinator
