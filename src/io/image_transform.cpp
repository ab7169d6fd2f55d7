// torchvision-on-PIL image transforms (see image_transform.h).
#include "io/image_transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace ferry {
namespace {

// Pillow's fixed-point resampling (Resample.c): 32 - 8 - 2 fractional bits.
constexpr int kPrecisionBits = 32 - 8 - 2;

// One output position: the first input index and the fixed-point weights of its window.
struct ResampleCoeffs {
  int64_t ksize = 0;
  std::vector<int64_t> first;   // per output
  std::vector<int64_t> count;   // per output
  std::vector<int32_t> weight;  // per output, ksize each
};

double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter (support 1) over
// the input span [0, in_size).
ResampleCoeffs precompute_coeffs(int64_t in_size, int64_t out_size) {
  ResampleCoeffs c;
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  c.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  c.first.resize(static_cast<size_t>(out_size));
  c.count.resize(static_cast<size_t>(out_size));
  c.weight.assign(static_cast<size_t>(out_size * c.ksize), 0);
  std::vector<double> k(static_cast<size_t>(c.ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // (int) casts truncate toward zero, as in C.
    int64_t xmin = static_cast<int64_t>(static_cast<int>(center - support + 0.5));
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(static_cast<int>(center + support + 0.5));
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      double w = triangle((static_cast<double>(x + xmin) - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      ww += w;
    }
    int32_t* out = c.weight.data() + xx * c.ksize;
    for (int64_t x = 0; x < xmax; ++x) {
      double v = k[static_cast<size_t>(x)];
      if (ww != 0.0) v /= ww;
      out[x] = v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits))
                     : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[static_cast<size_t>(xx)] = xmin;
    c.count[static_cast<size_t>(xx)] = std::max<int64_t>(xmax, 0);
  }
  return c;
}

inline uint8_t clip8(int32_t v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return static_cast<uint8_t>(v >> kPrecisionBits);
}

// Horizontal pass over input rows [y0, y0 + rows).
Image resample_horizontal(const Image& in, int64_t out_w, int64_t y0, int64_t rows, const ResampleCoeffs& c) {
  Image out;
  out.width = out_w;
  out.height = rows;
  out.pixels.resize(static_cast<size_t>(out_w * rows * 3));
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = in.row(y0 + y);
    uint8_t* dst = out.row(y);
    for (int64_t xx = 0; xx < out_w; ++xx) {
      const int32_t* k = c.weight.data() + xx * c.ksize;
      const uint8_t* s = src + c.first[static_cast<size_t>(xx)] * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int64_t x = 0; x < c.count[static_cast<size_t>(xx)]; ++x) {
        s0 += s[x * 3 + 0] * k[x];
        s1 += s[x * 3 + 1] * k[x];
        s2 += s[x * 3 + 2] * k[x];
      }
      dst[xx * 3 + 0] = clip8(s0);
      dst[xx * 3 + 1] = clip8(s1);
      dst[xx * 3 + 2] = clip8(s2);
    }
  }
  return out;
}

// Vertical pass; `c.first` is relative to `in`'s first row minus `y_offset`.
Image resample_vertical(const Image& in, int64_t out_h, int64_t y_offset, const ResampleCoeffs& c) {
  Image out;
  out.width = in.width;
  out.height = out_h;
  out.pixels.resize(static_cast<size_t>(in.width * out_h * 3));
  const int64_t stride = in.width * 3;
  std::vector<int32_t> acc(static_cast<size_t>(stride));
  for (int64_t yy = 0; yy < out_h; ++yy) {
    const int32_t* k = c.weight.data() + yy * c.ksize;
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int64_t first = c.first[static_cast<size_t>(yy)] - y_offset;
    for (int64_t y = 0; y < c.count[static_cast<size_t>(yy)]; ++y) {
      const uint8_t* s = in.row(first + y);
      const int32_t w = k[y];
      for (int64_t i = 0; i < stride; ++i) acc[static_cast<size_t>(i)] += s[i] * w;
    }
    uint8_t* dst = out.row(yy);
    for (int64_t i = 0; i < stride; ++i) dst[i] = clip8(acc[static_cast<size_t>(i)]);
  }
  return out;
}

int64_t python_round(double v) { return static_cast<int64_t>(std::nearbyint(v)); }  // half to even

// CenterCrop's offset along one axis: padding (negative) when the image is smaller.
int64_t center_offset(int64_t image, int64_t crop) {
  if (crop > image) return -((crop - image) / 2);
  return python_round(static_cast<double>(image - crop) / 2.0);
}

}  // namespace

Image resize_bilinear(const Image& in, int64_t width, int64_t height) {
  const bool need_h = width != in.width;
  const bool need_v = height != in.height;
  if (!need_h && !need_v) return in;
  if (!need_v) return resample_horizontal(in, width, 0, in.height, precompute_coeffs(in.width, width));
  ResampleCoeffs cv = precompute_coeffs(in.height, height);
  if (!need_h) return resample_vertical(in, height, 0, cv);
  // Only the input rows the vertical pass reads go through the horizontal pass.
  const int64_t y_first = cv.first[0];
  const int64_t y_last = cv.first[static_cast<size_t>(height - 1)] + cv.count[static_cast<size_t>(height - 1)];
  Image tmp = resample_horizontal(in, width, y_first, y_last - y_first, precompute_coeffs(in.width, width));
  return resample_vertical(tmp, height, y_first, cv);
}

