#include "coordinator/planner/pipeline/pipeline.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/spec/spec.h"
#include "common/status.h"
#include "coordinator/planner/autodiff.h"
#include "coordinator/planner/build.h"
#include "coordinator/planner/emit.h"
#include "coordinator/planner/lower.h"
#include "coordinator/planner/optimizer.h"
#include "coordinator/planner/pipeline/deadlock.h"
#include "coordinator/planner/pipeline/schedule.h"
#include "coordinator/planner/propagate.h"
#include "coordinator/planner/spmd.h"

namespace weft::planner::pipeline {
namespace {

using v1::Instruction;

// One chunk's forward and backward for one micro-batch size.
struct ChunkGraph {
  Graph g;
  LoweredGraph lowered;
  int in = -1;        // the input: the data (chunk 0) or the previous chunk's output
  int out = -1;       // the last activation (the prediction on the last chunk)
  int out_grad = -1;  // its gradient, received from the next chunk (not on the last)
  int loss = -1;      // last chunk: this micro-batch's share of the loss
};

// One chunk's step-level part: parameters, accumulated gradients, the optimizer and, on the
// last chunk, the accumulated loss and its reshard to Replicate.
struct ChunkStep {
  Graph g;
  LoweredGraph lowered;
  std::vector<int> grad_acc;  // by parameter, in g.params order
  int loss_acc = -1;
  int loss_replicated = -1;
  int loss_reshard_op = -1;  // index in g.ops
};

struct Plan {
  Mesh mesh;
  int dim = 0;  // the pipeline mesh dim
  PipelineShape shape;
  std::unique_ptr<PipelineSchedule> schedule;
  std::vector<int64_t> mb_size, mb_start;
  std::map<int64_t, std::vector<ChunkGraph>> graphs;  // by micro-batch size, by chunk
  std::vector<ChunkStep> steps;                       // by chunk
  LoweredGraph groups;                                // group_dims and group_base of all
};

absl::Status CheckReplicatedOnPipelineDim(const Graph& g, int dim, const std::string& what) {
  for (const Tensor& t : g.tensors) {
    if (t.dist && !t.dist->placement(dim).is_replicate()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " ", t.name, " is ", t.dist->ToString(), ": a pipeline stage holds whole tensors, "
          "so the placement on the pipeline dim ", g.mesh.dim_name(dim), " must be Replicate()"));
    }
  }
  return absl::OkStatus();
}

// The forward graph of `chunk` for micro-batches of `rows` rows, placed.
absl::StatusOr<ChunkGraph> BuildChunk(const v1::JobSpec& spec, const Plan& plan,
                                      const std::vector<int>& chunk_of, int chunk, int64_t rows,
                                      const ChunkGraph* previous) {
  const RuleRegistry& rules = BuiltinRules();
  const int last = plan.shape.chunks() - 1;
  ChunkGraph cg;
  Graph& g = cg.g;
  g.mesh = plan.mesh;
  std::vector<Op> ops;
  if (chunk == 0) {
    std::vector<int64_t> shape = {rows};
    shape.insert(shape.end(), spec.data().sample_shape().begin(), spec.data().sample_shape().end());
    cg.in = g.AddTensor({"input", shape, v1::Buffer::DATA, ""});
    g.input = cg.in;
    ASSIGN_OR_RETURN(g.tensors[cg.in].dist,
                     BatchAttr(spec, g.mesh, static_cast<int>(shape.size())));
    g.ops.push_back(Op{"load_input", {}, {cg.in}, "", Phase::kForward});
  } else {
    Tensor t = previous->g.tensors[previous->out];
    cg.in = g.AddTensor(std::move(t));
  }
  int x = cg.in;
  for (int i = 0; i < spec.model().layers_size(); ++i) {
    if (chunk_of[i] != chunk) continue;
    ASSIGN_OR_RETURN(x, AppendLayer(spec.model().layers(i), i, x, &g));
  }
  cg.out = x;
  RETURN_IF_ERROR(PlaceParameters(spec, &g));
  RETURN_IF_ERROR(CheckReplicatedOnPipelineDim(g, plan.dim, "parameter"));
  if (chunk == last) {
    std::vector<int64_t> label_shape = {rows};
    label_shape.insert(label_shape.end(), spec.data().label_shape().begin(),
                       spec.data().label_shape().end());
    if (g.tensors[x].shape != label_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model output [", absl::StrJoin(g.tensors[x].shape, ","), "] does not match label [",
          absl::StrJoin(label_shape, ","), "]"));
    }
    g.label = g.AddTensor({"label", label_shape, v1::Buffer::DATA, ""});
    ASSIGN_OR_RETURN(g.tensors[g.label].dist,
                     BatchAttr(spec, g.mesh, static_cast<int>(label_shape.size())));
    g.ops.push_back(Op{"load_label", {}, {g.label}, "", Phase::kForward});
    cg.loss = g.AddTensor({"loss", {1}, v1::Buffer::LOSS, ""});
    g.loss = cg.loss;
    Op mse{"mse", {x, g.label}, {cg.loss}, "", Phase::kForward};
    int64_t n = spec.data().batch_size();
    for (int64_t d : spec.data().label_shape()) n *= d;
    // Every micro-batch's share of the mean over the WHOLE batch, so that they sum to it.
    mse.scale = static_cast<float>(1.0 / static_cast<double>(n));
    g.ops.push_back(mse);
  }
  RETURN_IF_ERROR(CheckReplicatedOnPipelineDim(g, plan.dim, "batch"));
  RETURN_IF_ERROR(PlaceOps(rules, &g));
  return cg;
}

