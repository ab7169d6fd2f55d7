// Own elementwise kernels: unary activations, broadcast binary/compare/where, casts, per-channel
// affine (BatchNormalization). Float types compute in f32 and round once.
#include "backends/cuda/cuda_common.cuh"

namespace ferry::cuda {
namespace {

__device__ __forceinline__ float apply_unary(UnaryOp op, float x, float a, float b) {
  switch (op) {
    case UnaryOp::kIdentity: return x;
    case UnaryOp::kRelu: return x > 0.f ? x : 0.f;
    case UnaryOp::kSigmoid: return 1.f / (1.f + expf(-x));
    case UnaryOp::kTanh: return tanhf(x);
    case UnaryOp::kExp: return expf(x);
    case UnaryOp::kLog: return logf(x);
    case UnaryOp::kSqrt: return sqrtf(x);
    case UnaryOp::kNeg: return -x;
    case UnaryOp::kAbs: return fabsf(x);
    case UnaryOp::kErf: return erff(x);
    case UnaryOp::kReciprocal: return 1.f / x;
    case UnaryOp::kFloor: return floorf(x);
    case UnaryOp::kCeil: return ceilf(x);
    case UnaryOp::kGeluErf: return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case UnaryOp::kGeluTanh: return 0.5f * x * (1.f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
    case UnaryOp::kLeakyRelu: return x >= 0.f ? x : a * x;
    case UnaryOp::kClip: return fminf(fmaxf(x, a), b);
    case UnaryOp::kHardSigmoid: return fmaxf(0.f, fminf(1.f, a * x + b));
    case UnaryOp::kHardSwish: return x * fmaxf(0.f, fminf(1.f, x / 6.f + 0.5f));
    case UnaryOp::kSilu: return x / (1.f + expf(-x));
    case UnaryOp::kSoftplus: return x > 20.f ? x : log1pf(expf(x));
    case UnaryOp::kSin: return sinf(x);
    case UnaryOp::kCos: return cosf(x);
    case UnaryOp::kRound: return rintf(x);
    case UnaryOp::kSign: return x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f);
    case UnaryOp::kElu: return x >= 0.f ? x : a * (expf(x) - 1.f);
  }
  return x;
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* in, T* out, int64_t n, float a, float b) {
  FERRY_GRID_STRIDE(i, n) {
    const float x = to_f(in[i]);
    // Clip of NaN stays NaN (fminf/fmaxf would drop it).
    out[i] = from_f<T>(op == UnaryOp::kClip && x != x ? x : apply_unary(op, x, a, b));
  }
}

template <typename T>
__device__ __forceinline__ float apply_binary_f(BinaryOp op, float x, float y) {
  switch (op) {
    case BinaryOp::kAdd: return x + y;
    case BinaryOp::kSub: return x - y;
    case BinaryOp::kMul: return x * y;
    case BinaryOp::kDiv: return x / y;
    case BinaryOp::kPow: return powf(x, y);
    case BinaryOp::kMax: return (x != x || y != y) ? x + y : fmaxf(x, y);
    case BinaryOp::kMin: return (x != x || y != y) ? x + y : fminf(x, y);
    case BinaryOp::kMod: return fmodf(x, y);
    case BinaryOp::kPRelu: return x >= 0.f ? x : x * y;
  }
  return x;
}

template <typename I>
__device__ __forceinline__ I apply_binary_i(BinaryOp op, I x, I y) {
  switch (op) {
    case BinaryOp::kAdd: return x + y;
    case BinaryOp::kSub: return x - y;
    case BinaryOp::kMul: return x * y;
    case BinaryOp::kDiv: return y == 0 ? I(0) : x / y;
    case BinaryOp::kMax: return x > y ? x : y;
    case BinaryOp::kMin: return x < y ? x : y;
    case BinaryOp::kMod: {  // ONNX Mod with fmod=0: the result takes the divisor's sign
      if (y == 0) return I(0);
      I r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return r;
    }
    default: return x;
  }
}

struct Strides {
  int64_t v[kMaxRank];
};

template <typename T>
__global__ void binary_float_kernel(BinaryOp op, const T* a, const T* b, T* out, StridedDesc d, Strides bs, int64_t n) {
  FERRY_GRID_STRIDE(i, n) {
    const int64_t ia = strided_offset(i, d.rank, d.dims, d.in_strides);
    const int64_t ib = strided_offset(i, d.rank, d.dims, bs.v);
    out[i] = from_f<T>(apply_binary_f<T>(op, to_f(a[ia]), to_f(b[ib])));
  }
}

template <typename I>
__global__ void binary_int_kernel(BinaryOp op, const I* a, const I* b, I* out, StridedDesc d, Strides bs, int64_t n) {
  FERRY_GRID_STRIDE(i, n) {
    const int64_t ia = strided_offset(i, d.rank, d.dims, d.in_strides);
    const int64_t ib = strided_offset(i, d.rank, d.dims, bs.v);
    out[i] = apply_binary_i<I>(op, a[ia], b[ib]);
  }
}

template <typename T>
__device__ __forceinline__ double as_double(T x) { return static_cast<double>(x); }
template <> __device__ __forceinline__ double as_double<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ double as_double<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__global__ void compare_kernel(CompareOp op, const T* a, const T* b, uint8_t* out, StridedDesc d, Strides bs, int64_t n) {
  FERRY_GRID_STRIDE(i, n) {
    const double x = as_double(a[strided_offset(i, d.rank, d.dims, d.in_strides)]);
    const double y = as_double(b[strided_offset(i, d.rank, d.dims, bs.v)]);
    bool r = false;
    switch (op) {
      case CompareOp::kEqual: r = x == y; break;
      case CompareOp::kLess: r = x < y; break;
      case CompareOp::kGreater: r = x > y; break;
      case CompareOp::kLessEqual: r = x <= y; break;
      case CompareOp::kGreaterEqual: r = x >= y; break;
      case CompareOp::kAnd: r = (x != 0) && (y != 0); break;
      case CompareOp::kOr: r = (x != 0) || (y != 0); break;
      case CompareOp::kXor: r = (x != 0) != (y != 0); break;
    }
    out[i] = r ? 1 : 0;
  }
}

template <typename E>
__global__ void where_kernel(const uint8_t* c, const E* x, const E* y, E* out, StridedDesc d, Strides xs, Strides ys,
                             int64_t n) {
  FERRY_GRID_STRIDE(i, n) {
    const bool take_x = c[strided_offset(i, d.rank, d.dims, d.in_strides)] != 0;
    out[i] = take_x ? x[strided_offset(i, d.rank, d.dims, xs.v)] : y[strided_offset(i, d.rank, d.dims, ys.v)];
  }
}

template <typename From, typename To>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same_v<To, __half>) return __float2half_rn(static_cast<float>(as_double(v)));
  else if constexpr (std::is_same_v<To, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(as_double(v)));
  else if constexpr (std::is_same_v<To, bool>) return as_double(v) != 0.0;
  else if constexpr (std::is_same_v<From, __half> || std::is_same_v<From, __nv_bfloat16>) return static_cast<To>(as_double(v));
  else return static_cast<To>(v);
}