Image crop_image(const Image& in, const CropBox& box) {
  Image out;
  out.width = box.width;
  out.height = box.height;
  out.pixels.assign(static_cast<size_t>(box.width * box.height * 3), 0);
  const int64_t x0 = std::max<int64_t>(box.left, 0), x1 = std::min(box.left + box.width, in.width);
  if (x1 <= x0) return out;
  for (int64_t y = 0; y < box.height; ++y) {
    const int64_t sy = box.top + y;
    if (sy < 0 || sy >= in.height) continue;
    std::memcpy(out.row(y) + (x0 - box.left) * 3, in.row(sy) + x0 * 3, static_cast<size_t>((x1 - x0) * 3));
  }
  return out;
}

Image flip_horizontal(const Image& in) {
  Image out = in;
  for (int64_t y = 0; y < out.height; ++y) {
    uint8_t* r = out.row(y);
    for (int64_t a = 0, b = out.width - 1; a < b; ++a, --b) {
      for (int c = 0; c < 3; ++c) std::swap(r[a * 3 + c], r[b * 3 + c]);
    }
  }
  return out;
}

Image resize_shorter_side(const Image& in, int64_t size) {
  const int64_t h = in.height, w = in.width;
  const int64_t shorter = std::min(h, w), longer = std::max(h, w);
  // Python: int(size * long / short), a correctly rounded true division then truncation.
  const int64_t new_long = static_cast<int64_t>(static_cast<double>(size * longer) / static_cast<double>(shorter));
  const int64_t new_w = w <= h ? size : new_long;
  const int64_t new_h = w <= h ? new_long : size;
  if (new_w == w && new_h == h) return in;
  return resize_bilinear(in, new_w, new_h);
}

Image center_crop(const Image& in, int64_t size) {
  if (in.width == size && in.height == size) return in;
  CropBox box{center_offset(in.height, size), center_offset(in.width, size), size, size};
  return crop_image(in, box);
}

double uniform_real(std::mt19937_64& rng, double lo, double hi) {
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  return lo + (hi - lo) * u;
}

int64_t uniform_int(std::mt19937_64& rng, int64_t n) {
  if (n <= 1) return 0;
  // Lemire's multiply-high: uniform enough for crop positions, identical everywhere.
  return static_cast<int64_t>((static_cast<unsigned __int128>(rng()) * static_cast<uint64_t>(n)) >> 64);
}

CropBox random_resized_crop_box(int64_t height, int64_t width, std::mt19937_64& rng,
                                const RandomResizedCropParams& params) {
  const double area = static_cast<double>(height * width);
  const double log_lo = std::log(params.ratio_min), log_hi = std::log(params.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform_real(rng, params.scale_min, params.scale_max);
    const double aspect = std::exp(uniform_real(rng, log_lo, log_hi));
    const int64_t w = python_round(std::sqrt(target_area * aspect));
    const int64_t h = python_round(std::sqrt(target_area / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int64_t i = uniform_int(rng, height - h + 1);
      const int64_t j = uniform_int(rng, width - w + 1);
      return CropBox{i, j, h, w};
    }
  }
  // Fallback: a center crop with the ratio clamped into range.
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < std::min(params.ratio_min, params.ratio_max)) {
    h = python_round(static_cast<double>(w) / std::min(params.ratio_min, params.ratio_max));
  } else if (in_ratio > std::max(params.ratio_min, params.ratio_max)) {
    w = python_round(static_cast<double>(h) * std::max(params.ratio_min, params.ratio_max));
  }
  return CropBox{(height - h) / 2, (width - w) / 2, h, w};
}

int64_t eval_resize_size(int64_t crop_size) { return python_round(static_cast<double>(crop_size) * 256.0 / 224.0); }

Image eval_transform(const Image& in, int64_t size) {
  return center_crop(resize_shorter_side(in, eval_resize_size(size)), size);
}

Image train_transform(const Image& in, int64_t size, std::mt19937_64& rng, const RandomResizedCropParams& params) {
  const CropBox box = random_resized_crop_box(in.height, in.width, rng, params);
  Image out = resize_bilinear(crop_image(in, box), size, size);
  if (uniform_real(rng, 0.0, 1.0) < 0.5) out = flip_horizontal(out);
  return out;
}

void to_normalized_chw(const Image& in, std::span<float> out, const std::array<float, 3>& mean,
                       const std::array<float, 3>& std) {
  const int64_t plane = in.width * in.height;
  for (int c = 0; c < 3; ++c) {
    float* dst = out.data() + c * plane;
    const float m = mean[static_cast<size_t>(c)], s = std[static_cast<size_t>(c)];
    for (int64_t i = 0; i < plane; ++i) {
      dst[i] = (static_cast<float>(in.pixels[static_cast<size_t>(i * 3 + c)]) / 255.0f - m) / s;
    }
  }
}

}  // namespace ferry
