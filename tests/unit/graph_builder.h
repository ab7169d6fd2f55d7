// GraphBuilder: small multi-node models for tests of passes and the executor.
//   GraphBuilder b(17);
//   std::string x = b.input("x", DType::kF32, {2, 3});
//   std::string y = b.node("Relu", {x});
//   b.output(b.node("Tanh", {y}));
//   std::shared_ptr<Model> m = b.build();   // shape inference ran
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/shape_inference.h"

namespace ferry::testing {

class GraphBuilder {
 public:
  explicit GraphBuilder(int64_t opset = 17) : model_(std::make_shared<Model>()) {
    model_->opset_imports[""] = opset;
    model_->graph.name = "test";
  }

  /// A graph input; `dims` entries < 0 are symbolic ("d0", "d1", ...).
  std::string input(const std::string& name, DType dtype, const std::vector<int64_t>& dims) {
    Shape s;
    for (size_t i = 0; i < dims.size(); ++i) s.dims.push_back(dims[i] >= 0 ? Dim(dims[i]) : Dim::symbolic("d" + std::to_string(i)));
    TensorType t{dtype, s};
    model_->graph.inputs.push_back({name, t});
    model_->graph.value_types[name] = t;
    return name;
  }
  std::string initializer(const std::string& name, Tensor t) {
    model_->graph.value_types[name] = t.type();
    model_->graph.initializers[name] = std::move(t);
    return name;
  }
  /// Adds `op(inputs)` with one output (or `num_outputs`); returns output 0's name.
  std::string node(const std::string& op, std::vector<std::string> inputs, std::map<std::string, Attribute> attrs = {},
                   int num_outputs = 1) {
    Node n;
    n.op_type = op;
    n.name = op + "_" + std::to_string(model_->graph.nodes.size());
    n.inputs = std::move(inputs);
    for (int k = 0; k < num_outputs; ++k) n.outputs.push_back(n.name + ":" + std::to_string(k));
    n.attrs = std::move(attrs);
    model_->graph.nodes.push_back(n);
    return n.outputs[0];
  }
  void output(const std::string& value) { model_->graph.outputs.push_back({value, {}}); }

  std::shared_ptr<Model> build() {
    Status st = infer_shapes(model_.get());
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    return model_;
  }

  static Attribute f(float v) {
    Attribute a;
    a.type = AttrType::kFloat;
    a.f = v;
    return a;
  }
  static Attribute i(int64_t v) {
    Attribute a;
    a.type = AttrType::kInt;
    a.i = v;
    return a;
  }
  static Attribute ints(std::vector<int64_t> v) {
    Attribute a;
    a.type = AttrType::kInts;
    a.ints = std::move(v);
    return a;
  }
  static Attribute s(const std::string& v) {
    Attribute a;
    a.type = AttrType::kString;
    a.s = v;
    return a;
  }

 private:
  std::shared_ptr<Model> model_;
};

/// An f32 tensor of standard-normal values from `seed` (weights and inputs for tests).
inline Tensor random_tensor(const std::vector<int64_t>& dims, uint32_t seed) {
  Tensor t = Tensor::allocate(DType::kF32, dims);
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  float* p = t.mutable_data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

}  // namespace ferry::testing
