#include "tools/bench_common.h"

#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <cstdio>
#include <ctime>
#include <set>
#include <thread>

#include <unistd.h>

#include "compiler/gears.h"
#include "io/npy.h"
#include "precision/precision_run.h"
#include "tools/cli_common.h"
#include "tools/gear_cli.h"
#include "tools/precision_cli.h"

namespace ferry::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The process's CPU time (all threads) in ms.
double process_cpu_ms() {
  struct timespec ts {};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// The row count of the embedding tables `input` indexes (Gather on an initializer), or 0.
int64_t index_bound(const Graph& g, const std::string& input) {
  int64_t bound = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type != "Gather" || n.inputs.size() < 2 || n.inputs[1] != input) continue;
    auto it = g.initializers.find(n.inputs[0]);
    if (it == g.initializers.end() || it->second.rank() == 0) continue;
    int64_t axis = 0;
    if (const Attribute* a = n.attr("axis")) axis = a->i;
    if (axis < 0) axis += it->second.rank();
    if (axis < 0 || axis >= it->second.rank()) continue;
    const int64_t rows = it->second.dim(axis);
    bound = bound == 0 ? rows : std::min(bound, rows);
  }
  return bound;
}

void fill_random(Tensor* t, const Graph& g, const std::string& name, std::mt19937* rng) {
  const int64_t n = t->numel();
  const std::string lname = lower(name);
  const bool mask = lname.find("mask") != std::string::npos;
  switch (t->dtype()) {
    case DType::kF32: {
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (int64_t i = 0; i < n; ++i) t->mutable_data<float>()[i] = d(*rng);
      return;
    }
    case DType::kF64: {
      std::normal_distribution<double> d(0.0, 1.0);
      for (int64_t i = 0; i < n; ++i) t->mutable_data<double>()[i] = d(*rng);
      return;
    }
    case DType::kF16:
    case DType::kBF16: {
      std::normal_distribution<float> d(0.0f, 1.0f);
      for (int64_t i = 0; i < n; ++i)
        t->mutable_data<uint16_t>()[i] = t->dtype() == DType::kF16 ? f32_to_f16(d(*rng)) : f32_to_bf16(d(*rng));
      return;
    }
    case DType::kBool:
      return;  // false: for a padding mask, nothing is padding
    case DType::kString:
      return;
    default: {
      // Integers: embedding indices below the table size, masks 1 (attend), others small.
      int64_t bound = index_bound(g, name);
      if (bound <= 0) bound = 10;
      std::uniform_int_distribution<int64_t> d(0, bound - 1);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t v = mask ? 1 : d(*rng);
        switch (t->dtype()) {
          FERRY_DISPATCH_INT_CASES(t->mutable_data<scalar_t>()[i] = static_cast<scalar_t>(v))
          default: break;
        }
      }
    }
  }
}

}  // namespace

void add_bench_options(CLI::App* cmd, BenchOptions* opt) {
  cmd->add_option("model", opt->model, "Model file (.onnx, or a compiled .ferry)")->required();
  cmd->add_option("-d,--device", opt->device, "Device: cpu (default), cpu-ref, ...");
  cmd->add_option("-t,--threads", opt->threads, "Intra-op threads (default: the machine's cores)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-b,--batch", opt->batch, "Batch size for random inputs (the symbolic batch dim; default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--dim", opt->dims, "NAME=VALUE: a symbolic dim's value for random inputs (e.g. --dim seq=128)");
  cmd->add_option("-w,--warmup", opt->warmup, "Untimed runs first (the first one records the memory plan; default: bench 5, profile 2)")
      ->check(CLI::NonNegativeNumber);
  auto* it = cmd->add_option("-n,--iterations", opt->iterations, "Timed runs (default: as many as --duration allows)")->check(CLI::PositiveNumber);
  cmd->add_option("--duration", opt->duration, "Time the runs for this many seconds instead (default 3)")
      ->check(CLI::PositiveNumber)
      ->excludes(it);
  cmd->add_option("-O,--opt-level", opt->opt_level, "Graph optimization: 0 none, 1 clean-ups, 2 fusions (default: device's)")
      ->check(CLI::Range(0, 2));
  cmd->add_option("-i,--input", opt->inputs,
                  "[NAME=]FILE (.npy/.npz/.pb): a given input; inputs not given are random");
  cmd->add_option("-o,--output-dir", opt->output_dir, "Write the last run's outputs as DIR/<name>.npy");
  cmd->add_flag("--no-arena", opt->no_arena, "Allocate every tensor on the heap (no memory plan), to compare");
  cmd->add_flag("--json", opt->json, "Print JSON instead of a table");
  add_precision_options(cmd, &opt->precision, &opt->keep_fp32, &opt->precision_config);
}

