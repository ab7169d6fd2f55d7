// Gradient family 'elementwise' (see grad_families.inc and grad/registry.h): the arithmetic and
// pointwise math ops, and the value-passing Identity, Cast and Where. Each gradient is a few
// composite ONNX nodes; the broadcasting of binary ops is undone with GradContext::sum_to.
#include "grad/registry.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::string;
using std::vector;


// Records `full` (a gradient of the output's broadcast shape) as input i's gradient, summed down
// to the input's shape.
Status set_summed(GradContext& g, int64_t i, const string& full) {
  ASSIGN_OR_RETURN(vector<int64_t> dims, g.dims_of(g.output(0)));
  ASSIGN_OR_RETURN(string d, g.sum_to(full, dims, g.input(i)));
  g.set_input_grad(i, d);
  return Status::ok();
}

Status grad_add(GradContext& g) {
  for (int64_t i = 0; i < 2; ++i)
    if (g.wants_input_grad(i)) RETURN_IF_ERROR(set_summed(g, i, g.output_grad(0)));
  return Status::ok();
}

Status grad_sub(GradContext& g) {
  if (g.wants_input_grad(0)) RETURN_IF_ERROR(set_summed(g, 0, g.output_grad(0)));
  if (g.wants_input_grad(1)) RETURN_IF_ERROR(set_summed(g, 1, g.emit1("Neg", {g.output_grad(0)})));
  return Status::ok();
}

Status grad_mul(GradContext& g) {
  const string& dy = g.output_grad(0);
  if (g.wants_input_grad(0)) RETURN_IF_ERROR(set_summed(g, 0, g.emit1("Mul", {dy, g.input(1)})));
  if (g.wants_input_grad(1)) RETURN_IF_ERROR(set_summed(g, 1, g.emit1("Mul", {dy, g.input(0)})));
  return Status::ok();
}

Status grad_div(GradContext& g) {
  const string& dy = g.output_grad(0);
  if (g.wants_input_grad(0)) RETURN_IF_ERROR(set_summed(g, 0, g.emit1("Div", {dy, g.input(1)})));
  if (g.wants_input_grad(1)) {
    // d(A/B)/dB = -A/B^2 = -Y/B.
    string t = g.emit1("Div", {g.emit1("Mul", {dy, g.output(0)}), g.input(1)});
    RETURN_IF_ERROR(set_summed(g, 1, g.emit1("Neg", {t})));
  }
  return Status::ok();
}

Status grad_pow(GradContext& g) {
  const string& dy = g.output_grad(0);
  const string& a = g.input(0);
  if (g.wants_input_grad(0)) {
    const TensorType* ta = g.type_of(a);
    const TensorType* tb = g.type_of(g.input(1));
    if (!ta || !tb) return g.error("the element types of the base and exponent are not known");
    // From opset 12 the exponent may be an integer tensor: cast it to the base's type.
    string b = g.input(1);
    if (tb->dtype != ta->dtype) b = g.emit1("Cast", {b}, {{"to", attr_int(static_cast<int64_t>(ta->dtype))}});
    string b_minus_1 = g.emit1("Sub", {b, g.scalar_like(1.0, a)});
    string t = g.emit1("Mul", {b, g.emit1("Pow", {a, b_minus_1})});
    RETURN_IF_ERROR(set_summed(g, 0, g.emit1("Mul", {dy, t})));
  }
  if (g.wants_input_grad(1)) {
    string t = g.emit1("Mul", {g.output(0), g.emit1("Log", {a})});
    RETURN_IF_ERROR(set_summed(g, 1, g.emit1("Mul", {dy, t})));
  }
  return Status::ok();
}

Status grad_sqrt(GradContext& g) {
  string half_dy = g.emit1("Mul", {g.output_grad(0), g.scalar_like(0.5, g.output(0))});
  g.set_input_grad(0, g.emit1("Div", {half_dy, g.output(0)}));
  return Status::ok();
}

Status grad_neg(GradContext& g) {
  g.set_input_grad(0, g.emit1("Neg", {g.output_grad(0)}));
  return Status::ok();
}

Status grad_exp(GradContext& g) {
  g.set_input_grad(0, g.emit1("Mul", {g.output_grad(0), g.output(0)}));
  return Status::ok();
}

Status grad_log(GradContext& g) {
  g.set_input_grad(0, g.emit1("Div", {g.output_grad(0), g.input(0)}));
  return Status::ok();
}

Status grad_sum(GradContext& g) {
  for (int64_t i = 0; i < g.num_inputs(); ++i)
    if (g.wants_input_grad(i)) RETURN_IF_ERROR(set_summed(g, i, g.output_grad(0)));
  return Status::ok();
}

Status grad_identity(GradContext& g) {
  g.set_input_grad(0, g.output_grad(0));
  return Status::ok();
}

Status grad_cast(GradContext& g) {
  const TensorType* t = g.type_of(g.input(0));
  if (!t || !dtype_is_float(t->dtype)) return g.error("the input's element type is not a known float type");
  g.set_input_grad(0, g.emit1("Cast", {g.output_grad(0)}, {{"to", attr_int(static_cast<int64_t>(t->dtype))}}));
  return Status::ok();
}

