// Detection and sampling ops: NonMaxSuppression, RoiAlign, GridSample, MaxUnpool.
// Float inputs of any width are computed in float (f16/bf16/f32) or double (f64) and rounded back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

bool is_float_dtype(DType t) { return dtype_is_float(t); }

/// A float tensor of dtype `dt` holding `v` (computed in double).
StatusOr<Tensor> doubles_to_tensor(const vector<double>& v, vector<int64_t> dims, DType dt) {
  Tensor t = Tensor::allocate(DType::kF64, std::move(dims));
  std::copy(v.begin(), v.end(), t.mutable_data<double>());
  if (dt == DType::kF64) return t;
  return cast_tensor(t, dt);
}

std::string dims_str(const Tensor& t) { return dims_to_string(t.dims()); }

/// Known dim value or -1.
int64_t known_dim(const TensorType& t, int64_t i) {
  if (!t.shape || i >= t.shape->rank()) return -1;
  return t.shape->dims[static_cast<size_t>(i)].is_known() ? t.shape->dims[static_cast<size_t>(i)].value : -1;
}

Dim dim_or_unknown(const TensorType& t, int64_t i) {
  if (!t.shape || i >= t.shape->rank()) return Dim();
  return t.shape->dims[static_cast<size_t>(i)];
}

// ---- NonMaxSuppression ----------------------------------------------------------------------

Status check_nms_attrs(const AttrReader& a, const std::function<Status(const std::string&)>& err) {
  const int64_t cpb = a.get_int("center_point_box", 0);
  if (cpb != 0 && cpb != 1) return err("attribute 'center_point_box' must be 0 or 1, got " + std::to_string(cpb));
  return Status::ok();
}

Status infer_nms(InferContext& ctx) {
  RETURN_IF_ERROR(check_nms_attrs(ctx, [&](const std::string& m) { return ctx.error(m); }));
  const TensorType& boxes = ctx.input_type(0);
  const TensorType& scores = ctx.input_type(1);
  if (boxes.shape && boxes.shape->rank() != 3)
    return ctx.error("input 'boxes' must have rank 3 [num_batches, spatial_dimension, 4], got " + boxes.shape->to_string());
  if (known_dim(boxes, 2) >= 0 && known_dim(boxes, 2) != 4)
    return ctx.error("input 'boxes' must have 4 values per box (last dimension), got " + boxes.shape->to_string());
  if (scores.shape && scores.shape->rank() != 3)
    return ctx.error("input 'scores' must have rank 3 [num_batches, num_classes, spatial_dimension], got " +
                     scores.shape->to_string());
  if (known_dim(boxes, 0) >= 0 && known_dim(scores, 0) >= 0 && known_dim(boxes, 0) != known_dim(scores, 0))
    return ctx.error("'boxes' " + boxes.shape->to_string() + " and 'scores' " + scores.shape->to_string() +
                     " disagree on num_batches");
  if (known_dim(boxes, 1) >= 0 && known_dim(scores, 2) >= 0 && known_dim(boxes, 1) != known_dim(scores, 2))
    return ctx.error("'boxes' " + boxes.shape->to_string() + " and 'scores' " + scores.shape->to_string() +
                     " disagree on spatial_dimension");
  ctx.set_output(0, TensorType{DType::kI64, Shape({Dim(), Dim(3)})});
  return Status::ok();
}

template <typename T>
bool nms_suppress(const T* b1, const T* b2, bool center, T iou_threshold) {
  T x1_min, x1_max, x2_min, x2_max, y1_min, y1_max, y2_min, y2_max;
  if (!center) {  // [y1, x1, y2, x2], corners in either order
    x1_min = std::min(b1[1], b1[3]);
    x1_max = std::max(b1[1], b1[3]);
    x2_min = std::min(b2[1], b2[3]);
    x2_max = std::max(b2[1], b2[3]);
    y1_min = std::min(b1[0], b1[2]);
    y1_max = std::max(b1[0], b1[2]);
    y2_min = std::min(b2[0], b2[2]);
    y2_max = std::max(b2[0], b2[2]);
  } else {  // [x_center, y_center, width, height]
    x1_min = b1[0] - b1[2] / 2;
    x1_max = b1[0] + b1[2] / 2;
    x2_min = b2[0] - b2[2] / 2;
    x2_max = b2[0] + b2[2] / 2;
    y1_min = b1[1] - b1[3] / 2;
    y1_max = b1[1] + b1[3] / 2;
    y2_min = b2[1] - b2[3] / 2;
    y2_max = b2[1] + b2[3] / 2;
  }
  const T ix_min = std::max(x1_min, x2_min), ix_max = std::min(x1_max, x2_max);
  if (!(ix_max > ix_min)) return false;
  const T iy_min = std::max(y1_min, y2_min), iy_max = std::min(y1_max, y2_max);
  if (!(iy_max > iy_min)) return false;
  const T inter = (ix_max - ix_min) * (iy_max - iy_min);
  if (!(inter > 0)) return false;
  const T area1 = (x1_max - x1_min) * (y1_max - y1_min);
  const T area2 = (x2_max - x2_min) * (y2_max - y2_min);
  const T uni = area1 + area2 - inter;
  if (!(area1 > 0) || !(area2 > 0) || !(uni > 0)) return false;
  return inter / uni > iou_threshold;
}

