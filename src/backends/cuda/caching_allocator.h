// The caching device allocator's bookkeeping, separate from the device calls so it is tested on
// machines without a GPU (tests/unit/test_cuda_allocator.cpp) and reused for any device.
//
// Requests are rounded to size classes (512 B granules; 2 MiB granules above 1 MiB). Small blocks
// (<= 1 MiB) are carved out of 2 MiB segments, large ones out of segments of their own rounded
// size. A freed block goes back to its pool's free set (best fit, split when the remainder is
// worth keeping, merged with free neighbours of the same segment); memory returns to the device
// only through empty_cache(), or when a device allocation fails (then every free segment is
// released and the allocation retried once).
//
// Not thread-safe; one allocator per backend instance, used from the thread that runs the
// executor. All blocks are used on one stream, so a freed block is reusable at once (stream order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

namespace ferry {

/// Where segments come from (cudaMalloc / cudaFree on a GPU, a fake in tests).
class DeviceMemoryProvider {
 public:
  virtual ~DeviceMemoryProvider() = default;
  /// Returns nullptr when the device has no room (not an error: the allocator frees its cache
  /// and retries once).
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr) = 0;
};

struct AllocatorStats {
  int64_t allocated_bytes = 0;       // in blocks handed out (rounded sizes)
  int64_t requested_bytes = 0;       // as asked by callers
  int64_t reserved_bytes = 0;        // in segments taken from the device
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t cached_free_bytes = 0;     // reserved - allocated
  int64_t largest_free_block = 0;
  int64_t num_segments = 0;
  int64_t num_allocs = 0;            // allocate() calls that succeeded
  int64_t num_cache_hits = 0;        // served from a cached block without a device call
  int64_t num_device_allocs = 0;     // segments taken from the device
  int64_t num_device_frees = 0;
  int64_t num_oom_retries = 0;       // device allocations retried after freeing the cache
  /// 1 - largest_free_block / cached_free_bytes: 0 when the free memory is one block (or none),
  /// near 1 when it is scattered in pieces too small for a large request.
  double fragmentation() const;
  /// One line for `ferry doctor` / profile reports.
  std::string to_string() const;
};

class CachingAllocator {
 public:
  static constexpr size_t kGranule = 512;
  static constexpr size_t kSmallLimit = size_t{1} << 20;      // requests up to this share segments
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  static constexpr size_t kLargeGranule = size_t{2} << 20;

  explicit CachingAllocator(DeviceMemoryProvider* provider) : provider_(provider) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A device pointer of at least `bytes` (256-byte aligned when the provider's are), or nullptr
  /// when the device has no room even after freeing the cache. bytes == 0 gives a granule.
  void* allocate(size_t bytes);
  /// Returns a block from allocate(); unknown pointers are ignored and counted (never a crash).
  void free(void* ptr);
  /// Gives every segment with no block in use back to the device.
  void empty_cache();
  const AllocatorStats& stats() const { return stats_; }
  /// Requests the allocator does not know (free of a foreign pointer); a bug if ever non-zero.
  int64_t unknown_frees() const { return unknown_frees_; }

  /// Rounded size a request of `bytes` uses.
  static size_t round_size(size_t bytes);

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using FreeSet = std::set<Block*, BySize>;

  FreeSet& pool_for(size_t rounded) { return rounded <= kSmallLimit ? small_free_ : large_free_; }
  Block* take_segment(size_t rounded);
  Block* split(Block* b, size_t rounded, FreeSet& pool);
  void release_free_segments();
  void update_free_stats();

  DeviceMemoryProvider* provider_;
  FreeSet small_free_;
  FreeSet large_free_;
  std::unordered_map<void*, Block*> in_use_;
  std::set<Block*> all_blocks_;  // owner of every Block
  AllocatorStats stats_;
  int64_t unknown_frees_ = 0;
};

}  // namespace ferry
