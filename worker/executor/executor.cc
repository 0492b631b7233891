// The executor's core: Create's checks, Initialize, and RunStep, which runs each decoded step
// through its op's handler (op_registry.h, ops/) on the kernels and communicators.
#include "worker/executor/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/dtype.h"
#include "common/lr_schedule.h"
#include "common/program.h"
#include "common/status.h"
#include "worker/data/batch_source.h"
#include "worker/executor/async_collectives.h"
#include "worker/executor/buffers.h"
#include "worker/executor/init_io.h"
#include "worker/executor/op_registry.h"
#include "worker/executor/step.h"
#include "worker/executor/trace.h"
#include "worker/kernels/backend.h"

namespace weft {
namespace {

using v1::Instruction;

// "instruction 3 (MATMUL 'fc0')": the instruction at `index` of a list (`what`: "instruction",
// "eval instruction") in errors.
std::string InstructionContext(absl::string_view what, int index, const Instruction& ins) {
  std::string c = absl::StrCat(what, " ", index, " (", Instruction::Op_Name(ins.op()));
  if (!ins.comment().empty()) absl::StrAppend(&c, " '", ins.comment(), "'");
  absl::StrAppend(&c, ")");
  return c;
}

class ProgramExecutor final : public Executor {
 public:
  ProgramExecutor(const v1::Program& program, CommunicatorFactory* factory,
                  std::unique_ptr<Kernels> kernels)
      : program_(program), factory_(factory), kernels_(std::move(kernels)) {}

  ~ProgramExecutor() override {
    async_.reset();  // its collectives touch the arena
    kernels_->Free(arena_);
    kernels_->Free(own_scratch_);
  }

  absl::Status Check();
  absl::Status Initialize() override;
  absl::StatusOr<float> RunStep(int64_t step) override;
  int64_t last_step_peak_bytes() const override { return last_step_peak_bytes_; }
  StepTimes last_step_times() const override { return last_step_times_; }
  double last_step_lr() const override { return last_step_lr_; }
  std::optional<double> last_step_grad_norm() const override { return last_step_grad_norm_; }
  absl::StatusOr<double> RunEval() override;
  absl::StatusOr<std::vector<float>> ReadBuffer(const std::string& name) const override;
  absl::StatusOr<std::vector<checkpoint::IndexedChunk>> WriteCheckpointShard(
      int64_t step) override;
  void Cancel() override { cancelled_.store(true, std::memory_order_relaxed); }
  std::vector<v1::TraceSpan> TakeSpans() override {
    std::vector<v1::TraceSpan> out;
    out.swap(spans_);
    return out;
  }

 private:
  // Checks for cancellation, waits for the started collectives `s` needs (WaitBefore), then
  // runs `s` (Execute); errors name the step and the instruction.
  absl::Status RunInstruction(const Step& s, const RunContext& ctx);
  // Asynchronous collectives only: whether `s` must wait for started ones, and that wait.
  bool MustWait(const Step& s) const;
  absl::Status WaitBefore(const Step& s);
  // Starts `s` on its communicator's thread when it is an asynchronous collective, else runs it.
  absl::Status Execute(const Step& s, const RunContext& ctx);
  // Runs `s` here (RunWidened when it has bf16 operands); errors name the step and the
  // instruction.
  absl::Status Run(const Step& s, const RunContext& ctx) const;
  // Runs an op that computes in float32 on float32 copies of its bf16 operands (Step::widened):
  // the read ones converted in before, the written ones rounded back (to nearest even) after.
  absl::Status RunWidened(const Step& s, const RunContext& ctx) const;
  // The memory `s` touches: its inputs, outputs and scratch, and the executor's own scratch
  // when it uses it.
  std::vector<ByteRange> RangesOf(const Step& s) const;
  // Decides, per step, which collectives start on their communicators' threads (starts_async_)
  // and which communicator each step needs to itself (sync_comm_).
  void PlanAsyncCollectives();
  std::string Context(const Step& s) const {
    return InstructionContext("instruction", s.index, program_.instructions(s.index));
  }
  // Opens the data sources the loads of `list`'s instructions read (list.data(); none when it
  // loads nothing) and checks that its input and label hold as many samples.
  static absl::Status OpenDataSources(const v1::Program& list,
                                      std::unique_ptr<BatchSource>* inputs,
                                      std::unique_ptr<BatchSource>* labels);
  // Decodes `list`'s instructions into `steps` (errors name them as `what` i) and raises the
  // own scratch and staging to what each needs.
  absl::Status DecodeSteps(const v1::Program& list, BatchSource* inputs, BatchSource* labels,
                           absl::string_view what, std::vector<Step>* steps);
  // Checks a float32 buffer of at least one element that the host reads after a list runs (the
  // loss, the gradient norm, the eval loss); `what` names it in errors.
  absl::Status CheckReadBack(int id, const std::string& what) const;
  // Decodes Program.eval: its instructions over eval_program_ (the program with them as its list
  // and the eval data as its data), with their own data sources.
  absl::Status CheckEval();
  // The learning rate at `step`, and the schedule's factor for the updates.
  double LearningRateAt(int64_t step) const;

