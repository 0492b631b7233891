#include "common/jobspec/validate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/checkpoint/checkpoint.h"
#include "common/dtype.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/elastic.h"
#include "common/jobspec/field_path.h"
#include "common/jobspec/mesh_spec.h"
#include "common/jobspec/parallelize.h"
#include "common/jobspec/placements.h"
#include "common/jobspec/starting_state.h"
#include "common/jobspec/transformer_config.h"
#include "common/lr_schedule.h"
#include "common/npy.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "common/token_file.h"
#include "common/utf8.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace weft {
namespace {

using v1::JobSpec;
using v1::Placement;

template <typename Repeated>
std::vector<int64_t> ToVector(const Repeated& r) {
  return std::vector<int64_t>(r.begin(), r.end());
}

absl::Status CheckPositiveShape(const std::vector<int64_t>& shape, const std::string& path) {
  if (shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is required for synthetic data"));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, "[", i, "]: must be > 0, got ", shape[i]));
    }
  }
  return absl::OkStatus();
}

// Validation reports INVALID_ARGUMENT whatever the reader's code was: to SubmitJob, a spec that
// names a missing or unreadable file is an invalid argument.
absl::Status AsInvalid(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(context, ": ", status.message()));
}

// Reads an npy header for validation; errors name the field.
absl::StatusOr<NpyHeader> NpyData(const std::string& file, const std::string& field) {
  if (file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": is required for source npy"));
  }
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", file, ": no such file"));
  }
  absl::StatusOr<NpyHeader> npy = NpyFile::ReadHeader(file);
  if (!npy.ok()) return AsInvalid(npy.status(), field);
  if (npy->shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", file, ": is a scalar; expected [num_samples, ...]"));
  }
  return npy;
}

// Opens data.path for source tokens (format checked, file validated); errors name the field.
absl::StatusOr<TokenFile> TokenData(const v1::Data& data, const std::string& at) {
  absl::StatusOr<TokenFormat> format = ParseTokenFormat(data.format());
  if (!format.ok()) return AsInvalid(format.status(), at + ".format");
  if (data.path().empty()) {
    return absl::InvalidArgumentError(at + ".path: is required for source tokens");
  }
  if (data.seq_len() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(at + ".seq_len: must be >= 1, got ", data.seq_len()));
  }
  absl::StatusOr<TokenFile> file = TokenFile::Open(data.path(), *format);
  if (!file.ok()) return AsInvalid(file.status(), at + ".path");
  if (file->token_count() <= data.seq_len()) {
    return absl::InvalidArgumentError(absl::StrCat(
        at + ".path: ", data.path(), " holds ", file->token_count(),
        " tokens, too few for one sample of data.seq_len ", data.seq_len(), " (needs ",
        // Unsigned: seq_len may be INT64_MAX here (the spec fuzz test's UBSan run found it).
        static_cast<uint64_t>(data.seq_len()) + 1, ": the label is the input shifted by one)"));
  }
  return file;
}

// Samples of a token file: sample i is tokens [i*T, i*T + T), its label one further.
int64_t TokenSamples(const TokenFile& file, int64_t seq_len) {
  return (file.token_count() - 1) / seq_len;
}

