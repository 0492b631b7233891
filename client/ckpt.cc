#include "client/ckpt.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/dtype.h"
#include "common/file_io.h"
#include "common/jobspec/transformer_config.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace weft::client {
namespace {

namespace fs = std::filesystem;
using checkpoint::Chunk;
using checkpoint::CheckpointReader;
using checkpoint::TensorEntry;
using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

int64_t Volume(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (int64_t x : v) n *= x;
  return n;
}

std::string Dims(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }

int64_t TensorBytes(const TensorEntry& e) { return Volume(e.global_shape) * DTypeSize(e.dtype); }

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The step folder's files (chunk files and index.json) with their sizes on disk; -1 when a
// file cannot be stat'ed.
std::map<std::string, int64_t> FileSizes(const CheckpointReader& reader) {
  std::map<std::string, int64_t> sizes;
  sizes["index.json"] = 0;
  for (const auto& [name, e] : reader.index().tensors) {
    for (const Chunk& c : e.chunks) sizes[c.file] = 0;
  }
  for (auto& [file, size] : sizes) {
    std::error_code ec;
    const uintmax_t n = fs::file_size(fs::path(reader.step_dir()) / file, ec);
    size = ec ? -1 : static_cast<int64_t>(n);
  }
  return sizes;
}

// A transformer checkpoint as Hugging Face names and lays it out: the index metadata the
// coordinator records under checkpoint::kHf*Key (common/checkpoint/index.h).
struct HfModel {
  OrderedJson config;                                    // config.json
  std::map<std::string, std::vector<int64_t>> shapes;  // parameters laid out otherwise
};

absl::StatusOr<HfModel> ReadHfModel(const CheckpointReader& reader) {
  const std::map<std::string, std::string>& meta = reader.index().metadata;
  auto arch = meta.find(checkpoint::kHfArchKey);
  auto config = meta.find(checkpoint::kHfConfigKey);
  if (arch == meta.end() || config == meta.end()) {
    auto job = meta.find("job_name");
    return absl::FailedPreconditionError(absl::StrCat(
        reader.step_dir(), " is not a checkpoint of a transformer job",
        job == meta.end() ? std::string() : absl::StrCat(" (job '", job->second, "')"),
        ": its index metadata has no 'arch' and 'hf_config'; --format hf exports the "
        "checkpoints of jobs whose model.arch is one of ", KnownArchs()));
  }
  const std::string where = absl::StrCat(reader.step_dir(), "/index.json: metadata ");
  HfModel model;
  model.config = OrderedJson::parse(config->second, nullptr, /*allow_exceptions=*/false);
  if (!model.config.is_object()) {
    return absl::DataLossError(absl::StrCat(where, "hf_config is not a JSON object"));
  }
  auto shapes = meta.find(checkpoint::kHfShapesKey);
  if (shapes == meta.end()) return model;
  const Json j = Json::parse(shapes->second, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return absl::DataLossError(absl::StrCat(where, "hf_shapes is not a JSON object"));
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::vector<int64_t> dims;
    bool ok = it->is_array();
    for (const Json& d : ok ? *it : Json::array()) {
      ok = ok && d.is_number_integer() && d.get<int64_t>() >= 0;
      if (ok) dims.push_back(d.get<int64_t>());
    }
    if (!ok) {
      return absl::DataLossError(absl::StrCat(where, "hf_shapes: '", it.key(),
                                              "' is not a list of dimensions"));
    }
    model.shapes[it.key()] = std::move(dims);
  }
  return model;
}

// config.json in the folder of out_path.
std::string ConfigPathBeside(const std::string& out_path) {
  const fs::path parent = fs::path(out_path).parent_path();
  return (parent.empty() ? fs::path("config.json") : parent / "config.json").string();
}

}  // namespace

