// libFuzzer target: the training checkpoint reader (src/format/checkpoint.h) on bytes in memory.
// A mutated file would almost always stop at the size or checksum check, so the target re-stamps
// both in every input long enough to hold a header: mutations then reach the metadata, index,
// dims and offset checks, which are what must hold against a hostile file. (The size and
// checksum checks themselves are covered by tests/unit/test_checkpoint.cpp.)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/checkpoint.h"
#include "format/checksum_impl.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  constexpr size_t kHeader = 64, kFileSizeAt = 16, kChecksumAt = 24;
  if (bytes.size() >= kHeader) {
    const uint64_t n = bytes.size();
    std::memcpy(bytes.data() + kFileSizeAt, &n, sizeof n);
    const uint64_t sum = ferry_checksum_zeroed_field(bytes.data(), bytes.size(), kChecksumAt);
    std::memcpy(bytes.data() + kChecksumAt, &sum, sizeof sum);
  }
  (void)ferry::parse_checkpoint(bytes.data(), bytes.size(), "fuzz input");
  return 0;
}
