// Structural checks of a graph's edges, shared by everything that builds a Graph from outside
// data (the ONNX importer, the compiled-model reader) or appends to one (autodiff).
#pragma once

#include <set>
#include <string>
#include <unordered_set>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

/// What check_graph does with nodes listed before a node whose output they read.
enum class NodeOrder {
  kSort,           // sort the nodes topologically (ties keep the listed order)
  kRequireSorted,  // fail: the nodes must already be in topological order
};

/// Checks that every value has one producer, no node writes a graph input, and every node input,
/// implicit input and graph output is defined by a node, a graph input, an initializer or (for a
/// subgraph) one of `outer_values`; then orders the nodes as `order` says. Errors (kInvalidModel)
/// name the node and the value: a cycle, a dangling edge, a second producer.
Status check_graph(Graph* g, const std::unordered_set<std::string>& outer_values, NodeOrder order);

/// Values the graphs enclosing `g` define (their inputs, initializers and node outputs): what a
/// subgraph may read from outer scopes.
std::unordered_set<std::string> enclosing_scope_values(const Graph& g);

/// Adds to `out` the values `g` reads (node inputs, implicit inputs, outputs) but does not define:
/// a subgraph's outer-scope references.
void collect_free_values(const Graph& g, std::set<std::string>* out);

}  // namespace ferry
