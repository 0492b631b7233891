// Where a job's parameters and optimizer states start from besides their initializers: a
// checkpoint to resume (train.resume), or parameters to start from (init_from: a safetensors file
// or a checkpoint), with the names optimizer states have in checkpoints.
//
// E.g.
//   RETURN_IF_ERROR(CheckStartingState(spec, plan.parameters()));  // at SubmitJob
//   ASSIGN_OR_RETURN(CheckpointLoad load, ResolveCheckpointLoad(spec));  // when an attempt starts
#ifndef WEFT_COMMON_JOBSPEC_STARTING_STATE_H_
#define WEFT_COMMON_JOBSPEC_STARTING_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"

namespace weft {

// The states an optimizer keeps per parameter, in checkpoint order: adamw {"m", "v"}, sgd none.
std::vector<std::string> OptimizerStateNames(const std::string& optimizer);
// A state's tensor name in checkpoints: CheckpointStateName("fc0.weight", "adamw", "m") is
// "fc0.weight/adamw.m". Parameters keep their own name (fc0.weight).
std::string CheckpointStateName(const std::string& param, const std::string& optimizer,
                                const std::string& state);

// A parameter of the built model, as files and checkpoints name it.
struct ParameterShape {
  std::string name;  // fc0.weight
  std::vector<int64_t> shape;
  v1::DType dtype = v1::F32;
  // The shape a Hugging Face file stores it in, when it differs (the same row-major elements:
  // gpt2's c_attn weight [C, 3C] for [C, 3, H, D]); init_from accepts either.
  std::vector<int64_t> file_shape;
};

// init_from (a safetensors file, or a checkpoint) holds every parameter with its shape and a
// dtype it can be read as; train.resume's newest checkpoint holds every parameter and optimizer
// state. For a spec that passed ValidateJobSpec; errors are INVALID_ARGUMENT naming the field,
// the file and the tensor.
absl::Status CheckStartingState(const v1::JobSpec& spec, const std::vector<ParameterShape>& params);

// Where a job's starting state comes from besides its Programs' ParamInit.
struct CheckpointLoad {
  std::string step_dir;           // a committed step folder; empty: none
  int64_t step = 0;               // resume: the checkpoint's step (training goes on at step + 1)
  bool optimizer_states = false;  // resume: optimizer states too; init_from: parameters only
};
// train.resume: the newest committed checkpoint in checkpoint.dir (leftover staging folders there
// are removed). init_from naming a folder: that step folder, or the newest committed step of that
// checkpoint dir. Otherwise none. For a spec that passed ValidateJobSpec; errors name the field.
absl::StatusOr<CheckpointLoad> ResolveCheckpointLoad(const v1::JobSpec& spec);

// The folder init_from names when it is a checkpoint (a directory): the step folder itself when
// it holds an index, else the newest committed step in it. Empty for a file. INVALID_ARGUMENT
// for a folder without a committed checkpoint.
absl::StatusOr<std::string> InitFromCheckpointFolder(const std::string& init_from);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_STARTING_STATE_H_
