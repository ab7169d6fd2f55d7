// `ferry doctor [--json]`: is this environment right for ferry? Machine, backends, CUDA version
// matrix, library versions, verdict. Exit 0 all fine, 1 when a compiled-in backend cannot run here
// (check/doctor.h has the policy).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "check/doctor.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"

namespace ferry::cli {
namespace {

using nlohmann::json;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : " ") + x;
  return s.empty() ? "none" : s;
}

json to_json(const DoctorReport& r) {
  json backends = json::array();
  for (const BackendHealth& b : r.backends)
    backends.push_back({{"name", b.name}, {"usable", b.usable}, {"detail", b.detail}, {"fix", b.fix}});
  json gpus = json::array();
  for (const GpuInfo& g : r.cuda.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"memory_bytes", g.memory},
                    {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)}});
  json libs = json::object();
  for (const auto& [k, v] : r.libraries) libs[k] = v;
  return {{"cpu", {{"model", r.cpu.model}, {"features", r.cpu.features}, {"missing_features", r.cpu.missing},
                   {"logical_cpus", r.cpu.logical_cpus}, {"usable_cpus", r.cpu.usable_cpus},
                   {"threads", r.cpu.omp_threads}}},
          {"memory", {{"total_bytes", r.cpu.memory_total}, {"available_bytes", r.cpu.memory_available}}},
          {"backends", backends},
          {"cuda", {{"compiled_in", r.cuda_compiled_in}, {"runtime_version", cuda_version_text(r.cuda.runtime_version)},
                    {"driver_found", r.cuda.driver_found}, {"driver_version", cuda_version_text(r.cuda.driver_version)},
                    {"problem", r.cuda.driver_problem}, {"gpus", gpus}, {"version_matrix", r.cuda_matrix},
                    {"cudart", r.cuda.cudart}, {"cudnn", r.cuda.cudnn}, {"cublas", r.cuda.cublas}}},
          {"libraries", libs},
          {"verdict", r.verdict},
          {"exit_code", r.exit_code}};
}

int run_doctor_cli(bool as_json) {
  const DoctorReport r = run_doctor();
  if (as_json) {
    std::printf("%s\n", to_json(r).dump(2).c_str());
    return r.exit_code;
  }
  std::printf("cpu:       %s\n", r.cpu.model.c_str());
  std::printf("  isa:     %s\n", join(r.cpu.features).c_str());
  std::printf("  lacks:   %s\n", join(r.cpu.missing).c_str());
  std::printf("  threads: %d (ferry's default; %d CPUs usable by this process, %d online; --threads N changes it)\n",
              r.cpu.omp_threads, r.cpu.usable_cpus, r.cpu.logical_cpus);
  std::printf("memory:    %s total, %s available\n", human_bytes(r.cpu.memory_total).c_str(),
              human_bytes(r.cpu.memory_available).c_str());
  std::printf("backends:\n");
  for (const BackendHealth& b : r.backends) {
    std::printf("  %-8s %s: %s\n", b.name.c_str(), b.usable ? "ok    " : "NO    ", b.detail.c_str());
    if (!b.fix.empty()) std::printf("           fix: %s\n", b.fix.c_str());
  }
  std::printf("cuda:      %s\n", r.cuda_compiled_in ? ("backend compiled in, runtime " + cuda_version_text(r.cuda.runtime_version)).c_str()
                                                     : "backend not compiled in (probing the system anyway)");
  if (!r.cuda.driver_found || !r.cuda.driver_problem.empty())
    std::printf("  driver:  %s\n", r.cuda.driver_problem.c_str());
  if (r.cuda.driver_found) std::printf("  driver:  CUDA %s\n", cuda_version_text(r.cuda.driver_version).c_str());
  for (const GpuInfo& g : r.cuda.gpus)
    std::printf("  gpu %d:   %s, %s, compute capability %d.%d\n", g.index, g.name.c_str(), human_bytes(g.memory).c_str(),
                g.cc_major, g.cc_minor);
  if (!r.cuda_matrix.empty()) std::printf("  matrix:  %s\n", r.cuda_matrix.c_str());
  std::printf("  libs:    cudart %s; cuDNN %s; cuBLAS %s\n", r.cuda.cudart.empty() ? "not found" : r.cuda.cudart.c_str(),
              r.cuda.cudnn.empty() ? "not found" : r.cuda.cudnn.c_str(), r.cuda.cublas.empty() ? "not found" : r.cuda.cublas.c_str());
  std::printf("libraries:");
  for (const auto& [k, v] : r.libraries) std::printf(" %s %s;", k.c_str(), v.c_str());
  std::printf("\nverdict:   %s\n", r.verdict.c_str());
  return r.exit_code;
}

const bool kRegistered = register_command({"doctor", 10, [](CLI::App& app) {
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("doctor", "Is this environment right for ferry? CPU, memory, backends, CUDA, libraries");
  cmd->add_flag("--json", *as_json, "Print JSON instead of text");
  return CommandRun{cmd, [as_json] { return run_doctor_cli(*as_json); }};
}});

}  // namespace
}  // namespace ferry::cli
