#include "worker/executor/executor.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/philox.h"
#include "common/safetensors.h"
#include "common/program.h"
#include "common/status.h"
#include "worker/data/batch_source.h"
#include "worker/kernels/backend.h"
#include "worker/kernels/kernels.h"

namespace weft {
namespace {

using v1::Instruction;

std::string Dims(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

int64_t Product(const std::vector<int64_t>& v, size_t begin = 0, size_t end = SIZE_MAX) {
  int64_t p = 1;
  for (size_t i = begin; i < std::min(end, v.size()); ++i) p *= v[i];
  return p;
}

// One instruction, decoded and checked once at Create so that RunStep only dispatches.
struct Step {
  Instruction::Op op = Instruction::OP_UNSPECIFIED;
  int index = 0;                 // position in Program.instructions, for messages
  int in[4] = {-1, -1, -1, -1};  // buffer ids
  int out = -1;
  // MATMUL.
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  // Elementwise count, or rows x cols for the bias ops.
  int64_t numel = 0, rows = 0, cols = 0;
  // SLICE and the collectives along an axis: a tensor viewed as [outer, axis_len, inner].
  int64_t outer = 1, axis_len = 0, inner = 1, offset = 0, length = 0;
  int comm = -1;                          // index into the executor's communicators
  ReduceOp reduce = ReduceOp::kSum;
  std::vector<int64_t> counts;            // floats per member (all-gather, reduce-scatter)
  std::vector<int64_t> member_offsets;    // offset of each member's split along the axis
  std::vector<int64_t> member_lengths;    // each member's split along the axis
  int64_t member = 0;                     // this rank's index in the group
  // ALL_TO_ALL: received pieces, and the output viewed along concat_axis.
  std::vector<int64_t> recv_counts, concat_offsets, concat_lengths;
  int64_t c_outer = 1, c_len = 0, c_inner = 1;
  int64_t scratch = 0;                    // floats of collective scratch the step needs
  float scale = 1.0f, lr = 0.0f, weight_decay = 0.0f;
  AdamWHyper adamw;
  BatchSource* source = nullptr;
  const v1::TensorBox* box = nullptr;
  // SEND / RECV: member index in the group, and the message tag.
  int peer = -1;
  uint32_t tag = 0;
  // Trace: index into the executor's span templates; a new span starts where it changes.
  int span = -1;
};

bool IsCommunication(Instruction::Op op) {
  switch (op) {
    case Instruction::SEND:
    case Instruction::RECV:
    case Instruction::ALL_REDUCE:
    case Instruction::ALL_GATHER:
    case Instruction::REDUCE_SCATTER:
    case Instruction::ALL_TO_ALL:
      return true;
    default:
      return false;
  }
}

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

class ProgramExecutor final : public Executor {
 public:
  ProgramExecutor(const v1::Program& program, CommunicatorFactory* factory,
                  std::unique_ptr<Kernels> kernels)
      : program_(program), factory_(factory), kernels_(std::move(kernels)) {}

  ~ProgramExecutor() override {
    for (float* p : ptr_) {
      if (p != nullptr) kernels_->Free(p);
    }
    if (scratch_ != nullptr) kernels_->Free(scratch_);
  }

  absl::Status Check();
  absl::Status Initialize() override;
  absl::StatusOr<float> RunStep(int64_t step) override;
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
  absl::Status CheckInstruction(int index, Step* s);
  absl::Status CheckInit(const v1::ParamInit& init);
  // A buffer that holds the box of a global tensor: id in range, box inside the shape, the
  // box's volume equal to the buffer's size.
  absl::Status CheckBoxedBuffer(int buffer,
                                const google::protobuf::RepeatedField<int64_t>& global_shape,
                                const v1::TensorBox& box) const;
  absl::Status CheckCheckpointItem(const v1::CheckpointItem& item);
  // Reads Program.load_checkpoint into the buffers of its items; returns the buffers filled.
  absl::StatusOr<std::set<int>> LoadCheckpoint();
  absl::Status RunInit(const v1::ParamInit& init, const SafetensorsFile* file);
  // Checks for cancellation, then executes `s`; errors name the step and the instruction.
  absl::Status RunInstruction(const Step& s, int64_t step);
  absl::Status Execute(const Step& s, int64_t step);
  absl::Status ExecuteCollective(const Step& s);
  absl::Status ExecutePointToPoint(const Step& s);
  // Runs the instruction list, timing it into spans_ (Program.trace).
  absl::Status RunTraced(int64_t step);
  void BuildSpanTemplates();
  std::string Context(const Step& s) const;

  const v1::Program program_;
  CommunicatorFactory* const factory_;  // not owned
  std::unique_ptr<Kernels> kernels_;

  std::vector<std::vector<int64_t>> shapes_;  // by buffer id
  std::vector<int64_t> numel_;                // by buffer id
  std::vector<float*> ptr_;                   // by buffer id, owned (kernels_->Free)
  std::map<std::string, int> by_name_;        // first buffer holding each global name
  std::map<int, int> group_index_;            // CommGroup id -> index in program_.groups
  std::vector<int> group_member_;             // this rank's position in each group
  std::vector<std::unique_ptr<Communicator>> comms_;  // by group index
  std::unique_ptr<BatchSource> inputs_, labels_;
  std::vector<Step> steps_;
  float* scratch_ = nullptr;  // packing for collectives along a non-leading axis
  int64_t scratch_size_ = 0;
  std::vector<float> host_staging_;  // data loads when buffers are not host memory
  // Trace only: one template per span of the step (name, category, micro-batch, chunk), and the
  // last step's spans with their times.
  std::vector<v1::TraceSpan> span_templates_;
  std::vector<v1::TraceSpan> spans_;
  bool initialized_ = false;
  std::atomic<bool> cancelled_{false};
};

std::string ProgramExecutor::Context(const Step& s) const {
  const Instruction& ins = program_.instructions(s.index);
  std::string c = absl::StrCat("instruction ", s.index, " (", Instruction::Op_Name(ins.op()));
  if (!ins.comment().empty()) absl::StrAppend(&c, " '", ins.comment(), "'");
  absl::StrAppend(&c, ")");
  return c;
}

absl::Status ProgramExecutor::Check() {
  const int nbuf = program_.buffers_size();
  shapes_.resize(nbuf);
  numel_.resize(nbuf);
  for (int i = 0; i < nbuf; ++i) {
    const v1::Buffer& b = program_.buffers(i);
    if (b.id() != i) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", i, " ('", b.name(), "') has id ", b.id(), "; ids must equal "
                       "their position in Program.buffers"));
    }
    if (b.shape_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", i, " ('", b.name(), "') has no shape (a scalar is [1])"));
    }
    shapes_[i].assign(b.shape().begin(), b.shape().end());
    for (int64_t d : shapes_[i]) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat("buffer ", i, " ('", b.name(),
                                                       "') has shape ", Dims(shapes_[i])));
      }
    }
    numel_[i] = Product(shapes_[i]);
    by_name_.emplace(b.name(), i);
  }
  if (program_.loss_buffer() < 0 || program_.loss_buffer() >= nbuf ||
      numel_[program_.loss_buffer()] < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss_buffer ", program_.loss_buffer(), " is not a non-empty buffer"));
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
    RETURN_IF_ERROR(Annotate(CheckInit(init),
                             absl::StrCat("init of '", init.name(), "' (buffer ", init.buffer(), ")")));
  }
  for (const v1::CheckpointItem& item : program_.checkpoint_items()) {
    RETURN_IF_ERROR(Annotate(CheckCheckpointItem(item),
                             absl::StrCat("checkpoint item '", item.name(), "' (buffer ",
                                          item.buffer(), ")")));
  }
  if (program_.start_step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_step ", program_.start_step(), " is negative"));
  }
  // Data sources are opened only when the program loads data.
  for (const Instruction& ins : program_.instructions()) {
    if (ins.op() == Instruction::LOAD_INPUT && inputs_ == nullptr) {
      ASSIGN_OR_RETURN(inputs_,
                       BatchSource::Create(program_.data(), BatchSource::kInput, program_.seed()));
    }
    if (ins.op() == Instruction::LOAD_LABEL && labels_ == nullptr) {
      ASSIGN_OR_RETURN(labels_,
                       BatchSource::Create(program_.data(), BatchSource::kLabel, program_.seed()));
    }
  }
  if (inputs_ != nullptr && labels_ != nullptr &&
      inputs_->num_samples() != labels_->num_samples()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.input holds ", inputs_->num_samples(), " samples but data.label ",
                     labels_->num_samples()));
  }
  steps_.resize(program_.instructions_size());
  for (int i = 0; i < program_.instructions_size(); ++i) {
    steps_[i].index = i;
    RETURN_IF_ERROR(Annotate(CheckInstruction(i, &steps_[i]), Context(steps_[i])));
    if (steps_[i].outer > 1 && steps_[i].scratch == 0) {
      for (int64_t c : steps_[i].counts) steps_[i].scratch += c;
    }
    scratch_size_ = std::max(scratch_size_, steps_[i].scratch);
  }
  if (program_.trace()) BuildSpanTemplates();
  return absl::OkStatus();
}

