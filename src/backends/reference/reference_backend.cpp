// The reference backend: runs every op with the registry's plain reference kernel.
#include "backends/backend.h"

namespace ferry {
namespace {

class ReferenceKernel : public Kernel {
 public:
  explicit ReferenceKernel(KernelFn fn) : fn_(fn) {}
  Status compute(KernelContext& ctx) override { return fn_(ctx); }

 private:
  KernelFn fn_;
};

class ReferenceBackend : public Backend {
 public:
  std::string name() const override { return "cpu-ref"; }
  std::string description() const override { return "reference CPU kernels (single thread, plain loops)"; }
  bool supports(const Node& node, const OpSchema& schema, std::string* why) const override {
    if (schema.kernel) return true;
    if (why) *why = std::string(schema.name) + " has no reference kernel";
    return false;
  }
  StatusOr<std::unique_ptr<Kernel>> create_kernel(const Node& node, const OpSchema& schema, const Graph&) override {
    if (!schema.kernel) return unsupported(node.describe() + ": no reference kernel");
    return std::unique_ptr<Kernel>(new ReferenceKernel(schema.kernel));
  }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace ferry
