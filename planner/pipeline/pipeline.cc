#include "planner/pipeline/pipeline.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "planner/op_table.h"
#include "planner/pipeline/deadlock.h"
#include "planner/pipeline/schedule.h"

namespace weft::planner::pipeline {
namespace {

using v1::Instruction;

// A cross-stage edge: tensor `tensor`, made in chunk `from`, read in chunk `to`.
struct Edge {
  int tensor = -1;
  int from = 0;
  int to = 0;
  bool backward = false;       // made by a backward op: travels with the backward items
  bool read_in_forward = false;  // read by a forward op of `to` (else only by backward ones)
};

class Planner {
 public:
  explicit Planner(const Graph& g) : g_(g) {}

  absl::StatusOr<PipelinePlan> Run() {
    RETURN_IF_ERROR(Shape());
    RETURN_IF_ERROR(AssignChunksAndLevels());
    RETURN_IF_ERROR(FindEdges());
    return Order();
  }

 private:
  int StageOf(int chunk) const { return chunk % plan_.stages; }

  absl::Status Shape() {
    const PipelineConfig& config = g_.pipeline;
    plan_.stages = config.dim >= 0 ? static_cast<int>(g_.mesh.dim_size(config.dim)) : 1;
    plan_.chunks = plan_.stages * std::max(1, config.virtual_stages);
    shape_.stages = plan_.stages;
    shape_.micro_batches = g_.micro_batches();
    shape_.virtual_stages = std::max(1, config.virtual_stages);
    // Without stages, micro-batches are gradient accumulation: each one's backward follows its
    // forward (1F1B on one stage), so activations fall with their count.
    ASSIGN_OR_RETURN(schedule_,
                     ScheduleByName(config.dim >= 0 ? config.schedule : std::string("1F1B")));
    return schedule_->Check(shape_);
  }

  absl::Status AssignChunksAndLevels() {
    const int n = static_cast<int>(g_.ops.size());
    plan_.op_chunk.assign(n, 0);
    plan_.per_step.assign(n, false);
    plan_.accumulates.assign(n, false);
    plan_.producer.assign(g_.tensors.size(), -1);
    // The batch input's chain (its load and cast) is in chunk 0; the other ops without a layer
    // (the label, the loss and its gradient) are in the last.
    std::set<int> input_chain = {g_.input};
    for (int i = 0; i < n; ++i) {
      const Op& op = g_.ops[i];
      for (int out : op.outputs) plan_.producer[out] = i;
      int chunk;
      if (!op.layer.empty()) {
        chunk = g_.ChunkOf(op.layer);
        if (chunk < 0) {
          return absl::InternalError(absl::StrCat(OpLabel(op), ": its layer has no chunk"));
        }
      } else {
        bool input = !op.outputs.empty() && input_chain.count(op.outputs[0]) > 0;
        for (int in : op.inputs) input = input || input_chain.count(in) > 0;
        if (input && op.type != "reshard") {
          for (int out : op.outputs) input_chain.insert(out);
        }
        chunk = input ? 0 : plan_.chunks - 1;
      }
      plan_.op_chunk[i] = chunk;
      if (op.type == "reshard" && g_.micro_batches() > 1) {
        const Placement& from = g_.tensors[op.inputs[0]].micro;
        const Placement& to = g_.tensors[op.outputs[0]].micro;
        if (from != to) {
          if (!(from.is_partial() && to.is_replicate())) {
            return absl::InternalError(absl::StrCat(OpLabel(op), ": reshard over micro-batches ",
                                                    from.ToString(), " -> ", to.ToString()));
          }
          plan_.accumulates[i] = true;
        }
      }
      plan_.per_step[i] = op.phase == Phase::kOptimizer || plan_.accumulates[i];
      if (!plan_.per_step[i]) work_[{chunk, op.phase}].ops.push_back(i);
    }
    // A per-step op reads micro-batch pieces only to sum them (with micro-batches); a per-micro-
    // batch op never reads what a per-step op made.
    for (int i = 0; i < n; ++i) {
      const Op& op = g_.ops[i];
      for (int in : op.inputs) {
        const int p = plan_.producer[in];
        if (p < 0) continue;
        if (!plan_.per_step[i] && plan_.per_step[p]) {
          return absl::InvalidArgumentError(absl::StrCat(
              OpLabel(op), " reads ", g_.tensors[in].name, ", made once per step by ",
              OpLabel(g_.ops[p]), ", in every micro-batch"));
        }
        if (plan_.per_step[i] && !plan_.per_step[p] && g_.micro_batches() > 1 &&
            !plan_.accumulates[i]) {
          return absl::InvalidArgumentError(absl::StrCat(
              OpLabel(op), " runs once per step but reads ", g_.tensors[in].name,
              ", which every micro-batch makes anew"));
        }
        if (StageOf(plan_.op_chunk[p]) != StageOf(plan_.op_chunk[i]) && plan_.per_step[i]) {
          return absl::InvalidArgumentError(absl::StrCat(
              OpLabel(op), " in pipeline chunk ", plan_.op_chunk[i], " reads ",
              g_.tensors[in].name, " of chunk ", plan_.op_chunk[p], " on another stage"));
        }
      }
      if (plan_.accumulates[i]) {
        const int p = plan_.producer[op.inputs[0]];
        work_[{plan_.op_chunk[p], g_.ops[p].phase}].accumulates.push_back(i);
      }
    }
    return absl::OkStatus();
  }

