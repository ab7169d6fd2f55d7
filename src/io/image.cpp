// JPEG and PNG decoding into 8-bit RGB (see image.h for the PIL-compatible conversions).
#include "io/image.h"

#include <fcntl.h>
#include <png.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

namespace ferry {
namespace {

constexpr size_t kProbePrefixBytes = 64 * 1024;

Status too_large(const std::string& what, ImageFormat format, int64_t width, int64_t height,
                 int64_t max_pixels) {
  return invalid_argument(what + ": " + image_format_name(format) + " image of " + std::to_string(width) + "x" +
                          std::to_string(height) + " (" + std::to_string(width * height) +
                          " pixels) is over the limit of " + std::to_string(max_pixels) +
                          " pixels (a decompression bomb?); raise the pixel limit if the image is genuine");
}

Status check_dims(const std::string& what, ImageFormat format, int64_t width, int64_t height,
                  const ImageDecodeOptions& options) {
  if (width <= 0 || height <= 0) {
    return invalid_argument(what + ": corrupt " + std::string(image_format_name(format)) + " header: size " +
                            std::to_string(width) + "x" + std::to_string(height));
  }
  // width, height < 2^32 here, so the product does not overflow.
  if (width * height > options.max_pixels) return too_large(what, format, width, height, options.max_pixels);
  return Status::ok();
}

// Names formats ferry does not decode, for a helpful "not an image" message.
std::string describe_unknown(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic, size_t at = 0) {
    size_t n = std::strlen(magic);
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  const char* known = nullptr;
  if (starts("BM")) known = "BMP";
  else if (starts("GIF8")) known = "GIF";
  else if (starts("RIFF") && starts("WEBP", 8)) known = "WebP";
  else if (starts("II*") || starts("MM")) known = "TIFF";
  else if (b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '7') known = "PPM/PGM";
  if (known != nullptr) {
    return std::string("a ") + known + " image; ferry decodes JPEG and PNG only: convert it (e.g. with PIL)";
  }
  if (b.empty()) return "an empty file, not an image";
  std::string hex;
  for (size_t i = 0; i < std::min<size_t>(b.size(), 8); ++i) {
    char buf[4];
    std::snprintf(buf, sizeof(buf), "%02x ", b[i]);
    hex += buf;
  }
  if (!hex.empty()) hex.pop_back();
  return "not a JPEG or PNG image (it starts with bytes " + hex + ")";
}

// ---------------------------------------------------------------------------------------------
// Header probing (no decoder involved)

uint32_t be32(const uint8_t* p) { return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]; }

// Result of a header parse: `truncated` when the bytes end before the dimensions.
struct ProbeResult {
  Status status;
  ImageInfo info;
  bool truncated = false;
};

ProbeResult probe_png(std::span<const uint8_t> b, const std::string& what) {
  ProbeResult r;
  r.info.format = ImageFormat::kPng;
  if (b.size() < 33) {
    r.truncated = true;
    r.status = invalid_argument(what + ": PNG file is truncated (" + std::to_string(b.size()) +
                                " bytes, its header needs 33)");
    return r;
  }
  const uint8_t* ihdr = b.data() + 8;
  if (be32(ihdr) != 13 || std::memcmp(ihdr + 4, "IHDR", 4) != 0) {
    r.status = invalid_argument(what + ": corrupt PNG: the first chunk is not a valid IHDR");
    return r;
  }
  r.info.width = be32(ihdr + 8);
  r.info.height = be32(ihdr + 12);
  if (r.info.width > 0x7fffffff || r.info.height > 0x7fffffff) {
    r.status = invalid_argument(what + ": corrupt PNG header: size " + std::to_string(r.info.width) + "x" +
                                std::to_string(r.info.height));
  }
  return r;
}

bool is_jpeg_sof(uint8_t m) {
  return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC;
}

ProbeResult probe_jpeg(std::span<const uint8_t> b, const std::string& what) {
  ProbeResult r;
  r.info.format = ImageFormat::kJpeg;
  auto truncated = [&]() {
    r.truncated = true;
    r.status = invalid_argument(what + ": JPEG file is truncated before its frame header (SOF)");
    return r;
  };
  size_t pos = 2;  // after SOI
  while (true) {
    // Markers may be preceded by any number of 0xFF fill bytes.
    while (pos < b.size() && b[pos] != 0xFF) ++pos;  // tolerate garbage between segments, as libjpeg
    while (pos < b.size() && b[pos] == 0xFF) ++pos;
    if (pos >= b.size()) return truncated();
    uint8_t m = b[pos++];
    if (m == 0x01 || (m >= 0xD0 && m <= 0xD8)) continue;  // standalone markers
    if (m == 0xD9 || m == 0xDA) {
      r.status = invalid_argument(what + ": corrupt JPEG: no frame header (SOF) before the " +
                                  (m == 0xD9 ? std::string("end of image") : std::string("scan data")));
      return r;
    }
    if (pos + 2 > b.size()) return truncated();
    size_t len = (size_t{b[pos]} << 8) | b[pos + 1];
    if (len < 2) {
      r.status = invalid_argument(what + ": corrupt JPEG: segment length " + std::to_string(len));
      return r;
    }
    if (is_jpeg_sof(m)) {
      if (pos + 8 > b.size()) return truncated();
      r.info.height = (int64_t{b[pos + 3]} << 8) | b[pos + 4];
      r.info.width = (int64_t{b[pos + 5]} << 8) | b[pos + 6];
      return r;
    }
    pos += len;
  }
}

ProbeResult probe_bytes(std::span<const uint8_t> bytes, const std::string& what, const ImageDecodeOptions& options) {
  ProbeResult r;
  ImageFormat format = sniff_image_format(bytes);
  if (format == ImageFormat::kPng) {
    r = probe_png(bytes, what);
  } else if (format == ImageFormat::kJpeg) {
    r = probe_jpeg(bytes, what);
  } else {
    r.status = invalid_argument(what + ": " + describe_unknown(bytes));
    return r;
  }
  if (r.status.is_ok()) r.status = check_dims(what, format, r.info.width, r.info.height, options);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Files

// Reads up to `limit` bytes of `path` (all of it when `whole`; then a file over
// options.max_file_bytes is an error). `file_size` receives the file's size.
Status read_file_bytes(const std::string& path, bool whole, size_t limit, int64_t max_file_bytes,
                       std::vector<uint8_t>* out, int64_t* file_size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    if (err == ENOENT) return not_found("'" + path + "': no such image file");
    return invalid_argument("'" + path + "': cannot open the image file: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("'" + path + "': not a regular file");
  }
  *file_size = st.st_size;
  if (whole && st.st_size > max_file_bytes) {
    ::close(fd);
    return invalid_argument("'" + path + "': the file has " + std::to_string(st.st_size) +
                            " bytes, over the image file limit of " + std::to_string(max_file_bytes) + " bytes");
  }
  size_t want = whole ? static_cast<size_t>(st.st_size) : std::min(limit, static_cast<size_t>(st.st_size));
  out->resize(want);
  size_t got = 0;
  while (got < want) {
    ssize_t n = ::read(fd, out->data() + got, want - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return invalid_argument("'" + path + "': read failed: " + std::strerror(err));
    }
    if (n == 0) break;  // the file shrank while being read
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out->resize(got);
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// JPEG

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h != nullptr) tjDestroy(h);
  }
};

// PIL reads CMYK JPEGs as Adobe-inverted ("CMYK;I") and converts with
// r = (255 - k) - (c * (255 - k)) / 255 in its rounded integer form (Convert.c cmyk2rgb).
void cmyk_to_rgb(const uint8_t* cmyk, int64_t pixels, uint8_t* rgb) {
  auto muldiv255 = [](int a, int b) {
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
  };
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t* p = cmyk + i * 4;
    int nk = p[3];  // 255 - (255 - raw k)
    for (int c = 0; c < 3; ++c) {
      int v = nk - muldiv255(255 - p[c], nk);
      rgb[i * 3 + c] = static_cast<uint8_t>(std::clamp(v, 0, 255));
    }
  }
}

