// MeasureInstructionOverhead: the executor's own cost per instruction.

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/calibrate/calibrate.h"
#include "worker/comm/local/local_communicator.h"
#include "worker/executor/executor.h"

namespace weft::calibrate {
namespace {

// One rank, two one-element buffers, `n` SCALEs of one into the other: a step whose kernels do
// no work to speak of, so its time is the executor's per instruction.
v1::Program TinyOpsProgram(int n) {
  v1::Program p;
  p.set_job_id("calibrate");
  p.set_rank(0);
  p.set_world_size(1);
  p.mutable_mesh()->add_shape(1);
  p.mutable_mesh()->add_dim_names("dp");
  p.set_steps(1 << 30);
  p.set_device("cpu");
  for (int b = 0; b < 2; ++b) {
    v1::Buffer* buffer = p.add_buffers();
    buffer->set_id(b);
    buffer->set_name(absl::StrCat("b", b));
    buffer->add_shape(1);
    buffer->set_dtype(v1::F32);
    buffer->set_role(b == 0 ? v1::Buffer::LOSS : v1::Buffer::ACTIVATION);
  }
  for (int i = 0; i < n; ++i) {
    v1::Instruction* ins = p.add_instructions();
    ins->set_op(v1::Instruction::SCALE);
    ins->add_inputs(i % 2);
    ins->add_outputs(1 - i % 2);
    ins->set_scale(1.0f);
  }
  p.set_loss_buffer(0);
  return p;
}

}  // namespace

absl::StatusOr<double> MeasureInstructionOverhead(bool quick) {
  const int n = quick ? 2000 : 20000;
  auto world = std::make_shared<LocalWorld>(1, absl::Seconds(30));
  LocalCommunicatorFactory factory(world, 0);
  ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec, Executor::Create(TinyOpsProgram(n), &factory));
  RETURN_IF_ERROR(exec->Initialize());
  std::vector<double> per_instruction;
  for (int step = 1; step <= (quick ? 4 : 8); ++step) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(exec->RunStep(step).status());
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (step > 1) per_instruction.push_back(took.count() / n);  // the first warms up
  }
  std::sort(per_instruction.begin(), per_instruction.end());
  return per_instruction[per_instruction.size() / 2];
}

}  // namespace weft::calibrate
