// Value: what one graph edge carries at run time — a tensor, a sequence of tensors, or an
// optional (which may be empty). Nearly every edge is a plain tensor.
#pragma once

#include <vector>

#include "ir/tensor.h"

namespace ferry {

struct Value {
  ValueKind kind = ValueKind::kTensor;
  /// kTensor, or kOptionalTensor holding an element.
  Tensor tensor;
  /// kSequence, or kOptionalSequence holding an element.
  std::vector<Tensor> sequence;
  /// False only for an empty optional.
  bool has_element = true;

  Value() = default;
  Value(Tensor t) : tensor(std::move(t)) {}  // NOLINT: a tensor is a value
  static Value make_sequence(std::vector<Tensor> items) {
    Value v;
    v.kind = ValueKind::kSequence;
    v.sequence = std::move(items);
    return v;
  }
  static Value none(ValueKind optional_kind) {
    Value v;
    v.kind = optional_kind;
    v.has_element = false;
    return v;
  }
  bool is_tensor() const { return kind == ValueKind::kTensor || (kind == ValueKind::kOptionalTensor && has_element); }
  bool is_sequence() const { return kind == ValueKind::kSequence || (kind == ValueKind::kOptionalSequence && has_element); }
  bool defined() const { return is_sequence() || !has_element || tensor.defined(); }
  /// "f32[2,3]", "seq(3 tensors)", "optional(none)"
  std::string describe() const {
    if (!has_element) return "optional(none)";
    if (is_sequence()) return "seq(" + std::to_string(sequence.size()) + " tensors)";
    return tensor.type().to_string();
  }
};

}  // namespace ferry
