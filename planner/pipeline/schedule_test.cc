// The schedules against their published orders, written out by hand (GPipe; PipeDream-flush as
// in Megatron's forward_backward_pipelining_without_interleaving; Megatron's interleaved
// schedule), and the properties each must have.
#include "planner/pipeline/schedule.h"

#include <gtest/gtest.h>

namespace weft::planner::pipeline {
namespace {

std::vector<std::string> Orders(const std::string& name, PipelineShape shape, bool with_chunk) {
  auto schedule = ScheduleByName(name);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  EXPECT_TRUE((*schedule)->Check(shape).ok()) << (*schedule)->Check(shape);
  std::vector<std::string> out;
  for (int s = 0; s < shape.stages; ++s) {
    out.push_back(FormatOrder((*schedule)->Order(shape, s), with_chunk));
  }
  return out;
}

TEST(ScheduleTest, FThenBIsAllForwardsThenAllBackwards) {
  EXPECT_EQ(Orders("FThenB", {2, 4, 1}, false),
            (std::vector<std::string>{"F0 F1 F2 F3 B0 B1 B2 B3", "F0 F1 F2 F3 B0 B1 B2 B3"}));
  const std::string eight = "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7";
  EXPECT_EQ(Orders("FThenB", {4, 8, 1}, false),
            (std::vector<std::string>{eight, eight, eight, eight}));
}

TEST(ScheduleTest, OneFOneBWarmsUpThenAlternates) {
  EXPECT_EQ(Orders("1F1B", {2, 4, 1}, false),
            (std::vector<std::string>{"F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"}));
  EXPECT_EQ(Orders("1F1B", {4, 4, 1}, false),
            (std::vector<std::string>{"F0 F1 F2 F3 B0 B1 B2 B3", "F0 F1 F2 B0 F3 B1 B2 B3",
                                      "F0 F1 B0 F2 B1 F3 B2 B3", "F0 B0 F1 B1 F2 B2 F3 B3"}));
  EXPECT_EQ(Orders("1F1B", {4, 8, 1}, false),
            (std::vector<std::string>{
                "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
                "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
                "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
                "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"}));
}

TEST(ScheduleTest, VppIsMegatronsInterleavedOrder) {
  // Chunks 0, 2 on stage 0 and 1, 3 on stage 1; "F2.0" is micro-batch 2 of chunk 0; steady-state
  // steps are [F B] pairs whose transfers go out together.
  EXPECT_EQ(Orders("VPP", {2, 4, 2}, true),
            (std::vector<std::string>{
                "F0.0 F1.0 F0.2 F1.2 [F2.0 B0.2] [F3.0 B1.2] [F2.2 B0.0] [F3.2 B1.0] "
                "B2.2 B3.2 B2.0 B3.0",
                "F0.1 F1.1 [F0.3 B0.3] [F1.3 B1.3] [F2.1 B0.1] [F3.1 B1.1] [F2.3 B2.3] "
                "[F3.3 B3.3] B2.1 B3.1"}));
}

TEST(ScheduleTest, EveryOrderIsCompleteAndCanRun) {
  for (const std::string name : {"FThenB", "1F1B", "VPP"}) {
    auto schedule = *ScheduleByName(name);
    for (int pp : {1, 2, 3, 4}) {
      for (int v : {1, 2, 3}) {
        for (int m : {1, 2, 3, 4, 6, 8, 12}) {
          PipelineShape shape{pp, m, v};
          if (!schedule->Check(shape).ok()) continue;
          std::vector<std::vector<ScheduleStep>> orders;
          for (int s = 0; s < pp; ++s) orders.push_back(schedule->Order(shape, s));
          EXPECT_TRUE(CheckOrders(shape, orders).ok())
              << name << " pp=" << pp << " v=" << v << " m=" << m << ": "
              << CheckOrders(shape, orders);
        }
      }
    }
  }
}

TEST(ScheduleTest, ActivationsAliveOnStageZero) {
  for (int pp : {2, 4}) {
    for (int m : {4, 8, 16}) {
      auto fthenb = NewFThenBSchedule();
      auto one = NewOneFOneBSchedule();
      PipelineShape shape{pp, m, 1};
      EXPECT_EQ(PeakActivations(fthenb->Order(shape, 0)), m) << "pp=" << pp << " m=" << m;
      EXPECT_EQ(PeakActivations(one->Order(shape, 0)), pp) << "pp=" << pp << " m=" << m;
      for (int s = 0; s < pp; ++s) {
        EXPECT_LE(PeakActivations(one->Order(shape, s)), pp - s);
      }
    }
  }
}

TEST(ScheduleTest, RejectsWhatItCannotSchedule) {
  auto one = NewOneFOneBSchedule();
  absl::Status s = one->Check({4, 2, 1});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("micro_batches 2 is fewer than the 4 stages"), std::string::npos)
      << s;
  auto vpp = NewVppSchedule();
  s = vpp->Check({2, 4, 1});
  EXPECT_NE(s.message().find("virtual_stages must be >= 2"), std::string::npos) << s;
  s = vpp->Check({4, 6, 2});
  EXPECT_NE(s.message().find("multiple of the 4 stages"), std::string::npos) << s;
  s = NewFThenBSchedule()->Check({2, 4, 2});
  EXPECT_NE(s.message().find("needs schedule VPP"), std::string::npos) << s;
  s = one->Check({2, 4, 2});
  EXPECT_NE(s.message().find("needs schedule VPP"), std::string::npos) << s;
  EXPECT_EQ(ScheduleByName("zigzag").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ScheduleTest, CheckOrdersFindsACycle) {
  // Stage 1 wants B0 before it ran F0's forward of chunk 1: never ready.
  PipelineShape shape{2, 1, 1};
  std::vector<std::vector<ScheduleStep>> orders = {
      {{{WorkItem::kForward, 0, 0}}, {{WorkItem::kBackward, 0, 0}}},
      {{{WorkItem::kBackward, 0, 1}}, {{WorkItem::kForward, 0, 1}}}};
  absl::Status s = CheckOrders(shape, orders);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("stage 1 at B0.1"), std::string::npos) << s;
}

}  // namespace
}  // namespace weft::planner::pipeline
