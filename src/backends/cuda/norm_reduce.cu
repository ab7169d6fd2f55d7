// Own row-wise kernels: softmax / log-softmax, layer normalization, reductions. Accumulation is
// in f32 for every float type.
#include <cfloat>

#include "backends/cuda/cuda_common.cuh"

namespace ferry::cuda {
namespace {

constexpr int kRowThreads = 256;

/// Sum (or max) over the block; every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  v = kMax ? warp_max(v) : warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  float r = threadIdx.x < warps ? shared[threadIdx.x] : (kMax ? -FLT_MAX : 0.f);
  if (warp == 0) r = kMax ? warp_max(r) : warp_sum(r);
  if (threadIdx.x == 0) shared[0] = r;
  __syncthreads();
  r = shared[0];
  __syncthreads();
  return r;
}

// One block per row of a [outer, n] view (inner == 1).
template <typename T>
__global__ void softmax_rows(const T* in, T* out, int64_t n, bool log) {
  __shared__ float shared[32];
  const T* x = in + blockIdx.x * n;
  T* y = out + blockIdx.x * n;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, to_f(x[j]));
  m = block_reduce<true>(m, shared);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(to_f(x[j]) - m);
  s = block_reduce<false>(s, shared);
  const float ls = logf(s), inv = 1.f / s;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = to_f(x[j]) - m;
    y[j] = from_f<T>(log ? v - ls : expf(v) * inv);
  }
}

// One thread per (outer, inner) column of a [outer, n, inner] view.
template <typename T>
__global__ void softmax_columns(const T* in, T* out, int64_t outer, int64_t n, int64_t inner, bool log) {
  FERRY_GRID_STRIDE(c, outer * inner) {
    const int64_t o = c / inner, i = c - o * inner;
    const T* x = in + o * n * inner + i;
    T* y = out + o * n * inner + i;
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = fmaxf(m, to_f(x[j * inner]));
    float s = 0.f;
    for (int64_t j = 0; j < n; ++j) s += expf(to_f(x[j * inner]) - m);
    const float ls = logf(s), inv = 1.f / s;
    for (int64_t j = 0; j < n; ++j) {
      const float v = to_f(x[j * inner]) - m;
      y[j * inner] = from_f<T>(log ? v - ls : expf(v) * inv);
    }
  }
}

template <typename T>
__global__ void layernorm_rows(const T* in, const T* scale, const T* bias, T* out, int64_t cols, float eps) {
  __shared__ float shared[32];
  const T* x = in + blockIdx.x * cols;
  T* y = out + blockIdx.x * cols;
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += to_f(x[j]);
  const float mean = block_reduce<false>(s, shared) / static_cast<float>(cols);
  float v = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    const float d = to_f(x[j]) - mean;
    v += d * d;
  }
  const float inv_std = rsqrtf(block_reduce<false>(v, shared) / static_cast<float>(cols) + eps);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float r = (to_f(x[j]) - mean) * inv_std;
    if (scale) r *= to_f(scale[j]);
    if (bias) r += to_f(bias[j]);
    y[j] = from_f<T>(r);
  }
}

struct RDims {
  int64_t dims[kMaxRank];
  int64_t strides[kMaxRank];
};

template <typename T>
__global__ void reduce_kernel(ReduceOp op, const T* in, T* out, StridedDesc d, int r_rank, RDims r, int64_t n_out,
                              int64_t n_red) {
  FERRY_GRID_STRIDE(o, n_out) {
    const T* base = in + strided_offset(o, d.rank, d.dims, d.in_strides);
    float acc = 0.f;
    if (op == ReduceOp::kMax) acc = -INFINITY;
    if (op == ReduceOp::kMin) acc = INFINITY;
    if (op == ReduceOp::kProd) acc = 1.f;
    float m = -INFINITY;
    if (op == ReduceOp::kLogSumExp)
      for (int64_t j = 0; j < n_red; ++j) m = fmaxf(m, to_f(base[strided_offset(j, r_rank, r.dims, r.strides)]));
    bool nan = false;
    for (int64_t j = 0; j < n_red; ++j) {
      const float x = to_f(base[strided_offset(j, r_rank, r.dims, r.strides)]);
      nan |= x != x;
      switch (op) {
        case ReduceOp::kSum: case ReduceOp::kMean: acc += x; break;
        case ReduceOp::kMax: acc = fmaxf(acc, x); break;
        case ReduceOp::kMin: acc = fminf(acc, x); break;
        case ReduceOp::kProd: acc *= x; break;
        case ReduceOp::kSumSquare: case ReduceOp::kL2: acc += x * x; break;
        case ReduceOp::kL1: acc += fabsf(x); break;
        case ReduceOp::kLogSumExp: acc += expf(x - m); break;
      }
    }
    if (op == ReduceOp::kMean) acc /= static_cast<float>(n_red);
    if (op == ReduceOp::kL2) acc = sqrtf(acc);
    if (op == ReduceOp::kLogSumExp) acc = logf(acc) + m;
    if (nan && (op == ReduceOp::kMax || op == ReduceOp::kMin)) acc = NAN;
    out[o] = from_f<T>(acc);
  }
}

}  // namespace

cudaError_t launch_softmax(int dtype, const void* in, void* out, int64_t outer, int64_t n, int64_t inner, bool log,
                           cudaStream_t s) {
  if (outer * n * inner == 0) return cudaSuccess;
  const bool ok = dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    if (inner == 1 && outer <= 0x7fffffff) {
      const int threads = n >= kRowThreads ? kRowThreads : ((static_cast<int>(n) + 31) / 32) * 32;
      softmax_rows<T><<<static_cast<unsigned>(outer), threads, 0, s>>>(static_cast<const T*>(in), static_cast<T*>(out), n, log);
    } else {
      softmax_columns<T><<<blocks_for(outer * inner), kThreads, 0, s>>>(static_cast<const T*>(in), static_cast<T*>(out),
                                                                      outer, n, inner, log);
    }
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_layernorm(int dtype, const void* x, const void* scale, const void* bias, void* y, int64_t rows,
                             int64_t cols, float epsilon, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  const int threads = cols >= kRowThreads ? kRowThreads : ((static_cast<int>(cols) + 31) / 32) * 32;
  const bool ok = dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    layernorm_rows<T><<<static_cast<unsigned>(rows), threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(scale), static_cast<const T*>(bias), static_cast<T*>(y), cols,
        epsilon);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_reduce(ReduceOp op, int dtype, const void* in, void* out, const StridedDesc& d, int r_rank,
                          const int64_t* r_dims, const int64_t* r_strides, cudaStream_t s) {
  int64_t n_out = 1, n_red = 1;
  for (int i = 0; i < d.rank; ++i) n_out *= d.dims[i];
  RDims r{};
  for (int i = 0; i < r_rank && i < kMaxRank; ++i) {
    r.dims[i] = r_dims[i];
    r.strides[i] = r_strides[i];
    n_red *= r_dims[i];
  }
  if (n_out == 0) return cudaSuccess;
  const bool ok = dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    reduce_kernel<T><<<blocks_for(n_out), kThreads, 0, s>>>(op, static_cast<const T*>(in), static_cast<T*>(out), d,
                                                           r_rank, r, n_out, n_red);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace ferry::cuda