  absl::Status FindEdges() {
    std::map<std::pair<int, int>, int> index;  // (tensor, reading chunk) -> edge
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      if (plan_.per_step[i]) continue;
      const Op& op = g_.ops[i];
      const int to = plan_.op_chunk[i];
      for (int in : op.inputs) {
        const int p = plan_.producer[in];
        if (p < 0) {
          if (g_.IsParam(in) && StageOf(g_.ChunkOf(g_.tensors[in].layer)) != StageOf(to)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "parameter ", g_.tensors[in].name, " of pipeline chunk ",
                g_.ChunkOf(g_.tensors[in].layer), " is read by ", OpLabel(op), " in chunk ", to,
                ", on another stage; a parameter is used by its own stage only"));
          }
          continue;
        }
        const int from = plan_.op_chunk[p];
        if (StageOf(from) == StageOf(to)) continue;
        auto [it, added] = index.emplace(std::make_pair(in, to), static_cast<int>(edges_.size()));
        if (added) {
          edges_.push_back(Edge{in, from, to, g_.ops[p].phase == Phase::kBackward, false});
        }
        Edge& e = edges_[it->second];
        e.read_in_forward = e.read_in_forward || op.phase == Phase::kForward;
      }
    }
    return absl::OkStatus();
  }

  // The chunk of the receiving stage whose work item receives `e`: the first one after the
  // sender's chunk in the order the edge travels (forward: the next chunk on that stage,
  // backward: the previous), not the reader's own when chunks lie between. Under VPP an edge that
  // skips chunks (a tied embedding's copy from chunk 0 to the last) would otherwise leave its
  // sender blocked while the receiver waits on the sender's later work. An edge made in the
  // forward pass and read only in the backward one is received before its reader's backward.
  int RecvChunk(const Edge& e) const {
    const int stage = StageOf(e.to);
    if (e.backward) {
      for (int c = e.from - 1; c > e.to; --c) {
        if (StageOf(c) == stage) return c;
      }
    } else if (e.read_in_forward) {
      for (int c = e.from + 1; c < e.to; ++c) {
        if (StageOf(c) == stage) return c;
      }
    }
    return e.to;
  }

  uint32_t Tag(int micro_batch, int edge) const {
    return static_cast<uint32_t>(micro_batch * static_cast<int>(edges_.size()) + edge);
  }

  // One stage's work as batches of proxies for the transfer simulation: SEND/RECV on group 0
  // (member = stage), ALL_REDUCE for the loss sum, FILL for anything local. Instruction.offset
  // indexes `units`.
  struct Unit {
    std::vector<StageItem> items;
  };
  void Draft(int stage, std::vector<TransferBatch>* batches, std::vector<Unit>* units) {
    auto unit = [&](std::vector<StageItem> items, Instruction::Op proxy_op, int peer, uint32_t tag) {
      Instruction proxy;
      proxy.set_op(proxy_op);
      proxy.set_group(0);
      proxy.set_peer(peer);
      proxy.set_tag(tag);
      proxy.set_offset(static_cast<int64_t>(units->size()));
      units->push_back(Unit{std::move(items)});
      return proxy;
    };
    auto local = [&](StageItem item) {
      batches->push_back({unit({item}, Instruction::FILL, 0, 0)});
    };
    const int last = plan_.chunks - 1;
    const bool holds_loss = StageOf(last) == stage;
    // Prologue: the accumulators of this stage's chunks, and the loss where it is not made.
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      if (plan_.accumulates[i] && StageOf(plan_.op_chunk[i]) == stage) {
        local(StageItem{StageItem::kFill, static_cast<int>(i), -1, plan_.op_chunk[i]});
      }
    }
    if (plan_.stages > 1 && !holds_loss) local(StageItem{StageItem::kLossFill});

    auto transfers = [&](const WorkItem& w, bool sends, TransferBatch* batch) {
      const bool backward = w.kind == WorkItem::kBackward;
      for (size_t e = 0; e < edges_.size(); ++e) {
        const Edge& edge = edges_[e];
        StageItem item;
        item.micro_batch = w.micro_batch;
        item.chunk = w.chunk;
        item.tensor = edge.tensor;
        item.tag = Tag(w.micro_batch, static_cast<int>(e));
        if (sends) {
          if (edge.from != w.chunk || edge.backward != backward) continue;
          item.kind = StageItem::kSend;
          item.peer_stage = StageOf(edge.to);
        } else {
          // Received before the first item of the reading chunk that needs it: its forward when
          // a forward op reads it, else its backward.
          if (RecvChunk(edge) != w.chunk || backward == edge.read_in_forward) continue;
          item.kind = StageItem::kRecv;
          item.peer_stage = StageOf(edge.from);
        }
        item.phase = backward ? Phase::kBackward : Phase::kForward;
        batch->push_back(unit({item}, sends ? Instruction::SEND : Instruction::RECV,
                              item.peer_stage, item.tag));
      }
    };
    auto compute = [&](const WorkItem& w) {
      const Phase phase = w.kind == WorkItem::kForward ? Phase::kForward : Phase::kBackward;
      std::vector<StageItem> items;
      auto work = work_.find({w.chunk, phase});
      if (work != work_.end()) {
        for (int i : work->second.ops) {
          items.push_back(StageItem{StageItem::kCompute, i, w.micro_batch, w.chunk, -1, -1, 0,
                                    phase});
        }
        // Each micro-batch's term is added to its accumulator right after the item that made it.
        for (int i : work->second.accumulates) {
          items.push_back(StageItem{StageItem::kAccumulate, i, w.micro_batch, w.chunk, -1, -1, 0,
                                    phase});
        }
      }
      batches->push_back({unit(std::move(items), Instruction::FILL, 0, 0)});
    };

    const std::vector<ScheduleStep> order = schedule_->Order(shape_, stage);
    TransferBatch between;
    if (!order.empty()) {
      for (const WorkItem& w : order[0]) transfers(w, false, &between);
    }
    for (size_t s = 0; s < order.size(); ++s) {
      if (!between.empty()) batches->push_back(std::move(between));
      between.clear();
      for (const WorkItem& w : order[s]) compute(w);
      for (const WorkItem& w : order[s]) transfers(w, true, &between);
      if (s + 1 < order.size()) {
        for (const WorkItem& w : order[s + 1]) transfers(w, false, &between);
      }
    }
    if (!between.empty()) batches->push_back(std::move(between));
    // Epilogue: what runs once per step, in graph order, with the loss summed over the stages
    // before the first update (emit sums the gradient norm's stage totals in the same
    // collective, which the updates need: one collective on the pipeline group, whose members
    // run different programs, so that no reordering can pair one stage's with another's), or
    // last.
    auto loss_sum = [&] {
      batches->push_back({unit({StageItem{StageItem::kLossSum}}, Instruction::ALL_REDUCE, 0, 0)});
    };
    bool summed = plan_.stages == 1;
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      if (!plan_.per_step[i] || StageOf(plan_.op_chunk[i]) != stage) continue;
      if (!summed && IsKind(g_.ops[i], OpKind::kUpdate)) {
        loss_sum();
        summed = true;
      }
      local(StageItem{StageItem::kCompute, static_cast<int>(i), -1, plan_.op_chunk[i], -1, -1, 0,
                      g_.ops[i].phase});
    }
    if (!summed) loss_sum();
  }

  absl::StatusOr<PipelinePlan> Order() {
    std::vector<std::vector<TransferBatch>> batches(plan_.stages);
    std::vector<std::vector<Unit>> units(plan_.stages);
    for (int s = 0; s < plan_.stages; ++s) Draft(s, &batches[s], &units[s]);
    std::vector<int> members;
    for (int s = 0; s < plan_.stages; ++s) members.push_back(s);
    ASSIGN_OR_RETURN(std::vector<std::vector<Instruction>> ordered,
                     OrderTransfers(batches, {{0, members}}));
    plan_.order.resize(plan_.stages);
    for (int s = 0; s < plan_.stages; ++s) {
      for (const Instruction& proxy : ordered[s]) {
        for (StageItem& item : units[s][proxy.offset()].items) plan_.order[s].push_back(item);
      }
    }
    return std::move(plan_);
  }

  const Graph& g_;
  PipelinePlan plan_;
  PipelineShape shape_;
  std::unique_ptr<PipelineSchedule> schedule_;
  std::vector<Edge> edges_;
  // By (chunk, phase), in graph order: the per-micro-batch ops a work item of that chunk and
  // phase runs, and the accumulating reshards whose terms those ops make.
  struct ChunkWork {
    std::vector<int> ops;
    std::vector<int> accumulates;
  };
  std::map<std::pair<int, Phase>, ChunkWork> work_;
};

}  // namespace

absl::StatusOr<PipelinePlan> PlanPipeline(const Graph& g) { return Planner(g).Run(); }

}  // namespace weft::planner::pipeline
