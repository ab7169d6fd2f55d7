// The gradient registry: one gradient definition per (domain, op, first opset), kept as data
// next to the op families (grad_families.inc), as PyTorch's derivatives.yaml and ONNX Runtime's
// gradient builders do. A definition says which inputs are differentiable, its formula (for
// docs and `ferry check --train`), which ops it emits, and a build function that appends the
// backward nodes of one forward node to the training graph through a GradContext.
//
//   r.add(GradDef{.op = "Relu", .inputs = 0b1, .formula = "dX = dY * (Y > 0)",
//                 .emits = {"com.ferry.ReluGrad"}, .build = [](GradContext& g) -> Status {
//                   g.set_input_grad(0, g.emit1("ReluGrad", {g.output_grad(0), g.output(0)}, {}, kFerryGradDomain));
//                   return Status::ok();
//                 }});
//
// Backward kernels are real ops (com.ferry domain, src/ops/grad_*.cpp) with shape rules and
// reference kernels, so a training graph runs, is optimized and memory-planned like any graph.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"
#include "ops/registry.h"

namespace ferry {

/// Domain of the backward ops (the same as ferry's fused ops).
inline constexpr const char* kFerryGradDomain = "com.ferry";

/// The training graph under construction: nodes are appended to `graph` in an order that stays
/// topological (backward nodes after the forward nodes they read).
struct GradGraph {
  Model* model = nullptr;
  /// Values known at load time (initializers that are not trained, shape computations).
  const std::unordered_map<std::string, Tensor>* constants = nullptr;
  int64_t next_id = 0;
  /// A fresh value or node name "grad/<hint>_<n>".
  std::string fresh(const std::string& hint);
};

/// What one gradient definition sees: the forward node, the gradients flowing into its outputs,
/// which input gradients are wanted; and how it emits nodes.
class GradContext : public AttrReader {
 public:
  GradContext(const Node& node, int64_t opset, GradGraph* g, std::vector<std::string> output_grads,
              std::vector<bool> wanted);

  int64_t opset() const { return opset_; }
  int64_t num_inputs() const { return static_cast<int64_t>(node().inputs.size()); }
  int64_t num_outputs() const { return static_cast<int64_t>(node().outputs.size()); }
  /// Forward input / output value names ("" when omitted or past the end).
  const std::string& input(int64_t i) const;
  const std::string& output(int64_t i) const;
  /// dLoss/d(output i); "" when no gradient flows into that output (it counts as zero).
  const std::string& output_grad(int64_t i) const;
  /// Whether dLoss/d(input i) is needed (the input leads back to a trained parameter).
  bool wants_input_grad(int64_t i) const { return i < static_cast<int64_t>(wanted_.size()) && wanted_[i]; }
  /// The static type of a forward value (inferred with the training shapes); nullptr if unknown.
  const TensorType* type_of(const std::string& value) const;
  /// Static dims of a forward value; an error naming the node when any dim is not known.
  StatusOr<std::vector<int64_t>> dims_of(const std::string& value) const;
  /// The value of a forward value known at load time (initializer not trained, constant
  /// shape computation), or nullptr.
  const Tensor* constant_of(const std::string& value) const;

  /// Appends `op_type(inputs)` with `num_outputs` fresh outputs; returns their names.
  std::vector<std::string> emit(const std::string& op_type, std::vector<std::string> inputs, int64_t num_outputs = 1,
                                std::map<std::string, Attribute> attrs = {}, const std::string& domain = "");
  /// As emit, but output k is left "" (not computed: the kernel sees an empty output name) where
  /// !wanted[k]; returns the names, "" for those. For backward ops with several optional outputs
  /// (ConvGrad's dX, dW, dB).
  std::vector<std::string> emit_wanted(const std::string& op_type, std::vector<std::string> inputs,
                                       const std::vector<bool>& wanted, std::map<std::string, Attribute> attrs = {},
                                       const std::string& domain = "");
  /// The same for one output.
  std::string emit1(const std::string& op_type, std::vector<std::string> inputs, std::map<std::string, Attribute> attrs = {},
                    const std::string& domain = "") {
    return emit(op_type, std::move(inputs), 1, std::move(attrs), domain)[0];
  }
  /// Adds a constant (initializer) and returns its name.
  std::string constant(Tensor t, const std::string& hint = "const");
  /// A scalar constant of the dtype of forward value `like` (f16, bf16, f64; otherwise f32).
  std::string scalar_like(double v, const std::string& like);
  /// An int64 1-D constant.
  std::string ints_constant(const std::vector<int64_t>& v);

  /// Emits ReduceSum of `value` over `axes` in the form the model's opset wants (axes attribute
  /// before opset 13, input from 13).
  std::string reduce_sum(const std::string& value, const std::vector<int64_t>& axes, bool keepdims);
  /// Emits Reshape of `value` to the static `dims`.
  std::string reshape(const std::string& value, const std::vector<int64_t>& dims);
  /// Sums a gradient of the broadcast shape `grad_dims` down to the static shape of forward value
  /// `like` (numpy broadcasting undone); returns `grad` when no reduction is needed.
  StatusOr<std::string> sum_to(const std::string& grad, const std::vector<int64_t>& grad_dims, const std::string& like);

  /// Records dLoss/d(input i). Ignored unless wants_input_grad(i).
  void set_input_grad(int64_t i, const std::string& grad);
  const std::vector<std::string>& input_grads() const { return input_grads_; }

  /// An InvalidModel error naming the node.
  Status error(const std::string& msg) const;

 private:
  int64_t opset_;
  GradGraph* g_;
  std::vector<std::string> output_grads_;
  std::vector<bool> wanted_;
  std::vector<std::string> input_grads_;
};

using GradFn = Status (*)(GradContext&);

/// One gradient definition, valid from `since_version` until the op's next definition.
struct GradDef {
  const char* op = "";
  const char* domain = "";  // "" = ai.onnx
  int64_t since_version = 1;
  /// Bit i set: input i is differentiable (others, e.g. shapes, indices, never get a gradient).
  uint64_t inputs = ~0ull;
  /// The formula in words ("dX = dY * (Y > 0)"): `ferry ops --train`, docs, check --train.
  const char* formula = "";
  /// The ops the build function may emit ("com.ferry.ReluGrad", "ReduceSum").
  std::vector<const char*> emits;
  GradFn build = nullptr;
  int64_t until_version = kMaxOpset;  // filled by the registry
};

class GradRegistry {
 public:
  void add(GradDef def);
  /// The definition that applies at `opset`, or nullptr when the op has no gradient.
  const GradDef* find(const std::string& domain, const std::string& op, int64_t opset) const;
  /// Every definition, ordered by domain then op then since_version.
  std::vector<const GradDef*> all() const;
  void finalize();

 private:
  std::map<std::string, std::vector<GradDef>> defs_;  // key: domain + "::" + op
};

/// The process-wide registry with every gradient family registered (grad_families.inc).
const GradRegistry& grad_registry();

/// Attribute constructors for emitted nodes.
Attribute attr_int(int64_t v);
Attribute attr_float(float v);
Attribute attr_ints(std::vector<int64_t> v);
Attribute attr_string(const std::string& v);

}  // namespace ferry
