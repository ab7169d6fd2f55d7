// Gradient family 'activation' (see grad_families.inc and grad/registry.h): pointwise activations,
// Clip, Softmax and LogSoftmax. Most emit one com.ferry backward op (src/ops/grad_activation.cpp)
// reading the forward input or output; Erf is a few composite nodes.
#include <cmath>

#include "grad/registry.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::string;
using std::vector;


// dX = Op(dY, forward value) for a backward op of the com.ferry domain.
Status set_backward_op(GradContext& g, const char* op, const string& forward, std::map<string, Attribute> attrs = {}) {
  g.set_input_grad(0, g.emit1(op, {g.output_grad(0), forward}, std::move(attrs), kFerryGradDomain));
  return Status::ok();
}

Status grad_relu(GradContext& g) { return set_backward_op(g, "ReluGrad", g.output(0)); }
Status grad_sigmoid(GradContext& g) { return set_backward_op(g, "SigmoidGrad", g.output(0)); }
Status grad_tanh(GradContext& g) { return set_backward_op(g, "TanhGrad", g.output(0)); }
Status grad_hard_swish(GradContext& g) { return set_backward_op(g, "HardSwishGrad", g.input(0)); }

Status grad_leaky_relu(GradContext& g) {
  return set_backward_op(g, "LeakyReluGrad", g.input(0), {{"alpha", attr_float(g.get_float("alpha", 0.01f))}});
}

Status grad_hard_sigmoid(GradContext& g) {
  return set_backward_op(g, "HardSigmoidGrad", g.input(0),
                         {{"alpha", attr_float(g.get_float("alpha", 0.2f))}, {"beta", attr_float(g.get_float("beta", 0.5f))}});
}

Status grad_gelu(GradContext& g) {
  const string mode = g.get_string("approximate", "none");
  if (mode != "none" && mode != "tanh") return g.error("attribute approximate is '" + mode + "'; expected 'none' or 'tanh'");
  return set_backward_op(g, "GeluGrad", g.input(0), {{"approximate", attr_string(mode)}});
}

// Clip-6: the bounds are attributes; they become scalar constants of X's type.
Status grad_clip6(GradContext& g) {
  const string& x = g.input(0);
  vector<string> in = {g.output_grad(0), x};
  in.push_back(g.has("min") ? g.scalar_like(g.get_float("min", 0.0f), x) : "");
  if (g.has("max")) in.push_back(g.scalar_like(g.get_float("max", 0.0f), x));
  if (in.back().empty()) in.pop_back();
  g.set_input_grad(0, g.emit1("ClipGrad", std::move(in), {}, kFerryGradDomain));
  return Status::ok();
}

// Clip-11+: optional min and max inputs (not differentiated).
Status grad_clip11(GradContext& g) {
  vector<string> in = {g.output_grad(0), g.input(0), g.input(1), g.input(2)};
  while (in.back().empty()) in.pop_back();
  g.set_input_grad(0, g.emit1("ClipGrad", std::move(in), {}, kFerryGradDomain));
  return Status::ok();
}

Status grad_erf(GradContext& g) {
  // d erf(x)/dx = 2 / sqrt(pi) * exp(-x^2).
  const string& x = g.input(0);
  string e = g.emit1("Exp", {g.emit1("Neg", {g.emit1("Mul", {x, x})})});
  string t = g.emit1("Mul", {e, g.scalar_like(2.0 / std::sqrt(3.14159265358979323846), x)});
  g.set_input_grad(0, g.emit1("Mul", {g.output_grad(0), t}));
  return Status::ok();
}

// Softmax / LogSoftmax. Opset 13 normalizes along one axis; opsets 1 and 11 coerce the input to
// 2-D [prod(dims[:axis]), prod(dims[axis:])], so the backward op runs on that 2-D view.
template <bool kLegacy>
Status grad_softmax_family(GradContext& g, const char* backward_op) {
  ASSIGN_OR_RETURN(vector<int64_t> dims, g.dims_of(g.input(0)));
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t axis_attr = g.get_int("axis", kLegacy ? 1 : -1);
  int64_t axis = axis_attr;
  if (!normalize_axis(&axis, rank))
    return g.error("attribute axis " + std::to_string(axis_attr) + " is out of range for rank " + std::to_string(rank));
  string dy = g.output_grad(0), y = g.output(0);
  const bool flatten = kLegacy && axis != rank - 1;
  if (flatten) {
    int64_t outer = 1, n = 1;
    for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : n) *= dims[static_cast<size_t>(i)];
    dy = g.reshape(dy, {outer, n});
    y = g.reshape(y, {outer, n});
    axis = 1;
  }
  string dx = g.emit1(backward_op, {dy, y}, {{"axis", attr_int(axis)}}, kFerryGradDomain);
  g.set_input_grad(0, flatten ? g.reshape(dx, dims) : dx);
  return Status::ok();
}

