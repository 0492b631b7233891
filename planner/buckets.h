// Gradient buckets (JobSpec.bucket_mb, DDP's bucket_cap_mb): the all-reduces of parameter
// gradients (the optimizer phase's ALL_REDUCEs) of one group, reduce op and dtype are fused into
// one ALL_REDUCE of several buffers, which the worker packs into one planned scratch buffer,
// reduces with one communicator call and unpacks. Fewer, larger calls: the per-call latency of a
// small bias or norm gradient is paid once per bucket. A gradient of kAloneBytes or more is
// reduced alone: its transfer takes far longer than a call's latency, and packing it would copy it
// twice and hold a second copy (DDP avoids both by making gradients views of the bucket; Weft's
// buffers are placed by the memory plan, so it packs).
//
// Program order after StartCollectivesEarly is the order gradients complete in (the backward
// pass's). Walking it, each all-reduce joins its key's open bucket, which closes once it holds at
// least `bucket_bytes` (so a bucket is up to one gradient over the cap; a gradient over the cap is
// a bucket of its own). A bucket runs where its last member stood: every member's gradient is
// complete by then. A bucket also closes before anything it may not pass: an instruction reading
// or writing a member's buffers, a SEND, a RECV or a collective of another group (the order of
// communication is kept, as StartCollectivesEarly keeps it). Runs before the memory plan, which
// sees the members' new lifetimes and the packing buffer.
//
// E.g. (gpt2 block on dp=2, 25 MiB)
//   before: ALL_REDUCE ln_1.weight@grad, ..., ALL_REDUCE c_fc.bias@grad, ALL_REDUCE c_fc.weight@grad
//   after:  ALL_REDUCE [ln_1.weight@grad, ..., c_fc.weight@grad] (scratch: bucket 0, its bytes)
#ifndef WEFT_PLANNER_BUCKETS_H_
#define WEFT_PLANNER_BUCKETS_H_

#include <cstdint>

#include "weft/v1/program.pb.h"

namespace weft::planner {

inline constexpr int64_t kAloneBytes = int64_t{1} << 20;

// Fuses as above; bucket_bytes <= 0 fuses nothing. Returns how many buckets of two or more
// gradients it made.
int FuseGradientAllReduces(v1::Program* program, int64_t bucket_bytes);

}  // namespace weft::planner

#endif  // WEFT_PLANNER_BUCKETS_H_