template <typename T>
void nms_run(const vector<T>& boxes, const vector<T>& scores, int64_t nb, int64_t nc, int64_t ns, bool center,
             int64_t max_out, T iou, bool has_score_thr, T score_thr, vector<int64_t>* out) {
  vector<int64_t> cand;
  vector<int64_t> selected;
  for (int64_t b = 0; b < nb; ++b) {
    const T* bb = boxes.data() + b * ns * 4;
    for (int64_t c = 0; c < nc; ++c) {
      const T* sc = scores.data() + (b * nc + c) * ns;
      cand.clear();
      for (int64_t i = 0; i < ns; ++i)
        if (!has_score_thr || sc[i] > score_thr) cand.push_back(i);
      auto key = [&](int64_t i) { return std::isnan(sc[i]) ? -std::numeric_limits<T>::infinity() : sc[i]; };
      // Highest score first; equal scores keep the lower box index first.
      std::sort(cand.begin(), cand.end(), [&](int64_t x, int64_t y) {
        const T kx = key(x), ky = key(y);
        return kx > ky || (kx == ky && x < y);
      });
      selected.clear();
      for (int64_t i : cand) {
        if (static_cast<int64_t>(selected.size()) >= max_out) break;
        bool keep = true;
        for (int64_t s : selected)
          if (nms_suppress(bb + i * 4, bb + s * 4, center, iou)) {
            keep = false;
            break;
          }
        if (!keep) continue;
        selected.push_back(i);
        out->push_back(b);
        out->push_back(c);
        out->push_back(i);
      }
    }
  }
}

Status k_nms(KernelContext& ctx) {
  RETURN_IF_ERROR(check_nms_attrs(ctx, [&](const std::string& m) { return ctx.error(m); }));
  const Tensor& boxes = ctx.input(0);
  const Tensor& scores = ctx.input(1);
  if (!is_float_dtype(boxes.dtype()) || !is_float_dtype(scores.dtype()))
    return ctx.error("inputs 'boxes' and 'scores' must be float tensors");
  if (boxes.rank() != 3 || boxes.dim(2) != 4)
    return ctx.error("input 'boxes' must have shape [num_batches, spatial_dimension, 4], got " + dims_str(boxes));
  if (scores.rank() != 3)
    return ctx.error("input 'scores' must have shape [num_batches, num_classes, spatial_dimension], got " + dims_str(scores));
  if (scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
    return ctx.error("'boxes' " + dims_str(boxes) + " and 'scores' " + dims_str(scores) +
                     " disagree on num_batches or spatial_dimension");
  int64_t max_out = 0;
  if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
    const Tensor& m = ctx.input(2);
    if (!dtype_is_integer(m.dtype())) return ctx.error("input 'max_output_boxes_per_class' must be an integer tensor");
    max_out = std::max<int64_t>(0, m.get_int64(0));
  }
  double iou = 0.0;
  if (ctx.has_input(3) && ctx.input(3).numel() > 0) {
    if (!is_float_dtype(ctx.input(3).dtype())) return ctx.error("input 'iou_threshold' must be a float tensor");
    iou = ctx.input(3).get_double(0);
    if (!(iou >= 0.0 && iou <= 1.0))
      return ctx.error("input 'iou_threshold' must be in [0, 1], got " + std::to_string(iou));
  }
  bool has_thr = false;
  double thr = 0.0;
  if (ctx.has_input(4) && ctx.input(4).numel() > 0) {
    if (!is_float_dtype(ctx.input(4).dtype())) return ctx.error("input 'score_threshold' must be a float tensor");
    has_thr = true;
    thr = ctx.input(4).get_double(0);
  }
  const bool center = ctx.get_int("center_point_box", 0) == 1;
  const int64_t nb = boxes.dim(0), ns = boxes.dim(1), nc = scores.dim(1);
  vector<int64_t> sel;
  if (boxes.dtype() == DType::kF64 && scores.dtype() == DType::kF64) {
    nms_run<double>(boxes.to_double_vector(), scores.to_double_vector(), nb, nc, ns, center, max_out, iou, has_thr, thr,
                    &sel);
  } else {
    // The spec's types are float: compute in float as the reference implementations do.
    nms_run<float>(to_float_vector(boxes), to_float_vector(scores), nb, nc, ns, center, max_out,
                   static_cast<float>(iou), has_thr, static_cast<float>(thr), &sel);
  }
  const int64_t k = static_cast<int64_t>(sel.size()) / 3;
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DType::kI64, {k, 3}));
  std::copy(sel.begin(), sel.end(), y->mutable_data<int64_t>());
  return Status::ok();
}

// ---- RoiAlign -------------------------------------------------------------------------------

struct RoiAlignAttrs {
  bool max_mode = false;
  bool half_pixel = false;
  int64_t out_h = 1, out_w = 1, sampling_ratio = 0;
  double spatial_scale = 1.0;
};

