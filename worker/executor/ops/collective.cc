// The collectives on a group's communicator: ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER and
// ALL_TO_ALL, one dtype each. Pieces along a non-leading axis pass a packing (Decoder::Packing)
// in a planned scratch buffer or the executor's own.
#include <vector>

#include "absl/strings/str_cat.h"

#include "common/dtype.h"
#include "common/status.h"
#include "worker/executor/ops/ops.h"

namespace weft {
namespace {

using v1::Instruction;

// The members' split sizes summed: the length along the axis of the whole tensor.
int64_t SplitTotal(const Step& s) { return s.member_offsets.back() + s.member_lengths.back(); }

// Elements of each member's piece [outer, len_i, inner] (Step::counts).
void PieceCounts(Step* s) {
  for (int64_t len : s->member_lengths) s->counts.push_back(s->outer * len * s->inner);
}

// The packing: the planned scratch buffer, or the start of the executor's own.
char* Pack(const Step& s, const RunContext& c) {
  return s.scratch >= 0 ? static_cast<char*>(c.data(s.scratch)) : c.own_scratch;
}

// out = the group's sum, average or max of a (out may alias a). A gradient bucket
// (planner/buckets.h) has several pairs in_i -> out_i, of one dtype: packed back to
// back into the scratch buffer, reduced with one call, unpacked (counts: each pair's elements).
absl::Status DecodeAllReduce(Decoder& d, Step* s) {
  const int pairs = d.ins().inputs_size();
  if (pairs < 1 || d.ins().outputs_size() != pairs) {
    return d.Bad("expects as many outputs as inputs (one or more), got ", pairs, " inputs and ",
                 d.ins().outputs_size(), " outputs");
  }
  RETURN_IF_ERROR(d.Need(pairs, pairs));
  RETURN_IF_ERROR(d.Group());
  RETURN_IF_ERROR(d.Reduce(/*max_ok=*/true));
  s->numel = 0;
  for (int i = 0; i < pairs; ++i) {
    RETURN_IF_ERROR(d.SameNumel(s->in[i], s->outs[i], absl::StrCat("input ", i),
                                absl::StrCat("output ", i)));
    s->counts.push_back(d.numel(s->in[i]));
    s->numel += s->counts.back();
  }
  if (pairs == 1) {
    if (d.ins().has_scratch()) return d.Bad("a single all-reduce packs nothing: no scratch");
    return absl::OkStatus();
  }
  // Every input is packed before any output is written: an output may be any input, but not
  // another output.
  for (int i = 0; i < pairs; ++i) {
    for (int j = 0; j < i; ++j) {
      if (s->outs[i] == s->outs[j]) {
        return d.Bad("outputs ", j, " and ", i, " are both ", d.Named("output", s->outs[i]));
      }
    }
  }
  return d.Packing(s->numel);
}

// Collectives read and write memory directly: pending kernels (the slices and copies below
// included) must be done before each communicator call, one Synchronize right before it.
absl::Status RunAllReduce(const Step& s, const RunContext& c) {
  Communicator& comm = *c.comms[s.comm];
  if (s.in.size() == 1) {
    void* out = c.data(s.out);
    c.kernels.Copy(c.data(s.in[0]), out, s.numel * s.element_bytes);
    RETURN_IF_ERROR(c.kernels.Synchronize());
    return comm.AllReduce(out, static_cast<size_t>(s.numel), s.dtype, s.reduce);
  }
  char* pack = Pack(s, c);
  char* at = pack;
  for (size_t i = 0; i < s.in.size(); ++i) {
    c.kernels.Copy(c.data(s.in[i]), at, s.counts[i] * s.element_bytes);
    at += s.counts[i] * s.element_bytes;
  }
  RETURN_IF_ERROR(c.kernels.Synchronize());
  RETURN_IF_ERROR(comm.AllReduce(pack, static_cast<size_t>(s.numel), s.dtype, s.reduce));
  at = pack;
  for (size_t i = 0; i < s.outs.size(); ++i) {
    c.kernels.Copy(at, c.data(s.outs[i]), s.counts[i] * s.element_bytes);
    at += s.counts[i] * s.element_bytes;
  }
  return absl::OkStatus();
}

// out = the members' pieces concatenated along axis (split_sizes: each member's length).
absl::Status DecodeAllGather(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 1));
  RETURN_IF_ERROR(d.Group());
  RETURN_IF_ERROR(d.Splits());
  RETURN_IF_ERROR(d.AxisView(s->in[0]));
  if (s->axis_len != s->member_lengths[s->member]) {
    return d.Bad("input ", Dims(d.shape(s->in[0])), " has ", s->axis_len,
                 " along the axis, this member's split size is ", s->member_lengths[s->member]);
  }
  const int64_t total = SplitTotal(*s);
  RETURN_IF_ERROR(d.SameButAxis(s->in[0], s->out, total));
  if (s->out == s->in[0]) return d.Bad("output aliases the input");
  PieceCounts(s);
  s->axis_len = total;  // Unslice views the output
  // Gathered back to back, then placed along the axis: the whole output passes the packing.
  if (s->outer > 1) RETURN_IF_ERROR(d.Packing(d.numel(s->out)));
  return absl::OkStatus();
}

