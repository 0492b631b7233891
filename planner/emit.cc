#include "planner/emit.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/philox.h"
#include "common/program.h"
#include "common/status.h"
#include "planner/buckets.h"
#include "planner/early_collectives.h"
#include "planner/grad_norm.h"
#include "planner/op_table.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace weft::planner {
namespace {

using pipeline::StageItem;
using v1::Instruction;

template <typename Repeated, typename Values>
void SetRepeated(Repeated* field, const Values& values) {
  field->Clear();
  for (const auto& v : values) field->Add(v);
}

v1::Placement::ReduceOp ReduceProto(Placement::Reduce r) {
  return Placement::Partial(r).ToProto().reduce();
}

Instruction::Phase PhaseProto(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return Instruction::FORWARD;
    case Phase::kBackward:
      return Instruction::BACKWARD;
    case Phase::kOptimizer:
      return Instruction::OPTIMIZER;
  }
  return Instruction::PHASE_UNSPECIFIED;
}

int64_t Product(const std::vector<int64_t>& v, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end && i < v.size(); ++i) n *= v[i];
  return n;
}

// Sets the instruction field named like each attribute (an attribute `scale` sets
// Instruction.scale), so that a new op's attributes need nothing here.
absl::Status SetAttributes(const Op& op, Instruction* ins) {
  const google::protobuf::Descriptor* d = ins->GetDescriptor();
  const google::protobuf::Reflection* r = ins->GetReflection();
  for (const auto& [name, value] : op.attrs.values()) {
    const google::protobuf::FieldDescriptor* f = d->FindFieldByName(name);
    if (f == nullptr || f->is_repeated()) {
      return absl::InternalError(
          absl::StrCat(OpLabel(op), ": attribute ", name, " has no Instruction field"));
    }
    using FD = google::protobuf::FieldDescriptor;
    if (const bool* b = std::get_if<bool>(&value); b && f->cpp_type() == FD::CPPTYPE_BOOL) {
      r->SetBool(ins, f, *b);
    } else if (const double* x = std::get_if<double>(&value);
               x && f->cpp_type() == FD::CPPTYPE_FLOAT) {
      r->SetFloat(ins, f, static_cast<float>(*x));
    } else if (const int64_t* i = std::get_if<int64_t>(&value);
               i && f->cpp_type() == FD::CPPTYPE_INT64) {
      r->SetInt64(ins, f, *i);
    } else if (i && f->cpp_type() == FD::CPPTYPE_INT32) {
      r->SetInt32(ins, f, static_cast<int32_t>(*i));
    } else if (i && f->cpp_type() == FD::CPPTYPE_UINT64) {
      r->SetUInt64(ins, f, static_cast<uint64_t>(*i));  // a 64-bit key, bit for bit
    } else {
      return absl::InternalError(absl::StrCat(OpLabel(op), ": attribute ", name,
                                              " does not fit Instruction.", name));
    }
  }
  return absl::OkStatus();
}

class RankEmitter {
 public:
  RankEmitter(const PlannedGraph& planned, int rank, v1::Program* program, const StopCheck& stop)
      : p_(planned), g_(planned.graph), rank_(rank), program_(*program),
        pipelined_(planned.graph.pipeline.dim >= 0), stop_(stop) {
    stage_ = pipelined_ ? static_cast<int>(g_.mesh.Coordinate(rank)[g_.pipeline.dim]) : 0;
  }

  absl::Status Emit() {
    for (int d : p_.lowered.group_dims) {
      v1::CommGroup* group = program_.add_groups();
      group->set_id(p_.lowered.GroupId(g_.mesh, rank_, d));
      group->add_dims(d);
      group->set_mesh_dims(g_.mesh.dim_name(d));
      group_id_[d] = group->id();
    }
    RETURN_IF_ERROR(AddInits());
    const int holder = (p_.pipeline.chunks - 1) % p_.pipeline.stages;
    if (stage_ != holder) loss_ = NewBuffer("loss", {1}, v1::Buffer::LOSS, v1::F32);
    const std::vector<StageItem>& items = p_.pipeline.order[stage_];
    for (size_t i = 0; i < items.size(); ++i) {
      if (i % kItemsPerStopCheck == 0) {
        RETURN_IF_ERROR(CheckStop(stop_, "emitting its instructions"));
      }
      RETURN_IF_ERROR(EmitItem(items[i]));
    }
    if (stage_ == holder) {
      ASSIGN_OR_RETURN(loss_, Instance(g_.loss, 0));
    }
    program_.set_loss_buffer(loss_);
    return absl::OkStatus();
  }

