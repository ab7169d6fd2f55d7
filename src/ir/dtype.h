// Element types of tensors, with the ONNX TensorProto numbering.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace ferry {

/// Values equal ONNX TensorProto::DataType so import is a range check, not a table.
enum class DType : int32_t {
  kUndefined = 0,
  kF32 = 1,
  kU8 = 2,
  kI8 = 3,
  kU16 = 4,
  kI16 = 5,
  kI32 = 6,
  kI64 = 7,
  kString = 8,
  kBool = 9,
  kF16 = 10,
  kF64 = 11,
  kU32 = 12,
  kU64 = 13,
  kBF16 = 16,
};

/// Bytes per element; 0 for kUndefined; sizeof(std::string) is not used for strings (returns 0).
int64_t dtype_size(DType t);
/// Short name: "f32", "i64", "bool", ...
const char* dtype_name(DType t);
/// numpy's name: "float32", "int64", "bool", ...
const char* dtype_numpy_name(DType t);
/// True for the ONNX numbers ferry knows.
bool dtype_from_onnx(int32_t onnx_type, DType* out);
bool dtype_is_float(DType t);   // f16, bf16, f32, f64
bool dtype_is_integer(DType t); // signed or unsigned ints (not bool)
bool dtype_is_signed(DType t);

/// IEEE half and bfloat16 stored as raw bits; conversion rounds to nearest even.
struct Float16 {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
inline float bf16_to_f32(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// Maps a C++ element type to its DType.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kI8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kI16; };
template <> struct DTypeOf<uint16_t> { static constexpr DType value = DType::kU16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::kU32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<uint64_t> { static constexpr DType value = DType::kU64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<Float16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<std::string> { static constexpr DType value = DType::kString; };

}  // namespace ferry

/// Calls `FN<T>(args...)` with T the C++ type of `dtype`, for the numeric types and bool.
/// Expands to a switch; unlisted types fall to `default:`.
#define FERRY_DISPATCH_CASE(DT, T, ...) \
  case ::ferry::DType::DT: {            \
    using scalar_t = T;                 \
    __VA_ARGS__;                        \
    break;                              \
  }
#define FERRY_DISPATCH_FLOAT_CASES(...)                  \
  FERRY_DISPATCH_CASE(kF32, float, __VA_ARGS__)          \
  FERRY_DISPATCH_CASE(kF64, double, __VA_ARGS__)
#define FERRY_DISPATCH_INT_CASES(...)                    \
  FERRY_DISPATCH_CASE(kI8, int8_t, __VA_ARGS__)          \
  FERRY_DISPATCH_CASE(kU8, uint8_t, __VA_ARGS__)         \
  FERRY_DISPATCH_CASE(kI16, int16_t, __VA_ARGS__)        \
  FERRY_DISPATCH_CASE(kU16, uint16_t, __VA_ARGS__)       \
  FERRY_DISPATCH_CASE(kI32, int32_t, __VA_ARGS__)        \
  FERRY_DISPATCH_CASE(kU32, uint32_t, __VA_ARGS__)       \
  FERRY_DISPATCH_CASE(kI64, int64_t, __VA_ARGS__)        \
  FERRY_DISPATCH_CASE(kU64, uint64_t, __VA_ARGS__)
