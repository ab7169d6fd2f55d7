// Own data-movement kernels (strided copy for transpose/slice/expand/concat, gather, 2-D resize)
// and the fused attention kernel.
#include "backends/cuda/cuda_common.cuh"

namespace ferry::cuda {
namespace {

template <typename E>
__global__ void strided_copy_kernel(const E* in, E* out, StridedDesc d, int64_t n) {
  FERRY_GRID_STRIDE(i, n) {
    out[d.out_offset + strided_offset(i, d.rank, d.dims, d.out_strides)] =
        in[d.in_offset + strided_offset(i, d.rank, d.dims, d.in_strides)];
  }
}

template <typename E, typename I>
__global__ void gather_kernel(const E* data, const I* idx, E* out, int64_t axis_dim, int64_t num_idx, int64_t inner,
                              int64_t n, int* bad) {
  FERRY_GRID_STRIDE(t, n) {
    const int64_t i = t % inner;
    const int64_t j = (t / inner) % num_idx;
    const int64_t o = t / (inner * num_idx);
    int64_t k = static_cast<int64_t>(idx[j]);
    if (k < 0) k += axis_dim;
    if (k < 0 || k >= axis_dim) {
      out[t] = E{};
      if (bad) atomicCAS(bad, 0, static_cast<int>(j < 0x7ffffffe ? j + 1 : 0x7fffffff));
      continue;
    }
    out[t] = data[(o * axis_dim + k) * inner + i];
  }
}

__device__ float source_coord(float x_out, float scale, int64_t len_in, int64_t len_out, CoordMode m) {
  switch (m) {
    case CoordMode::kHalfPixel: return (x_out + 0.5f) / scale - 0.5f;
    case CoordMode::kPytorchHalfPixel: return len_out > 1 ? (x_out + 0.5f) / scale - 0.5f : 0.f;
    case CoordMode::kAlignCorners: return len_out > 1 ? x_out * (len_in - 1) / static_cast<float>(len_out - 1) : 0.f;
    case CoordMode::kTfHalfPixelForNearest: return (x_out + 0.5f) / scale;
    case CoordMode::kAsymmetric: default: return x_out / scale;
  }
}

__device__ int64_t nearest_index(float x, NearestMode m, int64_t len) {
  int64_t i;
  switch (m) {
    case NearestMode::kFloor: i = static_cast<int64_t>(floorf(x)); break;
    case NearestMode::kCeil: i = static_cast<int64_t>(ceilf(x)); break;
    case NearestMode::kRoundPreferCeil: i = static_cast<int64_t>(floorf(x + 0.5f)); break;
    case NearestMode::kRoundPreferFloor: default:
      i = (x - floorf(x) == 0.5f) ? static_cast<int64_t>(floorf(x)) : static_cast<int64_t>(roundf(x));
  }
  return i < 0 ? 0 : (i >= len ? len - 1 : i);
}

template <typename T>
__global__ void resize2d_kernel(const T* in, T* out, int64_t h_in, int64_t w_in, int64_t h_out, int64_t w_out,
                                float sh, float sw, ResizeMode mode, CoordMode coord, NearestMode nm, int64_t n) {
  FERRY_GRID_STRIDE(t, n) {
    const int64_t x = t % w_out, y = (t / w_out) % h_out, p = t / (w_out * h_out);
    const T* plane = in + p * h_in * w_in;
    const float fy = source_coord(static_cast<float>(y), sh, h_in, h_out, coord);
    const float fx = source_coord(static_cast<float>(x), sw, w_in, w_out, coord);
    if (mode == ResizeMode::kNearest) {
      out[t] = plane[nearest_index(fy, nm, h_in) * w_in + nearest_index(fx, nm, w_in)];
      continue;
    }
    const float cy = fminf(fmaxf(fy, 0.f), static_cast<float>(h_in - 1));
    const float cx = fminf(fmaxf(fx, 0.f), static_cast<float>(w_in - 1));
    const int64_t y0 = static_cast<int64_t>(floorf(cy)), x0 = static_cast<int64_t>(floorf(cx));
    const int64_t y1 = y0 + 1 < h_in ? y0 + 1 : y0, x1 = x0 + 1 < w_in ? x0 + 1 : x0;
    const float dy = cy - y0, dx = cx - x0;
    const float v = (1 - dy) * ((1 - dx) * to_f(plane[y0 * w_in + x0]) + dx * to_f(plane[y0 * w_in + x1])) +
                    dy * ((1 - dx) * to_f(plane[y1 * w_in + x0]) + dx * to_f(plane[y1 * w_in + x1]));
    out[t] = from_f<T>(v);
  }
}

constexpr int kAttnWarps = 4;
constexpr int kMaxHeadDim = 128;

// One warp per query row: lane l holds q and the accumulator for dims l, l+32, l+64, l+96.
// Keys are visited once with an online (running max) softmax.
template <typename T>
__global__ void attention_kernel(const T* q, const T* k, const T* v, const T* mask, T* out, AttentionDesc d) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kAttnWarps) + (threadIdx.x >> 5);
  const int64_t bh = blockIdx.y;
  const int64_t b = bh / d.heads, h = bh % d.heads;
  if (row >= d.seq_q) return;  // whole warp
  constexpr int kPer = kMaxHeadDim / 32;
  const T* qr = q + b * d.q_strides[0] + h * d.q_strides[1] + row * d.q_strides[2];
  const T* kb = k + b * d.k_strides[0] + h * d.k_strides[1];
  const T* vb = v + b * d.v_strides[0] + h * d.v_strides[1];
  const T* mr = mask ? mask + b * d.m_strides[0] + h * d.m_strides[1] + row * d.m_strides[2] : nullptr;
  float qv[kPer], acc[kPer];
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    const int64_t c = lane + 32 * e;
    qv[e] = c < d.head_dim ? to_f(qr[c * d.q_strides[3]]) : 0.f;
    acc[e] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  for (int64_t j = 0; j < d.seq_k; ++j) {
    float dot = 0.f;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int64_t c = lane + 32 * e;
      if (c < d.head_dim) dot += qv[e] * to_f(kb[c * d.k_strides[2] + j * d.k_strides[3]]);
    }
    float sc = warp_sum(dot) * d.scale;  // identical in every lane (butterfly sum)
    if (mr) sc += to_f(mr[j * d.m_strides[3]]);
    if (sc == -INFINITY) continue;
    const float m_new = fmaxf(m, sc);
    const float corr = expf(m - m_new), p = expf(sc - m_new);
    l = l * corr + p;
    const T* vr = vb + j * d.v_strides[2];
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int64_t c = lane + 32 * e;
      if (c < d.v_dim) acc[e] = acc[e] * corr + p * to_f(vr[c * d.v_strides[3]]);
    }
    m = m_new;
  }
  T* orow = out + b * d.o_strides[0] + h * d.o_strides[1] + row * d.o_strides[2];
  const float inv = l > 0.f ? 1.f / l : NAN;  // every key masked out: NaN, as softmax of all -inf
