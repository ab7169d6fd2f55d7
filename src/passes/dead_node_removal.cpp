// Pass dead_node_removal (level 1): nodes none of whose outputs reach a graph output (directly,
// through other nodes, or through a subgraph that reads them) are removed, in the main graph
// and in every subgraph body.
#include <unordered_set>

#include "passes/graph_edit.h"
#include "passes/pipeline.h"

namespace ferry {
namespace {

int remove_dead(Graph* g) {
  std::unordered_set<std::string> live;
  for (const ValueInfo& v : g->outputs) live.insert(v.name);
  std::vector<bool> dead(g->nodes.size(), true);
  int removed = 0;
  for (size_t k = g->nodes.size(); k-- > 0;) {
    const Node& n = g->nodes[k];
    bool used = false;
    for (const std::string& o : n.outputs) used |= !o.empty() && live.count(o);
    if (!used) {
      ++removed;
      continue;
    }
    dead[k] = false;
    for (const std::string& in : n.inputs) live.insert(in);
    for (const std::string& in : n.implicit_inputs) live.insert(in);
  }
  erase_nodes(g, dead);
  for (Node& n : g->nodes)
    for (auto& [key, a] : n.attrs) {
      if (a.g) removed += remove_dead(a.g.get());
      for (auto& sg : a.graphs) removed += remove_dead(sg.get());
    }
  return removed;
}

Status run_dead_node_removal(Model* model, PassContext& ctx) {
  ctx.changes += remove_dead(&model->graph);
  return Status::ok();
}

}  // namespace

GraphPass dead_node_removal_pass() {
  return {"dead_node_removal", 1, "nodes whose outputs nothing reads are removed", run_dead_node_removal};
}

}  // namespace ferry
