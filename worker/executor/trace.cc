#include "worker/executor/trace.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace weft {
namespace {

using v1::Instruction;

// "mb3 c0": the parts that are set (-1: none).
std::string WorkItem(int micro_batch, int chunk) {
  std::string out;
  if (micro_batch >= 0) absl::StrAppend(&out, "mb", micro_batch);
  if (chunk >= 0) absl::StrAppend(&out, out.empty() ? "" : " ", "c", chunk);
  return out;
}

// An instruction's span starts from its micro-batch and chunk; without a phase (programs that
// are not pipelined) it has none, whatever the proto3 defaults say.
v1::TraceSpan SpanOf(const Instruction& ins) {
  v1::TraceSpan span;
  const bool phased = ins.phase() != Instruction::PHASE_UNSPECIFIED;
  span.set_micro_batch(phased ? ins.micro_batch() : -1);
  span.set_chunk(phased ? ins.chunk() : -1);
  return span;
}

// The span a compute instruction belongs to: loads are "data", the rest by phase. Instructions
// without a phase are "compute", the optimizer ops excepted.
v1::TraceSpan ComputeSpan(const Instruction& ins) {
  v1::TraceSpan span = SpanOf(ins);
  const std::string item = WorkItem(span.micro_batch(), span.chunk());
  auto named = [&](const char* prefix) {
    return item.empty() ? std::string(prefix) : absl::StrCat(prefix, " ", item);
  };
  if (ins.op() == Instruction::LOAD_INPUT || ins.op() == Instruction::LOAD_LABEL) {
    span.set_category("data");
    span.set_name(named("load"));
  } else if (ins.phase() == Instruction::FORWARD) {
    span.set_category("forward");
    span.set_name(named("F"));
  } else if (ins.phase() == Instruction::BACKWARD) {
    span.set_category("backward");
    span.set_name(named("B"));
  } else if (ins.phase() == Instruction::OPTIMIZER || ins.op() == Instruction::SGD ||
             ins.op() == Instruction::ADAMW) {
    span.set_category("optimizer");
    span.set_name("optimizer");
  } else {
    span.set_category("compute");
    span.set_name(named("compute"));
  }
  return span;
}

bool SameSpan(const v1::TraceSpan& a, const v1::TraceSpan& b) {
  return a.category() == b.category() && a.name() == b.name() &&
         a.micro_batch() == b.micro_batch() && a.chunk() == b.chunk();
}

// Wall-clock microseconds read off a steady clock anchored once per step, so that spans within
// a step never go backwards when the system clock is adjusted.
class StepClock {
 public:
  StepClock()
      : wall_us_(std::chrono::duration_cast<std::chrono::microseconds>(
                     std::chrono::system_clock::now().time_since_epoch())
                     .count()),
        steady_(std::chrono::steady_clock::now()) {}
  int64_t NowUs() const {
    return wall_us_ + std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - steady_)
                          .count();
  }

 private:
  const int64_t wall_us_;
  const std::chrono::steady_clock::time_point steady_;
};

}  // namespace

std::string CollectiveSpanName(const v1::Program& program, const Step& s) {
  return absl::StrCat(absl::AsciiStrToLower(Instruction::Op_Name(s.op)), " ",
                      program.buffers(s.in[0]).name());
}

void AppendCollectiveSpans(const v1::Program& program, const std::vector<Step>& steps,
                           const std::vector<CollectiveTiming>& timings,
                           std::vector<v1::TraceSpan>* spans) {
  for (const CollectiveTiming& t : timings) {
    v1::TraceSpan span;
    span.set_name(CollectiveSpanName(program, steps[t.step_index]));
    span.set_category("collective");
    span.set_start_us(t.start_us);
    span.set_duration_us(std::max<int64_t>(t.end_us - t.start_us, 1));
    span.set_micro_batch(-1);
    span.set_chunk(-1);
    span.set_lane(1);
    spans->push_back(std::move(span));
  }
}

