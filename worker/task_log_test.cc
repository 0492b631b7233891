#include "worker/task_log.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"

namespace weft {
namespace {

// The LogLines messages a task's sink sent, in order.
class Sent {
 public:
  void Add(const v1::WorkerMessage& m) {
    absl::MutexLock lock(&mu_);
    messages_.push_back(m);
  }
  std::vector<v1::WorkerMessage> messages() {
    absl::MutexLock lock(&mu_);
    return messages_;
  }
  // Every line sent, in order.
  std::vector<v1::LogLine> lines() {
    absl::MutexLock lock(&mu_);
    std::vector<v1::LogLine> out;
    for (const v1::WorkerMessage& m : messages_) {
      for (const v1::LogLine& line : m.logs().lines()) out.push_back(line);
    }
    return out;
  }
  // Whether `n` lines have been sent within 10 s.
  bool WaitForLines(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      size_t count = 0;
      for (const v1::WorkerMessage& m : messages_) count += m.logs().lines_size();
      return count >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::WorkerMessage> messages_ ABSL_GUARDED_BY(mu_);
};

// A logger of its own with the sink, as the daemon's default logger has it.
std::shared_ptr<spdlog::logger> LoggerWith(std::shared_ptr<TaskLogSink> sink) {
  return std::make_shared<spdlog::logger>("task_log_test", std::move(sink));
}

TEST(TaskLogSinkTest, SendsTheLinesBetweenBeginAndEndAsTheTasksBeforeEndReturns) {
  auto sink = std::make_shared<TaskLogSink>();
  auto logger = LoggerWith(sink);
  Sent sent;
  logger->info("before the task");
  sink->Begin("job-000007", 2, 1, [&](const v1::WorkerMessage& m) { sent.Add(m); });
  logger->info("starting {} steps", 5);
  logger->warn("step 3: slow");
  logger->error("loading fc0.weight: checksum mismatch");
  sink->End("job-000007", 2, 1);
  // End has sent everything by now: no wait.
  const std::vector<v1::LogLine> lines = sent.lines();
  logger->info("after the task");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].text(), "starting 5 steps");
  EXPECT_EQ(lines[0].level(), "info");
  EXPECT_EQ(lines[1].level(), "warning");
  EXPECT_EQ(lines[2].text(), "loading fc0.weight: checksum mismatch");
  EXPECT_EQ(lines[2].level(), "error");
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  for (const v1::LogLine& line : lines) {
    EXPECT_LE(line.time_ms(), now_ms);
    EXPECT_GT(line.time_ms(), now_ms - 60000);
  }
  for (const v1::WorkerMessage& m : sent.messages()) {
    ASSERT_TRUE(m.has_logs());
    EXPECT_EQ(m.logs().job_id(), "job-000007");
    EXPECT_EQ(m.logs().attempt(), 2);
    EXPECT_EQ(m.logs().rank(), 1);
  }
  EXPECT_EQ(sent.lines().size(), 3u) << "a line after End was sent";
  // Another task's End leaves nothing behind; a second End is a no-op.
  sink->End("job-000007", 2, 1);
  EXPECT_EQ(sent.lines().size(), 3u);
}

TEST(TaskLogSinkTest, FlushesWithoutEndInBatchesOfAtMostBatchLines) {
  TaskLogOptions options;
  options.batch_lines = 4;
  options.flush_every = absl::Milliseconds(20);
  auto sink = std::make_shared<TaskLogSink>(options);
  auto logger = LoggerWith(sink);
  Sent sent;
  sink->Begin("j", 0, 0, [&](const v1::WorkerMessage& m) { sent.Add(m); });
  logger->info("one line, sent by the timer");
  ASSERT_TRUE(sent.WaitForLines(1));
  for (int i = 0; i < 10; ++i) logger->info("line {}", i);
  ASSERT_TRUE(sent.WaitForLines(11));
  for (const v1::WorkerMessage& m : sent.messages()) {
    EXPECT_GE(m.logs().lines_size(), 1);
    EXPECT_LE(m.logs().lines_size(), 4);
  }
  const std::vector<v1::LogLine> lines = sent.lines();
  for (int i = 0; i < 10; ++i) EXPECT_EQ(lines[i + 1].text(), "line " + std::to_string(i));
  sink->End("j", 0, 0);
}

// A line is cut between characters at max_line_bytes and its invalid UTF-8 replaced, so it fits
// a proto3 string; while sending is stuck, at most max_pending lines wait and one marker counts
// the ones dropped.
TEST(TaskLogSinkTest, BoundsLinesAndDropsWithAMarkerWhileSendingLags) {
  TaskLogOptions options;
  options.batch_lines = 2;
  options.flush_every = absl::Hours(1);  // only two waiting lines wake the flusher
  options.max_pending = 5;
  options.max_line_bytes = 10;
  auto sink = std::make_shared<TaskLogSink>(options);
  auto logger = LoggerWith(sink);
  Sent sent;
  absl::Notification in_send, release;
  sink->Begin("j", 0, 3, [&](const v1::WorkerMessage& m) {
    if (!in_send.HasBeenNotified()) {
      in_send.Notify();
      release.WaitForNotification();
    }
    sent.Add(m);
  });
  logger->info("abcdefghi\xc3\xa9");  // 11 bytes: the cut at 10 falls inside the é
  logger->info("bad \xff byte");
  ASSERT_TRUE(in_send.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The flusher is stuck sending those two: 5 of these wait, 7 are dropped.
  for (int i = 0; i < 12; ++i) logger->info("waiting {}", i);
  release.Notify();
  sink->End("j", 0, 3);
  const std::vector<v1::LogLine> lines = sent.lines();
  ASSERT_EQ(lines.size(), 2u + 5u + 1u);
  EXPECT_EQ(lines[0].text(), "abcdefghi");
  EXPECT_EQ(lines[1].text(), "bad \xef\xbf\xbd by");
  for (int i = 0; i < 5; ++i) EXPECT_EQ(lines[2 + i].text(), "waiting " + std::to_string(i));
  EXPECT_EQ(lines[7].level(), "warning");
  EXPECT_NE(lines[7].text().find("7 log lines of this task dropped"), std::string::npos)
      << lines[7].text();
}

// Begin while another task is begun ends that one first: its lines go out under its name.
TEST(TaskLogSinkTest, BeginEndsThePreviousTask) {
  auto sink = std::make_shared<TaskLogSink>();
  auto logger = LoggerWith(sink);
  Sent first, second;
  sink->Begin("a", 0, 0, [&](const v1::WorkerMessage& m) { first.Add(m); });
  logger->info("a's");
  sink->Begin("b", 1, 2, [&](const v1::WorkerMessage& m) { second.Add(m); });
  logger->info("b's");
  sink->End("a", 0, 0);  // not begun any more: no-op
  sink->End("b", 1, 2);
  ASSERT_EQ(first.lines().size(), 1u);
  EXPECT_EQ(first.lines()[0].text(), "a's");
  ASSERT_EQ(second.lines().size(), 1u);
  EXPECT_EQ(second.lines()[0].text(), "b's");
  EXPECT_EQ(second.messages()[0].logs().job_id(), "b");
}

}  // namespace
}  // namespace weft