// Appends the backward of cg, seeded from the next chunk's input gradient (`next`).
absl::Status DifferentiateChunk(int chunk, ChunkGraph* cg, const ChunkGraph* next) {
  std::map<int, int> seeds;
  if (next != nullptr) {
    const Tensor& next_grad = next->g.tensors[next->g.grad_of.at(next->in)];
    Tensor t = cg->g.tensors[cg->out];
    t.name = absl::StrCat(t.name, "@grad");
    t.role = v1::Buffer::GRAD;
    t.dist = next_grad.dist;
    cg->out_grad = cg->g.AddTensor(std::move(t));
    seeds[cg->out] = cg->out_grad;
  }
  std::vector<int> wrt;
  if (chunk > 0) wrt.push_back(cg->in);
  ASSIGN_OR_RETURN(cg->g, AutodiffFrom(BuiltinRules(), std::move(cg->g), seeds, wrt));
  return absl::OkStatus();
}

absl::StatusOr<ChunkStep> BuildChunkStep(const v1::JobSpec& spec, const ChunkGraph& ref,
                                         bool last) {
  ChunkStep cs;
  Graph& g = cs.g;
  g.mesh = ref.g.mesh;
  for (int p : ref.g.params) {
    const int id = g.AddTensor(ref.g.tensors[p]);
    g.params.push_back(id);
  }
  for (size_t i = 0; i < ref.g.params.size(); ++i) {
    Tensor grad = ref.g.tensors[ref.g.grad_of.at(ref.g.params[i])];
    const int acc = g.AddTensor(std::move(grad));
    g.grad_of[g.params[i]] = acc;
    cs.grad_acc.push_back(acc);
  }
  if (last) {
    cs.loss_acc = g.AddTensor(ref.g.tensors[ref.loss]);
  }
  ASSIGN_OR_RETURN(g, AppendOptimizer(spec, BuiltinRules(), std::move(g)));
  if (last) {
    const size_t before = g.ops.size();
    cs.loss_replicated =
        AppendReshard(&g, cs.loss_acc, DistAttr::Replicated(g.mesh), Phase::kForward, "");
    if (g.ops.size() > before) cs.loss_reshard_op = static_cast<int>(before);
  }
  ASSIGN_OR_RETURN(cs.lowered, Lower(g));
  return cs;
}

