// OpTester: builds a one-node model, runs shape inference and the executor, and checks that
// the inferred output types agree with what the kernel produced.
//   auto out = OpTester("Add").input(a).input(b).run();
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/shape_inference.h"
#include "runtime/executor.h"

namespace ferry::testing {

class OpTester {
 public:
  explicit OpTester(std::string op_type, int64_t opset = 17, std::string domain = "") {
    node_.op_type = std::move(op_type);
    node_.domain = std::move(domain);
    node_.name = node_.op_type + "_under_test";
    opset_ = opset;
  }

  OpTester& attr(const std::string& name, int64_t v) { return set(name, [&](Attribute& a) { a.type = AttrType::kInt; a.i = v; }); }
  OpTester& attr(const std::string& name, int v) { return attr(name, static_cast<int64_t>(v)); }
  OpTester& attr(const std::string& name, float v) { return set(name, [&](Attribute& a) { a.type = AttrType::kFloat; a.f = v; }); }
  OpTester& attr(const std::string& name, double v) { return attr(name, static_cast<float>(v)); }
  OpTester& attr(const std::string& name, const char* v) { return attr(name, std::string(v)); }
  OpTester& attr(const std::string& name, std::string v) { return set(name, [&](Attribute& a) { a.type = AttrType::kString; a.s = v; }); }
  OpTester& attr(const std::string& name, std::vector<int64_t> v) { return set(name, [&](Attribute& a) { a.type = AttrType::kInts; a.ints = v; }); }
  OpTester& attr(const std::string& name, std::vector<float> v) { return set(name, [&](Attribute& a) { a.type = AttrType::kFloats; a.floats = v; }); }
  OpTester& attr(const std::string& name, std::vector<std::string> v) { return set(name, [&](Attribute& a) { a.type = AttrType::kStrings; a.strings = v; }); }
  OpTester& attr(const std::string& name, Tensor v) { return set(name, [&](Attribute& a) { a.type = AttrType::kTensor; a.t = v; }); }
  OpTester& attr(const std::string& name, std::shared_ptr<Graph> g) { return set(name, [&](Attribute& a) { a.type = AttrType::kGraph; a.g = g; }); }

  /// A runtime input (a graph input fed at run time).
  OpTester& input(Tensor t) { return add_input(std::move(t), false); }
  /// An input stored as an initializer (a constant the shape rule can read).
  OpTester& const_input(Tensor t) { return add_input(std::move(t), true); }
  /// An omitted optional input ("").
  OpTester& no_input() {
    node_.inputs.emplace_back();
    return *this;
  }
  OpTester& outputs(int n) {
    num_outputs_ = n;
    return *this;
  }
  /// Declares the graph input with symbolic dims instead of the tensor's (tests symbolic shape rules).
  OpTester& symbolic_input_shape(size_t input_index, Shape shape) {
    symbolic_[input_index] = std::move(shape);
    return *this;
  }

  /// Runs; on failure returns the status (shape inference or kernel error).
  StatusOr<std::vector<Tensor>> run_status(const std::string& device = "cpu-ref") {
    auto model = std::make_shared<Model>();
    model->opset_imports[node_.domain] = opset_;
    if (!node_.domain.empty()) model->opset_imports[""] = 17;
    Graph& g = model->graph;
    NamedTensors feeds;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const auto& [name, t, is_const] = inputs_[i];
      if (is_const) {
        g.initializers[name] = t;
        g.value_types[name] = t.type();
      } else {
        TensorType type = t.type();
        auto it = symbolic_.find(i);
        if (it != symbolic_.end()) type.shape = it->second;
        g.inputs.push_back(ValueInfo{name, type});
        g.value_types[name] = type;
        feeds.emplace_back(name, t);
      }
    }
    Node node = node_;
    node.outputs.clear();
    for (int i = 0; i < num_outputs_; ++i) {
      node.outputs.push_back("out" + std::to_string(i));
      g.outputs.push_back(ValueInfo{"out" + std::to_string(i), {}});
    }
    g.nodes.push_back(node);
    RETURN_IF_ERROR(infer_shapes(model.get()));
    ASSIGN_OR_RETURN(auto ex, Executor::create(model, ExecutorOptions{device}));
    NamedTensors outs;
    RETURN_IF_ERROR(ex->run(feeds, &outs));
    std::vector<Tensor> result;
    for (size_t i = 0; i < outs.size(); ++i) {
      const TensorType& inferred = model->graph.value_types[outs[i].first];
      const Tensor& t = outs[i].second;
      if (inferred.dtype != DType::kUndefined && inferred.dtype != t.dtype())
        return internal_error("output " + std::to_string(i) + ": shape rule says " + inferred.to_string() +
                              " but the kernel produced " + t.type().to_string());
      if (inferred.shape) {
        if (inferred.shape->rank() != t.rank())
          return internal_error("output " + std::to_string(i) + ": shape rule says " + inferred.to_string() +
                                " but the kernel produced " + t.type().to_string());
        for (int64_t d = 0; d < t.rank(); ++d)
          if (inferred.shape->dims[d].is_known() && inferred.shape->dims[d].value != t.dim(d))
            return internal_error("output " + std::to_string(i) + ": shape rule says " + inferred.to_string() +
                                  " but the kernel produced " + t.type().to_string());
      }
      result.push_back(t);
    }
    last_model_ = model;
    return result;
  }

