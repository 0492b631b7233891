#include "planner/build.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/dtype.h"
#include "common/jobspec/defaults.h"
#include "common/jobspec/field_path.h"
#include "common/jobspec/pipeline_chunks.h"
#include "common/jobspec/placements.h"
#include "common/status.h"
#include "planner/arch/transformer.h"
#include "planner/build_frame.h"

namespace weft::planner {
namespace {

constexpr char kBatchInput[] = "input";

// A value a layer can read: the batch input or a layer's output.
struct Value {
  int tensor = -1;
  // The linear layer whose out_features gave the last axis (-1: the batch input), for messages.
  int width_from = -1;
  bool read = false;
};

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

// The spec fields a tensor's shape comes from, for an overflow's message: the batch's
// ("data.batch_size × data.seq_len"), the layer's ("model.layers[0] (fc0)") or the
// architecture's ("model.config (h.3)").
std::string ShapeOrigin(const v1::JobSpec& spec, const Tensor& t) {
  if (t.layer.empty()) {
    if (spec.data().source() == "tokens") return "data.batch_size × data.seq_len";
    const bool label = absl::StartsWith(t.name, "label");
    return label ? "data.batch_size × data.label_shape" : "data.batch_size × data.sample_shape";
  }
  if (!spec.model().arch().empty()) return absl::StrCat("model.config (", t.layer, ")");
  for (int i = 0; i < spec.model().layers_size(); ++i) {
    if (spec.model().layers(i).name() == t.layer) return LayerPath(spec.model().layers(i), i);
  }
  return absl::StrCat("model layer ", t.layer);
}

// Every tensor's elements and bytes fit int64, and so do the synthetic samples' elements (the
// worker numbers them i * sample_numel + j). Validation bounds the batch, not the features a
// layer or an architecture claims: a linear of 2^40 × 2^40 would wrap. Every size the later
// passes derive is a shard of one of these (no larger) or a sum of them the memory plan checks.
absl::Status CheckTensorSizes(const v1::JobSpec& spec, const Graph& g) {
  for (const Tensor& t : g.tensors) {
    // Named only on overflow: a transformer has thousands of tensors.
    auto what = [&] { return absl::StrCat(ShapeOrigin(spec, t), ": tensor ", t.name); };
    ASSIGN_OR_RETURN(const int64_t elements, CheckedProduct(t.shape, what));
    RETURN_IF_ERROR(CheckedMul(elements, DTypeSize(t.dtype), [&] {
                      return absl::StrCat(what(), " ", ShapeString(t.shape), " elements × ",
                                          DTypeName(t.dtype), " bytes");
                    }).status());
  }
  const v1::Data& data = spec.data();
  if (data.source() == "synthetic") {
    for (const auto* shape : {&data.sample_shape(), &data.label_shape()}) {
      std::vector<int64_t> samples = {data.num_samples()};
      samples.insert(samples.end(), shape->begin(), shape->end());
      RETURN_IF_ERROR(CheckedProduct(samples, shape == &data.sample_shape()
                                                  ? "data.num_samples × data.sample_shape"
                                                  : "data.num_samples × data.label_shape")
                          .status());
    }
  }
  return absl::OkStatus();
}

// Layer i as its errors name it.
class LayerBuilder {
 public:
  LayerBuilder(const v1::JobSpec& spec, Graph* g) : spec_(spec), model_(spec.model()), g_(*g) {}

  // The mesh, the batch's placements, the optimizer and the pipeline: what the layers need.
  absl::Status Prepare() {
    RETURN_IF_ERROR(PrepareGraph(spec_, &g_, &batch_placements_));
    if (!spec_.pipeline().dim().empty()) return absl::OkStatus();
    for (int i = 0; i < model_.layers_size(); ++i) {
      if (model_.layers(i).has_stage()) {
        return Invalid(absl::StrCat(
            LayerPath(model_.layers(i), i),
            ".stage: stages need a pipeline block (pipeline: {dim: ..., schedule: ...})"));
      }
    }
    return absl::OkStatus();
  }