 private:
  int NewBuffer(const std::string& name, const std::vector<int64_t>& shape,
                v1::Buffer::Role role, v1::DType dtype) {
    v1::Buffer* b = program_.add_buffers();
    b->set_id(program_.buffers_size() - 1);
    b->set_name(name);
    SetRepeated(b->mutable_shape(), shape.empty() ? std::vector<int64_t>{1} : shape);
    b->set_role(role);
    b->set_dtype(dtype);
    return b->id();
  }

  // Which instance of tensor t an item of micro-batch mb uses: one per step (-1) for what no
  // per-micro-batch op makes, else mb's (0 in the per-step items of a single micro-batch).
  int InstanceIndex(int t, int mb) const {
    const int producer = p_.pipeline.producer[t];
    if (producer < 0 || p_.pipeline.per_step[producer]) return -1;
    return std::max(mb, 0);
  }

  absl::StatusOr<int> Instance(int t, int mb) {
    const int index = InstanceIndex(t, mb);
    auto key = std::make_pair(t, index);
    auto it = buffers_.find(key);
    if (it != buffers_.end()) return it->second;
    const Tensor& tensor = g_.tensors[t];
    if (!tensor.dist) {
      return absl::InternalError(absl::StrCat("emit: tensor ", tensor.name, " has no placement"));
    }
    const int b = NewBuffer(tensor.name,
                            tensor.dist->LocalShape(MicroShape(g_, tensor, std::max(index, 0)), rank_),
                            tensor.role, tensor.dtype);
    buffers_.emplace(key, b);
    return b;
  }

  Instruction* Add(const StageItem& item, Phase phase) {
    Instruction* ins = program_.add_instructions();
    const bool per_step = item.micro_batch < 0;
    // Per-step work of the forward phase (the loss summed over micro-batches) belongs to none.
    ins->set_phase(per_step && phase == Phase::kForward && g_.micro_batches() > 1
                       ? Instruction::PHASE_UNSPECIFIED
                       : PhaseProto(phase));
    ins->set_micro_batch((pipelined_ || g_.micro_batches() > 1) && !per_step ? item.micro_batch
                                                                             : -1);
    ins->set_chunk(pipelined_ && !per_step ? item.chunk : -1);
    return ins;
  }

  // Parameters and optimizer states. A float32 master weight (bf16 storage) starts as its
  // parameter does and goes into checkpoints under the parameter's name; the bf16 parameter
  // loads from there (rounded) but is never written.
  absl::Status AddInits() {
    for (size_t t = 0; t < g_.tensors.size(); ++t) {
      const Tensor& tensor = g_.tensors[t];
      const Parameter* master_of = g_.FindParamOfMaster(static_cast<int>(t));
      const Parameter* p = master_of;
      if (p == nullptr && tensor.role == v1::Buffer::PARAM) p = g_.FindParam(t);
      const bool state = tensor.role == v1::Buffer::OPTIMIZER_STATE && master_of == nullptr;
      if (p == nullptr && !state) continue;
      if (StageOfTensor(g_, p_.pipeline, tensor) != stage_) continue;
      const std::string& name = p != nullptr ? g_.tensors[p->tensor].name : tensor.name;
      ASSIGN_OR_RETURN(const int buffer, Instance(t, -1));
      v1::ParamInit* init = program_.add_init();
      init->set_buffer(buffer);
      init->set_name(name);
      SetRepeated(init->mutable_global_shape(), tensor.shape);
      *init->mutable_box() = tensor.dist->Box(tensor.shape, rank_);
      const bool holds = HoldsValue(*tensor.dist, rank_);
      if (holds) {
        v1::CheckpointItem* item = program_.add_checkpoint_items();
        item->set_buffer(buffer);
        item->set_role(master_of != nullptr ? v1::Buffer::PARAM : tensor.role);
        item->set_name(CheckpointName(g_, static_cast<int>(t)));
        SetRepeated(item->mutable_global_shape(), tensor.shape);
        *item->mutable_box() = init->box();
        item->set_write(p_.writers.Writes(static_cast<int>(t), rank_));
      }
      if (state || !holds) {
        init->set_kind(v1::ParamInit::ZEROS);
      } else if (!program_.init_from().empty()) {
        init->set_kind(v1::ParamInit::FROM_FILE);
        SetRepeated(init->mutable_file_shape(), p->file_shape);
      } else if (p->init == Parameter::Init::kZeros) {
        init->set_kind(v1::ParamInit::ZEROS);
      } else if (p->init == Parameter::Init::kOnes) {
        init->set_kind(v1::ParamInit::ONES);
      } else {
        init->set_kind(v1::ParamInit::UNIFORM);
        init->set_bound(p->init_bound);
        init->set_tensor_key(Fnv1a64(name));
      }
    }
    return absl::OkStatus();
  }

