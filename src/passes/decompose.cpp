// Pass "decompose": a node the device does not run, whose op ferry can decompose into ops the
// device does run, is replaced by its decomposition (passes/decompositions.h) instead of falling
// back to the CPU. Needs OptimizeOptions::device_supports (set by the executor); without it, or
// when the device runs every node, it changes nothing.
#include "passes/decompositions.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

using Supports = std::function<bool(const Model&, const Node&)>;

/// Whether the device runs `op` applied to x: asks about a probe node reading x (so the element
/// type is known to the capability query).
bool op_runs(const Model& model, const Supports& supports, const std::string& op, const std::string& x) {
  Node probe;
  probe.name = "decompose_probe";
  probe.op_type = op;
  probe.inputs = {x};
  probe.outputs = {"decompose_probe:0"};
  return supports(model, probe);
}

Status run_decompose(Model* model, PassContext& ctx) {
  const Supports& supports = ctx.options.device_supports;
  if (!supports) return Status::ok();
  Graph& g = model->graph;
  for (int round = 0; round < 4; ++round) {
    bool changed = false;
    std::vector<Node> rewritten;
    rewritten.reserve(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& node = g.nodes[i];
      const Decomposition* d = find_decomposition(node.domain, node.op_type);
      bool replace = d && !supports(*model, node) && can_decompose(*model, g, node, nullptr);
      if (replace)
        replace = decomposition_accepted(*d, [&](const std::string& op) { return op_runs(*model, supports, op, node.inputs[0]); });
      if (!replace) {
        rewritten.push_back(node);
        continue;
      }
      ASSIGN_OR_RETURN(std::vector<Node> parts, decompose_node(*model, &g, node));
      for (Node& p : parts) rewritten.push_back(std::move(p));
      ++ctx.changes;
      changed = true;
    }
    g.nodes = std::move(rewritten);
    if (!changed) break;
  }
  return Status::ok();
}

}  // namespace

GraphPass decompose_pass() {
  return {"decompose", 1,
          "rewrites ops the device lacks into ops it has (HardSwish, Gelu, LayerNormalization, Mish, Softplus, ...)",
          run_decompose};
}

}  // namespace ferry
