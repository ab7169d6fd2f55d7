// CPU kernels of ops/grad_norm_pool.cpp's training ops (f32; anything else runs the reference
// kernel, which also reports the errors):
//   com.ferry BatchNormTraining / BatchNormTrainingGrad: per-channel loops, threads over channels
//       (relu = 1 / the Z input: the Relu / ReluGrad fused in, training_graph.cpp's rewrite);
//       SyncBatchNormTraining / Grad the same with the sums exchanged between the passes;
//       statistics accumulated in double (as the reference), in one pass shifted by the channel's
//       first value, the elementwise parts in f32 as y = a[c] * x + b[c];
//   com.ferry MaxPoolGrad / AveragePoolGrad on 2-D images (pads, strides, dilations, ceil_mode,
//       count_include_pad, global): direct loops over each plane, threads over planes.
// The same BatchNorm forms on blocked (nChw16c / nChw8c) activations: grad_blocked.cpp.

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/grad_kernel_util.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/vec_math.h"
#include "ops/conv_pool_util.h"
#include "ops/kernel_collectives.h"
#include "ops/op_util.h"

namespace ferry::cpu {
namespace {
// sum(x - k) and sum((x - k)^2) over n floats, in double, 32 independent lanes (vectorizes
// without reassociation; four vectors of accumulators hide the adds' latency).
constexpr int kLanes = 32;

FERRY_VEC void shifted_moments(const float* x, int64_t n, float k, double* s1, double* s2) {
  double a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const double d = static_cast<double>(x[i + j] - k);
      a[j] += d;
      b[j] += d * d;
    }
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i] - k);
    a[0] += d;
    b[0] += d * d;
  }
  for (int j = 0; j < kLanes; ++j) {
    *s1 += a[j];
    *s2 += b[j];
  }
}

// sum(g) and sum(g * (x - mu)) over n floats, in double.
FERRY_VEC void grad_moments(const float* g, const float* x, int64_t n, float mu, double* sg, double* sgx) {
  double a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const double gv = g[i + j];
      a[j] += gv;
      b[j] += gv * static_cast<double>(x[i + j] - mu);
    }
  for (; i < n; ++i) {
    a[0] += g[i];
    b[0] += static_cast<double>(g[i]) * static_cast<double>(x[i] - mu);
  }
  for (int j = 0; j < kLanes; ++j) {
    *sg += a[j];
    *sgx += b[j];
  }
}

FERRY_VEC void affine(const float* x, float a, float b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}

// affine then Relu (NaN stays NaN, as the Relu kernel).
FERRY_VEC void affine_relu(const float* x, float a, float b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * a + b;
    y[i] = v < 0.f ? 0.f : v;
  }
}

// grad_moments of g masked by z > 0 (ReluGrad fused into BatchNormTrainingGrad).
FERRY_VEC void grad_moments_masked(const float* g, const float* z, const float* x, int64_t n, float mu, double* sg,
                                   double* sgx) {
  double a[kLanes] = {}, b[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    float m[kLanes];  // the masked gradient first, in f32 (mixing widths in one loop stops GCC)
    for (int j = 0; j < kLanes; ++j) m[j] = z[i + j] > 0.f ? g[i + j] : 0.f;
    for (int j = 0; j < kLanes; ++j) {
      const double gv = m[j];
      a[j] += gv;
      b[j] += gv * static_cast<double>(x[i + j] - mu);
    }
  }
  for (; i < n; ++i) {
    const double gv = z[i] > 0.f ? g[i] : 0.f;
    a[0] += gv;
    b[0] += gv * static_cast<double>(x[i] - mu);
  }
  for (int j = 0; j < kLanes; ++j) {
    *sg += a[j];
    *sgx += b[j];
  }
}

FERRY_VEC void affine2(const float* g, const float* x, float a, float b, float c, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = g[i] * a + x[i] * b + c;
}

// affine2 of g masked by z > 0.
FERRY_VEC void affine2_masked(const float* g, const float* z, const float* x, float a, float b, float c, float* y,
                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i], zi = z[i];
    y[i] = (zi > 0.f ? gi : 0.f) * a + x[i] * b + c;
  }
}


