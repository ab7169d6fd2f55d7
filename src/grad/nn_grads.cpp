// Gradient family 'nn' (see grad_families.inc and grad/registry.h): Conv, ConvTranspose, Gemm,
// MatMul, Resize and the training-mode TrainDropout. Backward ops: src/ops/grad_nn.cpp.
#include "grad/registry.h"

namespace ferry {
namespace {

using std::string;
using std::vector;

// The wanted flags of outputs 0..n-1, trimmed after the last wanted one.
vector<bool> wanted_prefix(vector<bool> w) {
  while (!w.empty() && !w.back()) w.pop_back();
  return w;
}

// ConvGrad / ConvTransposeGrad(dY, X, W; the forward node's attributes) -> (dX, dW, dB).
Status conv_like_grad(GradContext& g, const char* op) {
  vector<bool> w = wanted_prefix({g.wants_input_grad(0), g.wants_input_grad(1), g.wants_input_grad(2)});
  if (w.empty()) return Status::ok();
  vector<string> outs =
      g.emit_wanted(op, {g.output_grad(0), g.input(0), g.input(1)}, w, g.node().attrs, kFerryGradDomain);
  for (size_t i = 0; i < outs.size(); ++i)
    if (!outs[i].empty()) g.set_input_grad(static_cast<int64_t>(i), outs[i]);
  return Status::ok();
}

Status conv_grad(GradContext& g) { return conv_like_grad(g, "ConvGrad"); }
Status conv_transpose_grad(GradContext& g) { return conv_like_grad(g, "ConvTransposeGrad"); }

// alpha * op(a) * op(b) as a Gemm (a zero C where the opset requires one).
string gemm2(GradContext& g, const string& a, const string& b, bool ta, bool tb, float alpha) {
  std::map<string, Attribute> attrs{{"transA", attr_int(ta ? 1 : 0)}, {"transB", attr_int(tb ? 1 : 0)}};
  if (alpha != 1.0f) attrs["alpha"] = attr_float(alpha);
  vector<string> ins = {a, b};
  if (g.opset() < 11) {
    ins.push_back(g.scalar_like(0.0, g.output(0)));
    attrs["beta"] = attr_float(0.0f);
  }
  return g.emit1("Gemm", std::move(ins), std::move(attrs));
}

Status gemm_grad(GradContext& g) {
  const string& dy = g.output_grad(0);
  const bool ta = g.get_int("transA", 0) != 0, tb = g.get_int("transB", 0) != 0;
  const float alpha = g.get_float("alpha", 1.0f), beta = g.get_float("beta", 1.0f);
  const string &a = g.input(0), &b = g.input(1);
  if (g.wants_input_grad(0)) g.set_input_grad(0, ta ? gemm2(g, b, dy, tb, true, alpha) : gemm2(g, dy, b, false, !tb, alpha));
  if (g.wants_input_grad(1)) g.set_input_grad(1, tb ? gemm2(g, dy, a, true, ta, alpha) : gemm2(g, a, dy, !ta, false, alpha));
  if (g.wants_input_grad(2)) {
    ASSIGN_OR_RETURN(vector<int64_t> ydims, g.dims_of(g.output(0)));
    string d = dy;
    if (beta != 1.0f) d = g.emit1("Mul", {dy, g.scalar_like(beta, g.output(0))});
    ASSIGN_OR_RETURN(string dc, g.sum_to(d, ydims, g.input(2)));
    g.set_input_grad(2, dc);
  }
  return Status::ok();
}

// Swaps the last two axes of a value of rank r.
string transpose_last2(GradContext& g, const string& v, int64_t r) {
  vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[r - 1], perm[r - 2]);
  return g.emit1("Transpose", {v}, {{"perm", attr_ints(perm)}});
}

// numpy matmul: 1-D A is [1, K], 1-D B is [K, 1] (those 1s dropped from Y); batch dims broadcast.
Status matmul_grad(GradContext& g) {
  ASSIGN_OR_RETURN(vector<int64_t> ad, g.dims_of(g.input(0)));
  ASSIGN_OR_RETURN(vector<int64_t> bd, g.dims_of(g.input(1)));
  ASSIGN_OR_RETURN(vector<int64_t> yd, g.dims_of(g.output(0)));
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  string a = g.input(0), b = g.input(1), dy = g.output_grad(0);
  vector<int64_t> a2 = ad, b2 = bd, y2 = yd;
  if (a1) {
    a2.insert(a2.begin(), 1);
    if (g.wants_input_grad(1)) a = g.reshape(a, a2);
    y2.insert(y2.end() - (b1 ? 0 : 1), 1);
  }
  if (b1) {
    b2.push_back(1);
    if (g.wants_input_grad(0)) b = g.reshape(b, b2);
    y2.push_back(1);
  }
  if (y2 != yd) dy = g.reshape(dy, y2);
  const int64_t yr = static_cast<int64_t>(y2.size());
  if (g.wants_input_grad(0)) {
    // dA = dY . B^T over the broadcast batch, [batch..., M, K]; summed back to A's shape.
    string da = g.emit1("MatMul", {dy, transpose_last2(g, b, static_cast<int64_t>(b2.size()))});
    vector<int64_t> dd(y2.begin(), y2.end() - 1);
    dd.push_back(a2.back());
    if (a1) {  // drop the M = 1 axis
      dd.erase(dd.end() - 2);
      da = g.reshape(da, dd);
    }
    ASSIGN_OR_RETURN(string r, g.sum_to(da, dd, g.input(0)));
    g.set_input_grad(0, r);
  }
  if (g.wants_input_grad(1)) {
    // dB = A^T . dY, [batch..., K, N]; summed back to B's shape.
    string db = g.emit1("MatMul", {transpose_last2(g, a, static_cast<int64_t>(a2.size())), dy});
    vector<int64_t> dd(y2.begin(), y2.end() - 2);
    dd.push_back(b2[b2.size() - 2]);
    dd.push_back(y2[yr - 1]);
    if (b1) {  // drop the N = 1 axis
      dd.pop_back();
      db = g.reshape(db, dd);
    }
    ASSIGN_OR_RETURN(string r, g.sum_to(db, dd, g.input(1)));
    g.set_input_grad(1, r);
  }
  return Status::ok();
}

// ResizeGrad(dY, X_shape, roi, scales, sizes; the Resize's attributes, forward_opset).
Status resize_grad(GradContext& g) {
  if (g.get_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize")
    return g.error("Resize with coordinate_transformation_mode 'tf_crop_and_resize' has no gradient (its "
                   "extrapolated values do not depend on X); freeze the parameters before it or use another mode");
  ASSIGN_OR_RETURN(vector<int64_t> xd, g.dims_of(g.input(0)));
  vector<string> ins = {g.output_grad(0), g.ints_constant(xd)};
  for (int64_t i = 1; i < g.num_inputs(); ++i) ins.push_back(g.input(i));
  std::map<string, Attribute> attrs = g.node().attrs;
  attrs["forward_opset"] = attr_int(g.opset());
  g.set_input_grad(0, g.emit1("ResizeGrad", std::move(ins), std::move(attrs), kFerryGradDomain));
  return Status::ok();
}

// dX = dY * mask / (1 - ratio): DropoutGrad with the forward mask, or (no mask output) the same
// counter-based draw applied to dY.
Status train_dropout_grad(GradContext& g) {
  std::map<string, Attribute> attrs;
  attrs["ratio"] = attr_float(g.get_float("ratio", 0.5f));
  if (!g.output(1).empty())
    g.set_input_grad(0, g.emit1("DropoutGrad", {g.output_grad(0), g.output(1)}, std::move(attrs), kFerryGradDomain));
  else
    g.set_input_grad(0, g.emit1("TrainDropout", {g.output_grad(0), g.input(1)}, std::move(attrs), kFerryGradDomain));
  return Status::ok();
}

}  // namespace

void register_nn_grads(GradRegistry& r) {
  r.add(GradDef{.op = "Conv", .inputs = 0b111,
                .formula = "dX = conv_transpose(dY, W); dW = correlate(dY, X); dB = sum(dY) over N and space",
                .emits = {"com.ferry.ConvGrad"}, .build = conv_grad});
  r.add(GradDef{.op = "ConvTranspose", .inputs = 0b111,
                .formula = "dX = conv(dY, W); dW = correlate(X, dY); dB = sum(dY) over N and space",
                .emits = {"com.ferry.ConvTransposeGrad"}, .build = conv_transpose_grad});
  r.add(GradDef{.op = "Gemm", .since_version = 7, .inputs = 0b111,
                .formula = "dA = alpha * dY . op(B)^T (transposed for transA); dB = alpha * op(A)^T . dY (transposed "
                           "for transB); dC = sum_to(beta * dY, C)",
                .emits = {"Gemm", "Mul", "ReduceSum", "Reshape"}, .build = gemm_grad});
  r.add(GradDef{.op = "MatMul", .inputs = 0b11,
                .formula = "dA = sum_to(dY . B^T, A); dB = sum_to(A^T . dY, B) (1-D operands as numpy)",
                .emits = {"MatMul", "Transpose", "Reshape", "ReduceSum"}, .build = matmul_grad});
  r.add(GradDef{.op = "Resize", .since_version = 10, .inputs = 0b1,
                .formula = "dX = the adjoint of the interpolation taps applied to dY (not tf_crop_and_resize)",
                .emits = {"com.ferry.ResizeGrad"}, .build = resize_grad});
  r.add(GradDef{.op = "TrainDropout", .domain = kFerryGradDomain, .inputs = 0b1,
                .formula = "dX = dY * mask / (1 - ratio)", .emits = {"com.ferry.DropoutGrad", "com.ferry.TrainDropout"},
                .build = train_dropout_grad});
}

}  // namespace ferry
