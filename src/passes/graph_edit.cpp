// See graph_edit.h.
#include "passes/graph_edit.h"

#include <algorithm>
#include <cmath>

#include "ir/value.h"
#include "ops/registry.h"

namespace ferry {

GraphUses::GraphUses(const Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (const std::string& in : n.inputs)
      if (!in.empty()) readers[in].push_back(i);
    for (const std::string& in : n.implicit_inputs) pinned.insert(in);
    for (const std::string& out : n.outputs)
      if (!out.empty()) producer[out] = i;
  }
  for (const ValueInfo& v : g.outputs) pinned.insert(v.name);
}

void erase_nodes(Graph* g, const std::vector<bool>& dead) {
  std::vector<Node> kept;
  kept.reserve(g->nodes.size());
  for (size_t i = 0; i < g->nodes.size(); ++i)
    if (i >= dead.size() || !dead[i]) kept.push_back(std::move(g->nodes[i]));
  g->nodes = std::move(kept);
}

void replace_uses(Graph* g, const std::string& from, const std::string& to) {
  for (Node& n : g->nodes)
    for (std::string& in : n.inputs)
      if (in == from) in = to;
}

std::string fresh_name(const Graph& g, const std::string& base) {
  // Names already taken: values and node names of this graph.
  auto taken = [&](const std::string& s) {
    if (g.value_types.count(s) || g.initializers.count(s)) return true;
    for (const Node& n : g.nodes) {
      if (n.name == s) return true;
      for (const std::string& o : n.outputs)
        if (o == s) return true;
    }
    for (const ValueInfo& v : g.inputs)
      if (v.name == s) return true;
    return false;
  };
  if (!taken(base)) return base;
  for (int i = 1;; ++i) {
    std::string s = base + "_" + std::to_string(i);
    if (!taken(s)) return s;
  }
}

bool has_subgraph(const Node& n) {
  for (const auto& [k, a] : n.attrs)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

bool is_random_op(const Node& n) {
  return n.op_type.find("Random") != std::string::npos || n.op_type == "Bernoulli" || n.op_type == "Multinomial";
}

StatusOr<std::vector<Tensor>> evaluate_node(const Model& model, const Node& node,
                                            const std::vector<const Tensor*>& inputs) {
  const int64_t opset = model.opset(node.domain);
  ASSIGN_OR_RETURN(const OpSchema* schema, resolve_schema(node, opset));
  if (!schema->kernel) return unsupported(node.describe() + ": no reference kernel to evaluate it at load time");
  std::vector<Value> in_values(inputs.size());
  std::vector<const Value*> in_ptrs(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i]) continue;
    in_values[i] = Value(*inputs[i]);
    in_ptrs[i] = &in_values[i];
  }
  std::vector<Value> results(node.outputs.size());
  KernelContext ctx(node, opset, in_ptrs, &results);
  RETURN_IF_ERROR(schema->kernel(ctx));
  std::vector<Tensor> out;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].is_tensor() || !results[i].tensor.defined())
      return unsupported(node.describe() + ": output " + std::to_string(i) + " is not a tensor");
    out.push_back(results[i].tensor);
  }
  return out;
}

const Tensor* constant_value(const Graph& g, const std::string& v) {
  if (v.empty()) return nullptr;
  for (const ValueInfo& in : g.inputs)
    if (in.name == v) return nullptr;
  auto it = g.initializers.find(v);
  return it == g.initializers.end() ? nullptr : &it->second;
}

bool scalar_constant(const Graph& g, const std::string& v, double* out) {
  const Tensor* t = constant_value(g, v);
  if (!t || t->numel() != 1 || !(dtype_is_float(t->dtype()) || dtype_is_integer(t->dtype()))) return false;
  *out = t->get_double(0);
  return true;
}

void use_ferry_domain(Model* model) { model->opset_imports[kFerryDomain] = 1; }

}  // namespace ferry

namespace ferry {

long PatternContext::producer(const std::string& v, const char* op) const {
  const long p = uses.producer_of(v);
  if (p < 0 || dead[p]) return -1;
  const Node& n = g.nodes[p];
  return n.domain.empty() && n.op_type == op ? p : -1;
}

long PatternContext::single_use_producer(const std::string& v, const char* op) const {
  return uses.single_use(v) ? producer(v, op) : -1;
}

long PatternContext::sole_reader(const std::string& v) const {
  if (!uses.single_use(v)) return -1;
  const long r = static_cast<long>(uses.readers.at(v)[0]);
  return dead[r] ? -1 : r;
}

void PatternContext::replace(const std::vector<long>& covered, Node fused) {
  long last = -1;
  for (long c : covered) last = std::max(last, c);
  std::vector<long> order(covered);
  std::sort(order.begin(), order.end());
  fused.origin.clear();
  for (long c : order) {
    const Node& n = g.nodes[c];
    if (n.origin.empty()) fused.origin.push_back(n.name);
    else fused.origin.insert(fused.origin.end(), n.origin.begin(), n.origin.end());
    dead[c] = true;
  }
  if (fused.name.empty()) fused.name = g.nodes[last].name + "_fused";
  g.nodes[last] = std::move(fused);
  dead[last] = false;
}

std::string other_input(const Node& n, const std::string& v) {
  if (n.inputs.size() != 2) return "";
  if (n.inputs[0] == v) return n.inputs[1] == v ? "" : n.inputs[1];
  return n.inputs[1] == v ? n.inputs[0] : "";
}

bool approx_equal(double a, double b, double tol) { return std::fabs(a - b) <= tol * std::max(1.0, std::fabs(b)); }

Node make_cast_node(const std::string& name, const std::string& from, const std::string& to, DType dtype) {
  Node cast;
  cast.name = name;
  cast.op_type = "Cast";
  cast.inputs = {from};
  cast.outputs = {to};
  set_attr(&cast, "to", static_cast<int64_t>(dtype));
  return cast;
}

void set_attr(Node* n, const std::string& key, int64_t v) {
  Attribute a;
  a.type = AttrType::kInt;
  a.i = v;
  n->attrs[key] = a;
}
void set_attr(Node* n, const std::string& key, float v) {
  Attribute a;
  a.type = AttrType::kFloat;
  a.f = v;
  n->attrs[key] = a;
}
void set_attr(Node* n, const std::string& key, const std::string& v) {
  Attribute a;
  a.type = AttrType::kString;
  a.s = v;
  n->attrs[key] = a;
}
void set_attr(Node* n, const std::string& key, const std::vector<int64_t>& v) {
  Attribute a;
  a.type = AttrType::kInts;
  a.ints = v;
  n->attrs[key] = a;
}

}  // namespace ferry
