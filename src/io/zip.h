// Minimal ZIP support for .npz archives: reading STORED and DEFLATE members (with ZIP64),
// and writing STORED members.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "io/file.h"

namespace ferry {

/// One member, as described by the central directory (sizes and offsets already checked
/// to lie within the archive).
struct ZipEntry {
  std::string name;                // raw bytes of the stored name
  uint16_t method = 0;             // 0 = STORED, 8 = DEFLATE
  uint16_t flags = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t uncompressed_size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;        // first byte of the member's (compressed) data
};

/// Lists the members of the archive held in `archive`, in central-directory order.
/// Refuses encrypted members, unsupported compression methods, multi-disk archives and
/// members whose offsets or sizes point outside the archive or overlap. `what` names the
/// archive in error messages.
StatusOr<std::vector<ZipEntry>> list_zip_entries(const uint8_t* data, size_t size, const std::string& what);

/// The uncompressed bytes of one member. `owner` keeps `data` alive.
struct ZipMemberBytes {
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  size_t size = 0;
  bool writable = false;
};

/// Extracts `entry` (a view into `archive` for STORED, a new 64-byte-aligned buffer for
/// DEFLATE) and verifies its CRC-32 and uncompressed size.
StatusOr<ZipMemberBytes> read_zip_entry(const FileBytes& archive, const ZipEntry& entry, const std::string& what);

/// CRC-32 (the ZIP/zlib polynomial) of `n` bytes, continuing from `crc`.
uint32_t zip_crc32(uint32_t crc, const void* data, size_t n);

/// Options for ZipWriter.
struct ZipWriteOptions {
  /// Writes ZIP64 extra fields and end records even when the sizes do not need them.
  bool force_zip64 = false;
};

/// Writes an archive of STORED members to a temporary file renamed into place by finish().
class ZipWriter {
 public:
  static StatusOr<std::unique_ptr<ZipWriter>> create(const std::string& path, ZipWriteOptions options = {});

  /// Starts a member of exactly `size` bytes; names must be unique and non-empty.
  Status begin_entry(const std::string& name, uint64_t size);
  /// Appends data to the current member.
  Status write(const void* data, size_t n);
  /// Checks the byte count and patches the CRC into the local header.
  Status end_entry();
  /// Writes the central directory and renames the file into place.
  Status finish();

 private:
  ZipWriter(std::unique_ptr<AtomicFileWriter> file, ZipWriteOptions options)
      : file_(std::move(file)), options_(options) {}

  std::unique_ptr<AtomicFileWriter> file_;
  ZipWriteOptions options_;
  std::vector<ZipEntry> entries_;
  bool in_entry_ = false;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
};

}  // namespace ferry