// BatchNormTraining(X, scale, B, input_mean, input_var) -> (Y, running_mean, running_var,
// saved_mean, saved_inv_std); see src/ops/grad_norm_pool.cpp for the definitions.
StatusOr<bool> run_bn_training(KernelContext& ctx) {
  if (!all_f32(ctx)) return false;
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) return false;
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(1, N * C), count = N * S;
  for (int64_t i = 1; i < 5; ++i)
    if (!is_f32_vector(ctx.input(i), C)) return false;
  if (count <= 1 || x.numel() == 0) return false;  // the reference reports it
  const double eps = ctx.get_float("epsilon", 1e-5f), momentum = ctx.get_float("momentum", 0.9f);
  const bool relu = ctx.get_int("relu", 0) != 0;
  Tensor* out[5] = {};
  for (int64_t k = 0; k < 5; ++k) {
    if (!output_wanted(ctx, k)) continue;
    ASSIGN_OR_RETURN(out[k], ctx.allocate_output(k, DType::kF32, k == 0 ? x.dims() : std::vector<int64_t>{C}, false));
  }
  const float *px = x.data<float>(), *sc = ctx.input(1).data<float>(), *bias = ctx.input(2).data<float>(),
              *rm = ctx.input(3).data<float>(), *rv = ctx.input(4).data<float>();
  float* py = out[0] ? out[0]->mutable_data<float>() : nullptr;
  for_channels(C, 2 * count, [&](int64_t c) {
    const float k = px[c * S];
    double s1 = 0, s2 = 0;
    for (int64_t n = 0; n < N; ++n) shifted_moments(px + (n * C + c) * S, S, k, &s1, &s2);
    float fa, fb;
    bn_training_channel(k, s1, s2, count, eps, momentum, sc[c], bias[c], rm[c], rv[c], out, c, &fa, &fb);
    if (!py) return;
    for (int64_t n = 0; n < N; ++n)
      (relu ? affine_relu : affine)(px + (n * C + c) * S, fa, fb, py + (n * C + c) * S, S);
  });
  return true;
}

// BatchNormTrainingGrad(dY, X, scale, saved_mean, saved_inv_std[, Z]) -> (dX, dScale, dB):
// dX = k * (count * dY - dB - (X - mean) * inv * dScale), k = scale * inv / count, i.e.
// dX = a * dY + b * X + c per channel; with Z (a relu = 1 forward's output) dY is Z > 0 ? dY : 0.
StatusOr<bool> run_bn_training_grad(KernelContext& ctx) {
  if (!all_f32(ctx)) return false;
  const Tensor &dy = ctx.input(0), &x = ctx.input(1);
  if (x.rank() < 2 || dy.dims() != x.dims()) return false;
  const float* pz = nullptr;
  if (ctx.has_input(5)) {
    if (ctx.input(5).dims() != x.dims()) return false;  // the reference reports it
    pz = ctx.input(5).data<float>();
  }
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(1, N * C);
  for (int64_t i = 2; i < 5; ++i)
    if (!is_f32_vector(ctx.input(i), C)) return false;
  if (x.numel() == 0) return false;
  Tensor* out[3] = {};
  for (int64_t k = 0; k < 3; ++k) {
    if (!output_wanted(ctx, k)) continue;
    ASSIGN_OR_RETURN(out[k], k == 0 ? ctx.allocate_output_over(0, 0, DType::kF32, x.dims())
                                    : ctx.allocate_output(k, DType::kF32, {C}, false));
  }
  const float *pg = dy.data<float>(), *px = x.data<float>(), *sc = ctx.input(2).data<float>(),
              *mean = ctx.input(3).data<float>(), *inv = ctx.input(4).data<float>();
  float* pdx = out[0] ? out[0]->mutable_data<float>() : nullptr;
  const double count = static_cast<double>(N * S);
  for_channels(C, 2 * N * S, [&](int64_t c) {
    double sg = 0, sgxm = 0;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = (n * C + c) * S;
      if (pz) grad_moments_masked(pg + o, pz + o, px + o, S, mean[c], &sg, &sgxm);
      else grad_moments(pg + o, px + o, S, mean[c], &sg, &sgxm);
    }
    float fa, fb, fc;
    bn_training_grad_channel(sg, sgxm, inv[c], sc[c], mean[c], count, out, c, &fa, &fb, &fc);
    if (!pdx) return;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = (n * C + c) * S;
      if (pz) affine2_masked(pg + o, pz + o, px + o, fa, fb, fc, pdx + o, S);
      else affine2(pg + o, px + o, fa, fb, fc, pdx + o, S);
    }
  });
  return true;
}