  absl::Status EmitItem(const StageItem& item) {
    if (p_.grad_norm_dims && !norm_done_ &&
        (item.kind == StageItem::kLossSum || IsUpdate(item))) {
      RETURN_IF_ERROR(EmitGradientNorm(item));
      if (item.kind == StageItem::kLossSum) return absl::OkStatus();  // summed with the norm
    }
    switch (item.kind) {
      case StageItem::kCompute:
        return EmitOp(item);
      case StageItem::kFill: {
        ASSIGN_OR_RETURN(const int acc, Accumulator(item.op));
        EmitZero(item, acc, program_.buffers(acc).name());
        return absl::OkStatus();
      }
      case StageItem::kAccumulate: {
        const int in = g_.ops[item.op].inputs[0];
        ASSIGN_OR_RETURN(const int acc, Accumulator(item.op));
        ASSIGN_OR_RETURN(const int term, Instance(in, item.micro_batch));
        Instruction* ins = Add(item, item.phase);
        ins->set_op(Instruction::ACCUMULATE);
        ins->add_inputs(term);
        ins->add_outputs(acc);
        ins->set_comment(g_.tensors[in].role == v1::Buffer::LOSS
                             ? std::string("loss += this micro-batch's share")
                             : absl::StrCat(g_.tensors[in].name, " accumulated"));
        return absl::OkStatus();
      }
      case StageItem::kSend:
      case StageItem::kRecv: {
        ASSIGN_OR_RETURN(const int b, Instance(item.tensor, item.micro_batch));
        Instruction* ins = Add(item, item.phase);
        const bool send = item.kind == StageItem::kSend;
        ins->set_op(send ? Instruction::SEND : Instruction::RECV);
        (send ? ins->add_inputs(b) : ins->add_outputs(b));
        ins->set_group(group_id_.at(g_.pipeline.dim));
        ins->set_peer(item.peer_stage);
        ins->set_tag(item.tag);
        ins->set_comment(absl::StrCat(g_.tensors[item.tensor].name,
                                      send ? " to stage " : " from stage ", item.peer_stage));
        return absl::OkStatus();
      }
      case StageItem::kLossFill:
        EmitZero(item, loss_, "loss");
        return absl::OkStatus();
      case StageItem::kLossSum: {
        ASSIGN_OR_RETURN(const int loss, LossBuffer());
        Instruction* ins = Add(item, Phase::kForward);
        ins->set_phase(Instruction::PHASE_UNSPECIFIED);
        ins->set_op(Instruction::ALL_REDUCE);
        ins->add_inputs(loss);
        ins->add_outputs(loss);
        ins->set_group(group_id_.at(g_.pipeline.dim));
        ins->set_reduce(v1::Placement::SUM);
        ins->set_comment(absl::StrCat("loss: sum over ", g_.mesh.dim_name(g_.pipeline.dim),
                                      " (held by the last stage, 0 elsewhere)"));
        return absl::OkStatus();
      }
    }
    return absl::InternalError("emit: unknown stage item");
  }

  bool IsUpdate(const StageItem& item) const {
    return item.kind == StageItem::kCompute && IsKind(g_.ops[item.op], OpKind::kUpdate);
  }

