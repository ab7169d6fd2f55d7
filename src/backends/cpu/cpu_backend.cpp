// The optimized CPU backend ("cpu"): optimized kernels where registered, the reference kernel
// for everything else (so coverage always equals the registry's).
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/inverted_residual.h"
#include "backends/cpu/prepacked.h"
#include "backends/library_versions.h"
#include "common/env_switch.h"

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

// oneDNN's bf16 convolutions run natively (amp_bf16_fold's Conv/ConvGrad with amp_bf16 = 1).
bool native_bf16_cpu() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return ok;
#else
  return false;
#endif
}

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
      // A tuned choice (kKernelChoiceAttr) is tried first. A pin the kernel table no longer honours
      // (a file tuned by another build or on another ISA: the factory declines, or the index is past
      // the table) takes the unpinned order, as an untuned node would, never the slow reference kernel.
      const Attribute* pin = node.attr(kCpuImplAttr);
      const bool pinned = pin && pin->i >= 0 && pin->i < static_cast<int64_t>(factories->size());
      if (pinned) {
        ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, (*factories)[static_cast<size_t>(pin->i)](node, schema, graph));
        if (k) return k;
      }
      const bool pinned_reference = pin && pin->i == -1;
      for (size_t i = 0; i < factories->size() && !pinned_reference; ++i) {
        if (pinned && pin->i == static_cast<int64_t>(i)) continue;
        ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, (*factories)[i](node, schema, graph));
        if (k) return k;
      }
    }
    if (!schema.kernel) return unsupported(node.describe() + ": no CPU kernel");
    return std::unique_ptr<Kernel>(new ReferenceFallbackKernel(schema.kernel));
  }
  // The passes that rewrite graphs for these kernels (backends/backend.h): NHWC convolutions and
  // pools, the Attention kernel's in-place q/k/v Slices, InvertedResidual, oneDNN bf16
  // convolutions, the nChwBc training kernels (grad_blocked.h). The CPU decides two:
  //  - fused_inverted_residual only with AVX-512F: InvertedResidual's kernel has no other path
  //    (inverted_residual.h), and the op's reference kernel run instead is ~12x slower than the three
  //    oneDNN convolutions it replaces (figures in passes/inverted_residual_fusion.cpp);
  //    FERRY_INVERTED_RESIDUAL_ANY_CPU=1 offers it anyway (tests, A/B);
  //  - bf16_conv only with avx512_bf16 (oneDNN's native bf16 convolutions); FERRY_AMP_NATIVE=0
  //    withholds it, so `train --amp bf16` runs the emulated graph.
  std::vector<std::string> graph_traits() const override {
    std::vector<std::string> traits = {"channels_last", "attention_qkv_views"};
    const char* any_cpu = env_value("FERRY_INVERTED_RESIDUAL_ANY_CPU");
    if ((any_cpu && std::strcmp(any_cpu, "1") == 0) || cpu::InvertedResidual::available())
      traits.push_back("fused_inverted_residual");
    if (env_switch_on("FERRY_AMP_NATIVE") && native_bf16_cpu()) traits.push_back("bf16_conv");
    traits.push_back("blocked_training_layout");
    return traits;
  }
  // `ferry compile` stores the oneDNN kernels' packed weights on the nodes (prepacked.h).
  std::unique_ptr<WeightPrepack> begin_prepack(Graph& graph) override { return cpu::begin_prepack(graph); }
  // `ferry compile --tune` times the table's factories that accept a node, and the reference kernel.
  bool has_kernel_choices(const Node& node) const override {
    return cpu_kernel_table().find(node.domain, node.op_type) != nullptr;
  }
  StatusOr<std::vector<int>> kernel_choices(const Node& node, const OpSchema& schema, const Graph& graph) override {
    std::vector<int> choices;
    const auto* factories = cpu_kernel_table().find(node.domain, node.op_type);
    if (!factories) return choices;
    for (size_t k = 0; k < factories->size(); ++k) {
      ASSIGN_OR_RETURN(std::unique_ptr<Kernel> probe, (*factories)[k](node, schema, graph));
      if (probe) choices.push_back(static_cast<int>(k));
    }
    return choices;
  }
  // oneDNN and the own kernels run on the OpenMP runtime.
  void set_num_threads(int threads) override {
    omp_set_num_threads(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
};

}  // namespace

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + " (" + v->hash + ")";
}

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace ferry
