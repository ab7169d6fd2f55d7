// The process environment, read in one place. Every FERRY_* variable is listed once in
// common/env_switches.inc (kind, default, reader, meaning; docs/switches.md is generated from it by
// `ferry switches --markdown`) and read through these helpers; no other file of src/ calls getenv
// (`ctest -R docs_switches` checks both).
#pragma once

#include <cstddef>
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

/// One line of common/env_switches.inc.
struct EnvSwitchInfo {
  const char* name;
  const char* kind;  // off switch, on switch, limit, choice, diagnostic, setting
  const char* default_value;
  const char* read_by;  // files of src/
  const char* what;
};

/// Every FERRY_* variable ferry reads, sorted by name; `*count` gets their number.
inline const EnvSwitchInfo* env_switch_table(size_t* count) {
  static constexpr EnvSwitchInfo kTable[] = {
#define FERRY_SWITCH(name, kind, default_value, read_by, what) {name, kind, default_value, read_by, what},
#define FERRY_SWITCH_REMOVED(name, answer, replacement)
#include "common/env_switches.inc"
#undef FERRY_SWITCH_REMOVED
#undef FERRY_SWITCH
  };
  *count = sizeof(kTable) / sizeof(kTable[0]);
  return kTable;
}

/// A switch removed with its losing branch once its question was answered.
struct RemovedEnvSwitch {
  const char* name;
  const char* answer;       // where the measurement is recorded
  const char* replacement;  // what to use instead, or "none"
};

/// The removed switches (the end of common/env_switches.inc); `*count` gets their number.
inline const RemovedEnvSwitch* removed_env_switches(size_t* count) {
  static constexpr RemovedEnvSwitch kRemoved[] = {
#define FERRY_SWITCH(name, kind, default_value, read_by, what)
#define FERRY_SWITCH_REMOVED(name, answer, replacement) {name, answer, replacement},
#include "common/env_switches.inc"
#undef FERRY_SWITCH_REMOVED
#undef FERRY_SWITCH
  };
  *count = sizeof(kRemoved) / sizeof(kRemoved[0]);
  return kRemoved;
}

}  // namespace ferry