  absl::Status Build() {
    const int n = model_.layers_size();
    if (n == 0) return Invalid("model.layers: the model needs at least one layer");
    RETURN_IF_ERROR(AddBatch());
    for (int i = 0; i < n; ++i) RETURN_IF_ERROR(AddLayer(i));
    if (g_.params.empty()) {
      return Invalid("model.layers: the model has no linear layer, so nothing to train");
    }
    for (int i = 0; i + 1 < n; ++i) {
      if (!outputs_.at(model_.layers(i).name()).read) {
        return Invalid(absl::StrCat(LayerPath(model_.layers(i), i),
                                    ": its output is read by no later layer and it is not the "
                                    "last layer (the model's output)"));
      }
    }
    // Before the loss, whose scale counts the label's elements.
    RETURN_IF_ERROR(CheckTensorSizes(spec_, g_));
    RETURN_IF_ERROR(AddLoss(outputs_.at(model_.layers(n - 1).name())));
    return AssignChunks();
  }

 private:
  // input and label, loaded in the data's dtype, cast to float32 for the model.
  absl::Status AddBatch() {
    const v1::Data& data = spec_.data();
    Shape in = {data.batch_size()}, label = {data.batch_size()};
    in.insert(in.end(), data.sample_shape().begin(), data.sample_shape().end());
    label.insert(label.end(), data.label_shape().begin(), data.label_shape().end());
    if (in.size() < 2 || label.size() < 2) {
      return absl::InternalError("data.sample_shape and data.label_shape must be filled first");
    }
    ASSIGN_OR_RETURN(g_.input, AddBatchTensor("input", in, data.input_dtype(), "load_input"));
    ASSIGN_OR_RETURN(g_.label, AddBatchTensor("label", label, data.label_dtype(), "load_label"));
    batch_ = Value{g_.input, -1, false};
    return absl::OkStatus();
  }

  absl::StatusOr<int> AddBatchTensor(const std::string& name, const Shape& shape, v1::DType dtype,
                                     const std::string& load) {
    ASSIGN_OR_RETURN(const int loaded,
                     AddLoadedBatch(&g_, name, shape, dtype, batch_placements_, load));
    if (dtype == v1::F32) return loaded;
    // The model computes in float32: integer (or bf16) data is converted once it is loaded.
    Tensor t = g_.tensors[loaded];
    t.name = absl::StrCat(name, ".f32");
    t.dtype = v1::F32;
    const int cast = g_.AddTensor(t);
    RETURN_IF_ERROR(g_.AddOp(Op{"cast", {loaded}, {cast}, ""}));
    return cast;
  }

  // The values layer i reads, by its `inputs` (default: the previous layer, or the batch).
  absl::StatusOr<std::vector<Value*>> Inputs(int i, const std::string& path) {
    const v1::Layer& layer = model_.layers(i);
    std::vector<Value*> in;
    if (layer.inputs().empty()) {
      in.push_back(i == 0 ? &batch_ : &outputs_.at(model_.layers(i - 1).name()));
      return in;
    }
    for (int k = 0; k < layer.inputs_size(); ++k) {
      const std::string& name = layer.inputs(k);
      if (name == kBatchInput) {
        in.push_back(&batch_);
        continue;
      }
      auto it = outputs_.find(name);
      if (it == outputs_.end()) {
        std::vector<std::string> earlier = {kBatchInput};
        for (int j = 0; j < i; ++j) earlier.push_back(model_.layers(j).name());
        return Invalid(absl::StrCat(path, ".inputs[", k, "]: no earlier layer named \"", name,
                                    "\" (a layer reads the batch, `input`, or layers before it: ",
                                    absl::StrJoin(earlier, ", "), ")"));
      }
      in.push_back(&it->second);
    }
    return in;
  }

