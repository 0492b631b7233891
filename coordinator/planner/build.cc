#include "coordinator/planner/build.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace weft::planner {

absl::StatusOr<int> AppendLayer(const v1::Layer& layer, int index, int x, Graph* graph) {
  Graph& g = *graph;
  const std::string name = layer.name().empty() ? absl::StrCat("layer", index) : layer.name();
  const std::string where = absl::StrCat("model.layers[", index, "] (", name, ")");
  std::vector<int64_t> shape = g.tensors[x].shape;
  if (layer.type() == "linear") {
    if (layer.in_features() != shape.back() || layer.out_features() < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": in_features ", layer.in_features(), " / out_features ", layer.out_features(),
          " do not fit an input of shape [", absl::StrJoin(shape, ","), "]"));
    }
    const bool has_bias = !layer.has_bias() || layer.bias();
    int w = g.AddTensor({absl::StrCat(name, ".weight"), {layer.in_features(), layer.out_features()},
                         v1::Buffer::PARAM, name});
    g.params.push_back(w);
    shape.back() = layer.out_features();
    int xw = g.AddTensor(
        {absl::StrCat(name, has_bias ? ".xw" : ".out"), shape, v1::Buffer::ACTIVATION, name});
    g.ops.push_back(Op{"matmul", {x, w}, {xw}, name, Phase::kForward});
    x = xw;
    if (has_bias) {
      int b = g.AddTensor(
          {absl::StrCat(name, ".bias"), {layer.out_features()}, v1::Buffer::PARAM, name});
      g.params.push_back(b);
      int out = g.AddTensor({absl::StrCat(name, ".out"), shape, v1::Buffer::ACTIVATION, name});
      g.ops.push_back(Op{"bias_add", {xw, b}, {out}, name, Phase::kForward});
      x = out;
    }
    return x;
  }
  if (layer.type() == "relu" || layer.type() == "gelu") {
    int out = g.AddTensor({absl::StrCat(name, ".out"), shape, v1::Buffer::ACTIVATION, name});
    g.ops.push_back(Op{layer.type(), {x}, {out}, name, Phase::kForward});
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": unknown layer type \"", layer.type(), "\""));
}

absl::StatusOr<Graph> BuildGraph(const v1::JobSpec& spec) {
  Graph g;
  ASSIGN_OR_RETURN(g.mesh, Mesh::FromProto(spec.mesh()));
  const int64_t batch = spec.data().batch_size();
  if (batch < 1) return absl::InvalidArgumentError("data.batch_size must be >= 1");
  if (spec.data().sample_shape_size() == 0 || spec.data().label_shape_size() == 0) {
    return absl::InvalidArgumentError(
        "data.sample_shape and data.label_shape must be filled before planning");
  }
  std::vector<int64_t> in_shape = {batch}, label_shape = {batch};
  in_shape.insert(in_shape.end(), spec.data().sample_shape().begin(),
                  spec.data().sample_shape().end());
  label_shape.insert(label_shape.end(), spec.data().label_shape().begin(),
                     spec.data().label_shape().end());
  g.input = g.AddTensor({"input", in_shape, v1::Buffer::DATA, ""});
  g.label = g.AddTensor({"label", label_shape, v1::Buffer::DATA, ""});
  g.ops.push_back(Op{"load_input", {}, {g.input}, "", Phase::kForward});
  g.ops.push_back(Op{"load_label", {}, {g.label}, "", Phase::kForward});

  int x = g.input;
  for (int i = 0; i < spec.model().layers_size(); ++i) {
    ASSIGN_OR_RETURN(x, AppendLayer(spec.model().layers(i), i, x, &g));
  }
  if (spec.model().loss() != "mse") {
    return absl::InvalidArgumentError(
        absl::StrCat("model.loss: unknown loss \"", spec.model().loss(), "\""));
  }
  if (g.tensors[x].shape != label_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model output [", absl::StrJoin(g.tensors[x].shape, ","), "] does not match label [",
        absl::StrJoin(label_shape, ","), "]"));
  }
  g.loss = g.AddTensor({"loss", {1}, v1::Buffer::LOSS, ""});
  Op mse{"mse", {x, g.label}, {g.loss}, "", Phase::kForward};
  mse.scale = static_cast<float>(1.0 / static_cast<double>(g.NumElements(g.label)));
  g.ops.push_back(mse);
  return g;
}

}  // namespace weft::planner
