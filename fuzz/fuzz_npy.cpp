// libFuzzer target: the .npy and .npz readers (headers, dtypes, shapes, zip directory, deflate).
#include <cstddef>
#include <cstdint>

#include "io/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)ferry::parse_npy(data, size, "fuzz input");
  (void)ferry::parse_npz(data, size, "fuzz input");
  return 0;
}
