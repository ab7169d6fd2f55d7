// Attribute parsing and output-size arithmetic shared by the convolutions (Conv, ConvTranspose, the
// integer, fused and gradient forms) and the pooling ops (kernel_shape, strides, dilations, pads,
// auto_pad, ceil_mode, output_padding), for any number of spatial axes.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "ops/op_util.h"

namespace ferry {

enum class AutoPad { kNotSet, kSameUpper, kSameLower, kValid };

/// Largest kernel/stride/dilation/pad value accepted (keeps all size arithmetic far from int64 overflow).
constexpr int64_t kMaxSpatialAttr = int64_t(1) << 24;

/// Spatial attributes of a conv/pool node, validated for `nd` spatial axes.
struct SpatialAttrs {
  int64_t nd = 0;
  std::vector<int64_t> kernel;     // empty when unknown (shape rule: no kernel_shape and W's dims unknown)
  std::vector<int64_t> strides;    // nd values >= 1
  std::vector<int64_t> dilations;  // nd values >= 1
  std::vector<int64_t> pads;       // 2*nd values >= 0: [x1_begin, x2_begin, ..., x1_end, x2_end, ...]
  AutoPad auto_pad = AutoPad::kNotSet;
  bool ceil_mode = false;

  /// Dilated kernel extent along axis i: (k - 1) * d + 1.
  int64_t dilated_kernel(int64_t i) const { return (kernel[i] - 1) * dilations[i] + 1; }
};

/// Output size and padding of one spatial axis.
struct AxisGeom {
  int64_t in = 0, out = 0, pad_begin = 0, pad_end = 0;
};

inline int64_t ceil_div_nonneg(int64_t a, int64_t b) { return (a + b - 1) / b; }

namespace conv_pool_detail {
inline std::string ints_str(const std::vector<int64_t>& v) { return dims_to_string(v); }
}  // namespace conv_pool_detail

/// Reads and validates the spatial attributes. The kernel comes from `kernel_shape` or, when that
/// attribute is absent, from `kernel_from_weights` (may be null: kernel stays unknown, or is an error
/// when `require_kernel`). `Ctx` is InferContext or KernelContext.
template <class Ctx>
Status read_spatial_attrs(Ctx& ctx, int64_t nd, const std::vector<int64_t>* kernel_from_weights, bool require_kernel,
                          SpatialAttrs* a) {
  using conv_pool_detail::ints_str;
  a->nd = nd;
  auto check_values = [&](const char* name, const std::vector<int64_t>& v, size_t want, int64_t lo) -> Status {
    if (v.size() != want)
      return ctx.error(std::string("attribute '") + name + "' has " + std::to_string(v.size()) + " values " +
                       ints_str(v) + " but " + std::to_string(want) + " are expected for " + std::to_string(nd) +
                       " spatial axes");
    for (int64_t x : v)
      if (x < lo || x > kMaxSpatialAttr)
        return ctx.error(std::string("attribute '") + name + "' " + ints_str(v) + " has a value out of range [" +
                         std::to_string(lo) + ", " + std::to_string(kMaxSpatialAttr) + "]");
    return Status::ok();
  };
  a->kernel.clear();
  if (ctx.has("kernel_shape")) {
    a->kernel = ctx.get_ints("kernel_shape");
    RETURN_IF_ERROR(check_values("kernel_shape", a->kernel, static_cast<size_t>(nd), 1));
  } else if (kernel_from_weights) {
    a->kernel = *kernel_from_weights;
    RETURN_IF_ERROR(check_values("kernel_shape (from the weights' spatial dims)", a->kernel, static_cast<size_t>(nd), 1));
  } else if (require_kernel) {
    return ctx.error("required attribute 'kernel_shape' is missing");
  }
  a->strides = ctx.get_ints("strides", std::vector<int64_t>(static_cast<size_t>(nd), 1));
  RETURN_IF_ERROR(check_values("strides", a->strides, static_cast<size_t>(nd), 1));
  a->dilations = ctx.get_ints("dilations", std::vector<int64_t>(static_cast<size_t>(nd), 1));
  RETURN_IF_ERROR(check_values("dilations", a->dilations, static_cast<size_t>(nd), 1));
  a->pads = ctx.get_ints("pads", std::vector<int64_t>(static_cast<size_t>(2 * nd), 0));
  RETURN_IF_ERROR(check_values("pads", a->pads, static_cast<size_t>(2 * nd), 0));
  const std::string ap = ctx.get_string("auto_pad", "NOTSET");
  if (ap == "NOTSET" || ap.empty()) a->auto_pad = AutoPad::kNotSet;
  else if (ap == "SAME_UPPER") a->auto_pad = AutoPad::kSameUpper;
  else if (ap == "SAME_LOWER") a->auto_pad = AutoPad::kSameLower;
  else if (ap == "VALID") a->auto_pad = AutoPad::kValid;
  else return ctx.error("attribute 'auto_pad' is '" + ap + "'; expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  const int64_t cm = ctx.get_int("ceil_mode", 0);
  if (cm != 0 && cm != 1) return ctx.error("attribute 'ceil_mode' must be 0 or 1, got " + std::to_string(cm));
  a->ceil_mode = cm == 1;
  return Status::ok();
}

/// Output size and padding of spatial axis i for a (forward) convolution or pooling over an input
/// of size `in`. auto_pad SAME_* gives ceil(in / stride) outputs with the padding split evenly (the odd
/// one at the end for SAME_UPPER, at the beginning for SAME_LOWER); VALID uses no padding; NOTSET the
/// `pads` attribute. With ceil_mode the last window must start inside the input or the left padding.
template <class Ctx>
Status conv_pool_axis(Ctx& ctx, const SpatialAttrs& a, int64_t i, int64_t in, AxisGeom* g) {
  const int64_t s = a.strides[i];
  const int64_t dk = a.dilated_kernel(i);
  g->in = in;
  if (a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower) {
    g->out = ceil_div_nonneg(in, s);
    const int64_t total = std::max<int64_t>(0, (g->out - 1) * s + dk - in);
    const int64_t small = total / 2, big = total - small;
    g->pad_begin = a.auto_pad == AutoPad::kSameUpper ? small : big;
    g->pad_end = a.auto_pad == AutoPad::kSameUpper ? big : small;
    return Status::ok();
  }
  g->pad_begin = a.auto_pad == AutoPad::kValid ? 0 : a.pads[i];
  g->pad_end = a.auto_pad == AutoPad::kValid ? 0 : a.pads[i + a.nd];
  const int64_t span = in + g->pad_begin + g->pad_end - dk;
  if (span < 0)
    return ctx.error("spatial axis " + std::to_string(i) + ": the kernel (size " + std::to_string(a.kernel[i]) +
                     ", dilation " + std::to_string(a.dilations[i]) + ", extent " + std::to_string(dk) +
                     ") is larger than the padded input (size " + std::to_string(in) + " + pads " +
                     std::to_string(g->pad_begin) + "+" + std::to_string(g->pad_end) + ")");
  g->out = (a.ceil_mode ? ceil_div_nonneg(span, s) : span / s) + 1;
  if (a.ceil_mode && (g->out - 1) * s >= in + g->pad_begin) --g->out;
  return Status::ok();
}

/// Shape-rule helper: the output Dim of spatial axis i for input Dim `in` (unknown kernel -> unknown;
/// a symbolic input keeps its symbol when the axis maps sizes to themselves).
template <class Ctx>
Status conv_pool_out_dim(Ctx& ctx, const SpatialAttrs& a, int64_t i, const Dim& in, Dim* out) {
  *out = Dim();
  if (a.kernel.empty()) return Status::ok();
  if (in.is_known()) {
    AxisGeom g;
    RETURN_IF_ERROR(conv_pool_axis(ctx, a, i, in.value, &g));
    *out = Dim(g.out);
    return Status::ok();
  }
  const bool same = a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower;
  const int64_t dk = a.dilated_kernel(i);
  const int64_t total_pad = a.auto_pad == AutoPad::kNotSet ? a.pads[i] + a.pads[i + a.nd] : 0;
  if (a.strides[i] == 1 && (same || total_pad == dk - 1)) *out = in;
  return Status::ok();
}

/// The output's spatial dims for an input of type `x` (rank nd + 2 or unknown), appended to `out`;
/// `axes` gets the geometry of every axis when the kernel and all input dims are known, else is
/// left empty. Shared by the convolutions (float, integer, fused) and the pooling ops.
template <class Ctx>
Status conv_pool_spatial_out(Ctx& ctx, const SpatialAttrs& a, const TensorType& x, Shape* out,
                             std::vector<AxisGeom>* axes) {
  axes->clear();
  bool all_known = !a.kernel.empty() && x.shape.has_value();
  for (int64_t i = 0; i < a.nd; ++i) {
    const Dim in = x.shape ? x.shape->dims[2 + i] : Dim();
    Dim od;
    RETURN_IF_ERROR(conv_pool_out_dim(ctx, a, i, in, &od));
    out->dims.push_back(od);
    if (!in.is_known()) all_known = false;
  }
  if (all_known) {
    axes->resize(static_cast<size_t>(a.nd));
    for (int64_t i = 0; i < a.nd; ++i) RETURN_IF_ERROR(conv_pool_axis(ctx, a, i, x.shape->dims[2 + i].value, &(*axes)[i]));
  }
  return Status::ok();
}

/// A convolution's spatial attributes (Conv, ConvTranspose, ConvInteger, QLinearConv): the kernel
/// comes from kernel_shape or, when absent, from the weights' spatial dims, and the two must agree.
/// x and w (named `w_name` in errors) have equal ranks >= 3 where known, and not both unknown.
template <class Ctx>
Status read_conv_attrs(Ctx& ctx, const TensorType& x, const TensorType& w, const char* w_name, SpatialAttrs* a) {
  const int64_t rank = x.shape ? x.shape->rank() : w.shape->rank();
  const int64_t nd = rank - 2;
  std::optional<std::vector<int64_t>> wk;
  if (w.shape) {
    std::vector<int64_t> k;
    for (int64_t i = 2; i < rank; ++i)
      if (w.shape->dims[i].is_known()) k.push_back(w.shape->dims[i].value);
    if (static_cast<int64_t>(k.size()) == nd) wk = k;
  }
  RETURN_IF_ERROR(read_spatial_attrs(ctx, nd, wk ? &*wk : nullptr, false, a));
  if (wk && ctx.has("kernel_shape") && a->kernel != *wk)
    return ctx.error("attribute 'kernel_shape' " + dims_to_string(a->kernel) + " does not match the spatial dims of input '" +
                     w_name + "' " + w.shape->to_string());
  return Status::ok();
}

/// floor(t / 2) for any sign (ONNX's reference uses Python's //).
inline int64_t floor_half(int64_t t) { return t >= 0 ? t / 2 : -((-t + 1) / 2); }

/// ConvTranspose's output size and padding of spatial axis i for an input of size `in`. With
/// `output_shape` (its spatial values) or SAME auto_pad the output size is given (output_shape, else
/// in * stride) and the padding follows (the odd one at the end for SAME_UPPER); otherwise `pads`
/// (none for VALID) give the output size s * (in - 1) + output_padding + dilated kernel - pads.
template <class Ctx>
Status conv_transpose_axis(Ctx& ctx, const SpatialAttrs& a, int64_t output_padding,
                           const std::optional<std::vector<int64_t>>& output_shape, int64_t i, int64_t in, AxisGeom* g) {
  const int64_t s = a.strides[i], dk = a.dilated_kernel(i);
  const int64_t full = s * (in - 1) + output_padding + dk;  // output size with no padding
  g->in = in;
  const bool same = a.auto_pad == AutoPad::kSameUpper || a.auto_pad == AutoPad::kSameLower;
  if (output_shape || same) {
    g->out = output_shape ? (*output_shape)[i] : in * s;
    const int64_t total = full - g->out;
    if (a.auto_pad == AutoPad::kSameUpper) {
      g->pad_begin = floor_half(total);
      g->pad_end = total - g->pad_begin;
    } else {
      g->pad_end = floor_half(total);
      g->pad_begin = total - g->pad_end;
    }
    return Status::ok();
  }
  g->pad_begin = a.auto_pad == AutoPad::kValid ? 0 : a.pads[i];
  g->pad_end = a.auto_pad == AutoPad::kValid ? 0 : a.pads[i + a.nd];
  g->out = full - g->pad_begin - g->pad_end;
  if (g->out < 0)
    return ctx.error("spatial axis " + std::to_string(i) + ": pads " + std::to_string(g->pad_begin) + "+" +
                     std::to_string(g->pad_end) + " exceed the full output size " + std::to_string(full));
  return Status::ok();
}

}  // namespace ferry
