// Small pieces shared by the hand-written CPU kernel files: a kernel that runs a compute
// function and falls back to the op's reference kernel for inputs it does not handle, and
// the f32 check the factories make at load time.
#pragma once

#include <memory>
#include <utility>

#include "backends/cpu/cpu_kernels.h"

namespace ferry::cpu {

/// A kernel made of a function returning true when it handled the node (false: run the
/// reference kernel, e.g. for a dtype or layout it does not cover).
class FnKernel : public Kernel {
 public:
  using Fn = std::function<StatusOr<bool>(KernelContext&)>;
  FnKernel(Fn fn, KernelFn fallback) : fn_(std::move(fn)), fallback_(fallback) {}
  Status compute(KernelContext& ctx) override {
    ASSIGN_OR_RETURN(bool done, fn_(ctx));
    if (done) return Status::ok();
    if (!fallback_) return ctx.error("no kernel for these inputs on cpu");
    return fallback_(ctx);
  }

 private:
  Fn fn_;
  KernelFn fallback_;
};

inline std::unique_ptr<Kernel> make_fn_kernel(FnKernel::Fn fn, const OpSchema& schema) {
  return std::make_unique<FnKernel>(std::move(fn), schema.kernel);
}

/// True when value `v` is known (at load time) to be float32, or its type is unknown.
inline bool maybe_f32(const Graph& g, const std::string& v) {
  const TensorType* t = g.find_type(v);
  return !t || t->dtype == DType::kF32 || t->dtype == DType::kUndefined;
}

/// True when every given input of the context is an f32 tensor.
inline bool all_f32(const KernelContext& ctx) {
  for (int64_t i = 0; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i) && (!ctx.input_value(i).is_tensor() || ctx.input(i).dtype() != DType::kF32)) return false;
  return true;
}

}  // namespace ferry::cpu
