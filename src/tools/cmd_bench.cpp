// `ferry bench MODEL [--device D] [--threads N] [--batch B] [--warmup W] [--iterations I |
// --duration S] [--json]`: latency percentiles, throughput, load time, peak memory and the resident
// bytes by kind (Executor::resident_bytes).
#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/env_switch.h"
#include "compiler/gears.h"
#include "tools/bench_common.h"
#include "tools/cli_common.h"
#include "tools/command_registry.h"

namespace ferry::cli {
namespace {

// How idle OpenMP threads wait (src/tools/omp_defaults.cpp chooses at start-up).
std::string idle_thread_policy() {
  const char* spin = env_value("GOMP_SPINCOUNT");
  const char* policy = env_value("OMP_WAIT_POLICY");
  std::string s;
  if (policy) s = std::string("OMP_WAIT_POLICY=") + policy;
  if (spin) s += (s.empty() ? "" : ", ") + std::string("GOMP_SPINCOUNT=") + spin;
  return s.empty() ? "libgomp defaults" : s;
}

using nlohmann::json;

int cmd_bench(const BenchOptions& opt) {
  auto setup = prepare_bench(opt);
  if (!setup.is_ok()) return report(setup.status());
  BenchSetup& b = setup.value();
  const int warmup = opt.warmup >= 0 ? opt.warmup : 5;
  const double duration = opt.duration > 0 ? opt.duration : 3.0;
  std::vector<double> times, cpu;
  double first_ms = 0;
  NamedTensors outputs;
  const MachineLoad load_before = machine_load();
  Status st =
      run_timed(*b.executor, b.feeds, warmup, opt.iterations, duration, 3, &times, &first_ms, &outputs, &cpu);
  if (!st.is_ok()) return report(st);
  std::map<std::string, std::string> output_files;  // safe file name -> output name
  if (!opt.output_dir.empty()) {
    cut_to_batch(b.batched_outputs, b.batch, &outputs);
    Status ws = write_outputs(opt.output_dir, outputs, &output_files);
    if (!ws.is_ok()) return report(ws);
  }
  const LatencyStats lat = latency_stats(times);
  const LatencyStats cpu_lat = latency_stats(cpu);
  const MachineLoad load_after = machine_load();
  // The share of the timed wall time the process had its threads on a core: well below 1, the
  // runs waited for CPUs other processes held (a loaded machine), not for ferry's own work.
  double total_cpu = 0;
  for (double t : cpu) total_cpu += t;
  double total_ms = 0;
  for (double t : times) total_ms += t;
  const double per_s = total_ms > 0 ? 1000.0 * static_cast<double>(times.size()) / total_ms : 0.0;
  const double on_cpu = total_ms > 0 ? total_cpu / (total_ms * std::max(1, b.threads)) : 0.0;
  const MemoryStats mem = b.executor->memory_stats();
  const ResidentBytes res = b.executor->resident_bytes();  // after the runs: every packed form made
  const int64_t rss = peak_rss_bytes();
  // A busy machine slows every run alike, so a low spread does not make the figures this model's
  // speed: more runnable work than cores, or a single-threaded run off its core half the time.
  const double load = std::max(load_before.load1, load_after.load1);
  const bool busy = (load_after.cores > 0 && load > load_after.cores + 0.5) || (b.threads == 1 && on_cpu < 0.5);

  if (opt.json) {
    json j;
    j["model"] = opt.model;
    j["device"] = opt.device;
    j["threads"] = b.threads;
    j["idle_threads"] = idle_thread_policy();
    j["batch"] = b.batch;
    j["opt_level"] = opt.opt_level;
    j["precision"] = opt.precision.empty() ? "fp32" : opt.precision;
    j["latency_ms"] = {{"min", lat.min}, {"mean", lat.mean}, {"p50", lat.p50},
                       {"p90", lat.p90}, {"p99", lat.p99}, {"max", lat.max}};
    j["spread_p90_p50"] = lat.spread();
    j["spread_limit"] = kSpreadLimit;
    j["cpu_ms"] = {{"min", cpu_lat.min}, {"p50", cpu_lat.p50}, {"p90", cpu_lat.p90}, {"max", cpu_lat.max}};
    j["cpu_spread_p90_p50"] = cpu_lat.spread();
    j["on_cpu_share"] = on_cpu;
    j["busy_machine"] = busy;
    j["runs_ms"] = times;    // each timed run's wall time, in order
    j["runs_cpu_ms"] = cpu;  // and its CPU time (all threads)
    j["machine"] = {{"cores", load_after.cores}, {"load1_before", load_before.load1}, {"load1_after", load_after.load1}};
    j["throughput_per_s"] = per_s;
    j["samples_per_s"] = per_s * static_cast<double>(b.batch);
    j["load_ms"] = b.load_ms;
    j["first_run_ms"] = first_ms;
    j["peak_rss_bytes"] = rss;
    j["iterations"] = times.size();
    j["warmup"] = warmup;
    j["random_inputs"] = b.random_inputs;
    if (!output_files.empty()) j["output_files"] = output_files;
    j["memory_plan"] = {{"planned", mem.planned}, {"arena_bytes", mem.arena_bytes},
                        {"tensor_bytes", mem.tensor_bytes}, {"tensors", mem.tensors},
                        {"in_place", mem.in_place}, {"unplanned_bytes", mem.unplanned_bytes}};
    j["resident_bytes"] = {{"weights", res.weights}, {"packed_weights", res.packed_weights}, {"arena", res.arena},
                           {"other", res.other}, {"process", res.process}};
    const BatchSplitInfo& split = b.executor->batch_split();
    j["batch_split"] = {{"rows_per_part", b.executor->last_split_rows()}, {"separable", split.separable},
                        {"largest_row_bytes", split.largest_row_bytes}};
    if (!split.separable) j["batch_split"]["why_not"] = split.why_not;
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("ferry bench %s\n", opt.model.c_str());
  std::printf("  device      %s, %d thread%s, batch %lld%s%s\n", opt.device.c_str(), b.threads, b.threads == 1 ? "" : "s",
              static_cast<long long>(b.batch), opt.precision.empty() ? "" : ", precision ",
              opt.precision.c_str());
  if (b.threads > 1) std::printf("  idle threads %s\n", idle_thread_policy().c_str());
  if (!b.random_inputs.empty()) {
    std::printf("  inputs      random:");
    for (const std::string& n : b.random_inputs) std::printf(" %s", n.c_str());
    std::printf("\n");
  }
  std::printf("  load        %.1f ms (model load + executor create); first run %.2f ms\n", b.load_ms, first_ms);
  if (const int64_t part = b.executor->last_split_rows(); part > 0)
    std::printf("  batch split %lld parts of %lld rows (activations over the last-level cache; FERRY_BATCH_SPLIT=0 runs it whole)\n",
                static_cast<long long>((b.batch + part - 1) / part), static_cast<long long>(part));
  std::printf("  latency ms  min %.3f  mean %.3f  p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  (%zu runs after %d warm-up)\n",
              lat.min, lat.mean, lat.p50, lat.p90, lat.p99, lat.max, times.size(), warmup);
  std::printf("  spread      p90/p50 %.3f%s\n", lat.spread(),
              lat.spread() > kSpreadLimit ? "  (above 1.15: the runs are not steady; see cpu and machine below)"
              : busy                       ? "  (even, but the machine is busy: see below)"
                                           : "");
  std::printf("  cpu ms      p50 %.3f  p90 %.3f  (process CPU time per run, all threads; p90/p50 %.3f); on a core %.0f%% of the wall time\n",
              cpu_lat.p50, cpu_lat.p90, cpu_lat.spread(), 100.0 * on_cpu);
  if (load_after.load1 >= 0)
    std::printf("  machine     load %.2f -> %.2f (1-min average) on %d core%s%s\n", load_before.load1, load_after.load1,
                load_after.cores, load_after.cores == 1 ? "" : "s",
                busy ? "  (BUSY: other work shares the cores; these times are not the model's speed, rerun when idle)" : "");
  std::printf("  throughput  %.2f inferences/s, %.2f samples/s\n", per_s, per_s * static_cast<double>(b.batch));
  std::printf("  memory      peak RSS %s", human_bytes(rss).c_str());
  if (mem.planned)
    std::printf("; arena %s for %s of tensors (%lld planned, %lld in place)", human_bytes(mem.arena_bytes).c_str(),
                human_bytes(mem.tensor_bytes).c_str(), static_cast<long long>(mem.tensors),
                static_cast<long long>(mem.in_place));
  std::printf("\n");
  if (res.process > 0)
    std::printf("  resident    %s now: weights %s, packed weights %s, arena %s, other %s (code, libraries, heap)\n",
                human_bytes(res.process).c_str(), human_bytes(res.weights).c_str(),
                human_bytes(res.packed_weights).c_str(), human_bytes(res.arena).c_str(), human_bytes(res.other).c_str());
  return kExitOk;
}

const bool kRegistered = register_command({"bench", 70, [](CLI::App& app) {
  auto opt = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure latency (min/mean/p50/p90/p99/max), throughput, load time and peak memory");
  add_bench_options(cmd, opt.get());
  return CommandRun{cmd, [opt] { return cmd_bench(*opt); }};
}});

}  // namespace
}  // namespace ferry::cli
