// Pass shape_folding (level 1): values that shape inference computes at load time (Shape of a
// static shape, Constant nodes, and the small Gather/Unsqueeze/Concat chains that turn them into
// Reshape targets) become initializers and the nodes computing them go away.
#include <algorithm>

#include "ops/shape_inference.h"
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

Status run_shape_folding(Model* model, PassContext& ctx) {
  std::unordered_map<std::string, Tensor> constants;
  RETURN_IF_ERROR(infer_shapes(model, &constants));
  Graph& g = model->graph;
  GraphUses uses(g);
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (is_random_op(n) || has_subgraph(n) || n.outputs.empty()) continue;
    bool all_known = true;
    for (const std::string& o : n.outputs) {
      // Graph outputs stay computed by a node (an output that is an initializer is unusual).
      if (o.empty()) continue;
      if (!constants.count(o) || g.initializers.count(o) || g.outputs.end() != std::find_if(g.outputs.begin(), g.outputs.end(), [&](const ValueInfo& v) { return v.name == o; }))
        all_known = false;
    }
    if (!all_known) continue;
    for (const std::string& o : n.outputs)
      if (!o.empty()) {
        g.initializers[o] = constants.at(o);
        g.value_types[o] = constants.at(o).type();
      }
    dead[i] = true;
    ++ctx.changes;
  }
  erase_nodes(&g, dead);
  return Status::ok();
}

}  // namespace

GraphPass shape_folding_pass() {
  return {"shape_folding", 1, "values known at load time (shapes, Constant nodes, shape arithmetic) become initializers",
          run_shape_folding};
}

}  // namespace ferry
