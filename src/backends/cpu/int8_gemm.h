// An exact AVX2 int8 GEMM for hosts without VNNI: y[m, n] = epilogue(sum_k (a[m, k] - a_zp) *
// (b[k, n] - b_zp[n])), a u8 or s8 [M, K] row-major, b s8 [K, N] constant (packed once).
//
// oneDNN (and ONNX Runtime's MLAS) multiply u8 x s8 on AVX2 with vpmaddubsw, whose int16 pair sums
// saturate (int8_pair_saturation.h): oneDNN's results are exact here only through the split (twice the
// reduction). This kernel widens both operands to int16 instead, a - a_zp when the rows are copied
// (vpmovzxbw / vpmovsxbw, in [-255, 255]) and b - b_zp[n] once when packed, and multiplies with
// vpmaddwd: 16 multiply-adds per instruction into int32, the rate of the vpmaddubsw + vpmaddwd pair,
// with no saturation (|a| * |b| * 2 <= 255 * 255 * 2 < 2^31). So the integer sum is exact (int32, as
// the reference's MatMulInteger) and the epilogue is the reference's float steps in the same order
// (src/ops/quantize_fused.cpp k_qmatmul_fused): bit for bit the reference kernel.
//
// Narrow weights (every b - b_zp[n] in [-64, 64]: `ferry quantize --reduce-range`, ONNX Runtime's
// reduce_range) take the byte path instead, decided once at pack time from the values: a stays u8 (an s8
// source flipped to u8, x + 128, its zero point + 128) and vpmaddubsw multiplies it by the s8 weights, whose
// int16 pair sums cannot saturate there (|a0 b0 + a1 b1| <= 255 * 64 * 2 = 32640 <= 32767), then vpmaddwd
// by ones adds the pairs into int32: 32 multiply-adds per three instructions (with vpaddd) against the
// int16 path's four, MLAS's AVX2 u8 x s8 sequence. The source zero point comes off afterwards:
// sum (a - a_zp) b = sum a b - a_zp * sum b, the column sums of b taken at pack time; the same int32 sum
// (modulo 2^32, which the reference's int32 shares), so still bit for bit the reference kernel.
//
// Layout: b in panels of 16 columns; a panel holds, per pair of k, the 16 columns' (b[2j, n], b[2j+1, n])
// int16 pairs (K padded to even and N to 16 with zeros). The micro kernel holds 6 rows x 16 columns
// of int32 accumulators (12 ymm), broadcasts one int16 pair of a row per step and reads the panel once
// per 6 rows. Threads split the panels (OpenMP, cpu_parallel.h).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace ferry::cpu {

/// Whether int8_gemm runs on this host: AVX2, and oneDNN's u8 x s8 pairs saturate (no VNNI; with VNNI
/// oneDNN's vpdpbusd is exact and faster). FERRY_INT8_GEMM=0 turns it off (then oneDNN's split runs).
bool int8_gemm_available();

/// b (s8 [K, N] row-major) minus its zero point per column, widened to int16 and packed; or, where every
/// such value lies in [-64, 64] (`narrow`), kept s8 in quads of k with its column sums.
struct PackedInt8B {
  int64_t K = 0, N = 0, pairs = 0, panels = 0;
  std::vector<int16_t> data;  // [panels][pairs][16 columns][2] (not narrow)
  bool narrow = false;
  int64_t quads = 0;                 // (K + 3) / 4 (narrow)
  std::vector<int8_t> data8;         // [panels][quads][16 columns][4] (narrow)
  std::vector<int32_t> column_sums;  // [panels * 16]: sum over k of b[k, n] - b_zp[n] (narrow)

  /// `b_zp`: nullptr (0), or `zp_count` (1 or N) zero points. `n_major`: b given as [N, K] (a
  /// convolution's M x C weights).
  void pack(const int8_t* b, int64_t K, int64_t N, const int8_t* b_zp = nullptr, int64_t zp_count = 0,
            bool n_major = false);
};