  // The global gradient norm (grad_norm.h) where `at` stands (the stage's first update, or the
  // loss's sum over the pipeline dim, which this sums together with the norm), and the clip
  // coefficient.
  absl::Status EmitGradientNorm(const StageItem& at) {
    norm_done_ = true;
    const std::vector<int>& dims = *p_.grad_norm_dims;
    StageItem step = at;
    step.micro_batch = -1;
    auto add = [&](Instruction::Op op, const std::string& comment) {
      Instruction* ins = Add(step, Phase::kOptimizer);
      ins->set_op(op);
      ins->set_comment(comment);
      return ins;
    };
    std::vector<int> squares;
    for (const StageItem& item : p_.pipeline.order[stage_]) {
      if (!IsUpdate(item)) continue;
      const Tensor& grad = g_.tensors[g_.ops[item.op].inputs[1]];
      ASSIGN_OR_RETURN(const int b, Instance(g_.ops[item.op].inputs[1], -1));
      const int square = NewBuffer(absl::StrCat(grad.name, ".sum_squares"), {1},
                                   v1::Buffer::ACTIVATION, v1::F32);
      const bool counts = CountsGradient(*grad.dist, dims, rank_);
      Instruction* ins = add(Instruction::SUM_SQUARES,
                             absl::StrCat("sum of squares of ", grad.name,
                                          counts ? "" : " (a copy: counted by member 0)"));
      ins->add_inputs(b);
      ins->add_outputs(square);
      ins->set_scale(counts ? 1.0f : 0.0f);
      squares.push_back(square);
    }
    norm_ = NewBuffer("grad_norm_sq", {1}, v1::Buffer::LOSS, v1::F32);
    if (squares.empty()) {
      Instruction* ins = add(Instruction::FILL, "grad_norm_sq = 0: no parameters on this stage");
      ins->add_outputs(norm_);
      ins->set_scale(0.0f);
    } else {
      Instruction* ins = add(Instruction::ADD, "grad_norm_sq: this rank's squares");
      for (int b : squares) ins->add_inputs(b);
      ins->add_outputs(norm_);
    }
    for (int d : dims) {
      Instruction* ins = add(Instruction::ALL_REDUCE,
                             absl::StrCat("grad_norm_sq: sum over ", g_.mesh.dim_name(d)));
      ins->add_inputs(norm_);
      ins->add_outputs(norm_);
      ins->set_group(group_id_.at(d));
      ins->set_reduce(v1::Placement::SUM);
    }
    if (at.kind == StageItem::kLossSum) {
      // One collective on the pipeline group for both sums (pipeline.h).
      ASSIGN_OR_RETURN(const int loss, LossBuffer());
      Instruction* ins = add(Instruction::ALL_REDUCE,
                             absl::StrCat("loss and grad_norm_sq: sum over ",
                                          g_.mesh.dim_name(g_.pipeline.dim),
                                          " (the loss held by the last stage, 0 elsewhere)"));
      ins->add_inputs(loss);
      ins->add_inputs(norm_);
      ins->add_outputs(loss);
      ins->add_outputs(norm_);
      ins->set_group(group_id_.at(g_.pipeline.dim));
      ins->set_reduce(v1::Placement::SUM);
      ins->set_scratch(NewBuffer("loss_and_norm.scratch", {2}, v1::Buffer::SCRATCH, v1::F32));
    }
    program_.set_grad_norm_buffer(norm_);
    if (g_.optimizer.clip_grad_norm > 0) {
      clip_ = NewBuffer("grad_clip", {1}, v1::Buffer::ACTIVATION, v1::F32);
      Instruction* ins = add(Instruction::CLIP_COEFFICIENT,
                             absl::StrCat("grad_clip = min(1, ", g_.optimizer.clip_grad_norm,
                                          " / (grad_norm + 1e-6))"));
      ins->add_inputs(norm_);
      ins->add_outputs(clip_);
      ins->set_max_norm(static_cast<float>(g_.optimizer.clip_grad_norm));
    }
    return absl::OkStatus();
  }

  // Sets `buffer` (named `name` in the comment) to 0 before the micro-batches add to it.
  void EmitZero(const StageItem& item, int buffer, absl::string_view name) {
    Instruction* ins = Add(item, Phase::kForward);
    ins->set_phase(Instruction::PHASE_UNSPECIFIED);
    ins->set_op(Instruction::FILL);
    ins->add_outputs(buffer);
    ins->set_scale(0.0f);
    ins->set_comment(absl::StrCat(name, " = 0: accumulated over micro-batches"));
  }

  absl::StatusOr<int> LossBuffer() {
    if (loss_ >= 0) return loss_;
    return Instance(g_.loss, 0);
  }

