// Net: small models of fed inputs and nodes of any domain for the gradient tests
// (test_grad_nn.cpp, test_grad_norm_pool.cpp), and check_one: a one-node finite-difference check.
#pragma once

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grad_check.h"

namespace ferry::testing::grad_net {

using Attrs = std::map<std::string, Attribute>;

/// A small model of one or more nodes whose inputs are all fed (and may be checked).
struct Net {
  std::shared_ptr<Model> m = std::make_shared<Model>();
  NamedTensors feeds;
  explicit Net(int64_t opset = 17) {
    m->opset_imports[""] = opset;
    m->graph.name = "grad_nn";
  }
  std::string in(const std::string& name, Tensor t) {
    m->graph.inputs.push_back({name, t.type()});
    m->graph.value_types[name] = t.type();
    feeds.emplace_back(name, std::move(t));
    return name;
  }
  std::string init(const std::string& name, Tensor t) {
    m->graph.value_types[name] = t.type();
    m->graph.initializers[name] = std::move(t);
    return name;
  }
  std::vector<std::string> node(const std::string& op, std::vector<std::string> inputs, Attrs attrs = {},
                                int num_outputs = 1, const std::string& domain = "") {
    Node n;
    n.op_type = op;
    n.domain = domain;
    n.name = op + "_" + std::to_string(m->graph.nodes.size());
    n.inputs = std::move(inputs);
    for (int k = 0; k < num_outputs; ++k) n.outputs.push_back(n.name + ":" + std::to_string(k));
    n.attrs = std::move(attrs);
    if (!domain.empty()) m->opset_imports[domain] = 1;
    m->graph.nodes.push_back(n);
    return n.outputs;
  }
  void out(const std::string& v) { m->graph.outputs.push_back({v, {}}); }
  std::shared_ptr<Model> build() {
    Status st = infer_shapes(m.get());
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return m;
  }
};

inline Attribute ints(std::vector<int64_t> v) { return GraphBuilder::ints(std::move(v)); }
inline Attribute i(int64_t v) { return GraphBuilder::i(v); }
inline Attribute f(float v) { return GraphBuilder::f(v); }
inline Attribute s(const std::string& v) { return GraphBuilder::s(v); }

/// One node with every input fed and output 0 checked with respect to `wrt`.
inline void check_one(const std::string& op, std::vector<std::pair<std::string, Tensor>> inputs, Attrs attrs,
                      std::vector<std::string> wrt, int64_t opset = 17) {
  Net n(opset);
  std::vector<std::string> names;
  for (auto& [name, t] : inputs) names.push_back(name.empty() ? "" : n.in(name, t));
  n.out(n.node(op, names, std::move(attrs))[0]);
  expect_gradients_match(n.build(), n.feeds, wrt);
}

/// w_k = sin(a * k + b) * c in f64 (the inputs of tests/unit/data/gen_grad_nn_refs.py).
inline Tensor wave(const std::vector<int64_t>& dims, double a, double b, double c) {
  Tensor t = Tensor::allocate(DType::kF64, dims);
  for (int64_t k = 0; k < t.numel(); ++k) t.mutable_data<double>()[k] = std::sin(a * static_cast<double>(k) + b) * c;
  return t;
}

/// d sum(Y * R) / d wrt for the model's output 0 Y, with R_k = cos(0.91 k) (the PyTorch reference
/// script's weights, in Y's dtype): the training graph run (on cpu-ref at opt level 0 unless
/// `options` say otherwise), one gradient per `wrt`.
inline std::vector<Tensor> cos_weighted_gradients(const std::shared_ptr<Model>& model, const NamedTensors& feeds,
                                                  const std::vector<std::string>& wrt,
                                                  ExecutorOptions options = {.device = "cpu-ref", .opt_level = 0}) {
  std::vector<Tensor> result;
  auto fwd = Executor::create(model->clone(), ExecutorOptions{.device = "cpu-ref", .opt_level = 0});
  EXPECT_TRUE(fwd.is_ok()) << fwd.status().to_string();
  if (!fwd.is_ok()) return result;
  NamedTensors outs;
  Status st = fwd.value()->run(feeds, &outs);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!st.is_ok()) return result;
  std::shared_ptr<Model> m = model->clone();
  Graph& g = m->graph;
  Tensor r = Tensor::allocate(DType::kF64, outs[0].second.dims());
  for (int64_t k = 0; k < r.numel(); ++k) r.mutable_data<double>()[k] = std::cos(0.91 * static_cast<double>(k));
  if (outs[0].second.dtype() != DType::kF64) r = cast_tensor(r, outs[0].second.dtype()).value();
  g.value_types["cos/r"] = r.type();
  g.initializers["cos/r"] = r;
  g.nodes.push_back(Node{.name = "cos/mul", .op_type = "Mul", .inputs = {g.outputs[0].name, "cos/r"}, .outputs = {"cos/m"}});
  Node sum{.name = "cos/sum", .op_type = "ReduceSum", .inputs = {"cos/m"}, .outputs = {"cos/loss"}};
  sum.attrs["keepdims"] = GraphBuilder::i(0);
  g.nodes.push_back(sum);
  g.outputs.clear();
  std::unordered_map<std::string, Tensor> constants;
  st = infer_shapes(m.get(), &constants);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  auto grads = build_gradients(m.get(), "cos/loss", wrt, &constants);
  EXPECT_TRUE(grads.is_ok()) << grads.status().to_string();
  if (!grads.is_ok()) return result;
  for (const auto& w : wrt) {
    EXPECT_TRUE(grads.value().count(w)) << "no gradient for '" << w << "'";
    if (!grads.value().count(w)) return result;
    g.outputs.push_back({grads.value().at(w), {}});
  }
  st = infer_shapes(m.get());
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  auto ex = Executor::create(m, options);
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  if (!ex.is_ok()) return result;
  outs.clear();
  st = ex.value()->run(feeds, &outs);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  for (auto& [name, t] : outs) result.push_back(t);
  return result;
}

}  // namespace ferry::testing::grad_net
