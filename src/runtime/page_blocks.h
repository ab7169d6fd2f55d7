// Freed anonymous mappings kept mapped for reuse (issue 18). First-touching a page costs a fault
// (several microseconds each on a VM), so the recording run (arena.h) takes its large tensors
// from here and gives them back when released: a later tensor reuses pages already touched, and
// the run touches about its peak instead of the sum of its tensors. When the arena of the next
// runs is made, the kept blocks are moved into it with mremap (page tables move, no new faults)
// and only the rest of it is fresh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ferry {

class PageBlocks {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kPage = size_t{4} << 10;

  enum class Huge {
    kNone,   // multiples of 4 KiB, no transparent huge pages
    kWhole,  // requests of 2 MiB or more (and within an eighth of a multiple of 2 MiB: whole())
             // are 2 MiB aligned multiples of 2 MiB, marked for
             // transparent huge pages, and stay so when moved; smaller ones multiples of 4 KiB.
             // (Huge pages split at 4 KiB offsets instead went onto the kernel's deferred split
             // list, whose shrinker dropped their zero-filled 4 KiB parts: ResNet-50 training
             // then faulted ~20K pages back in every step, 4x slower steps.)
  };
  explicit PageBlocks(Huge huge);
  ~PageBlocks();  // unmaps every kept block
  PageBlocks(const PageBlocks&) = delete;
  PageBlocks& operator=(const PageBlocks&) = delete;

  /// Mapped memory of at least `bytes` (*mapped: the rounded size, to pass back to give() or
  /// munmap). The smallest kept block that fits, else a new mapping whose front is filled with
  /// kept blocks (largest first, moved by mremap) and whose rest is fresh. *reused: whether any of
  /// it held earlier data (fresh pages read as zero). nullptr when mapping fails.
  void* take(size_t bytes, size_t* mapped, bool* reused);
  /// Keeps [p, p + mapped) (as returned by take()) for a later take().
  void give(void* p, size_t mapped);
  /// Unmaps the kept blocks beyond the first `bytes` (huge blocks first, largest first).
  void trim(size_t bytes);
  size_t kept_bytes() const;
  size_t kept_blocks() const;

  /// The rounded size of a request of `bytes`.
  size_t rounded(size_t bytes) const;

 private:
  struct Pool {
    std::multimap<size_t, uint8_t*> free;  // size -> start
    size_t bytes = 0;
  };
  // Whether a request is served in whole huge pages: at least 2 MiB, and rounding it up to them
  // adds at most an eighth (the rest would raise the recording run's peak RSS: a 3.2 MB tensor
  // in 4 MiB of huge pages is 25% more resident memory).
  bool whole(size_t bytes) const {
    return huge_ == Huge::kWhole && bytes >= kHugePage && (bytes + kHugePage - 1) / kHugePage * kHugePage - bytes <= bytes / 8;
  }
  size_t fill(uint8_t* base, size_t n, Pool& pool, std::vector<size_t>* pieces);
  void keep(uint8_t* p, size_t size);  // into the pool its alignment suits

  mutable std::mutex mu_;
  Huge huge_;
  Pool huge_pool_;   // 2 MiB aligned multiples of 2 MiB
  Pool small_pool_;  // multiples of 4 KiB
  // Regions take() assembled from several blocks: the sizes of their pieces, each one mapping,
  // kept apart again by give() (mremap moves a range within one mapping only).
  std::unordered_map<uint8_t*, std::vector<size_t>> pieces_;
};

/// Maps `bytes` of fresh anonymous memory; with huge: 2 MiB aligned and marked MADV_HUGEPAGE.
/// nullptr when it fails.
void* map_fresh_pages(size_t bytes, bool huge);

/// Whether the recording run and the arena go through PageBlocks (FERRY_ARENA_REUSE=0: each
/// recorded tensor is mapped and unmapped on its own, and the arena is fresh memory).
bool page_reuse_enabled();

/// False when FERRY_ARENA_HUGEPAGES=0 (no MADV_HUGEPAGE on the arena nor on PageBlocks).
bool huge_pages_allowed();

}  // namespace ferry
