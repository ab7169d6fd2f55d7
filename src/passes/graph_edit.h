// Helpers shared by the graph passes: who produces and who reads each value, which values must
// keep their names (graph outputs, values read by subgraphs), node removal, renaming uses,
// fresh names and evaluating a node on constant inputs with its reference kernel.
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

/// Producers and readers of the values of one graph (not of its subgraphs).
struct GraphUses {
  /// value -> index of the node producing it.
  std::unordered_map<std::string, size_t> producer;
  /// value -> indices of the nodes reading it (explicit inputs; a node reading twice appears twice).
  std::unordered_map<std::string, std::vector<size_t>> readers;
  /// Values that must keep their name and value: graph outputs and values subgraphs read
  /// (implicit inputs of nodes with bodies).
  std::unordered_set<std::string> pinned;

  explicit GraphUses(const Graph& g);
  size_t num_readers(const std::string& v) const {
    auto it = readers.find(v);
    return it == readers.end() ? 0 : it->second.size();
  }
  /// The producing node index, or -1 (graph input, initializer, unknown).
  long producer_of(const std::string& v) const {
    auto it = producer.find(v);
    return it == producer.end() ? -1 : static_cast<long>(it->second);
  }
  /// True when `v` has exactly one reader and is not pinned: a pattern may consume it.
  bool single_use(const std::string& v) const { return num_readers(v) == 1 && !pinned.count(v); }
};

/// Removes the nodes whose flag is set (keeps the others' order).
void erase_nodes(Graph* g, const std::vector<bool>& dead);

/// Renames every explicit read of `from` to `to` in the graph's nodes (not subgraphs; the caller
/// makes sure `from` is not pinned).
void replace_uses(Graph* g, const std::string& from, const std::string& to);

/// A value/node name not yet used in the graph, built from `base`.
std::string fresh_name(const Graph& g, const std::string& base);

/// Whether the node has a subgraph attribute (If/Loop/Scan).
bool has_subgraph(const Node& n);
/// Ops whose output is a fresh random draw each run (never folded).
bool is_random_op(const Node& n);

/// Runs `node` with its reference kernel on constant inputs (nullptr for omitted ones).
/// Fails when the op has no reference kernel or the kernel fails.
StatusOr<std::vector<Tensor>> evaluate_node(const Model& model, const Node& node,
                                            const std::vector<const Tensor*>& inputs);

/// The constant value of `v` in graph g (an initializer not overridden by a graph input), or nullptr.
const Tensor* constant_value(const Graph& g, const std::string& v);

/// A float read of a scalar (or single-element) constant; false when not one.
bool scalar_constant(const Graph& g, const std::string& v, double* out);

/// Marks that the model uses ferry's custom op domain.
void use_ferry_domain(Model* model);
constexpr const char* kFerryDomain = "com.ferry";

}  // namespace ferry

namespace ferry {

/// Pattern-matching helpers for the fusion passes. `dead` marks nodes already consumed by a
/// fusion in this run (they never match again).
struct PatternContext {
  Graph& g;
  GraphUses uses;
  std::vector<bool> dead;
  explicit PatternContext(Graph& graph) : g(graph), uses(graph), dead(graph.nodes.size(), false) {}

  /// The index of the live ai.onnx node of type `op` producing `v`, or -1.
  long producer(const std::string& v, const char* op) const;
  /// Like producer(), and `v` must be read only once (by the pattern) and not pinned.
  long single_use_producer(const std::string& v, const char* op) const;
  /// The only reader of `v` when it has exactly one and is not pinned, or -1.
  long sole_reader(const std::string& v) const;
  /// Replaces the nodes `covered` by `fused`, placed at the position of the last one (all of
  /// fused's inputs exist there). Fills fused.origin with the covered nodes' names.
  void replace(const std::vector<long>& covered, Node fused);
  /// Erases the dead nodes (call once, at the end of the pass).
  void finish() { erase_nodes(&g, dead); }
};

/// The input of a two-input node that is not `v` ("" when both are `v`).
std::string other_input(const Node& n, const std::string& v);
/// True when |a - b| <= tol * max(1, |b|).
bool approx_equal(double a, double b, double tol = 1e-4);
/// Sets an attribute on a node.
void set_attr(Node* n, const std::string& key, int64_t v);
void set_attr(Node* n, const std::string& key, float v);
void set_attr(Node* n, const std::string& key, const std::string& v);
void set_attr(Node* n, const std::string& key, const std::vector<int64_t>& v);
/// A Cast node `name`: `from` -> `to` as `dtype` (the precision pass's and autocast's casts).
Node make_cast_node(const std::string& name, const std::string& from, const std::string& to, DType dtype);

}  // namespace ferry
