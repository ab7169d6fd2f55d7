// .ferry header checks and checksum; see file_header.h.
#include "format/file_header.h"

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "format/checksum_impl.h"

#if defined(FERRY_CHECKSUM_AVX512)
extern "C" uint64_t ferry_file_checksum_avx512(const uint8_t* data, size_t size, size_t field_at);
#endif

#include "format/compiled_model.h"

namespace ferry::format {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the .ferry format is little-endian");

void set_field(char* field, size_t size, const std::string& value) {
  std::memset(field, 0, size);
  std::memcpy(field, value.data(), value.size() < size ? value.size() : size);
}

std::string get_field(const char* field, size_t size) {
  size_t n = 0;
  while (n < size && field[n] != '\0') ++n;
  std::string s(field, n);
  // Printable in messages even when the file is garbage.
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 32 || static_cast<unsigned char>(c) > 126) c = '?';
  return s;
}

uint64_t file_checksum_portable(const uint8_t* data, size_t size) {
  return ferry_checksum_zeroed_field(data, size, offsetof(FileHeader, checksum));
}

bool file_checksum_has_avx512() {
#if defined(FERRY_CHECKSUM_AVX512)
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
#else
  return false;
#endif
}

uint64_t file_checksum(const uint8_t* data, size_t size) {
#if defined(FERRY_CHECKSUM_AVX512)
  if (file_checksum_has_avx512())
    return ferry_file_checksum_avx512(data, size, offsetof(FileHeader, checksum));
#endif
  return file_checksum_portable(data, size);
}

namespace {
bool section_inside(uint64_t offset, uint64_t size, uint64_t file_size) {
  return offset >= kHeaderSize && offset <= file_size && size <= file_size - offset;
}
}  // namespace

Status check_header(const uint8_t* data, size_t size, const std::string& what, FileHeader* out) {
  if (size < sizeof kMagic || std::memcmp(data, kMagic, sizeof kMagic) != 0)
    return invalid_model(what + ": not a compiled ferry model (no 'FERRYMDL' magic); compile one with `ferry compile`");
  if (size < kHeaderSize)
    return invalid_model(what + ": truncated: " + std::to_string(size) + " bytes, shorter than the " +
                         std::to_string(kHeaderSize) + "-byte header");
  FileHeader h;
  std::memcpy(&h, data, sizeof h);
  if (h.format_version != kCompiledFormatVersion)
    return invalid_model(what + ": compiled model format version " + std::to_string(h.format_version) +
                         ", this ferry reads version " + std::to_string(kCompiledFormatVersion) +
                         "; recompile the model with this ferry (`ferry compile`)");
  if (h.header_size != kHeaderSize)
    return invalid_model(what + ": header size " + std::to_string(h.header_size) + ", expected " +
                         std::to_string(kHeaderSize) + " (the file is corrupted)");
  const std::string version = get_field(h.ferry_version, sizeof h.ferry_version);
  if (version != ferry_version())
    return invalid_model(what + ": compiled by ferry " + version + ", this is ferry " + ferry_version() +
                         "; recompile the model with this ferry (`ferry compile`)");
  const std::string isa = get_field(h.isa, sizeof h.isa);
  if (isa != host_isa())
    return invalid_model(what + ": compiled for ISA '" + isa + "', this machine is '" + host_isa() +
                         "'; compile the model on (or for) this machine");
  if (h.file_size != size) {
    if (size < h.file_size)
      return invalid_model(what + ": truncated: " + std::to_string(size) + " bytes, the header says " +
                           std::to_string(h.file_size) + "; copy the file again or recompile it");
    return invalid_model(what + ": " + std::to_string(size - h.file_size) +
                         " unexpected bytes after the end of the compiled model (the file is corrupted)");
  }
  const uint64_t sum = file_checksum(data, size);
  if (sum != h.checksum)
    return invalid_model(what + ": checksum mismatch (the file is corrupted); copy it again or recompile it");
  if (!section_inside(h.graph_offset, h.graph_size, size) || !section_inside(h.weights_offset, h.weights_size, size) ||
      h.weights_offset % kWeightAlignment != 0)
    return invalid_model(what + ": section offsets lie outside the file (the file is corrupted)");
  *out = h;
  return Status::ok();
}

}  // namespace ferry::format
