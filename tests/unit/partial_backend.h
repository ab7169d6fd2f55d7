// A backend for tests that claims only some ops (the reference kernels run them): it stands in
// for a device that lacks ops, to exercise partitioning, CPU fallback and decompositions.
#pragma once

#include <set>
#include <string>
#include <utility>

#include "backends/backend.h"

namespace ferry::testing {

class PartialBackend : public Backend {
 public:
  explicit PartialBackend(std::set<std::string> ops, std::string name = "test-partial")
      : ops_(std::move(ops)), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "test backend claiming " + std::to_string(ops_.size()) + " ops"; }
  bool supports(const Node& node, const OpSchema& schema, std::string* why) const override {
    if (ops_.count(node.op_type) && schema.kernel) return true;
    if (why) *why = node.op_type + " is not claimed by " + name_;
    return false;
  }
  StatusOr<std::unique_ptr<Kernel>> create_kernel(const Node& node, const OpSchema& schema, const Graph&) override {
    if (!ops_.count(node.op_type)) return internal_error(node.describe() + " was given to " + name_ + ", which does not claim it");
    return std::unique_ptr<Kernel>(new Fn(schema.kernel));
  }

 private:
  struct Fn : Kernel {
    explicit Fn(KernelFn f) : fn(f) {}
    Status compute(KernelContext& ctx) override { return fn(ctx); }
    KernelFn fn;
  };
  std::set<std::string> ops_;
  std::string name_;
};

}  // namespace ferry::testing