Status grad_where(GradContext& g) {
  const string& dy = g.output_grad(0);
  const string& cond = g.input(0);
  string zero = g.scalar_like(0.0, g.output(0));
  if (g.wants_input_grad(1)) RETURN_IF_ERROR(set_summed(g, 1, g.emit1("Where", {cond, dy, zero})));
  if (g.wants_input_grad(2)) RETURN_IF_ERROR(set_summed(g, 2, g.emit1("Where", {cond, zero, dy})));
  return Status::ok();
}

Status grad_reciprocal(GradContext& g) {
  // d(1/X)/dX = -1/X^2 = -Y^2.
  string y2 = g.emit1("Mul", {g.output(0), g.output(0)});
  g.set_input_grad(0, g.emit1("Neg", {g.emit1("Mul", {g.output_grad(0), y2})}));
  return Status::ok();
}

Status grad_abs(GradContext& g) {
  const string& x = g.input(0);
  string sign;
  if (g.opset() >= 9) {
    sign = g.emit1("Sign", {x});
  } else {
    // Sign arrived in opset 9: (X > 0) - (X < 0) as floats.
    const TensorType* t = g.type_of(x);
    if (!t) return g.error("the input's element type is not known");
    const auto to = attr_int(static_cast<int64_t>(t->dtype));
    string zero = g.scalar_like(0.0, x);
    string pos = g.emit1("Cast", {g.emit1("Greater", {x, zero})}, {{"to", to}});
    string neg = g.emit1("Cast", {g.emit1("Less", {x, zero})}, {{"to", to}});
    sign = g.emit1("Sub", {pos, neg});
  }
  g.set_input_grad(0, g.emit1("Mul", {g.output_grad(0), sign}));
  return Status::ok();
}

}  // namespace

void register_elementwise_grads(GradRegistry& r) {
  r.add(GradDef{.op = "Add", .inputs = 0b11, .formula = "dA = sum_to(dY, A); dB = sum_to(dY, B)",
                .emits = {"ReduceSum", "Reshape"}, .build = grad_add});
  r.add(GradDef{.op = "Sub", .inputs = 0b11, .formula = "dA = sum_to(dY, A); dB = sum_to(-dY, B)",
                .emits = {"Neg", "ReduceSum", "Reshape"}, .build = grad_sub});
  r.add(GradDef{.op = "Mul", .inputs = 0b11, .formula = "dA = sum_to(dY * B, A); dB = sum_to(dY * A, B)",
                .emits = {"Mul", "ReduceSum", "Reshape"}, .build = grad_mul});
  r.add(GradDef{.op = "Div", .inputs = 0b11, .formula = "dA = sum_to(dY / B, A); dB = sum_to(-dY * Y / B, B)",
                .emits = {"Div", "Mul", "Neg", "ReduceSum", "Reshape"}, .build = grad_div});
  r.add(GradDef{.op = "Pow", .inputs = 0b11,
                .formula = "dA = sum_to(dY * B * A^(B-1), A); dB = sum_to(dY * Y * log(A), B) (A > 0)",
                .emits = {"Cast", "Sub", "Pow", "Mul", "Log", "ReduceSum", "Reshape"}, .build = grad_pow});
  r.add(GradDef{.op = "Sqrt", .inputs = 0b1, .formula = "dX = dY * 0.5 / Y", .emits = {"Mul", "Div"}, .build = grad_sqrt});
  r.add(GradDef{.op = "Neg", .inputs = 0b1, .formula = "dX = -dY", .emits = {"Neg"}, .build = grad_neg});
  r.add(GradDef{.op = "Exp", .inputs = 0b1, .formula = "dX = dY * Y", .emits = {"Mul"}, .build = grad_exp});
  r.add(GradDef{.op = "Log", .inputs = 0b1, .formula = "dX = dY / X", .emits = {"Div"}, .build = grad_log});
  r.add(GradDef{.op = "Sum", .formula = "dX_i = sum_to(dY, X_i)", .emits = {"ReduceSum", "Reshape"}, .build = grad_sum});
  r.add(GradDef{.op = "Identity", .inputs = 0b1, .formula = "dX = dY", .build = grad_identity});
  r.add(GradDef{.op = "Cast", .inputs = 0b1, .formula = "dX = Cast(dY, to = X's float type)", .emits = {"Cast"},
                .build = grad_cast});
  r.add(GradDef{.op = "Where", .inputs = 0b110,
                .formula = "dX = sum_to(Where(C, dY, 0), X); dY_in = sum_to(Where(C, 0, dY), Y_in)",
                .emits = {"Where", "ReduceSum", "Reshape"}, .build = grad_where});
  r.add(GradDef{.op = "Reciprocal", .inputs = 0b1, .formula = "dX = -dY * Y^2", .emits = {"Mul", "Neg"},
                .build = grad_reciprocal});
  r.add(GradDef{.op = "Abs", .inputs = 0b1, .formula = "dX = dY * sign(X)",
                .emits = {"Sign", "Mul", "Greater", "Less", "Cast", "Sub"}, .build = grad_abs});
}

}  // namespace ferry
