#include "worker/executor/op_registry.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "worker/executor/ops/ops.h"

namespace weft {

using v1::Instruction;

absl::Status OpRegistry::Register(Instruction::Op op, OpHandler handler) {
  if (handler.decode == nullptr || handler.run == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("the handler of ", Instruction::Op_Name(op), " lacks decode or run"));
  }
  if (!handlers_.emplace(static_cast<int>(op), handler).second) {
    return absl::AlreadyExistsError(
        absl::StrCat(Instruction::Op_Name(op), " has a handler already"));
  }
  return absl::OkStatus();
}

const OpHandler* OpRegistry::Find(Instruction::Op op) const {
  auto it = handlers_.find(static_cast<int>(op));
  return it == handlers_.end() ? nullptr : &it->second;
}

std::vector<Instruction::Op> OpRegistry::ops() const {
  std::vector<Instruction::Op> out;
  for (const auto& [op, handler] : handlers_) out.push_back(static_cast<Instruction::Op>(op));
  return out;
}

const OpRegistry& BuiltinOps() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    for (absl::Status s :
         {RegisterLinearOps(r), RegisterElementwiseOps(r), RegisterMseOps(r),
          RegisterCrossEntropyOps(r), RegisterDataOps(r), RegisterUpdateOps(r),
          RegisterNormOps(r), RegisterAttentionOps(r), RegisterEmbeddingOps(r),
          RegisterDropoutOps(r), RegisterCollectiveOps(r), RegisterPointToPointOps(r)}) {
      if (!s.ok()) {  // a programming error in ops/, caught by every test
        std::fprintf(stderr, "registering executor ops: %s\n", std::string(s.message()).c_str());
        std::abort();
      }
    }
    return r;
  }();
  return *registry;
}

}  // namespace weft
