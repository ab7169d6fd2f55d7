#include "common/status.h"

namespace ferry {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "Ok";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kInvalidModel: return "InvalidModel";
    case StatusCode::kUnsupported: return "Unsupported";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "Ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace ferry