// Member i's piece is [outer, len_i, inner]; gathered back to back, then placed along the axis
// of out ([outer, total, inner]) unless outer is 1, where back to back is the layout.
absl::Status RunAllGather(const Step& s, const RunContext& c) {
  Communicator& comm = *c.comms[s.comm];
  const void* a = c.data(s.in[0]);
  char* out = static_cast<char*>(c.data(s.out));
  RETURN_IF_ERROR(c.kernels.Synchronize());
  if (s.outer == 1) return comm.AllGather(a, out, s.counts, s.dtype);
  char* pack = Pack(s, c);
  RETURN_IF_ERROR(comm.AllGather(a, pack, s.counts, s.dtype));
  const char* chunk = pack;
  for (size_t i = 0; i < s.counts.size(); ++i) {
    c.kernels.Unslice(chunk, out, s.outer, s.axis_len, s.inner, s.member_offsets[i],
                      s.member_lengths[i], s.element_bytes);
    chunk += s.counts[i] * s.element_bytes;
  }
  return absl::OkStatus();
}

// out = this member's split (split_sizes along axis) of the group's sum or average of a.
absl::Status DecodeReduceScatter(Decoder& d, Step* s) {
  RETURN_IF_ERROR(d.Need(1, 1));
  RETURN_IF_ERROR(d.Group());
  RETURN_IF_ERROR(d.Splits());
  RETURN_IF_ERROR(d.AxisView(s->in[0]));
  const int64_t total = SplitTotal(*s);
  if (s->axis_len != total) {
    return d.Bad("input ", Dims(d.shape(s->in[0])), " has ", s->axis_len,
                 " along the axis, split sizes sum to ", total);
  }
  RETURN_IF_ERROR(d.SameButAxis(s->in[0], s->out, s->member_lengths[s->member]));
  if (s->out == s->in[0]) return d.Bad("output aliases the input");
  PieceCounts(s);
  s->numel = d.numel(s->out);
  RETURN_IF_ERROR(d.Reduce(/*max_ok=*/false));
  s->scale = 1.0f / static_cast<float>(s->member_lengths.size());
  // The pieces of the whole input, member by member, pass the packing.
  if (s->outer > 1) RETURN_IF_ERROR(d.Packing(d.numel(s->in[0])));
  // The communicator only sums; a bf16 average is divided in float32 and rounded once.
  if (s->reduce == ReduceOp::kAvg && s->dtype != v1::F32) {
    s->avg_f32_offset = ArenaAligned(s->own_scratch_bytes);
    s->own_scratch_bytes = s->avg_f32_offset + s->numel * DTypeSize(v1::F32);
  }
  return absl::OkStatus();
}

absl::Status RunReduceScatter(const Step& s, const RunContext& c) {
  Kernels& k = c.kernels;
  Communicator& comm = *c.comms[s.comm];
  const void* a = c.data(s.in[0]);
  char* out = static_cast<char*>(c.data(s.out));
  const int64_t eb = s.element_bytes;
  if (s.outer == 1) {
    RETURN_IF_ERROR(k.Synchronize());
    RETURN_IF_ERROR(comm.ReduceScatter(a, out, s.counts, s.dtype));
  } else {
    char* pack = Pack(s, c);
    char* chunk = pack;
    for (size_t i = 0; i < s.counts.size(); ++i) {
      k.Slice(a, chunk, s.outer, s.axis_len, s.inner, s.member_offsets[i], s.member_lengths[i],
              eb);
      chunk += s.counts[i] * eb;
    }
    RETURN_IF_ERROR(k.Synchronize());
    RETURN_IF_ERROR(comm.ReduceScatter(pack, out, s.counts, s.dtype));
  }
  // The communicator only sums; an average scales this member's piece afterwards.
  if (s.reduce != ReduceOp::kAvg) return absl::OkStatus();
  if (s.dtype == v1::F32) {
    k.Scale(reinterpret_cast<float*>(out), reinterpret_cast<float*>(out), s.numel, s.scale);
  } else {
    float* sum = reinterpret_cast<float*>(c.own_scratch + s.avg_f32_offset);
    k.Cast(out, s.dtype, sum, v1::F32, s.numel);
    k.Scale(sum, sum, s.numel, s.scale);
    k.Cast(sum, v1::F32, out, s.dtype, s.numel);
  }
  return absl::OkStatus();
}

