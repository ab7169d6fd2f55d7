#include "backends/backend.h"

namespace ferry {

std::unique_ptr<Backend> make_reference_backend();
std::unique_ptr<Backend> make_cpu_backend();

const std::vector<BackendEntry>& backend_entries() {
  static const std::vector<BackendEntry> entries = {
      {"cpu-ref", "reference CPU kernels: plain loops, the oracle every backend is tested against",
       make_reference_backend},
      {"cpu", "optimized CPU kernels (oneDNN and vectorized loops; reference kernels for the other ops)",
       make_cpu_backend},
  };
  return entries;
}

StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& device) {
  std::string known;
  for (const BackendEntry& e : backend_entries()) {
    if (device == e.name) return e.factory();
    known += known.empty() ? e.name : std::string(", ") + e.name;
  }
  return invalid_argument("unknown device '" + device + "'; devices compiled in: " + known);
}

}  // namespace ferry
