// CPU kernels for the training ops that are not convolutions (f32; anything else runs the reference
// kernel, which also reports the errors):
//   com.ferry BatchNormTraining / BatchNormTrainingGrad: per-channel loops, threads over channels
//       (relu = 1 / the Z input: the Relu / ReluGrad fused in, training_graph.cpp's rewrite);
//       SyncBatchNormTraining / Grad the same with the sums exchanged between the passes;
//       statistics accumulated in double (as the reference), in one pass shifted by the channel's
//       first value, the elementwise parts in f32 as y = a[c] * x + b[c];
//   com.ferry MaxPoolGrad / AveragePoolGrad on 2-D images (pads, strides, dilations, ceil_mode,
//       count_include_pad, global): direct loops over each plane, threads over planes;
//   com.ferry ReluGrad, LeakyReluGrad, SigmoidGrad, TanhGrad, HardSwishGrad: vectorized, written
//       over dY when the memory plan allows;
//   Sum of equally shaped inputs (the accumulation of gradients of values read several times);
//   com.ferry Blocked wrapping BatchNormTraining / BatchNormTrainingGrad on nChw16c / nChw8c activations
//       [N, C/B, H, W, B] (the pass train_blocked_layout; B = 16 or 8): the same arithmetic, B channels at a
//       time across the block's lanes, threads over channel blocks.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"
#include "backends/cpu/train_kernels.h"
#include "backends/cpu/node_attrs.h"
#include "backends/cpu/vec_math.h"
#include "common/env_switch.h"
#include "ops/blocked_layout.h"
#include "ops/conv_pool_util.h"
#include "ops/kernel_collectives.h"
#include "ops/op_util.h"

namespace ferry::cpu {
namespace {

bool wants(const KernelContext& ctx, int64_t i) {
  return i < ctx.num_outputs() && !ctx.node().outputs[static_cast<size_t>(i)].empty();
}

// Calls fn(c) for every channel, threads over channels when the work (elements per channel) pays.
template <typename F>
void for_channels(int64_t C, int64_t per_channel, F fn) {
  parallel_ranges(C, per_channel, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) fn(c);
  });
}

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

bool f32_vector(const Tensor& t, int64_t C) { return t.dtype() == DType::kF32 && t.rank() == 1 && t.dim(0) == C; }

// BatchNormTraining(X, scale, B, input_mean, input_var) -> (Y, running_mean, running_var,
// saved_mean, saved_inv_std); see src/ops/grad_norm_pool.cpp for the definitions.
StatusOr<bool> run_bn_training(KernelContext& ctx) {
  if (!all_f32(ctx)) return false;
  const Tensor& x = ctx.input(0);
  if (x.rank() < 2) return false;
  const int64_t N = x.dim(0), C = x.dim(1), S = x.numel() / std::max<int64_t>(1, N * C), count = N * S;
  for (int64_t i = 1; i < 5; ++i)
    if (!f32_vector(ctx.input(i), C)) return false;
  if (count <= 1 || x.numel() == 0) return false;  // the reference reports it
  const double eps = ctx.get_float("epsilon", 1e-5f), momentum = ctx.get_float("momentum", 0.9f);
  const bool relu = ctx.get_int("relu", 0) != 0;
  Tensor* out[5] = {};
  for (int64_t k = 0; k < 5; ++k) {
    if (!wants(ctx, k)) continue;
    ASSIGN_OR_RETURN(out[k], ctx.allocate_output(k, DType::kF32, k == 0 ? x.dims() : std::vector<int64_t>{C}, false));
  }
  const float *px = x.data<float>(), *sc = ctx.input(1).data<float>(), *bias = ctx.input(2).data<float>(),
              *rm = ctx.input(3).data<float>(), *rv = ctx.input(4).data<float>();
  float* py = out[0] ? out[0]->mutable_data<float>() : nullptr;
  for_channels(C, 2 * count, [&](int64_t c) {
    const float k = px[c * S];
    double s1 = 0, s2 = 0;
    for (int64_t n = 0; n < N; ++n) shifted_moments(px + (n * C + c) * S, S, k, &s1, &s2);
    const double dmean = s1 / static_cast<double>(count);
    const double ss = std::max(0.0, s2 - s1 * dmean);  // sum of squared deviations
    const double mu = k + dmean, var = ss / static_cast<double>(count);
    const double inv = 1.0 / std::sqrt(var + eps);
    if (out[1]) out[1]->mutable_data<float>()[c] = static_cast<float>(rm[c] * momentum + mu * (1.0 - momentum));
    if (out[2])
      out[2]->mutable_data<float>()[c] =
          static_cast<float>(rv[c] * momentum + ss / static_cast<double>(count - 1) * (1.0 - momentum));
    if (out[3]) out[3]->mutable_data<float>()[c] = static_cast<float>(mu);
    if (out[4]) out[4]->mutable_data<float>()[c] = static_cast<float>(inv);
    if (!py) return;
    const double a = inv * sc[c];
    const float fa = static_cast<float>(a), fb = static_cast<float>(bias[c] - mu * a);
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
    if (!f32_vector(ctx.input(i), C)) return false;
  if (x.numel() == 0) return false;
  Tensor* out[3] = {};
  for (int64_t k = 0; k < 3; ++k) {
    if (!wants(ctx, k)) continue;
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
    const double is = inv[c], sgx = sgxm * is;
    if (out[1]) out[1]->mutable_data<float>()[c] = static_cast<float>(sgx);
    if (out[2]) out[2]->mutable_data<float>()[c] = static_cast<float>(sg);
    if (!pdx) return;
    const double k = sc[c] * is / count;
    const double a = k * count, b = -k * is * sgx, cc = -k * sg - b * mean[c];
    const float fa = static_cast<float>(a), fb = static_cast<float>(b), fc = static_cast<float>(cc);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = (n * C + c) * S;
      if (pz) affine2_masked(pg + o, pz + o, px + o, fa, fb, fc, pdx + o, S);
      else affine2(pg + o, px + o, fa, fb, fc, pdx + o, S);
    }
  });
  return true;
}

