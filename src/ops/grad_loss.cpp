// Op family 'grad_loss' (domain com.ferry; emitted by grad/loss_grads.cpp): the losses `ferry
// train` appends to a model, with PyTorch's semantics, and their backward ops. Computed in
// double, stored in the scores' type.
//   CrossEntropyLoss(scores [N, C], labels int64 [N]; label_smoothing) -> mean loss []
//     = torch.nn.functional.cross_entropy(scores, labels, label_smoothing=e):
//       loss_n = (1 - e) * -log_softmax(s_n)[y_n] + e / C * sum_c -log_softmax(s_n)[c]
//   CrossEntropyLossGrad(dLoss [], scores, labels; label_smoothing) -> dScores [N, C]
//       = dLoss / N * (softmax(s_n) - (1 - e) * onehot(y_n) - e / C)
//   MseLoss(pred, target) -> mean((pred - target)^2) []; MseLossGrad(dLoss, pred, target) -> dPred
#include <cmath>
#include <string>
#include <vector>

#include "ops/op_util.h"

namespace ferry {
namespace {

const std::vector<DType> kLossTypes = {DType::kF32, DType::kF64};

Status infer_ce(InferContext& ctx) {
  const TensorType& s = ctx.input_type(0);
  const TensorType& y = ctx.input_type(1);
  if (s.dtype != DType::kF32 && s.dtype != DType::kF64) return ctx.error("scores must be f32 or f64, got " + std::string(dtype_name(s.dtype)));
  if (y.dtype != DType::kI64 && y.dtype != DType::kI32) return ctx.error("labels must be int64 class indices, got " + std::string(dtype_name(y.dtype)));
  if (s.shape && s.shape->rank() != 2) return ctx.error("scores must be [N, C], got " + s.shape->to_string());
  if (y.shape && y.shape->rank() != 1) return ctx.error("labels must be [N], got " + y.shape->to_string());
  if (s.shape && y.shape && s.shape->dims[0].is_known() && y.shape->dims[0].is_known() &&
      s.shape->dims[0].value != y.shape->dims[0].value)
    return ctx.error("labels " + y.shape->to_string() + " do not match scores " + s.shape->to_string());
  const float e = ctx.get_float("label_smoothing", 0.0f);
  if (!(e >= 0.0f && e <= 1.0f)) return ctx.error("label_smoothing must be in [0, 1], got " + std::to_string(e));
  return Status::ok();
}

Status infer_ce_loss(InferContext& ctx) {
  RETURN_IF_ERROR(infer_ce(ctx));
  ctx.set_output(0, TensorType{ctx.input_type(0).dtype, Shape()});
  return Status::ok();
}

Status infer_ce_grad(InferContext& ctx) {
  // inputs: dLoss, scores, labels
  InferContext inner(ctx.node(), ctx.opset(), {&ctx.input_type(1), &ctx.input_type(2)}, {nullptr, nullptr});
  RETURN_IF_ERROR(infer_ce(inner));
  ctx.set_output(0, ctx.input_type(1));
  return Status::ok();
}

template <typename T>
const T* as(const Tensor& t) { return t.data<T>(); }

// Log-softmax of row `r` (double) into lp; returns false for an out-of-range label.
template <typename T>
void log_softmax_row(const T* s, int64_t c, std::vector<double>* lp) {
  double mx = -INFINITY;
  for (int64_t j = 0; j < c; ++j) mx = std::max(mx, static_cast<double>(s[j]));
  double sum = 0.0;
  for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(s[j]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t j = 0; j < c; ++j) (*lp)[j] = static_cast<double>(s[j]) - lse;
}

Status check_label(KernelContext& ctx, int64_t row, int64_t label, int64_t c) {
  if (label < 0 || label >= c)
    return ctx.error("label " + std::to_string(label) + " of row " + std::to_string(row) + " is outside the model's " +
                     std::to_string(c) + " classes [0, " + std::to_string(c - 1) + "]; check the labels or --num-classes");
  return Status::ok();
}

template <typename T>
Status ce_loss(KernelContext& ctx) {
  const Tensor& s = ctx.input(0);
  const Tensor& y = ctx.input(1);
  const int64_t n = s.dim(0), c = s.dim(1);
  if (y.numel() != n) return ctx.error("labels have " + std::to_string(y.numel()) + " rows, scores " + std::to_string(n));
  const double e = ctx.get_float("label_smoothing", 0.0f);
  std::vector<double> lp(static_cast<size_t>(c));
  double total = 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t label = y.get_int64(r);
    RETURN_IF_ERROR(check_label(ctx, r, label, c));
    log_softmax_row(as<T>(s) + r * c, c, &lp);
    double smooth = 0.0;
    if (e != 0.0)
      for (int64_t j = 0; j < c; ++j) smooth -= lp[j];
    total += (1.0 - e) * -lp[label] + e / static_cast<double>(c) * smooth;
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, s.dtype(), {}));
  out->mutable_data<T>()[0] = static_cast<T>(n ? total / static_cast<double>(n) : NAN);
  return Status::ok();
}

