#include "ir/dtype.h"

#include <cmath>

namespace ferry {

int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: case DType::kU32: return 4;
    case DType::kF64: case DType::kI64: case DType::kU64: return 8;
    case DType::kF16: case DType::kBF16: case DType::kI16: case DType::kU16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: return 1;
    case DType::kString: case DType::kUndefined: return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
    case DType::kI16: return "i16";
    case DType::kU16: return "u16";
    case DType::kI32: return "i32";
    case DType::kU32: return "u32";
    case DType::kI64: return "i64";
    case DType::kU64: return "u64";
    case DType::kBool: return "bool";
    case DType::kString: return "string";
    case DType::kUndefined: return "undefined";
  }
  return "undefined";
}

const char* dtype_numpy_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kF64: return "float64";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    case DType::kI8: return "int8";
    case DType::kU8: return "uint8";
    case DType::kI16: return "int16";
    case DType::kU16: return "uint16";
    case DType::kI32: return "int32";
    case DType::kU32: return "uint32";
    case DType::kI64: return "int64";
    case DType::kU64: return "uint64";
    case DType::kBool: return "bool";
    case DType::kString: return "str";
    case DType::kUndefined: return "undefined";
  }
  return "undefined";
}

bool dtype_from_onnx(int32_t v, DType* out) {
  switch (v) {
    case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: case 9: case 10: case 11:
    case 12: case 13: case 16:
      *out = static_cast<DType>(v);
      return true;
    default:
      return false;
  }
}

bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kF16 || t == DType::kBF16;
}
bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::kI8: case DType::kU8: case DType::kI16: case DType::kU16: case DType::kI32:
    case DType::kU32: case DType::kI64: case DType::kU64: return true;
    default: return false;
  }
}
bool dtype_is_signed(DType t) {
  return t == DType::kI8 || t == DType::kI16 || t == DType::kI32 || t == DType::kI64 || dtype_is_float(t);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: value = mant * 2^-24
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (absu >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  if (absu < 0x38800000u) {                        // below 2^-14: subnormal half or zero
    // value * 2^24 rounded to nearest even gives the subnormal mantissa.
    float a;
    std::memcpy(&a, &absu, 4);
    float scaled = a * 16777216.0f;  // exact (power of two)
    float r = std::nearbyint(scaled);  // default rounding mode: nearest even
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t mant = absu & 0x7fffffu;
  uint32_t exp = (absu >> 23) - 112;
  uint32_t half = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half += 1;
  return sign | static_cast<uint16_t>(half);
}

}  // namespace ferry
