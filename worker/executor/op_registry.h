// The op registry: for each Instruction::Op one OpHandler, saying which element types the op's
// buffers may have, how to decode and check an instruction into a Step (once, at Create) and how
// to run the decoded Step (every step, on the kernels and communicators). The handlers live in
// ops/, one file per family of ops (linear, elementwise, data, norm, ...), and each family
// registers its ops in one function listed in BuiltinOps(). Adding an op is one decode, one run
// and one Register line in its family's file.
//
// E.g. (ops/data.cc)
//   absl::Status DecodeScale(Decoder& d, Step* s) { return d.Elementwise(1); }
//   absl::Status RunScale(const Step& s, const RunContext& c) {
//     c.kernels.Scale(c.f32(s.in[0]), c.f32(s.out), s.numel, s.scale);
//     return absl::OkStatus();
//   }
//   RETURN_IF_ERROR(registry->Register(Instruction::SCALE, {ElementTypes::F32(), DecodeScale,
//                                                           RunScale}));
#ifndef WEFT_WORKER_EXECUTOR_OP_REGISTRY_H_
#define WEFT_WORKER_EXECUTOR_OP_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/program.h"
#include "weft/v1/program.pb.h"
#include "worker/comm/communicator.h"
#include "worker/executor/buffers.h"
#include "worker/executor/step.h"
#include "worker/kernels/kernels.h"

namespace weft {

// How an op constrains the element types of its buffers, checked before its decode runs.
// kF32 ops are those common/program.h ComputesInF32 names. Their float operands may be stored
// as bf16: the executor widens each bf16 operand to a float32 copy (Step::widened) once per
// instruction, before the run function, and rounds the written ones back after it, so the run
// function and the kernels see float32 only (through RunContext::f32).
struct ElementTypes {
  enum Rule {
    kF32,     // every input and output is float32 or bf16 (the compute kernels), but the ids below
    kOne,     // inputs and outputs share one dtype, any (data movement): Step::dtype
    kOutput,  // FILL: its output's, any
    kCast,    // any input dtype (Step::from), any output dtype (Step::dtype)
    kSource,  // LOAD_INPUT / LOAD_LABEL: the data source's (checked by the op's decode)
  };
  Rule rule = kF32;
  int ids_input = -1;       // kF32: the input holding ids, I32 or I64 (Step::ids_dtype)
  bool ids_output = false;  // kF32: output 0 holds ids, I32 or I64 (Step::dtype)

  static ElementTypes F32() { return {kF32}; }
  static ElementTypes F32WithIdsInput(int input) { return {kF32, input}; }
  static ElementTypes IdsOutput() { return {kF32, -1, true}; }
  static ElementTypes One() { return {kOne}; }
  static ElementTypes Output() { return {kOutput}; }
  static ElementTypes Cast() { return {kCast}; }
  static ElementTypes Source() { return {kSource}; }
};

// What running a step needs besides it; one per RunStep, so a step allocates nothing.
struct RunContext {
  Kernels& kernels;
  const Buffers& buffers;  // placed
  int64_t step;            // the training step being run, from 1 (an eval batch's index + 1)
  const std::vector<std::unique_ptr<Communicator>>& comms;  // by group index (Step::comm)
  char* own_scratch;   // the executor's own scratch (Step::own_scratch_bytes), or null
  char* host_staging;  // data loads into buffers the host cannot write (Step::staging_bytes)
  // The learning-rate schedule's factor at `step` (Program.lr_schedule): the updates' lr times it.
  double lr_scale = 1.0;
  // While a step with bf16 operands runs: its Step::widened, and the area holding their float32
  // copies (its scratch buffer or the executor's own scratch). Null otherwise.
  const std::vector<WidenedOperand>* widened = nullptr;
  char* widened_area = nullptr;

  // A float operand as float32: the widened copy of a bf16 one, else the buffer itself.
  float* f32(int id) const {
    if (widened != nullptr) {
      for (const WidenedOperand& w : *widened) {
        if (w.buffer == id) return reinterpret_cast<float*>(widened_area + w.offset);
      }
    }
    return buffers.f32(id);
  }
  // The buffer's own bytes, in its dtype: ids and data movement (never a compute op's float
  // operand, which may be bf16: f32()).
  void* data(int id) const { return buffers.data(id); }
};

// Decodes one instruction into its Step: the checks every op shares, for the handlers' decode
// functions. Errors are INVALID_ARGUMENT naming the buffers (Buffers::Describe) and what is wrong;
// the executor prefixes the instruction.
class Decoder {
 public:
  Decoder(const DecodeContext& ctx, Step* s);

