// Resize (opsets 10, 11, 13, 18, 19) and Upsample (7, 9): nearest / linear / cubic interpolation
// over any subset of axes. Linear and cubic are applied separably, one axis at a time, with per-axis
// tap tables (index + weight) that follow the ONNX reference (onnx/reference/ops/op_resize.py):
// coordinate transforms, edge clamping, exclude_outside, antialias and tf_crop_and_resize
// extrapolation. Coordinates are computed in float like onnxruntime.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/data_movement.h"
#include "ops/resize.h"

namespace ferry {
namespace {

using dm::input_desc;
using dm::input_shape_or_null;
using dm::input_type_or_null;
using dm::shape_str;
using std::string;
using std::vector;

enum class Mode { kNearest, kLinear, kCubic };
enum class Coord { kHalfPixel, kHalfPixelSymmetric, kPytorchHalfPixel, kAlignCorners, kAsymmetric, kTfCropAndResize };
// kSimple: Upsample and Resize-10 (floor when upsampling, ceil when downsampling, as onnxruntime).
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };
enum class Aspect { kStretch, kNotLarger, kNotSmaller };

struct ResizeAttrs {
  Mode mode = Mode::kNearest;
  Coord coord = Coord::kAsymmetric;
  Nearest nearest = Nearest::kSimple;
  float cubic_a = -0.75f;
  bool exclude_outside = false;
  float extrapolation = 0.0f;
  bool antialias = false;
  bool axes_given = false;
  vector<int64_t> axes;  // as given (normalized later against the rank)
  Aspect aspect = Aspect::kStretch;
};

bool is_upsample(const Node& n) { return n.op_type == "Upsample"; }

template <typename Ctx>
Status read_attrs(const Ctx& ctx, ResizeAttrs* a) {
  const int64_t opset = ctx.opset();
  const bool modern = !is_upsample(ctx.node()) && opset >= 11;
  const string mode = ctx.get_string("mode", "nearest");
  if (mode == "nearest") a->mode = Mode::kNearest;
  else if (mode == "linear" || (is_upsample(ctx.node()) && mode == "bilinear")) a->mode = Mode::kLinear;
  else if (mode == "cubic" && modern) a->mode = Mode::kCubic;
  else return ctx.error("attribute mode='" + mode + "' is not supported");
  if (!modern) return Status::ok();
  const string coord = ctx.get_string("coordinate_transformation_mode", "half_pixel");
  if (coord == "half_pixel") a->coord = Coord::kHalfPixel;
  else if (coord == "half_pixel_symmetric" && opset >= 19) a->coord = Coord::kHalfPixelSymmetric;
  else if (coord == "pytorch_half_pixel") a->coord = Coord::kPytorchHalfPixel;
  else if (coord == "align_corners") a->coord = Coord::kAlignCorners;
  else if (coord == "asymmetric") a->coord = Coord::kAsymmetric;
  else if (coord == "tf_crop_and_resize") a->coord = Coord::kTfCropAndResize;
  else return ctx.error("attribute coordinate_transformation_mode='" + coord + "' is not supported at opset " +
                        std::to_string(opset));
  const string nm = ctx.get_string("nearest_mode", "round_prefer_floor");
  if (nm == "round_prefer_floor") a->nearest = Nearest::kRoundPreferFloor;
  else if (nm == "round_prefer_ceil") a->nearest = Nearest::kRoundPreferCeil;
  else if (nm == "floor") a->nearest = Nearest::kFloor;
  else if (nm == "ceil") a->nearest = Nearest::kCeil;
  else return ctx.error("attribute nearest_mode='" + nm + "' is not supported");
  a->cubic_a = ctx.get_float("cubic_coeff_a", -0.75f);
  a->exclude_outside = ctx.get_int("exclude_outside", 0) != 0;
  a->extrapolation = ctx.get_float("extrapolation_value", 0.0f);
  if (opset >= 18) {
    a->antialias = ctx.get_int("antialias", 0) != 0;
    a->axes_given = ctx.has("axes");
    a->axes = ctx.get_ints("axes");
    const string kp = ctx.get_string("keep_aspect_ratio_policy", "stretch");
    if (kp == "stretch") a->aspect = Aspect::kStretch;
    else if (kp == "not_larger") a->aspect = Aspect::kNotLarger;
    else if (kp == "not_smaller") a->aspect = Aspect::kNotSmaller;
    else return ctx.error("attribute keep_aspect_ratio_policy='" + kp + "' is not supported");
  }
  return Status::ok();
}

// Where the scales / sizes / roi come from for this op and opset.
struct ResizeInputs {
  const Tensor* roi = nullptr;
  const Tensor* scales = nullptr;  // nullptr or empty = not given
  const Tensor* sizes = nullptr;
  bool scales_unknown = false;  // given, but the value is not known (shape rules)
  bool sizes_unknown = false;
  vector<float> scales_attr;  // Upsample-7
};

// `value(i)` returns input i's value (nullptr when omitted or unknown), `given(i)` whether it is present.
template <typename Ctx, typename Value>
Status resize_inputs(const Ctx& ctx, Value value, ResizeInputs* in) {
  const bool up = is_upsample(ctx.node());
  if (up && ctx.opset() < 9) {
    if (!ctx.has("scales")) return ctx.error("attribute scales is required");
    in->scales_attr = ctx.get_floats("scales");
    return Status::ok();
  }
  if (up || ctx.opset() < 11) {
    if (!ctx.has_input(1)) return ctx.error("input 1 (scales) is required");
    in->scales = value(1);
    in->scales_unknown = !in->scales;
    return Status::ok();
  }
  if (ctx.has_input(1)) in->roi = value(1);
  if (ctx.has_input(2)) {
    in->scales = value(2);
    in->scales_unknown = !in->scales;
  }
  if (ctx.has_input(3)) {
    in->sizes = value(3);
    in->sizes_unknown = !in->sizes;
  }
  if (in->scales && in->scales->numel() == 0) in->scales = nullptr;
  if (in->sizes && in->sizes->numel() == 0) in->sizes = nullptr;
  return Status::ok();
}

// The output size, scale and roi of every axis. in_dims entries may be -1 (unknown) in shape rules;
// the corresponding outputs are then -1.
struct ResizePlan {
  vector<int64_t> out;
  vector<float> scale;
  vector<float> roi_start, roi_end;
};

template <typename Ctx>
Status make_plan(const Ctx& ctx, const ResizeAttrs& a, const ResizeInputs& in, const vector<int64_t>& in_dims,
                 ResizePlan* p) {
  const int64_t r = static_cast<int64_t>(in_dims.size());
  vector<int64_t> axes = a.axes;
  if (!a.axes_given) {
    axes.resize(static_cast<size_t>(r));
    for (int64_t i = 0; i < r; ++i) axes[i] = i;
  }
  vector<bool> seen(static_cast<size_t>(r), false);
  for (int64_t& ax : axes) {
    const int64_t orig = ax;
    if (!normalize_axis(&ax, r))
      return ctx.error("attribute axes: axis " + std::to_string(orig) + " is out of range for rank " + std::to_string(r));
    if (seen[ax]) return ctx.error("attribute axes: axis " + std::to_string(orig) + " is repeated");
    seen[ax] = true;
  }
  const size_t na = axes.size();
  p->out = in_dims;
  p->scale.assign(static_cast<size_t>(r), 1.0f);
  p->roi_start.assign(static_cast<size_t>(r), 0.0f);
  p->roi_end.assign(static_cast<size_t>(r), 1.0f);
  if (a.coord == Coord::kTfCropAndResize && in.roi && in.roi->numel() > 0) {
    if (in.roi->numel() != static_cast<int64_t>(2 * na))
      return ctx.error("roi has " + std::to_string(in.roi->numel()) + " values, expected " + std::to_string(2 * na) +
                       " (start and end per resized axis)");
    for (size_t i = 0; i < na; ++i) {
      p->roi_start[axes[i]] = static_cast<float>(in.roi->get_double(static_cast<int64_t>(i)));
      p->roi_end[axes[i]] = static_cast<float>(in.roi->get_double(static_cast<int64_t>(i + na)));
    }
  }
  const bool has_scales = in.scales || !in.scales_attr.empty() || in.scales_unknown;
  const bool has_sizes = in.sizes || in.sizes_unknown;
  if (has_scales && has_sizes) return ctx.error("only one of scales and sizes may be given");
  if (!has_scales && !has_sizes) return ctx.error("one of scales and sizes must be given");
  if (in.sizes_unknown) {
    for (int64_t ax : axes) p->out[ax] = -1;
    return Status::ok();
  }
  if (in.sizes) {
    if (!dtype_is_integer(in.sizes->dtype()))
      return ctx.error("sizes must be int64, got " + in.sizes->type().to_string());
    vector<int64_t> sizes = in.sizes->to_int64_vector();
    if (sizes.size() != na)
      return ctx.error("sizes " + shape_str(sizes) + " has " + std::to_string(sizes.size()) + " values for " +
                       std::to_string(na) + " resized axes");
    for (int64_t s : sizes)
      if (s < 0) return ctx.error("sizes " + shape_str(sizes) + " has a negative entry");
    if (a.aspect == Aspect::kStretch) {
      for (size_t i = 0; i < na; ++i) {
        const int64_t d = in_dims[axes[i]];
        p->out[axes[i]] = sizes[i];
        if (d >= 0) p->scale[axes[i]] = static_cast<float>(sizes[i]) / static_cast<float>(d);
      }
      return Status::ok();
    }
    float s = a.aspect == Aspect::kNotLarger ? std::numeric_limits<float>::max() : std::numeric_limits<float>::lowest();
    bool unknown = false;
    for (size_t i = 0; i < na; ++i) {
      const int64_t d = in_dims[axes[i]];
      if (d < 0) {
        unknown = true;
        continue;
      }
      const float f = static_cast<float>(sizes[i]) / static_cast<float>(d);
      s = a.aspect == Aspect::kNotLarger ? std::min(s, f) : std::max(s, f);
    }
    for (size_t i = 0; i < na; ++i) {
      const int64_t d = in_dims[axes[i]];
      p->scale[axes[i]] = s;
      p->out[axes[i]] = unknown ? -1 : static_cast<int64_t>(std::round(s * static_cast<float>(d)));
    }
    return Status::ok();
  }
  if (a.aspect != Aspect::kStretch)
    return ctx.error("keep_aspect_ratio_policy other than 'stretch' requires sizes, not scales");
  vector<float> scales = in.scales_attr;
  if (in.scales) {
    if (!dtype_is_float(in.scales->dtype())) return ctx.error("scales must be float, got " + in.scales->type().to_string());
    scales = to_float_vector(*in.scales);
  }
  if (in.scales_unknown) {
    for (int64_t ax : axes) p->out[ax] = -1;
    return Status::ok();
  }
  if (scales.size() != na)
    return ctx.error("scales has " + std::to_string(scales.size()) + " values for " + std::to_string(na) +
                     " resized axes (input rank " + std::to_string(r) + ")");
  for (size_t i = 0; i < na; ++i) {
    const float s = scales[i];
    if (!(s > 0) || !std::isfinite(s)) return ctx.error("scales must be positive, got " + std::to_string(s));
    const int64_t d = in_dims[axes[i]];
    p->scale[axes[i]] = s;
    if (d < 0) {
      p->out[axes[i]] = -1;
      continue;
    }
    const double o = std::floor(static_cast<double>(static_cast<float>(d) * s));
    if (o > static_cast<double>(kMaxTensorElements)) return ctx.error("the output is too large");
    p->out[axes[i]] = static_cast<int64_t>(o);
  }
  return Status::ok();
}

// ---- per-axis coordinate tables -------------------------------------------------------------

float original_coord(const ResizeAttrs& a, int64_t x, float scale, int64_t in_len, int64_t out_len, float roi_s,
                     float roi_e) {
  const float xf = static_cast<float>(x);
  switch (a.coord) {
    case Coord::kHalfPixel: return (xf + 0.5f) / scale - 0.5f;
    case Coord::kHalfPixelSymmetric: {
      const float adjustment = static_cast<float>(out_len) / (scale * static_cast<float>(in_len));
      const float center = static_cast<float>(in_len) / 2.0f;
      const float offset = center * (1.0f - adjustment);
      return offset + (xf + 0.5f) / scale - 0.5f;
    }
    case Coord::kPytorchHalfPixel: return out_len > 1 ? (xf + 0.5f) / scale - 0.5f : 0.0f;
    case Coord::kAlignCorners:
      return out_len == 1 ? 0.0f : xf * static_cast<float>(in_len - 1) / static_cast<float>(out_len - 1);
    case Coord::kAsymmetric: return xf / scale;
    case Coord::kTfCropAndResize:
      if (out_len > 1)
        return roi_s * static_cast<float>(in_len - 1) +
               xf * (roi_e - roi_s) * static_cast<float>(in_len - 1) / static_cast<float>(out_len - 1);
      return 0.5f * (roi_s + roi_e) * static_cast<float>(in_len - 1);
  }
  return 0.0f;
}

bool outside(const ResizeAttrs& a, float x, int64_t in_len) {
  return a.coord == Coord::kTfCropAndResize && (x < 0.0f || x > static_cast<float>(in_len - 1));
}

// Nearest: the input index of each output index along one axis, -1 where extrapolated.
vector<int64_t> nearest_map(const ResizeAttrs& a, const ResizePlan& p, int64_t axis, int64_t in_len) {
  const int64_t out_len = p.out[axis];
  vector<int64_t> m(static_cast<size_t>(out_len));
  for (int64_t j = 0; j < out_len; ++j) {
    const float x = original_coord(a, j, p.scale[axis], in_len, out_len, p.roi_start[axis], p.roi_end[axis]);
    if (outside(a, x, in_len)) {
      m[j] = -1;
      continue;
    }
    const float fl = std::floor(x);
    int64_t idx = static_cast<int64_t>(fl);
    if (x != fl) {
      const float frac = x - fl;
      switch (a.nearest) {
        case Nearest::kRoundPreferFloor: idx += frac <= 0.5f ? 0 : 1; break;
        case Nearest::kRoundPreferCeil: idx += frac < 0.5f ? 0 : 1; break;
        case Nearest::kFloor: break;
        case Nearest::kCeil: idx += 1; break;
        case Nearest::kSimple: idx += p.scale[axis] < 1.0f ? 1 : 0; break;
      }
    }
    m[j] = std::clamp<int64_t>(idx, 0, in_len - 1);
  }
  return m;
}

struct Taps {
  int64_t n = 0;           // taps per output index
  vector<int64_t> idx;     // out_len * n, clamped to [0, in_len)
  vector<float> w;         // out_len * n
  vector<char> outside;    // out_len: extrapolated (tf_crop_and_resize)
  bool identity = false;   // out == in and every output copies its own input index
};

double cubic_kernel(double x, double A) {
  x = std::fabs(x);
  if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
  if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
  return 0;
}

Taps interp_taps(const ResizeAttrs& a, const ResizePlan& p, int64_t axis, int64_t in_len) {
  const int64_t out_len = p.out[axis];
  const float scale = p.scale[axis];
  const bool aa = a.antialias && scale < 1.0f;
  const double s = aa ? static_cast<double>(scale) : 1.0;
  // Taps start at offset `first` from the pixel left of x (reference: ratio in (0, 1]).
  int64_t first, n;
  if (a.mode == Mode::kLinear) {
    first = aa ? static_cast<int64_t>(std::floor(-1.0 / s)) + 1 : 0;
    n = 2 - 2 * first;
  } else {
    first = aa ? static_cast<int64_t>(std::floor(-2.0 / s)) + 1 : -1;
    n = 2 - 2 * first;
  }
  Taps t;
  t.n = n;
  t.idx.resize(static_cast<size_t>(out_len * n));
  t.w.resize(static_cast<size_t>(out_len * n));
  t.outside.assign(static_cast<size_t>(out_len), 0);
  vector<double> w(static_cast<size_t>(n));
  for (int64_t j = 0; j < out_len; ++j) {
    const float x = original_coord(a, j, scale, in_len, out_len, p.roi_start[axis], p.roi_end[axis]);
    if (outside(a, x, in_len)) t.outside[j] = 1;
    const double fl = std::floor(static_cast<double>(x));
    // The reference takes the pixel left of x and ratio in (0, 1]; for integer x that is x - 1, ratio 1.
    const int64_t left = static_cast<double>(x) == fl ? static_cast<int64_t>(fl) - 1 : static_cast<int64_t>(fl);
    const double ratio = static_cast<double>(x) - static_cast<double>(left);
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      const double arg = static_cast<double>(first + k) - ratio;
      double v;
      if (a.mode == Mode::kLinear) v = aa ? std::clamp(1.0 - std::fabs(arg * s), 0.0, 1.0) : 1.0 - std::fabs(arg);
      else v = cubic_kernel(arg * s, a.cubic_a);
      const int64_t src = left + first + k;
      if (a.exclude_outside && (src < 0 || src >= in_len)) v = 0;
      w[k] = v;
      sum += v;
    }
    const bool normalize = aa || a.exclude_outside;
    for (int64_t k = 0; k < n; ++k) {
      t.idx[j * n + k] = std::clamp<int64_t>(left + first + k, 0, in_len - 1);
      t.w[j * n + k] = static_cast<float>(normalize && sum != 0 ? w[k] / sum : w[k]);
    }
  }
  if (out_len == in_len) {
    t.identity = true;
    for (int64_t j = 0; j < out_len && t.identity; ++j) {
      if (t.outside[j]) t.identity = false;
      for (int64_t k = 0; k < n; ++k) {
        const float wk = t.w[j * n + k];
        if (wk != 0.0f && !(wk == 1.0f && t.idx[j * n + k] == j)) t.identity = false;
      }
    }
  }
  return t;
}