StatusOr<NamedTensors> make_random_inputs(const Model& model, const NamedTensors& given, int64_t batch,
                                          const std::vector<std::string>& dims, uint32_t seed) {
  std::map<std::string, int64_t> named;
  for (const std::string& spec : dims) {
    const size_t eq = spec.find('=');
    char* end = nullptr;
    const long long v = eq == std::string::npos ? -1 : std::strtoll(spec.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || !end || *end != '\0' || v <= 0)
      return invalid_argument("--dim '" + spec + "': expected NAME=VALUE with a positive VALUE (e.g. seq=128)");
    named[spec.substr(0, eq)] = v;
  }
  const Graph& g = model.graph;
  std::set<std::string> have;
  for (const auto& [name, t] : given) have.insert(name);
  NamedTensors feeds;
  std::mt19937 rng(seed);
  bool batch_used = false;
  for (const ValueInfo& v : g.inputs) {
    if (have.count(v.name)) continue;
    if (v.type.kind != ValueKind::kTensor)
      return invalid_argument("input '" + v.name + "' is " + v.type.to_string() +
                              "; random values are made for tensors only: give it with --input");
    if (!v.type.shape)
      return invalid_argument("input '" + v.name + "' has no declared shape; give it with --input " + v.name + "=FILE");
    if (v.type.dtype == DType::kUndefined || v.type.dtype == DType::kString)
      return invalid_argument("input '" + v.name + "' (" + v.type.to_string() + "): give it with --input");
    std::vector<int64_t> shape;
    const Shape& s = *v.type.shape;
    for (int64_t i = 0; i < s.rank(); ++i) {
      const Dim& d = s.dims[i];
      const std::string sym = d.symbol;
      const bool is_batch = lower(sym).find("batch") != std::string::npos || sym == "N" || (i == 0 && !d.is_known() && !named.count(sym));
      if (d.is_known()) {
        shape.push_back(d.value);
      } else if (named.count(sym)) {
        shape.push_back(named[sym]);
      } else if (is_batch) {
        shape.push_back(batch > 0 ? batch : 1);
        batch_used = true;
      } else {
        return invalid_argument("input '" + v.name + "' (" + v.type.to_string() + "): dimension " + std::to_string(i) +
                                (sym.empty() ? std::string(" is unknown") : " ('" + sym + "') is symbolic") +
                                "; set it with --dim " + (sym.empty() ? std::string("NAME") : sym) +
                                "=VALUE, or give the input with --input");
      }
    }
    ASSIGN_OR_RETURN(Tensor t, Tensor::create(v.type.dtype, shape, "random input '" + v.name + "'"));
    fill_random(&t, g, v.name, &rng);
    feeds.emplace_back(v.name, std::move(t));
  }
  if (batch > 0 && !batch_used && !feeds.empty())
    return invalid_argument("--batch " + std::to_string(batch) + ": no input has a symbolic batch dim (the inputs are " +
                            [&] {
                              std::string all;
                              for (const ValueInfo& v : g.inputs) all += (all.empty() ? "" : ", ") + v.name + " " + v.type.to_string();
                              return all;
                            }() +
                            "); export the model with a dynamic batch (dynamic_axes), or give inputs with --input");
  return feeds;
}

