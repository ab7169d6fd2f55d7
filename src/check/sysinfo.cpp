// CPU, memory and NVIDIA stack probes; see sysinfo.h.
#include "check/sysinfo.h"

#include <dlfcn.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

// The CUDA runtime ferry was built with, when the cuda backend (static cudart) is linked in.
extern "C" int cudaRuntimeGetVersion(int* version) __attribute__((weak));

namespace ferry {
namespace {

std::string proc_field(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      size_t a = line.find_first_not_of(" \t", colon + 1);
      return a == std::string::npos ? "" : line.substr(a);
    }
  return "";
}

int64_t meminfo_bytes(const std::string& key) {
  const std::string v = proc_field("/proc/meminfo", key);
  return v.empty() ? 0 : std::stoll(v) * 1024;  // "123456 kB"
}

void x86_features(CpuInfo* info) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  bool f16c = false, fma = false, avx2 = false, avx512f = false, avx512bw = false, avx512vl = false, vnni = false,
       avx_vnni = false, bf16 = false, amx_tile = false, amx_bf16 = false, amx_int8 = false;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f16c = c & (1u << 29);
    fma = c & (1u << 12);
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    avx2 = b & (1u << 5);
    avx512f = b & (1u << 16);
    avx512bw = b & (1u << 30);
    avx512vl = b & (1u << 31);
    vnni = c & (1u << 11);
    amx_bf16 = d & (1u << 22);
    amx_tile = d & (1u << 24);
    amx_int8 = d & (1u << 25);
    __cpuid_count(7, 1, a, b, c, d);
    avx_vnni = a & (1u << 4);
    bf16 = a & (1u << 5);
  }
  const std::pair<const char*, bool> all[] = {
      {"f16c", f16c},         {"fma", fma},           {"avx2", avx2},          {"avx512f", avx512f},
      {"avx512bw", avx512bw}, {"avx512vl", avx512vl}, {"avx512_vnni", vnni},   {"avx_vnni", avx_vnni},
      {"avx512_bf16", bf16},  {"amx_tile", amx_tile}, {"amx_bf16", amx_bf16}, {"amx_int8", amx_int8}};
  for (const auto& [name, has] : all) (has ? info->features : info->missing).push_back(name);
#else
  info->missing.push_back("x86 ISA features (not an x86 CPU)");
#endif
}

void* open_first(const std::vector<const char*>& names, std::string* which) {
  for (const char* n : names)
    if (void* h = dlopen(n, RTLD_NOW | RTLD_LOCAL)) {
      *which = n;
      return h;
    }
  return nullptr;
}

template <typename F>
F sym(void* h, const char* name) {
  return reinterpret_cast<F>(dlsym(h, name));
}

void probe_driver(CudaStack* s) {
  std::string lib;
  void* h = open_first({"libcuda.so.1", "libcuda.so"}, &lib);
  if (!h) {
    s->driver_problem = "libcuda.so.1 not found: no NVIDIA driver is installed on this machine";
    return;
  }
  s->driver_found = true;
  using Init = int (*)(unsigned);
  using IntOut = int (*)(int*);
  using Name = int (*)(char*, int, int);
  using Mem = int (*)(size_t*, int);
  using Attr = int (*)(int*, int, int);
  auto cu_init = sym<Init>(h, "cuInit");
  auto cu_version = sym<IntOut>(h, "cuDriverGetVersion");
  auto cu_count = sym<IntOut>(h, "cuDeviceGetCount");
  auto cu_name = sym<Name>(h, "cuDeviceGetName");
  auto cu_mem = sym<Mem>(h, "cuDeviceTotalMem_v2");
  auto cu_attr = sym<Attr>(h, "cuDeviceGetAttribute");
  if (!cu_init || !cu_version || !cu_count) {
    s->driver_problem = lib + " lacks the driver API entry points (a broken or stub driver library)";
    return;
  }
  cu_version(&s->driver_version);
  const int rc = cu_init(0);
  if (rc != 0) {
    s->driver_problem = "cuInit failed with CUDA error " + std::to_string(rc) +
                        (rc == 100 ? " (no CUDA-capable device is detected)"
                         : rc == 35 ? " (the driver is older than the CUDA runtime it was asked for)"
                         : rc == 999 ? " (unknown error: is the nvidia kernel module loaded? check dmesg / nvidia-smi)"
                                     : "");
    return;
  }
  int n = 0;
  cu_count(&n);
  if (n == 0) s->driver_problem = "the driver sees no GPU";
  for (int i = 0; i < n; ++i) {
    GpuInfo g;
    g.index = i;
    char name[256] = {0};
    if (cu_name) cu_name(name, sizeof(name) - 1, i);
    g.name = name;
    size_t mem = 0;
    if (cu_mem) cu_mem(&mem, i);
    g.memory = static_cast<int64_t>(mem);
    if (cu_attr) {
      cu_attr(&g.cc_major, 75, i);  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
      cu_attr(&g.cc_minor, 76, i);  // ..._MINOR
    }
    s->gpus.push_back(g);
  }
}

void probe_libraries(CudaStack* s) {
  std::string lib;
  if (void* h = open_first({"libcudart.so.13", "libcudart.so.12", "libcudart.so"}, &lib)) {
    int v = 0;
    if (auto f = sym<int (*)(int*)>(h, "cudaRuntimeGetVersion")) f(&v);
    s->cudart = lib + " (" + cuda_version_text(v) + ")";
  }
  if (void* h = open_first({"libcudnn.so.9", "libcudnn.so.8", "libcudnn.so"}, &lib)) {
    size_t v = 0;
    if (auto f = sym<size_t (*)()>(h, "cudnnGetVersion")) v = f();
    // cuDNN 9 encodes major*10000 + minor*100 + patch.
    s->cudnn = lib + " (" + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) + ")";
  }
  if (void* h = open_first({"libcublas.so.13", "libcublas.so.12", "libcublas.so"}, &lib)) {
    int major = 0, minor = 0, patch = 0;
    if (auto f = sym<int (*)(int, int*)>(h, "cublasGetProperty")) {
      f(0, &major);
      f(1, &minor);
      f(2, &patch);
    }
    s->cublas = lib + " (" + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch) + ")";
  }
}

}  // namespace

std::string cuda_version_text(int v) {
  if (v <= 0) return "unknown";
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

CpuInfo probe_cpu() {
  CpuInfo info;
  info.model = proc_field("/proc/cpuinfo", "model name");
  if (info.model.empty()) info.model = "(unknown CPU)";
  x86_features(&info);
  info.logical_cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  info.usable_cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : info.logical_cpus;
  info.omp_threads = omp_get_max_threads();
  info.memory_total = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  info.memory_available = meminfo_bytes("MemAvailable");
  return info;
}

CudaStack probe_cuda() {
  CudaStack s;
  if (cudaRuntimeGetVersion) cudaRuntimeGetVersion(&s.runtime_version);
  probe_driver(&s);
  probe_libraries(&s);
  return s;
}

}  // namespace ferry
