// The process environment, read in one place. Every FERRY_* variable is listed once in
// common/env_switches.inc (kind, default, reader, meaning; common/env_switch_table.h compiles it,
// `ferry switches --markdown` prints it as docs/switches.md) and read through these helpers; no
// other file of src/ calls getenv (`ctest -R docs_switches` checks both).
#pragma once

#include <cstdlib>
#include <cstring>

namespace ferry {

/// The variable's value, or null when it is unset: the one getenv of src/.
inline const char* env_value(const char* name) { return std::getenv(name); }

/// False only when environment variable `name` is exactly "0": the path it names stays on otherwise.
inline bool env_switch_on(const char* name) {
  const char* e = env_value(name);
  return !(e && std::strcmp(e, "0") == 0);
}

}  // namespace ferry
