#include "coordinator/planner/emit.h"

#include <cmath>
#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/philox.h"
#include "common/spec/spec.h"
#include "common/status.h"

namespace weft::planner {
namespace {

void SetRepeated(google::protobuf::RepeatedField<int64_t>* field, const std::vector<int64_t>& v) {
  field->Clear();
  for (int64_t x : v) field->Add(x);
}

struct OpCode {
  const char* type;
  v1::Instruction::Op op;
};
constexpr OpCode kOpCodes[] = {
    {"load_input", v1::Instruction::LOAD_INPUT}, {"load_label", v1::Instruction::LOAD_LABEL},
    {"matmul", v1::Instruction::MATMUL},         {"bias_add", v1::Instruction::ADD_BIAS},
    {"bias_grad", v1::Instruction::BIAS_GRAD},   {"relu", v1::Instruction::RELU},
    {"relu_grad", v1::Instruction::RELU_GRAD},   {"gelu", v1::Instruction::GELU},
    {"gelu_grad", v1::Instruction::GELU_GRAD},   {"mse", v1::Instruction::MSE_LOSS},
    {"mse_grad", v1::Instruction::MSE_GRAD},     {"sgd", v1::Instruction::SGD},
    {"adamw", v1::Instruction::ADAMW},
};

v1::Placement::ReduceOp ReduceProto(Placement::Reduce r) {
  return r == Placement::Reduce::kAvg ? v1::Placement::AVG : v1::Placement::SUM;
}

// Whether rank holds the value of a tensor placed by attr: a Partial(sum) tensor lives on
// member 0 of each Partial(sum) dim (zeros elsewhere, so that the pieces sum to it).
bool HoldsValue(const DistAttr& attr, int rank) {
  std::vector<int64_t> coord = attr.mesh().Coordinate(rank);
  for (int d = 0; d < attr.mesh().ndim(); ++d) {
    const Placement& p = attr.placement(d);
    if (p.is_partial() && p.reduce == Placement::Reduce::kSum && coord[d] != 0) return false;
  }
  return true;
}

v1::Instruction::Phase PhaseProto(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return v1::Instruction::FORWARD;
    case Phase::kBackward:
      return v1::Instruction::BACKWARD;
    case Phase::kOptimizer:
      return v1::Instruction::OPTIMIZER;
  }
  return v1::Instruction::PHASE_UNSPECIFIED;
}

// beta1, beta2 and eps of an ADAMW instruction, from the spec's optimizer.
absl::Status SetAdamWHyperparameters(const v1::Optimizer& opt, v1::Instruction* ins) {
  if (opt.betas_size() != 2) {
    return absl::InvalidArgumentError("optimizer.betas: adamw needs [beta1, beta2]");
  }
  ins->set_beta1(static_cast<float>(opt.betas(0)));
  ins->set_beta2(static_cast<float>(opt.betas(1)));
  ins->set_eps(static_cast<float>(opt.eps()));
  return absl::OkStatus();
}

}  // namespace

RankEmitter::RankEmitter(const v1::JobSpec& spec, const Mesh& mesh, const std::string& job_id,
                         int attempt, int rank, v1::Program* program)
    : spec_(spec), mesh_(mesh), rank_(rank), program_(program) {
  v1::Program& p = *program_;
  p.set_job_id(job_id);
  p.set_attempt(attempt);
  p.set_rank(rank);
  p.set_world_size(mesh.size());
  *p.mutable_mesh() = spec.mesh();
  *p.mutable_data() = spec.data();
  p.set_steps(spec.train().steps());
  p.set_seed(spec.train().seed());
  p.set_init_from(spec.init_from());
  p.set_device(spec.device());
  p.set_precision(spec.precision());
  p.set_allow_tf32(spec.allow_tf32());
  p.set_trace(spec.trace());
  p.set_checkpoint_dir(spec.checkpoint().dir());
  p.set_checkpoint_every(spec.checkpoint().every());
}

void RankEmitter::AddGroups(const LoweredGraph& lowered) {
  for (int d : lowered.group_dims) {
    v1::CommGroup* group = program_->add_groups();
    group->set_id(lowered.group_base.at(d) + mesh_.GroupIndex(rank_, {d}));
    for (int r : mesh_.GroupRanks(rank_, {d})) group->add_ranks(r);
    group->set_mesh_dims(mesh_.dim_name(d));
    group_id_[d] = group->id();
  }
}

