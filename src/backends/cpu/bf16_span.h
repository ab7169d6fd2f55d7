// bfloat16 storage for the CPU kernels that compute in f32: vectorized widening (bf16 -> f32, exact)
// and narrowing (f32 -> bf16, round to nearest even, NaN kept quiet: as ir/dtype.h's f32_to_bf16),
// and row helpers that let one f32 kernel body serve f32 and bf16 tensors.
#pragma once

#include <cstdint>

#include "ir/tensor.h"

namespace ferry::cpu {

/// y[i] = float(x[i]) for bf16 bits x.
void widen_bf16(const uint16_t* x, float* y, int64_t n);
/// y[i] = bf16(x[i]), rounded to nearest even.
void narrow_bf16(const float* x, uint16_t* y, int64_t n);

/// True for the dtypes these kernels take: f32, and bf16 (computed in f32).
inline bool f32_or_bf16(DType t) { return t == DType::kF32 || t == DType::kBF16; }

/// `n` f32 values of `t` (f32 or bf16) from element `offset`: a pointer into t when it is f32, else
/// `scratch` (n floats) filled by widening.
inline const float* f32_view(const Tensor& t, int64_t offset, int64_t n, float* scratch) {
  if (t.dtype() == DType::kF32) return t.data<float>() + offset;
  widen_bf16(t.data<uint16_t>() + offset, scratch, n);
  return scratch;
}

/// Where a kernel writes `n` f32 results for element `offset` of y: y itself when f32, else scratch
/// (then store_f32 rounds them into y).
inline float* f32_target(Tensor* y, int64_t offset, float* scratch) {
  return y->dtype() == DType::kF32 ? y->mutable_data<float>() + offset : scratch;
}
inline void store_f32(Tensor* y, int64_t offset, int64_t n, const float* computed) {
  if (y->dtype() == DType::kBF16) narrow_bf16(computed, y->mutable_data<uint16_t>() + offset, n);
}

}  // namespace ferry::cpu