// Data shapes and placements: the per-sample shape's last axis feeds the first linear, the
// label matches the model's output, and the batch divides evenly across the ranks it is
// sharded on. Sets *input_width for the model check.
absl::Status ValidateData(const JobSpec& spec, const std::string& at,
                          std::vector<int64_t>* sample_shape, std::vector<int64_t>* label_shape) {
  const v1::Data& data = spec.data();
  if (data.source() != "tokens") {
    // The token fields belong to source tokens only (vocab_size is filled from the model).
    const std::string field = !data.path().empty()     ? at + ".path"
                              : !data.format().empty() ? at + ".format"
                              : data.seq_len() != 0    ? at + ".seq_len"
                                                       : std::string();
    if (!field.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": only for source tokens"));
    }
  }
  if (data.source() == "npy") {
    ASSIGN_OR_RETURN(NpyHeader in_file, NpyData(data.input(), at + ".input"));
    ASSIGN_OR_RETURN(NpyHeader lb_file, NpyData(data.label(), at + ".label"));
    const std::vector<int64_t>& in = in_file.shape;
    const std::vector<int64_t>& lb = lb_file.shape;
    // ResolveDataShapes fills the dtypes; they must agree with the files.
    for (const auto& [field, file, have, want] :
         {std::make_tuple(at + ".input_dtype", data.input(), data.input_dtype(), in_file.dtype),
          std::make_tuple(at + ".label_dtype", data.label(), data.label_dtype(), lb_file.dtype)}) {
      if (have != want && have != v1::F32) {
        return absl::InvalidArgumentError(absl::StrCat(field, ": ", DTypeName(have),
                                                       " does not match ", file, " (",
                                                       DTypeName(want), ")"));
      }
    }
    if (in[0] != lb[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          at + ".label: ", data.label(), " has ", lb[0], " samples but ", at, ".input ", data.input(),
          " has ", in[0]));
    }
    if (in[0] <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(at + ".input: ", data.input(), " has no samples"));
    }
    sample_shape->assign(in.begin() + 1, in.end());
    label_shape->assign(lb.begin() + 1, lb.end());
    if (sample_shape->empty() || label_shape->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          sample_shape->empty() ? at + ".input: " : at + ".label: ",
          sample_shape->empty() ? data.input() : data.label(),
          ": is 1-D; expected [num_samples, features...]"));
    }
    // ResolveDataShapes may have filled these; they must agree with the files.
    if (data.sample_shape_size() > 0 && ToVector(data.sample_shape()) != *sample_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          at + ".sample_shape: ", ShapeString(ToVector(data.sample_shape())), " does not match ",
          data.input(), " samples of shape ", ShapeString(*sample_shape)));
    }
    if (data.label_shape_size() > 0 && ToVector(data.label_shape()) != *label_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          at + ".label_shape: ", ShapeString(ToVector(data.label_shape())), " does not match ",
          data.label(), " samples of shape ", ShapeString(*label_shape)));
    }
    if (data.num_samples() != 0 && data.num_samples() != in[0]) {
      return absl::InvalidArgumentError(absl::StrCat(at + ".num_samples: ", data.num_samples(),
                                                     " does not match ", data.input(), " (",
                                                     in[0], " samples)"));
    }
  } else if (data.source() == "synthetic") {
    if (data.input_dtype() != v1::F32 || data.label_dtype() != v1::F32) {
      return absl::InvalidArgumentError(
          at + ".input_dtype: synthetic data is float32 (the seeded generator's values)");
    }
    if (!data.input().empty() || !data.label().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          data.input().empty() ? at + ".label" : at + ".input",
          ": only for source npy (synthetic data comes from the seeded generator)"));
    }
    *sample_shape = ToVector(data.sample_shape());
    *label_shape = ToVector(data.label_shape());
    RETURN_IF_ERROR(CheckPositiveShape(*sample_shape, at + ".sample_shape"));
    RETURN_IF_ERROR(CheckPositiveShape(*label_shape, at + ".label_shape"));
    if (data.num_samples() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          at + ".num_samples: must be > 0 for synthetic data, got ", data.num_samples()));
    }
  } else if (data.source() == "tokens") {
    if (!data.input().empty() || !data.label().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(data.input().empty() ? at + ".label" : at + ".input",
                       ": not for source tokens (inputs and labels both come from ", at, ".path)"));
    }
    ASSIGN_OR_RETURN(TokenFile file, TokenData(data, at));
    const int64_t seq_len = data.seq_len();
    *sample_shape = {seq_len};
    *label_shape = {seq_len};
    // ResolveDataShapes fills these from seq_len and the file; they must agree.
    for (const auto& [field, shape] :
         {std::make_pair(at + ".sample_shape", ToVector(data.sample_shape())),
          std::make_pair(at + ".label_shape", ToVector(data.label_shape()))}) {
      if (!shape.empty() && shape != *sample_shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ": ", ShapeString(shape), " does not match ", at, ".seq_len ", seq_len,
            " (token samples are [seq_len]; leave it out)"));
      }
    }
    const int64_t samples = TokenSamples(file, seq_len);
    if (data.num_samples() != 0 && data.num_samples() != samples) {
      return absl::InvalidArgumentError(absl::StrCat(
          at + ".num_samples: ", data.num_samples(), " does not match ", data.path(), " (",
          samples, " samples of seq_len ", seq_len, ")"));
    }
    for (const auto& [field, dtype] : {std::make_pair(at + ".input_dtype", data.input_dtype()),
                                       std::make_pair(at + ".label_dtype", data.label_dtype())}) {
      // F32 is also the unset value: a spec from gRPC need not name the dtypes.
      if (dtype != v1::I32 && dtype != v1::F32) {
        return absl::InvalidArgumentError(absl::StrCat(field, ": tokens are read as ",
                                                       DTypeName(v1::I32), ", got ",
                                                       DTypeName(dtype)));
      }
    }
    if (data.vocab_size() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(at + ".vocab_size: must be >= 0, got ", data.vocab_size()));
    }
    // ResolveDataShapes copies it from the model; a spec from gRPC may leave it 0 (unchecked).
    const int64_t model_vocab =
        spec.model().arch().empty() ? 0 : spec.model().config().vocab_size();
    if (data.vocab_size() != 0 && data.vocab_size() != model_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          at + ".vocab_size: ", data.vocab_size(), " does not match ",
          model_vocab == 0 ? "a model without a vocabulary (no model.arch)"
                           : absl::StrCat("model.config.vocab_size ", model_vocab)));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        at + ".source: unknown source \"", data.source(), "\"; known: npy, synthetic, tokens"));
  }
  if (data.batch_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(at + ".batch_size: must be > 0, got ", data.batch_size()));
  }
  // Every size the planner and the workers derive from the batch (bytes of a batch, of each
  // activation) is a product of these: bounded here, none of them overflows int64.
  for (const auto* shape : {sample_shape, label_shape}) {
    int64_t elements = data.batch_size();
    for (int64_t d : *shape) {
      if (__builtin_mul_overflow(elements, d, &elements) || elements > kMaxBatchElements) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ".batch_size: ", data.batch_size(), " samples of shape [",
            absl::StrJoin(*shape, ","), "]",
            " is more than 2^40 elements a batch; no machine holds it"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateBatchPlacements(const JobSpec& spec, const std::string& at,
                                     const std::vector<int64_t>& sample_shape,
                                     const std::vector<int64_t>& label_shape) {
  const PlacementList placements = EffectiveDataPlacements(spec);
  const int input_rank = 1 + static_cast<int>(sample_shape.size());
  const int label_rank = 1 + static_cast<int>(label_shape.size());
  RETURN_IF_ERROR(ValidatePlacements(placements, spec.mesh(), std::min(input_rank, label_rank),
                                     at + ".placements", "a data batch"));
  // Uneven batch shards are fine (the last one takes the remainder), but every shard needs a
  // sample.
  const int64_t batch = spec.data().batch_size();
  const AxisSplit split = AxisSplits(placements, spec.mesh(), input_rank)[0];
  if (split.shards > batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        at + ".batch_size: ", batch, " is smaller than the ", split.shards,
        " shards the batch is split into over mesh dim(s) ", absl::StrJoin(split.dims, ", "),
        " (", at, ".placements ", FormatPlacements(placements),
        "); every shard needs at least one sample"));
  }
  std::vector<int64_t> input_shape = {batch}, label = {batch};
  input_shape.insert(input_shape.end(), sample_shape.begin(), sample_shape.end());
  label.insert(label.end(), label_shape.begin(), label_shape.end());
  RETURN_IF_ERROR(CheckNoEmptyShards(placements, spec.mesh(), input_shape, at + ".placements",
                                     "the input batch"));
  return CheckNoEmptyShards(placements, spec.mesh(), label, at + ".placements", "the label batch");
}
// ---------------------------------------------------------------------------------------------
// Pipeline.

