// The per-shape plan cache and per-run scratch memory shared by the cpu backend's oneDNN kernels.
//
// A kernel makes a plan (primitives, descriptors) once per input shape and keeps it; plans are
// immutable once made, so concurrent runs of one loaded model execute the same plan at the same
// time. Only the cache's lookup and a new plan's creation take the lock. What a run writes
// (oneDNN's scratchpad, layout-change buffers) lives in the calling thread's scratch slots: a run
// executes its nodes one after another on one thread, so each run owns its slots, and they are
// reused by every node of every later run on that thread (no allocation on the run path once warm).
#pragma once

#include <dnnl.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace ferry::cpu {

/// Plans keyed by the input dims (and whatever else the kernel folds into the key).
template <class Plan>
class PlanCache {
 public:
  using Maker = std::function<Status(const std::vector<int64_t>& key, Plan* plan)>;

  /// The plan for `key`, made with `make` on first use. The pointer stays valid for the cache's life.
  StatusOr<const Plan*> get(const std::vector<int64_t>& key, const Maker& make) {
    // The entry found last, checked without the lock: a node nearly always sees one shape, and
    // the run path then takes neither the lock nor the map walk (entries are never erased, and
    // one is published only once its plan is made).
    if (const Entry* e = last_.load(std::memory_order_acquire); e && e->first == key) return static_cast<const Plan*>(e->second.get());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      auto plan = std::make_unique<Plan>();
      RETURN_IF_ERROR(make(key, plan.get()));
      it = plans_.emplace(key, std::move(plan)).first;
    }
    last_.store(&*it, std::memory_order_release);
    return static_cast<const Plan*>(it->second.get());
  }

 private:
  using Entry = std::pair<const std::vector<int64_t>, std::unique_ptr<Plan>>;
  std::mutex mu_;
  std::map<std::vector<int64_t>, std::unique_ptr<Plan>> plans_;
  std::atomic<const Entry*> last_{nullptr};
};

/// Scratch slots of the calling thread, one per role within a primitive's execution.
enum class ScratchSlot { kScratchpad = 0, kSrc = 1, kDst = 2, kSplit = 3 };  // kSplit: the int8 conv/matmul's doubled source
constexpr int kScratchSlots = 4;

/// A oneDNN memory of `desc` over the calling thread's slot (grown when too small). Valid until the
/// thread's next call for the same slot; an empty desc gives an empty memory.
dnnl::memory scratch_memory(const dnnl::memory::desc& desc, ScratchSlot slot);

/// The calling thread's slot as raw memory of at least `bytes` (grown when too small; nullptr for 0
/// bytes), for a kernel that keeps its own oneDNN memory objects and only re-points them.
void* scratch_data(size_t bytes, ScratchSlot slot);

/// Primitive attributes with a user-managed scratchpad (pass scratch_memory(pd.scratchpad_desc(),
/// kScratchpad) as DNNL_ARG_SCRATCHPAD), which makes a primitive safe to execute concurrently.
dnnl::primitive_attr concurrent_attr();

}  // namespace ferry::cpu