StatusOr<Image> decode_jpeg(std::span<const uint8_t> bytes, const std::string& what, const ImageDecodeOptions& options) {
  // Our own header walk first: it refuses bombs without involving the decoder.
  ProbeResult probe = probe_bytes(bytes, what, options);
  if (!probe.status.is_ok()) return probe.status;
  TjHandle tj;
  if (tj.h == nullptr) return internal_error(what + ": cannot create a JPEG decompressor");
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  auto* data = const_cast<unsigned char*>(bytes.data());
  auto size = static_cast<unsigned long>(bytes.size());
  if (tjDecompressHeader3(tj.h, data, size, &width, &height, &subsamp, &colorspace) != 0) {
    return invalid_argument(what + ": corrupt JPEG header: " + tjGetErrorStr2(tj.h));
  }
  RETURN_IF_ERROR(check_dims(what, ImageFormat::kJpeg, width, height, options));
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int64_t pixels = int64_t{width} * height;
  Image img;
  img.width = width;
  img.height = height;
  std::vector<uint8_t> cmyk_buf;
  img.pixels.resize(static_cast<size_t>(pixels * 3));
  if (cmyk) cmyk_buf.resize(static_cast<size_t>(pixels * 4));
  unsigned char* dst = cmyk ? cmyk_buf.data() : img.pixels.data();
  int rc = tjDecompress2(tj.h, data, size, dst, width, 0, height, cmyk ? TJPF_CMYK : TJPF_RGB,
                         TJFLAG_LIMITSCANS);
  if (rc != 0) {
    std::string msg = tjGetErrorStr2(tj.h);
    if (tjGetErrorCode(tj.h) == TJERR_FATAL) {
      return invalid_argument(what + ": corrupt JPEG data: " + msg);
    }
    // Warnings: PIL accepts corrupt-but-decodable data and refuses a cut file; so do we.
    if (msg.find("Premature end") != std::string::npos) {
      return invalid_argument(what + ": JPEG file is truncated (the data ends before the image does); "
                              "the file is incomplete: re-copy or re-export it");
    }
  }
  if (cmyk) cmyk_to_rgb(cmyk_buf.data(), pixels, img.pixels.data());
  return img;
}

