// Helpers for graph-pass tests: a small model builder, running one pass by name, and checking
// that the rewritten model computes what the original did (on cpu-ref, unoptimized).
//   ModelBuilder b;  auto x = b.input("x", {2, 4});  auto y = b.node("Relu", {x});  b.output(y);
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ops/shape_inference.h"
#include "passes/pipeline.h"
#include "runtime/executor.h"
#include "op_tester.h"

namespace ferry::testing {

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 17) : model_(std::make_shared<Model>()) { model_->opset_imports[""] = opset; }

  std::string input(const std::string& name, std::vector<int64_t> dims, DType dt = DType::kF32) {
    model_->graph.inputs.push_back(ValueInfo{name, TensorType{dt, Shape::of(dims)}});
    model_->graph.value_types[name] = TensorType{dt, Shape::of(dims)};
    return name;
  }
  std::string constant(Tensor t) {
    std::string name = "c";
    name += std::to_string(counter_++);
    model_->graph.initializers[name] = t;
    model_->graph.value_types[name] = t.type();
    return name;
  }
  std::string scalar(float v) { return constant(Tensor::scalar<float>(v)); }
  /// Adds a node with one output (or `outputs` outputs) and returns the first output's name.
  std::string node(const std::string& op, std::vector<std::string> inputs, std::map<std::string, Attribute> attrs = {},
                   int outputs = 1, const std::string& domain = "") {
    Node n;
    n.op_type = op;
    n.domain = domain;
    n.name = op + "_" + std::to_string(counter_++);
    n.inputs = std::move(inputs);
    for (int i = 0; i < outputs; ++i) n.outputs.push_back(n.name + "_out" + std::to_string(i));
    n.attrs = std::move(attrs);
    model_->graph.nodes.push_back(n);
    return n.outputs[0];
  }
  void output(const std::string& v) { model_->graph.outputs.push_back(ValueInfo{v, {}}); }
  Graph& graph() { return model_->graph; }
  /// Imports `domain` at `version` (com.ferry's ops need it).
  void import_opset(const std::string& domain, int64_t version) { model_->opset_imports[domain] = version; }

  /// Shape-infers and returns the model.
  std::shared_ptr<Model> build() {
    Status s = infer_shapes(model_.get());
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    return model_;
  }

 private:
  std::shared_ptr<Model> model_;
  int counter_ = 0;
};

inline Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a;
  a.type = AttrType::kInts;
  a.ints = std::move(v);
  return a;
}
inline Attribute int_attr(int64_t v) {
  Attribute a;
  a.type = AttrType::kInt;
  a.i = v;
  return a;
}

/// Runs the single pass `name` on a copy of `model` (then shape inference) and returns the copy.
inline std::shared_ptr<Model> run_pass(const Model& model, const std::string& name, int* changes = nullptr) {
  std::shared_ptr<Model> copy = model.clone();
  for (const GraphPass& p : graph_passes()) {
    if (name != p.name) continue;
    OptimizeOptions oo;
    PassContext ctx{oo};
    Status s = p.run(copy.get(), ctx);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    s = infer_shapes(copy.get());
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    if (changes) *changes = ctx.changes;
    return copy;
  }
  ADD_FAILURE() << "no pass named " << name;
  return copy;
}

inline int count_ops(const Model& m, const std::string& op) {
  int n = 0;
  for (const Node& node : m.graph.nodes) n += node.op_type == op;
  return n;
}

/// Random f32 feeds for every graph input (seeded), ints for int64 inputs in [0, 4).
inline NamedTensors random_feeds(const Model& m, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  NamedTensors feeds;
  for (const ValueInfo& v : m.graph.inputs) {
    Tensor t = Tensor::allocate(v.type.dtype, v.type.shape->values());
    for (int64_t i = 0; i < t.numel(); ++i) {
      if (v.type.dtype == DType::kF32) t.mutable_data<float>()[i] = nd(rng);
      else if (v.type.dtype == DType::kI64) t.mutable_data<int64_t>()[i] = static_cast<int64_t>(rng() % 4);
    }
    feeds.emplace_back(v.name, t);
  }
  return feeds;
}

inline NamedTensors run_model(std::shared_ptr<const Model> m, const NamedTensors& feeds, const std::string& device = "cpu-ref",
                              int opt_level = 0) {
  ExecutorOptions eo;
  eo.device = device;
  eo.opt_level = opt_level;
  auto ex = Executor::create(std::move(m), eo);
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  NamedTensors out;
  if (!ex.is_ok()) return out;
  Status s = ex.value()->run(feeds, &out);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  return out;
}

/// Expects both models to produce the same outputs on the same random feeds.
inline void expect_same_outputs(std::shared_ptr<const Model> a, std::shared_ptr<const Model> b, double tol = 1e-5) {
  NamedTensors feeds = random_feeds(*a);
  NamedTensors ra = run_model(a, feeds), rb = run_model(b, feeds);
  ASSERT_EQ(ra.size(), rb.size());
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i].first, rb[i].first);
    expect_near(rb[i].second, ra[i].second, tol, tol);
  }
}

}  // namespace ferry::testing