/// s8 quads (PackedInt8B's data8 layout) reordered per panel for int8_micro.h's quad_pair_sums, which adds
/// two quads' vpmaddubsw results in int16 (vpaddw) before one vpmaddwd by ones: 32 multiply-adds per 2.5
/// instructions instead of 3 (2 multiply-pipe steps per 32 instead of 2 per 32 plus the widening's 1 per 16).
/// Two quads j, j' go together only where no u8 source can take an int16 lane out of range: for every column
/// and both lanes (channels 0-1 and 2-3 of a quad) the positive weights of the four products sum to at most
/// 128 and the negative ones to at most 128 in magnitude (255 x 128 = 32640), so each pair sum and their
/// vpaddw are exact and the int32 sums the same as quad_sums'. Per panel, greedily: the quads by their
/// largest lane load, each paired with the heaviest one that still fits, then, where at most a quarter are
/// left single, exchanges that pair two more (7-bit weights: 50-100% of MobileNetV2's quads paired, all of
/// them from 64 channels on; 8-bit ones rarely). The pairs come first, then the quads left single; every
/// panel gets the same pair count (the fewest), and none (the quads in their own order, offsets 4j) where
/// that count would cover less than 3/4 of the quads: quad_sums runs those.
struct PairedQuads {
  int64_t panels = 0, quads = 0;
  std::vector<int8_t> data;      // [panels][quads][16 columns][4], each panel's quads in its `offsets` order
  std::vector<int32_t> offsets;  // [panels][quads]: the quad's byte offset in a source row (4 x its index)
  std::vector<int32_t> pairs;    // [panels]: positions 2t, 2t + 1 (t < pairs[p]) are added in int16

  /// From `data8` ([panels][quads][16][4], PackedInt8B's layout).
  void plan(const int8_t* data8, int64_t n_panels, int64_t n_quads);
};

/// The QMatMulFused / QConvFused epilogue (src/ops/quantize_fused.cpp; QConvFused with no residual, no
/// mid Q/DQ and no activation), per column n of the N given, in the reference's order:
///   int32 bias (or none): v = float(acc + bias[n]) * mul[n]
///   float bias:           v = (float(acc) * real[n] + fbias[n]) / y_scale
///   v = max(v, 0) if conv_relu; v = min(max(v, clip_lo), clip_hi) if clip; v = max(v, 0) if relu;
///   y = v (f32 output) or saturate(round_half_even(v) + y_zp) (u8 / s8 output).
struct Int8GemmEpilogue {
  const float* mul = nullptr;       // [N]: a_scale * b_scale[n] / y_scale
  const int32_t* bias = nullptr;    // [N] or nullptr
  const float* real = nullptr;      // [N]: a_scale * b_scale[n] (with fbias)
  const float* fbias = nullptr;     // [N] or nullptr
  float y_scale = 1, y_zp = 0;      // y_scale: the divisor of the float-bias form (QConvFused's s1)
  bool conv_relu = false, clip = false, relu = false;
  float clip_lo = 0, clip_hi = 0;
  DType y_dt = DType::kF32;  // kF32, kU8 or kI8
};

/// The epilogue's per-output-channel factors the GEMM's kernels set the same way (int8_gemm.cpp,
/// int8_im2col_conv.cpp): mul[n] = a_scale * w_scale[n] / y_scale and real[n] = a_scale * w_scale[n]
/// (w_scale scalar or [n]), the int32 or float bias (constant, n values; another type or count: false),
/// y's scale and zero point; `epi` points into this object, which stays where it is for the kernel's life.
struct EpilogueFactors {
  std::vector<float> mul, real, fbias;
  std::vector<int32_t> bias;

  bool set(float a_scale, const Tensor& w_scale, float y_scale, float y_zp, bool has_bias, const Tensor* b, int64_t n,
           Int8GemmEpilogue* epi);
};

/// The com.ferry.QConvFused operands both int8 convolution kernels on int8_gemm's panels read alike
/// (int8_gemm.cpp's 1x1s, int8_im2col_conv.cpp): the weight zero points (i8, scalar or [M]), the source's
/// type and zero point, the output's type, scale and zero point (neither given: f32), the bias and the
/// conv_relu / clip / relu epilogue into `factors` and `epi`. False where these kernels do not run the node,
/// a u8 source with zero point 0 included (oneDNN runs it unsplit with the repair, dnnl_int8_conv.cpp)
/// unless `any_x_zp` (int8_depthwise_conv.cpp, whose depthwise sums oneDNN does not split; int8_im2col_conv.cpp's
/// 1x1s of <= 64 channels into >= 64). `mid`: the epilogue up to the node's mid Q (mid_scale, mid_zero_point in
/// place of y_scale, y_zero_point; no relu, which follows the residual): int8_im2col_conv.cpp's residual 1x1s.
struct QConvOperands {
  const int8_t* w_zp = nullptr;  // nullptr: none
  int64_t w_zp_count = 0;
  bool x_signed = false;
  int32_t x_zp = 0;
};
bool read_qconv_operands(const Graph& graph, const Node& node, const Tensor& w_scale, int64_t M, QConvOperands* q,
                         EpilogueFactors* factors, Int8GemmEpilogue* epi, bool any_x_zp = false, bool mid = false);

/// y ([M, N] of e.y_dt) = epilogue(a ([M, K], u8 or s8 by `a_signed`) x b); needs int8_gemm_available().
void int8_gemm(const void* a, bool a_signed, int32_t a_zp, int64_t M, const PackedInt8B& b, const Int8GemmEpilogue& e,
               void* y);

}  // namespace ferry::cpu