  // The buffer summing the micro-batch terms of accumulating reshard op's input.
  absl::StatusOr<int> Accumulator(int op) {
    auto it = accumulators_.find(op);
    if (it != accumulators_.end()) return it->second;
    const Tensor& t = g_.tensors[g_.ops[op].inputs[0]];
    const int b = NewBuffer(t.name, t.dist->LocalShape(MicroShape(g_, t, 0), rank_),
                            t.role, t.dtype);
    accumulators_.emplace(op, b);
    return b;
  }

  absl::Status EmitOp(const StageItem& item) {
    const Op& op = g_.ops[item.op];
    const OpDef* def = FindOpDef(op.type);
    if (def == nullptr) return absl::InternalError(absl::StrCat("emit: ", OpLabel(op)));
    switch (def->kind) {
      case OpKind::kReshard:
        return EmitReshard(item, op);
      case OpKind::kLoad:
        return EmitLoad(item, op, *def);
      case OpKind::kUpdate:
        return EmitUpdate(item, op, *def);
      default:
        break;
    }
    Instruction* ins = Add(item, op.phase);
    ins->set_op(def->instruction);
    for (int in : op.inputs) {
      ASSIGN_OR_RETURN(const int b, Instance(in, item.micro_batch));
      ins->add_inputs(b);
    }
    for (int out : op.outputs) {
      // An output written into another tensor (a bf16 parameter rounded from its master).
      auto into = g_.writes_into.find(out);
      ASSIGN_OR_RETURN(const int b, Instance(into != g_.writes_into.end() ? into->second : out,
                                             item.micro_batch));
      ins->add_outputs(b);
    }
    RETURN_IF_ERROR(SetAttributes(op, ins));
    if (def->box_of >= 0) {
      const int n_in = static_cast<int>(op.inputs.size());
      const int id = def->box_of < n_in ? op.inputs[def->box_of] : op.outputs[def->box_of - n_in];
      SetBox(ins, id, item.micro_batch);
      SetRepeated(ins->mutable_global_shape(), g_.tensors[id].shape);
    }
    ins->set_comment(Comment(op));
    return absl::OkStatus();
  }

  std::string Comment(const Op& op) const {
    if (!op.comment.empty()) return op.comment;
    std::string comment = op.layer.empty() ? op.type : absl::StrCat(op.layer, " ", op.type);
    if (!op.outputs.empty()) absl::StrAppend(&comment, " -> ", g_.tensors[op.outputs[0]].name);
    return comment;
  }

  absl::Status EmitLoad(const StageItem& item, const Op& op, const OpDef& def) {
    const Tensor& t = g_.tensors[op.outputs[0]];
    ASSIGN_OR_RETURN(const int out, Instance(op.outputs[0], item.micro_batch));
    Instruction* ins = Add(item, op.phase);
    if (!HoldsValue(*t.dist, rank_)) {
      // A Partial(sum) batch: member 0 loads it, the others hold zeros (the SCALE by 0 states it
      // in the program and clears whatever the buffer held).
      ins->set_op(Instruction::SCALE);
      ins->add_inputs(out);
      ins->add_outputs(out);
      ins->set_scale(0.0f);
      ins->set_comment(absl::StrCat(t.name, ": zeros (Partial(sum) batch, loaded by member 0)"));
      return absl::OkStatus();
    }
    ins->set_op(def.instruction);
    ins->add_outputs(out);
    SetBox(ins, op.outputs[0], item.micro_batch);
    ins->set_comment(Comment(op));
    return absl::OkStatus();
  }

  // Instruction.box: this rank's region of tensor `id` for micro-batch `micro_batch`, in the
  // coordinates of the step's whole tensor (the micro-batch's rows of the global batch).
  void SetBox(Instruction* ins, int id, int micro_batch) const {
    const Tensor& t = g_.tensors[id];
    const int mb = std::max(micro_batch, 0);
    *ins->mutable_box() = t.dist->Box(MicroShape(g_, t, mb), rank_);
    if (t.micro.is_shard()) {
      const int axis = t.micro.axis;
      ins->mutable_box()->set_offsets(axis, ins->box().offsets(axis) + MicroOffset(g_, t, mb));
    }
  }

