// See doctor.h.
#include "check/doctor.h"

#include "backends/backend.h"
#include "backends/library_versions.h"
#include "onnx/library_versions.h"

namespace ferry {
namespace {

std::string cuda_matrix(const CudaStack& s) {
  if (s.runtime_version == 0) return "";
  const std::string rt = cuda_version_text(s.runtime_version);
  if (!s.driver_found) return "ferry is built with CUDA runtime " + rt + "; no driver to check it against";
  const std::string dv = cuda_version_text(s.driver_version);
  if (s.driver_version >= s.runtime_version) return "driver " + dv + " supports the CUDA " + rt + " runtime ferry is built with";
  if (s.driver_version / 1000 == s.runtime_version / 1000)
    return "driver " + dv + " is older than runtime " + rt +
           ": runs through CUDA minor version compatibility (PTX needing the newer driver fails); update the driver to " +
           rt + " or later";
  return "driver " + dv + " is too old for the CUDA " + rt + " runtime ferry is built with: install a driver for CUDA " + rt +
         " or later";
}

std::string backend_fix(const std::string& name) {
  if (name == "cuda")
    return "run on a machine with an NVIDIA GPU and driver, or use --device cpu; for a CPU-only install build with "
           "-DFERRY_CUDA=OFF";
  return "see the message above";
}

}  // namespace

DoctorReport run_doctor() {
  DoctorReport r;
  r.cpu = probe_cpu();
  r.cuda = probe_cuda();
  r.cuda_matrix = cuda_matrix(r.cuda);
  for (const BackendEntry& e : backend_entries()) {
    BackendHealth h;
    h.name = e.name;
    h.summary = e.summary;
    if (h.name == "cuda") r.cuda_compiled_in = true;
    auto b = make_backend(e.name);
    h.usable = b.is_ok();
    if (h.usable) {
      h.detail = b.value()->description();
    } else {
      h.detail = b.status().message();
      h.fix = backend_fix(h.name);
    }
    r.backends.push_back(std::move(h));
  }
  r.libraries.push_back({"oneDNN", onednn_version()});
  r.libraries.push_back({"protobuf", protobuf_version()});
  r.libraries.push_back({"ONNX", onnx_library_version()});
  std::string unusable;
  for (const BackendHealth& h : r.backends)
    if (!h.usable) unusable += (unusable.empty() ? "" : ", ") + h.name;
  if (unusable.empty()) {
    r.verdict = "ok: every backend compiled in can run here";
    r.exit_code = 0;
  } else {
    r.verdict = "not ok: compiled-in backend(s) " + unusable + " cannot run here (see above); the others can";
    r.exit_code = 1;
  }
  return r;
}

}  // namespace ferry
