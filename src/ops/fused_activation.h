// The activation a fused op (com.ferry FusedConv / FusedMatMul / FusedGemm) applies to its result:
// string attribute 'activation' plus float attribute 'activation_params'. Shared by the reference
// kernels (src/ops/fused_conv.cpp), the fusion pass (which builds these attributes from ONNX nodes)
// and the optimized CPU backend (which maps them to oneDNN post-ops).
//
//   activation        activation_params   y =
//   "" (none)         -                   x
//   Relu              -                   max(x, 0)
//   LeakyRelu         [alpha]             x >= 0 ? x : alpha * x
//   Clip              [min, max]          min(max(x, min), max)
//   Sigmoid           -                   1 / (1 + exp(-x))
//   HardSigmoid       [alpha, beta]       max(0, min(1, alpha * x + beta))
//   HardSwish         -                   x * max(0, min(1, x / 6 + 1/2))
//   Tanh              -                   tanh(x)
//   Silu              -                   x * sigmoid(x)            ("Swish" is accepted as a synonym)
//   Gelu              -                   x * (1 + erf(x / sqrt 2)) / 2
//   GeluTanh          -                   Gelu's tanh approximation
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ferry {

enum class ActKind { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kHardSigmoid, kHardSwish, kTanh, kSilu, kGelu, kGeluTanh };

struct FusedActivation {
  ActKind kind = ActKind::kNone;
  float alpha = 0.0f;  // LeakyRelu alpha, Clip min, HardSigmoid alpha
  float beta = 0.0f;   // Clip max, HardSigmoid beta
};

/// Parses the 'activation' / 'activation_params' attributes; the error lists the accepted names.
inline StatusOr<FusedActivation> parse_fused_activation(const std::string& name, const std::vector<float>& params) {
  FusedActivation a;
  auto need = [&](size_t n, std::vector<float> dflt) -> Status {
    std::vector<float> p = params.empty() ? dflt : params;
    if (p.size() != n)
      return invalid_model("activation '" + name + "' takes " + std::to_string(n) + " activation_params, got " +
                           std::to_string(params.size()));
    if (n > 0) a.alpha = p[0];
    if (n > 1) a.beta = p[1];
    return Status::ok();
  };
  if (name.empty()) a.kind = ActKind::kNone;
  else if (name == "Relu") a.kind = ActKind::kRelu;
  else if (name == "LeakyRelu") { a.kind = ActKind::kLeakyRelu; RETURN_IF_ERROR(need(1, {0.01f})); }
  else if (name == "Clip") { a.kind = ActKind::kClip; RETURN_IF_ERROR(need(2, {-INFINITY, INFINITY})); }
  else if (name == "Sigmoid") a.kind = ActKind::kSigmoid;
  else if (name == "HardSigmoid") { a.kind = ActKind::kHardSigmoid; RETURN_IF_ERROR(need(2, {0.2f, 0.5f})); }
  else if (name == "HardSwish") a.kind = ActKind::kHardSwish;
  else if (name == "Tanh") a.kind = ActKind::kTanh;
  else if (name == "Silu" || name == "Swish") a.kind = ActKind::kSilu;
  else if (name == "Gelu") a.kind = ActKind::kGelu;
  else if (name == "GeluTanh") a.kind = ActKind::kGeluTanh;
  else
    return invalid_model("activation '" + name +
                         "' is not known; expected one of: Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, "
                         "Tanh, Silu, Swish, Gelu, GeluTanh (or empty for none)");
  return a;
}

/// The activation of one value, computed in double (the reference's precision).
inline double apply_fused_activation(const FusedActivation& a, double x) {
  switch (a.kind) {
    case ActKind::kNone: return x;
    case ActKind::kRelu: return x > 0 ? x : 0.0;
    case ActKind::kLeakyRelu: return x >= 0 ? x : a.alpha * x;
    case ActKind::kClip: return std::min(std::max(x, static_cast<double>(a.alpha)), static_cast<double>(a.beta));
    case ActKind::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case ActKind::kHardSigmoid: return std::max(0.0, std::min(1.0, a.alpha * x + a.beta));
    case ActKind::kHardSwish: return x * std::max(0.0, std::min(1.0, x / 6.0 + 0.5));
    case ActKind::kTanh: return std::tanh(x);
    case ActKind::kSilu: return x / (1.0 + std::exp(-x));
    case ActKind::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case ActKind::kGeluTanh: {
      const double k = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    }
  }
  return x;
}

}  // namespace ferry
