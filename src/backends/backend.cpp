#include "backends/backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sys/stat.h>

#include "backends/backend_module.h"
#include "backends/cpu/int8_pair_saturation.h"
#include "backends/device_defaults.h"
#include "common/env_switch.h"

namespace ferry {

Status run_fallback_with_input(KernelFn fallback, KernelContext& ctx, int64_t index, const Value& input) {
  std::vector<const Value*> inputs;
  for (int64_t i = 0; i < std::max(ctx.num_inputs(), index + 1); ++i)
    inputs.push_back(i == index ? &input : ctx.has_input(i) ? &ctx.input_value(i) : nullptr);
  std::vector<Value> outputs(static_cast<size_t>(ctx.num_outputs()));
  KernelContext inner(ctx.node(), ctx.opset(), std::move(inputs), &outputs);
  inner.allocator = ctx.allocator;
  RETURN_IF_ERROR(fallback(inner));
  for (size_t i = 0; i < outputs.size(); ++i) ctx.set_output_value(static_cast<int64_t>(i), std::move(outputs[i]));
  return Status::ok();
}

std::unique_ptr<Backend> make_reference_backend();
std::unique_ptr<Backend> make_cpu_backend();

const std::vector<BackendEntry>& backend_entries() {
  static const std::vector<BackendEntry> entries = {
      {"cpu-ref", "reference CPU kernels: plain loops, the oracle every backend is tested against",
       make_reference_backend},
      {"cpu", "optimized CPU kernels (oneDNN and vectorized loops; reference kernels for the other ops)",
       make_cpu_backend},
  // The backend modules configured (ferry_add_backend_module in cmake/FerryBackendModule.cmake).
#define FERRY_BACKEND_MODULE(NAME, SUMMARY, FILE) {NAME, SUMMARY, nullptr, nullptr, FILE},
#include "backend_modules.inc"
#undef FERRY_BACKEND_MODULE
  };
  return entries;
}

namespace {

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

/// Where a module is looked for, in order (see load_backend_module).
std::vector<std::string> module_folders() {
  std::vector<std::string> folders;
  auto add = [&](const std::string& f) {
    if (f.empty()) return;
    for (const std::string& g : folders)
      if (g == f) return;
    folders.push_back(f);
  };
  if (const char* env = env_value("FERRY_BACKEND_PATH")) {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t colon = list.find(':', start);
      const size_t end = colon == std::string::npos ? list.size() : colon;
      add(list.substr(start, end - start));
      start = end + 1;
    }
  }
  // The file holding this code: the executable, or libferry.so for a program on the C API.
  std::vector<std::string> homes;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&module_folders), &info) && info.dli_fname && info.dli_fname[0] == '/')
    homes.push_back(folder_of(info.dli_fname));
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) homes.push_back(folder_of(std::string(exe, static_cast<size_t>(n))));
  for (const std::string& h : homes) add(h);
  // Installed (cmake/FerryBackendModule.cmake): <libdir>/ferry/, seen from libferry.so in <libdir>
  // and from the executable in <prefix>/bin.
  for (const std::string& h : homes) add(h + "/ferry");
  for (const std::string& h : homes) add(h + "/../" FERRY_INSTALL_LIBDIR "/ferry");
  return folders;
}

struct LoadedModule {
  Status status;
  const BackendModuleApi* api = nullptr;
};

std::mutex& modules_mu() {
  static std::mutex mu;
  return mu;
}
/// By file name; a module stays loaded until the process ends (its code backs kernels and tensors).
std::map<std::string, LoadedModule>& loaded_modules() {
  static auto* m = new std::map<std::string, LoadedModule>();
  return *m;
}

