// A fused activation applied over a float buffer in place, one vectorized loop per kind: what a
// kernel runs after its product when the activation is not a oneDNN post-op (the f32 SiLU after a
// convolution, dnnl_conv.cpp's act_after_postop; a small-GEMM convolution's activation). The SiLU
// loops on AVX-512 and on AVX2 + FMA give the same bits.
#pragma once

#include <cstdint>

#include "ops/fused_activation.h"

namespace ferry::cpu {

/// y[i] = act(y[i]) for i < n, with the node's alpha / beta (LeakyRelu, Clip, HardSigmoid).
void activate_in_place(float* y, int64_t n, ActKind kind, float alpha, float beta);

}  // namespace ferry::cpu