constexpr char kFThenB[] = "FThenB";
constexpr char kOneFOneB[] = "1F1B";
constexpr char kVpp[] = "VPP";

// Index of the pipeline dim in the mesh, or an error naming pipeline.dim.
absl::StatusOr<int> PipelineDimIndex(const JobSpec& spec) {
  const v1::Mesh& mesh = spec.mesh();
  auto it = std::find(mesh.dim_names().begin(), mesh.dim_names().end(), spec.pipeline().dim());
  if (it == mesh.dim_names().end() || mesh.dim_names_size() != mesh.shape_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.dim: the mesh has no dim named \"", spec.pipeline().dim(),
                     "\" (dims: ", MeshDimList(mesh), ")"));
  }
  return static_cast<int>(it - mesh.dim_names().begin());
}

// The pipeline block, the layers' stages and what a pipeline asks of placements and the batch.
// Runs after the model, data and batch placements have passed.
// The batch of `spec`'s data (`at`: data or eval.data) is Replicate() on the pipeline dim.
absl::Status ValidateBatchOnPipelineDim(const JobSpec& spec, const std::string& at) {
  if (spec.pipeline().dim().empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const int dim, PipelineDimIndex(spec));
  const PlacementList data = EffectiveDataPlacements(spec);
  if (data.size() > dim && data[dim].kind() != Placement::REPLICATE) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ".placements[", dim, "]: ", FormatPlacement(data[dim]), " on mesh dim ",
        spec.pipeline().dim(), ", the pipeline dim: the batch must be Replicate() there (every "
        "micro-batch passes through every stage)"));
  }
  return absl::OkStatus();
}