// One separable pass: resizes `in` (dims) along `axis` to `out_len` with `taps`.
template <typename T>
vector<T> apply_taps(const vector<T>& in, const vector<int64_t>& dims, int64_t axis, const Taps& taps, int64_t out_len) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dims[d];
  for (int64_t d = axis + 1; d < static_cast<int64_t>(dims.size()); ++d) inner *= dims[d];
  const int64_t in_len = dims[axis];
  vector<T> out(static_cast<size_t>(outer * out_len * inner), T(0));
  for (int64_t o = 0; o < outer; ++o) {
    const T* src = in.data() + o * in_len * inner;
    T* dst = out.data() + o * out_len * inner;
    for (int64_t j = 0; j < out_len; ++j) {
      T* d = dst + j * inner;
      for (int64_t k = 0; k < taps.n; ++k) {
        const T wk = static_cast<T>(taps.w[j * taps.n + k]);
        if (wk == T(0)) continue;
        const T* s = src + taps.idx[j * taps.n + k] * inner;
        for (int64_t i = 0; i < inner; ++i) d[i] += wk * s[i];
      }
    }
  }
  return out;
}

template <typename T>
Status interpolate(KernelContext& ctx, const ResizeAttrs& a, const ResizePlan& p, const Tensor& x) {
  const int64_t r = x.rank();
  vector<int64_t> dims = x.dims();
  vector<T> buf(static_cast<size_t>(x.numel()));
  if constexpr (std::is_same_v<T, double>) {
    if (x.dtype() == DType::kF64) std::copy(x.data<double>(), x.data<double>() + x.numel(), buf.begin());
    else for (int64_t i = 0; i < x.numel(); ++i) buf[i] = x.get_double(i);
  } else {
    if (x.dtype() == DType::kF32) std::copy(x.data<float>(), x.data<float>() + x.numel(), buf.begin());
    else for (int64_t i = 0; i < x.numel(); ++i) buf[i] = static_cast<T>(x.get_double(i));
  }
  vector<Taps> taps(static_cast<size_t>(r));
  vector<int64_t> order;
  for (int64_t d = 0; d < r; ++d) {
    if (p.out[d] == dims[d] && p.scale[d] == 1.0f && a.coord != Coord::kTfCropAndResize) continue;
    taps[d] = interp_taps(a, p, d, dims[d]);
    if (!taps[d].identity) order.push_back(d);
  }
  // Shrinking axes first keeps the intermediate buffers small.
  std::stable_sort(order.begin(), order.end(), [&](int64_t u, int64_t v) {
    return static_cast<double>(p.out[u]) / static_cast<double>(dims[u]) <
           static_cast<double>(p.out[v]) / static_cast<double>(dims[v]);
  });
  for (int64_t d : order) {
    buf = apply_taps<T>(buf, dims, d, taps[d], p.out[d]);
    dims[d] = p.out[d];
  }
  // tf_crop_and_resize: any extrapolated coordinate gives extrapolation_value.
  bool any_outside = false;
  for (const Taps& t : taps)
    for (char c : t.outside) any_outside |= c != 0;
  if (any_outside && !buf.empty()) {
    vector<int64_t> coord(static_cast<size_t>(r), 0);
    for (size_t i = 0; i < buf.size(); ++i) {
      bool out = false;
      for (int64_t d = 0; d < r && !out; ++d) out = !taps[d].outside.empty() && taps[d].outside[coord[d]];
      if (out) buf[i] = static_cast<T>(a.extrapolation);
      for (int64_t d = r - 1; d >= 0; --d) {
        if (++coord[d] < dims[d]) break;
        coord[d] = 0;
      }
    }
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), dims));
  const int64_t n = out->numel();
  switch (x.dtype()) {
    case DType::kF32: std::copy(buf.begin(), buf.end(), out->mutable_data<float>()); break;
    case DType::kF64: for (int64_t i = 0; i < n; ++i) out->mutable_data<double>()[i] = static_cast<double>(buf[i]); break;
    case DType::kF16: for (int64_t i = 0; i < n; ++i) out->mutable_data<uint16_t>()[i] = f32_to_f16(static_cast<float>(buf[i])); break;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) out->mutable_data<uint16_t>()[i] = f32_to_bf16(static_cast<float>(buf[i])); break;
    FERRY_DISPATCH_INT_CASES({
      // Truncation toward zero like numpy's astype, saturated to the type's range.
      const double lo = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
      const double hi = static_cast<double>(std::numeric_limits<scalar_t>::max());
      for (int64_t i = 0; i < n; ++i) {
        const double v = std::trunc(static_cast<double>(buf[i]));
        out->mutable_data<scalar_t>()[i] = std::isnan(v) ? scalar_t(0) : static_cast<scalar_t>(std::clamp(v, lo, hi));
      }
    })
    default: return ctx.error(string("element type ") + dtype_name(x.dtype()) + " is not supported by linear/cubic modes");
  }
  return Status::ok();
}