  const v1::Program program_;
  CommunicatorFactory* const factory_;  // not owned
  std::unique_ptr<Kernels> kernels_;

  Buffers buffers_;                     // placed in arena_ at Initialize
  std::map<std::string, int> by_name_;  // first buffer holding each global name
  std::map<int, int> group_index_;      // CommGroup id -> index in program_.groups
  std::vector<int> group_member_;       // this rank's position in each group
  std::vector<std::unique_ptr<Communicator>> comms_;  // by group index
  std::unique_ptr<BatchSource> inputs_, labels_;
  std::vector<Step> steps_;
  // Kernel memory, owned (kernels_->Free): every buffer, and the executor's own scratch
  // (Step::own_scratch_bytes, the most any step needs; none when no step needs it).
  char* arena_ = nullptr;
  char* own_scratch_ = nullptr;
  int64_t own_scratch_bytes_ = 0;
  // Data loads, in the buffer's dtype, for device buffers: Step::staging_bytes, the most any
  // load needs (allocated once, at Initialize, when the kernels are not host-accessible).
  std::vector<char> host_staging_;
  int64_t staging_bytes_ = 0;
  // Trace only: one template per span of the step, and the last step's spans with their times.
  std::vector<v1::TraceSpan> span_templates_;
  std::vector<v1::TraceSpan> spans_;
  int64_t last_step_peak_bytes_ = 0;
  double last_step_lr_ = 0;
  std::optional<double> last_step_grad_norm_;
  // Program.eval, decoded: a copy of the program whose instruction list and data are the
  // evaluation's (the steps point into it), its data sources and steps.
  v1::Program eval_program_;
  std::unique_ptr<BatchSource> eval_inputs_, eval_labels_;
  std::vector<Step> eval_steps_;
  StepTimes step_times_;       // the step in progress
  StepTimes last_step_times_;  // the last successful one
  // By step index, what its time counts as in StepTimes (waits for asynchronous collectives are
  // timed by AsyncCollectives itself).
  enum class TimedAs : uint8_t { kNone, kData, kCommunication };
  std::vector<TimedAs> timed_as_;
  bool initialized_ = false;
  std::atomic<bool> cancelled_{false};
  // Collectives on their communicators' threads (CPU kernels, unless the program asks for
  // blocking ones); created at Initialize. ranges_[i]: the memory step i touches.
  const bool async_collectives_ =
      !program_.blocking_collectives() && std::string(kernels_->name()) == "cpu";
  std::unique_ptr<AsyncCollectives> async_;
  std::vector<std::vector<ByteRange>> ranges_;
  // By step: a collective started on its communicator's thread. One whose result the next
  // instruction needs runs on the executor's thread: nothing could overlap it.
  std::vector<bool> starts_async_;
  // By step: the communicator a step run on the executor's thread uses (SEND, RECV, collectives
  // not started asynchronously), whose started collectives it waits for first; else -1.
  std::vector<int> sync_comm_;
};

double ProgramExecutor::LearningRateAt(int64_t step) const {
  return LearningRate(program_.lr(),
                      program_.has_lr_schedule() ? &program_.lr_schedule() : nullptr, step);
}

absl::Status ProgramExecutor::CheckReadBack(int id, const std::string& what) const {
  if (id < 0 || id >= buffers_.size() || buffers_.numel(id) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", id, " is not a non-empty buffer"));
  }
  if (buffers_.dtype(id) != v1::F32) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", buffers_.Describe(id),
                                                   " is not f32"));
  }
  return absl::OkStatus();
}

