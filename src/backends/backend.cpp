#include "backends/backend.h"

namespace ferry {

std::unique_ptr<Backend> make_reference_backend();
std::unique_ptr<Backend> make_cpu_backend();
#ifdef FERRY_WITH_CUDA
std::unique_ptr<Backend> make_cuda_backend_for_listing();
StatusOr<std::unique_ptr<Backend>> open_cuda_backend(const std::string& device);
#endif

const std::vector<BackendEntry>& backend_entries() {
  static const std::vector<BackendEntry> entries = {
      {"cpu-ref", "reference CPU kernels: plain loops, the oracle every backend is tested against",
       make_reference_backend},
      {"cpu", "optimized CPU kernels (oneDNN and vectorized loops; reference kernels for the other ops)",
       make_cpu_backend},
#ifdef FERRY_WITH_CUDA
      {"cuda", "NVIDIA GPU (cuda or cuda:N): cuDNN convolutions, cuBLASLt GEMMs, own kernels; needs a GPU and driver",
       make_cuda_backend_for_listing, open_cuda_backend},
#endif
  };
  return entries;
}

StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& device) {
  std::string known;
  for (const BackendEntry& e : backend_entries()) {
    const std::string name = e.name;
    if (e.open && (device == name || device.rfind(name + ":", 0) == 0)) return e.open(device);
    if (device == e.name) return e.factory();
    known += known.empty() ? e.name : std::string(", ") + e.name;
  }
  return invalid_argument("unknown device '" + device + "'; devices compiled in: " + known);
}

}  // namespace ferry
