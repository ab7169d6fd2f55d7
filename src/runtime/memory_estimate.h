// Memory needed to run a model on given input shapes, computed before anything is allocated:
// weights plus the peak of live intermediate tensors (shape inference on the concrete shapes,
// then liveness in execution order). `--memory-limit` checks it and, when it does not fit, says
// how much is needed, how much is allowed, which tensors dominate, and the largest batch that fits.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

using InputShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

struct MemoryEstimate {
  int64_t weight_bytes = 0;
  int64_t input_bytes = 0;
  /// Largest sum of intermediate and output tensors alive at once (main graph).
  int64_t peak_activation_bytes = 0;
  /// The node after which that peak is reached.
  std::string peak_node;
  /// The biggest tensors alive at the peak (name, bytes), largest first (up to 5).
  std::vector<std::pair<std::string, int64_t>> largest;
  /// Values whose size depends on data (NonZero, ...): not counted.
  int64_t unknown_values = 0;
  int64_t total_bytes() const { return weight_bytes + input_bytes + peak_activation_bytes; }
};

/// Estimates memory for running `model` with inputs of `shapes` (inputs not listed keep their
/// declared shapes; a symbolic dimension left unbound is an error naming it).
StatusOr<MemoryEstimate> estimate_memory(const Model& model, const InputShapes& shapes);

/// Fails with kResourceExhausted when the estimate exceeds `limit_bytes`, naming need, limit,
/// dominating tensors, and (when dimension 0 of the inputs is a batch) the largest batch that fits.
Status check_memory_limit(const Model& model, const InputShapes& shapes, int64_t limit_bytes);

/// MemAvailable from /proc/meminfo (0 when unknown).
int64_t available_memory_bytes();

/// "4096", "512K", "512M", "1.5G", "2GiB", "1T" (powers of 1024) -> bytes.
StatusOr<int64_t> parse_byte_size(const std::string& text);

/// "1.5 GiB"
std::string format_bytes(int64_t bytes);

}  // namespace ferry
