// `ferry doctor`: is this environment right for ferry? The machine (check/sysinfo.h), every
// backend compiled in and whether it can run here (with why and what to do when not), the CUDA
// version matrix, library versions, and a verdict.
//
// Exit code policy: 0 when every compiled-in backend is usable; 1 when one is not. A build with
// the CUDA backend on a machine without an NVIDIA GPU therefore exits 1 and says why (build with
// -DFERRY_CUDA=OFF for a CPU-only install); tests never expect 0 from doctor on CI machines.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "check/sysinfo.h"

namespace ferry {

struct BackendHealth {
  std::string name;
  std::string summary;
  bool usable = false;
  std::string detail;  // the backend's description when usable, else why not
  std::string fix;     // what to do when not usable
};

struct DoctorReport {
  CpuInfo cpu;
  CudaStack cuda;
  bool cuda_compiled_in = false;
  std::string cuda_matrix;  // whether the driver supports the runtime ferry was built with
  std::vector<BackendHealth> backends;
  std::vector<std::pair<std::string, std::string>> libraries;  // name, version
  std::string verdict;
  int exit_code = 0;
};

/// Probes everything (a few milliseconds without a GPU).
DoctorReport run_doctor();

}  // namespace ferry
