// Loss functions: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opset 12 and 13).
// Inputs are [N, C] or [N, C, d1, ..., dk] scores with [N] or [N, d1, ..., dk] integer targets and an
// optional per-class weight [C]. Computed in double, stored in the input's element type.
#include <cmath>
#include <limits>

#include "ops/op_util.h"

namespace ferry {
namespace {

enum class Reduction { kNone, kSum, kMean };

bool parse_reduction(const std::string& s, Reduction* out) {
  if (s == "none") *out = Reduction::kNone;
  else if (s == "sum") *out = Reduction::kSum;
  else if (s == "mean") *out = Reduction::kMean;
  else return false;
  return true;
}

bool is_loss_float(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}

// Shape rule shared by both ops: input 0 scores, input 1 target, input 2 weight.
Status infer_loss(InferContext& ctx, const char* input_name, const char* target_name, const char* weight_name) {
  Reduction red;
  const std::string rs = ctx.get_string("reduction", "mean");
  if (!parse_reduction(rs, &red)) return ctx.error("reduction must be 'none', 'sum' or 'mean', got '" + rs + "'");
  const TensorType& x = ctx.input_type(0);
  const TensorType& t = ctx.input_type(1);
  if (x.dtype != DType::kUndefined && !is_loss_float(x.dtype))
    return ctx.error(std::string(input_name) + " must be a float tensor, got " + dtype_name(x.dtype));
  if (t.dtype != DType::kUndefined && t.dtype != DType::kI32 && t.dtype != DType::kI64)
    return ctx.error(std::string(target_name) + " must be int32 or int64, got " + dtype_name(t.dtype));
  if (x.shape && x.shape->rank() < 2)
    return ctx.error(std::string(input_name) + " must have shape [N, C, ...], got " + x.shape->to_string());
  if (x.shape && t.shape) {
    if (t.shape->rank() != x.shape->rank() - 1)
      return ctx.error(std::string(target_name) + " " + t.shape->to_string() + " must have rank " +
                       std::to_string(x.shape->rank() - 1) + " for " + input_name + " " + x.shape->to_string());
    for (int64_t i = 0; i < t.shape->rank(); ++i) {
      const Dim& a = t.shape->dims[i];
      const Dim& b = x.shape->dims[i == 0 ? 0 : i + 1];
      if (a.is_known() && b.is_known() && a.value != b.value)
        return ctx.error(std::string(target_name) + " " + t.shape->to_string() + " does not match " + input_name + " " +
                         x.shape->to_string() + " (expected [N, d1, ..., dk] for [N, C, d1, ..., dk])");
    }
  }
  if (ctx.has_input(2)) {
    const TensorType& w = ctx.input_type(2);
    if (w.dtype != DType::kUndefined && x.dtype != DType::kUndefined && w.dtype != x.dtype)
      return ctx.error(std::string(weight_name) + " is " + dtype_name(w.dtype) + " but " + input_name + " is " +
                       dtype_name(x.dtype));
    if (w.shape && w.shape->rank() != 1)
      return ctx.error(std::string(weight_name) + " must be 1-D [C], got " + w.shape->to_string());
    if (w.shape && x.shape && w.shape->dims[0].is_known() && x.shape->dims[1].is_known() &&
        w.shape->dims[0].value != x.shape->dims[1].value)
      return ctx.error(std::string(weight_name) + " " + w.shape->to_string() + " must have C = " +
                       std::to_string(x.shape->dims[1].value) + " entries");
  }
  TensorType out{x.dtype, std::nullopt};
  if (red != Reduction::kNone) {
    out.shape = Shape();
  } else if (t.shape) {
    out.shape = t.shape;
    if (x.shape)  // take whichever dims are known
      for (int64_t i = 0; i < out.shape->rank(); ++i)
        if (!out.shape->dims[i].is_known() && out.shape->dims[i].symbol.empty())
          out.shape->dims[i] = x.shape->dims[i == 0 ? 0 : i + 1];
  } else if (x.shape) {
    Shape s = *x.shape;
    s.dims.erase(s.dims.begin() + 1);
    out.shape = s;
  }
  ctx.set_output(0, out);
  if (ctx.num_outputs() > 1) ctx.set_output(1, TensorType{x.dtype, x.shape});
  return Status::ok();
}

Status infer_nll(InferContext& ctx) { return infer_loss(ctx, "input", "target", "weight"); }
Status infer_sce(InferContext& ctx) { return infer_loss(ctx, "scores", "labels", "weights"); }

// Writes `v` into a tensor of float dtype `dt` with `dims`.
Status store(KernelContext& ctx, int64_t out, DType dt, const std::vector<int64_t>& dims, const std::vector<double>& v) {
  ASSIGN_OR_RETURN(Tensor* o, ctx.allocate_output(out, dt, dims));
  const size_t n = v.size();
  switch (dt) {
    case DType::kF32: for (size_t i = 0; i < n; ++i) o->mutable_data<float>()[i] = static_cast<float>(v[i]); break;
    case DType::kF64: for (size_t i = 0; i < n; ++i) o->mutable_data<double>()[i] = v[i]; break;
    case DType::kF16: for (size_t i = 0; i < n; ++i) o->mutable_data<uint16_t>()[i] = f32_to_f16(static_cast<float>(v[i])); break;
    case DType::kBF16: for (size_t i = 0; i < n; ++i) o->mutable_data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(v[i])); break;
    default: return ctx.error(std::string("element type ") + dtype_name(dt) + " is not supported");
  }
  return Status::ok();
}

// Runs the NLL computation on log-probabilities `lp` laid out [N, C, D]; writes output 0.
Status nll_core(KernelContext& ctx, const Tensor& x, const std::vector<double>& lp, const char* input_name,
                const char* target_name, const char* weight_name) {
  Reduction red;
  const std::string rs = ctx.get_string("reduction", "mean");
  if (!parse_reduction(rs, &red)) return ctx.error("reduction must be 'none', 'sum' or 'mean', got '" + rs + "'");
  const Tensor& target = ctx.input(1);
  if (target.dtype() != DType::kI32 && target.dtype() != DType::kI64)
    return ctx.error(std::string(target_name) + " must be int32 or int64, got " + dtype_name(target.dtype()));
  bool shape_ok = target.rank() == x.rank() - 1;
  for (int64_t i = 0; shape_ok && i < target.rank(); ++i) shape_ok = target.dim(i) == x.dim(i == 0 ? 0 : i + 1);
  if (!shape_ok)
    return ctx.error(std::string(target_name) + " " + dims_to_string(target.dims()) + " does not match " + input_name + " " +
                     dims_to_string(x.dims()) + " (expected [N, d1, ..., dk] for [N, C, d1, ..., dk])");
  const int64_t N = x.dim(0), C = x.dim(1);
  const int64_t D = N ? x.numel() / (N * std::max<int64_t>(C, 1)) : 0;
  const int64_t Dt = N ? target.numel() / N : 0;
  std::vector<double> w;
  if (ctx.has_input(2)) {
    const Tensor& wt = ctx.input(2);
    if (wt.dtype() != x.dtype())
      return ctx.error(std::string(weight_name) + " is " + dtype_name(wt.dtype()) + " but " + input_name + " is " +
                       dtype_name(x.dtype()));
    if (wt.rank() != 1 || wt.dim(0) != C)
      return ctx.error(std::string(weight_name) + " " + dims_to_string(wt.dims()) + " must be 1-D with C = " +
                       std::to_string(C) + " entries");
    w = wt.to_double_vector();
  }
  const bool has_ignore = ctx.has("ignore_index");
  const int64_t ignore = ctx.get_int("ignore_index", 0);
  const std::vector<int64_t> tv = target.to_int64_vector();
  std::vector<double> loss(static_cast<size_t>(N * Dt));
  double sum = 0, wsum = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < Dt; ++d) {
      const int64_t k = n * Dt + d;
      const int64_t c = tv[static_cast<size_t>(k)];
      if (has_ignore && c == ignore) {
        loss[static_cast<size_t>(k)] = 0;
        continue;
      }
      if (c < 0 || c >= C)
        return ctx.error(std::string(target_name) + " value " + std::to_string(c) + " at flat index " + std::to_string(k) +
                         " is out of range [0, " + std::to_string(C) + ")" +
                         (has_ignore ? " and is not ignore_index " + std::to_string(ignore) : ""));
      const double wc = w.empty() ? 1.0 : w[static_cast<size_t>(c)];
      const double l = -lp[static_cast<size_t>((n * C + c) * D + d)] * wc;
      loss[static_cast<size_t>(k)] = l;
      sum += l;
      wsum += wc;
    }
  if (red == Reduction::kNone) return store(ctx, 0, x.dtype(), target.dims(), loss);
  // mean: weighted mean over the entries not ignored (0/0 = NaN when every entry is ignored, as the
  // ONNX reference and the function expansion compute it).
  const double r = red == Reduction::kSum ? sum : sum / wsum;
  return store(ctx, 0, x.dtype(), {}, {r});
}