// ---- the same on nChwBc (B = kB = 16, or 8 on AVX2 hosts): lane j = channel cb * kB + j ---------
// Each channel's sums run over its positions in the same order whatever kB: the same bits for 8 and 16.

// An activation element as f32: f32 as it is, bf16 (its bits, uint16_t) widened exactly. The
// blocked BN kernels read X in bf16 where train_blocked_layout stored the convolution's output so
// (--amp bf16, the Blocked node's bf16_inputs).
inline float widen(float v) { return v; }
inline float widen(uint16_t v) { return __builtin_bit_cast(float, static_cast<uint32_t>(v) << 16); }
// v as an element of type Y: f32, or bf16 rounded to nearest even (ir/dtype.h's f32_to_bf16, in a
// form the vectorizer takes).
template <typename Y>
inline Y narrow(float v) {
  if constexpr (std::is_same_v<Y, float>) {
    return v;
  } else {
    const uint32_t u = __builtin_bit_cast(uint32_t, v);
    const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);
  }
}

// shifted_moments of the 16 lanes over S positions (x[s * 16 + j]), two accumulator sets.
template <int64_t kB, typename X>
FERRY_VEC void shifted_moments16(const X* x, int64_t S, const float* k, double* s1, double* s2) {
  double a0[kB] = {}, b0[kB] = {}, a1[kB] = {}, b1[kB] = {};
  int64_t s = 0;
  for (; s + 2 <= S; s += 2) {
    for (int64_t j = 0; j < kB; ++j) {
      const double d = static_cast<double>(widen(x[s * kB + j]) - k[j]);
      a0[j] += d;
      b0[j] += d * d;
    }
    for (int64_t j = 0; j < kB; ++j) {
      const double d = static_cast<double>(widen(x[(s + 1) * kB + j]) - k[j]);
      a1[j] += d;
      b1[j] += d * d;
    }
  }
  for (; s < S; ++s)
    for (int64_t j = 0; j < kB; ++j) {
      const double d = static_cast<double>(widen(x[s * kB + j]) - k[j]);
      a0[j] += d;
      b0[j] += d * d;
    }
  for (int64_t j = 0; j < kB; ++j) {
    s1[j] += a0[j] + a1[j];
    s2[j] += b0[j] + b1[j];
  }
}