// Attributes, inputs and output plan of a run, with the checks every kernel needs.
Status run_plan(KernelContext& ctx, ResizeAttrs* a, ResizePlan* p) {
  const Tensor& x = ctx.input(0);
  RETURN_IF_ERROR(read_attrs(ctx, a));
  ResizeInputs in;
  RETURN_IF_ERROR(resize_inputs(ctx, [&](int64_t i) { return ctx.has_input(i) ? &ctx.input(i) : nullptr; }, &in));
  RETURN_IF_ERROR(make_plan(ctx, *a, in, x.dims(), p));
  for (int64_t d = 0; d < x.rank(); ++d)
    if (x.dim(d) == 0 && p->out[d] > 0)
      return ctx.error("cannot resize the empty axis " + std::to_string(d) + " of input shape " + shape_str(x.dims()) +
                       " to size " + std::to_string(p->out[d]));
  return checked_element_count(p->out, ctx.node().describe() + " output").status();
}

Status k_resize(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  ResizeAttrs a;
  ResizePlan p;
  RETURN_IF_ERROR(run_plan(ctx, &a, &p));
  if (a.mode == Mode::kNearest) {
    vector<vector<int64_t>> maps(static_cast<size_t>(x.rank()));
    if (element_count(p.out) > 0)
      for (int64_t d = 0; d < x.rank(); ++d) maps[d] = nearest_map(a, p, d, x.dim(d));
    Tensor fill;
    if (x.dtype() == DType::kString) {
      fill = Tensor::scalar<string>("");
    } else {
      ASSIGN_OR_RETURN(fill, cast_tensor(Tensor::scalar<float>(a.extrapolation), x.dtype()));
    }
    ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), p.out));
    return dm::axis_map_gather(x, maps, fill, out);
  }
  if (x.dtype() == DType::kString || x.dtype() == DType::kBool)
    return ctx.error(string("element type ") + dtype_name(x.dtype()) + " is only supported by mode 'nearest'");
  if (x.dtype() == DType::kF64) return interpolate<double>(ctx, a, p, x);
  return interpolate<float>(ctx, a, p, x);
}