  absl::Status AddLayer(int i) {
    const v1::Layer& layer = model_.layers(i);
    const std::string path = LayerPath(layer, i);
    if (layer.name().empty()) return Invalid(absl::StrCat(path, ".name: must not be empty"));
    if (outputs_.count(layer.name()) > 0) {
      return Invalid(absl::StrCat(path, ".name: duplicate layer name \"", layer.name(), "\""));
    }
    const std::string& type = layer.type();
    if (type != "linear" && type != "relu" && type != "gelu" && type != "add") {
      return Invalid(absl::StrCat(path, ".type: unknown layer type \"", type,
                                  "\"; known: linear, relu, gelu, add"));
    }
    if (type != "linear") {
      if (layer.in_features() != 0 || layer.out_features() != 0) {
        return Invalid(absl::StrCat(path, ".",
                                    layer.in_features() != 0 ? "in_features" : "out_features",
                                    ": only linear layers take features (", type,
                                    type == "add" ? " keeps its inputs' shape)"
                                                  : " keeps the width)"));
      }
      if (layer.has_bias()) {
        return Invalid(absl::StrCat(path, ".bias: only linear layers have a bias"));
      }
      if (!layer.placements().empty()) {
        return Invalid(absl::StrCat(path, ".placements: ", type, " has no parameters"));
      }
    }
    ASSIGN_OR_RETURN(std::vector<Value*> in, Inputs(i, path));
    if (type == "add" && in.size() < 2) {
      return Invalid(absl::StrCat(path, ".inputs: add sums two or more layers' outputs, got ",
                                  in.size(), " (name them: inputs: [a, b])"));
    }
    if (type != "add" && in.size() != 1) {
      return Invalid(absl::StrCat(path, ".inputs: a ", type, " layer reads one input, got ",
                                  in.size()));
    }
    for (Value* v : in) v->read = true;
    Value out;
    if (type == "linear") {
      ASSIGN_OR_RETURN(out, AddLinear(i, path, *in[0]));
    } else if (type == "add") {
      ASSIGN_OR_RETURN(out, AddSum(i, path, in));
    } else {
      const Tensor& x = g_.tensors[in[0]->tensor];
      const int y = g_.AddTensor({layer.name() + ".out", x.shape, v1::F32,
                                  v1::Buffer::ACTIVATION, layer.name()});
      RETURN_IF_ERROR(g_.AddOp(Op{type, {in[0]->tensor}, {y}, layer.name()}));
      out = Value{y, in[0]->width_from, false};
    }
    outputs_.emplace(layer.name(), out);
    g_.layers.push_back(Layer{layer.name(), 0, LayerRecompute(model_, layer)});
    chunk_inputs_.push_back(LayerForChunks{path, layer.name(), param_count_,
                                           layer.has_stage() ? std::optional<int>(layer.stage())
                                                             : std::nullopt});
    param_count_ = 0;
    return absl::OkStatus();
  }

