// Launchers of the CUDA backend's own kernels (the .cu files), callable from host C++.
// Plain types only, so the .cu files need no ferry headers. Element types use the ONNX numbers
// of ir/dtype.h (1 f32, 10 f16, 16 bf16, 7 i64, 6 i32, 9 bool, ...). Each launcher returns
// cudaSuccess or the launch error; every launch is asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ferry::cuda {

constexpr int kMaxRank = 8;

/// A strided walk over `dims` (row-major): element i of the walk reads in + Σ idx·in_strides and
/// writes out + Σ idx·out_strides (strides in elements; 0 broadcasts, negative reverses).
struct StridedDesc {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
  int64_t out_strides[kMaxRank] = {};
  int64_t in_offset = 0;
  int64_t out_offset = 0;
};
/// Copies elements of `elem_size` bytes (1, 2, 4 or 8) along `d`: transpose, slice, expand,
/// concat and split pieces.
cudaError_t launch_strided_copy(int elem_size, const void* in, void* out, const StridedDesc& d, cudaStream_t s);

enum class UnaryOp : int {
  kIdentity, kRelu, kSigmoid, kTanh, kExp, kLog, kSqrt, kNeg, kAbs, kErf, kReciprocal, kFloor, kCeil,
  kGeluErf, kGeluTanh, kLeakyRelu, kClip, kHardSigmoid, kHardSwish, kSilu, kSoftplus, kSin, kCos, kRound, kSign, kElu
};
/// out[i] = op(in[i]); alpha/beta: LeakyRelu/Elu alpha, Clip min/max, HardSigmoid alpha/beta.
cudaError_t launch_unary(UnaryOp op, int dtype, const void* in, void* out, int64_t n, float alpha, float beta,
                         cudaStream_t s);

enum class BinaryOp : int { kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kMod, kPRelu };
/// Broadcast over output dims d.dims: a read with d.in_strides, b with b_strides (0 on broadcast
/// axes); output contiguous. f32/f16/bf16 (computed in f32), i32 and i64 (Add/Sub/Mul/Div/Max/Min/Mod).
cudaError_t launch_binary(BinaryOp op, int dtype, const void* a, const void* b, void* out, const StridedDesc& d,
                          const int64_t* b_strides, cudaStream_t s);
enum class CompareOp : int { kEqual, kLess, kGreater, kLessEqual, kGreaterEqual, kAnd, kOr, kXor };
/// Broadcast comparison or logic op writing bool (uint8).
cudaError_t launch_compare(CompareOp op, int dtype, const void* a, const void* b, void* out, const StridedDesc& d,
                           const int64_t* b_strides, cudaStream_t s);
/// out = cond ? x : y with broadcasting (strides for cond, x, y), elements of elem_size bytes.
cudaError_t launch_where(int elem_size, const void* cond, const void* x, const void* y, void* out, const StridedDesc& d,
                         const int64_t* x_strides, const int64_t* y_strides, cudaStream_t s);
/// Element type conversion between f32, f16, bf16, f64, i64, i32, i8, u8 and bool.
cudaError_t launch_cast(int from, int to, const void* in, void* out, int64_t n, cudaStream_t s);
/// y[n, c, i] = x[n, c, i] * a[c] + b[c] (BatchNormalization in inference; a, b f32).
cudaError_t launch_channel_affine(int dtype, const void* x, const float* a, const float* b, void* y, int64_t outer,
                                  int64_t channels, int64_t inner, cudaStream_t s);

/// Softmax (or LogSoftmax) over the middle axis of a [outer, n, inner] view.
cudaError_t launch_softmax(int dtype, const void* in, void* out, int64_t outer, int64_t n, int64_t inner, bool log,
                           cudaStream_t s);
/// LayerNormalization over the last `cols` of [rows, cols]; scale/bias (may be null) of x's type.
cudaError_t launch_layernorm(int dtype, const void* x, const void* scale, const void* bias, void* y, int64_t rows,
                             int64_t cols, float epsilon, cudaStream_t s);

enum class ReduceOp : int { kSum, kMean, kMax, kMin, kProd, kSumSquare, kL2, kL1, kLogSumExp };
/// out[o] = reduce over the reduced index space: d.dims/in_strides walk the kept axes (one output
/// each, out contiguous), r_dims/r_strides the reduced ones.
cudaError_t launch_reduce(ReduceOp op, int dtype, const void* in, void* out, const StridedDesc& d, int r_rank,
                          const int64_t* r_dims, const int64_t* r_strides, cudaStream_t s);

/// Gather along an axis of [outer, axis_dim, inner]: out[o, j, i] = data[o, idx[j], i]; indices
/// i64 or i32 (index_dtype), negative ones count from the end. An index out of range writes zeros
/// and sets *bad_index (device int, may be null) to 1 + its position.
cudaError_t launch_gather(int elem_size, const void* data, int index_dtype, const void* indices, void* out,
                          int64_t outer, int64_t axis_dim, int64_t num_indices, int64_t inner, int* bad_index,
                          cudaStream_t s);

enum class ResizeMode : int { kNearest, kLinear };
enum class CoordMode : int { kHalfPixel, kAsymmetric, kAlignCorners, kPytorchHalfPixel, kTfHalfPixelForNearest };
enum class NearestMode : int { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil };
/// 2-D resize of the last two axes of [planes, h_in, w_in] to [planes, h_out, w_out].
cudaError_t launch_resize2d(int dtype, const void* in, void* out, int64_t planes, int64_t h_in, int64_t w_in,
                            int64_t h_out, int64_t w_out, float scale_h, float scale_w, ResizeMode mode,
                            CoordMode coord, NearestMode nearest, cudaStream_t s);

/// Fused scaled-dot-product attention (com.ferry.Attention), one pass over keys with an online
/// softmax, no [Sq, Sk] score matrix in memory:
///   out[b,h,i,c] = Σ_j softmax_j(scale * Σ_t q[b,h,i,t] kt[b,h,t,j] + mask[b,h,i,j]) v[b,h,j,c]
/// Every operand is addressed through element strides, so transposes absorbed by the fusion
/// (BERT's [batch, seq, heads, dim] layout) cost nothing. q: (b, h, i, t); kt: (b, h, t, j);
/// v: (b, h, j, c); out: (b, h, i, c); mask (same type as q, may be null): (b, h, i, j), 0 strides
/// broadcast. head_dim and v_dim <= 128. f32, f16, bf16 (accumulated in f32).
struct AttentionDesc {
  int64_t batch = 0, heads = 0, seq_q = 0, seq_k = 0, head_dim = 0, v_dim = 0;
  int64_t q_strides[4] = {}, k_strides[4] = {}, v_strides[4] = {}, o_strides[4] = {}, m_strides[4] = {};
  float scale = 1.0f;
};
cudaError_t launch_attention(int dtype, const void* q, const void* k, const void* v, const void* mask, void* out,
                             const AttentionDesc& d, cudaStream_t s);

}  // namespace ferry::cuda
