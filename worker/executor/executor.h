// Executor: an interpreter over a Program's instructions. It owns the rank's buffers, runs the
// init list once (the buffers a Program.load_checkpoint covers are read from it instead) and the
// instruction list once per step, and knows nothing of parallelism beyond the collectives and
// point-to-point transfers the instructions name. With Program.trace it also
// records the step's timeline (TakeSpans).
//
// E.g.
//   ASSIGN_OR_RETURN(auto exec, Executor::Create(program, &comm_factory));
//   RETURN_IF_ERROR(exec->Initialize());
//   for (int64_t s = program.start_step() + 1; s <= program.steps(); ++s) {
//     ASSIGN_OR_RETURN(float loss, exec->RunStep(s));
//     ASSIGN_OR_RETURN(auto chunks, exec->WriteCheckpointShard(s));  // when it saves step s
//     std::vector<v1::TraceSpan> spans = exec->TakeSpans();  // empty unless Program.trace
//   }
#ifndef WEFT_WORKER_EXECUTOR_EXECUTOR_H_
#define WEFT_WORKER_EXECUTOR_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/checkpoint.h"
#include "weft/v1/program.pb.h"
#include "weft/v1/service.pb.h"
#include "worker/comm/communicator.h"
#include "worker/kernels/kernels.h"

namespace weft {

// The kernel options a program asks for (Program.device, precision, allow_tf32) on device
// `device_index` of its kind.
KernelOptions KernelOptionsFor(const v1::Program& program, int device_index);

class Executor {
 public:
  // Checks the program (buffer ids in range, shapes consistent with each instruction) and opens
  // the data source. comm_factory must outlive Initialize(); may be null for a program with no
  // groups.
  // The kernels are NewKernels(KernelOptionsFor(program, 0)): the program's device (cpu, or
  // cuda:0), precision and TF32 setting.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const v1::Program& program,
                                                          CommunicatorFactory* comm_factory);
  // The same on the given kernels (a worker's cuda:N; the communicators must work on the same
  // memory: NCCL with CUDA kernels, Gloo or the local one with CPU kernels).
  static absl::StatusOr<std::unique_ptr<Executor>> CreateWithKernels(
      const v1::Program& program, CommunicatorFactory* comm_factory,
      std::unique_ptr<Kernels> kernels);
  virtual ~Executor() = default;

  // Allocates buffers, creates one communicator per group, runs the init list.
  virtual absl::Status Initialize() = 0;
  // Runs one step (from 1) and returns the replicated mean loss (Program.loss_buffer).
  virtual absl::StatusOr<float> RunStep(int64_t step) = 0;
  // The timeline of the last successful RunStep when Program.trace is set, in instruction order
  // (wall clock, Unix microseconds); empty otherwise. Moves them out: a second call returns none.
  // One span per maximal run of consecutive compute instructions with the same phase,
  // micro-batch and chunk ("F mb3 c0", "B mb3 c0", "optimizer", "load mb3"), and one per SEND,
  // RECV and collective ("send fc3.out to r2", "all_reduce fc0.weight@grad").
  virtual std::vector<v1::TraceSpan> TakeSpans() { return {}; }
  // Read access to a buffer by global name, for tests and checkpoints.
  virtual absl::StatusOr<std::vector<float>> ReadBuffer(const std::string& name) const = 0;
  // Writes this rank's share of a checkpoint of the buffers as they are now (the
  // Program.checkpoint_items marked write) into checkpoint::StagingDir(checkpoint_dir, step) and
  // returns the chunks written: none, and no file, when the rank writes nothing.
  virtual absl::StatusOr<std::vector<checkpoint::IndexedChunk>> WriteCheckpointShard(
      int64_t step) {
    return absl::UnimplementedError("this executor does not write checkpoints");
  }
  // Makes RunStep return CANCELLED at the next instruction boundary. Thread-safe.
  virtual void Cancel() = 0;
};

}  // namespace weft

#endif  // WEFT_WORKER_EXECUTOR_EXECUTOR_H_
