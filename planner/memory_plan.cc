#include "planner/memory_plan.h"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include "common/checked_math.h"
#include "common/dtype.h"
#include "common/kernel_scratch.h"
#include "common/program.h"
#include "common/status.h"

namespace weft::planner {
namespace {

constexpr size_t kBuffersPerStopCheck = 64;

// [offset, end) of a placed buffer in the arena.
using Span = std::pair<int64_t, int64_t>;

// The placed buffers by the stretch of the instruction list they live in: the list is cut into
// blocks of kBlockInstructions, and a buffer is filed under every block its [first, last] touches,
// so the buffers alive at the same time as a new one are found among those filed under its own
// blocks instead of among every buffer placed (placing was quadratic in the buffers: a step of
// 64 micro-batches of a 32-layer model spent most of its planning there). A buffer that lives
// across more than kLongBlocks blocks (a gradient accumulated over the micro-batches) is kept
// instead in one list by offset, which every query walks without sorting it again.
class PlacedByTime {
 public:
  static constexpr int kBlockInstructions = 32;
  static constexpr int kLongBlocks = 64;

  PlacedByTime(const std::vector<BufferLife>& lives, int buffers)
      : lives_(lives),
        spans_(static_cast<size_t>(buffers)),
        seen_(static_cast<size_t>(buffers), -1) {
    int last = -1;
    for (const BufferLife& l : lives) last = std::max(last, l.last);
    blocks_.resize(static_cast<size_t>(last / kBlockInstructions + 1));
  }

  // The spans of the placed buffers alive together with b (not carried, touched by some
  // instruction), each once, by offset.
  void SpansAliveWith(int b, std::vector<Span>* out) {
    short_.clear();
    for (int k = First(b); k <= Last(b); ++k) {
      for (int q : blocks_[static_cast<size_t>(k)]) {
        if (seen_[q] == b) continue;
        seen_[q] = b;
        if (AliveTogether(lives_[q], lives_[b])) short_.push_back(spans_[q]);
      }
    }
    std::sort(short_.begin(), short_.end());
    long_alive_.clear();
    for (const auto& [span, q] : long_) {
      if (AliveTogether(lives_[q], lives_[b])) long_alive_.push_back(span);
    }
    out->clear();
    std::merge(short_.begin(), short_.end(), long_alive_.begin(), long_alive_.end(),
               std::back_inserter(*out));
  }

  void Add(int b, Span span) {
    spans_[b] = span;
    if (Last(b) - First(b) + 1 > kLongBlocks) {
      const std::pair<Span, int> entry{span, b};
      long_.insert(std::upper_bound(long_.begin(), long_.end(), entry), entry);
      return;
    }
    for (int k = First(b); k <= Last(b); ++k) blocks_[static_cast<size_t>(k)].push_back(b);
  }

 private:
  int First(int b) const { return lives_[b].first / kBlockInstructions; }
  int Last(int b) const { return lives_[b].last / kBlockInstructions; }

  const std::vector<BufferLife>& lives_;
  std::vector<std::vector<int>> blocks_;
  std::vector<std::pair<Span, int>> long_;  // by span
  std::vector<Span> spans_;                 // every placed buffer's, by id
  std::vector<int> seen_;                   // the buffer whose query last met each buffer
  std::vector<Span> short_, long_alive_;    // a query's, kept to reuse their memory
};

}  // namespace

absl::Status MemoryPlanner::Plan(v1::Program* program, const StopCheck& stop) {
  const int n = program->buffers_size();
  const std::vector<BufferLife> lives = BufferLives(*program);
  std::vector<int64_t> sizes(n), key;
  key.reserve(4 * static_cast<size_t>(n));
  // Every offset and end below is at most the sum of the aligned sizes, and each aligned size is
  // under its bytes + kArenaAlignment: that bound fitting int64 keeps the layout from wrapping
  // (a wrapped arena plans kilobytes for exabytes).
  int64_t bound = 0;
  for (int b = 0; b < n; ++b) {
    ASSIGN_OR_RETURN(const int64_t bytes, CheckedBufferBytes(program->buffers(b)));
    ASSIGN_OR_RETURN(bound, CheckedAdd(bound, bytes, "the arena's bytes"));
    ASSIGN_OR_RETURN(bound, CheckedAdd(bound, kArenaAlignment, "the arena's bytes"));
    sizes[b] = ArenaAligned(std::max<int64_t>(bytes, 1));
    key.insert(key.end(), {sizes[b], lives[b].first, lives[b].last, lives[b].carried ? 1 : 0});
  }
  auto cached = layouts_.find(key);
  if (cached == layouts_.end()) {
    std::vector<int64_t> offsets(n, 0);
    int64_t base = 0;
    for (int b = 0; b < n; ++b) {
      if (!lives[b].carried) continue;
      offsets[b] = base;
      base += sizes[b];
    }
    int64_t end = base;
    std::vector<int> order;
    for (int b = 0; b < n; ++b) {
      if (!lives[b].carried && lives[b].first >= 0) order.push_back(b);
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return sizes[a] != sizes[b] ? sizes[a] > sizes[b] : lives[a].first < lives[b].first;
    });
    PlacedByTime placed(lives, n);
    std::vector<Span> spans;  // of the placed buffers alive together with the next, by offset
    for (size_t i = 0; i < order.size(); ++i) {
      const int b = order[i];
      if (i % kBuffersPerStopCheck == 0) {
        RETURN_IF_ERROR(CheckStop(stop, "laying out its buffers"));
      }
      // The placed buffers alive at the same time, by offset; pick the smallest gap that fits.
      placed.SpansAliveWith(b, &spans);
      int64_t best = -1, best_gap = 0, cursor = base;
      for (const auto& [begin, span_end] : spans) {
        const int64_t gap = begin - cursor;
        if (gap >= sizes[b] && (best < 0 || gap < best_gap)) {
          best = cursor;
          best_gap = gap;
        }
        cursor = std::max(cursor, span_end);
      }
      offsets[b] = best >= 0 ? best : cursor;
      end = std::max(end, offsets[b] + sizes[b]);
      placed.Add(b, {offsets[b], offsets[b] + sizes[b]});
    }
    // A buffer no instruction touches still gets its own bytes (the executor fills it).
    for (int b = 0; b < n; ++b) {
      if (!lives[b].carried && lives[b].first < 0) {
        offsets[b] = end;
        end += sizes[b];
      }
    }
    cached = layouts_.emplace(std::move(key), std::make_pair(std::move(offsets), end)).first;
  }
  for (int b = 0; b < n; ++b) program->mutable_buffers(b)->set_offset(cached->second.first[b]);
  program->set_arena_bytes(cached->second.second);
  program->set_kernel_scratch_bytes(KernelScratchBytes(*program));
  return absl::OkStatus();
}

}  // namespace weft::planner