// SyncBatchNormTraining / SyncBatchNormTrainingGrad (--sync-bn): the loops above with the
// per-channel sums exchanged between them through the thread's collectives
// (ops/kernel_collectives.h; definitions in src/ops/grad_norm_pool.cpp).
StatusOr<bool> run_sync_bn_training(KernelContext& ctx) {
  if (!all_f32(ctx)) return false;
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2 || x.numel() == 0) return false;
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / (N * C), local = N * S;
  for (int64_t i = 1; i < 5; ++i)
    if (!is_f32_vector(ctx.input(i), C)) return false;
  const double eps = ctx.get_float("epsilon", 1e-5f), momentum = ctx.get_float("momentum", 0.9f);
  const float* px = x.data<float>();
  std::vector<double> st(static_cast<size_t>(1 + 2 * C));  // [count, mean_c, m2_c ...]
  st[0] = static_cast<double>(local);
  for_channels(C, local, [&](int64_t c) {
    const float k = px[c * S];
    double s1 = 0, s2 = 0;
    for (int64_t n = 0; n < N; ++n) shifted_moments(px + (n * C + c) * S, S, k, &s1, &s2);
    const double dmean = s1 / static_cast<double>(local);
    st[1 + 2 * c] = k + dmean;
    st[2 + 2 * c] = std::max(0.0, s2 - s1 * dmean);
  });
  RETURN_IF_ERROR(sync_batchnorm_moments(&st, ctx.node().describe()));
  const double count = st[0];
  if (count <= 1)
    return ctx.error("training needs more than one value per channel over all ranks (X " + dims_to_string(x.dims()) +
                     " here); use a batch of 2 or more");
  Tensor* out[5] = {};
  for (int64_t k = 0; k < 5; ++k) {
    if (!output_wanted(ctx, k)) continue;
    ASSIGN_OR_RETURN(out[k], ctx.allocate_output(k, DType::kF32, k == 0 ? x.dims() : std::vector<int64_t>{C}, false));
  }
  const float *sc = ctx.input(1).data<float>(), *bias = ctx.input(2).data<float>(), *rm = ctx.input(3).data<float>(),
              *rv = ctx.input(4).data<float>();
  float* py = out[0] ? out[0]->mutable_data<float>() : nullptr;
  for_channels(C, local, [&](int64_t c) {
    const double mu = st[1 + 2 * c], ss = st[2 + 2 * c], inv = 1.0 / std::sqrt(ss / count + eps);
    if (out[1]) out[1]->mutable_data<float>()[c] = static_cast<float>(rm[c] * momentum + mu * (1.0 - momentum));
    if (out[2]) out[2]->mutable_data<float>()[c] = static_cast<float>(rv[c] * momentum + ss / (count - 1) * (1.0 - momentum));
    if (out[3]) out[3]->mutable_data<float>()[c] = static_cast<float>(mu);
    if (out[4]) out[4]->mutable_data<float>()[c] = static_cast<float>(inv);
    if (!py) return;
    const double a = inv * sc[c];
    const float fa = static_cast<float>(a), fb = static_cast<float>(bias[c] - mu * a);
    for (int64_t n = 0; n < N; ++n) affine(px + (n * C + c) * S, fa, fb, py + (n * C + c) * S, S);
  });
  return true;
}

