// Op family 'fused_block' (domain com.ferry, opset 1): a MobileNetV2 inverted-residual block as one
// node, made by the inverted_residual_fusion pass (src/passes/inverted_residual_fusion.cpp) from
// three channels-last FusedConv nodes so the cpu backend can run it without the expanded tensor
// going to memory (src/backends/cpu/inverted_residual.h).
//
//   InvertedResidual(X, We, Be, Wd, Bd, Wp, Bp, [Z])   X, Z, Y NHWC; weights OIHW:
//     E = expand_act(conv1x1(X, We) + Be)                     We [Cmid, Cin, 1, 1], Be [Cmid]
//     D = dw_act(depthwise3x3(E, Wd, stride, pad 1) + Bd)     Wd [Cmid, 1, 3, 3], Bd [Cmid]
//     Y = act(conv1x1(D, Wp) + Bp + Z)                        Wp [Cout, Cmid, 1, 1], Bp [Cout]
//   We and Be may both be omitted (""): no expand, E = X (MobileNetV2's first block), Cmid = Cin.
//   attributes: stride (1 or 2, both axes), expand_activation / expand_activation_params,
//   dw_activation / dw_activation_params, activation / activation_params (src/ops/fused_activation.h).
// The reference kernel is plain loops in double, rounded to f32 after each of the three convolutions
// (as the three FusedConv nodes' reference kernels round).
#include <string>
#include <vector>

#include "ops/fused_activation.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

Status read_act(const AttrReader& r, const char* prefix, FusedActivation* act) {
  const std::string p = prefix;
  auto a = parse_fused_activation(r.get_string((p + "activation").c_str(), ""),
                                  r.get_floats((p + "activation_params").c_str()));
  if (!a.is_ok()) return invalid_model(r.node().describe() + ": " + a.status().message());
  *act = a.value();
  return Status::ok();
}

// Checks a weight or bias input's shape where it is known; `want` entries < 0 match any size.
Status check_dims(InferContext& ctx, int64_t i, const char* what, const vector<int64_t>& want) {
  if (!ctx.has_input(i)) return ctx.error(std::string("input '") + what + "' is required");
  const TensorType& t = ctx.input_type(i);
  if (!t.shape) return Status::ok();
  bool ok = t.shape->rank() == static_cast<int64_t>(want.size());
  for (size_t d = 0; ok && d < want.size(); ++d)
    ok = want[d] < 0 || !t.shape->dims[d].is_known() || t.shape->dims[d].value == want[d];
  if (ok) return Status::ok();
  std::string w = "[";
  for (size_t d = 0; d < want.size(); ++d) {
    if (d) w += ",";
    w += want[d] < 0 ? std::string("?") : std::to_string(want[d]);
  }
  return ctx.error(std::string("input '") + what + "' must be " + w + "], got " + t.shape->to_string());
}

int64_t known(const TensorType& t, int64_t d) {
  return t.shape && t.shape->rank() > d && t.shape->dims[d].is_known() ? t.shape->dims[d].value : -1;
}

