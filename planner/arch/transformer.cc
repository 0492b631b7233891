#include "planner/arch/transformer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/jobspec/field_path.h"
#include "common/jobspec/param_pattern.h"
#include "common/jobspec/placements.h"
#include "common/philox.h"
#include "common/status.h"
#include "planner/arch/arch.h"
#include "planner/build_frame.h"

namespace weft::planner {
namespace {

absl::Status Invalid(absl::string_view message) { return absl::InvalidArgumentError(message); }

}  // namespace

TransformerBuilder::TransformerBuilder(const v1::JobSpec& spec, const ArchDef& arch, Graph* g)
    : spec_(spec), arch_(arch), g_(*g) {}

int64_t TransformerBuilder::mp_size() const {
  return mp_dim_ ? g_.mesh.dim_size(*mp_dim_) : 1;
}

absl::Status TransformerBuilder::Prepare(const std::string& max_positions_key,
                                         int64_t max_positions) {
  RETURN_IF_ERROR(PrepareGraph(spec_, &g_, &batch_placements_));
  const v1::Data& data = spec_.data();
  const std::string& arch = spec_.model().arch();
  if (data.source() != "tokens") {
    return Invalid(absl::StrCat("data.source: a ", arch, " model trains on token data (data: "
                                "{source: tokens, path: ..., seq_len: ...}), not ",
                                data.source()));
  }
  batch_ = data.batch_size();
  seq_ = data.seq_len();
  if (seq_ < 1 || data.sample_shape_size() != 1 || data.sample_shape(0) != seq_) {
    return absl::InternalError("data.seq_len and sample_shape must be filled first");
  }
  if (seq_ > max_positions) {
    return Invalid(absl::StrCat("data.seq_len: ", seq_, " is more than model.config.",
                                max_positions_key, " ", max_positions,
                                " (the positions the model has)"));
  }
  RETURN_IF_ERROR(ReadPlan());
  ASSIGN_OR_RETURN(tokens_, AddLoadedBatch(&g_, "input", {batch_, seq_}, data.input_dtype(),
                                           batch_placements_, "load_input"));
  g_.input = tokens_;
  ASSIGN_OR_RETURN(g_.label, AddLoadedBatch(&g_, "label", {batch_, seq_}, data.label_dtype(),
                                            batch_placements_, "load_label"));
  return absl::OkStatus();
}

absl::Status TransformerBuilder::ReadPlan() {
  for (const auto& [entry, config] : spec_.parallelize()) {
    const std::string field = absl::StrCat("parallelize.", entry);
    if (config.preset().empty()) {
      return Invalid(absl::StrCat(field, ".plan: a ", spec_.model().arch(),
                                  " model takes plan: megatron (layer styles are for `layers` "
                                  "models)"));
    }
    if (config.preset() != "megatron") {
      return Invalid(absl::StrCat(field, ".plan: unknown plan \"", config.preset(),
                                  "\"; known: megatron"));
    }
    if (mp_dim_) {
      return Invalid(absl::StrCat(field, ": a second megatron plan (parallelize.", mp_entry_,
                                  " is one); Megatron's tensor parallelism splits one mesh dim"));
    }
    std::optional<int> dim = g_.mesh.FindDim(config.dim());
    if (!dim) {
      return Invalid(absl::StrCat(field, ".dim: \"", config.dim(), "\" is not a dim of the mesh ",
                                  g_.mesh.ToString()));
    }
    if (*dim == g_.pipeline.dim) {
      return Invalid(absl::StrCat(field, ".dim: ", config.dim(),
                                  " is the pipeline dim; tensor parallelism needs its own"));
    }
    mp_dim_ = *dim;
    mp_entry_ = entry;
    sequence_parallel_ = config.sequence_parallel();
  }
  if (sequence_parallel_ && seq_ % mp_size() != 0) {
    return Invalid(absl::StrCat("data.seq_len: ", seq_, " tokens cannot be split evenly over ",
                                g_.mesh.dim_name(*mp_dim_), " = ", mp_size(), " (parallelize.",
                                mp_entry_, ".sequence_parallel splits the sequence)"));
  }
  if (mp_dim_ && config().vocab_size() % mp_size() != 0) {
    return Invalid(absl::StrCat("model.config.vocab_size: ", config().vocab_size(),
                                " cannot be split evenly over ", g_.mesh.dim_name(*mp_dim_), " = ",
                                mp_size(), " (parallelize.", mp_entry_,
                                ": plan megatron splits the vocabulary; pad it to a multiple)"));
  }
  for (const auto& kv : spec_.model().placements()) pattern_uses_[kv.first] = 0;
  return absl::OkStatus();
}

void TransformerBuilder::BeginLayer(const std::string& name) {
  layer_ = name;
  g_.layers.push_back(Layer{name, 0});
}

void TransformerBuilder::BeginBlock(const std::string& name) {
  BeginLayer(name);
  g_.layers.back().recompute = ModelRecompute(spec_.model());
}

absl::StatusOr<int> TransformerBuilder::Positions() {
  return AddLoadedBatch(&g_, "positions", {batch_, seq_}, v1::I32, batch_placements_, "positions",
                        layer_);
}

absl::StatusOr<DistAttr> TransformerBuilder::PlacementOf(const std::string& name,
                                                         const Shape& shape) const {
  const int rank = static_cast<int>(shape.size());
  std::vector<Placement> placements(g_.mesh.ndim(), Placement::Replicate());
  std::string megatron_field;
  if (mp_dim_) {
    placements[*mp_dim_] = MegatronPlacement(arch_.megatron, name);
    megatron_field = absl::StrCat("parallelize.", mp_entry_);
  }
  std::string matched;
  for (const auto& [pattern, list] : spec_.model().placements()) {
    if (!MatchesParamPattern(pattern, name)) continue;
    const std::string field = PatternPath(pattern);
    if (!matched.empty()) {
      return Invalid(absl::StrCat(field, ": ", name, " is also matched by ",
                                  PatternPath(matched), "; give each parameter one pattern"));
    }
    matched = pattern;
    RETURN_IF_ERROR(ValidatePlacements(list.placements(), spec_.mesh(), rank, field, name));
    for (int d = 0; d < g_.mesh.ndim(); ++d) {
      ASSIGN_OR_RETURN(Placement p, Placement::FromProto(list.placements(d)));
      if (mp_dim_ && d == *mp_dim_ && p != placements[d] && !placements[d].is_replicate()) {
        return Invalid(absl::StrCat(field, "[", d, "]: ", p.ToString(), " for ", name,
                                    " on mesh dim ", g_.mesh.dim_name(d), " differs from ",
                                    megatron_field, "'s plan megatron (",
                                    placements[d].ToString(), ")"));
      }
      if (!mp_dim_ || d != *mp_dim_ || !p.is_replicate()) placements[d] = p;
    }
    const int pp = g_.pipeline.dim;
    if (pp >= 0 && !placements[pp].is_replicate()) {
      return Invalid(absl::StrCat(field, "[", pp, "]: ", placements[pp].ToString(), " for ",
                                  name, " on mesh dim ", g_.mesh.dim_name(pp),
                                  ", the pipeline dim: a parameter lives on its stage's ranks "
                                  "only, so it must be Replicate() there"));
    }
  }
  ASSIGN_OR_RETURN(DistAttr attr, DistAttr::Create(g_.mesh, placements, rank));
  for (int d = 0; d < g_.mesh.ndim(); ++d) {
    const Placement& p = attr.placement(d);
    if (!p.is_shard() || shape[p.axis] >= g_.mesh.dim_size(d)) continue;
    const std::string by = !matched.empty() ? PatternPath(matched) : megatron_field;
    return Invalid(absl::StrCat(by, ": ", p.ToString(), " of ", name, " ", ShapeString(shape),
                                " over mesh dim ", g_.mesh.dim_name(d), " (",
                                g_.mesh.dim_size(d), " ranks) would leave a shard empty"));
  }
  return attr;
}

absl::StatusOr<int> TransformerBuilder::Param(const std::string& name, const Shape& shape,
                                              Parameter::Init init, float bound,
                                              const Shape& file_shape) {
  ASSIGN_OR_RETURN(DistAttr dist, PlacementOf(name, shape));
  for (auto& [pattern, uses] : pattern_uses_) uses += MatchesParamPattern(pattern, name) ? 1 : 0;
  Tensor t{name, shape, v1::F32, v1::Buffer::PARAM, layer_};
  t.dist = std::move(dist);
  const int id = g_.AddTensor(std::move(t));
  g_.params.push_back(Parameter{id, bound, init, file_shape});
  return id;
}

absl::StatusOr<int> TransformerBuilder::Op1(const std::string& type, std::vector<int> inputs,
                                            const std::string& name, const Shape& shape,
                                            Attrs attrs, v1::DType dtype) {
  const int out = g_.AddTensor({name, shape, dtype, v1::Buffer::ACTIVATION, layer_});
  RETURN_IF_ERROR(g_.AddOp(Op{type, std::move(inputs), {out}, layer_, Phase::kForward,
                              std::move(attrs)}));
  return out;
}

absl::StatusOr<std::vector<int>> TransformerBuilder::OpN(
    const std::string& type, std::vector<int> inputs,
    const std::vector<std::pair<std::string, Shape>>& outputs, Attrs attrs) {
  std::vector<int> outs;
  for (const auto& [name, shape] : outputs) {
    outs.push_back(g_.AddTensor({name, shape, v1::F32, v1::Buffer::ACTIVATION, layer_}));
  }
  RETURN_IF_ERROR(g_.AddOp(Op{type, std::move(inputs), outs, layer_, Phase::kForward,
                              std::move(attrs)}));
  return outs;
}

absl::StatusOr<int> TransformerBuilder::Linear(int x, int w, const std::string& name,
                                               bool transpose_b, int bias, int64_t contract) {
  const Shape xs = g_.tensors[x].shape, ws = g_.tensors[w].shape;
  Shape out(xs.begin(), xs.end() - contract);
  if (transpose_b) {
    out.insert(out.end(), ws.begin(), ws.end() - contract);
  } else {
    out.insert(out.end(), ws.begin() + contract, ws.end());
  }
  Attrs attrs{{"transpose_b", transpose_b}, {"contract", contract}};
  ASSIGN_OR_RETURN(int y, Op1("matmul", {x, w}, bias >= 0 ? name + ".xw" : name, out,
                              std::move(attrs)));
  if (bias < 0) return y;
  return Op1("bias_add", {y, bias}, name, out);
}

absl::StatusOr<int> TransformerBuilder::Dropout(int x, double p, const std::string& site) {
  if (p == 0.0) return x;
  const Shape shape = g_.tensors[x].shape;
  return Op1("dropout", {x}, site, shape,
             {{"dropout_p", p}, {"dropout_key", static_cast<int64_t>(Fnv1a64(site))}});
}

absl::StatusOr<DistAttr> TransformerBuilder::BatchAttrWithMp(const Placement& on_mp,
                                                             int tensor) const {
  std::vector<Placement> placements = batch_placements_;
  placements[*mp_dim_] = on_mp;
  return DistAttr::Create(g_.mesh, placements, static_cast<int>(g_.tensors[tensor].shape.size()));
}

absl::StatusOr<int> TransformerBuilder::Copy(int x, const std::string& name) {
  const Tensor& t = g_.tensors[x];
  return Op1("add", {x}, name, Shape(t.shape), {}, t.dtype);
}

void TransformerBuilder::ResidualStream(int tensor) {
  if (!mp_dim_) return;
  absl::StatusOr<DistAttr> target = BatchAttrWithMp(
      sequence_parallel_ ? Placement::Shard(1) : Placement::Replicate(), tensor);
  if (target.ok()) g_.tensors[tensor].target = *std::move(target);
}

void TransformerBuilder::RowOutput(int y) {
  ResidualStream(y);
  if (!sequence_parallel_ || !mp_dim_) return;
  absl::StatusOr<DistAttr> whole = BatchAttrWithMp(Placement::Replicate(), y);
  if (whole.ok()) g_.tensors[y].grad_target = *std::move(whole);
}

absl::StatusOr<int> TransformerBuilder::ColumnInput(int x) {
  if (!sequence_parallel_ || !mp_dim_) return x;
  const std::optional<DistAttr> split = g_.tensors[x].target;
  ASSIGN_OR_RETURN(const int whole, Copy(x, absl::StrCat(g_.tensors[x].name, ".gathered")));
  ASSIGN_OR_RETURN(g_.tensors[whole].target, BatchAttrWithMp(Placement::Replicate(), whole));
  g_.tensors[whole].grad_target = split;
  return whole;
}

absl::Status TransformerBuilder::CrossEntropy(int logits) {
  const int label = g_.label;
  ASSIGN_OR_RETURN(int m, Op1("row_max", {logits}, "logits.max", {batch_, seq_}));
  ASSIGN_OR_RETURN(std::vector<int> parts,
                   OpN("ce_parts", {logits, m, label},
                       {{"logits.sumexp", {batch_, seq_}}, {"logits.target", {batch_, seq_}}}));
  g_.loss = g_.AddTensor({"loss", {1}, v1::F32, v1::Buffer::LOSS, ""});
  Op loss{"ce_loss", {parts[0], m, parts[1]}, {g_.loss}, layer_};
  loss.attrs.Set("scale", 1.0 / static_cast<double>(batch_ * seq_));
  return g_.AddOp(std::move(loss));
}

absl::StatusOr<int> TransformerBuilder::TiedForHead(int param) {
  if (g_.pipeline.dim < 0 || g_.mesh.dim_size(g_.pipeline.dim) == 1) return param;
  const std::string layer = layer_;
  layer_ = "embed";
  absl::StatusOr<int> copy = Copy(param, absl::StrCat(g_.tensors[param].name, "@head"));
  layer_ = layer;
  return copy;
}

absl::Status TransformerBuilder::Finish() {
  for (const auto& [pattern, uses] : pattern_uses_) {
    if (uses > 0) continue;
    std::vector<std::string> names;
    for (const Parameter& p : g_.params) names.push_back(g_.tensors[p.tensor].name);
    if (names.size() > 8) names.resize(8);
    return Invalid(absl::StrCat(PatternPath(pattern), ": matches no parameter of ",
                                spec_.model().arch(), " (parameters: ",
                                absl::StrJoin(names, ", "), ", ...)"));
  }
  if (g_.pipeline.dim < 0) return absl::OkStatus();
  const int64_t chunks = g_.mesh.dim_size(g_.pipeline.dim) * g_.pipeline.virtual_stages;
  std::vector<Layer*> blocks;
  for (Layer& l : g_.layers) {
    if (l.name != "embed" && l.name != "head") blocks.push_back(&l);
  }
  const int64_t n = static_cast<int64_t>(blocks.size());
  if (n < chunks) {
    return Invalid(absl::StrCat("pipeline: ", n, " transformer block(s) cannot fill ", chunks,
                                " pipeline chunks (", g_.mesh.dim_size(g_.pipeline.dim),
                                " stages x ", g_.pipeline.virtual_stages,
                                " virtual stages); every chunk needs a block"));
  }
  for (int64_t i = 0; i < n; ++i) blocks[i]->chunk = static_cast<int>(i * chunks / n);
  for (Layer& l : g_.layers) {
    if (l.name == "head") l.chunk = static_cast<int>(chunks - 1);
  }
  return absl::OkStatus();
}

float UniformBound(double std) { return static_cast<float>(std * std::sqrt(3.0)); }

absl::StatusOr<Graph> BuildTransformerGraph(const v1::JobSpec& spec) {
  ASSIGN_OR_RETURN(const ArchDef* arch, FindArch(spec.model().arch()));
  Graph g;
  TransformerBuilder b(spec, *arch, &g);
  RETURN_IF_ERROR(arch->build(b));
  RETURN_IF_ERROR(b.Finish());
  return g;
}

}  // namespace weft::planner