absl::Status ValidatePipeline(const JobSpec& spec) {
  const v1::Pipeline& pipeline = spec.pipeline();
  if (pipeline.dim().empty()) {
    if (!pipeline.schedule().empty() || pipeline.micro_batches() != 0 ||
        pipeline.virtual_stages() != 0) {
      return absl::InvalidArgumentError(
          "pipeline.dim: is required: name the mesh dim the stages are laid along");
    }
    return absl::OkStatus();
  }
  const v1::Mesh& mesh = spec.mesh();
  ASSIGN_OR_RETURN(const int dim, PipelineDimIndex(spec));
  const int64_t pp = mesh.shape(dim);
  const std::string& schedule = pipeline.schedule();
  if (schedule != kFThenB && schedule != kOneFOneB && schedule != kVpp) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.schedule: unknown schedule \"", schedule, "\"; known: ", kFThenB,
                     ", ", kOneFOneB, ", ", kVpp));
  }
  const int64_t micro_batches = pipeline.micro_batches();
  const int64_t virtual_stages = pipeline.virtual_stages();
  if (micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.micro_batches: must be >= 1, got ", micro_batches));
  }
  if (spec.train().micro_batches() != 0 && micro_batches != spec.train().micro_batches()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train.micro_batches: ", spec.train().micro_batches(), " and pipeline.micro_batches: ",
        micro_batches, " are one setting (the micro-batches of a step) with two values; give one"));
  }
  if (virtual_stages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.virtual_stages: must be >= 1, got ", virtual_stages));
  }
  if (schedule == kVpp && virtual_stages == 1) {
    return absl::InvalidArgumentError(
        "pipeline.virtual_stages: VPP needs virtual_stages > 1 (chunks per rank), got 1; "
        "with one chunk per rank use 1F1B");
  }
  if (schedule != kVpp && virtual_stages > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.virtual_stages: ", virtual_stages,
                     " chunks per rank need schedule VPP; ", schedule,
                     " runs one chunk per rank (virtual_stages 1)"));
  }
  if (schedule == kOneFOneB && micro_batches < pp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.micro_batches: 1F1B needs at least pp micro-batches (", pipeline.dim(), " ", pp,
        "), got ", micro_batches, "; use more micro-batches or FThenB"));
  }
  if (schedule == kVpp && micro_batches % pp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.micro_batches: VPP needs a multiple of pp micro-batches (", pipeline.dim(), " ",
        pp, "), got ", micro_batches));
  }
  // A stage's parameters live on its own ranks only: nothing to shard or reduce along pp (the
  // graph builder checks the parameters' placements).
  const std::map<std::string, v1::ParallelizeConfig> entries(spec.parallelize().begin(),
                                                            spec.parallelize().end());
  for (const auto& [name, entry] : entries) {
    if (entry.dim() == pipeline.dim()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallelize.", name, ".dim: ", entry.dim(),
          " is the pipeline dim (pipeline.dim); tensor parallelism needs another mesh dim"));
    }
  }
  return ValidateBatchOnPipelineDim(spec, "data");
}

// train.micro_batches (K, the same setting as pipeline.micro_batches) and the batch of `spec`'s
// data (`at`: data or eval.data): N // K samples each, the last one the remainder; each is then
// split like the batch (over dp, say) and every piece needs a sample.
absl::Status ValidateMicroBatches(const JobSpec& spec, const std::string& at,
                                  const std::vector<int64_t>& sample_shape) {
  if (spec.train().micro_batches() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train.micro_batches: must be >= 1, got ", spec.train().micro_batches()));
  }
  const int64_t micro_batches = EffectiveMicroBatches(spec);
  if (micro_batches > kMaxMicroBatches) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec.train().micro_batches() != 0 ? "train" : "pipeline", ".micro_batches: ",
        micro_batches, "; at most ", kMaxMicroBatches,
        " (planning grows faster than the micro-batches; give each more samples)"));
  }
  const int64_t batch = spec.data().batch_size();
  if (batch < micro_batches) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ".batch_size: ", batch, " cannot be split into ", micro_batches,
        " micro-batches (train.micro_batches) without leaving some empty"));
  }
  const int64_t smallest = batch / micro_batches;
  const PlacementList data = EffectiveDataPlacements(spec);
  const AxisSplit split =
      AxisSplits(data, spec.mesh(), 1 + static_cast<int>(sample_shape.size()))[0];
  if (smallest < split.shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ".batch_size: ", batch, " in ", micro_batches,
        " micro-batches (train.micro_batches) gives micro-batches of ",
        batch % micro_batches == 0 ? "" : "as few as ", smallest, " sample(s), fewer than the ",
        split.shards, " shards each is split into over mesh dim(s) ",
        absl::StrJoin(split.dims, ", "), " (", at, ".placements ", FormatPlacements(data),
        "); every shard of a micro-batch needs at least one sample"));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptimizer(const v1::Optimizer& opt) {
  if (opt.type() != "sgd" && opt.type() != "adamw") {
    return absl::InvalidArgumentError(absl::StrCat("optimizer.type: unknown optimizer \"",
                                                   opt.type(), "\"; known: sgd, adamw"));
  }
  if (!(opt.lr() > 0) || !std::isfinite(opt.lr())) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.lr: must be a finite number > 0, got ", opt.lr()));
  }
  if (!(opt.weight_decay() >= 0) || !std::isfinite(opt.weight_decay())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.weight_decay: must be a finite number >= 0, got ", opt.weight_decay()));
  }
  if (opt.type() == "adamw") {
    if (opt.betas_size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer.betas: adamw needs two values [beta1, beta2], got ", opt.betas_size()));
    }
    for (int i = 0; i < 2; ++i) {
      if (!(opt.betas(i) >= 0 && opt.betas(i) < 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("optimizer.betas[", i, "]: must be in [0, 1), got ", opt.betas(i)));
      }
    }
    if (!(opt.eps() >= 0) || !std::isfinite(opt.eps())) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.eps: must be a finite number >= 0, got ", opt.eps()));
    }
  } else if (opt.betas_size() > 0) {
    return absl::InvalidArgumentError("optimizer.betas: only adamw takes betas");
  }
  if (opt.weight_decay_params() != "all" && opt.weight_decay_params() != "matrices") {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.weight_decay_params: unknown value \"", opt.weight_decay_params(),
        "\"; known: all, matrices (parameters of two or more dims)"));
  }
  if (!(opt.clip_grad_norm() >= 0) || !std::isfinite(opt.clip_grad_norm())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer.clip_grad_norm: must be a finite number > 0, got ", opt.clip_grad_norm()));
  }
  if (opt.has_schedule()) {
    RETURN_IF_ERROR(ValidateLrSchedule(opt.schedule(), opt.lr(), "optimizer.schedule"));
  }
  return absl::OkStatus();
}