absl::Status ProgramExecutor::CheckEval() {
  const v1::EvalProgram& eval = program_.eval();
  RETURN_IF_ERROR(CheckReadBack(eval.loss_buffer(), "eval.loss_buffer"));
  if (eval.batches() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("eval.batches ", eval.batches(), " < 1"));
  }
  if (eval.every() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("eval.every ", eval.every(), " < 0"));
  }
  eval_program_ = program_;
  *eval_program_.mutable_instructions() = eval.instructions();
  *eval_program_.mutable_data() = eval.data();
  eval_program_.clear_eval();
  for (const Instruction& ins : eval_program_.instructions()) {
    if (ins.op() == Instruction::SGD || ins.op() == Instruction::ADAMW ||
        ins.op() == Instruction::WEIGHT_DECAY) {
      return absl::InvalidArgumentError(
          absl::StrCat("eval instruction ", Instruction::Op_Name(ins.op()),
                       ": an evaluation updates nothing"));
    }
  }
  RETURN_IF_ERROR(
      Annotate(OpenDataSources(eval_program_, &eval_inputs_, &eval_labels_), "eval data"));
  return DecodeSteps(eval_program_, eval_inputs_.get(), eval_labels_.get(), "eval instruction",
                     &eval_steps_);
}

absl::Status ProgramExecutor::OpenDataSources(const v1::Program& list,
                                              std::unique_ptr<BatchSource>* inputs,
                                              std::unique_ptr<BatchSource>* labels) {
  for (const Instruction& ins : list.instructions()) {
    if (ins.op() == Instruction::LOAD_INPUT && *inputs == nullptr) {
      ASSIGN_OR_RETURN(*inputs,
                       BatchSource::Create(list.data(), BatchSource::kInput, list.seed()));
    }
    if (ins.op() == Instruction::LOAD_LABEL && *labels == nullptr) {
      ASSIGN_OR_RETURN(*labels,
                       BatchSource::Create(list.data(), BatchSource::kLabel, list.seed()));
    }
  }
  if (*inputs != nullptr && *labels != nullptr &&
      (*inputs)->num_samples() != (*labels)->num_samples()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.input holds ", (*inputs)->num_samples(), " samples but data.label ",
                     (*labels)->num_samples()));
  }
  return absl::OkStatus();
}

absl::Status ProgramExecutor::DecodeSteps(const v1::Program& list, BatchSource* inputs,
                                          BatchSource* labels, absl::string_view what,
                                          std::vector<Step>* steps) {
  const DecodeContext ctx{list, buffers_, group_index_, group_member_, inputs, labels};
  steps->resize(list.instructions_size());
  for (int i = 0; i < list.instructions_size(); ++i) {
    Step& s = (*steps)[i];
    s.index = i;
    RETURN_IF_ERROR(
        Annotate(DecodeInstruction(ctx, &s), InstructionContext(what, i, list.instructions(i))));
    own_scratch_bytes_ = std::max(own_scratch_bytes_, s.own_scratch_bytes);
    staging_bytes_ = std::max(staging_bytes_, s.staging_bytes);
  }
  return absl::OkStatus();
}

