// The optimized CPU backend ("cpu"): optimized kernels where registered, the reference kernel
// for everything else (so coverage always equals the registry's).
#include <omp.h>

#include <algorithm>
#include <thread>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"

namespace ferry {

#define K(name) void register_cpu_##name##_kernels(CpuKernelTable&);
#include "backends/cpu/cpu_kernels.inc"
#undef K

const CpuKernelTable& cpu_kernel_table() {
  static const CpuKernelTable table = [] {
    CpuKernelTable t;
#define K(name) register_cpu_##name##_kernels(t);
#include "backends/cpu/cpu_kernels.inc"
#undef K
    return t;
  }();
  return table;
}

namespace {

class ReferenceFallbackKernel : public Kernel {
 public:
  explicit ReferenceFallbackKernel(KernelFn fn) : fn_(fn) {}
  Status compute(KernelContext& ctx) override { return fn_(ctx); }

 private:
  KernelFn fn_;
};

class CpuBackend : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string description() const override {
    return "optimized CPU kernels (" + std::to_string(cpu_kernel_table().size()) +
           " optimized ops, reference kernels for the rest)";
  }
  bool supports(const Node& node, const OpSchema& schema, std::string* why) const override {
    if (schema.kernel || cpu_kernel_table().find(schema.domain, schema.name)) return true;
    if (why) *why = std::string(schema.name) + " has no CPU kernel";
    return false;
  }
  StatusOr<std::unique_ptr<Kernel>> create_kernel(const Node& node, const OpSchema& schema, const Graph& graph) override {
    if (const auto* factories = cpu_kernel_table().find(schema.domain, schema.name)) {
      const Attribute* pin = node.attr(kCpuImplAttr);  // a tuned choice
      for (size_t i = 0; i < factories->size(); ++i) {
        if (pin && pin->i != static_cast<int64_t>(i)) continue;
        ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, (*factories)[i](node, schema, graph));
        if (k) return k;
      }
    }
    if (!schema.kernel) return unsupported(node.describe() + ": no CPU kernel");
    return std::unique_ptr<Kernel>(new ReferenceFallbackKernel(schema.kernel));
  }
  // The passes that rewrite graphs for these kernels (backends/backend.h): NHWC convolutions and
  // pools, the Attention kernel's in-place q/k/v Slices, InvertedResidual, oneDNN bf16
  // convolutions, the nChwBc training kernels (grad_blocked.h).
  std::vector<std::string> graph_traits() const override {
    return {"channels_last", "attention_qkv_views", "fused_inverted_residual", "bf16_conv", "blocked_training_layout"};
  }
  // oneDNN and the own kernels run on the OpenMP runtime.
  void set_num_threads(int threads) override {
    omp_set_num_threads(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace ferry