template <class Ctx>
Status read_roialign_attrs(Ctx& ctx, RoiAlignAttrs* a) {
  const std::string mode = ctx.get_string("mode", "avg");
  if (mode != "avg" && mode != "max") return ctx.error("attribute 'mode' must be 'avg' or 'max', got '" + mode + "'");
  a->max_mode = mode == "max";
  // Opset 10 has no coordinate_transformation_mode and behaves as output_half_pixel; 16 defaults to half_pixel.
  if (ctx.opset() >= 16) {
    const std::string ctm = ctx.get_string("coordinate_transformation_mode", "half_pixel");
    if (ctm != "half_pixel" && ctm != "output_half_pixel")
      return ctx.error("attribute 'coordinate_transformation_mode' must be 'half_pixel' or 'output_half_pixel', got '" +
                       ctm + "'");
    a->half_pixel = ctm == "half_pixel";
  }
  a->out_h = ctx.get_int("output_height", 1);
  a->out_w = ctx.get_int("output_width", 1);
  a->sampling_ratio = ctx.get_int("sampling_ratio", 0);
  a->spatial_scale = ctx.get_float("spatial_scale", 1.0f);
  if (a->out_h < 1 || a->out_w < 1 || a->out_h > (int64_t(1) << 24) || a->out_w > (int64_t(1) << 24))
    return ctx.error("attributes 'output_height' and 'output_width' must be >= 1, got " + std::to_string(a->out_h) +
                     " and " + std::to_string(a->out_w));
  if (a->sampling_ratio < 0 || a->sampling_ratio > (int64_t(1) << 16))
    return ctx.error("attribute 'sampling_ratio' must be >= 0, got " + std::to_string(a->sampling_ratio));
  if (!std::isfinite(a->spatial_scale)) return ctx.error("attribute 'spatial_scale' must be finite");
  return Status::ok();
}

Status infer_roialign(InferContext& ctx) {
  RoiAlignAttrs a;
  RETURN_IF_ERROR(read_roialign_attrs(ctx, &a));
  const TensorType& x = ctx.input_type(0);
  const TensorType& rois = ctx.input_type(1);
  const TensorType& bi = ctx.input_type(2);
  if (x.shape && x.shape->rank() != 4) return ctx.error("input 'X' must have rank 4 [N, C, H, W], got " + x.shape->to_string());
  if (rois.shape && rois.shape->rank() != 2) return ctx.error("input 'rois' must have rank 2 [num_rois, 4], got " + rois.shape->to_string());
  if (known_dim(rois, 1) >= 0 && known_dim(rois, 1) != 4)
    return ctx.error("input 'rois' must have 4 values per roi, got " + rois.shape->to_string());
  if (bi.shape && bi.shape->rank() != 1)
    return ctx.error("input 'batch_indices' must have rank 1 [num_rois], got " + bi.shape->to_string());
  if (known_dim(rois, 0) >= 0 && known_dim(bi, 0) >= 0 && known_dim(rois, 0) != known_dim(bi, 0))
    return ctx.error("'rois' " + rois.shape->to_string() + " and 'batch_indices' " + bi.shape->to_string() +
                     " disagree on num_rois");
  Dim r = dim_or_unknown(rois, 0);
  if (!r.is_known() && r.symbol.empty()) r = dim_or_unknown(bi, 0);
  ctx.set_output(0, TensorType{x.dtype, Shape({r, dim_or_unknown(x, 1), Dim(a.out_h), Dim(a.out_w)})});
  return Status::ok();
}