absl::Status ProgramExecutor::Check() {
  ASSIGN_OR_RETURN(buffers_, Buffers::Create(program_));
  for (int i = 0; i < buffers_.size(); ++i) by_name_.emplace(buffers_.name(i), i);
  RETURN_IF_ERROR(CheckReadBack(program_.loss_buffer(), "loss_buffer"));
  if (program_.has_grad_norm_buffer()) {
    RETURN_IF_ERROR(CheckReadBack(program_.grad_norm_buffer(), "grad_norm_buffer"));
  }
  if (!std::isfinite(program_.lr()) || program_.lr() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("lr ", program_.lr(), " is not a finite >= 0"));
  }
  if (program_.has_lr_schedule()) {
    RETURN_IF_ERROR(Annotate(ValidateLrSchedule(program_.lr_schedule(), program_.lr(),
                                                "lr_schedule"),
                             "checking the program"));
  }
  for (int g = 0; g < program_.groups_size(); ++g) {
    const v1::CommGroup& group = program_.groups(g);
    if (!group_index_.emplace(group.id(), g).second) {
      return absl::InvalidArgumentError(absl::StrCat("group id ", group.id(), " appears twice"));
    }
    ASSIGN_OR_RETURN(const int member, MemberIndex(group, program_.rank()));
    group_member_.push_back(member);
  }
  if (!program_.groups().empty() && factory_ == nullptr) {
    return absl::InvalidArgumentError("the program has communicator groups but no factory");
  }
  for (const v1::ParamInit& init : program_.init()) {
    RETURN_IF_ERROR(Annotate(CheckInit(program_, buffers_, init),
                             absl::StrCat("init of '", init.name(), "' (buffer ", init.buffer(),
                                          ")")));
  }
  for (const v1::CheckpointItem& item : program_.checkpoint_items()) {
    RETURN_IF_ERROR(Annotate(CheckCheckpointItem(buffers_, item),
                             absl::StrCat("checkpoint item '", item.name(), "' (buffer ",
                                          item.buffer(), ")")));
  }
  if (program_.start_step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_step ", program_.start_step(), " is negative"));
  }
  RETURN_IF_ERROR(OpenDataSources(program_, &inputs_, &labels_));
  RETURN_IF_ERROR(DecodeSteps(program_, inputs_.get(), labels_.get(), "instruction", &steps_));
  if (program_.has_eval()) RETURN_IF_ERROR(CheckEval());
  return absl::OkStatus();
}

absl::Status ProgramExecutor::Initialize() {
  if (initialized_) return absl::FailedPreconditionError("Initialize called twice");
  const int64_t bytes = buffers_.arena_bytes();
  arena_ = static_cast<char*>(kernels_->Allocate(bytes));
  if (arena_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("allocating the arena of ", bytes,
                                                     " bytes for ", buffers_.size(), " buffers"));
  }
  buffers_.Place(arena_);
  // Every buffer starts zeroed: eight bytes at a time, the tail (an arena_bytes that is not a
  // multiple of 8) from the host.
  kernels_->Fill(arena_, bytes / 8, v1::I64, 0.0);
  if (bytes % 8 != 0) {
    const char zeros[8] = {};
    kernels_->CopyFromHost(zeros, arena_ + bytes / 8 * 8, bytes % 8);
  }
  if (own_scratch_bytes_ > 0) {
    own_scratch_ = static_cast<char*>(kernels_->Allocate(own_scratch_bytes_));
    if (own_scratch_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("allocating ", own_scratch_bytes_, " bytes of collective scratch"));
    }
  }
  if (!kernels_->host_accessible()) host_staging_.resize(static_cast<size_t>(staging_bytes_));
  for (const v1::CommGroup& group : program_.groups()) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm = factory_->Create(group);
    if (!comm.ok()) {
      return Annotate(comm.status(),
                      absl::StrCat("rank ", program_.rank(), ": creating ", GroupName(group)));
    }
    comms_.push_back(*std::move(comm));
  }
  RETURN_IF_ERROR(LoadInitialValues(program_, buffers_, *kernels_));
  RETURN_IF_ERROR(kernels_->Synchronize());
  if (async_collectives_ && !comms_.empty()) {
    async_ = std::make_unique<AsyncCollectives>(static_cast<int>(comms_.size()), program_.trace());
    PlanAsyncCollectives();
  }
  // What each step's time counts as in StepTimes, decided once: the loop reads the clock only
  // around these.
  timed_as_.assign(steps_.size(), TimedAs::kNone);
  for (const Step& s : steps_) {
    if (s.op == Instruction::LOAD_INPUT || s.op == Instruction::LOAD_LABEL) {
      timed_as_[s.index] = TimedAs::kData;
    } else if (IsCommunication(s.op) && (async_ == nullptr || !starts_async_[s.index])) {
      timed_as_[s.index] = TimedAs::kCommunication;
    }
  }
  if (program_.trace()) {
    span_templates_ =
        BuildSpanTemplates(program_, &steps_, async_ != nullptr ? &starts_async_ : nullptr);
  }
  initialized_ = true;
  return absl::OkStatus();
}

