// Versions of the libraries the ONNX importer is built on (for `ferry doctor`).
#pragma once

#include <string>

namespace ferry {

/// "3.21.12" (the protobuf headers ferry was compiled with).
std::string protobuf_version();
/// "1.12.0" (the ONNX headers ferry was compiled with).
std::string onnx_library_version();

}  // namespace ferry
