// Data files compiled into ferry (generated at build time by cmake/embed_files.cmake from data/):
// the target profiles (data/profiles/*.tsv) and `ferry check`'s target list and rules
// (data/check/*.tsv), so the CLI works from any directory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

struct EmbeddedFile {
  const char* name;  // path relative to data/: "profiles/tensorrt-10.1.tsv"
  const unsigned char* data;
  size_t size;
};

/// Every embedded file, sorted by name.
const std::vector<EmbeddedFile>& embedded_files();

/// The contents of an embedded file, or an empty view when there is none by that name.
inline std::string_view embedded_file(const std::string& name) {
  for (const EmbeddedFile& f : embedded_files())
    if (name == f.name) return {reinterpret_cast<const char*>(f.data), f.size};
  return {};
}

}  // namespace ferry
