// The op handlers by family, each registering its ops in the registry (op_registry.h). A family
// file holds, per op, its decode (the checks, the Step's fields) and its run (the kernel or
// communicator calls), with the op's semantics in einsum or formula form above them.
#ifndef WEFT_WORKER_EXECUTOR_OPS_OPS_H_
#define WEFT_WORKER_EXECUTOR_OPS_OPS_H_

#include "absl/status/status.h"
#include "worker/executor/op_registry.h"

namespace weft {

absl::Status RegisterLinearOps(OpRegistry* registry);         // MATMUL, ADD_BIAS, BIAS_GRAD
absl::Status RegisterElementwiseOps(OpRegistry* registry);    // activations and MUL
absl::Status RegisterMseOps(OpRegistry* registry);            // MSE_LOSS, MSE_GRAD
absl::Status RegisterCrossEntropyOps(OpRegistry* registry);   // ROW_MAX, CE_*
absl::Status RegisterDataOps(OpRegistry* registry);           // loads, FILL, CAST, SLICE, ADD, ...
absl::Status RegisterUpdateOps(OpRegistry* registry);         // SGD, ADAMW
absl::Status RegisterNormOps(OpRegistry* registry);           // LAYER_NORM, RMS_NORM (+ grads)
absl::Status RegisterAttentionOps(OpRegistry* registry);      // ROPE, ATTENTION (+ grads)
absl::Status RegisterEmbeddingOps(OpRegistry* registry);      // EMBEDDING(_GRAD)
absl::Status RegisterDropoutOps(OpRegistry* registry);        // DROPOUT
absl::Status RegisterCollectiveOps(OpRegistry* registry);     // ALL_REDUCE, ALL_GATHER, ...
absl::Status RegisterPointToPointOps(OpRegistry* registry);   // SEND, RECV

}  // namespace weft

#endif  // WEFT_WORKER_EXECUTOR_OPS_OPS_H_