Status grad_softmax_legacy(GradContext& g) { return grad_softmax_family<true>(g, "SoftmaxGrad"); }
Status grad_softmax(GradContext& g) { return grad_softmax_family<false>(g, "SoftmaxGrad"); }
Status grad_log_softmax_legacy(GradContext& g) { return grad_softmax_family<true>(g, "LogSoftmaxGrad"); }
Status grad_log_softmax(GradContext& g) { return grad_softmax_family<false>(g, "LogSoftmaxGrad"); }

}  // namespace

void register_activation_grads(GradRegistry& r) {
  r.add(GradDef{.op = "Relu", .inputs = 0b1, .formula = "dX = dY * (Y > 0)", .emits = {"com.ferry.ReluGrad"},
                .build = grad_relu});
  r.add(GradDef{.op = "Clip", .since_version = 6, .inputs = 0b1,
                .formula = "dX = dY * (min <= X <= max) (bounds from attributes)", .emits = {"com.ferry.ClipGrad"},
                .build = grad_clip6});
  r.add(GradDef{.op = "Clip", .since_version = 11, .inputs = 0b1,
                .formula = "dX = dY * (min <= X <= max) (min, max not differentiated)", .emits = {"com.ferry.ClipGrad"},
                .build = grad_clip11});
  r.add(GradDef{.op = "LeakyRelu", .inputs = 0b1, .formula = "dX = dY * (X > 0 ? 1 : alpha)",
                .emits = {"com.ferry.LeakyReluGrad"}, .build = grad_leaky_relu});
  r.add(GradDef{.op = "Sigmoid", .inputs = 0b1, .formula = "dX = dY * Y * (1 - Y)", .emits = {"com.ferry.SigmoidGrad"},
                .build = grad_sigmoid});
  r.add(GradDef{.op = "Tanh", .inputs = 0b1, .formula = "dX = dY * (1 - Y^2)", .emits = {"com.ferry.TanhGrad"},
                .build = grad_tanh});
  r.add(GradDef{.op = "Erf", .inputs = 0b1, .formula = "dX = dY * 2 / sqrt(pi) * exp(-X^2)",
                .emits = {"Mul", "Neg", "Exp"}, .build = grad_erf});
  r.add(GradDef{.op = "HardSwish", .inputs = 0b1, .formula = "dX = dY * (X < -3 ? 0 : X <= 3 ? X / 3 + 1/2 : 1)",
                .emits = {"com.ferry.HardSwishGrad"}, .build = grad_hard_swish});
  r.add(GradDef{.op = "HardSigmoid", .inputs = 0b1, .formula = "dX = dY * alpha * (0 < alpha X + beta < 1)",
                .emits = {"com.ferry.HardSigmoidGrad"}, .build = grad_hard_sigmoid});
  r.add(GradDef{.op = "Softmax", .inputs = 0b1,
                .formula = "dX = Y * (dY - sum(dY * Y)) over the 2-D rows [prod(dims[:axis]), prod(dims[axis:])]",
                .emits = {"com.ferry.SoftmaxGrad", "Reshape"}, .build = grad_softmax_legacy});
  r.add(GradDef{.op = "Softmax", .since_version = 13, .inputs = 0b1, .formula = "dX = Y * (dY - sum_axis(dY * Y))",
                .emits = {"com.ferry.SoftmaxGrad"}, .build = grad_softmax});
  r.add(GradDef{.op = "LogSoftmax", .inputs = 0b1,
                .formula = "dX = dY - exp(Y) * sum(dY) over the 2-D rows [prod(dims[:axis]), prod(dims[axis:])]",
                .emits = {"com.ferry.LogSoftmaxGrad", "Reshape"}, .build = grad_log_softmax_legacy});
  r.add(GradDef{.op = "LogSoftmax", .since_version = 13, .inputs = 0b1, .formula = "dX = dY - exp(Y) * sum_axis(dY)",
                .emits = {"com.ferry.LogSoftmaxGrad"}, .build = grad_log_softmax});
  r.add(GradDef{.op = "Gelu", .since_version = 20, .inputs = 0b1,
                .formula = "dX = dY * (Phi(X) + X phi(X)) (approximate='tanh': the derivative of the tanh form)",
                .emits = {"com.ferry.GeluGrad"}, .build = grad_gelu});
  r.add(GradDef{.op = "Gelu", .domain = kFerryGradDomain, .inputs = 0b1,
                .formula = "dX = dY * (Phi(X) + X phi(X)) (approximate='tanh': the derivative of the tanh form)",
                .emits = {"com.ferry.GeluGrad"}, .build = grad_gelu});
}

}  // namespace ferry