Status k_roialign(KernelContext& ctx) {
  RoiAlignAttrs a;
  RETURN_IF_ERROR(read_roialign_attrs(ctx, &a));
  const Tensor& xt = ctx.input(0);
  const Tensor& rt = ctx.input(1);
  const Tensor& bt = ctx.input(2);
  if (!is_float_dtype(xt.dtype()) || !is_float_dtype(rt.dtype())) return ctx.error("inputs 'X' and 'rois' must be float tensors");
  if (!dtype_is_integer(bt.dtype())) return ctx.error("input 'batch_indices' must be an integer tensor");
  if (xt.rank() != 4) return ctx.error("input 'X' must have rank 4 [N, C, H, W], got " + dims_str(xt));
  if (rt.rank() != 2 || rt.dim(1) != 4) return ctx.error("input 'rois' must have shape [num_rois, 4], got " + dims_str(rt));
  if (bt.rank() != 1 || bt.dim(0) != rt.dim(0))
    return ctx.error("input 'batch_indices' must have shape [num_rois] = [" + std::to_string(rt.dim(0)) + "], got " +
                     dims_str(bt));
  const int64_t n = xt.dim(0), c = xt.dim(1), h = xt.dim(2), w = xt.dim(3), nr = rt.dim(0);
  const int64_t ph_n = a.out_h, pw_n = a.out_w;
  RETURN_IF_ERROR(checked_element_count({nr, c, ph_n, pw_n}, ctx.node().describe() + " output").status());
  vector<double> x = xt.to_double_vector();
  vector<double> rois = rt.to_double_vector();
  vector<double> y(static_cast<size_t>(nr * c * ph_n * pw_n), 0.0);
  struct Sample {
    int64_t p1, p2, p3, p4;
    double w1, w2, w3, w4;
  };
  vector<Sample> pre;
  for (int64_t r = 0; r < nr; ++r) {
    const int64_t b = bt.get_int64(r);
    if (b < 0 || b >= n)
      return ctx.error("batch_indices[" + std::to_string(r) + "] = " + std::to_string(b) + " is out of range [0, " +
                       std::to_string(n) + ")");
    const double off = a.half_pixel ? 0.5 : 0.0;
    const double* roi = rois.data() + r * 4;
    const double sw = roi[0] * a.spatial_scale - off, sh = roi[1] * a.spatial_scale - off;
    const double ew = roi[2] * a.spatial_scale - off, eh = roi[3] * a.spatial_scale - off;
    double rw = ew - sw, rh = eh - sh;
    if (!a.half_pixel) {  // malformed rois are forced to 1x1
      rw = std::max(rw, 1.0);
      rh = std::max(rh, 1.0);
    }
    if (!std::isfinite(rw) || !std::isfinite(rh)) return ctx.error("roi " + std::to_string(r) + " has non-finite coordinates");
    const double bin_h = rh / static_cast<double>(ph_n), bin_w = rw / static_cast<double>(pw_n);
    const double gh_d = a.sampling_ratio > 0 ? static_cast<double>(a.sampling_ratio) : std::ceil(rh / static_cast<double>(ph_n));
    const double gw_d = a.sampling_ratio > 0 ? static_cast<double>(a.sampling_ratio) : std::ceil(rw / static_cast<double>(pw_n));
    if (gh_d > 1e4 || gw_d > 1e4) return ctx.error("roi " + std::to_string(r) + " is too large for adaptive sampling");
    const int64_t gh = std::max<int64_t>(0, static_cast<int64_t>(gh_d));
    const int64_t gw = std::max<int64_t>(0, static_cast<int64_t>(gw_d));
    if (static_cast<double>(ph_n) * static_cast<double>(pw_n) * static_cast<double>(gh) * static_cast<double>(gw) > 1e8)
      return ctx.error("roi " + std::to_string(r) + " needs too many sampling points (output " + std::to_string(ph_n) + "x" +
                       std::to_string(pw_n) + ", " + std::to_string(gh) + "x" + std::to_string(gw) + " per bin)");
    const double count = static_cast<double>(std::max<int64_t>(gh * gw, 1));
    pre.assign(static_cast<size_t>(ph_n * pw_n * gh * gw), Sample{0, 0, 0, 0, 0, 0, 0, 0});
    size_t idx = 0;
    for (int64_t ph = 0; ph < ph_n; ++ph)
      for (int64_t pw = 0; pw < pw_n; ++pw)
        for (int64_t iy = 0; iy < gh; ++iy) {
          const double yy = sh + ph * bin_h + (iy + 0.5) * bin_h / static_cast<double>(gh);
          for (int64_t ix = 0; ix < gw; ++ix, ++idx) {
            double xx = sw + pw * bin_w + (ix + 0.5) * bin_w / static_cast<double>(gw);
            double yv = yy;
            if (yv < -1.0 || yv > static_cast<double>(h) || xx < -1.0 || xx > static_cast<double>(w)) continue;
            yv = std::max(yv, 0.0);
            xx = std::max(xx, 0.0);
            int64_t y_low = static_cast<int64_t>(yv), x_low = static_cast<int64_t>(xx), y_high, x_high;
            if (y_low >= h - 1) {
              y_high = y_low = h - 1;
              yv = static_cast<double>(y_low);
            } else {
              y_high = y_low + 1;
            }
            if (x_low >= w - 1) {
              x_high = x_low = w - 1;
              xx = static_cast<double>(x_low);
            } else {
              x_high = x_low + 1;
            }
            const double ly = yv - y_low, lx = xx - x_low, hy = 1.0 - ly, hx = 1.0 - lx;
            pre[idx] = Sample{y_low * w + x_low, y_low * w + x_high, y_high * w + x_low, y_high * w + x_high,
                              hy * hx, hy * lx, ly * hx, ly * lx};
          }
        }
    for (int64_t ch = 0; ch < c; ++ch) {
      const double* xd = x.data() + (b * c + ch) * h * w;
      double* yd = y.data() + (r * c + ch) * ph_n * pw_n;
      size_t k = 0;
      for (int64_t p = 0; p < ph_n * pw_n; ++p) {
        double acc = 0.0;
        bool first = true;
        for (int64_t s = 0; s < gh * gw; ++s, ++k) {
          const Sample& q = pre[k];
          if (!a.max_mode) {
            acc += q.w1 * xd[q.p1] + q.w2 * xd[q.p2] + q.w3 * xd[q.p3] + q.w4 * xd[q.p4];
          } else {
            // As onnxruntime and the ONNX reference: the max of the weighted corner values.
            const double v = std::max(std::max(q.w1 * xd[q.p1], q.w2 * xd[q.p2]), std::max(q.w3 * xd[q.p3], q.w4 * xd[q.p4]));
            acc = first ? v : std::max(acc, v);
            first = false;
          }
        }
        yd[p] = a.max_mode ? acc : acc / count;
      }
    }
  }
  ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(y, {nr, c, ph_n, pw_n}, xt.dtype()));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

// ---- GridSample -----------------------------------------------------------------------------

enum class GsMode { kNearest, kLinear, kCubic };
enum class GsPad { kZeros, kBorder, kReflection };

struct GridSampleAttrs {
  GsMode mode = GsMode::kLinear;
  GsPad pad = GsPad::kZeros;
  bool align = false;
};