void ProgramExecutor::PlanAsyncCollectives() {
  for (const Step& s : steps_) ranges_.push_back(RangesOf(s));
  starts_async_.assign(steps_.size(), false);
  sync_comm_.assign(steps_.size(), -1);
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& s = steps_[i];
    if (!IsCommunication(s.op)) continue;
    bool needed_next = !IsCollective(s.op);  // SEND and RECV run here
    if (!needed_next && i + 1 < steps_.size()) {
      const Step& next = steps_[i + 1];
      needed_next = IsCommunication(next.op) && !IsCollective(next.op) && next.comm == s.comm;
      for (const ByteRange& mine : ranges_[i]) {
        for (const ByteRange& theirs : ranges_[i + 1]) {
          needed_next = needed_next || mine.Overlaps(theirs);
        }
      }
    }
    starts_async_[i] = !needed_next;
    if (needed_next) sync_comm_[i] = s.comm;
  }
}

std::vector<ByteRange> ProgramExecutor::RangesOf(const Step& s) const {
  std::vector<ByteRange> ranges;
  auto add = [&](int id) {
    const char* p = static_cast<const char*>(buffers_.data(id));
    ranges.push_back({p, p + buffers_.bytes(id)});
  };
  for (int id : s.in) add(id);
  for (int id : s.outs) add(id);
  if (s.scratch >= 0) add(s.scratch);
  if (s.own_scratch_bytes > 0) ranges.push_back({own_scratch_, own_scratch_ + own_scratch_bytes_});
  return ranges;
}

bool ProgramExecutor::MustWait(const Step& s) const {
  return async_ != nullptr && async_->WouldBlock(ranges_[s.index], sync_comm_[s.index]);
}

absl::Status ProgramExecutor::WaitBefore(const Step& s) {
  if (async_ == nullptr) return absl::OkStatus();
  return async_->WaitFor(ranges_[s.index], sync_comm_[s.index]);
}

absl::Status ProgramExecutor::Run(const Step& s, const RunContext& ctx) const {
  absl::Status status = s.widened.empty() ? s.run(s, ctx) : RunWidened(s, ctx);
  if (!status.ok()) return Annotate(status, absl::StrCat("step ", ctx.step, ", ", Context(s)));
  return absl::OkStatus();
}

absl::Status ProgramExecutor::RunWidened(const Step& s, const RunContext& ctx) const {
  char* area = s.scratch >= 0 ? static_cast<char*>(buffers_.data(s.scratch)) : ctx.own_scratch;
  for (const WidenedOperand& w : s.widened) {
    if (w.read) {
      ctx.kernels.Cast(buffers_.data(w.buffer), v1::BF16, area + w.offset, v1::F32, w.elements);
    }
  }
  RunContext widened = ctx;
  widened.widened = &s.widened;
  widened.widened_area = area;
  RETURN_IF_ERROR(s.run(s, widened));
  for (const WidenedOperand& w : s.widened) {
    if (w.written) {
      ctx.kernels.Cast(area + w.offset, v1::F32, buffers_.data(w.buffer), v1::BF16, w.elements);
    }
  }
  return absl::OkStatus();
}