// Every micro-batch size must give the accumulated tensors one placement.
absl::Status CheckSameAccumulation(const Plan& plan) {
  const auto& first = plan.graphs.begin()->second;
  for (const auto& [rows, chunks] : plan.graphs) {
    for (size_t c = 0; c < chunks.size(); ++c) {
      const Graph& a = first[c].g;
      const Graph& b = chunks[c].g;
      for (size_t i = 0; i < a.params.size(); ++i) {
        const Tensor& ga = a.tensors[a.grad_of.at(a.params[i])];
        const Tensor& gb = b.tensors[b.grad_of.at(b.params[i])];
        if (!(*ga.dist == *gb.dist)) {
          return absl::UnimplementedError(absl::StrCat(
              "micro-batches of ", plan.graphs.begin()->first, " and ", rows, " rows place ",
              ga.name, " differently (", ga.dist->ToString(), " vs ", gb.dist->ToString(),
              "); use a batch size divisible by micro_batches"));
        }
      }
      if (first[c].loss >= 0 && !(*a.tensors[first[c].loss].dist == *b.tensors[chunks[c].loss].dist)) {
        return absl::UnimplementedError("micro-batches of different sizes place the loss differently");
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Plan> BuildPlan(const v1::JobSpec& spec) {
  Plan plan;
  const v1::Pipeline& pipe = spec.pipeline();
  ASSIGN_OR_RETURN(plan.mesh, Mesh::FromProto(spec.mesh()));
  std::optional<int> dim = plan.mesh.FindDim(pipe.dim());
  if (!dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.dim \"", pipe.dim(), "\" is not a dim of the mesh ", plan.mesh.ToString()));
  }
  plan.dim = *dim;
  plan.shape.stages = static_cast<int>(plan.mesh.dim_size(plan.dim));
  plan.shape.micro_batches = pipe.micro_batches();
  plan.shape.virtual_stages = pipe.virtual_stages() == 0 ? 1 : pipe.virtual_stages();
  if (plan.shape.micro_batches < 1) {
    return absl::InvalidArgumentError("pipeline.micro_batches must be >= 1");
  }
  if (plan.shape.virtual_stages < 1) {
    return absl::InvalidArgumentError("pipeline.virtual_stages must be >= 1");
  }
  const int64_t batch = spec.data().batch_size();
  if (batch < plan.shape.micro_batches) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.micro_batches ", plan.shape.micro_batches,
                     " is more than the data.batch_size ", batch, ": a micro-batch would be empty"));
  }
  if (spec.data().sample_shape_size() == 0 || spec.data().label_shape_size() == 0) {
    return absl::InvalidArgumentError(
        "data.sample_shape and data.label_shape must be filled before planning");
  }
  ASSIGN_OR_RETURN(plan.schedule, ScheduleByName(pipe.schedule()));
  RETURN_IF_ERROR(plan.schedule->Check(plan.shape));
  const int chunks = plan.shape.chunks();
  // The split is common/spec's, so that validation, the planner and tests agree on it.
  ASSIGN_OR_RETURN(std::vector<int> chunk_of, PipelineLayerChunks(spec));
  if (static_cast<int>(chunk_of.size()) != spec.model().layers_size()) {
    return absl::InternalError("pipeline: a chunk per layer expected");
  }
  if (spec.model().loss() != "mse") {
    return absl::InvalidArgumentError(
        absl::StrCat("model.loss: unknown loss \"", spec.model().loss(), "\""));
  }

  const int m = plan.shape.micro_batches;
  for (int i = 0; i < m; ++i) {
    plan.mb_start.push_back(i * (batch / m));
    plan.mb_size.push_back(i + 1 == m ? batch / m + batch % m : batch / m);
  }
  for (int64_t rows : std::set<int64_t>(plan.mb_size.begin(), plan.mb_size.end())) {
    std::vector<ChunkGraph>& cgs = plan.graphs[rows];
    for (int c = 0; c < chunks; ++c) {
      ASSIGN_OR_RETURN(ChunkGraph cg,
                       BuildChunk(spec, plan, chunk_of, c, rows, c > 0 ? &cgs[c - 1] : nullptr));
      cgs.push_back(std::move(cg));
    }
    for (int c = chunks - 1; c >= 0; --c) {
      RETURN_IF_ERROR(Annotate(DifferentiateChunk(c, &cgs[c], c + 1 < chunks ? &cgs[c + 1] : nullptr),
                               absl::StrCat("pipeline chunk ", c)));
      RETURN_IF_ERROR(CheckReplicatedOnPipelineDim(cgs[c].g, plan.dim, "tensor"));
      ASSIGN_OR_RETURN(cgs[c].lowered, Lower(cgs[c].g));
    }
  }
  RETURN_IF_ERROR(CheckSameAccumulation(plan));
  const std::vector<ChunkGraph>& ref = plan.graphs.begin()->second;
  for (int c = 0; c < chunks; ++c) {
    ASSIGN_OR_RETURN(ChunkStep cs, BuildChunkStep(spec, ref[c], c == chunks - 1));
    plan.steps.push_back(std::move(cs));
  }
  // Group ids over every graph's mesh dims and the pipeline dim.
  std::set<int> dims = {plan.dim};
  for (const auto& [rows, cgs] : plan.graphs) {
    for (const ChunkGraph& cg : cgs) dims.insert(cg.lowered.group_dims.begin(), cg.lowered.group_dims.end());
  }
  for (const ChunkStep& cs : plan.steps) {
    dims.insert(cs.lowered.group_dims.begin(), cs.lowered.group_dims.end());
  }
  int next = 0;
  for (int d : dims) {
    plan.groups.group_dims.push_back(d);
    plan.groups.group_base[d] = next;
    next += static_cast<int>(plan.mesh.AllGroups({d}).size());
  }
  return plan;
}