StatusOr<BenchSetup> prepare_bench(const BenchOptions& opt) {
  BenchSetup b;
  const auto start = Clock::now();
  ASSIGN_OR_RETURN(GearedModel geared, load_geared_model(opt.model));
  b.model = geared.model;
  GearChoice gear;
  if (geared.geared()) {  // compiled with batch gears: the gear for --batch, else for the given inputs' batch
    ASSIGN_OR_RETURN(NamedTensors given, load_inputs(*b.model, opt.inputs));
    int64_t batch = opt.batch > 0 ? opt.batch : 1;
    if (opt.batch <= 0 && !given.empty()) {
      ASSIGN_OR_RETURN(batch, feeds_batch(given));
    }
    ASSIGN_OR_RETURN(gear, choose_gear(geared, batch));
    b.model = gear.model;
    b.gear = gear.gear;
    b.batched_outputs = gear.batched_outputs;
  }
  const double read_ms = ms_since(start);
  // The inputs first (not timed as the load): they read the model (its inputs' types, an
  // embedding's rows), which the executor may then hold alone.
  ASSIGN_OR_RETURN(NamedTensors given, load_inputs(*b.model, opt.inputs));
  if (gear.padded() && !given.empty()) {
    ASSIGN_OR_RETURN(given, pad_to_gear(given, gear.gear));
  }
  ASSIGN_OR_RETURN(NamedTensors random, make_random_inputs(*b.model, given, gear.gear > 0 ? 0 : opt.batch, opt.dims));
  for (const auto& [name, t] : random) b.random_inputs.push_back(name);
  // Feeds in the model's input order.
  for (const ValueInfo& v : b.model->graph.inputs) {
    for (auto* list : {&given, &random})
      for (auto& [name, t] : *list)
        if (name == v.name) b.feeds.emplace_back(name, t);
  }
  b.batch = opt.batch > 0 ? opt.batch : 1;
  if (opt.batch <= 0 && !b.feeds.empty() && b.feeds[0].second.rank() > 0) {
    const ValueInfo& first = b.model->graph.inputs[0];
    // The batch is dim 0 of the first input unless its declared shape says otherwise.
    int64_t dim = 0;
    if (first.type.shape)
      for (int64_t i = 0; i < first.type.shape->rank(); ++i)
        if (lower(first.type.shape->dims[i].symbol).find("batch") != std::string::npos) dim = i;
    if (dim < b.feeds[0].second.rank()) b.batch = b.feeds[0].second.dim(dim);
  }
  if (gear.gear > 0) b.batch = gear.batch;  // samples asked for, run on the (padded) gear

  const auto create_start = Clock::now();
  apply_inference_malloc_defaults();
  ExecutorOptions eo;
  eo.device = opt.device;
  eo.opt_level = opt.opt_level;
  eo.threads = opt.threads;
  eo.plan_memory = !opt.no_arena;
  ASSIGN_OR_RETURN(PrecisionOptions precision, precision_options(opt.precision, opt.keep_fp32, opt.precision_config));
  // From an .onnx file the executor is handed the only reference to the model, as `ferry run`
  // does: the weights its kernels pack are held once (ExecutorOptions::release_weights), the
  // originals freed. A .ferry file's weights are its mapping's pages, used in place.
  std::shared_ptr<const Model> model = b.model;
  eo.release_weights = geared.compiled == nullptr;
  if (eo.release_weights) {
    b.model.reset();
    geared.model.reset();
    gear.model.reset();
  }
  ASSIGN_OR_RETURN(b.executor, create_precision_executor(std::move(model), eo, precision));
  b.load_ms = read_ms + ms_since(create_start);
  b.threads = opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return b;
}

LatencyStats latency_stats(std::vector<double> v) {
  LatencyStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto pct = [&](double p) {
    const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  s.min = v.front();
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.p50 = pct(50);
  s.p90 = pct(90);
  s.p99 = pct(99);
  return s;
}

Status run_timed(Executor& ex, const NamedTensors& feeds, int warmup, int iterations, double duration_s, int min_runs,
                 std::vector<double>* times_ms, double* first_ms, NamedTensors* outputs,
                 std::vector<double>* cpu_ms) {
  for (int i = 0; i < warmup; ++i) {
    const auto t0 = Clock::now();
    RETURN_IF_ERROR(ex.run(feeds, outputs));
    if (i == 0 && first_ms) *first_ms = ms_since(t0);
  }
  const auto begin = Clock::now();
  for (int i = 0;; ++i) {
    if (iterations > 0 && i >= iterations) break;
    if (iterations <= 0 && i >= min_runs && ms_since(begin) >= duration_s * 1000.0) break;
    const double c0 = cpu_ms ? process_cpu_ms() : 0.0;
    const auto t0 = Clock::now();
    RETURN_IF_ERROR(ex.run(feeds, outputs));
    const double ms = ms_since(t0);
    if (cpu_ms) cpu_ms->push_back(process_cpu_ms() - c0);
    if (warmup == 0 && i == 0 && first_ms) *first_ms = ms;
    times_ms->push_back(ms);
  }
  return Status::ok();
}

MachineLoad machine_load() {
  MachineLoad m;
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  m.cores = n > 0 ? static_cast<int>(n) : 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    double l = 0;
    if (std::fscanf(f, "%lf", &l) == 1) m.load1 = l;
    std::fclose(f);
  }
  return m;
}

int64_t peak_rss_bytes() {
  // This process image's own peak (VmHWM): getrusage's ru_maxrss keeps the peak of the image exec
  // replaced (a Python harness that spawned ferry: ~160 MiB that ferry never held).
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    long long kib = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %lld kB", &kib) == 1) break;
    std::fclose(f);
    if (kib >= 0) return static_cast<int64_t>(kib) * 1024;
  }
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

Status write_outputs(const std::string& dir, const NamedTensors& outputs, std::map<std::string, std::string>* files) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (::mkdir(dir.c_str(), 0755) != 0) return invalid_argument("--output-dir '" + dir + "' cannot be created");
  } else if (!S_ISDIR(st.st_mode)) {
    return invalid_argument("--output-dir '" + dir + "' exists and is not a folder");
  }
  std::set<std::string> used;
  for (const auto& [name, t] : outputs) {
    std::string file = safe_file_name(name);
    for (int k = 1; used.count(file); ++k) file = safe_file_name(name) + "_" + std::to_string(k);
    used.insert(file);
    RETURN_IF_ERROR(write_npy(dir + "/" + file + ".npy", t));
    if (files) (*files)[file] = name;
  }
  return Status::ok();
}

}  // namespace ferry::cli
