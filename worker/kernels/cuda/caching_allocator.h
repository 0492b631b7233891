// CachingAllocator: memory blocks kept for reuse in front of a raw allocate/free pair (cudaMalloc
// and cudaFree in the CUDA backend). cudaMalloc is slow and cudaFree synchronizes the whole
// device, while the executor allocates and frees the same sizes every step; so freed blocks are
// kept and handed out again, and the raw allocator is called only when no kept block fits.
//
// Rules:
//  - A request is rounded up to a multiple of 512 bytes (0 bytes to 512), so every call returns a
//    distinct block.
//  - Reuse: the smallest cached block of at least the rounded size r, if it is at most 2r (a larger
//    block would leave over half of itself idle; a later request fits it better). Blocks are never
//    split or merged. Equal sizes are handed out oldest-freed first.
//  - When the raw allocator returns null, every cached block is released and, if any was, the
//    request is retried once; if that fails too, Allocate returns null.
//  - Free(nullptr) does nothing. Freeing a pointer that was not handed out, or one already freed,
//    changes nothing but stats().bad_frees and returns an error (InvalidArgument,
//    FailedPrecondition).
//
// The allocator knows nothing of streams: a freed block may be handed out again at once, while
// queued work may still use it. That is safe when every use of the memory is ordered on one
// stream, as in the CUDA backend.
//
// Thread-safe. The raw functions are called with the allocator's lock held. The destructor
// releases every block it holds, cached or still in use.
//
// E.g.
//   CachingAllocator allocator(
//       [](size_t bytes) { return std::malloc(bytes); }, [](void* p) { std::free(p); });
//   void* a = allocator.Allocate(1000);    // raw allocation of 1024 bytes
//   allocator.Free(a).IgnoreError();
//   void* b = allocator.Allocate(1000);    // the same block, from the cache
#ifndef WEFT_WORKER_KERNELS_CUDA_CACHING_ALLOCATOR_H_
#define WEFT_WORKER_KERNELS_CUDA_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace weft {

struct CachingAllocatorStats {
  int64_t bytes_in_use = 0;        // blocks handed out and not freed (a reused block counts whole)
  int64_t bytes_reserved = 0;      // held from the raw allocator: in use plus cached
  int64_t peak_bytes_in_use = 0;   // the most bytes_in_use has been (since ResetPeakBytesInUse)
  int64_t raw_allocations = 0;     // successful raw allocations
  int64_t raw_frees = 0;           // blocks given back to the raw allocator
  int64_t cache_hits = 0;          // requests served from the cache
  int64_t failed_allocations = 0;  // requests answered with null
  int64_t bad_frees = 0;           // frees of unknown or already freed pointers
};

class CachingAllocator {
 public:
  using RawAllocate = std::function<void*(size_t bytes)>;  // null when out of memory
  using RawFree = std::function<void(void* p)>;

  static constexpr size_t kGranularity = 512;  // every block size is a multiple of this

  CachingAllocator(RawAllocate raw_allocate, RawFree raw_free);
  ~CachingAllocator();

  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes`, or null when the raw allocator has no more to give.
  void* Allocate(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns p's block to the cache.
  absl::Status Free(void* p) ABSL_LOCKS_EXCLUDED(mu_);
  // Gives every cached block back to the raw allocator; blocks in use stay.
  void EmptyCache() ABSL_LOCKS_EXCLUDED(mu_);

  CachingAllocatorStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // Sets stats().peak_bytes_in_use to the bytes in use now, to measure the peak of what follows.
  void ResetPeakBytesInUse() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Block {
    size_t size = 0;  // rounded
    bool in_use = false;
  };

  void ReleaseCachedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteInUseLocked(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RawAllocate raw_allocate_;
  const RawFree raw_free_;

  mutable absl::Mutex mu_;
  // Every block held from the raw allocator, by address.
  std::unordered_map<void*, Block> blocks_ ABSL_GUARDED_BY(mu_);
  // The cached (free) blocks by size; equal sizes in the order they were freed.
  std::multimap<size_t, void*> cached_ ABSL_GUARDED_BY(mu_);
  CachingAllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace weft

#endif  // WEFT_WORKER_KERNELS_CUDA_CACHING_ALLOCATOR_H_
