// CPU kernels of ops/grad_blocked.cpp's com.ferry Blocked node wrapping BatchNormTraining /
// BatchNormTrainingGrad on nChw16c / nChw8c activations [N, C/B, H, W, B] (the pass
// train_blocked_layout; B = 16 or 8): grad_norm_pool.cpp's arithmetic, B channels at a time across
// the block's lanes, threads over channel blocks; X may be bf16 where the node's bf16_inputs says
// so. The Blocked convolutions and layout changes are dnnl_conv_grad.cpp's (registered first).

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/grad_blocked.h"
#include "backends/cpu/grad_kernel_util.h"
#include "backends/cpu/vec_math.h"
#include "common/env_switch.h"
#include "ops/blocked_layout.h"

namespace ferry::cpu {
namespace {

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
// Blocks of 8 (nChw8c) through 16-wide loops: GCC leaves the 8-lane form of the loops below scalar
// where they mask or combine three operands (perf, ResNet-50 b8, 1 thread: the masked BN-gradient
// loops 10x their 16-lane time). Two positions side by side make 16 lanes: lanes 0-7 the even
// positions, 8-15 the odd ones, which are exactly the two accumulator sets of the 16-lane loop
// (a0 / a1), summed in the same order: the same bits as blocks of 16.
// z > 0 ? g : 0 (+0.0) without a branch: g's bits and a mask of all ones where z > 0.
inline float masked(float g, float z) {
  const uint32_t m = 0u - static_cast<uint32_t>(z > 0.f);
  return __builtin_bit_cast(float, __builtin_bit_cast(uint32_t, g) & m);
}

template <bool kMasked, typename X, typename G, typename Z>
FERRY_VEC void grad_moments8(const G* g, const Z* z, const X* x, int64_t S, const float* mu, double* sg, double* sgx) {
  float mu2[16];
  for (int64_t j = 0; j < 16; ++j) mu2[j] = mu[j & 7];
  double a[16] = {}, b[16] = {};
  for (int64_t t = 0; t + 1 < S; t += 2) {
    float m[16];  // the masked gradient first, in f32 (as below), the mask as bits (GCC keeps a branch otherwise)
    for (int64_t j = 0; j < 16; ++j) m[j] = kMasked ? masked(widen(g[t * 8 + j]), widen(z[t * 8 + j])) : widen(g[t * 8 + j]);
    for (int64_t j = 0; j < 16; ++j) {
      const double gv = m[j];
      a[j] += gv;
      b[j] += gv * static_cast<double>(widen(x[t * 8 + j]) - mu2[j]);
    }
  }
  if (S % 2)
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t i = (S - 1) * 8 + j;
      const double gv = kMasked ? (widen(z[i]) > 0.f ? widen(g[i]) : 0.f) : widen(g[i]);
      a[j] += gv;
      b[j] += gv * static_cast<double>(widen(x[i]) - mu[j]);
    }
  for (int64_t j = 0; j < 8; ++j) {
    sg[j] += a[j] + a[j + 8];
    sgx[j] += b[j] + b[j + 8];
  }
}

template <int64_t kB, bool kMasked, typename X, typename G, typename Z>
FERRY_VEC void grad_moments16(const G* g, const Z* z, const X* x, int64_t S, const float* mu, double* sg,
                              double* sgx) {
  if constexpr (kB == 8) {
    grad_moments8<kMasked>(g, z, x, S, mu, sg, sgx);
    return;
  }
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

// affine2_16 on blocks of 8 as 16 lanes (two positions side by side), as grad_moments8: the same
// arithmetic per element.
template <bool kMasked, typename X, typename G, typename Y, typename Z>
FERRY_VEC void affine2_8(const G* g, const Z* z, const X* x, const float* a, const float* b, const float* c, Y* y,
                         int64_t S) {
  float a2[16], b2[16], c2[16];
  for (int64_t j = 0; j < 16; ++j) {
    a2[j] = a[j & 7];
    b2[j] = b[j & 7];
    c2[j] = c[j & 7];
  }
  for (int64_t t = 0; t + 1 < S; t += 2)
    for (int64_t j = 0; j < 16; ++j) {
      const int64_t i = t * 8 + j;
      const float gi = kMasked ? masked(widen(g[i]), widen(z[i])) : widen(g[i]);
      y[i] = narrow<Y>(gi * a2[j] + widen(x[i]) * b2[j] + c2[j]);
    }
  if (S % 2)
    for (int64_t j = 0; j < 8; ++j) {
      const int64_t i = (S - 1) * 8 + j;
      const float gi = kMasked ? (widen(z[i]) > 0.f ? widen(g[i]) : 0.f) : widen(g[i]);
      y[i] = narrow<Y>(gi * a[j] + widen(x[i]) * b[j] + c[j]);
    }
}

template <int64_t kB, bool kMasked, typename X, typename G, typename Y, typename Z>
FERRY_VEC void affine2_16(const G* g, const Z* z, const X* x, const float* a, const float* b,
                          const float* c, Y* y, int64_t S) {
  if constexpr (kB == 8) {
    affine2_8<kMasked>(g, z, x, a, b, c, y, S);
    return;
  }
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
    if (!is_f32_vector(ctx.input(i), C)) return false;
  if (count <= 1 || x.numel() == 0) return false;  // the reference reports it
  const double eps = ctx.get_float("epsilon", 1e-5f), momentum = ctx.get_float("momentum", 0.9f);
  const bool relu = ctx.get_int("relu", 0) != 0;
  Tensor* out[5] = {};
  for (int64_t k = 0; k < 5; ++k) {
    if (!output_wanted(ctx, k)) continue;
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
      bn_training_channel(k[j], s1[j], s2[j], count, eps, momentum, sc[c], bias[c], rm[c], rv[c], out, c, &fa[j], &fb[j]);
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
      (output_wanted(ctx, 0) && !output_blocked(node, 0)))
    return false;
  const Tensor &dy = ctx.input(0), &x = ctx.input(1);
  if (!blocked_activation(x) || dy.dims() != x.dims() || (has_z && ctx.input(5).dims() != x.dims())) return false;
  const Z* pz = has_z ? static_cast<const Z*>(ctx.input(5).raw()) : nullptr;
  const int64_t N = x.dim(0), CB = x.dim(1), S = x.dim(2) * x.dim(3), C = CB * kB;
  for (int64_t i = 2; i < 5; ++i)
    if (!is_f32_vector(ctx.input(i), C)) return false;
  if (x.numel() == 0) return false;
  Tensor* out[3] = {};
  for (int64_t k = 0; k < 3; ++k) {
    if (!output_wanted(ctx, k)) continue;
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
      bn_training_grad_channel(sg[j], sgxm[j], inv[c], sc[c], mean[c], count, out, c, &fa[j], &fb[j], &fc[j]);
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

// grad_blocked.h's counts: [0] forward, [1] grad, [2] forward fallback, [3] grad fallback.
std::atomic<int64_t> g_blocked_bn_runs[4];

// `fn` counted in g_blocked_bn_runs (slot `own`, or `own` + 2 when it hands the node to the reference).
template <StatusOr<bool> (*fn)(KernelContext&), int own>
StatusOr<bool> counted(KernelContext& ctx) {
  StatusOr<bool> r = fn(ctx);
  if (r.is_ok()) g_blocked_bn_runs[r.value() ? own : own + 2].fetch_add(1, std::memory_order_relaxed);
  return r;
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
void register_cpu_grad_blocked_kernels(CpuKernelTable& t) {
  using namespace cpu;
  // After dnnl_conv_grad.cpp's Blocked factory (the convolutions): the BatchNorm forms.
  t.add("com.ferry", "Blocked", [](const Node& node, const OpSchema& schema, const Graph& g) {
    const std::string op = inner_op(node);
    if (op == "BatchNormTraining") return blocked_factory(counted<run_bn_training_blocked, 0>)(node, schema, g);
    if (op == "BatchNormTrainingGrad") return blocked_factory(counted<run_bn_training_grad_blocked, 1>)(node, schema, g);
    return StatusOr<std::unique_ptr<Kernel>>(std::unique_ptr<Kernel>());
  });
}
}  // namespace ferry