template <class Ctx>
Status read_gridsample_attrs(Ctx& ctx, GridSampleAttrs* a) {
  const bool v20 = ctx.opset() >= 20;
  const std::string mode = ctx.get_string("mode", v20 ? "linear" : "bilinear");
  if (mode == (v20 ? "linear" : "bilinear")) a->mode = GsMode::kLinear;
  else if (mode == "nearest") a->mode = GsMode::kNearest;
  else if (mode == (v20 ? "cubic" : "bicubic")) a->mode = GsMode::kCubic;
  else
    return ctx.error("attribute 'mode' is '" + mode + "'; expected " +
                     (v20 ? "'linear', 'nearest' or 'cubic'" : "'bilinear', 'nearest' or 'bicubic'") +
                     " at opset " + std::to_string(ctx.opset()));
  const std::string pad = ctx.get_string("padding_mode", "zeros");
  if (pad == "zeros") a->pad = GsPad::kZeros;
  else if (pad == "border") a->pad = GsPad::kBorder;
  else if (pad == "reflection") a->pad = GsPad::kReflection;
  else return ctx.error("attribute 'padding_mode' is '" + pad + "'; expected 'zeros', 'border' or 'reflection'");
  const int64_t ac = ctx.get_int("align_corners", 0);
  if (ac != 0 && ac != 1) return ctx.error("attribute 'align_corners' must be 0 or 1, got " + std::to_string(ac));
  a->align = ac == 1;
  return Status::ok();
}

Status infer_gridsample(InferContext& ctx) {
  GridSampleAttrs a;
  RETURN_IF_ERROR(read_gridsample_attrs(ctx, &a));
  const TensorType& x = ctx.input_type(0);
  const TensorType& g = ctx.input_type(1);
  const bool v20 = ctx.opset() >= 20;
  int64_t rank = -1;
  if (x.shape) rank = x.shape->rank();
  if (g.shape) {
    if (rank >= 0 && g.shape->rank() != rank)
      return ctx.error("input 'grid' " + g.shape->to_string() + " must have the rank of 'X' " + x.shape->to_string());
    rank = g.shape->rank();
  }
  if (rank >= 0) {
    if (v20 ? rank < 3 : rank != 4)
      return ctx.error(std::string("input 'X' must have rank ") + (v20 ? ">= 3 [N, C, D1, ...]" : "4 [N, C, H, W]") +
                       ", got rank " + std::to_string(rank));
    if (known_dim(g, rank - 1) >= 0 && known_dim(g, rank - 1) != rank - 2)
      return ctx.error("the last dimension of 'grid' " + g.shape->to_string() + " must be " + std::to_string(rank - 2));
    if (known_dim(x, 0) >= 0 && known_dim(g, 0) >= 0 && known_dim(x, 0) != known_dim(g, 0))
      return ctx.error("'X' " + x.shape->to_string() + " and 'grid' " + g.shape->to_string() + " disagree on N");
  }
  std::optional<Shape> out;
  if (rank >= 0) {
    Shape s;
    Dim n = dim_or_unknown(x, 0);
    if (!n.is_known() && n.symbol.empty()) n = dim_or_unknown(g, 0);
    s.dims.push_back(n);
    s.dims.push_back(dim_or_unknown(x, 1));
    for (int64_t i = 1; i < rank - 1; ++i) s.dims.push_back(dim_or_unknown(g, i));
    out = s;
  }
  ctx.set_output(0, TensorType{x.dtype, out});
  return Status::ok();
}

