#include "ir/shape.h"

#include <limits>

namespace ferry {

std::string Dim::to_string() const {
  if (value >= 0) return std::to_string(value);
  return symbol.empty() ? "?" : symbol;
}

Shape Shape::of(const std::vector<int64_t>& values) {
  Shape s;
  for (int64_t v : values) s.dims.emplace_back(v);
  return s;
}

bool Shape::is_static() const {
  for (const Dim& d : dims)
    if (!d.is_known()) return false;
  return true;
}

std::vector<int64_t> Shape::values() const {
  std::vector<int64_t> v;
  v.reserve(dims.size());
  for (const Dim& d : dims) v.push_back(d.value);
  return v;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i].to_string();
  }
  return s + "]";
}

std::string TensorType::to_string() const {
  std::string t = std::string(dtype_name(dtype)) + (shape ? shape->to_string() : "[rank?]");
  switch (kind) {
    case ValueKind::kTensor: return t;
    case ValueKind::kSequence: return "seq(" + t + ")";
    case ValueKind::kOptionalTensor: return "optional(" + t + ")";
    case ValueKind::kOptionalSequence: return "optional(seq(" + t + "))";
  }
  return t;
}

StatusOr<int64_t> checked_element_count(const std::vector<int64_t>& dims, const std::string& what) {
  if (static_cast<int64_t>(dims.size()) > kMaxRank)
    return invalid_model(what + ": rank " + std::to_string(dims.size()) + " exceeds the limit of " +
                         std::to_string(kMaxRank));
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : dims) {
    if (d < 0) return invalid_model(what + ": negative dimension " + std::to_string(d) + " in shape " + dims_to_string(dims));
    if (d == 0) zero = true;
  }
  if (zero) return int64_t(0);
  for (int64_t d : dims) {
    if (n > kMaxTensorElements / d)
      return resource_exhausted(what + ": shape " + dims_to_string(dims) + " has more than 2^36 elements (limit " +
                                std::to_string(kMaxTensorElements) + ")");
    n *= d;
  }
  return n;
}

int64_t element_count(const std::vector<int64_t>& dims) {
  for (int64_t d : dims)
    if (d == 0) return 0;  // first: huge dimensions beside a 0 are a legal empty shape
  int64_t n = 1;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();  // unchecked shape: saturate
  return n;
}

std::string dims_to_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace ferry
