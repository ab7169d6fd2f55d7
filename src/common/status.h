// Status: the one error type returned everywhere below the CLI.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace ferry {

/// Error categories. The CLI maps kInvalidArgument/kInvalidModel/kUnsupported/kNotFound/
/// kResourceExhausted to exit code 2 (the user's input is at fault) and kInternal to 1.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad user input: files, shapes, dtypes, options
  kInvalidModel,      // the model file is malformed or inconsistent
  kUnsupported,       // valid, but ferry does not implement it (op, opset, attribute value)
  kNotFound,          // a file, input or output name that does not exist
  kResourceExhausted, // a limit was hit (size, memory)
  kInternal,          // a bug in ferry
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "InvalidModel: <message>"
  std::string to_string() const;

  /// Returns a copy whose message is prefixed with `context + ": "` (used to add where an error happened).
  Status with_context(const std::string& context) const {
    if (is_ok()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
inline Status invalid_model(std::string m) { return Status(StatusCode::kInvalidModel, std::move(m)); }
inline Status unsupported(std::string m) { return Status(StatusCode::kUnsupported, std::move(m)); }
inline Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status resource_exhausted(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }
inline Status internal_error(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

/// A value or an error.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}             // NOLINT: implicit by design
  StatusOr(Status status) : v_(std::move(status)) {}      // NOLINT
  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ferry

#define FERRY_CONCAT_INNER(a, b) a##b
#define FERRY_CONCAT(a, b) FERRY_CONCAT_INNER(a, b)

/// Returns the status from the enclosing function if `expr` is not ok.
#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    ::ferry::Status _st = (expr);                     \
    if (!_st.is_ok()) return _st;                     \
  } while (0)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.is_ok()) return tmp.status();      \
  lhs = std::move(tmp).value()

/// `ASSIGN_OR_RETURN(auto x, f());` declares x from a StatusOr or returns its error. It expands
/// to several statements: under an `if`, put it in braces.
#define ASSIGN_OR_RETURN(lhs, expr) ASSIGN_OR_RETURN_IMPL(FERRY_CONCAT(_so_, __LINE__), lhs, expr)
