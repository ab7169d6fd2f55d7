// Finding GPUs: what is there, and a clear reason when nothing is (no driver, no device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ferry {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int64_t total_memory = 0;
  int64_t free_memory = 0;
  int sm_count = 0;
  int driver_version = 0;   // e.g. 13000
  int runtime_version = 0;  // the CUDA runtime ferry was built with
  /// "cuda:0: NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, driver 13.0, runtime 13.0)"
  std::string describe() const;
};

/// Every GPU the CUDA runtime sees, or an Unsupported error naming why there is none (no driver
/// loaded, no device, driver older than the runtime) and what to do instead.
StatusOr<std::vector<CudaDeviceInfo>> list_cuda_devices();

/// Parses a device name: "cuda" (device 0) or "cuda:N"; anything else is an InvalidArgument error.
StatusOr<int> parse_cuda_device_index(const std::string& device);

/// Whether this build's kernels run on a device of compute capability major.minor (sm_90 code
/// runs on 9.x; PTX for compute_90 JITs on newer).
bool cuda_arch_compatible(int cc_major, int cc_minor);

}  // namespace ferry
