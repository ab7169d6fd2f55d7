// Pre-packing weights at compile time (issue 8): the cpu backend's oneDNN kernels reorder constant
// weights into the blocked layout their primitive wants; `ferry compile` makes the kernels once,
// exactly as a load would, and stores what they packed on the nodes (backends/cpu/prepacked.h), so
// loading the .ferry file uses those bytes in place from the mapping instead of reordering.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

struct PrepackReport {
  int64_t nodes = 0;  // nodes that now carry packed weights
  int64_t bytes = 0;  // packed bytes stored
};

/// Creates the kernels of `model` (an optimized gear) on `device` with `threads` intra-op threads and
/// stores the weights they pack on their nodes. Only the "cpu" device packs; others are left as
/// they are. Any packed attributes already on the nodes are replaced.
StatusOr<PrepackReport> prepack_weights(const std::shared_ptr<Model>& model, const std::string& device, int threads);

}  // namespace ferry
