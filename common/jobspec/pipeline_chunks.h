// Pipeline chunking: which pipeline chunk each model layer is in. The one definition of the split,
// for validation, the planner and tests. With stages given (`stage:` on layers), they are the
// layers' stages (a layer without one takes the previous layer's, the first layer's is 0);
// without, the layers with parameters are split into pp x virtual_stages contiguous chunks with the
// smallest possible largest parameter count (ties: earlier chunks fuller), and a layer without
// parameters goes with the layer before it. Chunk c runs on position c mod pp along the
// pipeline dim (VPP's interleaved placement; with one chunk per rank, chunk c is on position c).
//
// The model itself is read by the planner's graph builder, which passes each layer's parameter
// count here.
//
// E.g.
//   ASSIGN_OR_RETURN(std::vector<int> chunk, ChunkLayers(spec.pipeline(), /*pp=*/4, layers));
#ifndef WEFT_COMMON_JOBSPEC_PIPELINE_CHUNKS_H_
#define WEFT_COMMON_JOBSPEC_PIPELINE_CHUNKS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"

namespace weft {

struct LayerForChunks {
  std::string path;          // "model.layers[3] (fc1)", for messages
  std::string name;          // "fc1"
  int64_t params = 0;        // parameter count; 0: no parameters
  std::optional<int> stage;  // the spec's stage, if it gives one
};

// The chunk of each layer, in [0, pp x virtual_stages). Errors (a stage out of range or
// decreasing, a chunk without a layer with parameters, fewer such layers than chunks) are
// INVALID_ARGUMENT naming the field.
absl::StatusOr<std::vector<int>> ChunkLayers(const v1::Pipeline& pipeline, int64_t pp,
                                             const std::vector<LayerForChunks>& layers);

// "4 pipeline chunk(s) (pp 4 x virtual_stages 1)": what the chunk count is made of.
std::string ChunksString(const v1::Pipeline& pipeline, int64_t pp);

}  // namespace weft

#endif  // WEFT_COMMON_JOBSPEC_PIPELINE_CHUNKS_H_
