// The CUDA backend's caching allocator bookkeeping, run against a fake device (no GPU needed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <vector>

#include "backends/cuda/caching_allocator.h"

namespace ferry {
namespace {

/// Host memory standing in for a device with `capacity` bytes.
class FakeDevice : public DeviceMemoryProvider {
 public:
  explicit FakeDevice(size_t capacity) : capacity_(capacity) {}
  ~FakeDevice() override { EXPECT_TRUE(live_.empty()) << live_.size() << " segments leaked"; }
  void* raw_alloc(size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    void* p = std::aligned_alloc(256, bytes);
    live_[p] = bytes;
    used_ += bytes;
    ++allocs;
    return p;
  }
  void raw_free(void* p) override {
    auto it = live_.find(p);
    ASSERT_NE(it, live_.end()) << "freed a pointer the device never gave";
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
  }
  size_t used() const { return used_; }
  int allocs = 0;

 private:
  size_t capacity_;
  size_t used_ = 0;
  std::map<void*, size_t> live_;
};

constexpr size_t kMiB = size_t{1} << 20;

TEST(CudaAllocator, RoundsToSizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(kMiB), kMiB);
  EXPECT_EQ(CachingAllocator::round_size(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(5 * kMiB), 6 * kMiB);
}

TEST(CudaAllocator, SmallBlocksShareASegmentAndAreReused) {
  FakeDevice dev(64 * kMiB);
  {
    CachingAllocator a(&dev);
    void* p = a.allocate(1000);
    void* q = a.allocate(3000);
    ASSERT_NE(p, nullptr);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(dev.allocs, 1);  // one 2 MiB segment serves both
    EXPECT_EQ(static_cast<char*>(q) - static_cast<char*>(p), 1024);
    EXPECT_EQ(a.stats().allocated_bytes, 1024 + 3072);
    EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(2 * kMiB));
    a.free(p);
    void* r = a.allocate(900);  // best fit: the freed 1 KiB block
    EXPECT_EQ(r, p);
    EXPECT_EQ(dev.allocs, 1);
    a.free(q);
    a.free(r);
    EXPECT_EQ(a.stats().allocated_bytes, 0);
    EXPECT_EQ(a.stats().peak_allocated_bytes, 1024 + 3072);
    // Everything merged back into one free segment: no fragmentation.
    EXPECT_EQ(a.stats().largest_free_block, static_cast<int64_t>(2 * kMiB));
    EXPECT_DOUBLE_EQ(a.stats().fragmentation(), 0.0);
    a.empty_cache();
    EXPECT_EQ(a.stats().reserved_bytes, 0);
    EXPECT_EQ(dev.used(), 0u);
  }
}

TEST(CudaAllocator, LargeBlocksSplitAndMerge) {
  FakeDevice dev(256 * kMiB);
  CachingAllocator a(&dev);
  void* big = a.allocate(10 * kMiB);
  ASSERT_NE(big, nullptr);
  a.free(big);
  void* x = a.allocate(3 * kMiB);  // 4 MiB carved from the cached 10 MiB block
  void* y = a.allocate(5 * kMiB);  // 6 MiB: the rest of it
  EXPECT_EQ(dev.allocs, 1);
  EXPECT_EQ(x, big);
  EXPECT_EQ(static_cast<char*>(y) - static_cast<char*>(x), static_cast<ptrdiff_t>(4 * kMiB));
  a.free(x);
  // 4 MiB free, 6 MiB used: one free block, no fragmentation; a 6 MiB request needs the device.
  EXPECT_DOUBLE_EQ(a.stats().fragmentation(), 0.0);
  void* z = a.allocate(6 * kMiB);
  EXPECT_EQ(dev.allocs, 2);
  a.free(y);
  a.free(z);
  EXPECT_EQ(a.stats().num_segments, 2);
  EXPECT_EQ(a.stats().cached_free_bytes, static_cast<int64_t>(16 * kMiB));
  a.empty_cache();
  EXPECT_EQ(dev.used(), 0u);
}

TEST(CudaAllocator, FragmentationIsReported) {
  FakeDevice dev(64 * kMiB);
  CachingAllocator a(&dev);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(a.allocate(256 * 1024));
  // Free every other block: 4 free holes of 256 KiB plus the segment's tail.
  for (int i = 0; i < 8; i += 2) a.free(blocks[i]);
  const AllocatorStats& s = a.stats();
  EXPECT_EQ(s.cached_free_bytes, static_cast<int64_t>(2 * kMiB - 4 * 256 * 1024));
  EXPECT_GT(s.fragmentation(), 0.0);
  EXPECT_LT(s.fragmentation(), 1.0);
  EXPECT_NE(s.to_string().find("fragmentation"), std::string::npos);
  for (int i = 1; i < 8; i += 2) a.free(blocks[i]);
  EXPECT_DOUBLE_EQ(a.stats().fragmentation(), 0.0);
}

TEST(CudaAllocator, OutOfMemoryFreesTheCacheAndRetries) {
  FakeDevice dev(20 * kMiB);
  CachingAllocator a(&dev);
  void* p = a.allocate(12 * kMiB);
  ASSERT_NE(p, nullptr);
  a.free(p);  // cached, still reserved
  void* q = a.allocate(14 * kMiB);  // does not fit beside the cached 12 MiB: cache released, retried
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(a.stats().num_oom_retries, 1);
  EXPECT_EQ(a.stats().reserved_bytes, static_cast<int64_t>(14 * kMiB));
  EXPECT_EQ(a.allocate(30 * kMiB), nullptr);  // larger than the device: nullptr, no crash
  a.free(q);
}

TEST(CudaAllocator, UnknownFreeIsCountedNotFatal) {
  FakeDevice dev(8 * kMiB);
  CachingAllocator a(&dev);
  int x = 0;
  a.free(&x);
  a.free(nullptr);
  EXPECT_EQ(a.unknown_frees(), 1);
}

}  // namespace
}  // namespace ferry
