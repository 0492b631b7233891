// Executor: an interpreter over a Program's instructions. It owns the rank's buffers, runs the
// init list once (the buffers a Program.load_checkpoint covers are read from it instead) and the
// instruction list once per step, and knows nothing of parallelism beyond the collectives and
// point-to-point transfers the instructions name. With Program.trace it also
// records the step's timeline (TakeSpans). On CPU kernels, unless Program.blocking_collectives,
// a collective runs on its communicator's thread while the instructions after it that do not
// touch its memory go on (async_collectives.h); every one has finished when RunStep returns.
//
// Memory: every buffer lives in one arena allocated at Initialize (Program.arena_bytes, buffers
// at their Buffer.offset; back to back when arena_bytes is 0), plus, only when some collective
// packs along an inner axis without a planned scratch buffer (Instruction.scratch), averages bf16
// in a reduce-scatter, or a compute op widens bf16 operands to float32 copies without a planned
// scratch buffer, one block of the executor's own scratch. Nothing else is allocated
// through the kernels, so a step's peak (last_step_peak_bytes) is those two blocks plus the
// backend's own scratch (Kernels MemoryStats).
//
// Evaluation (Program.eval) runs its own instruction list over the same arena, between steps, on
// the executor's thread with every collective where it stands.
//
// The implementation, one concern a file: executor.cc (Create, Initialize, RunStep), buffers.h
// (the arena and its checks), step.h (decoded instructions), op_registry.h (the handler of each
// op: its element types, decode and run; the handlers in ops/, a file per family), init_io.h
// (ParamInit and checkpoints), trace.h (the timeline), async_collectives.h (collectives on their
// communicators' threads).
//
// E.g.
//   ASSIGN_OR_RETURN(auto exec, Executor::Create(program, &comm_factory));
//   RETURN_IF_ERROR(exec->Initialize());
//   for (int64_t s = program.start_step() + 1; s <= program.steps(); ++s) {
//     ASSIGN_OR_RETURN(float loss, exec->RunStep(s));
//     std::optional<double> norm = exec->last_step_grad_norm();
//     if (EvaluatesAfter(program, s)) ASSIGN_OR_RETURN(double eval_loss, exec->RunEval());
//     int64_t peak = exec->last_step_peak_bytes();                  // for the StepReport
//     ASSIGN_OR_RETURN(auto chunks, exec->WriteCheckpointShard(s));  // when it saves step s
//     std::vector<v1::TraceSpan> spans = exec->TakeSpans();  // empty unless Program.trace
//   }
#ifndef WEFT_WORKER_EXECUTOR_EXECUTOR_H_
#define WEFT_WORKER_EXECUTOR_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
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

// Where the host's time in one RunStep went, besides compute: loading the batch (LOAD_INPUT,
// LOAD_LABEL), and communication the executor waited for (a collective, SEND or RECV run where
// it stands, or a wait for collectives started on their communicators' threads). Host time: on
// a GPU a blocking call's time includes the queued kernels it waits behind.
struct StepTimes {
  double data_seconds = 0;
  double communication_seconds = 0;
};

// Whether the step evaluates after its update: Program.eval set, and step a multiple of its
// `every` or the job's last.
bool EvaluatesAfter(const v1::Program& program, int64_t step);

class Executor {
 public:
  // Checks the program (buffer ids in range, shapes and element types consistent with each
  // instruction, the arena layout, scratch sizes, the data sources' dtypes) and opens the data
  // sources; errors name the instruction and the buffers. comm_factory must outlive
  // Initialize(); may be null for a program with no groups. The kernels are
  // NewKernels(KernelOptionsFor(program, 0)): the program's device (cpu, or cuda:0), precision
  // and TF32 setting.
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
  // The most bytes the kernels held at once during the last successful RunStep (their peak is
  // reset as it starts): see "Memory" above. 0 before the first step, and for executors that do
  // not measure.
  virtual int64_t last_step_peak_bytes() const { return 0; }
  // The last successful RunStep's StepTimes; zeros before, and for executors that do not measure.
  virtual StepTimes last_step_times() const { return {}; }
  // The last successful RunStep's learning rate (Program.lr under its lr_schedule at that step),
  // and its global gradient norm before clipping (the square root of Program.grad_norm_buffer;
  // nullopt for a program without one, and for executors that do not compute it).
  virtual double last_step_lr() const { return 0; }
  virtual std::optional<double> last_step_grad_norm() const { return std::nullopt; }
  // Runs Program.eval: its instructions once for each eval batch j (samples j*B .. j*B+B-1 of
  // its data; dropout off, no update) and returns the mean of the batches' losses, accumulated
  // in double. FAILED_PRECONDITION for a program without one.
  virtual absl::StatusOr<double> RunEval() {
    return absl::FailedPreconditionError("this executor does not evaluate");
  }
  // The timeline of the last successful RunStep when Program.trace is set, in instruction order
  // (wall clock, Unix microseconds); empty otherwise. Moves them out: a second call returns none.
  // One span per maximal run of consecutive compute instructions with the same phase,
  // micro-batch and chunk ("F mb3 c0", "B mb3 c0", "optimizer", "load mb3"), and one per SEND,
  // RECV and collective ("send fc3.out to r2", "all_reduce fc0.weight@grad"). A collective that
  // ran on its communicator's thread (async_collectives.h) has lane 1, after the executor's
  // spans; "wait" spans are where the executor waited for one.
  virtual std::vector<v1::TraceSpan> TakeSpans() { return {}; }
  // Read access to a buffer by global name, for tests: its elements converted to float32 from
  // the buffer's dtype (bf16 exactly, integers rounded to nearest). In a planned arena a buffer
  // whose life ended before the step's end may hold what a later buffer wrote over its bytes.
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
