// Caching allocator bookkeeping (see caching_allocator.h).
#include "backends/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace ferry {

struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  size_t requested = 0;
  bool free = true;
  bool small = false;
  Block* prev = nullptr;  // neighbours inside the same segment
  Block* next = nullptr;
};

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

double AllocatorStats::fragmentation() const {
  if (cached_free_bytes <= 0) return 0.0;
  return 1.0 - static_cast<double>(largest_free_block) / static_cast<double>(cached_free_bytes);
}

std::string AllocatorStats::to_string() const {
  char buf[320];
  auto mib = [](int64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); };
  std::snprintf(buf, sizeof(buf),
                "allocated %.1f MiB (peak %.1f), reserved %.1f MiB (peak %.1f) in %lld segments, "
                "cached free %.1f MiB, fragmentation %.2f, %lld allocs (%lld from cache, %lld device)",
                mib(allocated_bytes), mib(peak_allocated_bytes), mib(reserved_bytes), mib(peak_reserved_bytes),
                static_cast<long long>(num_segments), mib(cached_free_bytes), fragmentation(),
                static_cast<long long>(num_allocs), static_cast<long long>(num_cache_hits),
                static_cast<long long>(num_device_allocs));
  return buf;
}

CachingAllocator::~CachingAllocator() {
  // Blocks still in use at destruction belong to tensors outliving the backend; their segments
  // are freed anyway (the device context is going away with the backend).
  std::vector<Block*> heads;
  for (Block* b : all_blocks_)
    if (!b->prev) heads.push_back(b);
  for (Block* b : heads) provider_->raw_free(b->ptr);
  for (Block* b : all_blocks_) delete b;
}

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kGranule;
  if (bytes <= kSmallLimit) return (bytes + kGranule - 1) / kGranule * kGranule;
  return (bytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

CachingAllocator::Block* CachingAllocator::take_segment(size_t rounded) {
  const bool small = rounded <= kSmallLimit;
  const size_t seg = small ? kSmallSegment : rounded;
  void* p = provider_->raw_alloc(seg);
  if (!p) {
    ++stats_.num_oom_retries;
    release_free_segments();
    p = provider_->raw_alloc(seg);
    if (!p) return nullptr;
  }
  Block* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = seg;
  b->small = small;
  all_blocks_.insert(b);
  ++stats_.num_device_allocs;
  ++stats_.num_segments;
  stats_.reserved_bytes += static_cast<int64_t>(seg);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return b;
}

CachingAllocator::Block* CachingAllocator::split(Block* b, size_t rounded, FreeSet& pool) {
  const size_t rest = b->size - rounded;
  // Small blocks split down to a granule; a large block's remainder is kept when it could serve
  // another large request (remainders are whole 2 MiB granules).
  const size_t min_rest = b->small ? kGranule : kSmallLimit;
  if (rest >= min_rest) {
    Block* r = new Block;
    r->ptr = b->ptr + rounded;
    r->size = rest;
    r->small = b->small;
    r->prev = b;
    r->next = b->next;
    if (b->next) b->next->prev = r;
    b->next = r;
    b->size = rounded;
    all_blocks_.insert(r);
    pool.insert(r);
  }
  return b;
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t rounded = round_size(bytes);
  FreeSet& pool = pool_for(rounded);
  Block key;
  key.size = rounded;
  key.ptr = nullptr;
  Block* b = nullptr;
  auto it = pool.lower_bound(&key);
  if (it != pool.end()) {
    b = *it;
    pool.erase(it);
    ++stats_.num_cache_hits;
  } else {
    b = take_segment(rounded);
    if (!b) return nullptr;
  }
  b = split(b, rounded, pool);
  b->free = false;
  b->requested = bytes;
  in_use_[b->ptr] = b;
  ++stats_.num_allocs;
  stats_.allocated_bytes += static_cast<int64_t>(b->size);
  stats_.requested_bytes += static_cast<int64_t>(bytes);
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  update_free_stats();
  return b->ptr;
}

void CachingAllocator::free(void* ptr) {
  if (!ptr) return;
  auto it = in_use_.find(ptr);
  if (it == in_use_.end()) {
    ++unknown_frees_;
    return;
  }
  Block* b = it->second;
  in_use_.erase(it);
  stats_.allocated_bytes -= static_cast<int64_t>(b->size);
  stats_.requested_bytes -= static_cast<int64_t>(b->requested);
  b->free = true;
  b->requested = 0;
  FreeSet& pool = b->small ? small_free_ : large_free_;
  // Merge with free neighbours of the same segment.
  if (b->prev && b->prev->free) {
    Block* p = b->prev;
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    all_blocks_.erase(b);
    delete b;
    b = p;
  }
  if (b->next && b->next->free) {
    Block* n = b->next;
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    all_blocks_.erase(n);
    delete n;
  }
  pool.insert(b);
  update_free_stats();
}

void CachingAllocator::release_free_segments() {
  for (FreeSet* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      provider_->raw_free(b->ptr);
      ++stats_.num_device_frees;
      --stats_.num_segments;
      stats_.reserved_bytes -= static_cast<int64_t>(b->size);
      it = pool->erase(it);
      all_blocks_.erase(b);
      delete b;
    }
  }
  update_free_stats();
}

void CachingAllocator::empty_cache() { release_free_segments(); }

void CachingAllocator::update_free_stats() {
  stats_.cached_free_bytes = stats_.reserved_bytes - stats_.allocated_bytes;
  int64_t largest = 0;
  if (!small_free_.empty()) largest = std::max<int64_t>(largest, static_cast<int64_t>((*small_free_.rbegin())->size));
  if (!large_free_.empty()) largest = std::max<int64_t>(largest, static_cast<int64_t>((*large_free_.rbegin())->size));
  stats_.largest_free_block = largest;
}

}  // namespace ferry
