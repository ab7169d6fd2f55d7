// The CUDA backend's kernel table. A node runs on "cuda" when its op has an entry here whose
// accepts() takes the node (attributes only: supports() is asked before shapes and types are
// bound). At load the factory builds the kernel from the node and the graph (shapes, weights);
// it may still return nullptr for a type or shape it does not cover, and that node then runs its
// reference kernel on the host inside the backend (counted in TransferStats::host_fallbacks).
//
// Kernel files are listed once in src/backends/cuda/cuda_kernels.inc: each K(name) is a file
// src/backends/cuda/ops_<name>.cpp defining `void register_cuda_<name>_kernels(CudaKernelTable&)`.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_context.h"
#include "ops/registry.h"

namespace ferry {

/// One node's computation on the GPU. Inputs are device tensors (nullptr: omitted optional input,
/// or an input listed in host_input_mask); run() fills `outputs` (pre-sized to the node's output
/// count), all on ctx.stream(). `kc` gives the host view of the inputs in host_input_mask
/// (shape-like inputs: Reshape's shape, Slice's starts) and the node's attributes.
class CudaOpKernel {
 public:
  virtual ~CudaOpKernel() = default;
  virtual Status run(CudaContext& ctx, KernelContext& kc, const std::vector<const DeviceTensor*>& inputs,
                     std::vector<DeviceTensor>& outputs) = 0;
  /// Bit i: input i is read on the host (never uploaded); its producer keeps a host copy.
  uint64_t host_input_mask = 0;
};

/// What a factory sees: the node, its schema, the graph (value_types, initializers), the device.
struct CudaKernelArgs {
  const Node& node;
  const OpSchema& schema;
  const Graph& graph;
  CudaContext& ctx;
  int64_t opset;
  /// Type of value `name` known at load, or nullptr.
  const TensorType* type_of(const std::string& name) const { return graph.find_type(name); }
  /// Input i's dtype when known at load (kUndefined otherwise).
  DType input_dtype(size_t i) const;
  /// Input i's constant value (an initializer), or nullptr.
  const Tensor* constant_input(size_t i) const;
};

using CudaKernelFactory = std::function<StatusOr<std::unique_ptr<CudaOpKernel>>(const CudaKernelArgs& args)>;
/// Attribute-level check for supports(); `why` says what is not covered. nullptr: any node.
using CudaAcceptsFn = bool (*)(const Node& node, std::string* why);

struct CudaKernelEntry {
  CudaAcceptsFn accepts = nullptr;
  CudaKernelFactory factory;
  /// Element types the kernel takes on input 0 (for `ferry ops`); empty: the schema's.
  std::vector<DType> types;
};

class CudaKernelTable {
 public:
  void add(const std::string& domain, const std::string& op_type, CudaKernelEntry entry) {
    table_[{domain, op_type}].push_back(std::move(entry));
  }
  const std::vector<CudaKernelEntry>* find(const std::string& domain, const std::string& op_type) const {
    auto it = table_.find({domain, op_type});
    return it == table_.end() ? nullptr : &it->second;
  }
  size_t size() const { return table_.size(); }
  const std::map<std::pair<std::string, std::string>, std::vector<CudaKernelEntry>>& entries() const { return table_; }

 private:
  std::map<std::pair<std::string, std::string>, std::vector<CudaKernelEntry>> table_;
};

/// The table with every kernel file's registrations.
const CudaKernelTable& cuda_kernel_table();

/// The float types the own kernels are instantiated for.
inline const std::vector<DType>& cuda_float_types() {
  static const std::vector<DType> t = {DType::kF32, DType::kF16, DType::kBF16};
  return t;
}
inline bool is_cuda_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

}  // namespace ferry
