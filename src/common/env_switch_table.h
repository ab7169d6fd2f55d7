// The table of every FERRY_* variable (common/env_switches.inc), for `ferry switches`; the
// readers use common/env_switch.h.
#pragma once

#include <cstddef>

namespace ferry {

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
