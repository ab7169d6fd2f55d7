// Shapes whose dimensions are known numbers, named symbols ("batch"), or unknown.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/dtype.h"

namespace ferry {

/// One dimension: a value >= 0, or a symbol (value < 0). An empty symbol means "unknown".
struct Dim {
  int64_t value = -1;
  std::string symbol;

  Dim() = default;
  Dim(int64_t v) : value(v) {}  // NOLINT: a number is a dimension
  static Dim symbolic(std::string name) {
    Dim d;
    d.symbol = std::move(name);
    return d;
  }
  bool is_known() const { return value >= 0; }
  bool operator==(const Dim& o) const { return value == o.value && symbol == o.symbol; }
  std::string to_string() const;  // "3", "batch" or "?"
};

/// A shape of known rank. Graph values with unknown rank carry std::nullopt instead.
struct Shape {
  std::vector<Dim> dims;

  Shape() = default;
  Shape(std::vector<Dim> d) : dims(std::move(d)) {}  // NOLINT
  static Shape of(const std::vector<int64_t>& values);

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  bool is_static() const;
  /// All values; call only when is_static().
  std::vector<int64_t> values() const;
  std::string to_string() const;  // "[1,3,224,224]" or "[batch,3,?,?]"
  bool operator==(const Shape& o) const { return dims == o.dims; }
};

/// What a graph value holds: a tensor (almost always), a sequence of tensors, or an optional
/// (ONNX Optional) of either.
enum class ValueKind : uint8_t { kTensor, kSequence, kOptionalTensor, kOptionalSequence };

/// dtype plus an optional shape (nullopt = rank unknown). For sequences and optionals the
/// dtype and shape describe the element tensors.
struct TensorType {
  DType dtype = DType::kUndefined;
  std::optional<Shape> shape;
  ValueKind kind = ValueKind::kTensor;
  std::string to_string() const;  // "f32[1,3,224,224]", "seq(f32[?])", "optional(f32[2])"
};

/// Largest element count and byte size one tensor may have (guards against absurd dims).
constexpr int64_t kMaxTensorElements = int64_t(1) << 36;
constexpr int64_t kMaxRank = 64;

/// Product of dims with overflow and limit checks; `what` names the tensor in the error.
StatusOr<int64_t> checked_element_count(const std::vector<int64_t>& dims, const std::string& what);
/// Element count without limit checks (dims already validated); 0 when any dim is 0, saturates
/// at INT64_MAX instead of overflowing.
int64_t element_count(const std::vector<int64_t>& dims);
std::string dims_to_string(const std::vector<int64_t>& dims);

}  // namespace ferry