int RankEmitter::GroupId(int mesh_dim) const {
  auto it = group_id_.find(mesh_dim);
  return it == group_id_.end() ? -1 : it->second;
}

int RankEmitter::AddBuffer(const std::string& name, const std::vector<int64_t>& shape,
                           v1::Buffer::Role role) {
  v1::Buffer* b = program_->add_buffers();
  b->set_id(program_->buffers_size() - 1);
  b->set_name(name);
  SetRepeated(b->mutable_shape(), shape.empty() ? std::vector<int64_t>{1} : shape);
  b->set_role(role);
  return b->id();
}

absl::StatusOr<std::vector<int>> RankEmitter::AssignBuffers(
    const Graph& g, const LoweredGraph& lowered, const std::function<int(int)>& existing) {
  std::map<int, int> alias;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].type == "reshard" && lowered.steps[i].empty()) {
      alias[g.ops[i].outputs[0]] = g.ops[i].inputs[0];
    }
  }
  std::vector<int> buf(g.tensors.size(), -1);
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const Tensor& tensor = g.tensors[t];
    if (int b = existing(static_cast<int>(t)); b >= 0) {
      buf[t] = b;
      continue;
    }
    if (auto it = alias.find(t); it != alias.end()) {
      buf[t] = buf[it->second];
      continue;
    }
    if (!tensor.dist) {
      return absl::InternalError(absl::StrCat("emit: tensor ", tensor.name, " has no placement"));
    }
    buf[t] = AddBuffer(tensor.name, tensor.dist->LocalShape(tensor.shape, rank_), tensor.role);
  }
  return buf;
}

absl::Status RankEmitter::AddInits(const Graph& g, const std::vector<int>& buf) {
  std::map<std::string, int64_t> in_features;
  for (const v1::Layer& layer : spec_.model().layers()) {
    in_features[layer.name()] = layer.in_features();
  }
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const Tensor& tensor = g.tensors[t];
    const bool param = tensor.role == v1::Buffer::PARAM;
    const bool state = tensor.role == v1::Buffer::OPTIMIZER_STATE;
    if (!param && !state) continue;
    if (param && std::find(g.params.begin(), g.params.end(), static_cast<int>(t)) == g.params.end()) {
      // A resharded copy of a parameter, computed in the step. (States are never resharded:
      // the update writes them in place.)
      continue;
    }
    v1::ParamInit* init = program_->add_init();
    init->set_buffer(buf[t]);
    init->set_name(tensor.name);
    SetRepeated(init->mutable_global_shape(), tensor.shape);
    *init->mutable_box() = tensor.dist->Box(tensor.shape, rank_);
    if (HoldsValue(*tensor.dist, rank_)) {
      RETURN_IF_ERROR(AddCheckpointItem(tensor, buf[t], init->box()));
    }
    if (state || !HoldsValue(*tensor.dist, rank_)) {
      init->set_kind(v1::ParamInit::ZEROS);
    } else if (!spec_.init_from().empty()) {
      init->set_kind(v1::ParamInit::FROM_FILE);
    } else {
      auto it = in_features.find(tensor.layer);
      int64_t fan_in = it != in_features.end() && it->second > 0 ? it->second : tensor.shape[0];
      init->set_kind(v1::ParamInit::UNIFORM);
      init->set_bound(static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in))));
      init->set_tensor_key(Fnv1a64(tensor.name));
    }
  }
  return absl::OkStatus();
}