Status infer_resize(InferContext& ctx) {
  const TensorType* t = input_type_or_null(ctx, 0);
  const DType dt = t ? t->dtype : DType::kUndefined;
  ResizeAttrs a;
  RETURN_IF_ERROR(read_attrs(ctx, &a));
  const Shape* s = input_shape_or_null(ctx, 0);
  if (!s) {
    ctx.set_output(0, TensorType{dt, std::nullopt});
    return Status::ok();
  }
  ResizeInputs in;
  RETURN_IF_ERROR(resize_inputs(ctx, [&](int64_t i) { return ctx.input_value(i); }, &in));
  // An unknown roi only matters for tf_crop_and_resize, which does not change the output size.
  vector<int64_t> in_dims;
  for (const Dim& d : s->dims) in_dims.push_back(d.is_known() ? d.value : -1);
  ResizePlan p;
  RETURN_IF_ERROR(make_plan(ctx, a, in, in_dims, &p));
  Shape out = *s;
  for (int64_t d = 0; d < s->rank(); ++d) {
    if (p.out[d] >= 0) out.dims[d] = Dim(p.out[d]);
    else if (!(in_dims[d] < 0 && p.scale[d] == 1.0f && !in.scales_unknown && !in.sizes_unknown)) out.dims[d] = Dim();
  }
  ctx.set_output(0, TensorType{dt, out});
  return Status::ok();
}

}  // namespace