#pragma unroll
  for (int e = 0; e < kPer; ++e) {
    const int64_t c = lane + 32 * e;
    if (c < d.v_dim) orow[c * d.o_strides[3]] = from_f<T>(acc[e] * inv);
  }
}

}  // namespace

cudaError_t launch_strided_copy(int elem_size, const void* in, void* out, const StridedDesc& d, cudaStream_t s) {
  int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) n *= d.dims[i];
  if (n == 0) return cudaSuccess;
  switch (elem_size) {
    case 1: strided_copy_kernel<uint8_t><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const uint8_t*>(in), static_cast<uint8_t*>(out), d, n); break;
    case 2: strided_copy_kernel<uint16_t><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(out), d, n); break;
    case 4: strided_copy_kernel<uint32_t><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const uint32_t*>(in), static_cast<uint32_t*>(out), d, n); break;
    case 8: strided_copy_kernel<uint64_t><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const uint64_t*>(in), static_cast<uint64_t*>(out), d, n); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_gather(int elem_size, const void* data, int index_dtype, const void* indices, void* out,
                          int64_t outer, int64_t axis_dim, int64_t num_indices, int64_t inner, int* bad_index,
                          cudaStream_t s) {
  const int64_t n = outer * num_indices * inner;
  if (n == 0) return cudaSuccess;
  if (index_dtype != kI64 && index_dtype != kI32) return cudaErrorInvalidValue;
  auto go = [&](auto e) {
    using E = decltype(e);
    if (index_dtype == kI64)
      gather_kernel<E, int64_t><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const E*>(data), static_cast<const int64_t*>(indices),
                                                                  static_cast<E*>(out), axis_dim, num_indices, inner, n, bad_index);
    else
      gather_kernel<E, int32_t><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const E*>(data), static_cast<const int32_t*>(indices),
                                                                  static_cast<E*>(out), axis_dim, num_indices, inner, n, bad_index);
  };
  switch (elem_size) {
    case 1: go(uint8_t{}); break;
    case 2: go(uint16_t{}); break;
    case 4: go(uint32_t{}); break;
    case 8: go(uint64_t{}); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_resize2d(int dtype, const void* in, void* out, int64_t planes, int64_t h_in, int64_t w_in,
                            int64_t h_out, int64_t w_out, float scale_h, float scale_w, ResizeMode mode,
                            CoordMode coord, NearestMode nearest, cudaStream_t s) {
  const int64_t n = planes * h_out * w_out;
  if (n == 0) return cudaSuccess;
  const bool ok = dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    resize2d_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(in), static_cast<T*>(out), h_in, w_in,
                                                         h_out, w_out, scale_h, scale_w, mode, coord, nearest, n);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t launch_attention(int dtype, const void* q, const void* k, const void* v, const void* mask, void* out,
                             const AttentionDesc& d, cudaStream_t s) {
  if (d.head_dim > kMaxHeadDim || d.head_dim <= 0 || d.v_dim > kMaxHeadDim || d.v_dim <= 0) return cudaErrorInvalidValue;
  if (d.batch * d.heads * d.seq_q == 0) return cudaSuccess;
  if (d.batch * d.heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((d.seq_q + kAttnWarps - 1) / kAttnWarps), static_cast<unsigned>(d.batch * d.heads));
  const bool ok = dispatch_float(dtype, [&](auto t) {
    using T = decltype(t);
    attention_kernel<T><<<grid, 32 * kAttnWarps, 0, s>>>(static_cast<const T*>(q), static_cast<const T*>(k),
                                                         static_cast<const T*>(v), static_cast<const T*>(mask),
                                                         static_cast<T*>(out), d);
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace ferry::cuda
