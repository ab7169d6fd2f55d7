// Speed paths that can be turned off for an A/B comparison (FERRY_<NAME>=0), read once per process.
#pragma once

#include <cstdlib>
#include <cstring>

namespace ferry {

/// False only when environment variable `name` is exactly "0": the path it names stays on otherwise.
inline bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  return !(e && std::strcmp(e, "0") == 0);
}

}  // namespace ferry