  absl::StatusOr<Value> AddLinear(int i, const std::string& path, const Value& x) {
    const v1::Layer& layer = model_.layers(i);
    const Shape shape = g_.tensors[x.tensor].shape;  // a copy: adding tensors moves them
    if (layer.in_features() <= 0) {
      return Invalid(absl::StrCat(path, ".in_features: must be > 0, got ", layer.in_features()));
    }
    if (layer.out_features() <= 0) {
      return Invalid(absl::StrCat(path, ".out_features: must be > 0, got ", layer.out_features()));
    }
    if (layer.in_features() != shape.back()) {
      if (x.width_from >= 0) {
        return Invalid(absl::StrCat(path, ".in_features: ", layer.in_features(),
                                    " does not match the previous linear's out_features ",
                                    shape.back(), " (",
                                    LayerPath(model_.layers(x.width_from), x.width_from), ")"));
      }
      return Invalid(absl::StrCat(path, ".in_features: ", layer.in_features(),
                                  " does not match the input's last dimension ", shape.back()));
    }
    for (const auto& kv : layer.placements()) {
      if (kv.first != "weight" && kv.first != "bias") {
        return Invalid(absl::StrCat(path, ".placements: unknown parameter \"", kv.first,
                                    "\"; known: weight, bias"));
      }
    }
    const bool has_bias = !layer.has_bias() || layer.bias();
    if (!has_bias && layer.placements().count("bias") > 0) {
      return Invalid(absl::StrCat(path, ".placements.bias: the layer has bias: false"));
    }
    const std::string& name = layer.name();
    const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(layer.in_features())));
    ASSIGN_OR_RETURN(int w, AddParam(layer, path, "weight",
                                     {layer.in_features(), layer.out_features()}, bound));
    Shape out_shape = shape;
    out_shape.back() = layer.out_features();
    const int xw = g_.AddTensor({absl::StrCat(name, has_bias ? ".xw" : ".out"), out_shape, v1::F32,
                                 v1::Buffer::ACTIVATION, name});
    RETURN_IF_ERROR(g_.AddOp(Op{"matmul", {x.tensor, w}, {xw}, name}));
    if (!has_bias) return Value{xw, i, false};
    ASSIGN_OR_RETURN(int b, AddParam(layer, path, "bias", {layer.out_features()}, bound));
    const int out = g_.AddTensor({name + ".out", out_shape, v1::F32, v1::Buffer::ACTIVATION, name});
    RETURN_IF_ERROR(g_.AddOp(Op{"bias_add", {xw, b}, {out}, name}));
    return Value{out, i, false};
  }

  absl::StatusOr<Value> AddSum(int i, const std::string& path, const std::vector<Value*>& in) {
    const v1::Layer& layer = model_.layers(i);
    const Tensor& first = g_.tensors[in[0]->tensor];
    std::vector<int> ids;
    for (size_t k = 0; k < in.size(); ++k) {
      const Tensor& t = g_.tensors[in[k]->tensor];
      if (t.shape != first.shape) {
        return Invalid(absl::StrCat(path, ".inputs: ", layer.inputs(0), " ",
                                    ShapeString(first.shape), " and ", layer.inputs(k), " ",
                                    ShapeString(t.shape),
                                    " differ in shape; add sums outputs of one shape"));
      }
      ids.push_back(in[k]->tensor);
    }
    const int y = g_.AddTensor({layer.name() + ".out", first.shape, v1::F32,
                                v1::Buffer::ACTIVATION, layer.name()});
    RETURN_IF_ERROR(g_.AddOp(Op{"add", ids, {y}, layer.name()}));
    return Value{y, in[0]->width_from, false};
  }