// Token files carry no vocabulary, so eval data of another tokenizer shows as ids past the
// model's: every token evaluation reads (samples 0 .. samples-1, labels included) is checked here,
// at submit, rather than failing a worker at the first evaluation hours into the job.
absl::Status EvalTokensInVocabulary(const JobSpec& spec, const v1::Data& data, int64_t samples) {
  const int64_t vocab = spec.model().arch().empty() ? 0 : spec.model().config().vocab_size();
  if (data.source() != "tokens" || vocab <= 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(TokenFile file, TokenData(data, "eval.data"));
  const int64_t count = std::min(file.token_count(), samples * data.seq_len() + 1);
  constexpr int64_t kChunk = 1 << 16;
  std::vector<int32_t> tokens(static_cast<size_t>(std::min(count, kChunk)));
  for (int64_t first = 0; first < count; first += kChunk) {
    const int64_t n = std::min(kChunk, count - first);
    RETURN_IF_ERROR(AsInvalid(file.Read(first, n, tokens.data()), "eval.data.path"));
    for (int64_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "eval.data.path: ", data.path(), " holds token ", tokens[i], " at position ",
            first + i, ", outside model.config.vocab_size ", vocab,
            ": eval data of another vocabulary (tokenizer)?"));
      }
    }
  }
  return absl::OkStatus();
}

// eval: its data as the job's data is checked (errors name eval.data), of the model's vocabulary,
// holding the `batches` batches it reads (eval batch j is samples j*B .. j*B+B-1, never wrapped),
// and split into micro-batches as the job's batch is.
absl::Status ValidateEval(const JobSpec& spec) {
  if (!spec.has_eval()) return absl::OkStatus();
  const v1::Eval& eval = spec.eval();
  if (eval.every() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval.every: must be >= 1 (absent: after the last step only), got ",
                     eval.every()));
  }
  if (eval.batches() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("eval.batches: must be >= 1, got ", eval.batches()));
  }
  const JobSpec view = EvalJobSpec(spec);
  std::vector<int64_t> sample_shape, label_shape;
  RETURN_IF_ERROR(ValidateData(view, "eval.data", &sample_shape, &label_shape));
  // Token samples of another seq_len fit a transformer (up to its positions, which building the
  // evaluation checks); other samples must be the ones the model reads.
  if (view.data().source() != "tokens" &&
      (sample_shape != ToVector(spec.data().sample_shape()) ||
       label_shape != ToVector(spec.data().label_shape()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "eval.data: samples of shape ", ShapeString(sample_shape), " and labels of shape ",
        ShapeString(label_shape), " do not fit the model, which reads ",
        ShapeString(ToVector(spec.data().sample_shape())), " and ",
        ShapeString(ToVector(spec.data().label_shape())), " (data)"));
  }
  if (view.data().source() == "tokens" && spec.data().source() != "tokens") {
    return absl::InvalidArgumentError(
        "eval.data.source: tokens, but the job's data is not: the model reads what data reads");
  }
  ASSIGN_OR_RETURN(const int64_t needed, CheckedMul(eval.batches(), view.data().batch_size(),
                                                    "eval.batches × eval.data.batch_size"));
  if (view.data().num_samples() != 0 && view.data().num_samples() < needed) {
    const std::string& file =
        view.data().source() == "tokens" ? view.data().path() : view.data().input();
    return absl::InvalidArgumentError(absl::StrCat(
        "eval.data: ", file.empty() ? std::string("the data") : file, " holds ",
        view.data().num_samples(), " samples, too few for eval.batches ", eval.batches(),
        " of eval.data.batch_size ", view.data().batch_size(), " (", needed,
        "; evaluation reads the same samples every time and never wraps around)"));
  }
  RETURN_IF_ERROR(EvalTokensInVocabulary(spec, view.data(), needed));
  RETURN_IF_ERROR(ValidateBatchPlacements(view, "eval.data", sample_shape, label_shape));
  RETURN_IF_ERROR(ValidateBatchOnPipelineDim(view, "eval.data"));
  return ValidateMicroBatches(view, "eval.data", sample_shape);
}

