// The fixed 128-byte header at the start of every .ferry file (docs/format.md), and the
// checksum over the whole file. Little-endian; the layout never changes within a format version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace ferry::format {

constexpr char kMagic[8] = {'F', 'E', 'R', 'R', 'Y', 'M', 'D', 'L'};
constexpr uint32_t kHeaderSize = 128;
/// Alignment of the weights section and of every tensor in it.
constexpr uint64_t kWeightAlignment = 64;

struct FileHeader {
  char magic[8];             // "FERRYMDL"
  uint32_t format_version;   // kCompiledFormatVersion
  uint32_t header_size;      // 128
  uint64_t file_size;        // total bytes; a shorter file is truncated
  uint64_t graph_offset;     // the flatbuffer (ferry_model.fbs)
  uint64_t graph_size;
  uint64_t weights_offset;   // multiple of 64
  uint64_t weights_size;
  uint64_t checksum;         // XXH3-64 of the whole file with this field zeroed
  char isa[16];              // "x86_64", NUL-padded
  char ferry_version[16];    // "0.1.0", NUL-padded
  char device[16];           // "cpu", NUL-padded
  uint8_t reserved[16];      // zero
};
static_assert(sizeof(FileHeader) == kHeaderSize, "the header is 128 bytes");
static_assert(offsetof(FileHeader, checksum) == 56, "checksum at byte 56");

/// Copies a string into a NUL-padded fixed field (truncating) and reads one back.
void set_field(char* field, size_t size, const std::string& value);
std::string get_field(const char* field, size_t size);

/// XXH3-64 of `size` bytes of a file starting with a header, computed as if the header's
/// checksum field were zero.
uint64_t file_checksum(const uint8_t* data, size_t size);
/// The same value through the portable (SSE2) xxHash build, and whether file_checksum() takes the
/// AVX-512 loop on this CPU (for the test that both agree).
uint64_t file_checksum_portable(const uint8_t* data, size_t size);
bool file_checksum_has_avx512();

/// Validates the header of `size` bytes at `data` in the order that gives the clearest message:
/// magic, format version, ferry version, ISA, size (truncation), checksum, section bounds.
/// `what` names the file. On success copies the header to *out.
Status check_header(const uint8_t* data, size_t size, const std::string& what, FileHeader* out);

}  // namespace ferry::format