std::vector<v1::TraceSpan> BuildSpanTemplates(const v1::Program& program,
                                              std::vector<Step>* steps,
                                              const std::vector<bool>* async_steps) {
  std::vector<v1::TraceSpan> templates;
  bool after_communication = false;  // the last span is a SEND, RECV or blocking collective's
  for (Step& s : *steps) {
    const Instruction& ins = program.instructions(s.index);
    const bool async = async_steps != nullptr && (*async_steps)[s.index];
    if (async) {
      // The executor only starts it: its time is the work around it (the first step's own).
      if (templates.empty()) {
        templates.push_back(ComputeSpan(ins));
        after_communication = false;
      }
      s.span = static_cast<int>(templates.size()) - 1;
      continue;
    }
    if (IsCommunication(s.op)) {
      v1::TraceSpan span = SpanOf(ins);
      const v1::CommGroup& group = program.groups(s.comm);
      if (s.op == Instruction::SEND) {
        span.set_category("send");
        span.set_name(absl::StrCat("send ", program.buffers(s.in[0]).name(), " to r",
                                   group.ranks(s.peer)));
      } else if (s.op == Instruction::RECV) {
        span.set_category("recv");
        span.set_name(absl::StrCat("recv ", program.buffers(s.out).name(), " from r",
                                   group.ranks(s.peer)));
      } else {
        span.set_category("collective");
        span.set_name(CollectiveSpanName(program, s));
      }
      templates.push_back(std::move(span));
      after_communication = true;
    } else {
      v1::TraceSpan span = ComputeSpan(ins);
      // Consecutive compute instructions of the same work item share one span.
      const bool extend =
          !templates.empty() && !after_communication && SameSpan(templates.back(), span);
      if (!extend) templates.push_back(std::move(span));
      after_communication = false;
    }
    s.span = static_cast<int>(templates.size()) - 1;
  }
  return templates;
}

absl::Status RunTraced(const std::vector<Step>& steps,
                       const std::vector<v1::TraceSpan>& templates, Kernels& kernels, int64_t step,
                       const TracedRun& how, std::vector<v1::TraceSpan>* out) {
  // One clock read per span boundary. A span lasts at least 1 us so that every slice shows; a
  // boundary moves by at most that much per shorter span before it.
  const StepClock clock;
  std::vector<v1::TraceSpan> spans;
  spans.reserve(templates.size());
  int64_t boundary_us = clock.NowUs();
  auto close = [&]() -> absl::Status {
    RETURN_IF_ERROR(kernels.Synchronize());
    boundary_us = std::max(clock.NowUs(), boundary_us + 1);
    spans.back().set_duration_us(boundary_us - spans.back().start_us());
    return absl::OkStatus();
  };
  int current = -1;
  for (const Step& s : steps) {
    if (how.must_wait && how.must_wait(s)) {
      // The wait ends the span it interrupts; the step's span starts again after it.
      if (current >= 0) RETURN_IF_ERROR(Annotate(close(), absl::StrCat("step ", step)));
      v1::TraceSpan wait = templates[s.span];
      wait.set_name(absl::StrCat("wait for collectives (", wait.name(), ")"));
      wait.set_category("wait");
      wait.set_start_us(boundary_us);
      spans.push_back(std::move(wait));
      RETURN_IF_ERROR(how.wait(s));
      RETURN_IF_ERROR(Annotate(close(), absl::StrCat("step ", step)));
      current = -1;
    }
    if (s.span != current) {
      if (current >= 0) RETURN_IF_ERROR(Annotate(close(), absl::StrCat("step ", step)));
      current = s.span;
      spans.push_back(templates[current]);
      spans.back().set_start_us(boundary_us);
    }
    RETURN_IF_ERROR(how.run(s));
  }
  if (current >= 0) RETURN_IF_ERROR(Annotate(close(), absl::StrCat("step ", step)));
  *out = std::move(spans);
  return absl::OkStatus();
}

}  // namespace weft