  absl::Status EmitUpdate(const StageItem& item, const Op& op, const OpDef& def) {
    std::vector<int> bufs;
    for (int in : op.inputs) {
      ASSIGN_OR_RETURN(const int b, Instance(in, item.micro_batch));
      bufs.push_back(b);
    }
    const std::string& param = g_.tensors[op.inputs[0]].name;
    const bool holds = HoldsValue(*g_.tensors[op.inputs[0]].dist, rank_);
    // The update where this rank holds the parameter's value. A Partial(sum) parameter not held
    // here: p_i = p_i * (1 - lr*wd), the step goes to the member that holds the value; AdamW
    // still advances m and v (replicated) with lr 0.
    if (holds || def.updates_in_place().size() > 1) {
      Instruction* ins = Add(item, op.phase);
      ins->set_op(def.instruction);
      for (int b : bufs) ins->add_inputs(b);
      if (clip_ >= 0) ins->add_inputs(clip_);
      RETURN_IF_ERROR(SetAttributes(op, ins));
      if (holds) {
        ins->set_comment(Comment(op));
        return absl::OkStatus();
      }
      ins->set_lr(0.0f);
      ins->set_comment(absl::StrCat(op.type, " states of ", param,
                                    " (Partial(sum), step on member 0)"));
    }
    Instruction* ins = Add(item, op.phase);
    ins->set_op(Instruction::WEIGHT_DECAY);
    ins->add_inputs(bufs[0]);
    ins->add_outputs(bufs[0]);
    ins->set_lr(static_cast<float>(op.attrs.Float("lr")));
    ins->set_weight_decay(static_cast<float>(op.attrs.Float("weight_decay")));
    ins->set_comment(absl::StrCat("weight decay of ", param, " (Partial(sum), step on member 0)"));
    return absl::OkStatus();
  }

  absl::Status EmitReshard(const StageItem& item, const Op& op) {
    const int in_id = op.inputs[0], out_id = op.outputs[0];
    const Tensor& t = g_.tensors[in_id];
    int cur;
    if (p_.pipeline.accumulates[item.op]) {
      ASSIGN_OR_RETURN(cur, Accumulator(item.op));
    } else {
      ASSIGN_OR_RETURN(cur, Instance(in_id, item.micro_batch));
    }
    const std::vector<ReshardStep>& steps = p_.lowered.steps[item.op];
    const auto out_key = std::make_pair(out_id, InstanceIndex(out_id, item.micro_batch));
    // A reshard written into another tensor (ZeRO's gathered parameter): its last step writes
    // that tensor's buffer.
    auto into = g_.writes_into.find(out_id);
    if (into != g_.writes_into.end()) {
      // A shard is gathered from at least two ranks (zero.h's ZeroPlacement).
      if (steps.empty()) return absl::InternalError(absl::StrCat("emit: ", t.name, " moves nowhere"));
      ASSIGN_OR_RETURN(buffers_[out_key], Instance(into->second, item.micro_batch));
    }
    if (steps.empty()) {
      buffers_[out_key] = cur;  // nothing moves: the output is the input's buffer
      return absl::OkStatus();
    }
    const Shape shape = MicroShape(g_, t, std::max(InstanceIndex(in_id, item.micro_batch), 0));
    const Mesh& mesh = g_.mesh;
    for (size_t s = 0; s < steps.size(); ++s) {
      const ReshardStep& step = steps[s];
      const int d = step.mesh_dim;
      int next;
      if (s + 1 == steps.size()) {
        ASSIGN_OR_RETURN(next, Instance(out_id, item.micro_batch));
      } else {
        next = NewBuffer(t.name, step.after.LocalShape(shape, rank_), g_.tensors[out_id].role,
                         t.dtype);
      }
      Instruction* ins = Add(item, op.phase);
      ins->set_op(step.kind);
      ins->add_inputs(cur);
      ins->add_outputs(next);
      ins->set_axis(step.axis);
      ins->set_comment(absl::StrCat(t.name, ": ", step.before.placement(d).ToString(), "->",
                                    step.after.placement(d).ToString(), " over ",
                                    mesh.dim_name(d)));
      const bool local = step.kind == Instruction::SLICE || step.kind == Instruction::SCALE;
      if (!local) {
        auto group = group_id_.find(d);
        if (group == group_id_.end()) return absl::InternalError("emit: no group for a reshard step");
        ins->set_group(group->second);
      }
      // The members' pieces matter to the collectives that split along an axis only: listing a
      // group is O(its size), and a rank's other steps need none of it.
      const bool splits = step.kind == Instruction::ALL_GATHER ||
                          step.kind == Instruction::REDUCE_SCATTER ||
                          step.kind == Instruction::ALL_TO_ALL;
      const std::vector<int> members = splits ? mesh.GroupRanks(rank_, {d}) : std::vector<int>{};
      const std::vector<int64_t> in_shape = step.before.LocalShape(shape, rank_);
      const std::vector<int64_t> out_shape = step.after.LocalShape(shape, rank_);
      switch (step.kind) {
        case Instruction::ALL_REDUCE:
          ins->set_reduce(ReduceProto(step.reduce));
          break;
        case Instruction::ALL_GATHER:
          for (int m : members) ins->add_split_sizes(step.before.LocalShape(shape, m)[step.axis]);
          if (Product(in_shape, 0, step.axis) > 1) AddScratch(ins, t, Product(out_shape, 0, out_shape.size()));
          break;
        case Instruction::REDUCE_SCATTER:
          ins->set_reduce(ReduceProto(step.reduce));
          for (int m : members) ins->add_split_sizes(step.after.LocalShape(shape, m)[step.axis]);
          if (Product(in_shape, 0, step.axis) > 1) AddScratch(ins, t, Product(in_shape, 0, in_shape.size()));
          break;
        case Instruction::ALL_TO_ALL:
          ins->set_concat_axis(step.concat_axis);
          for (int m : members) {
            ins->add_split_sizes(step.after.LocalShape(shape, m)[step.axis]);
            ins->add_concat_split_sizes(step.before.LocalShape(shape, m)[step.concat_axis]);
          }
          AddScratch(ins, t, Product(in_shape, 0, in_shape.size()) +
                                 Product(out_shape, 0, out_shape.size()));
          break;
        case Instruction::SCALE:
          ins->set_scale(step.first_member_only && mesh.Coordinate(rank_)[d] != 0 ? 0.0f
                                                                                  : step.scale);
          break;
        case Instruction::SLICE: {
          const v1::TensorBox before = step.before.Box(shape, rank_);
          const v1::TensorBox after = step.after.Box(shape, rank_);
          ins->set_offset(after.offsets(step.axis) - before.offsets(step.axis));
          ins->set_length(after.lengths(step.axis));
          break;
        }
        default:
          return absl::InternalError("emit: unexpected reshard step");
      }
      cur = next;
    }
    return absl::OkStatus();
  }

