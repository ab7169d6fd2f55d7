// Decompositions: ONNX ops rewritten into simpler ONNX ops that compute the same values
// (HardSwish -> x * HardSigmoid(x), Gelu -> erf form, LayerNormalization -> ReduceMean/Sub/...).
// Used by the decompose pass (a device lacks the op but has the parts) and by `ferry check`
// ("runs via decomposition" on a target that lacks the op).
//
// Each decomposition is exact in real arithmetic; in floating point the results differ from the
// fused op by rounding only (the unit tests bound it on the reference backend).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "ir/graph.h"

namespace ferry {

struct Decomposition {
  const char* op;          // ai.onnx op type it replaces
  int64_t since_opset;     // first opset the op exists at
  const char* formula;     // "x * HardSigmoid(x; alpha=1/6, beta=0.5)"
  /// ai.onnx ops the expansion produces (the capability query for targets).
  std::vector<const char*> produces;
};

/// Every decomposition ferry knows, one per op.
const std::vector<Decomposition>& decompositions();

/// The decomposition of an ai.onnx op, or nullptr.
const Decomposition* find_decomposition(const std::string& domain, const std::string& op_type);

/// Whether every op `d` produces is accepted by `accepts`, directly or through its own
/// decomposition (nested at most three levels: HardSwish -> HardSigmoid -> Mul/Add/Min/Max).
bool decomposition_accepted(const Decomposition& d, const std::function<bool(const std::string& op)>& accepts);

/// Whether `node` (in graph g of `model`) can be decomposed here (its attributes and known
/// types allow it: e.g. LayerNormalization whose Mean output is read cannot); `why` says why not.
bool can_decompose(const Model& model, const Graph& g, const Node& node, std::string* why);

/// The nodes that replace `node` (same input and output value names; intermediate values and
/// constants get fresh names, constants are added to g->initializers and typed in
/// g->value_types). Fails when can_decompose is false.
StatusOr<std::vector<Node>> decompose_node(const Model& model, Graph* g, const Node& node);

}  // namespace ferry