StatusOr<bool> run_sync_bn_training_grad(KernelContext& ctx) {
  if (!all_f32(ctx)) return false;
  const Tensor &dy = ctx.input(0), &x = ctx.input(1);
  if (x.rank() < 2 || dy.dims() != x.dims() || x.numel() == 0) return false;
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / (N * C);
  for (int64_t i = 2; i < 5; ++i)
    if (!is_f32_vector(ctx.input(i), C)) return false;
  const float *pg = dy.data<float>(), *px = x.data<float>(), *sc = ctx.input(2).data<float>(),
              *mean = ctx.input(3).data<float>(), *inv = ctx.input(4).data<float>();
  std::vector<double> sums(static_cast<size_t>(1 + 2 * C));  // [count, sum(dY)_c, sum(dY * (X - mean))_c ...]
  sums[0] = static_cast<double>(N * S);
  for_channels(C, 2 * N * S, [&](int64_t c) {
    for (int64_t n = 0; n < N; ++n)
      grad_moments(pg + (n * C + c) * S, px + (n * C + c) * S, S, mean[c], &sums[1 + 2 * c], &sums[2 + 2 * c]);
  });
  for (int64_t k = 1; k < 3; ++k) {  // dScale, dB: the local batch's (DDP averages them)
    if (!output_wanted(ctx, k)) continue;
    ASSIGN_OR_RETURN(Tensor * t, ctx.allocate_output(k, DType::kF32, {C}, false));
    for (int64_t c = 0; c < C; ++c)
      t->mutable_data<float>()[c] = static_cast<float>(k == 1 ? sums[2 + 2 * c] * inv[c] : sums[1 + 2 * c]);
  }
  if (!output_wanted(ctx, 0)) return true;
  RETURN_IF_ERROR(sync_batchnorm_grad_sums(&sums, ctx.node().describe()));
  ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output_over(0, 0, DType::kF32, x.dims()));
  float* pdx = dx->mutable_data<float>();
  const double count = sums[0];
  // dX = (dY - sum(dY)/n - (X - mean) * inv^2 * sum(dY * (X - mean))/n) * inv * scale = a * dY + b * X + c.
  for_channels(C, 2 * N * S, [&](int64_t c) {
    const double is = inv[c], a = is * sc[c], b = -a * is * is * sums[2 + 2 * c] / count;
    const double cc = -a * sums[1 + 2 * c] / count - b * mean[c];
    const float fa = static_cast<float>(a), fb = static_cast<float>(b), fc = static_cast<float>(cc);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = (n * C + c) * S;
      affine2(pg + o, px + o, fa, fb, fc, pdx + o, S);
    }
  });
  return true;
}

// ---- pooling backward ----------------------------------------------------------------------------

// One axis of a 2-D pool: the window of output o covers input positions start(o) + k * dil.
struct PoolAxis {
  int64_t in = 0, out = 0, pad = 0, pad_end = 0, stride = 1, kernel = 1, dil = 1;
};

// MaxPoolGrad's windows lying wholly inside a row (w taps kw = 0..K-1): the maximum of each of
// a run of outputs ow in [o0, o1), vectorized across ow; kept per output as the first maximum in
// kernel order (rows kh0..kh1, then kw), a NaN replacing it, as the scalar loop and the reference.
// best[] gets each winner's offset in the plane.
template <int64_t kStride>
FERRY_VEC void max_taps_row(const float* xp, int64_t IW, int64_t h0, int64_t kh0, int64_t kh1, int64_t dh,
                            int64_t w0, int64_t sw, int64_t K, int64_t dw, int64_t o0, int64_t o1, float* m,
                            int32_t* best) {
  const int64_t stride = kStride > 0 ? kStride : sw;
  const int64_t n = o1 - o0;
  for (int64_t i = 0; i < n; ++i) m[i] = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) best[i] = static_cast<int32_t>((h0 + kh0 * dh) * IW + w0 + (o0 + i) * stride);
  for (int64_t kh = kh0; kh <= kh1; ++kh) {
    const int64_t row = (h0 + kh * dh) * IW + w0 + o0 * stride;
    for (int64_t kw = 0; kw < K; ++kw) {
      const float* xr = xp + row + kw * dw;
      const int32_t base = static_cast<int32_t>(row + kw * dw);
      for (int64_t i = 0; i < n; ++i) {
        const float v = xr[i * stride];
        const bool take = (v > m[i]) | (v != v);
        m[i] = take ? v : m[i];
        best[i] = take ? base + static_cast<int32_t>(i * stride) : best[i];
      }
    }
  }
}

