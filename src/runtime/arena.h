// Arena memory for the main graph's tensors. The first run with a new set of input shapes runs
// on the heap under an AllocationRecorder, which notes every KernelContext::allocate_output
// (node step, output, size) and the step at which each buffer is really released (views and
// sequences that share it keep it alive, so aliasing is seen, not guessed). finish() turns
// that into an ArenaPlan (memory_plan.h); later runs with the same shapes take their outputs
// from one preallocated arena through an ArenaAllocator, with no heap allocation for them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "ir/value.h"
#include "ops/registry.h"
#include "runtime/memory_plan.h"

namespace ferry {

class PageBlocks;  // runtime/page_blocks.h

/// One output allocation the plan serves from the arena.
struct PlannedAllocation {
  int32_t step = 0;    // index of the node in the main graph
  int32_t output = 0;  // output index of that node
  int64_t nbytes = 0;
  int64_t offset = 0;  // in the arena
  bool in_place = false;  // shares an input's memory: never zero-filled
};

/// The memory plan for one set of input shapes.
struct ArenaPlan {
  std::vector<PlannedAllocation> allocs;  // in step order
  std::vector<int32_t> step_begin;        // allocs of step s: [step_begin[s], step_begin[s+1])
  std::vector<int32_t> dying;             // allocs released at step s: dying[dying_begin[s] .. dying_begin[s+1])
  std::vector<int32_t> dying_begin;
  int64_t arena_bytes = 0;
  int64_t planned_bytes = 0;    // sum of the planned tensors' (aligned) sizes
  int64_t in_place = 0;         // outputs written over a dead input
  int64_t unplanned_bytes = 0;  // allocations left on the heap (graph outputs, kept past the run)
  int64_t unplanned = 0;
};

/// Records one run's allocations (heap memory); install as KernelContext::allocator for the
/// main graph's nodes.
class AllocationRecorder : public OutputAllocator {
 public:
  /// blocks: where the large tensors are taken from and given back to while recording (they
  /// are mapped and unmapped one by one without).
  explicit AllocationRecorder(int32_t num_steps, std::shared_ptr<PageBlocks> blocks = nullptr);
  ~AllocationRecorder() override;
  /// Call before node `step` runs; `inputs` (the node's input values) must outlive the step.
  void begin_step(int32_t step, const Node& node, const std::vector<const Value*>* inputs);
  bool allocate(int64_t index, DType dtype, std::vector<int64_t>* dims, bool zero_fill, Tensor* out) override;
  bool allocate_over(int64_t index, int64_t input, DType dtype, std::vector<int64_t>* dims, Tensor* out) override;
  /// Ends recording (buffers still referenced now escape the plan) and builds the plan.
  std::shared_ptr<const ArenaPlan> finish();
  /// After finish(): the blocks the run gave back, trimmed to `keep_bytes` (the plan's arena: the
  /// rest is unmapped), for the arena of the next run (ArenaAllocator::set_spare). Tensors
  /// released from now on are unmapped.
  std::shared_ptr<PageBlocks> take_blocks(int64_t keep_bytes);

  struct State;  // shared with the buffers' release callbacks, which may outlive the recorder

 private:
  std::shared_ptr<State> state_;
  int32_t num_steps_;
  bool in_place_op_ = false;
  const std::vector<const Value*>* inputs_ = nullptr;
  bool record(int64_t index, int64_t over_input, bool elementwise, DType dtype, std::vector<int64_t>* dims, bool zero_fill, Tensor* out);
};

/// Serves a plan's allocations from an arena. One per concurrent run (not thread-safe).
class ArenaAllocator : public OutputAllocator {
 public:
  ArenaAllocator();
  ~ArenaAllocator() override;
  /// Uses `plan` for the next run: reuses the arena when nothing from an earlier run still
  /// references it and it is large enough, else makes a new one (out of memory: an error naming
  /// the arena's size, and nothing is bound).
  Status bind(std::shared_ptr<const ArenaPlan> plan);
  /// Whether a new arena is marked for transparent huge pages (default true; see ExecutorOptions).
  void set_huge_pages(bool on) { huge_pages_ = on; }
  bool huge_pages() const { return huge_pages_; }
  /// Pages touched by a recording run: the next bind() that needs a new arena builds it from
  /// them (moved, not faulted in again). Any bind() drops (unmaps) what it did not use.
  void set_spare(std::shared_ptr<PageBlocks> blocks) { spare_ = std::move(blocks); }
  std::shared_ptr<PageBlocks> take_spare() { return std::move(spare_); }
  void begin_step(int32_t step);
  bool allocate(int64_t index, DType dtype, std::vector<int64_t>* dims, bool zero_fill, Tensor* out) override;
  /// After the step's values are released: false when a tensor the plan releases at this step is
  /// still referenced. The caller then stops using the arena for the rest of the run (abandon()).
  bool end_step(int32_t step);
  /// Leaves the arena to whoever still references it; serves nothing until the next bind().
  void abandon();
  bool active() const { return active_; }
  /// Bytes of the arena bound now (0 when none: before the first bind, or once abandoned).
  int64_t bytes() const { return arena_ ? arena_bytes_ : 0; }
  /// Whether `p` points into the arena (a graph output that does must be copied out).
  bool contains(const void* p) const;

 private:
  struct Token;
  std::shared_ptr<const ArenaPlan> plan_;
  std::shared_ptr<uint8_t> arena_;
  int64_t arena_bytes_ = 0;
  std::vector<std::shared_ptr<Token>> tokens_;  // one per planned allocation: its references
  std::vector<uint8_t> served_;
  std::shared_ptr<PageBlocks> spare_;
  const uint8_t* range_begin_ = nullptr;  // the last arena bound (kept across abandon())
  const uint8_t* range_end_ = nullptr;
  int32_t step_ = 0;
  bool active_ = false;
  bool huge_pages_ = true;
};

}  // namespace ferry