StatusOr<bool> resize_taps(KernelContext& ctx, vector<int64_t>* out_dims, vector<ResizeAxisTaps>* taps) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() == DType::kString || x.dtype() == DType::kBool) return false;
  ResizeAttrs a;
  ResizePlan p;
  RETURN_IF_ERROR(run_plan(ctx, &a, &p));
  if (a.coord == Coord::kTfCropAndResize) return false;
  const int64_t r = x.rank();
  vector<ResizeAxisTaps> t(static_cast<size_t>(r));
  for (int64_t d = 0; d < r; ++d) {
    if (p.out[d] == x.dim(d) && p.scale[d] == 1.0f) continue;  // the reference skips these axes too
    ResizeAxisTaps& at = t[d];
    if (a.mode == Mode::kNearest) {
      at.idx = nearest_map(a, p, d, x.dim(d));
      at.w.assign(at.idx.size(), 1.0f);
      at.n = 1;
      at.identity = p.out[d] == x.dim(d);
      for (int64_t j = 0; j < p.out[d] && at.identity; ++j) at.identity = at.idx[j] == j;
    } else {
      Taps tp = interp_taps(a, p, d, x.dim(d));
      at.n = tp.n;
      at.idx = std::move(tp.idx);
      at.w = std::move(tp.w);
      at.identity = tp.identity;
    }
  }
  *out_dims = p.out;
  *taps = std::move(t);
  return true;
}

