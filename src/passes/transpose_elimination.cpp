// Pass transpose_elimination (level 1): Transpose(Transpose(x, p1), p2) becomes one Transpose
// with the composed permutation (and disappears when that is the identity); a Transpose with
// the identity permutation is removed. Transposes of constants are folded by constant_folding;
// those feeding attention are absorbed by attention_fusion (level 2).
#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

// The permutation of a Transpose node (default: reversed axes), or empty when the rank is unknown.
std::vector<int64_t> perm_of(const Graph& g, const Node& n) {
  if (const Attribute* a = n.attr("perm")) return a->ints;
  const TensorType* t = g.find_type(n.inputs[0]);
  if (!t || !t->shape) return {};
  std::vector<int64_t> p;
  for (int64_t i = t->shape->rank(); i-- > 0;) p.push_back(i);
  return p;
}

bool is_identity_perm(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

Status run_transpose_elimination(Model* model, PassContext& ctx) {
  Graph& g = model->graph;
  std::vector<bool> dead(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.op_type != "Transpose" || !n.domain.empty() || n.inputs.empty()) continue;
    GraphUses uses(g);
    std::vector<int64_t> p2 = perm_of(g, n);
    if (p2.empty()) continue;
    // Compose with a producing Transpose that nothing else reads.
    const long pi = uses.producer_of(n.inputs[0]);
    if (pi >= 0 && !dead[pi] && g.nodes[pi].op_type == "Transpose" && g.nodes[pi].domain.empty() &&
        uses.single_use(n.inputs[0])) {
      std::vector<int64_t> p1 = perm_of(g, g.nodes[pi]);
      if (p1.size() == p2.size()) {
        std::vector<int64_t> p(p2.size());
        for (size_t k = 0; k < p.size(); ++k) p[k] = p1[p2[k]];
        n.inputs[0] = g.nodes[pi].inputs[0];
        n.origin = {g.nodes[pi].name, n.name};
        Attribute a;
        a.type = AttrType::kInts;
        a.ints = p;
        n.attrs["perm"] = a;
        p2 = p;
        dead[pi] = true;
        ++ctx.changes;
      }
    }
    if (!is_identity_perm(p2) || uses.pinned.count(n.outputs[0])) continue;
    replace_uses(&g, n.outputs[0], n.inputs[0]);
    dead[i] = true;
    ++ctx.changes;
  }
  erase_nodes(&g, dead);
  return Status::ok();
}

}  // namespace

GraphPass transpose_elimination_pass() {
  return {"transpose_elimination", 1, "consecutive Transposes compose; identity Transposes are removed",
          run_transpose_elimination};
}

}  // namespace ferry
