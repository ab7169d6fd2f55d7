// The static memory planner: given every planned tensor's size and lifetime (the executor
// steps that create and last read it), assigns arena offsets so tensors alive at the same
// time never overlap, and lets an elementwise node write its output over an input that dies
// at that node (in place).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

/// Arena offsets and sizes are multiples of this (cache line; what SIMD kernels want).
constexpr int64_t kArenaAlignment = 64;

/// One tensor the planner places in the arena.
struct BufferRequest {
  int64_t nbytes = 0;
  /// Step (node index) that allocates it, and the last step that reads it (>= first).
  int32_t first = 0;
  int32_t last = 0;
  /// Index of an earlier request whose memory this one may take over (in place), or -1.
  /// Taken only when legal (see plan_memory).
  int32_t reuse = -1;
};

struct MemoryPlan {
  /// Arena offset of each request (same order as the requests).
  std::vector<int64_t> offsets;
  /// For each request: true when it took over its `reuse` request's memory.
  std::vector<bool> in_place;
  /// Bytes the arena needs.
  int64_t arena_bytes = 0;
  /// Sum of every request's (aligned) size: what allocating each tensor separately would take.
  int64_t total_bytes = 0;
  int64_t in_place_count = 0;
};

/// Plans offsets. A request takes over its `reuse` request's memory only when that memory's
/// current holder was created at an earlier step, is last read at this request's first step,
/// and is at least as large. The placement is greedy by size (largest first, lowest offset
/// that overlaps no placed buffer alive at the same time), as TFLite's arena planner does.
MemoryPlan plan_memory(const std::vector<BufferRequest>& requests);

/// Whether the op (a node's domain and type) only ever reads element k of input 0 to write
/// element k of output 0, so output 0 may share input 0's memory when their sizes match.
bool op_may_run_in_place(const std::string& domain, const std::string& op_type);

}  // namespace ferry
