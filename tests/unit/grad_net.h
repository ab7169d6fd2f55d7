// Net: small models of fed inputs and nodes of any domain for the gradient tests
// (test_grad_nn.cpp, test_grad_norm_pool.cpp), and check_one: a one-node finite-difference check.
#pragma once

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

}  // namespace ferry::testing::grad_net