LoadedModule open_module(const BackendEntry& e) {
  const std::string what = std::string("the ") + e.name + " backend module " + e.module;
  std::string path;
  std::string searched;
  for (const std::string& folder : module_folders()) {
    const std::string candidate = folder + "/" + e.module;
    struct stat st{};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      path = candidate;
      break;
    }
    searched += (searched.empty() ? "" : ", ") + folder;
  }
  if (path.empty())
    return {unsupported(what + " was not found (searched " + searched +
                        "); install it next to ferry or set FERRY_BACKEND_PATH to its folder, or use --device cpu"),
            nullptr};
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    return {unsupported(what + " (" + path + ") could not be loaded: " + (err ? err : "unknown dlopen error") +
                        "; install the libraries it names (`ferry doctor` lists what is found), or use --device cpu"),
            nullptr};
  }
  auto entry = reinterpret_cast<BackendModuleEntryFn>(dlsym(handle, kBackendModuleSymbol));
  const BackendModuleApi* api = entry ? entry() : nullptr;
  std::string mismatch;
  if (!api)
    mismatch = std::string("it has no ") + kBackendModuleSymbol + "()";
  else if (api->abi != kBackendModuleAbi)
    mismatch = "its module ABI is " + std::to_string(api->abi) + ", this ferry's is " + std::to_string(kBackendModuleAbi);
  else if (std::string(api->ferry_version) != FERRY_VERSION || !(api->layout == BackendModuleLayout::of_this_build()))
    mismatch = std::string("it was built for ferry ") + api->ferry_version + " with other headers than this ferry " +
               FERRY_VERSION;
  else if (!api->open)
    mismatch = "it has no open function";
  if (!mismatch.empty()) {
    dlclose(handle);
    return {unsupported(what + " (" + path + ") does not belong to this ferry: " + mismatch +
                        "; install the module built with this ferry"),
            nullptr};
  }
  return {Status(), api};  // never dlclose-d: see loaded_modules()
}

}  // namespace

StatusOr<const BackendModuleApi*> load_backend_module(const BackendEntry& entry) {
  if (!entry.module) return invalid_argument(std::string("device '") + entry.name + "' is built in, not a module");
  std::lock_guard<std::mutex> lock(modules_mu());
  auto it = loaded_modules().find(entry.module);
  if (it == loaded_modules().end()) it = loaded_modules().emplace(entry.module, open_module(entry)).first;
  if (!it->second.status.is_ok()) return it->second.status;
  return it->second.api;
}

bool backend_module_loaded(const BackendEntry& entry) {
  if (!entry.module) return false;
  std::lock_guard<std::mutex> lock(modules_mu());
  auto it = loaded_modules().find(entry.module);
  return it != loaded_modules().end() && it->second.api != nullptr;
}

StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& device) {
  std::string known;
  for (const BackendEntry& e : backend_entries()) {
    const std::string name = e.name;
    const bool named = device == name || device.rfind(name + ":", 0) == 0;
    if (e.module && named) {
      ASSIGN_OR_RETURN(const BackendModuleApi* api, load_backend_module(e));
      return api->open(device);
    }
    if (e.open && named) return e.open(device);
    if (device == e.name) return e.factory();
    known += known.empty() ? e.name : std::string(", ") + e.name;
  }
  return invalid_argument("unknown device '" + device + "'; devices compiled in: " + known);
}

namespace {

// What device_defaults.h answers for the built-in devices (backend_entries' first two); a device
// not listed (a module's, "cuda:1") is not the host's and runs optimized.
struct DeviceDefaults {
  const char* name;
  bool host;
  int opt_level;
  bool split_batches;
};
constexpr DeviceDefaults kDeviceDefaults[] = {
    {"cpu-ref", true, 0, false},  // the oracle runs graphs as imported, batches whole
    {"cpu", true, 2, true},
};

}  // namespace

bool is_host_device(const std::string& device) {
  for (const DeviceDefaults& d : kDeviceDefaults)
    if (device == d.name) return d.host;
  return false;
}

int default_opt_level(const std::string& device) {
  for (const DeviceDefaults& d : kDeviceDefaults)
    if (device == d.name) return d.opt_level;
  return 2;
}

bool splits_batches(const std::string& device) {
  for (const DeviceDefaults& d : kDeviceDefaults)
    if (device == d.name) return d.split_batches;
  return true;  // the executor asks only for host devices
}

bool host_int8_pairs_saturate() { return cpu::int8_pairs_saturate(); }

std::vector<std::string> device_graph_traits(const std::string& device) {
  for (const BackendEntry& e : backend_entries())
    if (!e.module && !e.open && e.factory && device == e.name) return e.factory()->graph_traits();
  return {};
}

}  // namespace ferry