template <bool kMax>
StatusOr<bool> run_pool_grad(KernelContext& ctx) {
  const Tensor &dy = ctx.input(0), &in1 = ctx.input(1);
  if (dy.dtype() != DType::kF32 || dy.rank() != 4) return false;
  std::vector<int64_t> xd;
  if (kMax) {
    if (in1.dtype() != DType::kF32) return false;
    xd = in1.dims();
  } else {
    if (in1.dtype() == DType::kI64) xd = in1.to_int64_vector();
    else if (in1.dtype() == DType::kF32) xd = in1.dims();
    else return false;
  }
  if (xd.size() != 4 || xd[0] != dy.dim(0) || xd[1] != dy.dim(1)) return false;
  NodeAttrs attrs(ctx.node());
  SpatialAttrs sa;
  if (!read_spatial_attrs(attrs, 2, nullptr, true, &sa).is_ok()) return false;
  PoolAxis ax[2];
  for (int64_t i = 0; i < 2; ++i) {
    AxisGeom g;
    if (!conv_pool_axis(attrs, sa, i, xd[2 + i], &g).is_ok() || g.out != dy.dim(2 + i)) return false;
    ax[i] = PoolAxis{g.in, g.out, g.pad_begin, g.pad_end, sa.strides[i], sa.kernel[i], sa.dilations[i]};
  }
  const bool cip = !kMax && ctx.get_int("count_include_pad", 0) != 0;
  // MaxPoolGrad zeroes each plane just before scattering into it (while it is in cache).
  ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output(0, DType::kF32, xd, !kMax));
  const int64_t planes = xd[0] * xd[1], IS = xd[2] * xd[3], OS = ax[0].out * ax[1].out;
  // Per axis and output position: the first and last real tap and the padded-window count.
  struct Taps {
    std::vector<int64_t> k0, k1, padded;
  } taps[2];
  for (int64_t i = 0; i < 2; ++i) {
    const PoolAxis& a = ax[i];
    for (int64_t o = 0; o < a.out; ++o) {
      const int64_t start = o * a.stride - a.pad;
      int64_t k0 = a.kernel, k1 = -1, padded = 0;
      for (int64_t k = 0; k < a.kernel; ++k) {
        const int64_t p = start + k * a.dil;
        if (p >= -a.pad && p < a.in + a.pad_end) ++padded;
        if (p >= 0 && p < a.in) {
          k0 = std::min(k0, k);
          k1 = k;
        }
      }
      taps[i].k0.push_back(k0);
      taps[i].k1.push_back(k1);
      taps[i].padded.push_back(padded);
    }
  }
  const float* g = dy.data<float>();
  const float* x = kMax ? in1.data<float>() : nullptr;
  float* out = dx->mutable_data<float>();
  const int64_t OW = ax[1].out, IW = ax[1].in, sw = ax[1].stride, pw = ax[1].pad, dh = ax[0].dil, dw = ax[1].dil;
  const int64_t *tk0 = taps[1].k0.data(), *tk1 = taps[1].k1.data(), KW = ax[1].kernel;
  // The outputs [full0, full1) whose windows have all KW taps inside the row (the vector path).
  int64_t full0 = 0, full1 = 0;
  if (kMax && IS < (int64_t{1} << 31)) {
    while (full0 < OW && (tk0[full0] != 0 || tk1[full0] != KW - 1)) ++full0;
    full1 = full0;
    while (full1 < OW && tk0[full1] == 0 && tk1[full1] == KW - 1) ++full1;
  }
  parallel_ranges(planes, OS * ax[0].kernel * ax[1].kernel, [&](int64_t b, int64_t e) {
    std::vector<float> vm(static_cast<size_t>(OW));
    std::vector<int32_t> vbest(static_cast<size_t>(OW));
    for (int64_t pl = b; pl < e; ++pl) {
      float* dxp = out + pl * IS;
      const float* gp = g + pl * OS;
      const float* xp = kMax ? x + pl * IS : nullptr;
      if (kMax) std::fill(dxp, dxp + IS, 0.f);
      for (int64_t oh = 0; oh < ax[0].out; ++oh) {
        const int64_t h0 = oh * ax[0].stride - ax[0].pad, kh0 = taps[0].k0[oh], kh1 = taps[0].k1[oh];
        for (int64_t ow = 0; ow < OW; ++ow) {
          if (kMax && ow == full0 && full1 > full0 && kh0 <= kh1) {  // in the scalar loop's order
            if (sw == 1)
              max_taps_row<1>(xp, IW, h0, kh0, kh1, dh, -pw, sw, KW, dw, full0, full1, vm.data(), vbest.data());
            else if (sw == 2)
              max_taps_row<2>(xp, IW, h0, kh0, kh1, dh, -pw, sw, KW, dw, full0, full1, vm.data(), vbest.data());
            else
              max_taps_row<0>(xp, IW, h0, kh0, kh1, dh, -pw, sw, KW, dw, full0, full1, vm.data(), vbest.data());
            const float* gr = gp + oh * OW + full0;
            for (int64_t i = 0; i < full1 - full0; ++i) dxp[vbest[static_cast<size_t>(i)]] += gr[i];
            ow = full1 - 1;
            continue;
          }
          const int64_t w0 = ow * sw - pw, kw0 = tk0[ow], kw1 = tk1[ow];
          const float gv = gp[oh * OW + ow];
          if (kh1 < kh0 || kw1 < kw0) continue;  // a window entirely in the padding
          if constexpr (kMax) {
            // As the reference: the first maximum in kernel order, a NaN replacing it. Selects
            // rather than branches (random data mispredicts half the comparisons).
            float m = -std::numeric_limits<float>::infinity();
            int64_t best = (h0 + kh0 * dh) * IW + w0 + kw0 * dw;
            for (int64_t kh = kh0; kh <= kh1; ++kh) {
              const int64_t row = (h0 + kh * dh) * IW + w0;
              for (int64_t kw = kw0; kw <= kw1; ++kw) {
                const int64_t off = row + kw * dw;
                const float v = xp[off];
                const bool take = (v > m) | std::isnan(v);
                m = take ? v : m;
                best = take ? off : best;
              }
            }
            dxp[best] += gv;
          } else {
            const int64_t n = (kh1 - kh0 + 1) * (kw1 - kw0 + 1);
            const int64_t div = cip ? taps[0].padded[oh] * taps[1].padded[ow] : n;
            if (div <= 0) continue;
            const float s = gv / static_cast<float>(div);
            for (int64_t kh = kh0; kh <= kh1; ++kh) {
              float* row = dxp + (h0 + kh * ax[0].dil) * ax[1].in + w0;
              for (int64_t kw = kw0; kw <= kw1; ++kw) row[kw * ax[1].dil] += s;
            }
          }
        }
      }
    }
  });
  return true;
}

}  // namespace
}  // namespace ferry::cpu

namespace ferry {
void register_cpu_grad_norm_pool_kernels(CpuKernelTable& t) {
  using namespace cpu;
  t.add("com.ferry", "BatchNormTraining", grad_kernel_factory(run_bn_training));
  t.add("com.ferry", "BatchNormTrainingGrad", grad_kernel_factory(run_bn_training_grad));
  t.add("com.ferry", "SyncBatchNormTraining", grad_kernel_factory(run_sync_bn_training));
  t.add("com.ferry", "SyncBatchNormTrainingGrad", grad_kernel_factory(run_sync_bn_training_grad));
  t.add("com.ferry", "MaxPoolGrad", grad_kernel_factory(run_pool_grad<true>));
  t.add("com.ferry", "AveragePoolGrad", grad_kernel_factory(run_pool_grad<false>));
}
}  // namespace ferry