template <typename C>
C gs_reflect(C x, C lo, C hi) {
  const C rng = hi - lo;
  if (!(rng > 0)) return lo;
  if (x < lo) {
    const C dx = lo - x;
    const auto n = static_cast<int64_t>(dx / rng);
    const C r = dx - static_cast<C>(n) * rng;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (x > hi) {
    const C dx = x - hi;
    const auto n = static_cast<int64_t>(dx / rng);
    const C r = dx - static_cast<C>(n) * rng;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return x;
}

template <typename C>
void gs_cubic_coeffs(C t, C* c) {
  const C A = static_cast<C>(-0.75);
  C x = std::fabs(t);
  c[0] = ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
  c[1] = ((A + 2) * x - (A + 3)) * x * x + 1;
  c[2] = ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
  c[3] = ((A * (2 - x) - 5 * A) * (2 - x) + 8 * A) * (2 - x) - 4 * A;
}

// Coordinates are computed in C (float for f32/f16/bf16 grids, double for f64), as PyTorch and
// the ONNX reference do; values are accumulated in double.
template <typename C>
Status gridsample_run(KernelContext& ctx, const GridSampleAttrs& a, const Tensor& xt, const Tensor& gt, vector<double>* y) {
  const int64_t rank = xt.rank(), nd = rank - 2;
  const int64_t n = xt.dim(0), ch = xt.dim(1);
  vector<int64_t> in_dims(xt.dims().begin() + 2, xt.dims().end());
  int64_t in_sp = 1, out_sp = 1;
  for (int64_t d : in_dims) in_sp *= d;
  for (int64_t i = 1; i < rank - 1; ++i) out_sp *= gt.dim(i);
  vector<double> x = xt.to_double_vector();
  vector<C> g(static_cast<size_t>(gt.numel()));
  for (int64_t i = 0; i < gt.numel(); ++i) g[i] = static_cast<C>(gt.get_double(i));
  vector<int64_t> in_strides = strides_of(in_dims);
  const int taps = a.mode == GsMode::kNearest ? 1 : (a.mode == GsMode::kLinear ? 2 : 4);
  // Per spatial dim: tap indices (-1 = zero padding) and weights.
  vector<int64_t> tap_idx(static_cast<size_t>(nd * taps));
  vector<double> tap_w(static_cast<size_t>(nd * taps));
  vector<int> odo(static_cast<size_t>(nd));
  vector<std::pair<int64_t, double>> pts;  // (input offset, weight) of the current output point
  y->assign(static_cast<size_t>(n * ch * out_sp), 0.0);
  auto resolve = [&](int64_t i, int64_t d) -> int64_t {
    const int64_t len = in_dims[d];
    if (i >= 0 && i < len) return i;
    switch (a.pad) {
      case GsPad::kZeros: return -1;
      case GsPad::kBorder: return std::clamp<int64_t>(i, 0, len - 1);
      case GsPad::kReflection: {
        const C lo = a.align ? C(0) : C(-0.5), hi = a.align ? static_cast<C>(len - 1) : static_cast<C>(len) - C(0.5);
        const int64_t r = static_cast<int64_t>(gs_reflect<C>(static_cast<C>(i), lo, hi));
        return std::clamp<int64_t>(r, 0, len - 1);
      }
    }
    return -1;
  };
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t o = 0; o < out_sp; ++o) {
      const C* gp = g.data() + (b * out_sp + o) * nd;
      for (int64_t d = 0; d < nd; ++d) {
        const int64_t len = in_dims[d];
        const C nv = gp[nd - 1 - d];  // the grid lists coordinates innermost (width) first
        C xv = a.align ? (nv + 1) / C(2) * static_cast<C>(len - 1) : ((nv + 1) * static_cast<C>(len) - 1) / C(2);
        if (a.mode == GsMode::kNearest) xv = nd == 3 ? std::round(xv) : std::nearbyint(xv);
        const C lo = a.align ? C(0) : C(-0.5), hi = a.align ? static_cast<C>(len - 1) : static_cast<C>(len) - C(0.5);
        if (std::isnan(xv) || (std::isinf(xv) && a.pad != GsPad::kBorder)) {  // samples nothing
          for (int t = 0; t < taps; ++t) {
            tap_idx[d * taps + t] = -1;
            tap_w[d * taps + t] = 0.0;
          }
          continue;
        }
        // Far-away coordinates are bounded first (keeps the integer conversions defined).
        const C far = static_cast<C>(int64_t(1) << 30);
        xv = std::clamp<C>(xv, -far, far);
        if (xv < lo || xv > hi) {
          if (a.pad == GsPad::kBorder) xv = std::clamp<C>(xv, C(0), static_cast<C>(len - 1));
          else if (a.pad == GsPad::kReflection) xv = gs_reflect<C>(xv, lo, hi);
        }
        const C big = static_cast<C>(len) + 8;  // beyond this only padding is sampled
        xv = std::clamp<C>(xv, -big, big);
        if (a.mode == GsMode::kNearest) {
          tap_idx[d] = resolve(static_cast<int64_t>(xv), d);
          tap_w[d] = 1.0;
        } else {
          const C x0 = std::floor(xv);
          const C t = xv - x0;
          const int64_t i0 = static_cast<int64_t>(x0);
          if (a.mode == GsMode::kLinear) {
            tap_idx[d * 2] = resolve(i0, d);
            tap_idx[d * 2 + 1] = resolve(i0 + 1, d);
            tap_w[d * 2] = static_cast<double>(1 - t);
            tap_w[d * 2 + 1] = static_cast<double>(t);
          } else {
            C cf[4];
            gs_cubic_coeffs<C>(t, cf);
            for (int k = 0; k < 4; ++k) {
              tap_idx[d * 4 + k] = resolve(i0 - 1 + k, d);
              tap_w[d * 4 + k] = static_cast<double>(cf[k]);
            }
          }
        }
      }
      // Tensor product over the taps of every dim.
      std::fill(odo.begin(), odo.end(), 0);
      pts.clear();
      while (true) {
        int64_t off = 0;
        double wgt = 1.0;
        bool zero = false;
        for (int64_t d = 0; d < nd; ++d) {
          const int64_t ti = tap_idx[d * taps + odo[d]];
          if (ti < 0) {
            zero = true;
            break;
          }
          off += ti * in_strides[d];
          wgt *= tap_w[d * taps + odo[d]];
        }
        if (!zero && wgt != 0.0) pts.emplace_back(off, wgt);
        int64_t d = nd - 1;
        while (d >= 0 && ++odo[d] == taps) odo[d--] = 0;
        if (d < 0) break;
      }
      for (int64_t c = 0; c < ch; ++c) {
        const double* xd = x.data() + (b * ch + c) * in_sp;
        double acc = 0.0;
        for (const auto& [off, wgt] : pts) acc += wgt * xd[off];
        (*y)[(b * ch + c) * out_sp + o] = acc;
      }
    }
  }
  (void)ctx;
  return Status::ok();
}

