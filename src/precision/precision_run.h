// Running a model in a precision mode: the optimization pipeline first (so fusions see the
// exported graph), then the precision rewrite (passes/precision.h) on the optimized graph, then
// the executor. Also a watch that names the first node producing NaN or inf.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "passes/precision.h"
#include "runtime/executor.h"

namespace ferry {

/// The opt level Executor::create uses for options.opt_level == -1 on `device`.
int effective_opt_level(const ExecutorOptions& options);

/// A copy of `model` optimized for `options` and rewritten for `precision`, marked optimized so
/// the executor runs no passes again. Returns `model` itself when `precision` changes nothing.
StatusOr<std::shared_ptr<const Model>> prepare_precision_model(std::shared_ptr<const Model> model,
                                                               const ExecutorOptions& options,
                                                               const PrecisionOptions& precision,
                                                               PrecisionReport* report = nullptr);

/// prepare_precision_model + Executor::create.
StatusOr<std::unique_ptr<Executor>> create_precision_executor(std::shared_ptr<const Model> model,
                                                              const ExecutorOptions& options,
                                                              const PrecisionOptions& precision,
                                                              PrecisionReport* report = nullptr);

/// NaN / inf counts of a float tensor (zeros for other types).
struct NonFiniteCount {
  int64_t nan = 0;
  int64_t inf = 0;
  bool any() const { return nan || inf; }
};
NonFiniteCount count_non_finite(const Tensor& t);

/// The first node (in run order) whose output held NaN or inf: where an overflow started.
struct NonFiniteEvent {
  std::string node;    // Node::name
  std::string op;      // op_type
  std::string value;   // the output, by its base name (precision_base_name)
  NonFiniteCount count;
  /// "node 'Mul_3' (Mul) produced 12 inf, 0 NaN in 'h' (the first node to)"
  std::string describe() const;
};

/// An observer recording the first NaN/inf-producing node of each run (reset() between runs).
/// Precision Casts count as their consumer's fault: a Cast that overflows is reported as the
/// node reading it, which is where the value leaves fp32.
class NonFiniteWatch {
 public:
  NodeObserver observer();
  void reset() { first_.reset(); pending_cast_.reset(); }
  const std::optional<NonFiniteEvent>& first() const { return first_; }

 private:
  std::optional<NonFiniteEvent> first_;
  std::optional<NonFiniteEvent> pending_cast_;
};

}  // namespace ferry