template <typename T>
Status ce_grad(KernelContext& ctx) {
  const double dl = ctx.input(0).get_double(0);
  const Tensor& s = ctx.input(1);
  const Tensor& y = ctx.input(2);
  const int64_t n = s.dim(0), c = s.dim(1);
  const double e = ctx.get_float("label_smoothing", 0.0f);
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, s.dtype(), s.dims(), false));
  T* g = out->mutable_data<T>();
  std::vector<double> lp(static_cast<size_t>(c));
  const double scale = n ? dl / static_cast<double>(n) : 0.0;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t label = y.get_int64(r);
    RETURN_IF_ERROR(check_label(ctx, r, label, c));
    log_softmax_row(as<T>(s) + r * c, c, &lp);
    for (int64_t j = 0; j < c; ++j) {
      const double target = (j == label ? 1.0 - e : 0.0) + e / static_cast<double>(c);
      g[r * c + j] = static_cast<T>(scale * (std::exp(lp[j]) - target));
    }
  }
  return Status::ok();
}

Status k_ce_loss(KernelContext& ctx) {
  if (ctx.input(0).dtype() == DType::kF64) return ce_loss<double>(ctx);
  return ce_loss<float>(ctx);
}
Status k_ce_grad(KernelContext& ctx) {
  if (ctx.input(1).dtype() == DType::kF64) return ce_grad<double>(ctx);
  return ce_grad<float>(ctx);
}

Status infer_mse(InferContext& ctx, int64_t first) {
  const TensorType& p = ctx.input_type(first);
  const TensorType& t = ctx.input_type(first + 1);
  if (p.dtype != DType::kF32 && p.dtype != DType::kF64) return ctx.error("predictions must be f32 or f64");
  if (t.dtype != p.dtype) return ctx.error("targets are " + std::string(dtype_name(t.dtype)) + ", predictions " + dtype_name(p.dtype));
  if (p.shape && t.shape && p.shape->is_static() && t.shape->is_static() && p.shape->values() != t.shape->values())
    return ctx.error("targets " + t.shape->to_string() + " must have the predictions' shape " + p.shape->to_string());
  ctx.set_output(0, first == 0 ? TensorType{p.dtype, Shape()} : p);
  return Status::ok();
}
Status infer_mse_loss(InferContext& ctx) { return infer_mse(ctx, 0); }
Status infer_mse_grad(InferContext& ctx) { return infer_mse(ctx, 1); }

template <typename T>
Status mse(KernelContext& ctx, bool grad) {
  const int64_t first = grad ? 1 : 0;
  const Tensor& p = ctx.input(first);
  const Tensor& t = ctx.input(first + 1);
  if (p.numel() != t.numel()) return ctx.error("targets have " + std::to_string(t.numel()) + " elements, predictions " + std::to_string(p.numel()));
  const T* a = p.data<T>();
  const T* b = t.data<T>();
  const int64_t n = p.numel();
  if (!grad) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
      sum += d * d;
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, p.dtype(), {}));
    out->mutable_data<T>()[0] = static_cast<T>(n ? sum / static_cast<double>(n) : NAN);
    return Status::ok();
  }
  const double scale = n ? 2.0 * ctx.input(0).get_double(0) / static_cast<double>(n) : 0.0;
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, p.dtype(), p.dims(), false));
  T* g = out->mutable_data<T>();
  for (int64_t i = 0; i < n; ++i) g[i] = static_cast<T>(scale * (static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return Status::ok();
}

Status k_mse_loss(KernelContext& ctx) {
  return ctx.input(0).dtype() == DType::kF64 ? mse<double>(ctx, false) : mse<float>(ctx, false);
}
Status k_mse_grad(KernelContext& ctx) {
  return ctx.input(1).dtype() == DType::kF64 ? mse<double>(ctx, true) : mse<float>(ctx, true);
}

}  // namespace

void register_grad_loss_ops(OpRegistry& r) {
  const std::vector<AttrSpec> ce_attrs = {{"label_smoothing", AttrType::kFloat}};
  r.add(OpSchema{.name = "CrossEntropyLoss", .domain = "com.ferry", .since_version = 1, .min_inputs = 2, .max_inputs = 2,
                 .attrs = ce_attrs, .types = kLossTypes, .infer = infer_ce_loss, .kernel = k_ce_loss});
  r.add(OpSchema{.name = "CrossEntropyLossGrad", .domain = "com.ferry", .since_version = 1, .min_inputs = 3, .max_inputs = 3,
                 .attrs = ce_attrs, .infer = infer_ce_grad, .kernel = k_ce_grad});
  r.add(OpSchema{.name = "MseLoss", .domain = "com.ferry", .since_version = 1, .min_inputs = 2, .max_inputs = 2,
                 .types = kLossTypes, .infer = infer_mse_loss, .kernel = k_mse_loss});
  r.add(OpSchema{.name = "MseLossGrad", .domain = "com.ferry", .since_version = 1, .min_inputs = 3, .max_inputs = 3,
                 .infer = infer_mse_grad, .kernel = k_mse_grad});
}

}  // namespace ferry