void Mark(InstructionList* list, int first, int micro_batch, int chunk) {
  for (int i = first; i < list->size(); ++i) {
    list->Mutable(i)->set_micro_batch(micro_batch);
    list->Mutable(i)->set_chunk(chunk);
  }
}

// Shares the buffers of micro-batch instances (ids >= first) between instances of the same
// tensor and local shape whose lifetimes in the step list do not overlap.
void ShareBuffers(int first, v1::Program* p) {
  const int n = p->buffers_size();
  std::vector<int> first_use(n, -1), last_use(n, -1);
  for (int i = 0; i < p->instructions_size(); ++i) {
    const Instruction& ins = p->instructions(i);
    for (const auto* ids : {&ins.inputs(), &ins.outputs()}) {
      for (int b : *ids) {
        if (first_use[b] < 0) first_use[b] = i;
        last_use[b] = i;
      }
    }
  }
  std::vector<int> order;
  for (int b = first; b < n; ++b) {
    if (first_use[b] >= 0) order.push_back(b);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return first_use[a] < first_use[b]; });
  using Key = std::tuple<std::string, std::vector<int64_t>, int>;
  std::map<Key, std::vector<int>> pools;  // physical buffers (new ids) by kind
  std::vector<int> free_after;            // by new id: last use of its current holder
  std::vector<int> remap(n, -1);
  google::protobuf::RepeatedPtrField<v1::Buffer> buffers;
  for (int b = 0; b < first; ++b) {
    remap[b] = b;
    *buffers.Add() = p->buffers(b);
    free_after.push_back(0);
  }
  for (int b : order) {
    const v1::Buffer& buf = p->buffers(b);
    Key key{buf.name(), {buf.shape().begin(), buf.shape().end()}, buf.role()};
    int chosen = -1;
    for (int cand : pools[key]) {
      if (free_after[cand] < first_use[b]) {
        chosen = cand;
        break;
      }
    }
    if (chosen < 0) {
      chosen = buffers.size();
      v1::Buffer* nb = buffers.Add();
      *nb = buf;
      nb->set_id(chosen);
      pools[key].push_back(chosen);
      free_after.push_back(-1);
    }
    free_after[chosen] = last_use[b];
    remap[b] = chosen;
  }
  *p->mutable_buffers() = std::move(buffers);
  for (Instruction& ins : *p->mutable_instructions()) {
    for (int& b : *ins.mutable_inputs()) b = remap[b];
    for (int& b : *ins.mutable_outputs()) b = remap[b];
  }
}

// Tag of the transfer of micro-batch mb across the boundary after chunk `boundary`
// (forward: the activation, backward: its gradient), unique per plan.
uint32_t TransferTag(int micro_batch, int boundary, bool backward, int chunks) {
  const int boundaries = std::max(chunks - 1, 1);
  return static_cast<uint32_t>((micro_batch * boundaries + boundary) * 2 + (backward ? 1 : 0));
}

// One rank's instructions as transfer batches (deadlock.h), and what OrderTransfers needs to
// finish its Program.
struct RankDraft {
  v1::Program program;
  std::vector<TransferBatch> batches;
  int first_shared = 0;  // buffers from here on are per micro-batch
  int loss = -1;
};