  absl::StatusOr<int> AddParam(const v1::Layer& layer, const std::string& path,
                               const std::string& kind, const Shape& shape, float bound) {
    Tensor t{absl::StrCat(layer.name(), ".", kind), shape, v1::F32, v1::Buffer::PARAM,
             layer.name()};
    auto it = layer.placements().find(kind);
    if (it == layer.placements().end()) {
      t.dist = DistAttr::Replicated(g_.mesh);
    } else {
      const std::string field = absl::StrCat(path, ".placements.", kind);
      const PlacementList& list = it->second.placements();
      // Errors name the spec's field and the parameter, as the model calls it.
      const std::string param = absl::StrCat(" (parameter ", t.name, ")");
      absl::Status valid = ValidatePlacements(list, spec_.mesh(), static_cast<int>(shape.size()),
                                              field, kind);
      if (valid.ok()) valid = CheckNoEmptyShards(list, spec_.mesh(), shape, field, kind);
      if (!valid.ok()) return Invalid(absl::StrCat(valid.message(), param));
      const int pp = g_.pipeline.dim;
      if (pp >= 0 && list[pp].kind() != v1::Placement::REPLICATE) {
        return Invalid(absl::StrCat(
            field, "[", pp, "]: ", FormatPlacement(list[pp]), " on mesh dim ",
            spec_.pipeline().dim(), ", the pipeline dim: a parameter lives on its stage's ranks "
            "only, so it must be Replicate() there", param, "; a pipeline stage holds whole "
            "tensors, so the placement on the pipeline dim ", spec_.pipeline().dim(),
            " must be Replicate()"));
      }
      std::vector<Placement> placements;
      for (const v1::Placement& p : list) {
        ASSIGN_OR_RETURN(Placement placement, Placement::FromProto(p));
        placements.push_back(placement);
      }
      ASSIGN_OR_RETURN(t.dist, DistAttr::Create(g_.mesh, placements, shape.size()));
    }
    const int id = g_.AddTensor(std::move(t));
    g_.params.push_back(Parameter{id, bound});
    // Saturating: ChunkLayers caps what it sums, whatever features a spec claims.
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    int64_t n = 1;
    for (int64_t d : shape) n = d > kMax / n ? kMax : n * d;
    param_count_ = n > kMax - param_count_ ? kMax : param_count_ + n;
    return id;
  }

  absl::Status AddLoss(const Value& output) {
    const v1::Model& model = spec_.model();
    if (!model.loss().empty() && model.loss() != "mse") {
      return Invalid(absl::StrCat("model.loss: unknown loss \"", model.loss(), "\"; known: mse"));
    }
    const Tensor& label = g_.tensors[g_.label];
    const Tensor& out = g_.tensors[output.tensor];
    if (out.shape != label.shape) {
      const v1::Data& data = spec_.data();
      const Shape sample(data.sample_shape().begin(), data.sample_shape().end());
      const Shape label_sample(label.shape.begin() + 1, label.shape.end());
      const Shape expected(out.shape.begin() + 1, out.shape.end());
      return Invalid(absl::StrCat(
          data.source() == "npy" ? "data.label" : "data.label_shape", ": samples of shape ",
          ShapeString(label_sample), " do not match the model's output ", ShapeString(expected),
          " (the last layer gives ", out.shape.back(), " features for inputs of shape ",
          ShapeString(sample), ")"));
    }
    g_.loss = g_.AddTensor({"loss", {1}, v1::F32, v1::Buffer::LOSS, ""});
    Op mse{"mse", {output.tensor, g_.label}, {g_.loss}, ""};
    mse.attrs.Set("scale", 1.0 / static_cast<double>(g_.NumElements(g_.label)));
    return g_.AddOp(std::move(mse));
  }

  absl::Status AssignChunks() {
    if (g_.pipeline.dim < 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::vector<int> chunks,
                     ChunkLayers(spec_.pipeline(), g_.mesh.dim_size(g_.pipeline.dim), chunk_inputs_));
    for (size_t i = 0; i < chunks.size(); ++i) g_.layers[i].chunk = chunks[i];
    return absl::OkStatus();
  }

  const v1::JobSpec& spec_;
  const v1::Model& model_;
  Graph& g_;
  std::vector<Placement> batch_placements_;
  Value batch_;
  std::map<std::string, Value> outputs_;  // by layer name
  std::vector<LayerForChunks> chunk_inputs_;
  int64_t param_count_ = 0;  // of the layer being added
};

}  // namespace

absl::StatusOr<Graph> BuildGraph(const v1::JobSpec& spec) {
  if (!spec.model().arch().empty()) {
    ASSIGN_OR_RETURN(Graph g, BuildTransformerGraph(spec));
    RETURN_IF_ERROR(CheckTensorSizes(spec, g));
    return g;
  }
  Graph g;
  LayerBuilder builder(spec, &g);
  RETURN_IF_ERROR(builder.Prepare());
  RETURN_IF_ERROR(builder.Build());
  return g;
}

}  // namespace weft::planner
