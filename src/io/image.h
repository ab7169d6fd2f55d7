// Image decoding for training data: JPEG (libturbojpeg) and PNG (libpng) into 8-bit RGB, HWC.
//
// Every color type ends as RGB the way PIL's `Image.open(f).convert('RGB')` does (what
// torchvision's ImageFolder loader uses), so a model sees the same pixels as under PyTorch:
// grayscale is replicated, palettes are looked up, alpha is dropped (not composited), 16-bit
// samples keep their high byte — except 16-bit grayscale PNGs, which PIL opens in mode "I" and
// clips to 255 (a PIL quirk kept on purpose); CMYK/YCCK JPEGs are read as Adobe-inverted CMYK
// and converted with PIL's formula. Orientation (EXIF) is not applied, as in PIL's open().
//
// Safety: the header is read first and an image over `max_pixels` is refused before any pixel
// buffer is allocated (PIL's decompression-bomb error threshold by default). Errors are
// kInvalidArgument and name the file and the problem (not an image, truncated, corrupt, too
// large); they never throw or abort.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace ferry {

/// An 8-bit RGB image, rows top to bottom, pixels left to right, 3 bytes per pixel (HWC).
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // width * height * 3

  uint8_t* row(int64_t y) { return pixels.data() + y * width * 3; }
  const uint8_t* row(int64_t y) const { return pixels.data() + y * width * 3; }
};

enum class ImageFormat { kUnknown, kJpeg, kPng };

/// "JPEG", "PNG" or "unknown".
const char* image_format_name(ImageFormat format);

/// What a header says, without decoding pixels.
struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int64_t width = 0;
  int64_t height = 0;
};

/// PIL's Image.MAX_IMAGE_PIXELS * 2: where PIL raises DecompressionBombError.
constexpr int64_t kDefaultMaxImagePixels = int64_t{89478485} * 2;

struct ImageDecodeOptions {
  /// Images with more pixels (width * height) are refused before decoding.
  int64_t max_pixels = kDefaultMaxImagePixels;
  /// Files larger than this are refused before they are read (read_image / probe_image_file).
  int64_t max_file_bytes = int64_t{1} << 30;
};

/// The format the leading bytes announce (JPEG: FF D8 FF, PNG: its 8-byte signature).
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);

/// Decodes JPEG or PNG bytes into RGB. `what` names the bytes in errors (e.g. "'cat/1.jpg'").
StatusOr<Image> decode_image(std::span<const uint8_t> bytes, const std::string& what,
                             const ImageDecodeOptions& options = {});

/// Reads the whole file at `path` (at most options.max_file_bytes) and decodes it.
StatusOr<Image> read_image(const std::string& path, const ImageDecodeOptions& options = {});

/// Parses only the header of JPEG or PNG bytes: format and dimensions, checked against
/// options.max_pixels. Bytes cut before the dimensions give a "truncated" error.
StatusOr<ImageInfo> probe_image(std::span<const uint8_t> bytes, const std::string& what,
                                const ImageDecodeOptions& options = {});

/// probe_image() on a file, reading only as much of it as the header needs (usually 64 KiB).
StatusOr<ImageInfo> probe_image_file(const std::string& path, const ImageDecodeOptions& options = {});

}  // namespace ferry