absl::Status ProgramExecutor::Execute(const Step& s, const RunContext& ctx) {
  if (async_ == nullptr || !starts_async_[s.index]) return Run(s, ctx);
  async_->Start(s.comm, ranges_[s.index], s.index, [this, &s, ctx] { return Run(s, ctx); });
  return absl::OkStatus();
}

absl::StatusOr<float> ProgramExecutor::RunStep(int64_t step) {
  if (!initialized_) return absl::FailedPreconditionError("RunStep before Initialize");
  if (step < 1) {
    return absl::InvalidArgumentError(absl::StrCat("step ", step, " (steps count from 1)"));
  }
  spans_.clear();
  step_times_ = {};
  kernels_->ResetPeakMemoryStats();
  RunContext ctx{*kernels_, buffers_, step, comms_, own_scratch_, host_staging_.data()};
  const double lr = LearningRateAt(step);
  ctx.lr_scale = program_.lr() > 0 ? lr / program_.lr() : 1.0;
  absl::Status status;
  if (program_.trace()) {
    TracedRun how;
    how.run = [&](const Step& s) { return RunInstruction(s, ctx); };
    if (async_ != nullptr) {
      how.must_wait = [&](const Step& s) { return MustWait(s); };
      how.wait = [&](const Step& s) { return WaitBefore(s); };
    }
    status = RunTraced(steps_, span_templates_, *kernels_, step, how, &spans_);
  } else {
    for (const Step& s : steps_) {
      status = RunInstruction(s, ctx);
      if (!status.ok()) break;
    }
  }
  // Every started collective finishes within the step, whatever happened (they touch the arena).
  if (async_ != nullptr) {
    const absl::Status collectives = async_->WaitAll();
    step_times_.communication_seconds += async_->TakeBlockedSeconds();
    if (status.ok()) status = collectives;
    if (program_.trace()) AppendCollectiveSpans(program_, steps_, async_->TakeTimings(), &spans_);
  }
  RETURN_IF_ERROR(status);
  RETURN_IF_ERROR(Annotate(kernels_->Synchronize(), absl::StrCat("step ", step)));
  last_step_peak_bytes_ = kernels_->memory_stats().peak_bytes_in_use;
  last_step_times_ = step_times_;
  last_step_lr_ = lr;
  float loss = 0.0f;
  kernels_->CopyToHost(buffers_.data(program_.loss_buffer()), &loss, sizeof(loss));
  last_step_grad_norm_.reset();
  if (program_.has_grad_norm_buffer()) {
    float norm_sq = 0.0f;
    kernels_->CopyToHost(buffers_.data(program_.grad_norm_buffer()), &norm_sq, sizeof(norm_sq));
    last_step_grad_norm_ = std::sqrt(static_cast<double>(norm_sq));
  }
  return loss;
}

absl::StatusOr<double> ProgramExecutor::RunEval() {
  if (!initialized_) return absl::FailedPreconditionError("RunEval before Initialize");
  if (!program_.has_eval()) return absl::FailedPreconditionError("the program has no eval");
  const v1::EvalProgram& eval = program_.eval();
  double sum = 0.0;
  for (int j = 0; j < eval.batches(); ++j) {
    // Eval batch j loads as step j + 1 loads: samples j*B .. j*B+B-1.
    const RunContext ctx{*kernels_, buffers_, j + 1, comms_, own_scratch_, host_staging_.data()};
    for (const Step& s : eval_steps_) {
      if (cancelled_.load(std::memory_order_relaxed)) {
        return absl::CancelledError(absl::StrCat("evaluation cancelled before eval batch ", j));
      }
      absl::Status status = s.widened.empty() ? s.run(s, ctx) : RunWidened(s, ctx);
      if (!status.ok()) {
        return Annotate(status, absl::StrCat("eval batch ", j, ", ",
                                             InstructionContext("eval instruction", s.index,
                                                                eval.instructions(s.index))));
      }
    }
    RETURN_IF_ERROR(Annotate(kernels_->Synchronize(), absl::StrCat("eval batch ", j)));
    float loss = 0.0f;
    kernels_->CopyToHost(buffers_.data(eval.loss_buffer()), &loss, sizeof(loss));
    sum += loss;
  }
  return sum / eval.batches();
}

