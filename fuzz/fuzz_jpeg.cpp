// libFuzzer target: JPEG decoding (header walk, libturbojpeg, CMYK conversion) with a small
// pixel limit, so huge claimed sizes are refused instead of exhausting memory.
#include <cstddef>
#include <cstdint>
#include <span>

#include "io/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ferry::ImageDecodeOptions options;
  options.max_pixels = 1 << 20;
  std::span<const uint8_t> bytes(data, size);
  (void)ferry::probe_image(bytes, "fuzz input", options);
  (void)ferry::decode_image(bytes, "fuzz input", options);
  return 0;
}
