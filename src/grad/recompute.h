// Activation recomputation (checkpointing) as a transformation of a training graph: the forward
// nodes are cut into segments; the values backward reads from a segment are recomputed in
// backward, just before the first gradient node that needs them, by clones of the segment's
// forward nodes that start from the segment's boundary values. The originals then die inside
// the forward pass, so the executor's liveness-based memory plan holds only the boundaries and
// one segment's activations at a time. The last segment is not recomputed (its backward follows
// at once). Recomputed values equal the originals (deterministic kernels, dropout masks from the
// same seeds), so training is unchanged.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

struct RecomputeReport {
  int64_t segments = 0;        // segments the forward nodes were cut into
  int64_t forward_nodes = 0;   // nodes up to and including the loss
  int64_t cloned_nodes = 0;    // forward nodes run a second time in backward
  int64_t saved_bytes = 0;     // forward values backward reads, before the transformation
  int64_t recomputed_bytes = 0;  // of those, the values now recomputed
};

/// Transforms `model` (a training graph: the forward nodes up to the node producing `loss`, then
/// the backward nodes; value types inferred with static shapes). `segments` 0 picks about
/// sqrt(forward nodes); 1 leaves the graph unchanged.
StatusOr<RecomputeReport> apply_recompute(Model* model, const std::string& loss, int64_t segments);

}  // namespace ferry
