// Shared by the int8 kernel tests (test_int8_gemm.cpp, test_int8_im2col_conv.cpp,
// test_int8_depthwise_conv.cpp): scalar operands and the bit-for-bit comparison of a kernel's output
// with the reference's.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "ir/tensor.h"

namespace ferry::testing {

/// A 0-d u8 or s8 tensor holding v (a zero point).
inline Tensor scalar_of(DType dt, int v) {
  Tensor t = Tensor::allocate(dt, {});
  if (dt == DType::kU8) t.mutable_data<uint8_t>()[0] = static_cast<uint8_t>(v);
  else t.mutable_data<int8_t>()[0] = static_cast<int8_t>(v);
  return t;
}

/// How many outputs of `c` differ from the reference `r` in any byte, and how many of r's are not clamped
/// (u8 / s8 strictly inside their range; f32 nonzero): a case whose outputs all clamp tests little.
struct ByteDiff {
  int64_t diff = 0, interior = 0;
};
inline ByteDiff byte_diff(const Tensor& r, const Tensor& c) {
  ByteDiff d;
  EXPECT_EQ(r.dims(), c.dims());
  EXPECT_EQ(r.dtype(), c.dtype());
  if (r.dims() != c.dims() || r.dtype() != c.dtype()) return {r.numel(), 0};
  const int64_t sz = dtype_size(r.dtype());
  for (int64_t i = 0; i < r.numel(); ++i) {
    d.diff += std::memcmp(static_cast<const char*>(r.raw()) + i * sz, static_cast<const char*>(c.raw()) + i * sz, static_cast<size_t>(sz)) != 0;
    if (r.dtype() == DType::kU8) d.interior += r.data<uint8_t>()[i] > 0 && r.data<uint8_t>()[i] < 255;
    else if (r.dtype() == DType::kI8) d.interior += r.data<int8_t>()[i] > -128 && r.data<int8_t>()[i] < 127;
    else d.interior += r.data<float>()[i] != 0;
  }
  return d;
}

}  // namespace ferry::testing
