#include "ir/graph_check.h"

#include <algorithm>
#include <functional>
#include <unordered_map>
#include <vector>

namespace ferry {

Status check_graph(Graph* g, const std::unordered_set<std::string>& outer_values, NodeOrder order) {
  std::unordered_map<std::string, size_t> producer;
  std::unordered_set<std::string> available(outer_values.begin(), outer_values.end());
  for (const ValueInfo& v : g->inputs) available.insert(v.name);
  for (const auto& [name, t] : g->initializers) available.insert(name);
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    for (const std::string& o : g->nodes[i].outputs) {
      if (o.empty()) continue;
      auto [it, fresh] = producer.emplace(o, i);
      if (!fresh)
        return invalid_model("value '" + o + "' is produced by both " + g->nodes[it->second].describe() + " and " +
                             g->nodes[i].describe() + "; every value must have exactly one producer");
      for (const ValueInfo& v : g->inputs)
        if (v.name == o) return invalid_model(g->nodes[i].describe() + " writes '" + o + "', which is a graph input");
    }
  }
  // Kahn's algorithm; ties keep the listed order.
  const size_t n = g->nodes.size();
  std::vector<int64_t> pending(n, 0);
  std::vector<std::vector<size_t>> consumers(n);
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g->nodes[i];
    std::vector<std::string> reads = node.inputs;
    reads.insert(reads.end(), node.implicit_inputs.begin(), node.implicit_inputs.end());
    std::unordered_set<size_t> deps;
    for (const std::string& in : reads) {
      if (in.empty()) continue;
      auto p = producer.find(in);
      if (p != producer.end()) {
        if (p->second == i)
          return invalid_model(node.describe() + " reads its own output '" + in + "' (a cycle)");
        if (order == NodeOrder::kRequireSorted && p->second > i)
          return invalid_model(node.describe() + " reads '" + in + "' before " + g->nodes[p->second].describe() +
                               " produces it (the nodes are not in topological order)");
        deps.insert(p->second);
      } else if (!available.count(in)) {
        return invalid_model(node.describe() + " reads '" + in + "', which no node, graph input or initializer "
                             "defines (a dangling edge)");
      }
    }
    pending[i] = static_cast<int64_t>(deps.size());
    for (size_t d : deps) consumers[d].push_back(i);
  }
  auto check_outputs = [&]() {
    for (const ValueInfo& v : g->outputs)
      if (!producer.count(v.name) && !available.count(v.name))
        return invalid_model("graph output '" + v.name + "' is not produced by any node");
    return Status::ok();
  };
  if (order == NodeOrder::kRequireSorted) return check_outputs();
  std::vector<size_t> sorted_order;
  sorted_order.reserve(n);
  std::vector<size_t> ready;  // a stack with the lowest index on top
  for (size_t i = n; i-- > 0;)
    if (pending[i] == 0) ready.push_back(i);
  while (!ready.empty()) {
    size_t i = ready.back();
    ready.pop_back();
    sorted_order.push_back(i);
    for (size_t c : consumers[i])
      if (--pending[c] == 0) ready.push_back(c);
    std::sort(ready.begin(), ready.end(), std::greater<size_t>());  // the lowest index first, globally
  }
  if (sorted_order.size() != n) {
    std::string cyc;
    int shown = 0;
    for (size_t i = 0; i < n && shown < 5; ++i)
      if (pending[i] > 0) {
        cyc += (shown ? ", " : "") + g->nodes[i].describe();
        ++shown;
      }
    return invalid_model("the graph has a cycle; nodes on or after it: " + cyc);
  }
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (size_t i : sorted_order) sorted.push_back(std::move(g->nodes[i]));
  g->nodes = std::move(sorted);
  return check_outputs();
}

std::unordered_set<std::string> enclosing_scope_values(const Graph& g) {
  std::unordered_set<std::string> outer;
  for (const Graph* p = g.parent; p; p = p->parent) {
    for (const ValueInfo& v : p->inputs) outer.insert(v.name);
    for (const auto& [name, t] : p->initializers) outer.insert(name);
    for (const Node& n : p->nodes)
      for (const std::string& o : n.outputs) outer.insert(o);
  }
  return outer;
}

void collect_free_values(const Graph& g, std::set<std::string>* out) {
  std::unordered_set<std::string> defined;
  for (const ValueInfo& v : g.inputs) defined.insert(v.name);
  for (const auto& [name, t] : g.initializers) defined.insert(name);
  for (const Node& n : g.nodes)
    for (const std::string& o : n.outputs) defined.insert(o);
  auto use = [&](const std::string& v) {
    if (!v.empty() && !defined.count(v)) out->insert(v);
  };
  for (const Node& n : g.nodes) {
    for (const std::string& i : n.inputs) use(i);
    for (const std::string& i : n.implicit_inputs) use(i);
  }
  for (const ValueInfo& v : g.outputs) use(v.name);
}

}  // namespace ferry