// ---------------------------------------------------------------------------------------------
// PNG. libpng reports errors by longjmp; the two functions that call setjmp hold only trivially
// destructible locals, and every C++ object lives in decode_png, outside them.

struct PngContext {
  const uint8_t* data;
  size_t size;
  size_t pos;
  bool truncated;
  char error[256];
};

struct PngHeader {
  png_uint_32 width;
  png_uint_32 height;
  int bit_depth;
  int color_type;
};

void png_read_fn(png_structp png, png_bytep out, size_t n) {
  auto* ctx = static_cast<PngContext*>(png_get_io_ptr(png));
  if (n > ctx->size - ctx->pos) {
    ctx->truncated = true;
    png_error(png, "the file ends early");
  }
  std::memcpy(out, ctx->data + ctx->pos, n);
  ctx->pos += n;
}

void png_error_fn(png_structp png, png_const_charp msg) {
  auto* ctx = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(ctx->error, sizeof(ctx->error), "%s", msg != nullptr ? msg : "unknown error");
  png_longjmp(png, 1);
}

void png_warning_fn(png_structp, png_const_charp) {}

bool png_read_header(png_structp png, png_infop info, PngHeader* h) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);  // our own pixel limit applies instead
  png_read_info(png, info);
  int interlace = 0, compression = 0, filter = 0;
  png_get_IHDR(png, info, &h->width, &h->height, &h->bit_depth, &h->color_type, &interlace, &compression, &filter);
  return true;
}

