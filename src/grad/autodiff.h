// Reverse-mode autodiff on the IR: appends to a model's main graph the backward nodes of a scalar
// loss with respect to chosen values (the trained parameters), one gradient definition per
// forward node (grad/registry.h). The result is an ordinary graph: it is optimized,
// memory-planned and run by the executor like any other.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

/// Nodes on a path from `wrt` to `loss` (they carry a float gradient) whose op has no gradient
/// definition, in graph order. `ferry check --train` and `ferry train` report them.
std::vector<const Node*> nodes_without_gradient(const Model& model, const std::string& loss,
                                                const std::vector<std::string>& wrt);

/// Appends the backward graph of `loss` (a float value, usually a scalar) with respect to each of
/// `wrt` (graph inputs or node outputs of float type) and returns, per `wrt` value, the name of
/// its gradient; a `wrt` value the loss does not depend on is absent from the map (as PyTorch
/// leaves its .grad None). `model`'s value types must be inferred with static shapes;
/// `constants` are values known at load time (from infer_shapes). Gradients are not made graph
/// outputs: the caller decides. Fails listing every node without a gradient definition.
/// `seed_input` (optional): a graph input of the loss's type that holds dLoss (the trainer feeds
/// the loss scale and 1/accumulation there); empty: dLoss is a constant of ones.
StatusOr<std::map<std::string, std::string>> build_gradients(Model* model, const std::string& loss,
                                                             const std::vector<std::string>& wrt,
                                                             const std::unordered_map<std::string, Tensor>* constants = nullptr,
                                                             const std::string& seed_input = "");

}  // namespace ferry