// grad_moments (masked by z > 0 when z) of the 16 lanes over S positions.
template <int64_t kB, bool kMasked, typename X, typename G, typename Z>
FERRY_VEC void grad_moments16(const G* g, const Z* z, const X* x, int64_t S, const float* mu, double* sg,
                              double* sgx) {
  double a0[kB] = {}, b0[kB] = {}, a1[kB] = {}, b1[kB] = {};
  int64_t s = 0;
  for (; s + 2 <= S; s += 2) {
    float m0[kB], m1[kB];  // the masked gradient first, in f32 (mixing widths in one loop stops GCC)
    for (int64_t j = 0; j < kB; ++j) {
      m0[j] = kMasked ? (widen(z[s * kB + j]) > 0.f ? widen(g[s * kB + j]) : 0.f) : widen(g[s * kB + j]);
      m1[j] = kMasked ? (widen(z[(s + 1) * kB + j]) > 0.f ? widen(g[(s + 1) * kB + j]) : 0.f) : widen(g[(s + 1) * kB + j]);
    }
    for (int64_t j = 0; j < kB; ++j) {
      const double g0 = m0[j], g1 = m1[j];
      a0[j] += g0;
      b0[j] += g0 * static_cast<double>(widen(x[s * kB + j]) - mu[j]);
      a1[j] += g1;
      b1[j] += g1 * static_cast<double>(widen(x[(s + 1) * kB + j]) - mu[j]);
    }
  }
  for (; s < S; ++s)
    for (int64_t j = 0; j < kB; ++j) {
      const double gv = kMasked ? (widen(z[s * kB + j]) > 0.f ? widen(g[s * kB + j]) : 0.f) : widen(g[s * kB + j]);
      a0[j] += gv;
      b0[j] += gv * static_cast<double>(widen(x[s * kB + j]) - mu[j]);
    }
  for (int64_t j = 0; j < kB; ++j) {
    sg[j] += a0[j] + a1[j];
    sgx[j] += b0[j] + b1[j];
  }
}

template <int64_t kB, bool kRelu, typename X, typename Y>
FERRY_VEC void affine16(const X* x, const float* a, const float* b, Y* y, int64_t S) {
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < kB; ++j) {
      const float v = widen(x[s * kB + j]) * a[j] + b[j];
      y[s * kB + j] = narrow<Y>(kRelu ? (v < 0.f ? 0.f : v) : v);
    }
}

template <int64_t kB, bool kMasked, typename X, typename G, typename Y, typename Z>
FERRY_VEC void affine2_16(const G* g, const Z* z, const X* x, const float* a, const float* b,
                          const float* c, Y* y, int64_t S) {
  for (int64_t s = 0; s < S; ++s)
    for (int64_t j = 0; j < kB; ++j) {
      const int64_t i = s * kB + j;
      const float gi = kMasked ? (widen(z[i]) > 0.f ? widen(g[i]) : 0.f) : widen(g[i]);
      y[i] = narrow<Y>(gi * a[j] + widen(x[i]) * b[j] + c[j]);
    }
}

bool blocked_activation(const Tensor& t) { return t.rank() == 5 && valid_layout_block(t.dim(4)); }

// Every given input is an f32 tensor, or a bf16 one where bit i of the node's bf16_inputs says so.
bool f32_or_marked_bf16(const KernelContext& ctx) {
  for (int64_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const DType want = blocked_bit(ctx.node(), "bf16_inputs", static_cast<size_t>(i)) ? DType::kBF16 : DType::kF32;
    if (!ctx.input_value(i).is_tensor() || ctx.input(i).dtype() != want) return false;
  }
  return true;
}

FERRY_VEC void widen_span(const uint16_t* s, float* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = widen(s[i]);
}
// n elements as f32: p itself, or its bf16 values widened into buf.
inline const float* as_f32(const float* p, int64_t, float*) { return p; }
inline const float* as_f32(const uint16_t* p, int64_t n, float* buf) {
  widen_span(p, buf, n);
  return buf;
}

// --amp bf16: the blocked BN kernels widen a bf16 X plane into f32 before their loops (as dY and Z
// below): GCC's loops on bf16 X ran 1.3-2.3x the f32 loops' time (perf, ResNet-50 b8, 1 thread:
// shifted_moments16 on bf16 2.3x its f32 time, on half the bytes). $FERRY_TRAIN_BN_WIDEN=0 reads
// bf16 X in the loops directly (to compare). The widening is exact: the same sums either way.
bool widen_bf16_x() {
  static const bool on = [] {
    const char* e = env_value("FERRY_TRAIN_BN_WIDEN");
    return !(e && std::string(e) == "0");
  }();
  return on;
}

