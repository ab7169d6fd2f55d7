// QuantizeLinear's f32 -> 8-bit step for the cpu backend's kernels (int8_quantize.cpp): the QuantizeLinear
// kernel's, and a float-output QConvFused's second output (dnnl_int8_conv.cpp: yq); and the planes' interleave
// of an image's NCHW -> NHWC (the int8 Transpose's, QuantizeLinearToNhwc's).
#pragma once

#include <cstdint>

#include "ir/tensor.h"

namespace ferry::cpu {

/// y[i] = saturate(round_half_even(x[i] / scale) + zp) as u8 or s8 (`dt`), NaN quantized like 0: the reference's
/// formula (ops/quantize.cpp) bit for bit, over n values split over the threads.
void quantize_f32_8bit(const float* x, int64_t n, float scale, float zp, DType dt, void* y);

/// dst[s * C + c] = src[c * S + s]: C planes of S bytes into S pixels of C channels (an image's NCHW -> NHWC; three
/// planes by byte shuffles, 16 pixels per step: oneDNN's reorder of a [1,3,224,224] u8 image took ~45 us). The
/// int8 Transpose's and QuantizeLinearToNhwc's (int8_transpose.cpp, int8_quantize.cpp).
void interleave_planes(const uint8_t* src, int64_t C, int64_t S, uint8_t* dst);

}  // namespace ferry::cpu
