// Image transforms with torchvision's semantics on PIL images: the ImageNet training
// (RandomResizedCrop + RandomHorizontalFlip) and evaluation (Resize + CenterCrop) pipelines,
// then ToTensor + Normalize into float CHW.
//
// Resizing reproduces PIL's Image.resize(..., BILINEAR) (Pillow's Resample.c: a triangle
// filter whose support grows with the downscale factor, fixed-point coefficients, horizontal
// pass then vertical, 8-bit intermediate), so the pixels match PIL's exactly. Random draws come
// from the caller's std::mt19937_64: deterministic per seed, not torch's random stream.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <span>

#include "io/image.h"

namespace ferry {

/// torchvision's ImageNet normalization.
constexpr std::array<float, 3> kImageNetMean = {0.485f, 0.456f, 0.406f};
constexpr std::array<float, 3> kImageNetStd = {0.229f, 0.224f, 0.225f};

/// A crop rectangle in pixels (torchvision's (i, j, h, w)).
struct CropBox {
  int64_t top = 0;
  int64_t left = 0;
  int64_t height = 0;
  int64_t width = 0;
};

/// RandomResizedCrop's sampling parameters.
struct RandomResizedCropParams {
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};

/// PIL's Image.resize((width, height), BILINEAR). `width`, `height` >= 1.
Image resize_bilinear(const Image& in, int64_t width, int64_t height);

/// PIL's Image.crop: the rectangle may extend past the image; pixels outside are black.
Image crop_image(const Image& in, const CropBox& box);

/// Mirrors the image left to right.
Image flip_horizontal(const Image& in);

/// torchvision Resize(size) with an int size: the shorter side becomes `size`, the longer one
/// int(size * long / short); the image is returned unchanged when it already has that size.
Image resize_shorter_side(const Image& in, int64_t size);

/// torchvision CenterCrop(size): pads with black when the image is smaller, offsets rounded as
/// Python's round() (half to even).
Image center_crop(const Image& in, int64_t size);

/// RandomResizedCrop.get_params: up to 10 draws of (area scale, log-uniform aspect ratio), the
/// first that fits gives a box at a random position; otherwise the center crop fallback.
CropBox random_resized_crop_box(int64_t height, int64_t width, std::mt19937_64& rng,
                                const RandomResizedCropParams& params = {});

/// The eval pipeline's resize target: round(size * 256 / 224) (256 for 224).
int64_t eval_resize_size(int64_t crop_size);

/// Resize(eval_resize_size(size)) + CenterCrop(size): a size x size image.
Image eval_transform(const Image& in, int64_t size);

/// RandomResizedCrop(size) + RandomHorizontalFlip(0.5): a size x size image.
Image train_transform(const Image& in, int64_t size, std::mt19937_64& rng,
                      const RandomResizedCropParams& params = {});

/// ToTensor + Normalize: out[c][y][x] = (pixel / 255 - mean[c]) / std[c], in float32 as torch
/// computes it. `out` holds 3 * height * width floats.
void to_normalized_chw(const Image& in, std::span<float> out, const std::array<float, 3>& mean = kImageNetMean,
                       const std::array<float, 3>& std = kImageNetStd);

/// A uniform double in [lo, hi) and an integer in [0, n) from `rng` (portable: the same numbers
/// on every platform and standard library).
double uniform_real(std::mt19937_64& rng, double lo, double hi);
int64_t uniform_int(std::mt19937_64& rng, int64_t n);

}  // namespace ferry