// com.ferry Blocked(BatchNormTraining) with X and Y blocked: run_bn_training's arithmetic. X is
// f32, or bf16 (uint16_t) where bf16_inputs says so; Y f32, or bf16 (rounded to nearest even) where
// bf16_outputs says so; the statistics f32.
template <int64_t kB, typename X, typename Y>
StatusOr<bool> bn_training_blocked(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  if (!blocked_activation(x)) return false;
  const int64_t N = x.dim(0), CB = x.dim(1), S = x.dim(2) * x.dim(3), C = CB * kB, count = N * S;
  for (int64_t i = 1; i < 5; ++i)
    if (!f32_vector(ctx.input(i), C)) return false;
  if (count <= 1 || x.numel() == 0) return false;  // the reference reports it
  const double eps = ctx.get_float("epsilon", 1e-5f), momentum = ctx.get_float("momentum", 0.9f);
  const bool relu = ctx.get_int("relu", 0) != 0;
  Tensor* out[5] = {};
  for (int64_t k = 0; k < 5; ++k) {
    if (!wants(ctx, k)) continue;
    const DType t = k == 0 && !std::is_same_v<Y, float> ? DType::kBF16 : DType::kF32;
    ASSIGN_OR_RETURN(out[k], ctx.allocate_output(k, t, k == 0 ? x.dims() : std::vector<int64_t>{C}, false));
  }
  const X* px = static_cast<const X*>(x.raw());
  const float *sc = ctx.input(1).data<float>(), *bias = ctx.input(2).data<float>(),
              *rm = ctx.input(3).data<float>(), *rv = ctx.input(4).data<float>();
  Y* py = out[0] ? static_cast<Y*>(out[0]->mutable_raw()) : nullptr;
  const int64_t plane = S * kB;  // one (n, cb) block
  constexpr bool x16 = !std::is_same_v<X, float>;
  const bool widen_x = x16 && widen_bf16_x();
  for_channels(CB, 2 * count * kB, [&](int64_t cb) {
    float k[kB];  // each channel's first value (n = 0, s = 0)
    for (int64_t j = 0; j < kB; ++j) k[j] = widen(px[cb * plane + j]);
    thread_local std::vector<float> wide;  // a bf16 X plane widened (widen_bf16_x)
    if (widen_x && wide.size() < static_cast<size_t>(plane)) wide.resize(static_cast<size_t>(plane));
    double s1[kB] = {}, s2[kB] = {};
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = (n * CB + cb) * plane;
      if (widen_x) shifted_moments16<kB>(as_f32(px + o, plane, wide.data()), S, k, s1, s2);
      else shifted_moments16<kB>(px + o, S, k, s1, s2);
    }
    float fa[kB], fb[kB];
    for (int64_t j = 0; j < kB; ++j) {
      const int64_t c = cb * kB + j;
      const double dmean = s1[j] / static_cast<double>(count);
      const double ss = std::max(0.0, s2[j] - s1[j] * dmean);
      const double mu = k[j] + dmean, var = ss / static_cast<double>(count);
      const double inv = 1.0 / std::sqrt(var + eps);
      if (out[1]) out[1]->mutable_data<float>()[c] = static_cast<float>(rm[c] * momentum + mu * (1.0 - momentum));
      if (out[2])
        out[2]->mutable_data<float>()[c] =
            static_cast<float>(rv[c] * momentum + ss / static_cast<double>(count - 1) * (1.0 - momentum));
      if (out[3]) out[3]->mutable_data<float>()[c] = static_cast<float>(mu);
      if (out[4]) out[4]->mutable_data<float>()[c] = static_cast<float>(inv);
      const double a = inv * sc[c];
      fa[j] = static_cast<float>(a);
      fb[j] = static_cast<float>(bias[c] - mu * a);
    }
    if (!py) return;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = (n * CB + cb) * plane;
      if (widen_x)
        (relu ? affine16<kB, true, float, Y> : affine16<kB, false, float, Y>)(as_f32(px + o, plane, wide.data()), fa, fb, py + o, S);
      else
        (relu ? affine16<kB, true, X, Y> : affine16<kB, false, X, Y>)(px + o, fa, fb, py + o, S);
    }
  });
  return true;
}