  // A buffer for the packing of a collective along an inner axis: the executor needs `elements`
  // of the tensor's dtype there ([send | receive] for an all-to-all).
  void AddScratch(Instruction* ins, const Tensor& t, int64_t elements) {
    ins->set_scratch(NewBuffer(absl::StrCat(t.name, ".scratch"), {elements},
                               v1::Buffer::SCRATCH, t.dtype));
  }

  static constexpr size_t kItemsPerStopCheck = 64;

  const PlannedGraph& p_;
  const Graph& g_;
  const int rank_;
  v1::Program& program_;
  const bool pipelined_;
  const StopCheck& stop_;
  int stage_ = 0;
  int loss_ = -1;
  // The gradient norm's buffers once emitted (EmitGradientNorm): its square, and the clip
  // coefficient the updates read (-1: no clipping).
  bool norm_done_ = false;
  int norm_ = -1;
  int clip_ = -1;
  std::map<int, int> group_id_;                    // mesh dim -> this rank's group id
  std::map<std::pair<int, int>, int> buffers_;     // (tensor, instance) -> buffer
  std::map<int, int> accumulators_;                // accumulating reshard op -> buffer
};

// Gives each instruction with widened operands (a compute op reading or writing bf16) a planned
// scratch buffer for their float32 copies, so that the arena holds them and the planned peak is
// the measured one.
void AddWideningScratch(v1::Program* program,
                        google::protobuf::RepeatedPtrField<v1::Instruction>* instructions) {
  for (v1::Instruction& ins : *instructions) {
    if (ins.has_scratch()) continue;
    const std::vector<WidenedOperand> widened = WidenedOperands(*program, ins);
    const int64_t bytes = WidenedBytes(widened);
    if (bytes == 0) continue;
    v1::Buffer* b = program->add_buffers();
    b->set_id(program->buffers_size() - 1);
    b->set_name(absl::StrCat(program->buffers(widened.front().buffer).name(), ".widened"));
    b->add_shape(bytes / static_cast<int64_t>(sizeof(float)));
    b->set_role(v1::Buffer::SCRATCH);
    b->set_dtype(v1::F32);
    ins.set_scratch(b->id());
  }
}