void ProgramExecutor::BuildSpanTemplates() {
  for (Step& s : steps_) {
    const Instruction& ins = program_.instructions(s.index);
    if (IsCommunication(s.op)) {
      v1::TraceSpan span = SpanOf(ins);
      const v1::CommGroup& group = program_.groups(s.comm);
      if (s.op == Instruction::SEND) {
        span.set_category("send");
        span.set_name(absl::StrCat("send ", program_.buffers(s.in[0]).name(), " to r",
                                   group.ranks(s.peer)));
      } else if (s.op == Instruction::RECV) {
        span.set_category("recv");
        span.set_name(absl::StrCat("recv ", program_.buffers(s.out).name(), " from r",
                                   group.ranks(s.peer)));
      } else {
        span.set_category("collective");
        span.set_name(absl::StrCat(absl::AsciiStrToLower(Instruction::Op_Name(s.op)), " ",
                                   program_.buffers(s.in[0]).name()));
      }
      span_templates_.push_back(std::move(span));
    } else {
      v1::TraceSpan span = ComputeSpan(ins);
      // Consecutive compute instructions of the same work item share one span.
      const bool extend = s.index > 0 && !IsCommunication(steps_[s.index - 1].op) &&
                          SameSpan(span_templates_.back(), span);
      if (!extend) span_templates_.push_back(std::move(span));
    }
    s.span = static_cast<int>(span_templates_.size()) - 1;
  }
}

absl::Status ProgramExecutor::CheckBoxedBuffer(
    int buffer, const google::protobuf::RepeatedField<int64_t>& global_shape,
    const v1::TensorBox& box) const {
  if (buffer < 0 || buffer >= program_.buffers_size()) {
    return absl::InvalidArgumentError(absl::StrCat("buffer id ", buffer, " out of range"));
  }
  const std::vector<int64_t> global(global_shape.begin(), global_shape.end());
  const std::vector<int64_t> offsets(box.offsets().begin(), box.offsets().end());
  const std::vector<int64_t> lengths(box.lengths().begin(), box.lengths().end());
  if (offsets.size() != global.size() || lengths.size() != global.size()) {
    return absl::InvalidArgumentError(absl::StrCat("box offsets ", Dims(offsets), " lengths ",
                                                   Dims(lengths), " do not match global shape ",
                                                   Dims(global)));
  }
  for (size_t d = 0; d < global.size(); ++d) {
    if (offsets[d] < 0 || lengths[d] < 0 || offsets[d] + lengths[d] > global[d]) {
      return absl::InvalidArgumentError(absl::StrCat("box offsets ", Dims(offsets), " lengths ",
                                                     Dims(lengths), " fall outside global shape ",
                                                     Dims(global)));
    }
  }
  if (Product(lengths) != numel_[buffer]) {
    return absl::InvalidArgumentError(absl::StrCat("box lengths ", Dims(lengths), " hold ",
                                                   Product(lengths), " elements, buffer shape ",
                                                   Dims(shapes_[buffer]), " holds ",
                                                   numel_[buffer]));
  }
  return absl::OkStatus();
}