StatusOr<bool> run_bn_training_blocked(KernelContext& ctx) {
  const Attribute* b16 = ctx.node().attr("bf16_outputs");
  if (!f32_or_marked_bf16(ctx) || !input_blocked(ctx.node(), 0) || !output_blocked(ctx.node(), 0) ||
      (b16 && b16->i != 0 && b16->i != 1))
    return false;
  for (int64_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && ctx.input(i).dtype() != DType::kF32) return false;
  using B = uint16_t;
  const bool x16 = ctx.input(0).dtype() == DType::kBF16, y16 = b16 && b16->i == 1;
  if (!blocked_activation(ctx.input(0))) return false;
  if (ctx.input(0).dim(4) == 8) {
    if (x16) return y16 ? bn_training_blocked<8, B, B>(ctx) : bn_training_blocked<8, B, float>(ctx);
    return y16 ? bn_training_blocked<8, float, B>(ctx) : bn_training_blocked<8, float, float>(ctx);
  }
  if (x16) return y16 ? bn_training_blocked<16, B, B>(ctx) : bn_training_blocked<16, B, float>(ctx);
  return y16 ? bn_training_blocked<16, float, B>(ctx) : bn_training_blocked<16, float, float>(ctx);
}

// com.ferry Blocked(BatchNormTrainingGrad) with dY, X, (Z) and dX blocked: run_bn_training_grad's.
// dY (G), X (the saved input) f32, or bf16 (uint16_t) where bf16_inputs says so; dX (Y) f32, or
// bf16 where bf16_outputs says so (rounded to nearest even); the rest f32.
template <int64_t kB, typename X, typename G, typename Y, typename Z>
StatusOr<bool> bn_training_grad_blocked(KernelContext& ctx) {
  const Node& node = ctx.node();
  const bool has_z = ctx.has_input(5);
  if (!input_blocked(node, 0) || !input_blocked(node, 1) || (has_z && !input_blocked(node, 5)) ||
      (wants(ctx, 0) && !output_blocked(node, 0)))
    return false;
  const Tensor &dy = ctx.input(0), &x = ctx.input(1);
  if (!blocked_activation(x) || dy.dims() != x.dims() || (has_z && ctx.input(5).dims() != x.dims())) return false;
  const Z* pz = has_z ? static_cast<const Z*>(ctx.input(5).raw()) : nullptr;
  const int64_t N = x.dim(0), CB = x.dim(1), S = x.dim(2) * x.dim(3), C = CB * kB;
  for (int64_t i = 2; i < 5; ++i)
    if (!f32_vector(ctx.input(i), C)) return false;
  if (x.numel() == 0) return false;
  Tensor* out[3] = {};
  for (int64_t k = 0; k < 3; ++k) {
    if (!wants(ctx, k)) continue;
    constexpr bool same = std::is_same_v<G, float> && std::is_same_v<Y, float>;  // dX over dY
    ASSIGN_OR_RETURN(out[k], k == 0 ? (same ? ctx.allocate_output_over(0, 0, DType::kF32, x.dims())
                                            : ctx.allocate_output(0, std::is_same_v<Y, float> ? DType::kF32 : DType::kBF16, x.dims(), false))
                                    : ctx.allocate_output(k, DType::kF32, {C}, false));
  }
  const G* pg = static_cast<const G*>(dy.raw());
  const X* px = static_cast<const X*>(x.raw());
  const float *sc = ctx.input(2).data<float>(), *mean = ctx.input(3).data<float>(),
              *inv = ctx.input(4).data<float>();
  Y* pdx = out[0] ? static_cast<Y*>(out[0]->mutable_raw()) : nullptr;
  const double count = static_cast<double>(N * S);
  const int64_t plane = S * kB;
  const bool widen_x = !std::is_same_v<X, float> && widen_bf16_x();
  for_channels(CB, 2 * N * plane, [&](int64_t cb) {
    double sg[kB] = {}, sgxm[kB] = {};
    const float* mu = mean + cb * kB;
    // A bf16 dY or Z is widened into f32 planes first: GCC vectorizes the masked loops badly on
    // bf16 operands (5-10x the f32 loops' time on ResNet-50), the plain widening well.
    // A bf16 X likewise where widen_bf16_x().
    thread_local std::vector<float> wide;
    if (wide.size() < static_cast<size_t>(3 * plane)) wide.resize(static_cast<size_t>(3 * plane));
    auto planes = [&](int64_t o, const float** g, const float** z) {
      *g = as_f32(pg + o, plane, wide.data());
      *z = pz ? as_f32(pz + o, plane, wide.data() + plane) : nullptr;
    };
    auto xf = [&](int64_t o) { return as_f32(px + o, plane, wide.data() + 2 * plane); };
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = (n * CB + cb) * plane;
      const float *g, *z;
      planes(o, &g, &z);
      if (widen_x) {
        if (z) grad_moments16<kB, true, float, float, float>(g, z, xf(o), S, mu, sg, sgxm);
        else grad_moments16<kB, false, float, float, float>(g, nullptr, xf(o), S, mu, sg, sgxm);
      } else if (z) {
        grad_moments16<kB, true, X, float, float>(g, z, px + o, S, mu, sg, sgxm);
      } else {
        grad_moments16<kB, false, X, float, float>(g, nullptr, px + o, S, mu, sg, sgxm);
      }
    }
    float fa[kB], fb[kB], fc[kB];
    for (int64_t j = 0; j < kB; ++j) {
      const int64_t c = cb * kB + j;
      const double is = inv[c], sgx = sgxm[j] * is;
      if (out[1]) out[1]->mutable_data<float>()[c] = static_cast<float>(sgx);
      if (out[2]) out[2]->mutable_data<float>()[c] = static_cast<float>(sg[j]);
      const double k = sc[c] * is / count;
      const double a = k * count, b = -k * is * sgx, cc = -k * sg[j] - b * mean[c];
      fa[j] = static_cast<float>(a);
      fb[j] = static_cast<float>(b);
      fc[j] = static_cast<float>(cc);
    }
    if (!pdx) return;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t o = (n * CB + cb) * plane;
      const float *g, *z;
      planes(o, &g, &z);
      if (widen_x) {
        if (z) affine2_16<kB, true, float, float, Y, float>(g, z, xf(o), fa, fb, fc, pdx + o, S);
        else affine2_16<kB, false, float, float, Y, float>(g, nullptr, xf(o), fa, fb, fc, pdx + o, S);
      } else if (z) {
        affine2_16<kB, true, X, float, Y, float>(g, z, px + o, fa, fb, fc, pdx + o, S);
      } else {
        affine2_16<kB, false, X, float, Y, float>(g, nullptr, px + o, fa, fb, fc, pdx + o, S);
      }
    }
  });
  return true;
}