Status infer_inverted_residual(InferContext& ctx) {
  FusedActivation a;
  RETURN_IF_ERROR(read_act(ctx, "expand_", &a));
  RETURN_IF_ERROR(read_act(ctx, "dw_", &a));
  RETURN_IF_ERROR(read_act(ctx, "", &a));
  const int64_t s = ctx.get_int("stride", 1);
  if (s != 1 && s != 2) return ctx.error("stride must be 1 or 2, got " + std::to_string(s));
  const TensorType& x = ctx.input_type(0);
  if (x.shape && x.shape->rank() != 4)
    return ctx.error("input 'X' must be 4-D (N x H x W x C), got " + x.shape->to_string());
  const bool expand = ctx.has_input(1) || ctx.has_input(2);
  const int64_t cin = known(x, 3), cmid = expand ? known(ctx.input_type(1), 0) : cin, cout = known(ctx.input_type(5), 0);
  if (expand) {
    RETURN_IF_ERROR(check_dims(ctx, 1, "We", {cmid, cin, 1, 1}));
    RETURN_IF_ERROR(check_dims(ctx, 2, "Be", {cmid}));
  }
  RETURN_IF_ERROR(check_dims(ctx, 3, "Wd", {cmid, 1, 3, 3}));
  RETURN_IF_ERROR(check_dims(ctx, 4, "Bd", {cmid}));
  RETURN_IF_ERROR(check_dims(ctx, 5, "Wp", {cout, cmid, 1, 1}));
  RETURN_IF_ERROR(check_dims(ctx, 6, "Bp", {cout}));
  TensorType out{x.dtype, std::nullopt};
  if (x.shape) {
    Shape y = *x.shape;
    for (int d = 1; d <= 2; ++d) {
      if (y.dims[d].is_known() && y.dims[d].value < 1)
        return ctx.error("input 'X' must have at least one row and column, got " + x.shape->to_string());
      y.dims[d] = y.dims[d].is_known() ? Dim((y.dims[d].value - 1) / s + 1) : Dim();
    }
    y.dims[3] = cout >= 0 ? Dim(cout) : Dim();
    out.shape = y;
  }
  if (ctx.has_input(7) && out.shape && ctx.input_type(7).shape && !(*ctx.input_type(7).shape == *out.shape)) {
    const Shape& z = *ctx.input_type(7).shape;
    bool ok = z.rank() == 4;
    for (int d = 1; ok && d < 4; ++d)
      ok = !z.dims[d].is_known() || !out.shape->dims[d].is_known() || z.dims[d].value == out.shape->dims[d].value;
    if (!ok) return ctx.error("input 'Z' " + z.to_string() + " must have the output's shape " + out.shape->to_string());
  }
  ctx.set_output(0, out);
  return Status::ok();
}

