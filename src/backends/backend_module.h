// Backend modules: a backend built as a shared library and opened with dlopen the first time its
// device is asked for (as ONNX Runtime loads its CUDA execution provider), so a command that runs
// on the CPU maps none of the device's libraries (cuBLASLt and cuDNN alone are ~220 MiB resident).
//
// A module is built by ferry_add_backend_module() (cmake/FerryBackendModule.cmake), which also
// lists it in backend_entries() under its device name; the core holds no code of its own for any
// module. The module links its own copy of the layers it uses (ops/, ir/, common/), keeps every
// symbol local (cmake/backend_module.map) and exports one C function, kBackendModuleSymbol, that
// returns its BackendModuleApi. The core and the module pass C++ objects (Graph, Node, Tensor,
// Status) to each other, so a module loads only into the ferry build it was built with: the
// ABI number, the version and the sizes of the shared types are checked before anything is called.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backends/backend.h"

namespace ferry {

/// Bumped whenever Backend, Kernel, KernelContext, Graph, Node, Tensor or Status change in a way a
/// module built from older sources would misread.
inline constexpr uint32_t kBackendModuleAbi = 1;
/// The one symbol a module exports: `extern "C" const BackendModuleApi* ferry_backend_module_v1()`.
inline constexpr const char* kBackendModuleSymbol = "ferry_backend_module_v1";

/// Sizes of the types the core and a module share: a module built against other headers is
/// refused instead of misreading them.
struct BackendModuleLayout {
  uint32_t backend_size, kernel_size, graph_size, node_size, tensor_size, status_size, schema_size;
  static BackendModuleLayout of_this_build();
  bool operator==(const BackendModuleLayout&) const = default;
};

struct BackendModuleApi {
  uint32_t abi = kBackendModuleAbi;
  const char* ferry_version = "";
  BackendModuleLayout layout{};
  /// Opens the device named `device` ("<name>" or "<name>:<suffix>"); fails with the reason (no
  /// driver, no device, bad index) when it cannot.
  StatusOr<std::unique_ptr<Backend>> (*open)(const std::string& device) = nullptr;
};

using BackendModuleEntryFn = const BackendModuleApi* (*)();

/// Loads the module of `entry` (entry.module: the library's file name) once per process and
/// returns its API. Searched for in $FERRY_BACKEND_PATH (':'-separated folders), then next to the
/// executable or library holding ferry, then in <libdir>/ferry of the installed layout (seen from
/// libferry.so in <libdir> and from the executable in <prefix>/bin).
/// Fails with kUnsupported naming the file, the folders searched or dlerror(), and what to try.
StatusOr<const BackendModuleApi*> load_backend_module(const BackendEntry& entry);

/// Whether the module of `entry` is loaded in this process (without loading it).
bool backend_module_loaded(const BackendEntry& entry);

}  // namespace ferry

inline ferry::BackendModuleLayout ferry::BackendModuleLayout::of_this_build() {
  return {static_cast<uint32_t>(sizeof(Backend)), static_cast<uint32_t>(sizeof(Kernel)),
          static_cast<uint32_t>(sizeof(Graph)),   static_cast<uint32_t>(sizeof(Node)),
          static_cast<uint32_t>(sizeof(Tensor)),  static_cast<uint32_t>(sizeof(Status)),
          static_cast<uint32_t>(sizeof(OpSchema))};
}

/// Defines a module's entry point; `OPEN` is its `StatusOr<std::unique_ptr<Backend>>(const std::string&)`.
#define FERRY_DEFINE_BACKEND_MODULE(OPEN)                                                  \
  extern "C" __attribute__((visibility("default"))) const ::ferry::BackendModuleApi*      \
  ferry_backend_module_v1() {                                                              \
    static const ::ferry::BackendModuleApi api = {::ferry::kBackendModuleAbi, FERRY_VERSION, \
                                                  ::ferry::BackendModuleLayout::of_this_build(), OPEN}; \
    return &api;                                                                           \
  }