absl::Status DraftRank(const v1::JobSpec& spec, const Plan& plan, const std::string& job_id,
                       int attempt, int rank, RankDraft* draft) {
  const Mesh& mesh = plan.mesh;
  const int pp = plan.shape.stages;
  const int chunks = plan.shape.chunks();
  const int stage = static_cast<int>(mesh.Coordinate(rank)[plan.dim]);
  v1::Program& p = draft->program;
  RankEmitter e(spec, mesh, job_id, attempt, rank, &p);
  e.AddGroups(plan.groups);
  const int pipe_group = e.GroupId(plan.dim);
  std::vector<int> mine;
  for (int c = stage; c < chunks; c += pp) mine.push_back(c);

  // Step-level buffers: parameters, states, accumulators; the optimizer and loss epilogue.
  std::map<std::string, int> param_buf;
  std::vector<std::vector<int>> step_buf(chunks);
  for (int c : mine) {
    const ChunkStep& cs = plan.steps[c];
    ASSIGN_OR_RETURN(step_buf[c], e.AssignBuffers(cs.g, cs.lowered, [](int) { return -1; }));
    RETURN_IF_ERROR(e.AddInits(cs.g, step_buf[c]));
    for (int id : cs.g.params) param_buf[cs.g.tensors[id].name] = step_buf[c][id];
  }
  const bool holds_loss = stage == (chunks - 1) % pp;
  int loss_acc = -1, loss = -1;
  if (holds_loss) {
    loss_acc = step_buf[chunks - 1][plan.steps[chunks - 1].loss_acc];
    loss = step_buf[chunks - 1][plan.steps[chunks - 1].loss_replicated];
  } else {
    loss_acc = loss = e.AddBuffer("loss", {1}, v1::Buffer::LOSS);
  }
  InstructionList prologue, epilogue;
  auto fill = [&](int buffer, const std::string& what) {
    Instruction* ins = prologue.Add();
    ins->set_op(Instruction::FILL);
    ins->add_outputs(buffer);
    ins->set_scale(0.0f);
    ins->set_micro_batch(-1);
    ins->set_chunk(-1);
    ins->set_comment(absl::StrCat(what, " = 0: accumulated over micro-batches"));
  };
  for (int c : mine) {
    const ChunkStep& cs = plan.steps[c];
    for (int acc : cs.grad_acc) fill(step_buf[c][acc], cs.g.tensors[acc].name);
  }
  fill(loss_acc, "loss");
  for (int c : mine) {
    const ChunkStep& cs = plan.steps[c];
    for (size_t i = 0; i < cs.g.ops.size(); ++i) {
      const int before = epilogue.size();
      RETURN_IF_ERROR(e.EmitOp(cs.g, cs.lowered, static_cast<int>(i), step_buf[c], &epilogue));
      if (static_cast<int>(i) == cs.loss_reshard_op) {
        for (int k = before; k < epilogue.size(); ++k) {
          epilogue.Mutable(k)->set_phase(Instruction::PHASE_UNSPECIFIED);
        }
      }
    }
  }
  if (pp > 1) {
    Instruction* ins = epilogue.Add();
    ins->set_op(Instruction::ALL_REDUCE);
    ins->add_inputs(loss);
    ins->add_outputs(loss);
    ins->set_group(pipe_group);
    ins->set_reduce(v1::Placement::SUM);
    ins->set_micro_batch(-1);
    ins->set_chunk(-1);
    ins->set_comment(absl::StrCat("loss: sum over ", mesh.dim_name(plan.dim),
                                  " (held by the last stage, 0 elsewhere)"));
  }
  draft->loss = loss;
  draft->first_shared = p.buffers_size();

  // Per micro-batch instances, made on first use.
  std::map<std::pair<int, int>, std::vector<int>> mb_buf;
  auto buffers = [&](int mb, int c) -> absl::StatusOr<const std::vector<int>*> {
    auto key = std::make_pair(mb, c);
    auto it = mb_buf.find(key);
    if (it != mb_buf.end()) return &it->second;
    const ChunkGraph& cg = plan.graphs.at(plan.mb_size[mb])[c];
    ASSIGN_OR_RETURN(std::vector<int> buf, e.AssignBuffers(cg.g, cg.lowered, [&](int t) {
      const Tensor& tensor = cg.g.tensors[t];
      if (tensor.role != v1::Buffer::PARAM) return -1;
      if (std::find(cg.g.params.begin(), cg.g.params.end(), t) == cg.g.params.end()) return -1;
      return param_buf.at(tensor.name);
    }));
    return &mb_buf.emplace(key, std::move(buf)).first->second;
  };
  auto transfer = [&](Instruction::Op op, int buffer, int peer_stage, int mb, int c,
                      int boundary, bool backward, const std::string& name) {
    Instruction ins;
    ins.set_op(op);
    if (op == Instruction::SEND) {
      ins.add_inputs(buffer);
    } else {
      ins.add_outputs(buffer);
    }
    ins.set_group(pipe_group);
    ins.set_peer(peer_stage);
    ins.set_tag(TransferTag(mb, boundary, backward, chunks));
    ins.set_micro_batch(mb);
    ins.set_chunk(c);
    ins.set_phase(backward ? Instruction::BACKWARD : Instruction::FORWARD);
    ins.set_comment(absl::StrCat(name, op == Instruction::SEND ? " to stage " : " from stage ",
                                 peer_stage));
    return ins;
  };
  // The transfers before (receives) and after (sends) an item.
  auto receives = [&](const WorkItem& item, TransferBatch* batch) -> absl::Status {
    const ChunkGraph& cg = plan.graphs.at(plan.mb_size[item.micro_batch])[item.chunk];
    ASSIGN_OR_RETURN(const std::vector<int>* buf, buffers(item.micro_batch, item.chunk));
    if (item.kind == WorkItem::kForward && item.chunk > 0) {
      batch->push_back(transfer(Instruction::RECV, (*buf)[cg.in], (item.chunk - 1) % pp,
                                item.micro_batch, item.chunk, item.chunk - 1, false,
                                cg.g.tensors[cg.in].name));
    }
    if (item.kind == WorkItem::kBackward && item.chunk < chunks - 1) {
      batch->push_back(transfer(Instruction::RECV, (*buf)[cg.out_grad], (item.chunk + 1) % pp,
                                item.micro_batch, item.chunk, item.chunk, true,
                                cg.g.tensors[cg.out_grad].name));
    }
    return absl::OkStatus();
  };
  auto sends = [&](const WorkItem& item, TransferBatch* batch) -> absl::Status {
    const ChunkGraph& cg = plan.graphs.at(plan.mb_size[item.micro_batch])[item.chunk];
    ASSIGN_OR_RETURN(const std::vector<int>* buf, buffers(item.micro_batch, item.chunk));
    if (item.kind == WorkItem::kForward && item.chunk < chunks - 1) {
      batch->push_back(transfer(Instruction::SEND, (*buf)[cg.out], (item.chunk + 1) % pp,
                                item.micro_batch, item.chunk, item.chunk, false,
                                cg.g.tensors[cg.out].name));
    }
    if (item.kind == WorkItem::kBackward && item.chunk > 0) {
      const int grad = cg.g.grad_of.at(cg.in);
      batch->push_back(transfer(Instruction::SEND, (*buf)[grad], (item.chunk - 1) % pp,
                                item.micro_batch, item.chunk, item.chunk - 1, true,
                                cg.g.tensors[grad].name));
    }
    return absl::OkStatus();
  };
  auto compute = [&](const WorkItem& item, InstructionList* out) -> absl::Status {
    const int mb = item.micro_batch, c = item.chunk;
    const ChunkGraph& cg = plan.graphs.at(plan.mb_size[mb])[c];
    ASSIGN_OR_RETURN(const std::vector<int>* buf, buffers(mb, c));
    const Phase phase = item.kind == WorkItem::kForward ? Phase::kForward : Phase::kBackward;
    const int first = out->size();
    for (size_t i = 0; i < cg.g.ops.size(); ++i) {
      const Op& op = cg.g.ops[i];
      if (op.phase != phase) continue;
      const int before = out->size();
      RETURN_IF_ERROR(e.EmitOp(cg.g, cg.lowered, static_cast<int>(i), *buf, out));
      for (int k = before; k < out->size(); ++k) {
        Instruction* ins = out->Mutable(k);
        if (ins->op() == Instruction::LOAD_INPUT || ins->op() == Instruction::LOAD_LABEL) {
          // The micro-batch's rows of the global batch.
          ins->mutable_box()->set_offsets(0, ins->box().offsets(0) + plan.mb_start[mb]);
        }
      }
    }
    if (item.kind == WorkItem::kForward && c == chunks - 1) {
      Instruction* ins = out->Add();
      ins->set_op(Instruction::ACCUMULATE);
      ins->add_inputs((*buf)[cg.loss]);
      ins->add_outputs(loss_acc);
      ins->set_phase(Instruction::FORWARD);
      ins->set_comment("loss += this micro-batch's share");
    }
    if (item.kind == WorkItem::kBackward) {
      const ChunkStep& cs = plan.steps[c];
      for (size_t i = 0; i < cg.g.params.size(); ++i) {
        const int grad = cg.g.grad_of.at(cg.g.params[i]);
        Instruction* ins = out->Add();
        ins->set_op(Instruction::ACCUMULATE);
        ins->add_inputs((*buf)[grad]);
        ins->add_outputs(step_buf[c][cs.grad_acc[i]]);
        ins->set_phase(Instruction::BACKWARD);
        ins->set_comment(absl::StrCat(cg.g.tensors[grad].name, " accumulated"));
      }
    }
    Mark(out, first, mb, c);
    return absl::OkStatus();
  };

  std::vector<TransferBatch>& batches = draft->batches;
  for (const Instruction& ins : prologue) batches.push_back({ins});
  const std::vector<ScheduleStep> order = plan.schedule->Order(plan.shape, stage);
  TransferBatch between;
  if (!order.empty()) {
    for (const WorkItem& item : order[0]) RETURN_IF_ERROR(receives(item, &between));
  }
  for (size_t s = 0; s < order.size(); ++s) {
    if (!between.empty()) batches.push_back(std::move(between));
    between.clear();
    for (const WorkItem& item : order[s]) {
      InstructionList out;
      RETURN_IF_ERROR(compute(item, &out));
      for (const Instruction& ins : out) batches.push_back({ins});
    }
    for (const WorkItem& item : order[s]) RETURN_IF_ERROR(sends(item, &between));
    if (s + 1 < order.size()) {
      for (const WorkItem& item : order[s + 1]) RETURN_IF_ERROR(receives(item, &between));
    }
  }
  if (!between.empty()) batches.push_back(std::move(between));
  for (const Instruction& ins : epilogue) batches.push_back({ins});
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<v1::Program>> PlanPipeline(const v1::JobSpec& spec,
                                                      const std::string& job_id, int attempt) {
  ASSIGN_OR_RETURN(Plan plan, BuildPlan(spec));
  const int world = plan.mesh.size();
  std::vector<RankDraft> drafts(world);
  for (int r = 0; r < world; ++r) {
    RETURN_IF_ERROR(Annotate(DraftRank(spec, plan, job_id, attempt, r, &drafts[r]),
                             absl::StrCat("rank ", r)));
  }
  std::map<int, std::vector<int>> groups;
  for (int d : plan.groups.group_dims) {
    std::vector<std::vector<int>> all = plan.mesh.AllGroups({d});
    for (size_t i = 0; i < all.size(); ++i) groups[plan.groups.group_base.at(d) + i] = all[i];
  }
  std::vector<std::vector<TransferBatch>> batches(world);
  for (int r = 0; r < world; ++r) batches[r] = std::move(drafts[r].batches);
  ASSIGN_OR_RETURN(std::vector<std::vector<v1::Instruction>> ordered,
                   OrderTransfers(batches, groups));
  std::vector<v1::Program> programs;
  for (int r = 0; r < world; ++r) {
    v1::Program& p = drafts[r].program;
    for (v1::Instruction& ins : ordered[r]) *p.add_instructions() = std::move(ins);
    p.set_loss_buffer(drafts[r].loss);
    ShareBuffers(drafts[r].first_shared, &p);
    programs.push_back(std::move(p));
  }
  RETURN_IF_ERROR(CheckTransfersMatch(programs));
  RETURN_IF_ERROR(CheckDeadlockFree(programs));
  return programs;
}

}  // namespace weft::planner::pipeline
