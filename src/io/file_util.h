// Small file helpers shared by the loaders: whole-file reads with limits, safe path joining.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace ferry {

/// A read-only view of a whole file (mmap-ed); the memory lives while any copy of the pointer does.
struct MappedFile {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};

/// Maps `path` read-only; fails with NotFound / InvalidArgument (a folder, too big) messages.
StatusOr<MappedFile> map_file(const std::string& path, int64_t max_bytes, const std::string& what);

/// Resolves `relative` inside `base_dir` and refuses anything that would leave it:
/// absolute paths, "..", symlinks pointing outside, non-regular files.
StatusOr<std::string> resolve_inside(const std::string& base_dir, const std::string& relative,
                                     const std::string& what);

/// Folder part of a path ("." when none).
std::string dir_name(const std::string& path);

}  // namespace ferry