Status k_gridsample(KernelContext& ctx) {
  GridSampleAttrs a;
  RETURN_IF_ERROR(read_gridsample_attrs(ctx, &a));
  const Tensor& xt = ctx.input(0);
  const Tensor& gt = ctx.input(1);
  if (!is_float_dtype(xt.dtype()) || !is_float_dtype(gt.dtype())) return ctx.error("inputs 'X' and 'grid' must be float tensors");
  const bool v20 = ctx.opset() >= 20;
  if (v20 ? xt.rank() < 3 : xt.rank() != 4)
    return ctx.error(std::string("input 'X' must have rank ") + (v20 ? ">= 3 [N, C, D1, ...]" : "4 [N, C, H, W]") +
                     ", got " + dims_str(xt));
  if (gt.rank() != xt.rank() || gt.dim(0) != xt.dim(0) || gt.dim(gt.rank() - 1) != xt.rank() - 2)
    return ctx.error("input 'grid' must have shape [N, D1_out, ..., " + std::to_string(xt.rank() - 2) + "] with N = " +
                     std::to_string(xt.dim(0)) + ", got " + dims_str(gt));
  vector<int64_t> out_dims = {xt.dim(0), xt.dim(1)};
  for (int64_t i = 1; i < gt.rank() - 1; ++i) out_dims.push_back(gt.dim(i));
  RETURN_IF_ERROR(checked_element_count(out_dims, ctx.node().describe() + " output").status());
  for (int64_t i = 2; i < xt.rank(); ++i)
    if (xt.dim(i) == 0 && element_count(out_dims) > 0)
      return ctx.error("input 'X' " + dims_str(xt) + " has an empty spatial dimension");
  vector<double> y;
  if (gt.dtype() == DType::kF64) RETURN_IF_ERROR(gridsample_run<double>(ctx, a, xt, gt, &y));
  else RETURN_IF_ERROR(gridsample_run<float>(ctx, a, xt, gt, &y));
  ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(y, out_dims, xt.dtype()));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

// ---- MaxUnpool ------------------------------------------------------------------------------

struct UnpoolAttrs {
  vector<int64_t> kernel, strides, pads;
};

template <class Ctx>
Status read_unpool_attrs(Ctx& ctx, int64_t nd, UnpoolAttrs* a) {
  if (!ctx.has("kernel_shape")) return ctx.error("required attribute 'kernel_shape' is missing");
  a->kernel = ctx.get_ints("kernel_shape");
  if (nd < 0) nd = static_cast<int64_t>(a->kernel.size());
  auto check = [&](const char* name, const vector<int64_t>& v, size_t want, int64_t lo) -> Status {
    if (v.size() != want)
      return ctx.error(std::string("attribute '") + name + "' has " + std::to_string(v.size()) + " values " +
                       dims_to_string(v) + " but " + std::to_string(want) + " are expected for " + std::to_string(nd) +
                       " spatial axes");
    for (int64_t x : v)
      if (x < lo || x > (int64_t(1) << 24))
        return ctx.error(std::string("attribute '") + name + "' " + dims_to_string(v) + " has a value out of range");
    return Status::ok();
  };
  RETURN_IF_ERROR(check("kernel_shape", a->kernel, static_cast<size_t>(nd), 1));
  a->strides = ctx.get_ints("strides", vector<int64_t>(static_cast<size_t>(nd), 1));
  RETURN_IF_ERROR(check("strides", a->strides, static_cast<size_t>(nd), 1));
  a->pads = ctx.get_ints("pads", vector<int64_t>(static_cast<size_t>(2 * nd), 0));
  RETURN_IF_ERROR(check("pads", a->pads, static_cast<size_t>(2 * nd), 0));
  return Status::ok();
}

/// Default output size of spatial axis i: (in - 1) * stride + kernel - pad_begin - pad_end.
int64_t unpool_out(const UnpoolAttrs& a, int64_t i, int64_t in) {
  const size_t nd = a.kernel.size();
  return (in - 1) * a.strides[i] + a.kernel[i] - a.pads[i] - a.pads[i + nd];
}

Status infer_maxunpool(InferContext& ctx) {
  const TensorType& x = ctx.input_type(0);
  const int64_t rank = x.shape ? x.shape->rank() : -1;
  if (rank >= 0 && rank < 3) return ctx.error("input 'X' must have rank >= 3 [N, C, D1, ...], got " + x.shape->to_string());
  UnpoolAttrs a;
  RETURN_IF_ERROR(read_unpool_attrs(ctx, rank >= 0 ? rank - 2 : -1, &a));
  const int64_t r = static_cast<int64_t>(a.kernel.size()) + 2;
  if (ctx.has_input(2)) {
    const Tensor* os = ctx.input_value(2);
    if (os) {
      vector<int64_t> v = os->to_int64_vector();
      if (static_cast<int64_t>(v.size()) != r)
        return ctx.error("input 'output_shape' has " + std::to_string(v.size()) + " values; expected " + std::to_string(r));
      for (int64_t d : v)
        if (d < 0) return ctx.error("input 'output_shape' " + dims_to_string(v) + " has a negative value");
      ctx.set_output(0, TensorType{x.dtype, Shape::of(v)});
    } else {
      ctx.set_output(0, TensorType{x.dtype, Shape(vector<Dim>(static_cast<size_t>(r)))});
    }
    return Status::ok();
  }
  Shape s;
  s.dims.push_back(dim_or_unknown(x, 0));
  s.dims.push_back(dim_or_unknown(x, 1));
  for (int64_t i = 0; i < r - 2; ++i) {
    const int64_t in = known_dim(x, i + 2);
    if (in < 0) {
      s.dims.push_back(Dim());
      continue;
    }
    const int64_t o = unpool_out(a, i, in);
    if (in == 0 || o < 0)
      return ctx.error("spatial axis " + std::to_string(i) + ": input size " + std::to_string(in) +
                       " gives output size " + std::to_string(o));
    s.dims.push_back(Dim(o));
  }
  ctx.set_output(0, TensorType{x.dtype, s});
  return Status::ok();
}

