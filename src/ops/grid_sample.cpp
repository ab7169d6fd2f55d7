// Op family 'grid_sample' (beside resize): GridSample (16: 4-D, modes bilinear/nearest/bicubic;
// 20: N-D, modes linear/nearest/cubic). Float inputs of any width are computed in float (f16/bf16/f32)
// or double (f64) and rounded back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/float_util.h"
#include "ops/op_util.h"

namespace ferry {
namespace {

using std::vector;

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
  if (!dtype_is_float(xt.dtype()) || !dtype_is_float(gt.dtype())) return ctx.error("inputs 'X' and 'grid' must be float tensors");
  const bool v20 = ctx.opset() >= 20;
  if (v20 ? xt.rank() < 3 : xt.rank() != 4)
    return ctx.error(std::string("input 'X' must have rank ") + (v20 ? ">= 3 [N, C, D1, ...]" : "4 [N, C, H, W]") +
                     ", got " + dims_to_string(xt.dims()));
  if (gt.rank() != xt.rank() || gt.dim(0) != xt.dim(0) || gt.dim(gt.rank() - 1) != xt.rank() - 2)
    return ctx.error("input 'grid' must have shape [N, D1_out, ..., " + std::to_string(xt.rank() - 2) + "] with N = " +
                     std::to_string(xt.dim(0)) + ", got " + dims_to_string(gt.dims()));
  vector<int64_t> out_dims = {xt.dim(0), xt.dim(1)};
  for (int64_t i = 1; i < gt.rank() - 1; ++i) out_dims.push_back(gt.dim(i));
  RETURN_IF_ERROR(checked_element_count(out_dims, ctx.node().describe() + " output").status());
  for (int64_t i = 2; i < xt.rank(); ++i)
    if (xt.dim(i) == 0 && element_count(out_dims) > 0)
      return ctx.error("input 'X' " + dims_to_string(xt.dims()) + " has an empty spatial dimension");
  vector<double> y;
  if (gt.dtype() == DType::kF64) RETURN_IF_ERROR(gridsample_run<double>(ctx, a, xt, gt, &y));
  else RETURN_IF_ERROR(gridsample_run<float>(ctx, a, xt, gt, &y));
  ASSIGN_OR_RETURN(Tensor out, doubles_to_tensor(y, out_dims, xt.dtype()));
  ctx.set_output(0, std::move(out));
  return Status::ok();
}

}  // namespace

void register_grid_sample_ops(OpRegistry& r) {
  const vector<AttrSpec> gs_attrs = {{"mode", AttrType::kString}, {"padding_mode", AttrType::kString},
                                     {"align_corners", AttrType::kInt}};
  // GridSample-16: 4-D, modes bilinear/nearest/bicubic. 20: N-D, modes renamed linear/nearest/cubic.
  for (int64_t v : {16, 20})
    r.add(OpSchema{.name = "GridSample", .since_version = v, .min_inputs = 2, .max_inputs = 2, .attrs = gs_attrs,
                   .types = kFloatTypes, .infer = infer_gridsample, .kernel = k_gridsample});
}

}  // namespace ferry
