// Op family 'detection': NonMaxSuppression and RoiAlign.
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
  if (!dtype_is_float(boxes.dtype()) || !dtype_is_float(scores.dtype()))
    return ctx.error("inputs 'boxes' and 'scores' must be float tensors");
  if (boxes.rank() != 3 || boxes.dim(2) != 4)
    return ctx.error("input 'boxes' must have shape [num_batches, spatial_dimension, 4], got " + dims_to_string(boxes.dims()));
  if (scores.rank() != 3)
    return ctx.error("input 'scores' must have shape [num_batches, num_classes, spatial_dimension], got " + dims_to_string(scores.dims()));
  if (scores.dim(0) != boxes.dim(0) || scores.dim(2) != boxes.dim(1))
    return ctx.error("'boxes' " + dims_to_string(boxes.dims()) + " and 'scores' " + dims_to_string(scores.dims()) +
                     " disagree on num_batches or spatial_dimension");
  int64_t max_out = 0;
  if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
    const Tensor& m = ctx.input(2);
    if (!dtype_is_integer(m.dtype())) return ctx.error("input 'max_output_boxes_per_class' must be an integer tensor");
    max_out = std::max<int64_t>(0, m.get_int64(0));
  }
  double iou = 0.0;
  if (ctx.has_input(3) && ctx.input(3).numel() > 0) {
    if (!dtype_is_float(ctx.input(3).dtype())) return ctx.error("input 'iou_threshold' must be a float tensor");
    iou = ctx.input(3).get_double(0);
    if (!(iou >= 0.0 && iou <= 1.0))
      return ctx.error("input 'iou_threshold' must be in [0, 1], got " + std::to_string(iou));
  }
  bool has_thr = false;
  double thr = 0.0;
  if (ctx.has_input(4) && ctx.input(4).numel() > 0) {
    if (!dtype_is_float(ctx.input(4).dtype())) return ctx.error("input 'score_threshold' must be a float tensor");
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
  if (!dtype_is_float(xt.dtype()) || !dtype_is_float(rt.dtype())) return ctx.error("inputs 'X' and 'rois' must be float tensors");
  if (!dtype_is_integer(bt.dtype())) return ctx.error("input 'batch_indices' must be an integer tensor");
  if (xt.rank() != 4) return ctx.error("input 'X' must have rank 4 [N, C, H, W], got " + dims_to_string(xt.dims()));
  if (rt.rank() != 2 || rt.dim(1) != 4) return ctx.error("input 'rois' must have shape [num_rois, 4], got " + dims_to_string(rt.dims()));
  if (bt.rank() != 1 || bt.dim(0) != rt.dim(0))
    return ctx.error("input 'batch_indices' must have shape [num_rois] = [" + std::to_string(rt.dim(0)) + "], got " +
                     dims_to_string(bt.dims()));
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
}

}  // namespace ferry