absl::Status ProgramExecutor::CheckCheckpointItem(const v1::CheckpointItem& item) {
  RETURN_IF_ERROR(CheckBoxedBuffer(item.buffer(), item.global_shape(), item.box()));
  if (item.role() != v1::Buffer::PARAM && item.role() != v1::Buffer::OPTIMIZER_STATE) {
    return absl::InvalidArgumentError(absl::StrCat(
        "role ", v1::Buffer::Role_Name(item.role()), "; expected PARAM or OPTIMIZER_STATE"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::set<int>> ProgramExecutor::LoadCheckpoint() {
  std::set<int> loaded;
  const std::string& folder = program_.load_checkpoint();
  if (folder.empty()) return loaded;
  absl::StatusOr<checkpoint::CheckpointReader> reader = checkpoint::CheckpointReader::Open(folder);
  if (!reader.ok()) return Annotate(reader.status(), absl::StrCat("loading checkpoint ", folder));
  std::vector<float> host;
  for (const v1::CheckpointItem& item : program_.checkpoint_items()) {
    if (item.role() == v1::Buffer::OPTIMIZER_STATE && !program_.load_optimizer_states()) continue;
    const std::vector<int64_t> offsets(item.box().offsets().begin(), item.box().offsets().end());
    const std::vector<int64_t> lengths(item.box().lengths().begin(), item.box().lengths().end());
    host.resize(static_cast<size_t>(numel_[item.buffer()]));
    RETURN_IF_ERROR(Annotate(reader->ReadBox(item.name(), offsets, lengths, host.data()),
                             absl::StrCat("loading ", item.name(), " box offsets ",
                                          Dims(offsets), " lengths ", Dims(lengths),
                                          " from ", folder)));
    kernels_->CopyFromHost(host.data(), ptr_[item.buffer()], numel_[item.buffer()]);
    loaded.insert(item.buffer());
  }
  return loaded;
}

absl::StatusOr<std::vector<checkpoint::IndexedChunk>> ProgramExecutor::WriteCheckpointShard(
    int64_t step) {
  if (!initialized_) return absl::FailedPreconditionError("checkpoint before Initialize");
  if (program_.checkpoint_dir().empty()) {
    return absl::FailedPreconditionError("the program has no checkpoint_dir");
  }
  std::vector<std::vector<float>> host;
  std::vector<checkpoint::ShardPiece> pieces;
  for (const v1::CheckpointItem& item : program_.checkpoint_items()) {
    if (!item.write()) continue;
    host.emplace_back(static_cast<size_t>(numel_[item.buffer()]));
    kernels_->CopyToHost(ptr_[item.buffer()], host.back().data(), numel_[item.buffer()]);
  }
  RETURN_IF_ERROR(kernels_->Synchronize());
  size_t next = 0;
  for (const v1::CheckpointItem& item : program_.checkpoint_items()) {
    if (!item.write()) continue;
    checkpoint::ShardPiece piece;
    piece.name = item.name();
    piece.global_shape.assign(item.global_shape().begin(), item.global_shape().end());
    piece.offsets.assign(item.box().offsets().begin(), item.box().offsets().end());
    piece.lengths.assign(item.box().lengths().begin(), item.box().lengths().end());
    piece.data = host[next++].data();
    pieces.push_back(std::move(piece));
  }
  if (pieces.empty()) return std::vector<checkpoint::IndexedChunk>();
  const std::string staging = checkpoint::StagingDir(program_.checkpoint_dir(), step);
  absl::StatusOr<std::vector<checkpoint::IndexedChunk>> chunks =
      checkpoint::WriteShard(staging, program_.rank(), pieces);
  if (!chunks.ok()) {
    return Annotate(chunks.status(), absl::StrCat("saving step ", step, " into ", staging));
  }
  return chunks;
}

absl::Status ProgramExecutor::CheckInit(const v1::ParamInit& init) {
  RETURN_IF_ERROR(CheckBoxedBuffer(init.buffer(), init.global_shape(), init.box()));
  switch (init.kind()) {
    case v1::ParamInit::UNIFORM:
    case v1::ParamInit::ZEROS:
      return absl::OkStatus();
    case v1::ParamInit::FROM_FILE:
      if (program_.init_from().empty()) {
        return absl::InvalidArgumentError("FROM_FILE but the program has no init_from file");
      }
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown init kind ", v1::ParamInit::Kind_Name(init.kind())));
  }
}

absl::Status ProgramExecutor::CheckInstruction(int index, Step* s) {
  const Instruction& ins = program_.instructions(index);
  s->op = ins.op();
  const int nbuf = program_.buffers_size();
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  auto shape = [&](int id) -> const std::vector<int64_t>& { return shapes_[id]; };
  auto need = [&](int n_in, int n_out) -> absl::Status {
    if (ins.inputs_size() != n_in || ins.outputs_size() != n_out) {
      return bad("expects ", n_in, " inputs and ", n_out, " outputs, got ", ins.inputs_size(),
                 " and ", ins.outputs_size());
    }
    for (int id : ins.inputs()) {
      if (id < 0 || id >= nbuf) return bad("input buffer id ", id, " out of range");
    }
    for (int id : ins.outputs()) {
      if (id < 0 || id >= nbuf) return bad("output buffer id ", id, " out of range");
    }
    for (int i = 0; i < n_in; ++i) s->in[i] = ins.inputs(i);
    if (n_out > 0) s->out = ins.outputs(0);
    return absl::OkStatus();
  };
  auto same_numel = [&](int a, int b, absl::string_view an, absl::string_view bn) -> absl::Status {
    if (numel_[a] != numel_[b]) {
      return bad(an, " (buffer ", a, " '", program_.buffers(a).name(), "') is ", Dims(shape(a)),
                 " but ", bn, " (buffer ", b, " '", program_.buffers(b).name(), "') is ",
                 Dims(shape(b)));
    }
    return absl::OkStatus();
  };
  // [outer, axis_len, inner] view of buffer `id` along ins.axis (negative counts from the end).
  auto axis_view = [&](int id) -> absl::Status {
    const auto& sh = shape(id);
    int axis = ins.axis() < 0 ? ins.axis() + static_cast<int>(sh.size()) : ins.axis();
    if (axis < 0 || axis >= static_cast<int>(sh.size())) {
      return bad("axis ", ins.axis(), " out of range for ", Dims(sh));
    }
    s->outer = Product(sh, 0, axis);
    s->axis_len = sh[axis];
    s->inner = Product(sh, axis + 1);
    return absl::OkStatus();
  };
  // `out` must equal `a` except along the axis, where it is `len`.
  auto same_but_axis = [&](int a, int out, int64_t len) -> absl::Status {
    std::vector<int64_t> want = shape(a);
    int axis = ins.axis() < 0 ? ins.axis() + static_cast<int>(want.size()) : ins.axis();
    want[axis] = len;
    if (shape(out) != want) return bad("output is ", Dims(shape(out)), ", expected ", Dims(want));
    return absl::OkStatus();
  };
  auto group = [&]() -> absl::Status {
    auto it = group_index_.find(ins.group());
    if (it == group_index_.end()) return bad("group ", ins.group(), " is not in the program");
    s->comm = it->second;
    s->member = group_member_[it->second];
    return absl::OkStatus();
  };
  auto splits = [&]() -> absl::Status {
    const v1::CommGroup& g = program_.groups(s->comm);
    if (ins.split_sizes_size() != g.ranks_size()) {
      return bad(ins.split_sizes_size(), " split_sizes for a group of ", g.ranks_size());
    }
    int64_t off = 0;
    for (int64_t len : ins.split_sizes()) {
      if (len < 0) return bad("negative split size");
      s->member_offsets.push_back(off);
      s->member_lengths.push_back(len);
      off += len;
    }
    return absl::OkStatus();
  };

  switch (ins.op()) {
    case Instruction::MATMUL: {
      RETURN_IF_ERROR(need(2, 1));
      const auto& a = shape(s->in[0]);
      const auto& b = shape(s->in[1]);
      const int64_t a_rows = Product(a, 0, a.size() - 1), a_cols = a.back();
      const int64_t b_rows = Product(b, 0, b.size() - 1), b_cols = b.back();
      s->trans_a = ins.transpose_a();
      s->trans_b = ins.transpose_b();
      s->m = s->trans_a ? a_cols : a_rows;
      s->k = s->trans_a ? a_rows : a_cols;
      const int64_t kb = s->trans_b ? b_cols : b_rows;
      s->n = s->trans_b ? b_rows : b_cols;
      if (s->k != kb) {
        return bad("inner dimensions differ: a ", Dims(a), (s->trans_a ? "^T" : ""), " @ b ",
                   Dims(b), (s->trans_b ? "^T" : ""));
      }
      const auto& c = shape(s->out);
      if (numel_[s->out] != s->m * s->n || c.back() != s->n) {
        return bad("output is ", Dims(c), ", expected [", s->m, ",", s->n, "]");
      }
      if (s->out == s->in[0] || s->out == s->in[1]) return bad("output aliases an input");
      return absl::OkStatus();
    }
    case Instruction::ADD_BIAS: {
      RETURN_IF_ERROR(need(2, 1));
      const auto& a = shape(s->in[0]);
      s->cols = a.back();
      s->rows = Product(a, 0, a.size() - 1);
      if (numel_[s->in[1]] != s->cols) {
        return bad("bias is ", Dims(shape(s->in[1])), ", expected [", s->cols, "] for input ",
                   Dims(a));
      }
      return same_numel(s->in[0], s->out, "input", "output");
    }
    case Instruction::BIAS_GRAD: {
      RETURN_IF_ERROR(need(1, 1));
      const auto& a = shape(s->in[0]);
      s->cols = a.back();
      s->rows = Product(a, 0, a.size() - 1);
      if (numel_[s->out] != s->cols) {
        return bad("output is ", Dims(shape(s->out)), ", expected [", s->cols, "]");
      }
      return absl::OkStatus();
    }
    case Instruction::RELU:
    case Instruction::GELU:
    case Instruction::SCALE:
      RETURN_IF_ERROR(need(1, 1));
      s->numel = numel_[s->in[0]];
      s->scale = ins.scale();
      return same_numel(s->in[0], s->out, "input", "output");
    case Instruction::RELU_GRAD:
    case Instruction::GELU_GRAD:
    case Instruction::MSE_GRAD:
      RETURN_IF_ERROR(need(2, 1));
      s->numel = numel_[s->in[0]];
      s->scale = ins.scale();
      RETURN_IF_ERROR(same_numel(s->in[0], s->in[1], "a", "b"));
      return same_numel(s->in[0], s->out, "input", "output");
    case Instruction::MSE_LOSS:
      RETURN_IF_ERROR(need(2, 1));
      s->numel = numel_[s->in[0]];
      s->scale = ins.scale();
      RETURN_IF_ERROR(same_numel(s->in[0], s->in[1], "prediction", "label"));
      if (numel_[s->out] != 1) return bad("output is ", Dims(shape(s->out)), ", expected [1]");
      return absl::OkStatus();
    case Instruction::ALL_REDUCE:
      RETURN_IF_ERROR(need(1, 1));
      RETURN_IF_ERROR(group());
      s->numel = numel_[s->in[0]];
      s->reduce = ins.reduce() == v1::Placement::AVG ? ReduceOp::kAvg : ReduceOp::kSum;
      return same_numel(s->in[0], s->out, "input", "output");
    case Instruction::ALL_GATHER: {
      RETURN_IF_ERROR(need(1, 1));
      RETURN_IF_ERROR(group());
      RETURN_IF_ERROR(splits());
      RETURN_IF_ERROR(axis_view(s->in[0]));
      if (s->axis_len != s->member_lengths[s->member]) {
        return bad("input ", Dims(shape(s->in[0])), " has ", s->axis_len,
                   " along the axis, this member's split size is ",
                   s->member_lengths[s->member]);
      }
      const int64_t total = s->member_offsets.back() + s->member_lengths.back();
      RETURN_IF_ERROR(same_but_axis(s->in[0], s->out, total));
      if (s->out == s->in[0]) return bad("output aliases the input");
      for (int64_t len : s->member_lengths) s->counts.push_back(s->outer * len * s->inner);
      s->axis_len = total;  // Unslice views the output
      return absl::OkStatus();
    }
    case Instruction::REDUCE_SCATTER: {
      RETURN_IF_ERROR(need(1, 1));
      RETURN_IF_ERROR(group());
      RETURN_IF_ERROR(splits());
      RETURN_IF_ERROR(axis_view(s->in[0]));
      const int64_t total = s->member_offsets.back() + s->member_lengths.back();
      if (s->axis_len != total) {
        return bad("input ", Dims(shape(s->in[0])), " has ", s->axis_len,
                   " along the axis, split sizes sum to ", total);
      }
      RETURN_IF_ERROR(same_but_axis(s->in[0], s->out, s->member_lengths[s->member]));
      if (s->out == s->in[0]) return bad("output aliases the input");
      for (int64_t len : s->member_lengths) s->counts.push_back(s->outer * len * s->inner);
      s->numel = numel_[s->out];
      s->reduce = ins.reduce() == v1::Placement::AVG ? ReduceOp::kAvg : ReduceOp::kSum;
      s->scale = 1.0f / static_cast<float>(s->member_lengths.size());
      return absl::OkStatus();
    }
    case Instruction::SLICE: {
      RETURN_IF_ERROR(need(1, 1));
      RETURN_IF_ERROR(axis_view(s->in[0]));
      s->offset = ins.offset();
      s->length = ins.length();
      if (s->offset < 0 || s->length < 0 || s->offset + s->length > s->axis_len) {
        return bad("slice [", s->offset, ", ", s->offset + s->length, ") outside ",
                   Dims(shape(s->in[0])), " along axis ", ins.axis());
      }
      if (s->out == s->in[0]) return bad("output aliases the input");
      return same_but_axis(s->in[0], s->out, s->length);
    }
    case Instruction::SGD: {
      if (ins.outputs_size() == 1 && ins.inputs_size() == 2 && ins.outputs(0) != ins.inputs(0)) {
        return bad("output must be the parameter (updated in place)");
      }
      RETURN_IF_ERROR(need(2, ins.outputs_size() == 1 ? 1 : 0));
      s->numel = numel_[s->in[0]];
      s->lr = ins.lr();
      s->weight_decay = ins.weight_decay();
      return same_numel(s->in[0], s->in[1], "param", "grad");
    }
    case Instruction::ADAMW: {
      if (ins.inputs_size() != 4) return bad("expects 4 inputs (param, grad, m, v)");
      for (int id : ins.outputs()) {
        if (id != ins.inputs(0) && id != ins.inputs(2) && id != ins.inputs(3)) {
          return bad("outputs must be among param, m, v (updated in place)");
        }
      }
      RETURN_IF_ERROR(need(4, ins.outputs_size()));
      s->numel = numel_[s->in[0]];
      for (int i = 1; i < 4; ++i) {
        RETURN_IF_ERROR(same_numel(s->in[0], s->in[i], "param", i == 1 ? "grad" : "state"));
      }
      if (s->in[0] == s->in[2] || s->in[0] == s->in[3] || s->in[2] == s->in[3]) {
        return bad("param, m and v must be distinct buffers");
      }
      s->adamw.lr = ins.lr();
      s->adamw.beta1 = ins.beta1();
      s->adamw.beta2 = ins.beta2();
      s->adamw.eps = ins.eps();
      s->adamw.weight_decay = ins.weight_decay();
      return absl::OkStatus();
    }
    case Instruction::LOAD_INPUT:
    case Instruction::LOAD_LABEL: {
      RETURN_IF_ERROR(need(0, 1));
      s->source = ins.op() == Instruction::LOAD_INPUT ? inputs_.get() : labels_.get();
      s->box = &ins.box();
      RETURN_IF_ERROR(s->source->CheckBox(ins.box()));
      const std::vector<int64_t> lengths(ins.box().lengths().begin(), ins.box().lengths().end());
      if (Product(lengths) != numel_[s->out]) {
        return bad("box lengths ", Dims(lengths), " do not fill output ", Dims(shape(s->out)));
      }
      return absl::OkStatus();
    }
    case Instruction::ALL_TO_ALL: {
      // Pieces of a along `axis` go to the members; what comes back is concatenated along
      // concat_axis. Both sides are packed through scratch ([send | receive]).
      RETURN_IF_ERROR(need(1, 1));
      RETURN_IF_ERROR(group());
      RETURN_IF_ERROR(splits());
      RETURN_IF_ERROR(axis_view(s->in[0]));
      if (s->out == s->in[0]) return bad("output aliases the input");
      const std::vector<int64_t>& in = shape(s->in[0]);
      const int rank = static_cast<int>(in.size());
      const int axis = ins.axis() < 0 ? ins.axis() + rank : ins.axis();
      const int caxis = ins.concat_axis() < 0 ? ins.concat_axis() + rank : ins.concat_axis();
      if (caxis < 0 || caxis >= rank) return bad("concat_axis ", ins.concat_axis(), " out of range for ", Dims(in));
      if (caxis == axis) return bad("axis and concat_axis are both ", axis);
      const int64_t total = s->member_offsets.back() + s->member_lengths.back();
      if (s->axis_len != total) {
        return bad("input ", Dims(in), " has ", s->axis_len, " along axis ", axis,
                   ", split sizes sum to ", total);
      }
      if (ins.concat_split_sizes_size() != static_cast<int>(s->member_lengths.size())) {
        return bad(ins.concat_split_sizes_size(), " concat_split_sizes for a group of ",
                   s->member_lengths.size());
      }
      int64_t concat_total = 0;
      for (int64_t len : ins.concat_split_sizes()) {
        if (len < 0) return bad("negative concat split size");
        s->concat_offsets.push_back(concat_total);
        s->concat_lengths.push_back(len);
        concat_total += len;
      }
      if (in[caxis] != s->concat_lengths[s->member]) {
        return bad("input ", Dims(in), " has ", in[caxis], " along concat_axis ", caxis,
                   ", this member's concat split size is ", s->concat_lengths[s->member]);
      }
      std::vector<int64_t> want = in;
      want[axis] = s->member_lengths[s->member];
      want[caxis] = concat_total;
      if (shape(s->out) != want) return bad("output is ", Dims(shape(s->out)), ", expected ", Dims(want));
      for (int64_t len : s->member_lengths) s->counts.push_back(s->outer * len * s->inner);
      s->c_outer = Product(want, 0, caxis);
      s->c_len = concat_total;
      s->c_inner = Product(want, caxis + 1);
      for (int64_t len : s->concat_lengths) s->recv_counts.push_back(s->c_outer * len * s->c_inner);
      s->scratch = numel_[s->in[0]] + numel_[s->out];
      return absl::OkStatus();
    }
    case Instruction::SEND:
    case Instruction::RECV: {
      const bool send = ins.op() == Instruction::SEND;
      RETURN_IF_ERROR(send ? need(1, 0) : need(0, 1));
      RETURN_IF_ERROR(group());
      const int members = program_.groups(s->comm).ranks_size();
      if (ins.peer() < 0 || ins.peer() >= members) {
        return bad("peer ", ins.peer(), " is not a member of ",
                   GroupName(program_.groups(s->comm)));
      }
      if (ins.peer() == s->member) {
        return bad("peer ", ins.peer(), " is this rank itself");
      }
      s->peer = ins.peer();
      s->tag = ins.tag();
      s->numel = numel_[send ? s->in[0] : s->out];
      return absl::OkStatus();
    }
    case Instruction::ACCUMULATE:
      RETURN_IF_ERROR(need(1, 1));
      if (s->out == s->in[0]) return bad("output aliases the input");
      s->numel = numel_[s->out];
      return same_numel(s->in[0], s->out, "input", "output");
    case Instruction::FILL:
      RETURN_IF_ERROR(need(0, 1));
      s->numel = numel_[s->out];
      s->scale = ins.scale();
      return absl::OkStatus();
    default:
      return bad("unknown op ", static_cast<int>(ins.op()));
  }
}

absl::Status ProgramExecutor::Initialize() {
  if (initialized_) return absl::FailedPreconditionError("Initialize called twice");
  ptr_.assign(program_.buffers_size(), nullptr);
  for (int i = 0; i < program_.buffers_size(); ++i) {
    ptr_[i] = kernels_->Allocate(numel_[i]);
    if (ptr_[i] == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "allocating buffer ", i, " '", program_.buffers(i).name(), "' ", Dims(shapes_[i])));
    }
    kernels_->Fill(ptr_[i], numel_[i], 0.0f);
  }
  if (scratch_size_ > 0) {
    scratch_ = kernels_->Allocate(scratch_size_);
    if (scratch_ == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("allocating ", scratch_size_, " floats of collective scratch"));
    }
  }
  for (const v1::CommGroup& group : program_.groups()) {
    absl::StatusOr<std::unique_ptr<Communicator>> comm = factory_->Create(group);
    if (!comm.ok()) {
      return Annotate(comm.status(),
                      absl::StrCat("rank ", program_.rank(), ": creating ", GroupName(group)));
    }
    comms_.push_back(*std::move(comm));
  }
  // Buffers a checkpoint covers skip their ParamInit (init_from may then name a folder).
  ASSIGN_OR_RETURN(const std::set<int> loaded, LoadCheckpoint());
  std::unique_ptr<SafetensorsFile> file;
  for (const v1::ParamInit& init : program_.init()) {
    if (loaded.count(init.buffer()) > 0) continue;
    if (init.kind() == v1::ParamInit::FROM_FILE && file == nullptr) {
      absl::StatusOr<SafetensorsFile> opened = SafetensorsFile::Open(program_.init_from());
      if (!opened.ok()) {
        return Annotate(opened.status(), absl::StrCat("loading '", init.name(), "' from ",
                                                      program_.init_from()));
      }
      file = std::make_unique<SafetensorsFile>(*std::move(opened));
    }
    RETURN_IF_ERROR(RunInit(init, file.get()));
  }
  RETURN_IF_ERROR(kernels_->Synchronize());
  initialized_ = true;
  return absl::OkStatus();
}

absl::Status ProgramExecutor::RunInit(const v1::ParamInit& init, const SafetensorsFile* file) {
  const int64_t n = numel_[init.buffer()];
  float* dst = ptr_[init.buffer()];
  if (init.kind() == v1::ParamInit::ZEROS) {
    kernels_->Fill(dst, n, 0.0f);
    return absl::OkStatus();
  }
  std::vector<float> host(static_cast<size_t>(n));
  const std::vector<int64_t> global(init.global_shape().begin(), init.global_shape().end());
  const std::vector<int64_t> offsets(init.box().offsets().begin(), init.box().offsets().end());
  const std::vector<int64_t> lengths(init.box().lengths().begin(), init.box().lengths().end());
  if (init.kind() == v1::ParamInit::UNIFORM) {
    // Element (i_0..i_r) of the box is global element sum_d (offsets[d] + i_d) * stride[d].
    const int rank = static_cast<int>(global.size());
    std::vector<int64_t> strides(rank, 1);
    for (int d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * global[d + 1];
    std::vector<int64_t> idx(rank, 0);
    for (int64_t e = 0; e < n; ++e) {
      int64_t g = 0;
      for (int d = 0; d < rank; ++d) g += (offsets[d] + idx[d]) * strides[d];
      host[e] = PhiloxUniform(program_.seed(), init.tensor_key(), static_cast<uint64_t>(g),
                              init.bound());
      for (int d = rank - 1; d >= 0 && ++idx[d] == lengths[d]; --d) idx[d] = 0;
    }
  } else {
    const std::string context = absl::StrCat("loading ", init.name(), " from ", program_.init_from());
    const SafetensorsFile::Entry* e = file->Find(init.name());
    if (e == nullptr) return absl::NotFoundError(absl::StrCat(context, ": no such tensor"));
    if (e->shape != global) {
      return absl::InvalidArgumentError(absl::StrCat(context, ": shape ", Dims(e->shape),
                                                     " in the file, the model needs ",
                                                     Dims(global)));
    }
    RETURN_IF_ERROR(Annotate(file->ReadBox(init.name(), offsets, lengths, host.data()), context));
  }
  kernels_->CopyFromHost(host.data(), dst, n);
  return absl::OkStatus();
}

absl::StatusOr<float> ProgramExecutor::RunStep(int64_t step) {
  if (!initialized_) return absl::FailedPreconditionError("RunStep before Initialize");
  if (step < 1) return absl::InvalidArgumentError(absl::StrCat("step ", step, " (steps count from 1)"));
  spans_.clear();
  if (program_.trace()) {
    RETURN_IF_ERROR(RunTraced(step));
  } else {
    for (const Step& s : steps_) RETURN_IF_ERROR(RunInstruction(s, step));
  }
  RETURN_IF_ERROR(Annotate(kernels_->Synchronize(), absl::StrCat("step ", step)));
  float loss = 0.0f;
  kernels_->CopyToHost(ptr_[program_.loss_buffer()], &loss, 1);
  return loss;
}

absl::Status ProgramExecutor::RunTraced(int64_t step) {
  // One clock read per span boundary. The kernels are synchronized there so that an asynchronous
  // backend's work lands in the span that issued it. A span lasts at least 1 us so that every
  // slice shows; a boundary moves by at most that much per shorter span before it.
  const StepClock clock;
  std::vector<v1::TraceSpan> spans;
  spans.reserve(span_templates_.size());
  int64_t boundary_us = clock.NowUs();
  auto close = [&]() -> absl::Status {
    RETURN_IF_ERROR(kernels_->Synchronize());
    boundary_us = std::max(clock.NowUs(), boundary_us + 1);
    spans.back().set_duration_us(boundary_us - spans.back().start_us());
    return absl::OkStatus();
  };
  int current = -1;
  for (const Step& s : steps_) {
    if (s.span != current) {
      if (current >= 0) RETURN_IF_ERROR(Annotate(close(), absl::StrCat("step ", step)));
      current = s.span;
      spans.push_back(span_templates_[current]);
      spans.back().set_start_us(boundary_us);
    }
    RETURN_IF_ERROR(RunInstruction(s, step));
  }
  if (current >= 0) RETURN_IF_ERROR(Annotate(close(), absl::StrCat("step ", step)));
  spans_ = std::move(spans);
  return absl::OkStatus();
}

absl::Status ProgramExecutor::RunInstruction(const Step& s, int64_t step) {
  if (cancelled_.load(std::memory_order_relaxed)) {
    return absl::CancelledError(
        absl::StrCat("step ", step, " cancelled before instruction ", s.index));
  }
  absl::Status status = Execute(s, step);
  if (!status.ok()) return Annotate(status, absl::StrCat("step ", step, ", ", Context(s)));
  return absl::OkStatus();
}

absl::Status ProgramExecutor::Execute(const Step& s, int64_t step) {
  Kernels& k = *kernels_;
  float* const* p = ptr_.data();
  switch (s.op) {
    case Instruction::MATMUL:
      k.Matmul(p[s.in[0]], p[s.in[1]], p[s.out], s.m, s.n, s.k, s.trans_a, s.trans_b);
      return absl::OkStatus();
    case Instruction::ADD_BIAS:
      k.AddBias(p[s.in[0]], p[s.in[1]], p[s.out], s.rows, s.cols);
      return absl::OkStatus();
    case Instruction::BIAS_GRAD:
      k.BiasGrad(p[s.in[0]], p[s.out], s.rows, s.cols);
      return absl::OkStatus();
    case Instruction::RELU:
      k.Relu(p[s.in[0]], p[s.out], s.numel);
      return absl::OkStatus();
    case Instruction::RELU_GRAD:
      k.ReluGrad(p[s.in[0]], p[s.in[1]], p[s.out], s.numel);
      return absl::OkStatus();
    case Instruction::GELU:
      k.Gelu(p[s.in[0]], p[s.out], s.numel);
      return absl::OkStatus();
    case Instruction::GELU_GRAD:
      k.GeluGrad(p[s.in[0]], p[s.in[1]], p[s.out], s.numel);
      return absl::OkStatus();
    case Instruction::MSE_LOSS:
      k.MseLoss(p[s.in[0]], p[s.in[1]], p[s.out], s.numel, s.scale);
      return absl::OkStatus();
    case Instruction::MSE_GRAD:
      k.MseGrad(p[s.in[0]], p[s.in[1]], p[s.out], s.numel, s.scale);
      return absl::OkStatus();
    case Instruction::SCALE:
      k.Scale(p[s.in[0]], p[s.out], s.numel, s.scale);
      return absl::OkStatus();
    case Instruction::SLICE:
      k.Slice(p[s.in[0]], p[s.out], s.outer, s.axis_len, s.inner, s.offset, s.length);
      return absl::OkStatus();
    case Instruction::SGD:
      k.Sgd(p[s.in[0]], p[s.in[1]], s.numel, s.lr, s.weight_decay);
      return absl::OkStatus();
    case Instruction::ADAMW:
      k.AdamW(p[s.in[0]], p[s.in[1]], p[s.in[2]], p[s.in[3]], s.numel, s.adamw, step);
      return absl::OkStatus();
    case Instruction::LOAD_INPUT:
    case Instruction::LOAD_LABEL: {
      const int64_t n = numel_[s.out];
      if (k.host_accessible()) return s.source->ReadBox(step, *s.box, p[s.out]);
      host_staging_.resize(static_cast<size_t>(n));
      RETURN_IF_ERROR(s.source->ReadBox(step, *s.box, host_staging_.data()));
      k.CopyFromHost(host_staging_.data(), p[s.out], n);
      return absl::OkStatus();
    }
    case Instruction::ACCUMULATE:
      // out += a as a one-row bias add (out may alias its first operand).
      k.AddBias(p[s.out], p[s.in[0]], p[s.out], 1, s.numel);
      return absl::OkStatus();
    case Instruction::FILL:
      k.Fill(p[s.out], s.numel, s.scale);
      return absl::OkStatus();
    case Instruction::ALL_REDUCE:
    case Instruction::ALL_GATHER:
    case Instruction::REDUCE_SCATTER:
    case Instruction::ALL_TO_ALL:
      return ExecuteCollective(s);
    case Instruction::SEND:
    case Instruction::RECV:
      return ExecutePointToPoint(s);
    default:
      return absl::InternalError("op passed Check but has no executor");
  }
}

absl::Status ProgramExecutor::ExecutePointToPoint(const Step& s) {
  Communicator& comm = *comms_[s.comm];
  // The transport reads and writes memory directly: pending kernels must be done first.
  RETURN_IF_ERROR(kernels_->Synchronize());
  if (s.op == Instruction::SEND) {
    return comm.Send(ptr_[s.in[0]], static_cast<size_t>(s.numel), s.peer, s.tag);
  }
  return comm.Recv(ptr_[s.out], static_cast<size_t>(s.numel), s.peer, s.tag);
}

absl::Status ProgramExecutor::ExecuteCollective(const Step& s) {
  Kernels& k = *kernels_;
  Communicator& comm = *comms_[s.comm];
  const float* a = ptr_[s.in[0]];
  float* out = ptr_[s.out];
  // Collectives read and write memory directly: pending kernels (the slices and copies below
  // included) must be done before each communicator call. One Synchronize right before it.
  switch (s.op) {
    case Instruction::ALL_REDUCE:
      k.Copy(a, out, s.numel);
      RETURN_IF_ERROR(k.Synchronize());
      return comm.AllReduce(out, static_cast<size_t>(s.numel), s.reduce);
    case Instruction::ALL_GATHER: {
      // Member i's piece is [outer, len_i, inner]; gathered back to back, then placed along the
      // axis of out ([outer, total, inner]) unless outer is 1, where back to back is the layout.
      RETURN_IF_ERROR(k.Synchronize());
      if (s.outer == 1) return comm.AllGather(a, out, s.counts);
      RETURN_IF_ERROR(comm.AllGather(a, scratch_, s.counts));
      const float* chunk = scratch_;
      for (size_t i = 0; i < s.counts.size(); ++i) {
        k.Unslice(chunk, out, s.outer, s.axis_len, s.inner, s.member_offsets[i],
                  s.member_lengths[i]);
        chunk += s.counts[i];
      }
      return absl::OkStatus();
    }
    case Instruction::REDUCE_SCATTER: {
      // The communicator only sums; an average scales this member's piece afterwards.
      if (s.outer == 1) {
        RETURN_IF_ERROR(k.Synchronize());
        RETURN_IF_ERROR(comm.ReduceScatter(a, out, s.counts));
      } else {
        float* chunk = scratch_;
        for (size_t i = 0; i < s.counts.size(); ++i) {
          k.Slice(a, chunk, s.outer, s.axis_len, s.inner, s.member_offsets[i],
                  s.member_lengths[i]);
          chunk += s.counts[i];
        }
        RETURN_IF_ERROR(k.Synchronize());
        RETURN_IF_ERROR(comm.ReduceScatter(scratch_, out, s.counts));
      }
      if (s.reduce == ReduceOp::kAvg) k.Scale(out, out, s.numel, s.scale);
      return absl::OkStatus();
    }
    case Instruction::ALL_TO_ALL: {
      float* send = scratch_;
      float* recv = scratch_ + numel_[s.in[0]];
      float* chunk = send;
      for (size_t j = 0; j < s.counts.size(); ++j) {
        k.Slice(a, chunk, s.outer, s.axis_len, s.inner, s.member_offsets[j], s.member_lengths[j]);
        chunk += s.counts[j];
      }
      RETURN_IF_ERROR(k.Synchronize());
      RETURN_IF_ERROR(comm.AllToAll(send, s.counts, recv, s.recv_counts));
      chunk = recv;
      for (size_t i = 0; i < s.recv_counts.size(); ++i) {
        k.Unslice(chunk, out, s.c_outer, s.c_len, s.c_inner, s.concat_offsets[i],
                  s.concat_lengths[i]);
        chunk += s.recv_counts[i];
      }
      return absl::OkStatus();
    }
    default:
      return absl::InternalError("not a collective");
  }
}

absl::StatusOr<std::vector<float>> ProgramExecutor::ReadBuffer(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return absl::NotFoundError(absl::StrCat("no buffer holds '", name, "'"));
  }
  if (!initialized_) {
    return absl::FailedPreconditionError(absl::StrCat("reading '", name, "' before Initialize"));
  }
  std::vector<float> out(static_cast<size_t>(numel_[it->second]));
  kernels_->CopyToHost(ptr_[it->second], out.data(), numel_[it->second]);
  return out;
}

}  // namespace

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
  v1::Program resolved = program;
  RETURN_IF_ERROR(Annotate(ResolveGroupRanks(&resolved),
                           absl::StrCat("checking the program of rank ", program.rank(), " (job ",
                                        program.job_id(), ")")));
  auto exec = std::make_unique<ProgramExecutor>(resolved, comm_factory, std::move(kernels));
  RETURN_IF_ERROR(Annotate(exec->Check(), absl::StrCat("checking the program of rank ",
                                                      program.rank(), " (job ", program.job_id(),
                                                      ")")));
  return std::unique_ptr<Executor>(std::move(exec));
}

}  // namespace weft
