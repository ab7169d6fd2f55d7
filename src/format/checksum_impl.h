/* The .ferry checksum's one definition: XXH3-64 of `size` bytes with the 8-byte field at `at`
 * read as zero. Included (after <xxhash.h> with XXH_INLINE_ALL) by file_header.cpp, built for the
 * baseline ISA, and by checksum_avx512.c, built with -mavx512f, so each gets its own vector loop. */
#ifndef FERRY_FORMAT_CHECKSUM_IMPL_H_
#define FERRY_FORMAT_CHECKSUM_IMPL_H_

#include <stddef.h>
#include <stdint.h>

static inline uint64_t ferry_checksum_zeroed_field(const uint8_t* data, size_t size, size_t at) {
  XXH3_state_t state;
  const uint64_t zero = 0;
  XXH3_64bits_reset(&state);
  XXH3_64bits_update(&state, data, at);
  XXH3_64bits_update(&state, &zero, sizeof zero);
  XXH3_64bits_update(&state, data + at + sizeof zero, size - at - sizeof zero);
  return XXH3_64bits_digest(&state);
}

#endif
