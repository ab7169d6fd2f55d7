// Layout changes between plain NCHW (f32) and oneDNN's nChw16c (aBcd16b; f32 or bf16) for the
// training convolutions (dnnl_conv_grad.cpp), which change the layout of every activation and
// gradient on the way into and out of each primitive. AVX-512 gathers, contiguous stores, f32 ->
// bf16 rounded to nearest even with NaN kept quiet (as narrow_bf16). Measured on ResNet-50 b8
// --amp bf16 (2 threads), oneDNN 2.6's reorders with the f32 <-> bf16 conversion (jit:uni) took
// about twice as long as its f32 ones (jit:blk) for half the bytes written.
#pragma once

#include <cstdint>

namespace ferry::cpu {

/// Whether the functions below run here: an AVX-512 CPU, C a multiple of 16.
bool nchw16c_supported(int64_t channels);

/// x: N x C x HW f32 (plain) -> y: nChw16c, f32 or (bf16) bf16 bits.
void nchw_to_nchw16c(const float* x, void* y, bool bf16, int64_t n, int64_t c, int64_t hw);

/// x: nChw16c, f32 or (bf16) bf16 bits -> y: N x C x HW f32 (plain). With bf16, the buffer of x
/// must have 2 readable bytes past its end (gathers read 32 bits).
void nchw16c_to_nchw(const void* x, bool bf16, float* y, int64_t n, int64_t c, int64_t hw);

}  // namespace ferry::cpu
