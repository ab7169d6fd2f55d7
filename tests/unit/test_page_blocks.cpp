// Kept pages (runtime/page_blocks.h, issue 18): a released block is reused by the next request
// that fits, a larger request is assembled from kept blocks (moved, keeping their contents, with no
// new page faults), and the arena bound after a recording run is built from the run's pages.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "runtime/arena.h"
#include "runtime/page_blocks.h"

namespace ferry {
namespace {

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Whether [p, p + n) is mapped at all (mincore fails with ENOMEM on unmapped pages).
bool mapped(const void* p, size_t n) {
  std::vector<unsigned char> v(n / 4096 + 1);
  return mincore(const_cast<void*>(p), n, v.data()) == 0 || errno != ENOMEM;
}

// Writes one byte per 4 KiB page; returns the page faults that took.
long touch(void* p, size_t n, unsigned char value) {
  const long before = minor_faults();
  auto* b = static_cast<volatile unsigned char*>(p);
  for (size_t i = 0; i < n; i += 4096) b[i] = value;
  return minor_faults() - before;
}

constexpr size_t kMiB = size_t{1} << 20;

// The faults of writing `n` bytes of fresh 4 KiB pages here (a sanitizer's shadow pages included).
long fresh_faults(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  const long f = touch(p, n, 1);
  munmap(p, n);
  return f;
}

TEST(PageBlocks, ReleasedBlockIsReusedByTheNextThatFits) {
  PageBlocks pb(PageBlocks::Huge::kNone);
  size_t m = 0;
  bool reused = true;
  void* a = pb.take(8 * kMiB, &m, &reused);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(m, 8 * kMiB);
  EXPECT_FALSE(reused);
  EXPECT_GE(touch(a, m, 1), 1024);  // fresh 4 KiB pages: a fault each (some may be merged)
  pb.give(a, m);
  EXPECT_EQ(pb.kept_bytes(), 8 * kMiB);
  size_t m2 = 0;
  void* b = pb.take(5 * kMiB + 100, &m2, &reused);  // the kept block, split: its tail stays kept
  EXPECT_EQ(b, a);
  EXPECT_TRUE(reused);
  EXPECT_EQ(m2 % 4096, 0u);
  EXPECT_EQ(pb.kept_bytes(), 8 * kMiB - m2);
  EXPECT_LT(touch(b, m2, 2), fresh_faults(m2) / 4);
  pb.give(b, m2);
}

TEST(PageBlocks, LargerRequestIsAssembledFromKeptBlocksWithoutFaults) {
  PageBlocks pb(PageBlocks::Huge::kNone);
  size_t ma = 0, mb = 0, mc = 0;
  bool reused = false;
  auto* a = static_cast<unsigned char*>(pb.take(4 * kMiB, &ma, &reused));
  auto* b = static_cast<unsigned char*>(pb.take(2 * kMiB, &mb, &reused));
  ASSERT_TRUE(a && b);
  std::memset(a, 0xA1, ma);
  std::memset(b, 0xB2, mb);
  pb.give(b, mb);
  pb.give(a, ma);
  auto* c = static_cast<unsigned char*>(pb.take(7 * kMiB, &mc, &reused));
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(reused);
  EXPECT_EQ(pb.kept_bytes(), 0u);
  // Largest first: a's pages, then b's, then 1 MiB of fresh (zero) pages.
  EXPECT_EQ(c[0], 0xA1);
  EXPECT_EQ(c[4 * kMiB - 1], 0xA1);
  EXPECT_EQ(c[4 * kMiB], 0xB2);
  EXPECT_EQ(c[6 * kMiB - 1], 0xB2);
  EXPECT_EQ(c[6 * kMiB], 0);
  EXPECT_FALSE(mapped(a, ma)) << "a was moved, not copied";
  const long fresh = fresh_faults(6 * kMiB);
  EXPECT_GE(fresh, 6 * 128);
  EXPECT_LT(touch(c, 6 * kMiB, 3), fresh / 4);   // moved pages: no faults
  EXPECT_GE(touch(c + 6 * kMiB, kMiB, 3), 128);  // the fresh rest faults
  // Given back, it splits into the pieces it was made of (each one mapping, movable alone).
  pb.give(c, mc);
  EXPECT_EQ(pb.kept_blocks(), 3u);
  EXPECT_EQ(pb.kept_bytes(), 7 * kMiB);
  pb.trim(5 * kMiB);  // keeps the largest: 4 MiB, then 1 MiB of the next
  EXPECT_EQ(pb.kept_bytes(), 5 * kMiB);
  pb.trim(0);
  EXPECT_EQ(pb.kept_bytes(), 0u);
  EXPECT_FALSE(mapped(c, 7 * kMiB));
}

TEST(PageBlocks, WholeHugePagesStayAligned) {
  PageBlocks pb(PageBlocks::Huge::kWhole);
  size_t m = 0, ms = 0;
  bool reused = false;
  void* a = pb.take(15 * kMiB + 1, &m, &reused);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(m, 16 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % PageBlocks::kHugePage, 0u);
  void* s = pb.take(3 * kMiB + 1, &ms, &reused);  // 4 MiB would add a third: 4 KiB pages
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(ms, 3 * kMiB + 4096);
  pb.give(a, m);
  pb.give(s, ms);
  size_t m2 = 0;
  void* b = pb.take(20 * kMiB, &m2, &reused);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % PageBlocks::kHugePage, 0u);
  EXPECT_EQ(m2, 20 * kMiB);
  EXPECT_TRUE(reused);
  EXPECT_EQ(pb.kept_bytes(), 0u);  // the huge block at the front, the small one after it
  munmap(b, m2);
}

// A recording run's large tensors reuse each other's pages; the arena bound afterwards is built
// from them: binding and writing every planned tensor faults (almost) nothing in.
TEST(PageBlocks, ArenaAfterRecordingReusesTheRunsPages) {
  auto blocks = std::make_shared<PageBlocks>(PageBlocks::Huge::kNone);
  Node node;
  node.op_type = "Conv";
  std::vector<const Value*> inputs;
  const int64_t n = 1 << 20;  // 4 MiB of f32
  std::shared_ptr<const ArenaPlan> plan;
  const void* first = nullptr;
  {
    AllocationRecorder rec(4, blocks);
    Tensor t[4];
    for (int32_t s = 0; s < 4; ++s) {
      rec.begin_step(s, node, &inputs);
      std::vector<int64_t> dims = {n};
      ASSERT_TRUE(rec.allocate(0, DType::kF32, &dims, true, &t[s]));
      if (s == 0) first = t[s].raw();
      if (s == 2) {
        EXPECT_EQ(t[s].raw(), first) << "step 2 reuses step 0's pages";
      }
      for (int64_t i = 0; i < n; i += 1024) EXPECT_EQ(t[s].data<float>()[i], 0.f) << "zero_fill over reused pages";
      std::memset(t[s].mutable_raw(), 0x7F, static_cast<size_t>(n) * 4);
      if (s >= 1) t[s - 1] = Tensor();  // a chain: each tensor dies when the next is made
    }
    t[3] = Tensor();
    plan = rec.finish();
    ASSERT_EQ(plan->allocs.size(), 4u);
    EXPECT_EQ(plan->arena_bytes, 2 * n * 4);  // two buffers take turns
    EXPECT_EQ(rec.take_blocks(plan->arena_bytes).get(), blocks.get());
  }
  EXPECT_EQ(blocks->kept_bytes(), static_cast<size_t>(2 * n * 4));
  const uint8_t* range = nullptr;
  {
    const long fresh = fresh_faults(static_cast<size_t>(2 * n * 4));
    ArenaAllocator arena;
    arena.set_spare(blocks);
    blocks.reset();
    const long before = minor_faults();
    ASSERT_TRUE(arena.bind(plan).is_ok());
    for (int32_t s = 0; s < 4; ++s) {
      arena.begin_step(s);
      std::vector<int64_t> dims = {n};
      Tensor t;
      ASSERT_TRUE(arena.allocate(0, DType::kF32, &dims, false, &t));
      if (!range) range = static_cast<const uint8_t*>(t.raw());
      EXPECT_TRUE(arena.contains(t.raw()));
      std::memset(t.mutable_raw(), s, static_cast<size_t>(n) * 4);
      t = Tensor();
      EXPECT_TRUE(arena.end_step(s));
    }
    EXPECT_LT(minor_faults() - before, fresh / 4) << "8 MiB of fresh pages would be " << fresh << " faults";
    EXPECT_FALSE(mapped(first, 4096)) << "the recording run's pages were moved into the arena, not left beside it";
  }
  EXPECT_FALSE(mapped(range, 2 * n * 4)) << "the arena is unmapped with its allocator";
}

}  // namespace
}  // namespace ferry