// Sets up the conversion to 8-bit RGB (or, for 16-bit gray, raw big-endian 16-bit gray),
// checks the row size libpng will produce, and reads all rows.
bool png_read_pixels(png_structp png, png_infop info, const PngHeader* h, bool gray16, png_bytep* rows,
                     size_t expected_rowbytes) {
  if (setjmp(png_jmpbuf(png))) return false;
  if (!gray16) {
    if (h->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (h->color_type == PNG_COLOR_TYPE_GRAY && h->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (h->bit_depth == 16) png_set_strip_16(png);
    png_set_strip_alpha(png);
    if (h->color_type == PNG_COLOR_TYPE_GRAY || h->color_type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != expected_rowbytes) png_error(png, "unexpected row size after conversion");
  png_read_image(png, rows);
  return true;
}

StatusOr<Image> decode_png(std::span<const uint8_t> bytes, const std::string& what, const ImageDecodeOptions& options) {
  ProbeResult probe = probe_bytes(bytes, what, options);
  if (!probe.status.is_ok()) return probe.status;
  PngContext ctx{bytes.data(), bytes.size(), 0, false, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, png_error_fn, png_warning_fn);
  if (png == nullptr) return internal_error(what + ": cannot create a PNG reader");
  png_infop info = png_create_info_struct(png);
  struct Destroy {
    png_structp* png;
    png_infop* info;
    ~Destroy() { png_destroy_read_struct(png, info, nullptr); }
  } destroy{&png, &info};
  if (info == nullptr) return internal_error(what + ": cannot create a PNG reader");
  png_set_read_fn(png, &ctx, png_read_fn);

  auto failure = [&](const char* stage) {
    if (ctx.truncated) {
      return invalid_argument(what + ": PNG file is truncated (the data ends " + stage +
                              "); the file is incomplete: re-copy or re-export it");
    }
    return invalid_argument(what + ": corrupt PNG: " + ctx.error);
  };
  PngHeader h{};
  if (!png_read_header(png, info, &h)) return failure("inside the header");
  RETURN_IF_ERROR(check_dims(what, ImageFormat::kPng, h.width, h.height, options));

  // PIL opens 16-bit grayscale as mode "I" and its RGB conversion clips values to 255.
  const bool gray16 = h.color_type == PNG_COLOR_TYPE_GRAY && h.bit_depth == 16;
  const int64_t width = h.width, height = h.height;
  const size_t rowbytes = static_cast<size_t>(width) * (gray16 ? 2 : 3);
  Image img;
  img.width = width;
  img.height = height;
  std::vector<uint8_t> gray_buf;
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  uint8_t* base = nullptr;
  if (gray16) {
    gray_buf.resize(rowbytes * static_cast<size_t>(height));
    base = gray_buf.data();
  } else {
    img.pixels.resize(rowbytes * static_cast<size_t>(height));
    base = img.pixels.data();
  }
  for (int64_t y = 0; y < height; ++y) rows[static_cast<size_t>(y)] = base + static_cast<size_t>(y) * rowbytes;
  if (!png_read_pixels(png, info, &h, gray16, rows.data(), rowbytes)) return failure("before the image does");
  if (gray16) {
    img.pixels.resize(static_cast<size_t>(width * height * 3));
    for (int64_t i = 0; i < width * height; ++i) {
      int v = (gray_buf[static_cast<size_t>(i * 2)] << 8) | gray_buf[static_cast<size_t>(i * 2 + 1)];
      uint8_t c = static_cast<uint8_t>(std::min(v, 255));
      img.pixels[static_cast<size_t>(i * 3)] = img.pixels[static_cast<size_t>(i * 3 + 1)] =
          img.pixels[static_cast<size_t>(i * 3 + 2)] = c;
    }
  }
  return img;
}

}  // namespace

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kPng: return "PNG";
    default: return "unknown";
  }
}

ImageFormat sniff_image_format(std::span<const uint8_t> b) {
  static const uint8_t kPngSig[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (b.size() >= 8 && std::memcmp(b.data(), kPngSig, 8) == 0) return ImageFormat::kPng;
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::kJpeg;
  return ImageFormat::kUnknown;
}

StatusOr<Image> decode_image(std::span<const uint8_t> bytes, const std::string& what, const ImageDecodeOptions& options) {
  switch (sniff_image_format(bytes)) {
    case ImageFormat::kJpeg: return decode_jpeg(bytes, what, options);
    case ImageFormat::kPng: return decode_png(bytes, what, options);
    default: return invalid_argument(what + ": " + describe_unknown(bytes));
  }
}

StatusOr<Image> read_image(const std::string& path, const ImageDecodeOptions& options) {
  std::vector<uint8_t> bytes;
  int64_t file_size = 0;
  RETURN_IF_ERROR(read_file_bytes(path, true, 0, options.max_file_bytes, &bytes, &file_size));
  return decode_image(bytes, "'" + path + "'", options);
}

StatusOr<ImageInfo> probe_image(std::span<const uint8_t> bytes, const std::string& what, const ImageDecodeOptions& options) {
  ProbeResult r = probe_bytes(bytes, what, options);
  if (!r.status.is_ok()) return r.status;
  return r.info;
}

StatusOr<ImageInfo> probe_image_file(const std::string& path, const ImageDecodeOptions& options) {
  std::vector<uint8_t> bytes;
  int64_t file_size = 0;
  const std::string what = "'" + path + "'";
  RETURN_IF_ERROR(read_file_bytes(path, false, kProbePrefixBytes, options.max_file_bytes, &bytes, &file_size));
  ProbeResult r = probe_bytes(bytes, what, options);
  if (r.truncated && file_size > static_cast<int64_t>(bytes.size())) {
    // A header past the first 64 KiB (large EXIF or ICC segments): read the whole file.
    RETURN_IF_ERROR(read_file_bytes(path, true, 0, options.max_file_bytes, &bytes, &file_size));
    r = probe_bytes(bytes, what, options);
  }
  if (!r.status.is_ok()) return r.status;
  return r.info;
}

}  // namespace ferry
