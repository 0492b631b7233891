// Buffers: a Program's buffers as the executor holds them, checked once at Create. Every buffer
// lives in one block of device memory, the arena. With Program.arena_bytes the block is that
// size and each buffer sits at the planner's Buffer.offset, checked here: a multiple of
// kArenaAlignment, inside the arena, and sharing no byte with a buffer alive at the same time
// (common/program.h BufferLives and AliveTogether, the rule the planner placed them by). Without
// it (arena_bytes 0: hand-written programs) the buffers lie back to back, each kArenaAlignment
// aligned, sharing nothing.
//
// E.g.
//   ASSIGN_OR_RETURN(Buffers buffers, Buffers::Create(program));
//   void* block = kernels->Allocate(buffers.arena_bytes());
//   buffers.Place(static_cast<char*>(block));
//   kernels->Relu(buffers.f32(x), buffers.f32(y), buffers.numel(x));
#ifndef WEFT_WORKER_EXECUTOR_BUFFERS_H_
#define WEFT_WORKER_EXECUTOR_BUFFERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "weft/v1/job.pb.h"
#include "weft/v1/program.pb.h"

namespace weft {

class Buffers {
 public:
  // INVALID_ARGUMENT naming the buffer for an id that is not its position, a missing or negative
  // shape, an unknown dtype, a negative arena size, an offset that is unaligned or leaves the
  // arena, and naming both buffers (their bytes and lifetimes) for two live buffers that share
  // bytes.
  static absl::StatusOr<Buffers> Create(const v1::Program& program);

  int size() const { return static_cast<int>(shapes_.size()); }
  const std::vector<int64_t>& shape(int id) const { return shapes_[id]; }
  int64_t numel(int id) const { return numel_[id]; }
  int64_t bytes(int id) const { return bytes_[id]; }  // numel * DTypeSize(dtype)
  v1::DType dtype(int id) const { return dtypes_[id]; }
  const std::string& name(int id) const { return names_[id]; }
  int64_t offset(int id) const { return offsets_[id]; }
  // The block to allocate: Program.arena_bytes, or the back-to-back layout's size.
  int64_t arena_bytes() const { return arena_bytes_; }
  // "buffer 3 'fc0.out' f32[2,4]": how messages name a buffer.
  std::string Describe(int id) const;

  // Points every buffer into `arena` (arena_bytes() bytes of the kernels' memory, not owned).
  void Place(char* arena);
  void* data(int id) const { return arena_ + offsets_[id]; }
  float* f32(int id) const { return reinterpret_cast<float*>(arena_ + offsets_[id]); }

 private:
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<int64_t> numel_, bytes_, offsets_;
  std::vector<v1::DType> dtypes_;
  std::vector<std::string> names_;
  int64_t arena_bytes_ = 0;
  char* arena_ = nullptr;
};

// "[2,4]".
std::string Dims(const std::vector<int64_t>& v);

// Axis `axis` of a tensor of `rank` axes counted from the front (negative: from the end); the
// caller checks the result is in [0, rank).
inline int NormalizeAxis(int axis, int rank) { return axis < 0 ? axis + rank : axis; }

// The product of v[begin, end).
int64_t Product(const std::vector<int64_t>& v, size_t begin = 0, size_t end = SIZE_MAX);

}  // namespace weft

#endif  // WEFT_WORKER_EXECUTOR_BUFFERS_H_
