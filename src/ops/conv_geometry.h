// The reference convolutions' im2col machinery, shared by Conv / ConvTranspose (ops/conv.cpp) and
// ConvInteger / QLinearConv (ops/quantize_integer.cpp). A convolution relates a "grid" of positions q
// (Conv: output positions; ConvTranspose: input positions) to an "image" (Conv: the input;
// ConvTranspose: the output): kernel tap k of grid position q touches image position
// p[d] = q[d] * stride[d] - pad_begin[d] + k[d] * dilation[d].
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ops/conv_pool_util.h"

namespace ferry {

/// im2col buffers hold at most this many elements; bigger convolutions are done in column chunks.
constexpr int64_t kColumnBudget = int64_t(1) << 22;

/// The grid/image relation of one convolution (sizes are products over the spatial axes).
struct TapGeom {
  int64_t nd = 0;
  std::vector<int64_t> grid, image, kernel, stride, dilation, pad;
  int64_t grid_size = 0, image_size = 0, kernel_size = 0;
};

/// The TapGeom of a forward convolution (grid = output, image = input) from its attributes and
/// per-axis geometry (conv_pool_axis).
inline TapGeom conv_tap_geom(const SpatialAttrs& a, const std::vector<AxisGeom>& axes) {
  TapGeom g;
  g.nd = static_cast<int64_t>(axes.size());
  g.grid_size = g.image_size = g.kernel_size = 1;
  for (int64_t i = 0; i < g.nd; ++i) {
    g.grid.push_back(axes[i].out);
    g.image.push_back(axes[i].in);
    g.kernel.push_back(a.kernel[i]);
    g.stride.push_back(a.strides[i]);
    g.dilation.push_back(a.dilations[i]);
    g.pad.push_back(axes[i].pad_begin);
    g.grid_size *= axes[i].out;
    g.image_size *= axes[i].in;
    g.kernel_size *= a.kernel[i];
  }
  return g;
}

/// For kernel tap `kpos`, visits grid positions q in [q0, q1) in row-major order and calls
/// fn(q - q0, p) where p is the flattened image offset of the tap, or -1 when it falls in the padding.
template <class Fn>
void walk_taps(const TapGeom& g, const std::vector<int64_t>& kpos, int64_t q0, int64_t q1, std::vector<int64_t>& q,
               Fn&& fn) {
  const int64_t L = g.nd - 1;
  int64_t rem = q0;
  for (int64_t d = L; d >= 0; --d) {
    q[d] = rem % g.grid[d];
    rem /= g.grid[d];
  }
  int64_t pos = q0;
  while (pos < q1) {
    const int64_t run = std::min(g.grid[L] - q[L], q1 - pos);
    bool inside = true;
    int64_t off = 0;
    for (int64_t d = 0; d < L; ++d) {
      const int64_t p = q[d] * g.stride[d] - g.pad[d] + kpos[d] * g.dilation[d];
      if (p < 0 || p >= g.image[d]) inside = false;
      off = off * g.image[d] + p;
    }
    off *= g.image[L];
    const int64_t base = q[L] * g.stride[L] - g.pad[L] + kpos[L] * g.dilation[L];
    const int64_t t0 = pos - q0;
    for (int64_t j = 0; j < run; ++j) {
      const int64_t p = base + j * g.stride[L];
      fn(t0 + j, (inside && p >= 0 && p < g.image[L]) ? off + p : int64_t(-1));
    }
    pos += run;
    q[L] += run;
    for (int64_t d = L; d > 0 && q[d] == g.grid[d]; --d) {
      q[d] = 0;
      ++q[d - 1];
    }
  }
}

/// Row-major coordinates of `index` in `dims`.
inline void unravel(int64_t index, const std::vector<int64_t>& dims, std::vector<int64_t>& coords) {
  for (int64_t d = static_cast<int64_t>(dims.size()) - 1; d >= 0; --d) {
    coords[d] = index % dims[d];
    index /= dims[d];
  }
}

/// col[(c * KS + kidx) * ncols + (q - q0)] = image value under tap kidx of grid position q, for the
/// `channels` planes of `image` (each g.image_size long) and q in [q0, q1); 0 in the padding.
template <typename T>
void im2col(const T* image, int64_t channels, const TapGeom& g, int64_t q0, int64_t q1, T* col) {
  const int64_t ncols = q1 - q0;
  std::vector<int64_t> kpos(g.nd), q(g.nd);
  for (int64_t c = 0; c < channels; ++c) {
    const T* src = image + c * g.image_size;
    for (int64_t kidx = 0; kidx < g.kernel_size; ++kidx) {
      unravel(kidx, g.kernel, kpos);
      T* dst = col + (c * g.kernel_size + kidx) * ncols;
      walk_taps(g, kpos, q0, q1, q, [&](int64_t t, int64_t p) { dst[t] = p >= 0 ? src[p] : T(0); });
    }
  }
}

/// The transpose of im2col: image[p] += col[...] for every tap that lands inside the image.
template <typename T>
void col2im(const T* col, int64_t channels, const TapGeom& g, int64_t q0, int64_t q1, T* image) {
  const int64_t ncols = q1 - q0;
  std::vector<int64_t> kpos(g.nd), q(g.nd);
  for (int64_t c = 0; c < channels; ++c) {
    T* dst = image + c * g.image_size;
    for (int64_t kidx = 0; kidx < g.kernel_size; ++kidx) {
      unravel(kidx, g.kernel, kpos);
      const T* src = col + (c * g.kernel_size + kidx) * ncols;
      walk_taps(g, kpos, q0, q1, q, [&](int64_t t, int64_t p) {
        if (p >= 0) dst[p] += src[t];
      });
    }
  }
}

}  // namespace ferry