  /// Runs and fails the test on error.
  std::vector<Tensor> run(const std::string& device = "cpu-ref") {
    auto r = run_status(device);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    if (!r.is_ok()) return std::vector<Tensor>(static_cast<size_t>(num_outputs_));
    return std::move(r).value();
  }

  /// The model of the last run (to inspect inferred types).
  std::shared_ptr<Model> last_model() const { return last_model_; }

 private:
  template <typename F>
  OpTester& set(const std::string& name, F f) {
    Attribute a;
    f(a);
    node_.attrs[name] = a;
    return *this;
  }
  OpTester& add_input(Tensor t, bool is_const) {
    std::string name = "in" + std::to_string(node_.inputs.size());
    node_.inputs.push_back(name);
    inputs_.emplace_back(name, std::move(t), is_const);
    return *this;
  }

  Node node_;
  int64_t opset_;
  int num_outputs_ = 1;
  std::vector<std::tuple<std::string, Tensor, bool>> inputs_;
  std::map<size_t, Shape> symbolic_;
  std::shared_ptr<Model> last_model_;
};

/// Tensor builder: T_({1, 2, 3}, {3}) makes an f32 [3]; use Tensor::from_vector for other types.
inline Tensor T_(const std::vector<float>& v, std::vector<int64_t> dims) { return Tensor::from_vector<float>(v, std::move(dims)); }
inline Tensor I64_(const std::vector<int64_t>& v, std::vector<int64_t> dims) { return Tensor::from_vector<int64_t>(v, std::move(dims)); }

/// Expects same dims and every element within atol + rtol * |expected| (NaN matches NaN).
inline void expect_near(const Tensor& actual, const Tensor& expected, double atol = 1e-5, double rtol = 1e-5) {
  ASSERT_EQ(actual.dtype(), expected.dtype()) << dtype_name(actual.dtype()) << " vs " << dtype_name(expected.dtype());
  ASSERT_EQ(actual.dims(), expected.dims()) << dims_to_string(actual.dims()) << " vs " << dims_to_string(expected.dims());
  if (actual.dtype() == DType::kString) {
    EXPECT_EQ(actual.strings(), expected.strings());
    return;
  }
  for (int64_t i = 0; i < actual.numel(); ++i) {
    double a = actual.get_double(i), e = expected.get_double(i);
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(a)) << "element " << i;
      continue;
    }
    if (std::isinf(e)) {
      EXPECT_EQ(a, e) << "element " << i;
      continue;
    }
    EXPECT_NEAR(a, e, atol + rtol * std::fabs(e)) << "element " << i;
  }
}

/// The shape the shape rules inferred for `value` in the last run ("[rank?]" when unknown).
inline std::string inferred(const OpTester& t, const std::string& value = "out0") {
  const TensorType& ty = t.last_model()->graph.value_types[value];
  return ty.shape ? ty.shape->to_string() : "[rank?]";
}

/// f32 tensor of `dims` holding 0, 1, 2, ... in order.
inline Tensor iota_f(std::vector<int64_t> dims) {
  Tensor t = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = static_cast<float>(i);
  return t;
}

/// Expects a failed run whose message contains every one of `parts`.
inline void expect_error(StatusOr<std::vector<Tensor>> r, std::vector<std::string> parts) {
  ASSERT_FALSE(r.is_ok());
  for (const std::string& p : parts) EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
}

}  // namespace ferry::testing
