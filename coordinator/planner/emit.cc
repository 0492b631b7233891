#include "coordinator/planner/emit.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/philox.h"
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

}  // namespace

absl::StatusOr<v1::Program> EmitProgram(const v1::JobSpec& spec, const Graph& g,
                                        const LoweredGraph& lowered, const std::string& job_id,
                                        int attempt, int rank) {
  const Mesh& mesh = g.mesh;
  v1::Program p;
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

  std::map<int, int> group_id;  // mesh dim -> this rank's group id
  for (int d : lowered.group_dims) {
    v1::CommGroup* group = p.add_groups();
    group->set_id(lowered.group_base.at(d) + mesh.GroupIndex(rank, {d}));
    for (int r : mesh.GroupRanks(rank, {d})) group->add_ranks(r);
    group->set_mesh_dims(mesh.dim_name(d));
    group_id[d] = group->id();
  }

  // Buffers: one per tensor, except a reshard with no steps on this mesh reuses its input's.
  std::map<int, int> alias;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (g.ops[i].type == "reshard" && lowered.steps[i].empty()) {
      alias[g.ops[i].outputs[0]] = g.ops[i].inputs[0];
    }
  }
  auto add_buffer = [&p](const std::string& name, const std::vector<int64_t>& shape,
                         v1::Buffer::Role role) {
    v1::Buffer* b = p.add_buffers();
    b->set_id(p.buffers_size() - 1);
    b->set_name(name);
    SetRepeated(b->mutable_shape(), shape.empty() ? std::vector<int64_t>{1} : shape);
    b->set_role(role);
    return b->id();
  };
  std::vector<int> buf(g.tensors.size(), -1);
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const Tensor& tensor = g.tensors[t];
    if (auto it = alias.find(t); it != alias.end()) {
      buf[t] = buf[it->second];
      continue;
    }
    if (!tensor.dist) {
      return absl::InternalError(absl::StrCat("emit: tensor ", tensor.name, " has no placement"));
    }
    buf[t] = add_buffer(tensor.name, tensor.dist->LocalShape(tensor.shape, rank), tensor.role);
  }

  // Init: parameters, then optimizer states.
  std::map<std::string, int64_t> in_features;
  for (const v1::Layer& layer : spec.model().layers()) in_features[layer.name()] = layer.in_features();
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    const Tensor& tensor = g.tensors[t];
    const bool param = tensor.role == v1::Buffer::PARAM;
    const bool state = tensor.role == v1::Buffer::OPTIMIZER_STATE;
    if ((!param && !state) || alias.count(t) > 0) continue;
    if (param && std::find(g.params.begin(), g.params.end(), static_cast<int>(t)) == g.params.end()) {
      continue;  // a resharded copy of a parameter, computed in the step
    }
    v1::ParamInit* init = p.add_init();
    init->set_buffer(buf[t]);
    init->set_name(tensor.name);
    SetRepeated(init->mutable_global_shape(), tensor.shape);
    *init->mutable_box() = tensor.dist->Box(tensor.shape, rank);
    if (state || !HoldsValue(*tensor.dist, rank)) {
      init->set_kind(v1::ParamInit::ZEROS);
    } else if (!spec.init_from().empty()) {
      init->set_kind(v1::ParamInit::FROM_FILE);
    } else {
      auto it = in_features.find(tensor.layer);
      int64_t fan_in = it != in_features.end() && it->second > 0 ? it->second : tensor.shape[0];
      init->set_kind(v1::ParamInit::UNIFORM);
      init->set_bound(static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in))));
      init->set_tensor_key(Fnv1a64(tensor.name));
    }
  }

  const v1::Optimizer& opt = spec.optimizer();
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const Op& op = g.ops[i];
    if (op.type == "reshard") {
      const Tensor& t = g.tensors[op.inputs[0]];
      int cur = buf[op.inputs[0]];
      const std::vector<ReshardStep>& steps = lowered.steps[i];
      for (size_t s = 0; s < steps.size(); ++s) {
        const ReshardStep& step = steps[s];
        const int d = step.mesh_dim;
        int next = s + 1 == steps.size()
                       ? buf[op.outputs[0]]
                       : add_buffer(t.name, step.after.LocalShape(t.shape, rank), t.role);
        v1::Instruction* ins = p.add_step();
        ins->set_op(step.kind);
        ins->add_inputs(cur);
        ins->add_outputs(next);
        ins->set_axis(step.axis);
        ins->set_comment(absl::StrCat(t.name, ": ", step.before.placement(d).ToString(), "->",
                                      step.after.placement(d).ToString(), " over ",
                                      mesh.dim_name(d)));
        const bool local =
            step.kind == v1::Instruction::SLICE || step.kind == v1::Instruction::SCALE;
        if (!local) ins->set_group(group_id.at(d));
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
            ins->set_scale(step.first_member_only && members.front() != rank ? 0.0f
                                                                              : step.scale);
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
      continue;
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
      // A Partial(sum) batch: member 0 loads it, the others hold zeros (buffers start zeroed
      // and nothing else writes this one; the SCALE by 0 states it in the program).
      v1::Instruction* ins = p.add_step();
      ins->set_op(v1::Instruction::SCALE);
      ins->add_inputs(buf[op.outputs[0]]);
      ins->add_outputs(buf[op.outputs[0]]);
      ins->set_scale(0.0f);
      ins->set_comment(absl::StrCat(g.tensors[op.outputs[0]].name,
                                    ": zeros (Partial(sum) batch, loaded by member 0)"));
      continue;
    }
    const bool update = op.type == "sgd" || op.type == "adamw";
    const bool holds = !update || HoldsValue(*g.tensors[op.inputs[0]].dist, rank);
    if (update && !holds) {
      // A Partial(sum) parameter not held here: p_i = p_i * (1 - lr*wd), the step goes to the
      // member that holds the value. AdamW still advances m and v (replicated) with lr 0.
      const int param = buf[op.inputs[0]];
      if (op.type == "adamw") {
        if (opt.betas_size() != 2) {
          return absl::InvalidArgumentError("optimizer.betas: adamw needs [beta1, beta2]");
        }
        v1::Instruction* ins = p.add_step();
        ins->set_op(v1::Instruction::ADAMW);
        for (int in : op.inputs) ins->add_inputs(buf[in]);
        ins->set_lr(0.0f);
        ins->set_beta1(static_cast<float>(opt.betas(0)));
        ins->set_beta2(static_cast<float>(opt.betas(1)));
        ins->set_eps(static_cast<float>(opt.eps()));
        ins->set_comment(absl::StrCat("adamw states of ", g.tensors[op.inputs[0]].name,
                                      " (Partial(sum), step on member 0)"));
      }
      v1::Instruction* ins = p.add_step();
      ins->set_op(v1::Instruction::SCALE);
      ins->add_inputs(param);
      ins->add_outputs(param);
      ins->set_scale(1.0f - static_cast<float>(opt.lr()) * static_cast<float>(opt.weight_decay()));
      ins->set_comment(absl::StrCat("weight decay of ", g.tensors[op.inputs[0]].name,
                                    " (Partial(sum), step on member 0)"));
      continue;
    }
    v1::Instruction* ins = p.add_step();
    ins->set_op(code->op);
    for (int in : op.inputs) ins->add_inputs(buf[in]);
    for (int out : op.outputs) ins->add_outputs(buf[out]);
    ins->set_transpose_a(op.transpose_a);
    ins->set_transpose_b(op.transpose_b);
    if (op.type == "mse" || op.type == "mse_grad") ins->set_scale(op.scale);
    if (op.type == "load_input" || op.type == "load_label") {
      const Tensor& t = g.tensors[op.outputs[0]];
      *ins->mutable_box() = t.dist->Box(t.shape, rank);
    }
    if (op.type == "sgd" || op.type == "adamw") {
      ins->set_lr(static_cast<float>(opt.lr()));
      ins->set_weight_decay(static_cast<float>(opt.weight_decay()));
    }
    if (op.type == "adamw") {
      if (opt.betas_size() != 2) {
        return absl::InvalidArgumentError("optimizer.betas: adamw needs [beta1, beta2]");
      }
      ins->set_beta1(static_cast<float>(opt.betas(0)));
      ins->set_beta2(static_cast<float>(opt.betas(1)));
      ins->set_eps(static_cast<float>(opt.eps()));
    }
    std::string comment = op.comment;
    if (comment.empty()) {
      comment = op.layer.empty() ? op.type : absl::StrCat(op.layer, " ", op.type);
      if (!op.outputs.empty()) absl::StrAppend(&comment, " -> ", g.tensors[op.outputs[0]].name);
    }
    ins->set_comment(comment);
  }
  p.set_loss_buffer(buf[g.loss]);
  return p;
}

}  // namespace weft::planner
