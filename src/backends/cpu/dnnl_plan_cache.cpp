// Per-thread scratch slots for the oneDNN kernels; see dnnl_plan_cache.h.
#include "backends/cpu/dnnl_plan_cache.h"

#include <cstdlib>

#include "backends/cpu/dnnl_util.h"

namespace ferry::cpu {
namespace {

// One growable, 64-byte-aligned buffer.
struct ScratchBuffer {
  void* data = nullptr;
  size_t size = 0;
  ~ScratchBuffer() { std::free(data); }
  void* reserve(size_t bytes) {
    if (bytes <= size) return data;
    std::free(data);
    size = (bytes + 63) / 64 * 64;
    data = std::aligned_alloc(64, size);
    if (!data) {
      size = 0;
      throw dnnl::error(dnnl_out_of_memory, "scratch buffer allocation failed");
    }
    return data;
  }
};

}  // namespace

void* scratch_data(size_t bytes, ScratchSlot slot) {
  thread_local ScratchBuffer slots[kScratchSlots];
  return bytes == 0 ? nullptr : slots[static_cast<int>(slot)].reserve(bytes);
}

dnnl::memory scratch_memory(const dnnl::memory::desc& desc, ScratchSlot slot) {
  return dnnl::memory(desc, dnnl_engine(), scratch_data(desc.get_size(), slot));
}

dnnl::primitive_attr concurrent_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

}  // namespace ferry::cpu