// A folder with committed checkpoints belongs to the job that saved them: a new job saving there
// would repoint its `latest` and its `keep` would delete that job's steps. It may only go on from
// them: train.resume, or init_from naming that folder (or a step in it).
absl::Status CheckFolderIsFree(const JobSpec& spec) {
  const std::string& dir = spec.checkpoint().dir();
  if (spec.train().resume()) return absl::OkStatus();
  absl::StatusOr<std::string> newest = checkpoint::FindLatestReadOnly(dir);
  if (!newest.ok()) return absl::OkStatus();  // no committed checkpoint: nobody's yet
  if (!spec.init_from().empty()) {
    std::error_code ec;
    const std::filesystem::path folder = std::filesystem::weakly_canonical(dir, ec);
    std::filesystem::path from = std::filesystem::weakly_canonical(spec.init_from(), ec);
    if (from == folder || from.parent_path() == folder) return absl::OkStatus();
  }
  absl::StatusOr<std::string> owner = checkpoint::CheckpointOwner(*newest);
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint.dir: ", dir, " holds the checkpoints of ",
      owner.ok() && !owner->empty() ? absl::StrCat("job ", *owner) : "another run",
      " (newest: ", std::filesystem::path(*newest).filename().string(),
      "); name a new or empty folder, or set train.resume: true to go on from them"));
}

absl::Status ValidateCheckpointSettings(const JobSpec& spec) {
  const v1::Checkpoint& ckpt = spec.checkpoint();
  if (!ckpt.dir().empty()) {
    if (!std::filesystem::path(ckpt.dir()).is_absolute()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint.dir: \"", ckpt.dir(), "\" must be absolute (weftctl resolves a relative "
          "one against the spec's folder)"));
    }
    if (ckpt.every() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint.every: must be >= 1, got ", ckpt.every()));
    }
    if (ckpt.keep() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint.keep: must be >= 1, got ", ckpt.keep()));
    }
    RETURN_IF_ERROR(AsInvalid(checkpoint::CheckFolderIsWefts(ckpt.dir()), "checkpoint.dir"));
    RETURN_IF_ERROR(CheckFolderIsFree(spec));
  } else if (ckpt.every() != 0 || ckpt.keep() != 0) {
    return absl::InvalidArgumentError("checkpoint.dir: is required with checkpoint.every or keep");
  }
  if (spec.train().resume()) {
    if (ckpt.dir().empty()) {
      return absl::InvalidArgumentError(
          "train.resume: needs checkpoint.dir, the folder whose newest checkpoint it resumes from");
    }
    absl::StatusOr<std::string> latest = checkpoint::FindLatestReadOnly(ckpt.dir());
    if (absl::IsNotFound(latest.status())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train.resume: checkpoint.dir ", ckpt.dir(), " holds no committed checkpoint"));
    }
    if (!latest.ok()) return AsInvalid(latest.status(), "train.resume");
    absl::StatusOr<checkpoint::CheckpointReader> reader = checkpoint::CheckpointReader::Open(*latest);
    if (!reader.ok()) return AsInvalid(reader.status(), "train.resume");
    if (reader->index().step >= spec.train().steps()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train.steps: ", spec.train().steps(), " leaves nothing to resume: the newest checkpoint ",
          *latest, " is at step ", reader->index().step));
    }
  }
  return absl::OkStatus();
}

// init_from names an existing safetensors file or a folder with a committed checkpoint; whether
// it holds every parameter is checked against the built model (CheckStartingState).
absl::Status ValidateInitFromExists(const JobSpec& spec) {
  if (spec.init_from().empty() || spec.train().resume()) return absl::OkStatus();
  std::error_code ec;
  if (std::filesystem::is_directory(spec.init_from(), ec)) {
    return InitFromCheckpointFolder(spec.init_from()).status();
  }
  if (!std::filesystem::exists(spec.init_from(), ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("init_from: ", spec.init_from(), ": no such file"));
  }
  return AsInvalid(SafetensorsFile::Open(spec.init_from()).status(), "init_from");
}