absl::Status ProgramExecutor::RunInstruction(const Step& s, const RunContext& ctx) {
  if (cancelled_.load(std::memory_order_relaxed)) {
    return absl::CancelledError(
        absl::StrCat("step ", ctx.step, " cancelled before instruction ", s.index));
  }
  RETURN_IF_ERROR(WaitBefore(s));  // AsyncCollectives times what it blocks
  const TimedAs timed = timed_as_[s.index];
  if (timed == TimedAs::kNone) return Execute(s, ctx);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status status = Execute(s, ctx);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (timed == TimedAs::kData ? step_times_.data_seconds : step_times_.communication_seconds) +=
      seconds;
  return status;
}

absl::StatusOr<std::vector<float>> ProgramExecutor::ReadBuffer(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return absl::NotFoundError(absl::StrCat("no buffer holds '", name, "'"));
  }
  if (!initialized_) {
    return absl::FailedPreconditionError(absl::StrCat("reading '", name, "' before Initialize"));
  }
  const int id = it->second;
  std::vector<char> host(static_cast<size_t>(buffers_.bytes(id)));
  kernels_->CopyToHost(buffers_.data(id), host.data(), buffers_.bytes(id));
  std::vector<float> out(static_cast<size_t>(buffers_.numel(id)));
  ConvertElements(host.data(), buffers_.dtype(id), out.data(), v1::F32, buffers_.numel(id));
  return out;
}

absl::StatusOr<std::vector<checkpoint::IndexedChunk>> ProgramExecutor::WriteCheckpointShard(
    int64_t step) {
  if (!initialized_) return absl::FailedPreconditionError("checkpoint before Initialize");
  if (program_.checkpoint_dir().empty()) {
    return absl::FailedPreconditionError("the program has no checkpoint_dir");
  }
  return SaveCheckpointShard(program_, buffers_, *kernels_, step);
}

}  // namespace

bool EvaluatesAfter(const v1::Program& program, int64_t step) {
  if (!program.has_eval()) return false;
  return step == program.steps() ||
         (program.eval().every() > 0 && step % program.eval().every() == 0);
}

KernelOptions KernelOptionsFor(const v1::Program& program, int device_index) {
  KernelOptions options;
  options.device = program.device().empty() ? "cpu" : program.device();
  options.device_index = device_index;
  options.allow_tf32 = program.allow_tf32();
  options.precision =
      program.precision() == "bf16" ? MatmulPrecision::kBf16 : MatmulPrecision::kF32;
  return options;
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const v1::Program& program,
                                                           CommunicatorFactory* comm_factory) {
  absl::StatusOr<std::unique_ptr<Kernels>> kernels = NewKernels(KernelOptionsFor(program, 0));
  if (!kernels.ok()) {
    return Annotate(kernels.status(), absl::StrCat("rank ", program.rank(), " (job ",
                                                   program.job_id(), ") on ", program.device()));
  }
  return CreateWithKernels(program, comm_factory, std::move(kernels).value());
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::CreateWithKernels(
    const v1::Program& program, CommunicatorFactory* comm_factory,
    std::unique_ptr<Kernels> kernels) {
  if (program.precision() != "" && program.precision() != "f32" &&
      program.precision() != "bf16") {
    return absl::InvalidArgumentError(
        absl::StrCat("program precision \"", program.precision(), "\": expected f32 or bf16"));
  }
  const std::string context = absl::StrCat("checking the program of rank ", program.rank(),
                                           " (job ", program.job_id(), ")");
  v1::Program resolved = program;
  RETURN_IF_ERROR(Annotate(ResolveGroupRanks(&resolved), context));
  auto exec = std::make_unique<ProgramExecutor>(resolved, comm_factory, std::move(kernels));
  RETURN_IF_ERROR(Annotate(exec->Check(), context));
  return std::unique_ptr<Executor>(std::move(exec));
}

}  // namespace weft