Status k_inverted_residual(KernelContext& ctx) {
  FusedActivation ae, ad, ap;
  RETURN_IF_ERROR(read_act(ctx, "expand_", &ae));
  RETURN_IF_ERROR(read_act(ctx, "dw_", &ad));
  RETURN_IF_ERROR(read_act(ctx, "", &ap));
  const int64_t s = ctx.get_int("stride", 1);
  if (s != 1 && s != 2) return ctx.error("stride must be 1 or 2, got " + std::to_string(s));
  const bool expand = ctx.has_input(1) || ctx.has_input(2);
  for (int64_t i = 0; i < 7; ++i)
    if ((expand || (i != 1 && i != 2)) && (!ctx.has_input(i) || ctx.input(i).dtype() != DType::kF32))
      return ctx.error("input " + std::to_string(i) + " must be an f32 tensor");
  const Tensor& x = ctx.input(0);
  if (x.rank() != 4) return ctx.error("input 'X' must be 4-D (N x H x W x C)");
  const int64_t n = x.dim(0), h = x.dim(1), w = x.dim(2), cin = x.dim(3);
  const int64_t cmid = !expand ? cin : ctx.input(1).rank() == 4 ? ctx.input(1).dim(0) : -1;
  const int64_t cout = ctx.input(5).rank() == 4 ? ctx.input(5).dim(0) : -1;
  const auto is = [](const Tensor& t, vector<int64_t> d) { return t.dims() == d; };
  if (cmid < 1 || cout < 1 || (expand && (!is(ctx.input(1), {cmid, cin, 1, 1}) || !is(ctx.input(2), {cmid}))) ||
      !is(ctx.input(3), {cmid, 1, 3, 3}) || !is(ctx.input(4), {cmid}) || !is(ctx.input(5), {cout, cmid, 1, 1}) ||
      !is(ctx.input(6), {cout}))
    return ctx.error("weights must be We [Cmid, Cin, 1, 1], Be [Cmid] (or both omitted: Cmid = Cin), Wd [Cmid, 1, 3, 3], "
                     "Bd [Cmid], Wp [Cout, Cmid, 1, 1], Bp [Cout] for X with Cin = " + std::to_string(cin));
  if (h < 1 || w < 1) return ctx.error("input 'X' must have at least one row and column, got " + dims_to_string(x.dims()));
  const int64_t ho = (h - 1) / s + 1, wo = (w - 1) / s + 1;
  const bool has_z = ctx.has_input(7);
  if (has_z && (ctx.input(7).dtype() != DType::kF32 || !is(ctx.input(7), {n, ho, wo, cout})))
    return ctx.error("input 'Z' must be f32 [N, Ho, Wo, Cout] = [" + std::to_string(n) + "," + std::to_string(ho) + "," +
                     std::to_string(wo) + "," + std::to_string(cout) + "]");
  const float *px = x.data<float>(), *we = expand ? ctx.input(1).data<float>() : nullptr,
              *be = expand ? ctx.input(2).data<float>() : nullptr, *wd = ctx.input(3).data<float>(), *bd = ctx.input(4).data<float>(), *wp = ctx.input(5).data<float>(),
              *bp = ctx.input(6).data<float>();
  ASSIGN_OR_RETURN(Tensor et, Tensor::create(DType::kF32, {n, h, w, cmid}, "the expanded activation"));
  ASSIGN_OR_RETURN(Tensor dt, Tensor::create(DType::kF32, {n, ho, wo, cmid}, "the depthwise output"));
  float* e = et.mutable_data<float>();
  float* d = dt.mutable_data<float>();
  for (int64_t p = 0; p < n * h * w; ++p)
    for (int64_t m = 0; m < cmid; ++m) {
      if (!expand) {
        e[p * cmid + m] = px[p * cin + m];
        continue;
      }
      double acc = be[m];
      for (int64_t c = 0; c < cin; ++c) acc += static_cast<double>(px[p * cin + c]) * we[m * cin + c];
      e[p * cmid + m] = static_cast<float>(apply_fused_activation(ae, static_cast<float>(acc)));
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t oh = 0; oh < ho; ++oh)
      for (int64_t ow = 0; ow < wo; ++ow)
        for (int64_t m = 0; m < cmid; ++m) {
          double acc = bd[m];
          for (int64_t ky = 0; ky < 3; ++ky)
            for (int64_t kx = 0; kx < 3; ++kx) {
              const int64_t ih = oh * s - 1 + ky, iw = ow * s - 1 + kx;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              acc += static_cast<double>(e[((i * h + ih) * w + iw) * cmid + m]) * wd[m * 9 + ky * 3 + kx];
            }
          d[((i * ho + oh) * wo + ow) * cmid + m] = static_cast<float>(apply_fused_activation(ad, static_cast<float>(acc)));
        }
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kF32, {n, ho, wo, cout}, false));
  float* py = y->mutable_data<float>();
  const float* pz = has_z ? ctx.input(7).data<float>() : nullptr;
  for (int64_t p = 0; p < n * ho * wo; ++p)
    for (int64_t o = 0; o < cout; ++o) {
      double acc = bp[o];
      for (int64_t m = 0; m < cmid; ++m) acc += static_cast<double>(d[p * cmid + m]) * wp[o * cmid + m];
      float v = static_cast<float>(acc);
      if (pz) v += pz[p * cout + o];
      py[p * cout + o] = static_cast<float>(apply_fused_activation(ap, v));
    }
  return Status::ok();
}

}  // namespace

void register_fused_block_ops(OpRegistry& r) {
  const vector<AttrSpec> attrs = {{"stride", AttrType::kInt},
                                  {"expand_activation", AttrType::kString},
                                  {"expand_activation_params", AttrType::kFloats},
                                  {"dw_activation", AttrType::kString},
                                  {"dw_activation_params", AttrType::kFloats},
                                  {"activation", AttrType::kString},
                                  {"activation_params", AttrType::kFloats}};
  r.add(OpSchema{.name = "InvertedResidual", .domain = "com.ferry", .since_version = 1, .min_inputs = 7, .max_inputs = 8,
                 .attrs = attrs, .types = {DType::kF32}, .infer = infer_inverted_residual, .kernel = k_inverted_residual,
                 .optional_input_mask = 0b110});
}

}  // namespace ferry
