// Pass "decompose": a node the device does not run, whose op ferry can decompose into ops the
// device does run, is replaced by its decomposition (passes/decompositions.h) instead of falling
// back to the CPU. Needs OptimizeOptions::device_supports (set by the executor); without it, or
// when the device runs every node, it changes nothing.
#include "passes/decompositions.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

using Supports = std::function<bool(const Model&, const Node&)>;

/// Whether the device runs `op` applied to x (a probe node), directly or through its own
/// decomposition (depth-limited: decompositions nest at most a few levels).
bool op_runs(const Model& model, const Supports& supports, const std::string& op, const std::string& x, int depth) {
  Node probe;
  probe.name = "decompose_probe";
  probe.op_type = op;
  probe.inputs = {x, x};
  probe.outputs = {"decompose_probe:0"};
  if (op == "HardSigmoid" || op == "Softplus" || op == "Softsign" || op == "Mish" || op == "Tanh" || op == "Erf" ||
      op == "Relu" || op == "Abs" || op == "Neg" || op == "Exp" || op == "Log" || op == "Sqrt")
    probe.inputs = {x};
  if (supports(model, probe)) return true;
  const Decomposition* d = find_decomposition("", op);
  if (!d || depth >= 3) return false;
  for (const char* p : d->produces)
    if (!op_runs(model, supports, p, x, depth + 1)) return false;
  return true;
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
      for (size_t k = 0; replace && k < d->produces.size(); ++k)
        replace = op_runs(*model, supports, d->produces[k], node.inputs[0], 0);
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
