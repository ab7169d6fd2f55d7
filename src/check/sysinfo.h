// What machine ferry runs on: CPU model and ISA features (cpuid), threads, memory; and the
// NVIDIA stack found by dlopen (driver, runtime, cuDNN, cuBLAS), so `ferry doctor` can report it
// whether or not ferry was built with CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ferry {

struct CpuInfo {
  std::string model;                 // "Intel(R) Xeon(R) Platinum 8480+"
  std::vector<std::string> features; // the ISA features ferry cares about that this CPU has
  std::vector<std::string> missing;  // ... and those it lacks
  int logical_cpus = 0;              // online CPUs
  int usable_cpus = 0;               // CPUs this process may run on (affinity / cgroup cpuset)
  int omp_threads = 0;               // threads ferry's kernels use by default (OpenMP)
  int64_t memory_total = 0;          // bytes
  int64_t memory_available = 0;      // bytes (MemAvailable)
};

/// Reads cpuid, /proc/cpuinfo and /proc/meminfo.
CpuInfo probe_cpu();

struct GpuInfo {
  int index = 0;
  std::string name;
  int64_t memory = 0;
  int cc_major = 0, cc_minor = 0;
};

struct CudaStack {
  bool driver_found = false;   // libcuda.so.1 loaded
  std::string driver_problem;  // why there is no usable driver / device ("" when fine)
  int driver_version = 0;      // cuDriverGetVersion: 13000 = 13.0
  std::vector<GpuInfo> gpus;
  int runtime_version = 0;     // the CUDA runtime ferry was built with (0: built without CUDA)
  std::string cudart;          // shared libcudart found on the system ("" when none): "libcudart.so.13 (13.0)"
  std::string cudnn;           // "libcudnn.so.9 (9.13.0)", or ""
  std::string cublas;          // "libcublas.so.13 (13.0.2)", or ""
};

/// Probes the NVIDIA stack with dlopen (never fails; problems are described in the result).
CudaStack probe_cuda();

/// "13.0" from 13000.
std::string cuda_version_text(int v);

}  // namespace ferry
