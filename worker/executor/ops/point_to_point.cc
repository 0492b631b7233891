// Pipeline point-to-point transfers on a group's communicator: SEND inputs[0] to member `peer`,
// RECV outputs[0] from it, matched by tag.
#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

absl::Status DecodePointToPoint(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  const bool send = ins.op() == Instruction::SEND;
  RETURN_IF_ERROR(send ? d.Need(1, 0) : d.Need(0, 1));
  RETURN_IF_ERROR(d.Group());
  const v1::CommGroup& group = d.ctx().program.groups(s->comm);
  if (ins.peer() < 0 || ins.peer() >= group.ranks_size()) {
    return d.Bad("peer ", ins.peer(), " is not a member of ", GroupName(group));
  }
  if (ins.peer() == s->member) return d.Bad("peer ", ins.peer(), " is this rank itself");
  s->peer = ins.peer();
  s->tag = ins.tag();
  s->numel = d.numel(send ? s->in[0] : s->out);
  return absl::OkStatus();
}

// The transport reads and writes memory directly: pending kernels must be done first.
absl::Status RunSend(const Step& s, const RunContext& c) {
  RETURN_IF_ERROR(c.kernels.Synchronize());
  return c.comms[s.comm]->Send(c.data(s.in[0]), static_cast<size_t>(s.numel), s.dtype, s.peer,
                               s.tag);
}

absl::Status RunRecv(const Step& s, const RunContext& c) {
  RETURN_IF_ERROR(c.kernels.Synchronize());
  return c.comms[s.comm]->Recv(c.data(s.out), static_cast<size_t>(s.numel), s.dtype, s.peer,
                               s.tag);
}

OpHandler PointToPoint(RunFn run) {
  OpHandler h{ElementTypes::One(), DecodePointToPoint, run};
  h.communicates = true;
  return h;
}

}  // namespace

absl::Status RegisterPointToPointOps(OpRegistry* registry) {
  RETURN_IF_ERROR(registry->Register(Instruction::SEND, PointToPoint(RunSend)));
  return registry->Register(Instruction::RECV, PointToPoint(RunRecv));
}

}  // namespace weft
