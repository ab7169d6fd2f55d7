// The optimized CPU backend's kernel table. The backend runs each node with an optimized kernel
// when one is registered for its op (and accepts the node), else with the reference kernel, so
// every op the registry knows runs on "cpu".
//
// Kernel files are listed once in src/backends/cpu/cpu_kernels.inc: each K(name) is a file
// src/backends/cpu/<name>.cpp defining `void register_cpu_<name>_kernels(CpuKernelTable&)`.
// (An explicit list, not static initializers: the backend is a static library and the linker
// drops object files nothing references.)
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "backends/backend.h"

namespace ferry {

/// Makes an optimized kernel for a node, or returns nullptr when this implementation does not
/// handle the node (an attribute, dtype or shape it does not cover): the reference kernel runs it.
/// Shapes and constant inputs are known from `graph` (value_types, initializers) at creation time.
using CpuKernelFactory =
    std::function<StatusOr<std::unique_ptr<Kernel>>(const Node& node, const OpSchema& schema, const Graph& graph)>;

class CpuKernelTable {
 public:
  /// Registers a factory for (domain, op_type); several may be registered, tried in order.
  void add(const std::string& domain, const std::string& op_type, CpuKernelFactory factory) {
    table_[{domain, op_type}].push_back(std::move(factory));
  }
  const std::vector<CpuKernelFactory>* find(const std::string& domain, const std::string& op_type) const {
    auto it = table_.find({domain, op_type});
    return it == table_.end() ? nullptr : &it->second;
  }
  size_t size() const { return table_.size(); }

 private:
  std::map<std::pair<std::string, std::string>, std::vector<CpuKernelFactory>> table_;
};

/// The node attribute that pins a node's CPU kernel (backends/backend.h's kKernelChoiceAttr, set by
/// `ferry compile --tune`): the index of the factory in the op's list, or -1 for the reference kernel.
inline constexpr const char* kCpuImplAttr = kKernelChoiceAttr;

/// The table with every kernel file's registrations.
const CpuKernelTable& cpu_kernel_table();

}  // namespace ferry