  const v1::Instruction& ins() const { return ins_; }
  const DecodeContext& ctx() const { return ctx_; }
  const Buffers& buffers() const { return buffers_; }
  const std::vector<int64_t>& shape(int id) const { return buffers_.shape(id); }
  int64_t numel(int id) const { return buffers_.numel(id); }
  // "gamma (buffer 1 'ln.weight' f32[4])".
  std::string Named(absl::string_view role, int id) const;
  std::string OpName() const;

  template <typename... Parts>
  static absl::Status Bad(const Parts&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  }

  // Every buffer id in range; the element types `types` allows (sets dtype, from, ids_dtype,
  // element_bytes).
  absl::Status CheckIds() const;
  absl::Status CheckTypes(const ElementTypes& types);
  // Exactly n_in inputs and n_out outputs; sets in, outs and out.
  absl::Status Need(int n_in, int n_out);
  // n_in inputs, one output, all of one element count (numel), the elementwise ops; scale.
  absl::Status Elementwise(int n_in);
  absl::Status SameNumel(int a, int b, absl::string_view an, absl::string_view bn) const;
  absl::Status SameShape(int a, int b, absl::string_view an, absl::string_view bn) const;
  // Buffer `id` (`role`) holds `want` elements; `expected` says what that is.
  absl::Status Holds(int id, absl::string_view role, int64_t want,
                     absl::string_view expected) const;
  // rows x cols: buffer `id` viewed [prod(leading dims), last dim].
  void RowView(int id, int64_t* rows, int64_t* cols) const;
  // No output is an input or another output (ops whose kernels read inputs while writing).
  absl::Status Apart() const;
  // [outer, axis_len, inner] view of buffer `id` along ins.axis (negative counts from the end).
  absl::Status AxisView(int id);
  // `out` must equal `a` except along the axis, where it is `len`.
  absl::Status SameButAxis(int a, int out, int64_t len) const;
  // The instruction's group (comm, member), its split_sizes (member_offsets, member_lengths),
  // its reduce (sum, avg of a floating type, or max when `max_ok`).
  absl::Status Group();
  absl::Status Splits();
  absl::Status Reduce(bool max_ok);
  // The op packs `elements` of its dtype: in its planned scratch buffer, checked to hold them,
  // or in the executor's own.
  absl::Status Packing(int64_t elements);
  // An op that computes in float32: its bf16 operands (WidenedOperands) get float32 copies in
  // its planned scratch buffer, checked to hold WidenedBytes, or in the executor's own.
  absl::Status Widening();
  // Where buffer `id` (`role`) lies in its global tensor, from Instruction.box (offsets, and
  // lengths equal to the buffer's shape) and Instruction.global_shape; without a box at offset 0,
  // without global_shape a tensor just large enough. With `need_global` (a global index is
  // computed from it) a box needs its global_shape.
  absl::Status Region(int id, absl::string_view role, bool need_global, GlobalBox* box) const;
  // DropoutSpec from dropout_p (in [0, 1)), dropout_key and the program's seed; step 0.
  absl::Status Dropout(DropoutSpec* spec) const;

 private:
  // `bytes` of scratch for the step: the planned scratch buffer, checked to hold them (`use`
  // says what for, in the error), or (none planned) the executor's own.
  absl::Status UseScratch(int64_t bytes, const std::string& use);
  // The planned scratch buffer `id` is none of the instruction's inputs and outputs.
  absl::Status ScratchApart(int id) const;

  const DecodeContext& ctx_;
  const Buffers& buffers_;
  Step* const s_;
  const v1::Instruction& ins_;
};

// Fills *s, the step `d` decodes, from d.ins().
using DecodeFn = absl::Status (*)(Decoder& d, Step* s);

struct OpHandler {
  ElementTypes types;
  DecodeFn decode = nullptr;
  RunFn run = nullptr;
  bool communicates = false;  // waits for other ranks (SEND, RECV, the collectives)
  bool packs = false;         // may pack through Instruction.scratch
};

class OpRegistry {
 public:
  // INVALID_ARGUMENT for a handler without decode or run; ALREADY_EXISTS for a second handler
  // of one op (never last-one-wins).
  absl::Status Register(v1::Instruction::Op op, OpHandler handler);
  // Null when no handler is registered for `op`.
  const OpHandler* Find(v1::Instruction::Op op) const;
  // Every op with a handler, in enum order.
  std::vector<v1::Instruction::Op> ops() const;

 private:
  std::map<int, OpHandler> handlers_;
};

// Every handler under ops/, registered once.
const OpRegistry& BuiltinOps();

}  // namespace weft

#endif  // WEFT_WORKER_EXECUTOR_OP_REGISTRY_H_