// bn_training_grad_blocked<X, G, Y, Z> with each type bf16 (uint16_t) where its flag says so.
template <typename... T>
StatusOr<bool> bn_grad_dispatch(KernelContext& ctx, std::array<bool, 4> bf16) {
  if constexpr (sizeof...(T) == 4) {
    if (ctx.num_inputs() > 1 && ctx.has_input(1) && ctx.input(1).rank() == 5 && ctx.input(1).dim(4) == 8)
      return bn_training_grad_blocked<8, T...>(ctx);
    return bn_training_grad_blocked<16, T...>(ctx);
  } else {
    return bf16[sizeof...(T)] ? bn_grad_dispatch<T..., uint16_t>(ctx, bf16) : bn_grad_dispatch<T..., float>(ctx, bf16);
  }
}

StatusOr<bool> run_bn_training_grad_blocked(KernelContext& ctx) {
  if (!f32_or_marked_bf16(ctx)) return false;  // dY, X and Z may be bf16 where marked, the rest f32
  const bool g16 = ctx.input(0).dtype() == DType::kBF16, x16 = ctx.input(1).dtype() == DType::kBF16,
             y16 = blocked_bit(ctx.node(), "bf16_outputs", 0);
  if (blocked_bit(ctx.node(), "bf16_outputs", 1) || blocked_bit(ctx.node(), "bf16_outputs", 2)) return false;
  const bool z16 = ctx.has_input(5) && ctx.input(5).dtype() == DType::kBF16;
  return bn_grad_dispatch<>(ctx, {x16, g16, y16, z16});
}

// train_kernels.h's counts: [0] forward, [1] grad, [2] forward fallback, [3] grad fallback.
std::atomic<int64_t> g_blocked_bn_runs[4];

