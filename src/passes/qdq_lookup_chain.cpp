// The element-wise chains of the qdq_fusion pass (qdq_fusion.cpp runs them; see its header): DQ(x 8-bit,
// per tensor) -> element-wise float ops on x alone (and scalar constants) [-> Q] becomes
// com.ferry.QLookup, y = table[x], the table those nodes give on x's 256 values evaluated by their
// reference kernels (exact); without the Q a float table (the chain's end read in float).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "passes/graph_edit.h"
#include "passes/qdq_common.h"

namespace ferry::qdq {
namespace {

// Element-wise float ops a lookup table may take (one output element from the same element of each input).
bool lookup_op(const Node& n) {
  static const std::unordered_set<std::string> ops = {"Sigmoid", "Tanh", "Relu", "LeakyRelu", "Elu", "Selu", "HardSigmoid",
                                                      "HardSwish", "Softplus", "Softsign", "Erf", "Exp", "Neg", "Abs",
                                                      "Clip", "Add", "Sub", "Mul", "Div", "Min", "Max"};
  return n.domain.empty() && n.outputs.size() == 1 && ops.count(n.op_type);
}

// The element-wise chain ending in `v` (lookup_op nodes; besides the values of one per-tensor DQ of an
// 8-bit x only scalar constants) -> its nodes in graph order and the DQ, or false. `closed`: every value
// inside the chain (not `v`) is read only by the chain's nodes.
bool lookup_chain(const PatternContext& pc, const std::string& v_end, long* dq, std::vector<long>* chain, bool* closed) {
  constexpr size_t kMaxNodes = 16;
  const Graph& g = pc.g;
  *dq = -1;
  chain->clear();
  std::vector<std::string> todo = {v_end};
  std::unordered_set<std::string> seen;
  while (!todo.empty()) {
    const std::string v = todo.back();
    todo.pop_back();
    if (!seen.insert(v).second) continue;
    const long p = pc.uses.producer_of(v);
    if (p < 0 || pc.dead[p]) return false;
    const Node& n = g.nodes[p];
    if (is_onnx(n, "DequantizeLinear")) {
      QParams xp;
      if (dq_per_tensor(pc, v, &xp) != p || (*dq >= 0 && *dq != p)) return false;
      *dq = p;
      continue;
    }
    if (!lookup_op(n) || chain->size() >= kMaxNodes) return false;
    chain->push_back(p);
    for (const std::string& in : n.inputs) {
      if (in.empty()) continue;
      if (const Tensor* c = constant_value(g, in)) {
        if (c->numel() != 1 || c->rank() > 1 || c->dtype() != DType::kF32) return false;
        continue;
      }
      todo.push_back(in);
    }
  }
  if (*dq < 0 || chain->empty()) return false;
  std::sort(chain->begin(), chain->end());
  const std::unordered_set<long> members(chain->begin(), chain->end());
  *closed = true;
  for (long p : *chain) {
    const std::string& o = g.nodes[p].outputs[0];
    if (o == v_end) continue;
    *closed = *closed && !pc.uses.pinned.count(o);
    for (size_t r : pc.uses.readers.at(o)) *closed = *closed && members.count(static_cast<long>(r));
  }
  const TensorType* xt = g.find_type(g.nodes[*dq].inputs[0]);
  const TensorType* yt = g.find_type(v_end);
  return xt && yt && xt->shape && yt->shape && *xt->shape == *yt->shape;  // no broadcast
}

// The table of `nodes` (a DQ of x, then element-wise nodes in graph order) on x's 256 values (s8: index
// v + 128), evaluated by the reference kernels: the value `out` as a [256] tensor.
bool lookup_table(const Model& model, const Graph& g, const std::vector<long>& nodes, const std::string& out, Tensor* table) {
  const Node& d = g.nodes[nodes[0]];
  const TensorType* xt = g.find_type(d.inputs[0]);
  Tensor xs = Tensor::allocate(xt->dtype, {256});
  for (int i = 0; i < 256; ++i) {
    if (xt->dtype == DType::kU8) xs.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(i);
    else xs.mutable_data<int8_t>()[i] = static_cast<int8_t>(i - 128);
  }
  std::unordered_map<std::string, Tensor> vals = {{d.inputs[0], xs}};
  for (long k : nodes) {
    const Node& n = g.nodes[k];
    std::vector<const Tensor*> in;
    for (const std::string& v : n.inputs) {
      auto it = v.empty() ? vals.end() : vals.find(v);
      in.push_back(v.empty() ? nullptr : it != vals.end() ? &it->second : constant_value(g, v));
      if (!v.empty() && !in.back()) return false;
    }
    auto r = evaluate_node(model, n, in);
    if (!r.is_ok() || r.value().size() != 1 || r.value()[0].numel() != 256) return false;
    vals[n.outputs[0]] = r.value()[0];
  }
  auto it = vals.find(out);
  if (it == vals.end()) return false;
  *table = it->second.reshaped({256});
  return true;
}

// QLookup(x, table) producing `out` in place of `covered` (and of the DQ where the chain read it alone).
void replace_by_lookup(PatternContext& pc, std::vector<long> covered, long dq, Tensor table, const std::string& name,
                       const std::string& out) {
  Graph& g = pc.g;
  const std::string table_name = fresh_name(g, out + "_table");
  g.value_types[table_name] = table.type();
  g.initializers[table_name] = std::move(table);
  Node fused;
  fused.name = name;
  fused.op_type = "QLookup";
  fused.domain = kFerryDomain;
  fused.inputs = {g.nodes[dq].inputs[0], table_name};
  fused.outputs = {out};
  const std::string& dv = g.nodes[dq].outputs[0];
  bool dq_inside = !pc.uses.pinned.count(dv);
  for (size_t r : pc.uses.readers.at(dv)) dq_inside = dq_inside && std::count(covered.begin(), covered.end(), static_cast<long>(r));
  if (dq_inside) covered.push_back(dq);
  pc.replace(covered, std::move(fused));
}

}  // namespace

// DQ(x 8-bit, per tensor) -> element-wise float ops (lookup_chain) -> Q (per tensor): com.ferry.QLookup,
// y = table[x] (EfficientNet's SiLU: DQ -> Sigmoid, Mul -> Q). The table is the covered nodes evaluated by
// their reference kernels on x's 256 values, so the fused node gives the QDQ nodes' bytes. Where values
// of the chain are also read elsewhere, the nodes those readers need stay (fuse_float_lookup may then
// take them).
bool fuse_qlookup(const Model& model, PatternContext& pc, long qi) {
  Graph& g = pc.g;
  QParams yp;
  long dq = -1;
  std::vector<long> chain;
  bool closed = false;
  const std::string v = g.nodes[qi].inputs[0];
  if (!per_tensor_params(g, g.nodes[qi], &yp) || !lookup_chain(pc, v, &dq, &chain, &closed)) return false;
  std::vector<long> nodes = {dq};
  nodes.insert(nodes.end(), chain.begin(), chain.end());
  nodes.push_back(qi);
  Tensor table;
  const std::string out = g.nodes[qi].outputs[0];
  if (!lookup_table(model, g, nodes, out, &table) || (table.dtype() != DType::kU8 && table.dtype() != DType::kI8)) return false;
  // The Q and the chain's nodes no one else reads (all of them where the chain is closed).
  std::vector<long> covered = {qi};
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const std::string& o = g.nodes[*it].outputs[0];
    bool inside = !pc.uses.pinned.count(o);
    for (size_t r : pc.uses.readers.at(o)) inside = inside && std::count(covered.begin(), covered.end(), static_cast<long>(r));
    if (inside) covered.push_back(*it);
  }
  replace_by_lookup(pc, covered, dq, std::move(table), g.nodes[qi].name, out);
  return true;
}