// Moves the evaluation's program `eval` (emitted for the same rank from the eval graph) into
// program.eval: its parameters are the training program's buffers of the same name (their init
// entries), its other buffers new ones, its groups the training program's (ids shared:
// Lower's numbering) plus any it alone uses.
absl::Status MergeEval(const v1::Program& eval, v1::Program* program) {
  // The training program's parameters by name (a bf16 parameter's float32 master weight, an
  // optimizer state initialized under the same name, is not one).
  std::map<std::string, int> params;
  for (const v1::ParamInit& init : program->init()) {
    if (program->buffers(init.buffer()).role() == v1::Buffer::PARAM) {
      params.emplace(init.name(), init.buffer());
    }
  }
  std::map<int, int> to;
  for (const v1::ParamInit& init : eval.init()) {
    auto it = params.find(init.name());
    if (it == params.end()) {
      return absl::InternalError(absl::StrCat("eval: no training buffer holds ", init.name()));
    }
    const v1::Buffer& mine = eval.buffers(init.buffer());
    const v1::Buffer& theirs = program->buffers(it->second);
    if (BufferElements(mine) != BufferElements(theirs) || mine.dtype() != theirs.dtype()) {
      return absl::InternalError(absl::StrCat("eval: ", init.name(), " is placed otherwise than "
                                              "in training on this rank"));
    }
    to[init.buffer()] = it->second;
  }
  for (const v1::Buffer& b : eval.buffers()) {
    if (to.count(b.id()) > 0) continue;
    v1::Buffer* copy = program->add_buffers();
    *copy = b;
    copy->set_id(program->buffers_size() - 1);
    to[b.id()] = copy->id();
  }
  std::set<int> groups;
  for (const v1::CommGroup& g : program->groups()) groups.insert(g.id());
  for (const v1::CommGroup& g : eval.groups()) {
    if (groups.insert(g.id()).second) *program->add_groups() = g;
  }
  v1::EvalProgram* out = program->mutable_eval();
  for (const Instruction& ins : eval.instructions()) {
    Instruction* copy = out->add_instructions();
    *copy = ins;
    for (int& id : *copy->mutable_inputs()) id = to.at(id);
    for (int& id : *copy->mutable_outputs()) id = to.at(id);
    if (copy->has_scratch()) copy->set_scratch(to.at(copy->scratch()));
  }
  out->set_loss_buffer(to.at(eval.loss_buffer()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::Program> EmitProgram(const PlannedGraph& planned, const v1::Program& header,
                                        int rank, MemoryPlanner* memory,
                                        const PlannedGraph* eval, const StopCheck& stop) {
  v1::Program program = header;
  program.set_rank(rank);
  program.set_world_size(planned.graph.mesh.size());
  RankEmitter emitter(planned, rank, &program, stop);
  RETURN_IF_ERROR(Annotate(emitter.Emit(), absl::StrCat("emitting rank ", rank)));
  if (eval != nullptr) {
    v1::Program evaluation = header;
    evaluation.set_rank(rank);
    RankEmitter eval_emitter(*eval, rank, &evaluation, stop);
    RETURN_IF_ERROR(
        Annotate(eval_emitter.Emit(), absl::StrCat("emitting rank ", rank, "'s evaluation")));
    RETURN_IF_ERROR(Annotate(MergeEval(evaluation, &program), absl::StrCat("emitting rank ", rank)));
  }
  if (!program.blocking_collectives()) StartCollectivesEarly(&program);
  FuseGradientAllReduces(&program, planned.graph.bucket_bytes);
  AddWideningScratch(&program, program.mutable_instructions());
  if (program.has_eval()) AddWideningScratch(&program, program.mutable_eval()->mutable_instructions());
  RETURN_IF_ERROR(Annotate(memory->Plan(&program, stop), absl::StrCat("emitting rank ", rank)));
  return program;
}

}  // namespace weft::planner
