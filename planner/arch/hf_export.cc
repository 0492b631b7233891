#include "planner/arch/hf_export.h"

#include "planner/arch/arch.h"
#include "planner/arch/transformer.h"
#include "planner/graph.h"
#include "common/status.h"
#include "nlohmann/json.hpp"

namespace weft::planner {
namespace {

// Key order as Hugging Face writes config.json: easier to compare by eye.
using Json = nlohmann::ordered_json;

std::string Dump(const Json& j, int indent) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<HfExportMetadata> HfExportMetadataOf(const v1::JobSpec& spec) {
  if (spec.model().arch().empty()) return HfExportMetadata{};
  ASSIGN_OR_RETURN(const ArchDef* arch, FindArch(spec.model().arch()));
  ASSIGN_OR_RETURN(Graph g, BuildTransformerGraph(spec));
  Json shapes = Json::object();
  for (const Parameter& p : g.params) {
    if (!p.file_shape.empty()) shapes[g.tensors[p.tensor].name] = p.file_shape;
  }
  const Json config = arch->hf_config(spec.model().config());
  return HfExportMetadata{{kHfArchKey, std::string(arch->name)},
                          {kHfConfigKey, Dump(config, -1)},
                          {kHfShapesKey, Dump(shapes, -1)}};
}

}  // namespace weft::planner
