// Pieces shared by the cpu backend's training kernel files (grad_norm_pool.cpp, grad_activation.cpp,
// grad_blocked.cpp): the factory of their f32 kernels, the outputs a node wants, per-channel threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_parallel.h"

namespace ferry::cpu {

/// Whether the node has output i and something reads it (an empty name: not computed).
inline bool output_wanted(const KernelContext& ctx, int64_t i) {
  return i < ctx.num_outputs() && !ctx.node().outputs[static_cast<size_t>(i)].empty();
}

/// Calls fn(c) for every channel, threads over channels when the work (elements per channel) pays.
template <typename F>
void for_channels(int64_t C, int64_t per_channel, F fn) {
  parallel_ranges(C, per_channel, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) fn(c);
  });
}

/// Whether t is an f32 vector of C values (a per-channel operand).
inline bool is_f32_vector(const Tensor& t, int64_t C) {
  return t.dtype() == DType::kF32 && t.rank() == 1 && t.dim(0) == C;
}

/// The factory of a training kernel `fn` (FnKernel: the reference runs what fn declines): every
/// input may be f32 (or int64) at load time; other nodes get no kernel.
inline CpuKernelFactory grad_kernel_factory(StatusOr<bool> (*fn)(KernelContext&)) {
  return [fn](const Node& node, const OpSchema& schema, const Graph& g) -> StatusOr<std::unique_ptr<Kernel>> {
    for (const std::string& in : node.inputs)
      if (!in.empty() && !maybe_f32(g, in) && g.find_type(in)->dtype != DType::kI64) return std::unique_ptr<Kernel>();
    return make_fn_kernel(fn, schema);
  };
}

}  // namespace ferry::cpu
