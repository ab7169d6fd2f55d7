// What `ferry bench` and `ferry profile` share: their options, loading the model and making the
// executor (timed), inputs (given or random, with the batch and symbolic dims chosen on the
// command line), the timed loop, latency percentiles and peak resident memory.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/executor.h"

namespace ferry::cli {

struct BenchOptions {
  std::string model;
  std::string device = "cpu";
  int threads = 0;
  int64_t batch = 0;   // 0: the model's (1 where symbolic)
  int warmup = -1;     // -1: the command's default
  int iterations = 0;  // 0: run for `duration` seconds
  double duration = 0;
  int opt_level = -1;
  std::vector<std::string> inputs;
  std::vector<std::string> dims;  // NAME=VALUE for symbolic dims
  std::string output_dir;         // write the last run's outputs here (.npy)
  bool json = false;
  bool no_arena = false;
  std::string precision;
  std::vector<std::string> keep_fp32;
  std::string precision_config;
};

/// Adds the options both commands take to `cmd`.
void add_bench_options(CLI::App* cmd, BenchOptions* opt);

/// A model loaded, its executor made and its inputs ready.
struct BenchSetup {
  std::shared_ptr<Model> model;  // null from an .onnx file: the executor holds it alone (release_weights)
  std::unique_ptr<Executor> executor;
  NamedTensors feeds;
  double load_ms = 0;     // model load + executor create (optimization passes, kernel creation)
  int64_t batch = 1;      // samples per inference
  int64_t gear = 0;       // a compiled model's batch gear that runs them (0: no gears)
  std::vector<bool> batched_outputs;  // with a gear: outputs cut back to `batch` rows before writing
  int threads = 1;        // intra-op threads in effect
  std::vector<std::string> random_inputs;  // inputs made up (not given with --input)
};
StatusOr<BenchSetup> prepare_bench(const BenchOptions& opt);

/// Random inputs for the model's inputs not in `given`: floats ~ N(0, 1); integer inputs that
/// index an embedding (Gather on an initializer) below its row count, masks 1, other integers in
/// [0, 10); bools false. Dims: the declared ones, `batch` for the batch dim (dim 0 when symbolic,
/// or any dim whose name says batch), NAME=VALUE from `dims` for other symbolic dims.
StatusOr<NamedTensors> make_random_inputs(const Model& model, const NamedTensors& given, int64_t batch,
                                          const std::vector<std::string>& dims, uint32_t seed = 1234);

struct LatencyStats {
  double min = 0, mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  /// Run-to-run spread: p90 / p50 (1 when every run takes the same time; 0 without samples).
  double spread() const { return p50 > 0 ? p90 / p50 : 0.0; }
};
/// Percentiles by linear interpolation between the sorted samples (ms).
LatencyStats latency_stats(std::vector<double> samples_ms);

/// Above this p90/p50 a latency figure is too noisy to compare (bench/side_by_side.py's flag).
constexpr double kSpreadLimit = 1.15;

/// The machine's 1-minute load average and online cores (/proc/loadavg, sysconf); load < 0 when
/// it cannot be read.
struct MachineLoad {
  double load1 = -1;
  int cores = 0;
};
MachineLoad machine_load();

/// Runs warm-up runs, then timed runs (a count, or until `duration_s` has passed, at least
/// `min_runs`); per-run wall times in ms go to `times_ms`, the last run's outputs to `outputs`.
/// `first_ms` gets the first run's time (the one that records the memory plan). `cpu_ms`, when
/// given, gets each timed run's CPU time in ms (the process's, all threads): a run whose wall
/// time is well above cpu_ms / threads waited for a core (other processes) rather than computed.
Status run_timed(Executor& ex, const NamedTensors& feeds, int warmup, int iterations, double duration_s, int min_runs,
                 std::vector<double>* times_ms, double* first_ms, NamedTensors* outputs,
                 std::vector<double>* cpu_ms = nullptr);

/// The process's peak resident set size in bytes (/proc/self/status VmHWM, else getrusage).
int64_t peak_rss_bytes();

/// Writes each output as DIR/<safe name>.npy (creates DIR). `files`, when given, receives each
/// file name (without .npy) mapped to the output's real name, for --json.
Status write_outputs(const std::string& dir, const NamedTensors& outputs,
                     std::map<std::string, std::string>* files = nullptr);

}  // namespace ferry::cli
