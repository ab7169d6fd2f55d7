// ferry_cuda_probe: says whether this machine can run the cuda backend. Exit 0 and one line per
// GPU when it can; exit 77 (ctest's skip code for GPU-only tests) with the reason when it cannot.
#include <cstdio>

#include "backends/cuda/cuda_device.h"

int main() {
  auto devices = ferry::list_cuda_devices();
  if (!devices.is_ok()) {
    std::printf("no usable GPU: %s\n", devices.status().message().c_str());
    return 77;
  }
  for (const ferry::CudaDeviceInfo& d : devices.value()) std::printf("%s\n", d.describe().c_str());
  return 0;
}