// The same chain whose end is read by float ops (EfficientNet's SiLU feeding the squeeze-excitation Mul
// in float): QLookup with a float table, the chain's values on x's 256 values (bit for bit the nodes').
// Run after fuse_qlookup took the chains that end in a Q.
bool fuse_float_lookup(const Model& model, PatternContext& pc, long i) {
  const Graph& g = pc.g;
  if (!lookup_op(g.nodes[i])) return false;
  const std::string v = g.nodes[i].outputs[0];
  long dq = -1;
  std::vector<long> chain;
  bool closed = false;
  if (!lookup_chain(pc, v, &dq, &chain, &closed) || !closed) return false;
  // The chain's end: read by a node that does not continue it (a longer chain is taken at its own end).
  bool ends = pc.uses.pinned.count(v) > 0;
  for (size_t r : pc.uses.readers.count(v) ? pc.uses.readers.at(v) : std::vector<size_t>{}) {
    long d2 = -1;
    std::vector<long> c2;
    bool closed2 = false;
    ends = ends || !lookup_op(g.nodes[r]) || !lookup_chain(pc, g.nodes[r].outputs[0], &d2, &c2, &closed2) || !closed2;
  }
  if (!ends) return false;
  const TensorType* t = g.find_type(v);
  if (!t || t->dtype != DType::kF32) return false;
  std::vector<long> nodes = {dq};
  nodes.insert(nodes.end(), chain.begin(), chain.end());
  Tensor table;
  if (!lookup_table(model, g, nodes, v, &table) || table.dtype() != DType::kF32) return false;
  replace_by_lookup(pc, chain, dq, std::move(table), g.nodes[i].name, v);
  return true;
}

}  // namespace ferry::qdq