// `fn` counted in g_blocked_bn_runs (slot `own`, or `own` + 2 when it hands the node to the reference).
template <StatusOr<bool> (*fn)(KernelContext&), int own>
StatusOr<bool> counted(KernelContext& ctx) {
  StatusOr<bool> r = fn(ctx);
  if (r.is_ok()) g_blocked_bn_runs[r.value() ? own : own + 2].fetch_add(1, std::memory_order_relaxed);
  return r;
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
    if (!f32_vector(ctx.input(i), C)) return false;
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
    if (!wants(ctx, k)) continue;
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
    if (!f32_vector(ctx.input(i), C)) return false;
  const float *pg = dy.data<float>(), *px = x.data<float>(), *sc = ctx.input(2).data<float>(),
              *mean = ctx.input(3).data<float>(), *inv = ctx.input(4).data<float>();
  std::vector<double> sums(static_cast<size_t>(1 + 2 * C));  // [count, sum(dY)_c, sum(dY * (X - mean))_c ...]
  sums[0] = static_cast<double>(N * S);
  for_channels(C, 2 * N * S, [&](int64_t c) {
    for (int64_t n = 0; n < N; ++n)
      grad_moments(pg + (n * C + c) * S, px + (n * C + c) * S, S, mean[c], &sums[1 + 2 * c], &sums[2 + 2 * c]);
  });
  for (int64_t k = 1; k < 3; ++k) {  // dScale, dB: the local batch's (DDP averages them)
    if (!wants(ctx, k)) continue;
    ASSIGN_OR_RETURN(Tensor * t, ctx.allocate_output(k, DType::kF32, {C}, false));
    for (int64_t c = 0; c < C; ++c)
      t->mutable_data<float>()[c] = static_cast<float>(k == 1 ? sums[2 + 2 * c] * inv[c] : sums[1 + 2 * c]);
  }
  if (!wants(ctx, 0)) return true;
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

// ---- activation gradients ------------------------------------------------------------------------

#define FERRY_PAIR_SPAN(NAME, EXPR)                                                        \
  FERRY_VEC void NAME(const float* dy, const float* z, float* dx, int64_t n, float alpha) { \
    (void)alpha;                                                                           \
    for (int64_t i = 0; i < n; ++i) {                                                      \
      const float g = dy[i], v = z[i];                                                     \
      dx[i] = EXPR;                                                                        \
    }                                                                                      \
  }
FERRY_PAIR_SPAN(relu_grad_span, v > 0.f ? g : 0.f)
FERRY_PAIR_SPAN(leaky_relu_grad_span, v > 0.f ? g : alpha * g)
FERRY_PAIR_SPAN(sigmoid_grad_span, g * v * (1.f - v))
FERRY_PAIR_SPAN(tanh_grad_span, g * (1.f - v * v))
FERRY_PAIR_SPAN(hard_swish_grad_span, v < -3.f ? 0.f : (v <= 3.f ? g * (v * (1.f / 3.f) + 0.5f) : g))
#undef FERRY_PAIR_SPAN

using PairSpan = void (*)(const float*, const float*, float*, int64_t, float);

template <PairSpan kSpan>
StatusOr<bool> run_pair_grad(KernelContext& ctx) {
  if (!all_f32(ctx) || ctx.num_inputs() != 2) return false;
  const Tensor &dy = ctx.input(0), &z = ctx.input(1);
  if (dy.dims() != z.dims()) return false;
  const float alpha = ctx.get_float("alpha", 0.01f);
  ASSIGN_OR_RETURN(Tensor * dx, ctx.allocate_output_over(0, 0, DType::kF32, dy.dims()));
  const float *pg = dy.data<float>(), *pz = z.data<float>();
  float* pdx = dx->mutable_data<float>();
  parallel_ranges(dy.numel(), 2, [&](int64_t s, int64_t e) { kSpan(pg + s, pz + s, pdx + s, e - s, alpha); });
  return true;
}

// ---- Sum ---------------------------------------------------------------------------------------

FERRY_VEC void add_spans(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

StatusOr<bool> run_sum(KernelContext& ctx) {
  if (!all_f32(ctx) || ctx.num_inputs() < 2) return false;
  const Tensor& a = ctx.input(0);
  for (int64_t i = 1; i < ctx.num_inputs(); ++i)
    if (!ctx.has_input(i) || ctx.input(i).dims() != a.dims()) return false;  // broadcasting: the reference
  ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output_over(0, 0, DType::kF32, a.dims()));
  float* py = y->mutable_data<float>();
  // Left to right, as the reference: ((x0 + x1) + x2) + ...
  parallel_ranges(a.numel(), ctx.num_inputs(), [&](int64_t s, int64_t e) {
    add_spans(a.data<float>() + s, ctx.input(1).data<float>() + s, py + s, e - s);
    for (int64_t i = 2; i < ctx.num_inputs(); ++i) add_spans(py + s, ctx.input(i).data<float>() + s, py + s, e - s);
  });
  return true;
}

CpuKernelFactory factory(StatusOr<bool> (*fn)(KernelContext&)) {
  return [fn](const Node& node, const OpSchema& schema, const Graph& g) -> StatusOr<std::unique_ptr<Kernel>> {
    for (const std::string& in : node.inputs)
      if (!in.empty() && !maybe_f32(g, in) && g.find_type(in)->dtype != DType::kI64) return std::unique_ptr<Kernel>();
    return make_fn_kernel(fn, schema);
  };
}

// factory() for com.ferry Blocked nodes: an input marked bf16 (bf16_inputs) may be bf16.
CpuKernelFactory blocked_factory(StatusOr<bool> (*fn)(KernelContext&)) {
  return [fn](const Node& node, const OpSchema& schema, const Graph& g) -> StatusOr<std::unique_ptr<Kernel>> {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& in = node.inputs[i];
      if (in.empty() || maybe_f32(g, in) || g.find_type(in)->dtype == DType::kI64) continue;
      if (!(blocked_bit(node, "bf16_inputs", i) && g.find_type(in)->dtype == DType::kBF16)) return std::unique_ptr<Kernel>();
    }
    return make_fn_kernel(fn, schema);
  };
}

}  // namespace

