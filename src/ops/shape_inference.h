// Type and shape inference over a whole model, using each op's shape rule. Values computable
// at load time (shape subgraphs: Shape -> Gather -> Concat -> Reshape) are evaluated so that
// shapes depending on them become known.
#pragma once

#include <string>
#include <unordered_map>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

/// Fills graph.value_types for every node output (recursing into subgraphs) and checks them
/// against the declared types. Errors name the node.
/// With `skip_unknown_ops`, nodes whose op is not implemented get unknown output types instead
/// of an error (used to describe models ferry cannot run).
Status infer_shapes(Model* model, bool skip_unknown_ops = false);

/// Same, and also returns the values that were computed at load time (by value name).
Status infer_shapes(Model* model, std::unordered_map<std::string, Tensor>* constants, bool skip_unknown_ops = false);

}  // namespace ferry
