// Reverse-mode autodiff on the IR (see autodiff.h).
#include "grad/autodiff.h"

#include <set>
#include <unordered_set>

#include "grad/registry.h"

namespace ferry {
namespace {

bool is_float_value(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  return t && t->kind == ValueKind::kTensor && dtype_is_float(t->dtype);
}

// The values on a path from `wrt` to `loss`: forward-reachable from wrt (through float values)
// and backward-reachable from loss.
struct PathInfo {
  std::unordered_set<std::string> from_wrt;  // float values that depend on a wrt value
  std::unordered_set<std::string> to_loss;   // values the loss depends on
  bool on_path(const std::string& v) const { return from_wrt.count(v) && to_loss.count(v); }
  bool node_on_path(const Node& n) const {
    bool in = false, out = false;
    for (const auto& i : n.inputs) in |= !i.empty() && from_wrt.count(i);
    for (const auto& o : n.outputs) out |= !o.empty() && on_path(o);
    return in && out;
  }
};

PathInfo find_path(const Graph& g, const std::string& loss, const std::vector<std::string>& wrt) {
  PathInfo p;
  for (const auto& w : wrt)
    if (is_float_value(g, w)) p.from_wrt.insert(w);
  for (const Node& n : g.nodes) {
    bool dep = false;
    for (const auto& i : n.inputs) dep |= !i.empty() && p.from_wrt.count(i);
    for (const auto& i : n.implicit_inputs) dep |= p.from_wrt.count(i) > 0;
    if (!dep) continue;
    for (const auto& o : n.outputs)
      if (!o.empty() && is_float_value(g, o)) p.from_wrt.insert(o);
  }
  p.to_loss.insert(loss);
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    bool feeds = false;
    for (const auto& o : it->outputs) feeds |= !o.empty() && p.to_loss.count(o);
    if (!feeds) continue;
    for (const auto& i : it->inputs)
      if (!i.empty()) p.to_loss.insert(i);
    for (const auto& i : it->implicit_inputs) p.to_loss.insert(i);
  }
  return p;
}

int64_t node_opset(const Model& m, const Node& n) { return m.opset(n.domain); }

}  // namespace

std::vector<const Node*> nodes_without_gradient(const Model& model, const std::string& loss,
                                                const std::vector<std::string>& wrt) {
  const Graph& g = model.graph;
  PathInfo p = find_path(g, loss, wrt);
  std::vector<const Node*> missing;
  for (const Node& n : g.nodes)
    if (p.node_on_path(n) && !grad_registry().find(n.domain, n.op_type, node_opset(model, n))) missing.push_back(&n);
  return missing;
}

StatusOr<std::map<std::string, std::string>> build_gradients(Model* model, const std::string& loss,
                                                             const std::vector<std::string>& wrt,
                                                             const std::unordered_map<std::string, Tensor>* constants,
                                                             const std::string& seed_input) {
  Graph& g = model->graph;
  if (!is_float_value(g, loss)) return invalid_argument("loss value '" + loss + "' is not a float tensor of known type");
  std::vector<const Node*> missing = nodes_without_gradient(*model, loss, wrt);
  if (!missing.empty()) {
    std::string msg = std::to_string(missing.size()) + " node(s) on the way from the parameters to the loss have no gradient:";
    for (const Node* n : missing) msg += "\n  " + n->describe();
    msg += "\nfreeze the parameters before them (--freeze REGEX), or replace these ops in the exported model "
           "(`ferry check MODEL --train` lists them; `ferry ops --train` lists the ops with gradients)";
    return unsupported(msg);
  }
  const PathInfo p = find_path(g, loss, wrt);
  GradGraph gg;
  gg.model = model;
  gg.constants = constants;

  // Partial gradients per value, summed when a value has several consumers.
  std::unordered_map<std::string, std::vector<std::string>> partials;
  const size_t num_forward = g.nodes.size();
  // Seed: dLoss/dLoss = ones of the loss's shape, or what the caller feeds as `seed_input`.
  if (!seed_input.empty()) {
    const TensorType* lt = g.find_type(loss);
    const TensorType* st = g.find_type(seed_input);
    if (!st || st->dtype != lt->dtype || !st->shape || !lt->shape || st->shape->dims != lt->shape->dims)
      return invalid_argument("gradient seed '" + seed_input + "' must have the loss's type " + lt->to_string() + ", it has " +
                              (st ? st->to_string() : std::string("no type")));
    partials[loss].push_back(seed_input);
  } else {
    const TensorType* lt = g.find_type(loss);
    std::vector<int64_t> dims = lt->shape && lt->shape->is_static() ? lt->shape->values() : std::vector<int64_t>{};
    Tensor one = Tensor::allocate(lt->dtype == DType::kF64 ? DType::kF64 : DType::kF32, dims);
    for (int64_t i = 0; i < one.numel(); ++i) {
      if (one.dtype() == DType::kF64) one.mutable_data<double>()[i] = 1.0;
      else one.mutable_data<float>()[i] = 1.0f;
    }
    std::string name = gg.fresh("seed");
    g.value_types[name] = one.type();
    g.initializers[name] = std::move(one);
    partials[loss].push_back(name);
  }

  // Sums the partials of `v` into one value (emitting a Sum node when there are several).
  auto total = [&](const std::string& v, const Node& at) -> std::string {
    auto it = partials.find(v);
    if (it == partials.end() || it->second.empty()) return "";
    if (it->second.size() == 1) return it->second[0];
    Node n;
    n.op_type = "Sum";
    n.name = gg.fresh(at.name + "/accumulate");
    n.inputs = it->second;
    n.outputs = {n.name + ":0"};
    n.origin = {at.name};
    g.nodes.push_back(n);
    it->second = {n.outputs[0]};
    return n.outputs[0];
  };

  for (size_t k = num_forward; k-- > 0;) {
    const Node node = g.nodes[k];  // a copy: emitting appends to g.nodes
    if (!p.node_on_path(node)) continue;
    std::vector<std::string> out_grads;
    bool any = false;
    for (const auto& o : node.outputs) {
      std::string d = o.empty() || !p.on_path(o) ? "" : total(o, node);
      any |= !d.empty();
      out_grads.push_back(d);
    }
    if (!any) continue;
    const int64_t opset = node_opset(*model, node);
    const GradDef* def = grad_registry().find(node.domain, node.op_type, opset);
    std::vector<bool> wanted;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& in = node.inputs[i];
      wanted.push_back(!in.empty() && i < 64 && ((def->inputs >> i) & 1u) && p.from_wrt.count(in) > 0);
    }
    GradContext ctx(node, opset, &gg, out_grads, wanted);
    RETURN_IF_ERROR(def->build(ctx));
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& d = ctx.input_grads()[i];
      if (!d.empty()) partials[node.inputs[i]].push_back(d);
    }
  }

  std::map<std::string, std::string> result;
  Node anchor;
  anchor.name = "parameters";
  for (const auto& w : wrt) {
    std::string d = total(w, anchor);
    if (!d.empty()) result[w] = d;
  }
  return result;
}

}  // namespace ferry