Status check_input(KernelContext& ctx, const Tensor& x, const char* input_name) {
  if (!is_loss_float(x.dtype()))
    return ctx.error(std::string(input_name) + " must be a float tensor, got " + dtype_name(x.dtype()));
  if (x.rank() < 2) return ctx.error(std::string(input_name) + " must have shape [N, C, ...], got " + dims_to_string(x.dims()));
  return Status::ok();
}

Status k_nll(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  RETURN_IF_ERROR(check_input(ctx, x, "input"));
  return nll_core(ctx, x, x.to_double_vector(), "input", "target", "weight");
}

Status k_sce(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  RETURN_IF_ERROR(check_input(ctx, x, "scores"));
  const int64_t N = x.dim(0), C = x.dim(1);
  const int64_t D = (N && C) ? x.numel() / (N * C) : 0;
  std::vector<double> lp = x.to_double_vector();
  // log_softmax over axis 1: for each (n, d), lp = x - max - log(sum(exp(x - max))).
  std::vector<double> mx(static_cast<size_t>(D)), se(static_cast<size_t>(D));
  for (int64_t n = 0; n < N; ++n) {
    double* base = lp.data() + n * C * D;
    std::fill(mx.begin(), mx.end(), -std::numeric_limits<double>::infinity());
    std::fill(se.begin(), se.end(), 0.0);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t d = 0; d < D; ++d) mx[d] = std::max(mx[d], base[c * D + d]);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t d = 0; d < D; ++d) se[d] += std::exp(base[c * D + d] - mx[d]);
    for (int64_t d = 0; d < D; ++d) se[d] = mx[d] + std::log(se[d]);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t d = 0; d < D; ++d) base[c * D + d] -= se[d];
  }
  RETURN_IF_ERROR(nll_core(ctx, x, lp, "scores", "labels", "weights"));
  if (ctx.num_outputs() > 1 && !ctx.node().outputs[1].empty()) RETURN_IF_ERROR(store(ctx, 1, x.dtype(), x.dims(), lp));
  return Status::ok();
}

const std::vector<AttrSpec> kLossAttrs = {{"reduction", AttrType::kString}, {"ignore_index", AttrType::kInt}};

}  // namespace

void register_loss_ops(OpRegistry& r) {
  // Opset 13 only adds bfloat16.
  for (int64_t v : {12, 13}) {
    std::vector<DType> types = {DType::kF16, DType::kF32, DType::kF64};
    if (v >= 13) types.push_back(DType::kBF16);
    r.add(OpSchema{.name = "NegativeLogLikelihoodLoss", .since_version = v, .min_inputs = 2, .max_inputs = 3,
                   .attrs = kLossAttrs, .types = types, .infer = infer_nll, .kernel = k_nll});
    r.add(OpSchema{.name = "SoftmaxCrossEntropyLoss", .since_version = v, .min_inputs = 2, .max_inputs = 3,
                   .min_outputs = 1, .max_outputs = 2, .attrs = kLossAttrs, .types = types, .infer = infer_sce,
                   .kernel = k_sce});
  }
}

}  // namespace ferry
