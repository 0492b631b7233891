// Train.elastic's decisions on counts: a restarting job shrinks only after wait_s and only when
// its ranks do not fit, to the largest size that does (never below min); a running one grows to
// the largest size its own and the idle workers take, never past its mesh; the Resize event.
#include "coordinator/elastic.h"

#include "common/jobspec/defaults.h"
#include "gtest/gtest.h"

namespace weft::coordinator {
namespace {

// dp 4 x mp 2 (8 ranks), elastic over dp, min 1, a 30 s wait.
v1::Job ElasticJob(int min = 1) {
  v1::Job job;
  job.set_id("job-000001");
  v1::JobSpec* spec = job.mutable_spec();
  spec->mutable_mesh()->add_shape(4);
  spec->mutable_mesh()->add_shape(2);
  spec->mutable_mesh()->add_dim_names("dp");
  spec->mutable_mesh()->add_dim_names("mp");
  spec->mutable_train()->mutable_elastic()->set_dim("dp");
  spec->mutable_train()->mutable_elastic()->set_min(min);
  spec->mutable_train()->mutable_elastic()->set_wait_s(30);
  return job;
}

TEST(ElasticTest, ARestartingJobShrinksAfterItsWaitToTheLargestSizeThatFits) {
  const v1::Job job = ElasticJob();
  EXPECT_EQ(ElasticSize(job), 4);
  // 7 workers: 8 ranks do not fit. Not before wait_s...
  EXPECT_EQ(ShrinkTo(job, 7, /*since=*/1000, /*now=*/30999), std::nullopt);
  // ...then dp 2 (4 ranks; dp 3 is no size: 3 does not divide 4 x 1 micro-batch).
  EXPECT_EQ(ShrinkTo(job, 7, 1000, 31000), 2);
  EXPECT_EQ(ShrinkTo(job, 3, 1000, 31000), 1);
  EXPECT_EQ(ShrinkTo(job, 1, 1000, 31000), std::nullopt) << "not even dp 1 (2 ranks) fits";
  EXPECT_EQ(ShrinkTo(job, 8, 1000, 31000), std::nullopt) << "its ranks fit: no shrink";
  EXPECT_EQ(ShrinkTo(ElasticJob(/*min=*/2), 3, 1000, 31000), std::nullopt) << "never below min";
  // Already at dp 2 and down to 3 workers: dp 1.
  v1::Job shrunk = job;
  shrunk.set_elastic_size(2);
  EXPECT_EQ(ShrinkTo(shrunk, 3, 1000, 31000), 1);
  EXPECT_EQ(ShrinkTo(shrunk, 4, 1000, 31000), std::nullopt);
  // No train.elastic: never.
  v1::Job fixed = job;
  fixed.mutable_spec()->mutable_train()->clear_elastic();
  EXPECT_EQ(ElasticSize(fixed), 0);
  EXPECT_EQ(ShrinkTo(fixed, 1, 0, 1 << 30), std::nullopt);
}

TEST(ElasticTest, ARunningJobGrowsToTheLargestSizeItsAndTheIdleWorkersTake) {
  v1::Job job = ElasticJob();
  job.set_elastic_size(1);  // 2 ranks
  EXPECT_EQ(GrowTo(job, 0), std::nullopt);
  EXPECT_EQ(GrowTo(job, 1), std::nullopt) << "3 workers hold no larger size";
  EXPECT_EQ(GrowTo(job, 2), 2);
  EXPECT_EQ(GrowTo(job, 5), 2) << "dp 3 is no size";
  EXPECT_EQ(GrowTo(job, 6), 4);
  EXPECT_EQ(GrowTo(job, 100), 4) << "never past the spec's mesh";
  job.set_elastic_size(0);  // at the spec's dp 4
  EXPECT_EQ(GrowTo(job, 100), std::nullopt);
}

TEST(ElasticTest, TheResizeEventSaysFromWhatToWhatAndTheMicroBatches) {
  v1::Job job = ElasticJob();
  job.mutable_spec()->mutable_train()->set_micro_batches(3);  // 12 slices of the batch
  v1::JobEvent shrink = ResizeEvent(job, 2, 0, 5000);
  EXPECT_EQ(shrink.job_id(), "job-000001");
  EXPECT_EQ(shrink.time_ms(), 5000);
  EXPECT_EQ(shrink.resize().dim(), "dp");
  EXPECT_EQ(shrink.resize().from_size(), 4);
  EXPECT_EQ(shrink.resize().to_size(), 2);
  EXPECT_EQ(shrink.resize().micro_batches(), 6);
  EXPECT_EQ(shrink.resize().world_size(), 4);
  EXPECT_EQ(shrink.message(),
            "shrinking dp 4 -> 2 (4 ranks, 6 micro-batches, the same global batch): no "
            "replacement within train.elastic.wait_s (30 s); resuming from the newest checkpoint");
  job.set_elastic_size(2);
  v1::JobEvent grow = ResizeEvent(job, 4, 40, 6000);
  EXPECT_EQ(grow.resize().from_size(), 2);
  EXPECT_EQ(grow.resize().micro_batches(), 3);
  EXPECT_EQ(grow.resize().step(), 40);
  EXPECT_EQ(grow.message(),
            "growing dp 2 -> 4 (8 ranks, 3 micro-batches, the same global batch): idle workers "
            "registered; resuming from the checkpoint of step 40");
}

}  // namespace
}  // namespace weft::coordinator
