// QuantizeLinear's f32 -> 8-bit step for the cpu backend's kernels (int8_quantize.cpp): the QuantizeLinear
// kernel's, and a float-output QConvFused's second output (dnnl_int8_conv.cpp: yq).
#pragma once

#include <cstdint>

#include "ir/tensor.h"

namespace ferry::cpu {

/// y[i] = saturate(round_half_even(x[i] / scale) + zp) as u8 or s8 (`dt`), NaN quantized like 0: the reference's
/// formula (ops/quantize.cpp) bit for bit, over n values split over the threads.
void quantize_f32_8bit(const float* x, int64_t n, float scale, float zp, DType dt, void* y);

}  // namespace ferry::cpu
