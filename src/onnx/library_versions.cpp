// See library_versions.h.
#include "onnx/library_versions.h"

#include <google/protobuf/stubs/common.h>
#include <onnx/common/version.h>

namespace ferry {

std::string protobuf_version() {
  const int v = GOOGLE_PROTOBUF_VERSION;  // major*1000000 + minor*1000 + patch
  return std::to_string(v / 1000000) + "." + std::to_string(v / 1000 % 1000) + "." + std::to_string(v % 1000);
}

std::string onnx_library_version() { return ONNX_NAMESPACE::LAST_RELEASE_VERSION; }

}  // namespace ferry