std::string FormatCheckpointText(const CheckpointReader& reader) {
  const checkpoint::Index& index = reader.index();
  std::string out;
  int64_t tensor_bytes = 0, chunks = 0;
  for (const auto& [name, e] : index.tensors) {
    tensor_bytes += TensorBytes(e);
    chunks += static_cast<int64_t>(e.chunks.size());
  }
  absl::StrAppend(&out, "checkpoint ", reader.step_dir(), ": step ", index.step,
                  ", format version ", index.format_version, ", ", index.tensors.size(),
                  " tensor(s), ", chunks, " chunk(s)\n");
  if (!index.metadata.empty()) {
    std::vector<std::string> kv;
    for (const auto& [k, v] : index.metadata) kv.push_back(absl::StrCat(k, "=", v));
    absl::StrAppend(&out, "metadata: ", absl::StrJoin(kv, " "), "\n");
  }
  for (const auto& [name, e] : index.tensors) {
    absl::StrAppend(&out, "\n", name, "  ", SafetensorsDTypeName(e.dtype), " ",
                    Dims(e.global_shape), "  ", TensorBytes(e), " bytes, ", e.chunks.size(),
                    " chunk(s)\n");
    for (const Chunk& c : e.chunks) {
      absl::StrAppend(&out, "  offsets ", Dims(c.offsets), " lengths ", Dims(c.lengths), "  ",
                      c.file, " bytes [", c.begin, ",", c.end, ") (", c.end - c.begin, " B)",
                      absl::StrFormat(" crc32c 0x%08x", c.crc32c), "\n");
    }
  }
  absl::StrAppend(&out, "\nfiles:\n");
  int64_t file_bytes = 0;
  for (const auto& [file, size] : FileSizes(reader)) {
    absl::StrAppend(&out, "  ", file, "  ", size < 0 ? std::string("missing") : absl::StrCat(size, " bytes"), "\n");
    if (size > 0) file_bytes += size;
  }
  absl::StrAppend(&out, "total: ", tensor_bytes, " bytes of tensors, ", file_bytes,
                  " bytes on disk\n");
  return out;
}

std::string FormatCheckpointJson(const CheckpointReader& reader) {
  const checkpoint::Index& index = reader.index();
  Json j = Json::object();
  j["step_dir"] = reader.step_dir();
  j["step"] = index.step;
  j["format_version"] = index.format_version;
  j["metadata"] = Json::object();
  for (const auto& [k, v] : index.metadata) j["metadata"][k] = v;
  j["tensors"] = Json::array();
  int64_t tensor_bytes = 0;
  for (const auto& [name, e] : index.tensors) {
    Json t = {{"name", name}, {"dtype", std::string(SafetensorsDTypeName(e.dtype))},
              {"shape", e.global_shape}, {"bytes", TensorBytes(e)}, {"chunks", Json::array()}};
    tensor_bytes += TensorBytes(e);
    for (const Chunk& c : e.chunks) {
      t["chunks"].push_back({{"offsets", c.offsets}, {"lengths", c.lengths}, {"file", c.file},
                             {"byte_range", {c.begin, c.end}}, {"bytes", c.end - c.begin},
                             {"crc32c", c.crc32c}});
    }
    j["tensors"].push_back(std::move(t));
  }
  j["files"] = Json::array();
  int64_t file_bytes = 0;
  for (const auto& [file, size] : FileSizes(reader)) {
    j["files"].push_back({{"name", file}, {"bytes", size}});
    if (size > 0) file_bytes += size;
  }
  j["tensor_bytes"] = tensor_bytes;
  j["file_bytes"] = file_bytes;
  return Dump(j);
}

bool IsOptimizerState(const checkpoint::Index& index, const std::string& name) {
  const size_t slash = name.rfind('/');
  return slash != std::string::npos && slash + 1 < name.size() &&
         index.tensors.count(name.substr(0, slash)) > 0;
}