absl::Status RankEmitter::AddCheckpointItem(const Tensor& tensor, int buffer,
                                            const v1::TensorBox& box) {
  v1::CheckpointItem* item = program_->add_checkpoint_items();
  item->set_buffer(buffer);
  item->set_role(tensor.role);
  if (tensor.role == v1::Buffer::OPTIMIZER_STATE) {
    // The optimizer pass names a state <param>.<state> (fc0.weight.m).
    const size_t dot = tensor.name.rfind('.');
    if (dot == std::string::npos) {
      return absl::InternalError(absl::StrCat("emit: optimizer state ", tensor.name,
                                              " is not named <param>.<state>"));
    }
    item->set_name(CheckpointStateName(tensor.name.substr(0, dot), spec_.optimizer().type(),
                                       tensor.name.substr(dot + 1)));
  } else {
    item->set_name(tensor.name);
  }
  SetRepeated(item->mutable_global_shape(), tensor.shape);
  *item->mutable_box() = box;
  // Identical copies: the ranks that differ from this one only along the dims where the tensor
  // is whole (Replicate, or Partial(avg) of equal pieces). Partial(sum) dims are not among them:
  // only member 0 holds the value there.
  const DistAttr& attr = *tensor.dist;
  std::vector<int> dims;
  for (int d = 0; d < attr.mesh().ndim(); ++d) {
    const Placement& p = attr.placement(d);
    if (p.is_replicate() || (p.is_partial() && p.reduce == Placement::Reduce::kAvg)) {
      dims.push_back(d);
    }
  }
  std::vector<int> replicas = attr.mesh().GroupRanks(rank_, dims);
  std::sort(replicas.begin(), replicas.end());
  for (int r : replicas) item->add_replicas(r);
  return absl::OkStatus();
}

