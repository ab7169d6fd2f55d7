// Pass identity_removal (level 1): nodes that pass their input through unchanged go away —
// Identity, Dropout at inference (mask output unused), Cast to the type the value already has,
// Reshape/Flatten/Squeeze/Unsqueeze/Expand whose output shape equals the (static) input shape.
// Readers of the output read the input instead. When the output is a graph output (or read by
// a subgraph), the producer of the input is renamed to produce it instead, when that is legal.
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

bool same_static_type(const Graph& g, const std::string& a, const std::string& b) {
  const TensorType* ta = g.find_type(a);
  const TensorType* tb = g.find_type(b);
  if (!ta || !tb || !ta->shape || !tb->shape || !ta->shape->is_static() || !tb->shape->is_static()) return false;
  return ta->dtype == tb->dtype && ta->dtype != DType::kUndefined && ta->shape->values() == tb->shape->values();
}

// Whether node n computes output 0 = input 0 unchanged.
bool is_identity(const Graph& g, const Node& n) {
  if (!n.domain.empty() || n.inputs.empty() || n.inputs[0].empty() || n.outputs.empty()) return false;
  const std::string& op = n.op_type;
  if (op == "Identity") return true;
  if (op == "Dropout") {
    // Inference: the mask output must be unused, training_mode absent or constant false.
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) return false;
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      double mode = 1;
      if (!scalar_constant(g, n.inputs[2], &mode) || mode != 0) return false;
    }
    return true;
  }
  if (n.outputs.size() != 1) return false;
  if (op == "Cast" || op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Expand")
    return same_static_type(g, n.inputs[0], n.outputs[0]);
  return false;
}

Status run_identity_removal(Model* model, PassContext& ctx) {
  Graph& g = model->graph;
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!is_identity(g, g.nodes[i])) continue;
    GraphUses uses(g);  // rebuilt per removal: renames below change producers and readers
    const std::string in = g.nodes[i].inputs[0];
    const std::string out = g.nodes[i].outputs[0];
    if (!uses.pinned.count(out)) {
      replace_uses(&g, out, in);
      dead[i] = true;
      ++ctx.changes;
      continue;
    }
    // `out` must keep its name: let in's producer write `out` directly, when `in` has no other
    // reader and is not itself a graph output, graph input or initializer.
    const long p = uses.producer_of(in);
    if (p < 0 || uses.pinned.count(in) || uses.num_readers(in) != 1) continue;
    for (std::string& o : g.nodes[p].outputs)
      if (o == in) o = out;
    dead[i] = true;
    ++ctx.changes;
  }
  erase_nodes(&g, dead);
  return Status::ok();
}

}  // namespace

GraphPass identity_removal_pass() {
  return {"identity_removal", 1, "Identity, inference Dropout, same-type Cast, same-shape Reshape nodes are removed",
          run_identity_removal};
}

}  // namespace ferry