void register_resize_ops(OpRegistry& r) {
  const vector<AttrSpec> resize_attrs = {
      {"mode", AttrType::kString}, {"coordinate_transformation_mode", AttrType::kString},
      {"nearest_mode", AttrType::kString}, {"cubic_coeff_a", AttrType::kFloat},
      {"exclude_outside", AttrType::kInt}, {"extrapolation_value", AttrType::kFloat},
      {"antialias", AttrType::kInt}, {"axes", AttrType::kInts}, {"keep_aspect_ratio_policy", AttrType::kString}};
  r.add(OpSchema{.name = "Upsample", .since_version = 7, .min_inputs = 1, .max_inputs = 1,
                 .attrs = {{"mode", AttrType::kString}, {"scales", AttrType::kFloats, true}}, .infer = infer_resize,
                 .kernel = k_resize});
  r.add(OpSchema{.name = "Upsample", .since_version = 9, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"mode", AttrType::kString}}, .infer = infer_resize, .kernel = k_resize});
  r.add(OpSchema{.name = "Resize", .since_version = 10, .min_inputs = 2, .max_inputs = 2,
                 .attrs = {{"mode", AttrType::kString}}, .infer = infer_resize, .kernel = k_resize});
  r.add(OpSchema{.name = "Resize", .since_version = 11, .min_inputs = 1, .max_inputs = 4, .attrs = resize_attrs,
                 .infer = infer_resize, .kernel = k_resize});
}

}  // namespace ferry