BlockedBnCounts blocked_bn_counts() {
  BlockedBnCounts c;
  c.forward = g_blocked_bn_runs[0].load();
  c.grad = g_blocked_bn_runs[1].load();
  c.forward_fallback = g_blocked_bn_runs[2].load();
  c.grad_fallback = g_blocked_bn_runs[3].load();
  return c;
}

}  // namespace ferry::cpu

namespace ferry {
void register_cpu_train_kernels_kernels(CpuKernelTable& t) {
  using namespace cpu;
  t.add("com.ferry", "BatchNormTraining", factory(run_bn_training));
  t.add("com.ferry", "BatchNormTrainingGrad", factory(run_bn_training_grad));
  t.add("com.ferry", "SyncBatchNormTraining", factory(run_sync_bn_training));
  t.add("com.ferry", "SyncBatchNormTrainingGrad", factory(run_sync_bn_training_grad));
  t.add("com.ferry", "MaxPoolGrad", factory(run_pool_grad<true>));
  t.add("com.ferry", "AveragePoolGrad", factory(run_pool_grad<false>));
  t.add("com.ferry", "ReluGrad", factory(run_pair_grad<relu_grad_span>));
  t.add("com.ferry", "LeakyReluGrad", factory(run_pair_grad<leaky_relu_grad_span>));
  t.add("com.ferry", "SigmoidGrad", factory(run_pair_grad<sigmoid_grad_span>));
  t.add("com.ferry", "TanhGrad", factory(run_pair_grad<tanh_grad_span>));
  t.add("com.ferry", "HardSwishGrad", factory(run_pair_grad<hard_swish_grad_span>));
  t.add("", "Sum", factory(run_sum));
  // com.ferry Blocked: the BN forms here, the convolutions' in dnnl_conv_grad.cpp (registered first).
  t.add("com.ferry", "Blocked", [](const Node& node, const OpSchema& schema, const Graph& g) {
    const std::string op = inner_op(node);
    if (op == "BatchNormTraining") return blocked_factory(counted<run_bn_training_blocked, 0>)(node, schema, g);
    if (op == "BatchNormTrainingGrad") return blocked_factory(counted<run_bn_training_grad_blocked, 1>)(node, schema, g);
    return StatusOr<std::unique_ptr<Kernel>>(std::unique_ptr<Kernel>());
  });
}
}  // namespace ferry