template <typename From, typename To>
__global__ void cast_kernel(const From* in, To* out, int64_t n) {
  FERRY_GRID_STRIDE(i, n) out[i] = convert<From, To>(in[i]);
}

template <typename F>
bool dispatch_cast_type(int dtype, F&& f) {
  switch (dtype) {
    case kF32: f(float{}); return true;
    case kF16: f(__half{}); return true;
    case kBF16: f(__nv_bfloat16{}); return true;
    case kF64: f(double{}); return true;
    case kI64: f(int64_t{}); return true;
    case kI32: f(int32_t{}); return true;
    case kI8: f(int8_t{}); return true;
    case kU8: f(uint8_t{}); return true;
    case kBool: f(bool{}); return true;
    default: return false;
  }
}

template <typename T>
__global__ void channel_affine_kernel(const T* x, const float* a, const float* b, T* y, int64_t channels, int64_t inner,
                                      int64_t n) {
  FERRY_GRID_STRIDE(i, n) {
    const int64_t c = (i / inner) % channels;
    y[i] = from_f<T>(to_f(x[i]) * a[c] + b[c]);
  }
}

Strides to_strides(const int64_t* s, int rank) {
  Strides r{};
  for (int i = 0; i < rank && i < kMaxRank; ++i) r.v[i] = s[i];
  return r;
}

