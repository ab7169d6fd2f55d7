// Pre-packing weights at compile time (issue 8): kernels reorder constant weights into the layout
// they compute in (the cpu backend's oneDNN kernels: the blocked layout their primitive wants);
// `ferry compile` makes the kernels once, exactly as a load would, under the backend's
// Backend::begin_prepack, and stores what they packed on the nodes (the cpu backend's form:
// backends/cpu/prepacked.h), so loading the .ferry file uses those bytes in place from the mapping
// instead of reordering.
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
/// stores the weights they pack on their nodes. Only a backend with Backend::begin_prepack packs (the
/// "cpu" device); others are left as they are. Any packed attributes already on the nodes are replaced.
/// Kernels pack for the shapes known at load: with `bind_batch` > 0 an input's symbolic first
/// dimension (a dynamic batch) is taken as that many rows for the packing (kernels whose form does
/// not depend on the rows then store it; a run at another batch whose layout differs packs its own).
StatusOr<PrepackReport> prepack_weights(const std::shared_ptr<Model>& model, const std::string& device, int threads,
                                        int64_t bind_batch = 0);

}  // namespace ferry
