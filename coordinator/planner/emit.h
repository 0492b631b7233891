// Pass 7, emit: one v1::Program per rank from the placed, lowered graph. Buffers hold LOCAL
// shapes (a reshard with no steps reuses its input's buffer); groups are those of the rank,
// with ids shared by all ranks; init covers parameters (UNIFORM with bound 1/sqrt(in_features)
// and tensor_key FNV-1a 64 of the global name, or FROM_FILE when spec.init_from is set) and
// optimizer states (ZEROS); the step list follows the graph's op order, reshards expanded into
// their collectives. Partial(sum) parameters and batches hold their value on member 0 of each
// Partial(sum) dim and zeros elsewhere (ZEROS init, SCALE 0 instead of a load); their updates
// give the step to member 0 and only the weight decay to the others. Each parameter and optimizer
// state a rank holds the value of gets a checkpoint item (checkpoint name, global shape, box,
// the ranks holding the same copy); checkpoint dir and interval come from spec.checkpoint.
//
// E.g.
//   ASSIGN_OR_RETURN(v1::Program p, EmitProgram(spec, g, lowered, "job-1", 0, /*rank=*/3));
#ifndef WEFT_COORDINATOR_PLANNER_EMIT_H_
#define WEFT_COORDINATOR_PLANNER_EMIT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/planner/graph.h"
#include "coordinator/planner/lower.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft::planner {

absl::StatusOr<v1::Program> EmitProgram(const v1::JobSpec& spec, const Graph& g,
                                        const LoweredGraph& lowered, const std::string& job_id,
                                        int attempt, int rank);

using InstructionList = google::protobuf::RepeatedPtrField<v1::Instruction>;

// The pieces EmitProgram is made of, for emitters that put several graphs into one Program
// (the pipeline pass: one graph per chunk and micro-batch size, instantiated per micro-batch).
//
// E.g.
//   RankEmitter e(spec, mesh, rank, &program);
//   e.AddGroups(lowered);
//   std::vector<int> buf = e.AssignBuffers(g, lowered, [](int) { return -1; });
//   RETURN_IF_ERROR(e.AddInits(g, buf));
//   for (size_t i = 0; i < g.ops.size(); ++i) {
//     RETURN_IF_ERROR(e.EmitOp(g, lowered, i, buf, program.mutable_instructions()));
//   }
class RankEmitter {
 public:
  // Fills the program's header fields (job, rank, mesh, data, steps, seed, ...).
  RankEmitter(const v1::JobSpec& spec, const Mesh& mesh, const std::string& job_id, int attempt,
              int rank, v1::Program* program);

  // Adds this rank's group along each mesh dim of lowered.group_dims (ids from group_base).
  void AddGroups(const LoweredGraph& lowered);
  // This rank's group id along mesh dim d; -1 if AddGroups did not add one.
  int GroupId(int mesh_dim) const;
  int AddBuffer(const std::string& name, const std::vector<int64_t>& shape,
                v1::Buffer::Role role);
  // A buffer per tensor of g, in tensor order: `existing(t)` (>= 0) when the tensor already has
  // one, the input's buffer for a reshard with no steps on this rank's mesh, else a new buffer
  // with the tensor's local shape. Tensors without a placement are an error.
  absl::StatusOr<std::vector<int>> AssignBuffers(const Graph& g, const LoweredGraph& lowered,
                                                 const std::function<int(int)>& existing);
  // Init of g's parameters (those in g.params) and optimizer states, with buffers buf, and their
  // checkpoint items where this rank holds the value (writers are chosen later, over all ranks:
  // AssignCheckpointWriters).
  absl::Status AddInits(const Graph& g, const std::vector<int>& buf);
  // Appends the instructions of g.ops[op_index] to `out`; intermediate reshard buffers are
  // added to the program. Instructions get their phase from the op; micro_batch and chunk -1.
  absl::Status EmitOp(const Graph& g, const LoweredGraph& lowered, int op_index,
                      const std::vector<int>& buf, InstructionList* out);

 private:
  absl::Status AddCheckpointItem(const Tensor& tensor, int buffer, const v1::TensorBox& box);

  const v1::JobSpec& spec_;
  const Mesh& mesh_;
  const int rank_;
  v1::Program* const program_;   // not owned
  std::map<int, int> group_id_;  // mesh dim -> this rank's group id
};

}  // namespace weft::planner

#endif  // WEFT_COORDINATOR_PLANNER_EMIT_H_
