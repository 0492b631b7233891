#include "worker/executor/buffers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_math.h"
#include "common/dtype.h"
#include "common/program.h"
#include "common/status.h"

namespace weft {
namespace {

// "for the whole job", "during instructions 2..5": a lifetime, for messages.
std::string LifeText(const BufferLife& life) {
  if (life.carried) return "for the whole job";
  if (life.first < 0) return "for the whole job (no instruction touches it)";
  return absl::StrCat("during instructions ", life.first, "..", life.last);
}

}  // namespace

std::string Dims(const std::vector<int64_t>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ","), "]");
}

int64_t Product(const std::vector<int64_t>& v, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < std::min(end, v.size()); ++i) p *= v[i];
  return p;
}

std::string Buffers::Describe(int id) const {
  return absl::StrCat("buffer ", id, " '", names_[id], "' ", DTypeName(dtypes_[id]),
                      Dims(shapes_[id]));
}

absl::StatusOr<Buffers> Buffers::Create(const v1::Program& program) {
  Buffers t;
  const int n = program.buffers_size();
  t.shapes_.resize(n);
  t.numel_.resize(n);
  t.bytes_.resize(n);
  t.offsets_.resize(n);
  t.dtypes_.resize(n);
  t.names_.resize(n);
  for (int i = 0; i < n; ++i) {
    const v1::Buffer& b = program.buffers(i);
    auto bad = [&](auto... parts) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffer ", i, " ('", b.name(), "') ", parts...));
    };
    if (b.id() != i) {
      return bad("has id ", b.id(), "; ids must equal their position in Program.buffers");
    }
    if (b.shape_size() == 0) return bad("has no shape (a scalar is [1])");
    t.shapes_[i].assign(b.shape().begin(), b.shape().end());
    for (int64_t d : t.shapes_[i]) {
      if (d < 0) return bad("has shape ", Dims(t.shapes_[i]));
    }
    if (!v1::DType_IsValid(b.dtype())) {
      return bad("has unknown dtype ", static_cast<int>(b.dtype()));
    }
    t.dtypes_[i] = b.dtype();
    t.names_[i] = b.name();
    // A Program's shapes are a client's numbers: checked, so that no size below wraps.
    ASSIGN_OR_RETURN(t.bytes_[i], CheckedBufferBytes(b));
    t.numel_[i] = BufferElements(b);
  }

  if (program.arena_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("arena_bytes ", program.arena_bytes(), " is negative"));
  }
  if (program.arena_bytes() == 0) {
    // Back to back, sharing nothing (a 0-byte buffer still gets its own slot, as the planner
    // gives it).
    for (int i = 0; i < n; ++i) {
      t.offsets_[i] = t.arena_bytes_;
      // Rounding up adds less than kArenaAlignment: checked before it, and the sum after.
      RETURN_IF_ERROR(CheckedAdd(t.bytes_[i], kArenaAlignment, t.Describe(i)).status());
      ASSIGN_OR_RETURN(t.arena_bytes_,
                       CheckedAdd(t.arena_bytes_, ArenaAligned(std::max<int64_t>(t.bytes_[i], 1)),
                                  "the arena's bytes"));
    }
    return t;
  }
  t.arena_bytes_ = program.arena_bytes();
  for (int i = 0; i < n; ++i) {
    const int64_t off = program.buffers(i).offset();
    t.offsets_[i] = off;
    if (off < 0 || off % kArenaAlignment != 0) {
      return absl::InvalidArgumentError(absl::StrCat(t.Describe(i), " has offset ", off,
                                                     ", not a multiple of ", kArenaAlignment));
    }
    if (off > t.arena_bytes_ - t.bytes_[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.Describe(i), " at bytes [", off, ", ", off + t.bytes_[i],
                       ") does not fit in the arena of ", t.arena_bytes_, " bytes"));
    }
  }
  // Sweep the buffers by offset, keeping those whose bytes reach the current one: a pair that
  // shares bytes must never be alive at once.
  const std::vector<BufferLife> lives = BufferLives(program);
  std::vector<int> order;
  for (int i = 0; i < n; ++i) {
    if (t.bytes_[i] > 0) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return t.offsets_[a] < t.offsets_[b]; });
  std::vector<int> reaching;
  for (int b : order) {
    const int64_t begin = t.offsets_[b];
    reaching.erase(std::remove_if(reaching.begin(), reaching.end(),
                                  [&](int q) { return t.offsets_[q] + t.bytes_[q] <= begin; }),
                   reaching.end());
    for (int q : reaching) {
      if (!AliveTogether(lives[q], lives[b])) continue;
      auto where = [&](int id) {
        return absl::StrCat(t.Describe(id), " (bytes [", t.offsets_[id], ", ",
                            t.offsets_[id] + t.bytes_[id], "), alive ", LifeText(lives[id]), ")");
      };
      return absl::InvalidArgumentError(absl::StrCat(
          "arena layout: ", where(q), " and ", where(b), " share bytes while both are alive"));
    }
    reaching.push_back(b);
  }
  return t;
}

void Buffers::Place(char* arena) { arena_ = arena; }

}  // namespace weft