// sharding: a mesh dim other than the pipeline's, level 1, 2 or 3.
absl::Status ValidateSharding(const JobSpec& spec) {
  const v1::Sharding& sharding = spec.sharding();
  if (sharding.dim().empty()) {
    if (sharding.level() != 0) {
      return absl::InvalidArgumentError(
          "sharding.dim: is required: name the data-parallel mesh dim to shard along");
    }
    return absl::OkStatus();
  }
  const auto& names = spec.mesh().dim_names();
  if (std::find(names.begin(), names.end(), sharding.dim()) == names.end()) {
    return absl::InvalidArgumentError(absl::StrCat("sharding.dim: \"", sharding.dim(),
                                                   "\" is not a dim of the mesh"));
  }
  if (sharding.dim() == spec.pipeline().dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharding.dim: ", sharding.dim(),
        " is the pipeline dim (pipeline.dim); shard along a data-parallel dim"));
  }
  if (sharding.level() < 1 || sharding.level() > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharding.level: must be 1 (optimizer states), 2 (and gradients) or 3 (and parameters), "
        "got ", sharding.level()));
  }
  return absl::OkStatus();
}

// model.recompute: none, full or selective (a gRPC spec skips the YAML reader's check).
absl::Status ValidateRecompute(const v1::Model& model) {
  const std::string& mode = model.recompute();
  if (!mode.empty() && mode != "full" && mode != "selective") {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.recompute: must be full or selective, got \"", mode, "\""));
  }
  return absl::OkStatus();
}

