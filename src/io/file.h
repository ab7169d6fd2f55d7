// File helpers shared by the loaders and writers: whole-file mapping (two forms, below), safe
// path joining for external data, and all-or-nothing writes (temporary file + rename).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace ferry {

/// The bytes of a whole file. `owner` keeps them alive (an mmap, or a heap buffer when the
/// file cannot be mapped, e.g. a pipe). `writable` says whether the bytes may be modified in
/// place: mappings are private copy-on-write, so writes never reach the file.
struct FileBytes {
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  size_t size = 0;
  bool writable = false;
  /// The bytes are a private mapping of the file (not a heap copy): pages never written may be
  /// dropped from the process with madvise(MADV_DONTNEED) and are read again from the file.
  bool mapped = false;
};

/// Maps the whole file at `path` (falls back to reading it for non-regular files), writable
/// copy-on-write, its pages mapped up front: the .npy/.npz readers and .ferry files.
/// Errors: kNotFound when the file does not exist, kInvalidArgument for other failures.
/// Note: like any mmap, truncating the file while it is mapped raises SIGBUS on access.
StatusOr<FileBytes> map_file(const std::string& path);

/// Maps the regular file at `path` read-only (`writable` false), refusing one over `max_bytes`
/// (kResourceExhausted); errors name it as `what` ('model file', 'checkpoint', ...): NotFound /
/// InvalidArgument (a folder, a pipe, unmappable). Model files, external data, checkpoints.
StatusOr<FileBytes> map_file(const std::string& path, int64_t max_bytes, const std::string& what);

/// Opens the regular file at `path` read-only for a caller that reads it itself (a stream parse),
/// with map_file's checks and errors (`what`, `max_bytes`). The caller closes `fd`.
struct OpenedFile {
  int fd = -1;
  int64_t size = 0;
};
StatusOr<OpenedFile> open_regular_file(const std::string& path, int64_t max_bytes, const std::string& what);

/// Drops the whole pages of [begin, begin + length) inside `f`'s mapping from this process (they
/// come back from the page cache if read again): bytes already copied out need not stay resident.
/// Nothing for a FileBytes that is not a mapping.
void drop_mapped_pages(const FileBytes& f, const uint8_t* begin, size_t length);

/// drop_mapped_pages for a caller that knows [begin, begin + length) lies in a read-only file
/// mapping (never call it on heap bytes: their contents would be lost).
void drop_pages(const uint8_t* begin, size_t length);

/// Resolves `relative` inside `base_dir` and refuses anything that would leave it:
/// absolute paths, "..", symlinks pointing outside, non-regular files.
StatusOr<std::string> resolve_inside(const std::string& base_dir, const std::string& relative,
                                     const std::string& what);

/// Folder part of a path ("." when none).
std::string dir_name(const std::string& path);

/// Writes a file under a temporary name in the destination's folder; commit() renames it
/// over `path`. Destroying the writer without a successful commit() removes the temporary,
/// so a failure never leaves a half-written file at `path`.
class AtomicFileWriter {
 public:
  /// Creates the temporary file next to `path`.
  static StatusOr<std::unique_ptr<AtomicFileWriter>> create(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  /// Appends `n` bytes.
  Status write(const void* data, size_t n);
  /// Overwrites `n` bytes at `offset` (which must lie within what was written).
  Status write_at(uint64_t offset, const void* data, size_t n);
  /// Bytes written so far.
  uint64_t size() const { return size_; }
  /// Flushes, syncs and renames the temporary file to the destination path.
  Status commit();

  const std::string& path() const { return path_; }

 private:
  AtomicFileWriter(std::string path, std::string tmp_path, int fd);
  Status flush_buffer();
  Status write_fd(const void* data, size_t n);
  Status io_error(const std::string& action, int err) const;

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  bool committed_ = false;
  std::string buffer_;  // small writes are gathered here
};

}  // namespace ferry
