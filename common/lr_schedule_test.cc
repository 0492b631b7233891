#include "common/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>

namespace weft {
namespace {

v1::LrSchedule Schedule(int64_t warmup, const std::string& decay, int64_t decay_steps,
                        double min_lr, int64_t cooldown = 0) {
  v1::LrSchedule s;
  s.set_warmup_steps(warmup);
  s.set_decay(decay);
  s.set_decay_steps(decay_steps);
  s.set_min_lr(min_lr);
  s.set_cooldown_steps(cooldown);
  return s;
}

TEST(LearningRateTest, NoScheduleIsTheConstantLr) {
  EXPECT_EQ(LearningRate(0.5, nullptr, 1), 0.5);
  EXPECT_EQ(LearningRate(0.5, nullptr, 1000), 0.5);
}

TEST(LearningRateTest, WarmupIsLinearFromTheFirstStep) {
  const v1::LrSchedule s = Schedule(4, "cosine", 12, 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &s, 1), 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &s, 3), 0.75);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &s, 4), 1.0);
}

TEST(LearningRateTest, CosineLinearAndConstantDecays) {
  // p = (s - 4) / 8.
  const v1::LrSchedule cosine = Schedule(4, "cosine", 12, 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &cosine, 8), 0.1 + 0.9 * 0.5);        // p = 1/2
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &cosine, 6), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)));
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &cosine, 12), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &cosine, 40), 0.1);  // after decay_steps: min_lr
  const v1::LrSchedule linear = Schedule(4, "linear", 12, 0.2);
  EXPECT_DOUBLE_EQ(LearningRate(2.0, &linear, 6), 2.0 - 1.8 * 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(2.0, &linear, 13), 0.2);
  const v1::LrSchedule constant = Schedule(2, "constant", 12, 0.0);
  EXPECT_DOUBLE_EQ(LearningRate(2.0, &constant, 1), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(2.0, &constant, 11), 2.0);
  // No warmup: the first step already decays.
  const v1::LrSchedule no_warmup = Schedule(0, "linear", 10, 0.0);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &no_warmup, 1), 0.9);
}

TEST(LearningRateTest, WsdHoldsThenCoolsDownLinearly) {
  // Warmup 2, stable through step 8 (= 12 - 4), cooldown over steps 9..12 to 0.
  const v1::LrSchedule s = Schedule(2, "wsd", 12, 0.0, 4);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &s, 1), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &s, 3), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &s, 8), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &s, 9), 0.75);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &s, 12), 0.0);
  EXPECT_DOUBLE_EQ(LearningRate(1.0, &s, 20), 0.0);
}

TEST(ValidateLrScheduleTest, ErrorsNameTheKey) {
  struct Bad {
    v1::LrSchedule schedule;
    std::string expected;
  };
  for (const Bad& bad : std::vector<Bad>{
           {Schedule(10, "cosine", 10, 0.0), "optimizer.schedule.warmup_steps: 10 must be less "
                                             "than decay_steps 10"},
           {Schedule(0, "cosine", 10, 2.0), "optimizer.schedule.min_lr: 2 is above optimizer.lr 1"},
           {Schedule(0, "exponential", 10, 0.0), "optimizer.schedule.decay: unknown decay "
                                                 "\"exponential\"; known: constant, linear, "
                                                 "cosine, wsd"},
           {Schedule(0, "cosine", 10, 0.0, 3), "optimizer.schedule.cooldown_steps: only for "
                                               "decay wsd"},
           {Schedule(2, "wsd", 10, 0.0, 9), "optimizer.schedule.cooldown_steps: wsd needs 1..8"},
           {Schedule(2, "wsd", 10, 0.0, 0), "optimizer.schedule.cooldown_steps: wsd needs 1..8"},
           {Schedule(-1, "linear", 10, 0.0), "optimizer.schedule.warmup_steps: must be >= 0"},
           {Schedule(0, "linear", 10, -1.0), "optimizer.schedule.min_lr: must be a finite"},
       }) {
    const absl::Status s = ValidateLrSchedule(bad.schedule, 1.0, "optimizer.schedule");
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad.expected;
    EXPECT_NE(s.message().find(bad.expected), std::string::npos) << s.message();
  }
  EXPECT_TRUE(ValidateLrSchedule(Schedule(2, "wsd", 10, 0.1, 8), 1.0, "optimizer.schedule").ok());
}

}  // namespace
}  // namespace weft