Status k_maxunpool(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  if (x.rank() < 3) return ctx.error("input 'X' must have rank >= 3 [N, C, D1, ...], got " + dims_str(x));
  if (x.dtype() == DType::kString || x.dtype() == DType::kUndefined) return ctx.error("input 'X' must be numeric");
  if (ind.dtype() != DType::kI64 && ind.dtype() != DType::kI32) return ctx.error("input 'I' must be an int64 tensor");
  if (ind.dims() != x.dims())
    return ctx.error("input 'I' " + dims_str(ind) + " must have the shape of 'X' " + dims_str(x));
  UnpoolAttrs a;
  RETURN_IF_ERROR(read_unpool_attrs(ctx, x.rank() - 2, &a));
  vector<int64_t> inferred = {x.dim(0), x.dim(1)};
  for (int64_t i = 0; i < x.rank() - 2; ++i) {
    const int64_t o = unpool_out(a, i, x.dim(i + 2));
    if (x.dim(i + 2) == 0 || o < 0)
      return ctx.error("spatial axis " + std::to_string(i) + ": input size " + std::to_string(x.dim(i + 2)) +
                       " gives output size " + std::to_string(o));
    inferred.push_back(o);
  }
  vector<int64_t> out_dims = inferred;
  if (ctx.has_input(2)) {
    out_dims = ctx.input(2).to_int64_vector();
    if (out_dims.size() != inferred.size())
      return ctx.error("input 'output_shape' " + dims_to_string(out_dims) + " must have " +
                       std::to_string(inferred.size()) + " values");
    for (size_t i = 0; i < out_dims.size(); ++i)
      if (out_dims[i] < inferred[i] || (i < 2 && out_dims[i] != inferred[i]))
        return ctx.error("input 'output_shape' " + dims_to_string(out_dims) +
                         " must keep N and C and be at least the default output shape " + dims_to_string(inferred));
  }
  ASSIGN_OR_RETURN(int64_t inferred_n, checked_element_count(inferred, ctx.node().describe() + " output"));
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  const int64_t es = dtype_size(x.dtype());
  const char* px = static_cast<const char*>(x.raw());
  char* py = static_cast<char*>(y->mutable_raw());
  // The indices address the default-shaped output; it is then placed at the origin of output_shape.
  const vector<int64_t> in_str = strides_of(inferred), out_str = strides_of(out_dims);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t idx = ind.get_int64(i);
    if (idx < 0 || idx >= inferred_n)
      return ctx.error("index I[" + std::to_string(i) + "] = " + std::to_string(idx) + " is out of range [0, " +
                       std::to_string(inferred_n) + ") for the unpooled shape " + dims_to_string(inferred));
    int64_t off = 0;
    for (size_t d = 0; d < inferred.size(); ++d) {
      off += (idx / in_str[d]) * out_str[d];
      idx %= in_str[d];
    }
    std::memcpy(py + off * es, px + i * es, static_cast<size_t>(es));
  }
  return Status::ok();
}

}  // namespace

void register_detection_ops(OpRegistry& r) {
  const vector<AttrSpec> nms_attrs = {{"center_point_box", AttrType::kInt}};
  for (int64_t v : {10, 11})
    r.add(OpSchema{.name = "NonMaxSuppression", .since_version = v, .min_inputs = 2, .max_inputs = 5,
                   .attrs = nms_attrs, .types = kFloatTypes, .infer = infer_nms, .kernel = k_nms});

  const vector<AttrSpec> roi10 = {{"mode", AttrType::kString}, {"output_height", AttrType::kInt},
                                  {"output_width", AttrType::kInt}, {"sampling_ratio", AttrType::kInt},
                                  {"spatial_scale", AttrType::kFloat}};
  vector<AttrSpec> roi16 = roi10;
  roi16.push_back({"coordinate_transformation_mode", AttrType::kString});
  r.add(OpSchema{.name = "RoiAlign", .since_version = 10, .min_inputs = 3, .max_inputs = 3, .attrs = roi10,
                 .types = kFloatTypes, .infer = infer_roialign, .kernel = k_roialign});
  r.add(OpSchema{.name = "RoiAlign", .since_version = 16, .min_inputs = 3, .max_inputs = 3, .attrs = roi16,
                 .types = kFloatTypes, .infer = infer_roialign, .kernel = k_roialign});

  const vector<AttrSpec> gs_attrs = {{"mode", AttrType::kString}, {"padding_mode", AttrType::kString},
                                     {"align_corners", AttrType::kInt}};
  // GridSample-16: 4-D, modes bilinear/nearest/bicubic. 20: N-D, modes renamed linear/nearest/cubic.
  for (int64_t v : {16, 20})
    r.add(OpSchema{.name = "GridSample", .since_version = v, .min_inputs = 2, .max_inputs = 2, .attrs = gs_attrs,
                   .types = kFloatTypes, .infer = infer_gridsample, .kernel = k_gridsample});

  const vector<AttrSpec> unpool_attrs = {{"kernel_shape", AttrType::kInts, true}, {"pads", AttrType::kInts},
                                         {"strides", AttrType::kInts}};
  for (int64_t v : {9, 11})
    r.add(OpSchema{.name = "MaxUnpool", .since_version = v, .min_inputs = 2, .max_inputs = 3, .attrs = unpool_attrs,
                   .infer = infer_maxunpool, .kernel = k_maxunpool});
}

}  // namespace ferry