// Pieces of a along `axis` go to the members; what comes back is concatenated along
// concat_axis. Both sides pass the packing ([send | receive]).
absl::Status DecodeAllToAll(Decoder& d, Step* s) {
  const Instruction& ins = d.ins();
  RETURN_IF_ERROR(d.Need(1, 1));
  RETURN_IF_ERROR(d.Group());
  RETURN_IF_ERROR(d.Splits());
  RETURN_IF_ERROR(d.AxisView(s->in[0]));
  if (s->out == s->in[0]) return d.Bad("output aliases the input");
  const std::vector<int64_t>& in = d.shape(s->in[0]);
  const int rank = static_cast<int>(in.size());
  const int axis = NormalizeAxis(ins.axis(), rank);
  const int caxis = NormalizeAxis(ins.concat_axis(), rank);
  if (caxis < 0 || caxis >= rank) {
    return d.Bad("concat_axis ", ins.concat_axis(), " out of range for ", Dims(in));
  }
  if (caxis == axis) return d.Bad("axis and concat_axis are both ", axis);
  const int64_t total = SplitTotal(*s);
  if (s->axis_len != total) {
    return d.Bad("input ", Dims(in), " has ", s->axis_len, " along axis ", axis,
                 ", split sizes sum to ", total);
  }
  if (ins.concat_split_sizes_size() != static_cast<int>(s->member_lengths.size())) {
    return d.Bad(ins.concat_split_sizes_size(), " concat_split_sizes for a group of ",
                 s->member_lengths.size());
  }
  int64_t concat_total = 0;
  for (int64_t len : ins.concat_split_sizes()) {
    if (len < 0) return d.Bad("negative concat split size");
    s->concat_offsets.push_back(concat_total);
    s->concat_lengths.push_back(len);
    concat_total += len;
  }
  if (in[caxis] != s->concat_lengths[s->member]) {
    return d.Bad("input ", Dims(in), " has ", in[caxis], " along concat_axis ", caxis,
                 ", this member's concat split size is ", s->concat_lengths[s->member]);
  }
  std::vector<int64_t> want = in;
  want[axis] = s->member_lengths[s->member];
  want[caxis] = concat_total;
  if (d.shape(s->out) != want) {
    return d.Bad("output is ", Dims(d.shape(s->out)), ", expected ", Dims(want));
  }
  PieceCounts(s);
  s->numel = d.numel(s->in[0]);  // the send half of the packing; the receive half follows it
  s->c_outer = Product(want, 0, caxis);
  s->c_len = concat_total;
  s->c_inner = Product(want, caxis + 1);
  for (int64_t len : s->concat_lengths) {
    s->recv_counts.push_back(s->c_outer * len * s->c_inner);
  }
  return d.Packing(d.numel(s->in[0]) + d.numel(s->out));
}

absl::Status RunAllToAll(const Step& s, const RunContext& c) {
  Kernels& k = c.kernels;
  const void* a = c.data(s.in[0]);
  char* out = static_cast<char*>(c.data(s.out));
  const int64_t eb = s.element_bytes;
  char* send = Pack(s, c);
  char* recv = send + s.numel * eb;
  char* chunk = send;
  for (size_t j = 0; j < s.counts.size(); ++j) {
    k.Slice(a, chunk, s.outer, s.axis_len, s.inner, s.member_offsets[j], s.member_lengths[j], eb);
    chunk += s.counts[j] * eb;
  }
  RETURN_IF_ERROR(k.Synchronize());
  RETURN_IF_ERROR(c.comms[s.comm]->AllToAll(send, s.counts, recv, s.recv_counts, s.dtype));
  chunk = recv;
  for (size_t i = 0; i < s.recv_counts.size(); ++i) {
    k.Unslice(chunk, out, s.c_outer, s.c_len, s.c_inner, s.concat_offsets[i], s.concat_lengths[i],
              eb);
    chunk += s.recv_counts[i] * eb;
  }
  return absl::OkStatus();
}

OpHandler Collective(DecodeFn decode, RunFn run, bool packs) {
  OpHandler h{ElementTypes::One(), decode, run};
  h.communicates = true;
  h.packs = packs;
  return h;
}

}  // namespace

absl::Status RegisterCollectiveOps(OpRegistry* registry) {
  RETURN_IF_ERROR(registry->Register(Instruction::ALL_REDUCE,
                                     Collective(DecodeAllReduce, RunAllReduce, true)));
  RETURN_IF_ERROR(registry->Register(Instruction::ALL_GATHER,
                                     Collective(DecodeAllGather, RunAllGather, true)));
  RETURN_IF_ERROR(registry->Register(Instruction::REDUCE_SCATTER,
                                     Collective(DecodeReduceScatter, RunReduceScatter, true)));
  return registry->Register(Instruction::ALL_TO_ALL,
                            Collective(DecodeAllToAll, RunAllToAll, true));
}

}  // namespace weft
