// Pass constant_folding (level 1): a node whose inputs are all constants (initializers, or
// values this pass already folded) is evaluated once with its reference kernel and replaced by
// initializers: transposed or reshaped weights, Q/K/V splits of constant matrices, and so on.
// Random ops, nodes with subgraphs and graph outputs are left alone; results above
// kMaxFoldedElements stay computed at run time (a load-time blow-up of the model's size).
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

constexpr int64_t kMaxFoldedElements = int64_t{1} << 24;

Status fold_graph(Model* model, Graph* g, PassContext& ctx) {
  GraphUses uses(*g);
  std::vector<bool> dead(g->nodes.size(), false);
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Node& n = g->nodes[i];
    if (is_random_op(n) || has_subgraph(n) || n.outputs.empty()) continue;
    bool foldable = true;
    std::vector<const Tensor*> inputs;
    int64_t in_elements = 0;
    for (const std::string& in : n.inputs) {
      if (in.empty()) {
        inputs.push_back(nullptr);
        continue;
      }
      const Tensor* t = constant_value(*g, in);
      if (!t || t->dtype() == DType::kString) foldable = false;
      inputs.push_back(t);
      if (t) in_elements += t->numel();
    }
    for (const std::string& o : n.outputs)
      if (o.empty() || uses.pinned.count(o)) foldable = false;
    if (!foldable) continue;
    // Skip ops whose output would be much larger than their inputs (Expand, Tile, ConstantOfShape
    // of a big shape): folding them trades a cheap run-time op for model size.
    const TensorType* t0 = g->find_type(n.outputs[0]);
    if (t0 && t0->shape && t0->shape->is_static()) {
      int64_t out_elements = 1;
      for (int64_t d : t0->shape->values()) out_elements *= d;
      if (out_elements > kMaxFoldedElements || out_elements > 4 * in_elements + 4096) continue;
    }
    auto results = evaluate_node(*model, n, inputs);
    if (!results.is_ok()) continue;  // the node then fails (or not) at run time, with its own message
    const std::vector<Tensor>& r = results.value();
    for (size_t k = 0; k < r.size(); ++k) {
      g->initializers[n.outputs[k]] = r[k];
      g->value_types[n.outputs[k]] = r[k].type();
    }
    dead[i] = true;
    ++ctx.changes;
  }
  erase_nodes(g, dead);
  return Status::ok();
}

Status run_constant_folding(Model* model, PassContext& ctx) { return fold_graph(model, &model->graph, ctx); }

}  // namespace

GraphPass constant_folding_pass() {
  return {"constant_folding", 1, "nodes whose inputs are all constants are evaluated at load time", run_constant_folding};
}

}  // namespace ferry
