// Element helpers shared by the quantize family (QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear: ops/quantize.cpp) and the integer ops (ops/quantize_integer.cpp).
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/registry.h"

namespace ferry {

/// The value range of an 8- or 16-bit integer type; false for other types.
inline bool quant_range(DType t, float* lo, float* hi) {
  switch (t) {
    case DType::kU8: *lo = 0; *hi = 255; return true;
    case DType::kI8: *lo = -128; *hi = 127; return true;
    case DType::kU16: *lo = 0; *hi = 65535; return true;
    case DType::kI16: *lo = -32768; *hi = 32767; return true;
    default: return false;
  }
}

/// round_half_even(v) + zp, saturated to [lo, hi]; NaN quantizes like 0.
inline float quantize_value(float v, float zp, float lo, float hi) {
  if (std::isnan(v)) v = 0.0f;
  float q = std::nearbyint(v) + zp;
  return q < lo ? lo : (q > hi ? hi : q);
}

/// Writes float values that are already integral and in range into a tensor of an 8/16-bit type.
inline void store_quantized(const std::vector<float>& q, Tensor* out) {
  const int64_t n = out->numel();
  switch (out->dtype()) {
    case DType::kU8: for (int64_t i = 0; i < n; ++i) out->mutable_data<uint8_t>()[i] = static_cast<uint8_t>(q[i]); break;
    case DType::kI8: for (int64_t i = 0; i < n; ++i) out->mutable_data<int8_t>()[i] = static_cast<int8_t>(q[i]); break;
    case DType::kU16: for (int64_t i = 0; i < n; ++i) out->mutable_data<uint16_t>()[i] = static_cast<uint16_t>(q[i]); break;
    case DType::kI16: for (int64_t i = 0; i < n; ++i) out->mutable_data<int16_t>()[i] = static_cast<int16_t>(q[i]); break;
    default: break;
  }
}

/// Integer tensor elements as int32 (for 8/16-bit and int32 inputs).
inline std::vector<int32_t> to_int32(const Tensor& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  switch (t.dtype()) {
    case DType::kU8: for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<uint8_t>()[i]; break;
    case DType::kI8: for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<int8_t>()[i]; break;
    case DType::kU16: for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<uint16_t>()[i]; break;
    case DType::kI16: for (int64_t i = 0; i < t.numel(); ++i) v[i] = t.data<int16_t>()[i]; break;
    case DType::kI32: std::memcpy(v.data(), t.data<int32_t>(), static_cast<size_t>(t.numel()) * 4); break;
    default: for (int64_t i = 0; i < t.numel(); ++i) v[i] = static_cast<int32_t>(t.get_int64(i)); break;
  }
  return v;
}

inline bool is_8bit(DType t) { return t == DType::kU8 || t == DType::kI8; }

template <class Ctx>
Status check_8bit(Ctx& ctx, DType t, const std::string& name) {
  if (t != DType::kUndefined && !is_8bit(t))
    return ctx.error("input '" + name + "' has element type " + dtype_name(t) + "; expected uint8 or int8");
  return Status::ok();
}

template <class Ctx>
Status check_float_scale(Ctx& ctx, DType t, const std::string& name) {
  if (t != DType::kUndefined && !dtype_is_float(t))
    return ctx.error("input '" + name + "' has element type " + dtype_name(t) + "; expected a float type");
  return Status::ok();
}

inline bool is_scalar_like(const Shape& s) {
  if (s.rank() == 0) return true;
  return s.rank() == 1 && s.dims[0].is_known() && s.dims[0].value == 1;
}

}  // namespace ferry