// Every string of `message` is UTF-8 (utf8.h), or INVALID_ARGUMENT naming the first that is
// not by its field path (`model.layers[3].name`): protobuf would store such a spec and then fail
// to read the job record back.
absl::Status CheckStringsAreUtf8(const google::protobuf::Message& message, const std::string& path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    const std::string name = path.empty() ? field->name() : absl::StrCat(path, ".", field->name());
    const int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string at = field->is_repeated() ? absl::StrCat(name, "[", i, "]") : name;
      if (field->type() == google::protobuf::FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& value =
            field->is_repeated()
                ? reflection->GetRepeatedStringReference(message, field, i, &scratch)
                : reflection->GetStringReference(message, field, &scratch);
        if (!IsValidUtf8(value)) {
          return absl::InvalidArgumentError(absl::StrCat(at, ": is not valid UTF-8"));
        }
      } else if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) {
        RETURN_IF_ERROR(CheckStringsAreUtf8(
            field->is_repeated() ? reflection->GetRepeatedMessage(message, field, i)
                                 : reflection->GetMessage(message, field),
            at));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ResolveShapesOf(const JobSpec& spec, const std::string& at, v1::Data* data) {
  if (data->source() == "tokens") {
    ASSIGN_OR_RETURN(TokenFile file, TokenData(*data, at));
    data->clear_sample_shape();
    data->clear_label_shape();
    data->add_sample_shape(data->seq_len());
    data->add_label_shape(data->seq_len());
    data->set_num_samples(TokenSamples(file, data->seq_len()));
    data->set_input_dtype(v1::I32);
    data->set_label_dtype(v1::I32);
    // The worker checks each token it reads against the model's vocabulary (batch_source.h):
    // an id >= vocab_size would index past the embedding table.
    if (!spec.model().arch().empty()) data->set_vocab_size(spec.model().config().vocab_size());
    return absl::OkStatus();
  }
  if (data->source() != "npy") return absl::OkStatus();
  ASSIGN_OR_RETURN(NpyHeader in, NpyData(data->input(), at + ".input"));
  ASSIGN_OR_RETURN(NpyHeader lb, NpyData(data->label(), at + ".label"));
  data->clear_sample_shape();
  data->clear_label_shape();
  for (size_t i = 1; i < in.shape.size(); ++i) data->add_sample_shape(in.shape[i]);
  for (size_t i = 1; i < lb.shape.size(); ++i) data->add_label_shape(lb.shape[i]);
  data->set_num_samples(in.shape[0]);
  data->set_input_dtype(in.dtype);
  data->set_label_dtype(lb.dtype);
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateJobSpec(const JobSpec& submitted) {
  // A spec that came over gRPC may leave the documented defaults implicit.
  JobSpec spec = submitted;
  ApplyJobSpecDefaults(&spec);
  if (spec.name().empty()) {
    return absl::InvalidArgumentError("name: must not be empty");
  }
  if (spec.name().size() > kMaxJobNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("name: ", spec.name().size(),
                                                   " bytes; at most ", kMaxJobNameBytes));
  }
  if (const size_t bytes = submitted.ByteSizeLong(); bytes > kMaxJobSpecBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the spec is ", bytes, " bytes; at most ",
                                                   kMaxJobSpecBytes, " (1 MiB)"));
  }
  RETURN_IF_ERROR(CheckStringsAreUtf8(submitted, ""));
  // weftctl prints the name and the coordinator logs it: no byte a terminal acts on.
  if (const size_t at = FirstControlCharacter(spec.name()); at != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name: holds a control character (byte 0x",
        absl::Hex(static_cast<unsigned char>(spec.name()[at]), absl::kZeroPad2), " at byte ", at,
        "); a job name is printed by weftctl and logged by the coordinator"));
  }
  if (spec.model().layers_size() > kMaxModelLayers) {
    return absl::InvalidArgumentError(absl::StrCat("model.layers: ", spec.model().layers_size(),
                                                   " layers; at most ", kMaxModelLayers));
  }
  RETURN_IF_ERROR(ValidateMesh(spec.mesh()));
  // The YAML reader checks the model too; a spec over gRPC is checked only here.
  RETURN_IF_ERROR(ValidateTransformerModel(spec.model()));
  RETURN_IF_ERROR(ApplyParallelize(&spec));
  std::vector<int64_t> sample_shape, label_shape;
  RETURN_IF_ERROR(ValidateData(spec, "data", &sample_shape, &label_shape));
  RETURN_IF_ERROR(ValidateBatchPlacements(spec, "data", sample_shape, label_shape));
  RETURN_IF_ERROR(ValidatePipeline(spec));
  RETURN_IF_ERROR(ValidateMicroBatches(spec, "data", sample_shape));
  RETURN_IF_ERROR(ValidateSharding(spec));
  RETURN_IF_ERROR(ValidateRecompute(spec.model()));
  if (!std::isfinite(spec.bucket_mb()) || spec.bucket_mb() < 0 || spec.bucket_mb() > 1 << 20) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bucket_mb: must be a number of MiB from 0 (one all-reduce per gradient) to 1048576, "
        "got ", spec.bucket_mb()));
  }
  RETURN_IF_ERROR(ValidateOptimizer(spec.optimizer()));
  if (spec.train().steps() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("train.steps: must be > 0, got ", spec.train().steps()));
  }
  if (spec.train().max_restarts() < 0 || spec.train().max_restarts() > kMaxRestarts) {
    return absl::InvalidArgumentError(absl::StrCat("train.max_restarts: must be in 0..",
                                                   kMaxRestarts, ", got ",
                                                   spec.train().max_restarts()));
  }
  RETURN_IF_ERROR(ValidateEval(spec));
  RETURN_IF_ERROR(ValidateCheckpointSettings(spec));
  RETURN_IF_ERROR(ValidateElastic(spec));
  RETURN_IF_ERROR(ValidateInitFromExists(spec));
  if (!spec.device().empty() && spec.device() != "cpu" && spec.device() != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("device: unknown device \"", spec.device(), "\"; known: cpu, cuda"));
  }
  if (!spec.precision().empty() && spec.precision() != "f32" && spec.precision() != "bf16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "precision: unknown precision \"", spec.precision(), "\"; known: f32, bf16"));
  }
  if (!spec.storage().empty() && spec.storage() != "f32" && spec.storage() != "bf16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "storage: unknown storage \"", spec.storage(), "\"; known: f32, bf16"));
  }
  return absl::OkStatus();
}

absl::Status PrepareJobSpec(JobSpec* spec) {
  ApplyJobSpecDefaults(spec);
  RETURN_IF_ERROR(ApplyParallelize(spec));
  RETURN_IF_ERROR(ResolveDataShapes(spec));
  return ValidateJobSpec(*spec);
}

absl::Status ResolveDataShapes(JobSpec* spec) {
  RETURN_IF_ERROR(ResolveShapesOf(*spec, "data", spec->mutable_data()));
  if (!spec->has_eval()) return absl::OkStatus();
  return ResolveShapesOf(*spec, "eval.data", spec->mutable_eval()->mutable_data());
}

JobSpec EvalJobSpec(const JobSpec& spec) {
  JobSpec eval = spec;
  *eval.mutable_data() = spec.eval().data();
  eval.clear_eval();
  if (eval.model().has_config()) {
    v1::TransformerConfig* config = eval.mutable_model()->mutable_config();
    config->set_embd_pdrop(0);
    config->set_attn_pdrop(0);
    config->set_resid_pdrop(0);
    config->set_attention_dropout(0);
  }
  return eval;
}

}  // namespace weft