absl::Status RankEmitter::EmitOp(const Graph& g, const LoweredGraph& lowered, int op_index,
                                 const std::vector<int>& buf, InstructionList* out) {
  const Mesh& mesh = mesh_;
  const int rank = rank_;
  const v1::Optimizer& opt = spec_.optimizer();
  const Op& op = g.ops[op_index];
  auto add = [&]() {
    v1::Instruction* ins = out->Add();
    ins->set_phase(PhaseProto(op.phase));
    ins->set_micro_batch(-1);
    ins->set_chunk(-1);
    return ins;
  };
  if (op.type == "reshard") {
    const Tensor& t = g.tensors[op.inputs[0]];
    int cur = buf[op.inputs[0]];
    const std::vector<ReshardStep>& steps = lowered.steps[op_index];
    for (size_t s = 0; s < steps.size(); ++s) {
      const ReshardStep& step = steps[s];
      const int d = step.mesh_dim;
      int next = s + 1 == steps.size()
                     ? buf[op.outputs[0]]
                     : AddBuffer(t.name, step.after.LocalShape(t.shape, rank), t.role);
      v1::Instruction* ins = add();
      ins->set_op(step.kind);
      ins->add_inputs(cur);
      ins->add_outputs(next);
      ins->set_axis(step.axis);
      ins->set_comment(absl::StrCat(t.name, ": ", step.before.placement(d).ToString(), "->",
                                    step.after.placement(d).ToString(), " over ",
                                    mesh.dim_name(d)));
      const bool local =
          step.kind == v1::Instruction::SLICE || step.kind == v1::Instruction::SCALE;
      if (!local) {
        if (GroupId(d) < 0) return absl::InternalError("emit: no group for a reshard step");
        ins->set_group(GroupId(d));
      }
      std::vector<int> members = mesh.GroupRanks(rank, {d});
      switch (step.kind) {
        case v1::Instruction::ALL_REDUCE:
          ins->set_reduce(ReduceProto(step.reduce));
          break;
        case v1::Instruction::ALL_GATHER:
          for (int m : members) ins->add_split_sizes(step.before.LocalShape(t.shape, m)[step.axis]);
          break;
        case v1::Instruction::REDUCE_SCATTER:
          ins->set_reduce(ReduceProto(step.reduce));
          for (int m : members) ins->add_split_sizes(step.after.LocalShape(t.shape, m)[step.axis]);
          break;
        case v1::Instruction::ALL_TO_ALL:
          ins->set_concat_axis(step.concat_axis);
          for (int m : members) {
            ins->add_split_sizes(step.after.LocalShape(t.shape, m)[step.axis]);
            ins->add_concat_split_sizes(step.before.LocalShape(t.shape, m)[step.concat_axis]);
          }
          break;
        case v1::Instruction::SCALE:
          ins->set_scale(step.first_member_only && members.front() != rank ? 0.0f : step.scale);
          break;
        case v1::Instruction::SLICE: {
          v1::TensorBox before = step.before.Box(t.shape, rank);
          v1::TensorBox after = step.after.Box(t.shape, rank);
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
  const OpCode* code = nullptr;
  for (const OpCode& c : kOpCodes) {
    if (op.type == c.type) code = &c;
  }
  if (code == nullptr) {
    return absl::InternalError(absl::StrCat("emit: no instruction for ", OpLabel(op)));
  }
  if ((op.type == "load_input" || op.type == "load_label") &&
      !HoldsValue(*g.tensors[op.outputs[0]].dist, rank)) {
    // A Partial(sum) batch: member 0 loads it, the others hold zeros (the SCALE by 0 states it
    // in the program and clears whatever the buffer held).
    v1::Instruction* ins = add();
    ins->set_op(v1::Instruction::SCALE);
    ins->add_inputs(buf[op.outputs[0]]);
    ins->add_outputs(buf[op.outputs[0]]);
    ins->set_scale(0.0f);
    ins->set_comment(absl::StrCat(g.tensors[op.outputs[0]].name,
                                  ": zeros (Partial(sum) batch, loaded by member 0)"));
    return absl::OkStatus();
  }
  const bool update = op.type == "sgd" || op.type == "adamw";
  const bool holds = !update || HoldsValue(*g.tensors[op.inputs[0]].dist, rank);
  if (update && !holds) {
    // A Partial(sum) parameter not held here: p_i = p_i * (1 - lr*wd), the step goes to the
    // member that holds the value. AdamW still advances m and v (replicated) with lr 0.
    const int param = buf[op.inputs[0]];
    if (op.type == "adamw") {
      v1::Instruction* ins = add();
      ins->set_op(v1::Instruction::ADAMW);
      for (int in : op.inputs) ins->add_inputs(buf[in]);
      ins->set_lr(0.0f);
      RETURN_IF_ERROR(SetAdamWHyperparameters(opt, ins));
      ins->set_comment(absl::StrCat("adamw states of ", g.tensors[op.inputs[0]].name,
                                    " (Partial(sum), step on member 0)"));
    }
    v1::Instruction* ins = add();
    ins->set_op(v1::Instruction::SCALE);
    ins->add_inputs(param);
    ins->add_outputs(param);
    ins->set_scale(1.0f - static_cast<float>(opt.lr()) * static_cast<float>(opt.weight_decay()));
    ins->set_comment(absl::StrCat("weight decay of ", g.tensors[op.inputs[0]].name,
                                  " (Partial(sum), step on member 0)"));
    return absl::OkStatus();
  }
  v1::Instruction* ins = add();
  ins->set_op(code->op);
  for (int in : op.inputs) ins->add_inputs(buf[in]);
  for (int o : op.outputs) ins->add_outputs(buf[o]);
  ins->set_transpose_a(op.transpose_a);
  ins->set_transpose_b(op.transpose_b);
  if (op.type == "mse" || op.type == "mse_grad") ins->set_scale(op.scale);
  if (op.type == "load_input" || op.type == "load_label") {
    const Tensor& t = g.tensors[op.outputs[0]];
    *ins->mutable_box() = t.dist->Box(t.shape, rank);
  }
  if (update) {
    ins->set_lr(static_cast<float>(opt.lr()));
    ins->set_weight_decay(static_cast<float>(opt.weight_decay()));
  }
  if (op.type == "adamw") RETURN_IF_ERROR(SetAdamWHyperparameters(opt, ins));
  std::string comment = op.comment;
  if (comment.empty()) {
    comment = op.layer.empty() ? op.type : absl::StrCat(op.layer, " ", op.type);
    if (!op.outputs.empty()) absl::StrAppend(&comment, " -> ", g.tensors[op.outputs[0]].name);
  }
  ins->set_comment(comment);
  return absl::OkStatus();
}

absl::StatusOr<v1::Program> EmitProgram(const v1::JobSpec& spec, const Graph& g,
                                        const LoweredGraph& lowered, const std::string& job_id,
                                        int attempt, int rank) {
  v1::Program p;
  RankEmitter e(spec, g.mesh, job_id, attempt, rank, &p);
  e.AddGroups(lowered);
  ASSIGN_OR_RETURN(std::vector<int> buf, e.AssignBuffers(g, lowered, [](int) { return -1; }));
  RETURN_IF_ERROR(e.AddInits(g, buf));
  for (size_t i = 0; i < g.ops.size(); ++i) {
    RETURN_IF_ERROR(e.EmitOp(g, lowered, static_cast<int>(i), buf, p.mutable_instructions()));
  }
  p.set_loss_buffer(buf[g.loss]);
  return p;
}

}  // namespace weft::planner