int64_t walk_size(const StridedDesc& d) {
  int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) n *= d.dims[i];
  return n;
}

}  // namespace

cudaError_t launch_unary(UnaryOp op, int dtype, const void* in, void* out, int64_t n, float alpha, float beta,
                         cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const bool ok = dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    unary_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<const T*>(in), static_cast<T*>(out), n, alpha, beta);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_binary(BinaryOp op, int dtype, const void* a, const void* b, void* out, const StridedDesc& d,
                          const int64_t* b_strides, cudaStream_t s) {
  const int64_t n = walk_size(d);
  if (n == 0) return cudaSuccess;
  const Strides bs = to_strides(b_strides, d.rank);
  bool ok = dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    binary_float_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                              static_cast<T*>(out), d, bs, n);
  });
  if (!ok && (dtype == kI64 || dtype == kI32) && op != BinaryOp::kPow && op != BinaryOp::kPRelu) {
    ok = true;
    if (dtype == kI64)
      binary_int_kernel<int64_t><<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<const int64_t*>(a),
                                                                    static_cast<const int64_t*>(b),
                                                                    static_cast<int64_t*>(out), d, bs, n);
    else
      binary_int_kernel<int32_t><<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<const int32_t*>(a),
                                                                    static_cast<const int32_t*>(b),
                                                                    static_cast<int32_t*>(out), d, bs, n);
  }
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_compare(CompareOp op, int dtype, const void* a, const void* b, void* out, const StridedDesc& d,
                           const int64_t* b_strides, cudaStream_t s) {
  const int64_t n = walk_size(d);
  if (n == 0) return cudaSuccess;
  const Strides bs = to_strides(b_strides, d.rank);
  const bool ok = dispatch_cast_type(dtype, [&](auto t) {
    using T = decltype(t);
    compare_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<const T*>(a), static_cast<const T*>(b),
                                                         static_cast<uint8_t*>(out), d, bs, n);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_where(int elem_size, const void* cond, const void* x, const void* y, void* out, const StridedDesc& d,
                         const int64_t* x_strides, const int64_t* y_strides, cudaStream_t s) {
  const int64_t n = walk_size(d);
  if (n == 0) return cudaSuccess;
  const Strides xs = to_strides(x_strides, d.rank), ys = to_strides(y_strides, d.rank);
  const auto* c = static_cast<const uint8_t*>(cond);
  switch (elem_size) {
    case 1: where_kernel<uint8_t><<<blocks_for(n), kThreads, 0, s>>>(c, static_cast<const uint8_t*>(x), static_cast<const uint8_t*>(y), static_cast<uint8_t*>(out), d, xs, ys, n); break;
    case 2: where_kernel<uint16_t><<<blocks_for(n), kThreads, 0, s>>>(c, static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(y), static_cast<uint16_t*>(out), d, xs, ys, n); break;
    case 4: where_kernel<uint32_t><<<blocks_for(n), kThreads, 0, s>>>(c, static_cast<const uint32_t*>(x), static_cast<const uint32_t*>(y), static_cast<uint32_t*>(out), d, xs, ys, n); break;
    case 8: where_kernel<uint64_t><<<blocks_for(n), kThreads, 0, s>>>(c, static_cast<const uint64_t*>(x), static_cast<const uint64_t*>(y), static_cast<uint64_t*>(out), d, xs, ys, n); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_cast(int from, int to, const void* in, void* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  bool ok = false;
  dispatch_cast_type(from, [&](auto f) {
    using F = decltype(f);
    ok = dispatch_cast_type(to, [&](auto t) {
      using T = decltype(t);
      cast_kernel<F, T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const F*>(in), static_cast<T*>(out), n);
    });
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_channel_affine(int dtype, const void* x, const float* a, const float* b, void* y, int64_t outer,
                                  int64_t channels, int64_t inner, cudaStream_t s) {
  const int64_t n = outer * channels * inner;
  if (n == 0) return cudaSuccess;
  const bool ok = dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    channel_affine_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), a, b, static_cast<T*>(y),
                                                                channels, inner, n);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace ferry::cuda
