#include "worker/kernels/cuda/caching_allocator.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weft {
namespace {

// Half the address space: never satisfiable, and below it neither rounding up nor 2 * size
// overflows.
constexpr size_t kMaxRequest =
    std::numeric_limits<size_t>::max() / 2 - CachingAllocator::kGranularity;

size_t RoundUp(size_t bytes) {
  if (bytes == 0) return CachingAllocator::kGranularity;
  return (bytes + CachingAllocator::kGranularity - 1) / CachingAllocator::kGranularity *
         CachingAllocator::kGranularity;
}

std::string Address(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
}

}  // namespace

CachingAllocator::CachingAllocator(RawAllocate raw_allocate, RawFree raw_free)
    : raw_allocate_(std::move(raw_allocate)), raw_free_(std::move(raw_free)) {}

CachingAllocator::~CachingAllocator() {
  absl::MutexLock lock(&mu_);
  for (const auto& entry : blocks_) raw_free_(entry.first);
}

void* CachingAllocator::Allocate(size_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes > kMaxRequest) {
    ++stats_.failed_allocations;
    return nullptr;
  }
  const size_t size = RoundUp(bytes);

  auto fit = cached_.lower_bound(size);
  if (fit != cached_.end() && fit->first <= 2 * size) {
    void* p = fit->second;
    cached_.erase(fit);
    Block& block = blocks_[p];
    block.in_use = true;
    ++stats_.cache_hits;
    NoteInUseLocked(block.size);
    return p;
  }

  void* p = raw_allocate_(size);
  if (p == nullptr && !cached_.empty()) {
    // The cached blocks are all too small or too large for this request, but the memory they
    // hold may be what the raw allocator lacks.
    ReleaseCachedLocked();
    p = raw_allocate_(size);
  }
  if (p == nullptr) {
    ++stats_.failed_allocations;
    return nullptr;
  }
  blocks_[p] = Block{size, /*in_use=*/true};
  ++stats_.raw_allocations;
  stats_.bytes_reserved += static_cast<int64_t>(size);
  NoteInUseLocked(size);
  return p;
}

absl::Status CachingAllocator::Free(void* p) {
  if (p == nullptr) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  auto it = blocks_.find(p);
  if (it == blocks_.end()) {
    ++stats_.bad_frees;
    return absl::InvalidArgumentError(
        absl::StrCat("freeing ", Address(p), ", which this allocator did not hand out"));
  }
  Block& block = it->second;
  if (!block.in_use) {
    ++stats_.bad_frees;
    return absl::FailedPreconditionError(
        absl::StrCat("double free of ", Address(p), " (a ", block.size, "-byte block)"));
  }
  block.in_use = false;
  stats_.bytes_in_use -= static_cast<int64_t>(block.size);
  cached_.emplace(block.size, p);
  return absl::OkStatus();
}

void CachingAllocator::EmptyCache() {
  absl::MutexLock lock(&mu_);
  ReleaseCachedLocked();
}

CachingAllocatorStats CachingAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void CachingAllocator::ResetPeakBytesInUse() {
  absl::MutexLock lock(&mu_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void CachingAllocator::ReleaseCachedLocked() {
  for (const auto& [size, p] : cached_) {
    raw_free_(p);
    blocks_.erase(p);
    stats_.bytes_reserved -= static_cast<int64_t>(size);
    ++stats_.raw_frees;
  }
  cached_.clear();
}

void CachingAllocator::NoteInUseLocked(size_t size) {
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
}

}  // namespace weft
