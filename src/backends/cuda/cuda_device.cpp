// GPU discovery for the CUDA backend.
#include "backends/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace ferry {

std::string CudaDeviceInfo::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "cuda:%d: %s (sm_%d%d, %d SMs, %.1f GiB, driver %d.%d, runtime %d.%d)", index,
                name.c_str(), cc_major, cc_minor, sm_count,
                static_cast<double>(total_memory) / (1024.0 * 1024.0 * 1024.0), driver_version / 1000,
                (driver_version % 1000) / 10, runtime_version / 1000, (runtime_version % 1000) / 10);
  return buf;
}

StatusOr<std::vector<CudaDeviceInfo>> list_cuda_devices() {
  int driver = 0, runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaError_t derr = cudaDriverGetVersion(&driver);
  if (derr != cudaSuccess || driver == 0)
    return unsupported("no NVIDIA driver is loaded on this machine (libcuda.so.1 not found), so the cuda device is "
                       "unavailable; run on a machine with an NVIDIA GPU and driver, or use --device cpu");
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorInsufficientDriver)
    return unsupported("the NVIDIA driver (CUDA " + std::to_string(driver / 1000) + "." +
                       std::to_string((driver % 1000) / 10) + ") is older than the CUDA runtime ferry was built with (" +
                       std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10) +
                       "); update the driver, or use --device cpu");
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return unsupported(std::string("no CUDA GPU is visible (") +
                       (err == cudaSuccess ? "device count 0" : cudaGetErrorString(err)) +
                       "); check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --device cpu");
  }
  std::vector<CudaDeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    CudaDeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.total_memory = static_cast<int64_t>(p.totalGlobalMem);
    d.sm_count = p.multiProcessorCount;
    d.driver_version = driver;
    d.runtime_version = runtime;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      d.free_memory = static_cast<int64_t>(free_b);
    out.push_back(d);
  }
  if (out.empty()) return unsupported("CUDA reports GPUs but none could be queried; check nvidia-smi, or use --device cpu");
  return out;
}

StatusOr<int> parse_cuda_device_index(const std::string& device) {
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) == 0) {
    const std::string idx = device.substr(5);
    if (!idx.empty() && idx.size() < 4 && idx.find_first_not_of("0123456789") == std::string::npos)
      return std::atoi(idx.c_str());
  }
  return invalid_argument("device '" + device + "': expected 'cuda' or 'cuda:N' (N: the GPU's index, as nvidia-smi lists it)");
}

bool cuda_arch_compatible(int cc_major, int cc_minor) {
  // Built for CMAKE_CUDA_ARCHITECTURES (default 90: sm_90 code + compute_90 PTX): runs on that
  // architecture and, through the PTX, on newer GPUs. Older GPUs need a rebuild for their architecture.
  return cc_major * 10 + cc_minor >= FERRY_CUDA_MIN_ARCH;
}

}  // namespace ferry