absl::StatusOr<ExportSummary> ExportCheckpoint(const CheckpointReader& reader,
                                               const std::string& out_path,
                                               const ExportOptions& options) {
  const bool hf = options.format == ExportOptions::Format::kHf;
  const std::string context = absl::StrCat("exporting ", reader.step_dir(), " to ", out_path,
                                           hf ? " (Hugging Face)" : "");
  const checkpoint::Index& index = reader.index();
  ExportSummary summary;

  std::optional<HfModel> model;
  if (hf) {
    if (fs::path(ConfigPathBeside(out_path)).filename() == fs::path(out_path).filename()) {
      return absl::InvalidArgumentError(absl::StrCat(
          context, ": config.json is written beside the model; name the model otherwise "
                   "(e.g. model.safetensors)"));
    }
    absl::StatusOr<HfModel> m = ReadHfModel(reader);
    if (!m.ok()) return Annotate(m.status(), context);
    model = *std::move(m);
  }

  // name order, as safetensors writers do
  std::vector<SafetensorsHeaderEntry> entries;
  std::vector<const TensorEntry*> sources;
  for (const auto& [name, e] : index.tensors) {
    if (IsOptimizerState(index, name) && (hf || !options.with_optimizer)) {
      ++summary.optimizer_states_left_out;
      continue;
    }
    if (name == "__metadata__") {
      return absl::InvalidArgumentError(absl::StrCat(context, ": tensor name '__metadata__' is reserved"));
    }
    std::vector<int64_t> shape = e.global_shape;
    if (model.has_value()) {
      auto it = model->shapes.find(name);
      if (it != model->shapes.end()) {
        if (Volume(it->second) != Volume(e.global_shape)) {
          return absl::DataLossError(absl::StrCat(
              context, ": index metadata hf_shapes gives '", name, "' the shape ",
              Dims(it->second), ", which does not hold its ", Dims(e.global_shape), " elements"));
        }
        shape = it->second;
      }
    }
    entries.push_back({name, std::move(shape), e.dtype});
    sources.push_back(&e);
  }
  if (model.has_value()) {
    for (const auto& [name, shape] : model->shapes) {
      if (index.tensors.count(name) == 0) {
        return absl::DataLossError(absl::StrCat(
            context, ": index metadata hf_shapes names '", name,
            "', which the checkpoint does not hold"));
      }
    }
    if (!sources.empty()) {
      // torch_dtype: the parameters' dtype when they share one (mixed dtypes: left out).
      const v1::DType first = sources.front()->dtype;
      const bool same = std::all_of(sources.begin(), sources.end(),
                                    [&](const TensorEntry* e) { return e->dtype == first; });
      const char* torch = first == v1::BF16 ? "bfloat16" : first == v1::F32 ? "float32" : nullptr;
      if (same && torch != nullptr) model->config["torch_dtype"] = torch;
    }
  }
  const SafetensorsHeader header =
      EncodeSafetensorsHeader(entries, {{"format", "pt"}, {"weft_step", absl::StrCat(index.step)}});

  absl::StatusOr<AtomicFileWriter> file = AtomicFileWriter::Create(out_path);
  if (!file.ok()) return Annotate(file.status(), context);
  RETURN_IF_ERROR(Annotate(file->Append(header.bytes), context));
  std::vector<char> buffer;  // one tensor as stored
  for (size_t i = 0; i < entries.size(); ++i) {
    const TensorEntry& e = *sources[i];
    buffer.assign(static_cast<size_t>(TensorBytes(e)), 0);
    if (buffer.empty()) continue;
    // Row-major elements are the same in the graph's shape and in the file's.
    RETURN_IF_ERROR(Annotate(
        reader.ReadBox(entries[i].name, std::vector<int64_t>(e.global_shape.size(), 0),
                       e.global_shape, e.dtype, buffer.data()),
        context));
    RETURN_IF_ERROR(Annotate(file->Append(absl::string_view(buffer.data(), buffer.size())), context));
  }
  summary.tensors = static_cast<int64_t>(entries.size());
  if (model.has_value()) {
    summary.config_path = ConfigPathBeside(out_path);
    const std::string text =
        model->config.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
    RETURN_IF_ERROR(Annotate(WriteFileAtomically(summary.config_path, {text}), context));
  }
  RETURN_IF_ERROR(Annotate(file->Commit(), context));
  return summary;
}

}  // namespace weft::client
