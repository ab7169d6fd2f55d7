#include "runtime/page_blocks.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "common/env_switch.h"

namespace ferry {

void* map_fresh_pages(size_t bytes, bool huge) {
  if (!huge) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? nullptr : m;
  }
  // Over-map by one huge page and cut the unaligned ends off.
  const size_t span = bytes + PageBlocks::kHugePage;
  void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  auto* raw = static_cast<uint8_t*>(m);
  const uintptr_t a = reinterpret_cast<uintptr_t>(raw);
  auto* base = reinterpret_cast<uint8_t*>((a + PageBlocks::kHugePage - 1) & ~(uintptr_t{PageBlocks::kHugePage} - 1));
  if (base > raw) munmap(raw, static_cast<size_t>(base - raw));
  const size_t tail = static_cast<size_t>(raw + span - (base + bytes));
  if (tail) munmap(base + bytes, tail);
  ::madvise(base, bytes, MADV_HUGEPAGE);
  return base;
}

bool page_reuse_enabled() {
  static const bool on = [] {
    const char* e = env_value("FERRY_ARENA_REUSE");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

bool huge_pages_allowed() {
  static const bool on = [] {
    const char* e = env_value("FERRY_ARENA_HUGEPAGES");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

PageBlocks::PageBlocks(Huge huge) : huge_(huge) {}

PageBlocks::~PageBlocks() {
  for (Pool* pool : {&huge_pool_, &small_pool_})
    for (const auto& [size, p] : pool->free) munmap(p, size);
}

size_t PageBlocks::rounded(size_t bytes) const {
  const size_t g = whole(bytes) ? kHugePage : kPage;
  return (bytes + g - 1) / g * g;
}

size_t PageBlocks::kept_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return huge_pool_.bytes + small_pool_.bytes;
}

size_t PageBlocks::kept_blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return huge_pool_.free.size() + small_pool_.free.size();
}

// Moves kept blocks of `pool` (largest first, the last one split) to [base, base + n), over the
// fresh pages there. A block is always one mapping of its own (take() records the pieces of what
// it assembles and give() keeps them apart), so mremap can move it whole.
size_t PageBlocks::fill(uint8_t* base, size_t n, Pool& pool, std::vector<size_t>* pieces) {
  size_t off = 0;
  while (off < n && !pool.free.empty()) {
    auto it = std::prev(pool.free.end());
    const size_t s = it->first;
    uint8_t* p = it->second;
    const size_t use = std::min(s, n - off);
    if (mremap(p, use, use, MREMAP_MAYMOVE | MREMAP_FIXED, base + off) == MAP_FAILED) break;  // the rest stays fresh
    pool.free.erase(it);
    pool.bytes -= s;
    if (use < s) {
      pool.free.emplace(s - use, p + use);
      pool.bytes += s - use;
    }
    pieces->push_back(use);
    off += use;
  }
  return off;
}

void* PageBlocks::take(size_t bytes, size_t* mapped, bool* reused) {
  const bool w = whole(bytes);
  const size_t n = rounded(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  Pool& pool = w ? huge_pool_ : small_pool_;
  auto it = pool.free.lower_bound(n);
  if (it != pool.free.end()) {  // the smallest block that fits; its tail stays kept
    const size_t s = it->first;
    uint8_t* p = it->second;
    pool.free.erase(it);
    pool.bytes -= s;
    if (s > n) {
      pool.free.emplace(s - n, p + n);
      pool.bytes += s - n;
    }
    pieces_.erase(p);  // p is one mapping: no stale pieces of a region unmapped elsewhere
    *mapped = n;
    *reused = true;
    return p;
  }
  auto* base = static_cast<uint8_t*>(map_fresh_pages(n, w));
  if (!base) return nullptr;
  std::vector<size_t> pieces;
  size_t filled = fill(base, n, pool, &pieces);
  if (w && filled < n) filled += fill(base + filled, n - filled, small_pool_, &pieces);  // 4 KiB pages at the end
  if (filled < n) pieces.push_back(n - filled);  // the fresh rest
  if (pieces.size() > 1) pieces_[base] = std::move(pieces);
  else pieces_.erase(base);
  *mapped = n;
  *reused = filled > 0;
  return base;
}

void PageBlocks::keep(uint8_t* p, size_t size) {
  const bool aligned = reinterpret_cast<uintptr_t>(p) % kHugePage == 0 && size % kHugePage == 0;
  Pool& pool = huge_ == Huge::kWhole && aligned ? huge_pool_ : small_pool_;
  pool.free.emplace(size, p);
  pool.bytes += size;
}

void PageBlocks::give(void* p, size_t mapped) {
  auto* base = static_cast<uint8_t*>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pieces_.find(base);
  if (it == pieces_.end()) {
    keep(base, mapped);
    return;
  }
  size_t off = 0;
  for (size_t s : it->second) keep(base + off, s), off += s;
  pieces_.erase(it);
}

void PageBlocks::trim(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t left = bytes;
  for (Pool* pool : {&huge_pool_, &small_pool_}) {
    std::multimap<size_t, uint8_t*> kept;
    size_t kept_bytes = 0;
    for (auto it = pool->free.rbegin(); it != pool->free.rend(); ++it) {
      const size_t s = it->first;
      uint8_t* p = it->second;
      const size_t g = pool == &huge_pool_ ? kHugePage : kPage;
      const size_t use = std::min(s, (left + g - 1) / g * g);
      if (use < s) munmap(p + use, s - use);
      if (use) kept.emplace(use, p), kept_bytes += use;
      left -= std::min(left, use);
    }
    pool->free = std::move(kept);
    pool->bytes = kept_bytes;
  }
}

}  // namespace ferry
