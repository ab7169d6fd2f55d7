// Sessions: executor pools over compiled gears; see session.h.
#include "compiler/session.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "backends/backend.h"
#include "backends/device_defaults.h"
#include "common/heap_trim.h"
#include "compiler/gears.h"
#include "compiler/prepack.h"
#include "ir/packed_layout.h"
#include "onnx/onnx_import.h"
#include "passes/pipeline.h"
#include "runtime/run_control.h"

namespace ferry {

struct Session::Gear {
  int64_t batch = 0;
  std::shared_ptr<const Model> model;
  /// Output k's first dimension is the batch (cut back after a padded run).
  std::vector<bool> batched_output;
  std::mutex mu;
  std::vector<std::unique_ptr<Executor>> idle;
};

Session::~Session() = default;

StatusOr<std::shared_ptr<Session>> Session::open(CompiledModel model, const SessionOptions& options) {
  std::shared_ptr<Session> s(new Session());
  // The file the model was read from (the name given for bytes), for the messages below.
  const std::string file = model.gears.empty() ? std::string("model") : model.gears[0].model->path;
  s->device_ = options.device.empty() ? model.device : options.device;
  // A graph compiled for one host backend runs on another ("cpu" <-> "cpu-ref").
  if (s->device_ != model.device && !(is_host_device(s->device_) && is_host_device(model.device)))
    return invalid_argument(file + ": compiled for device '" + model.device + "', the selected device is '" + s->device_ +
                            "'; recompile with `ferry compile --device " + s->device_ + "`");
  if (options.precision) {
    // The one check of a compiled model's mode (ferry serve's config parameter "precision" and the
    // Python package's precision= rely on it). A file written before the mode was recorded (or
    // with no mode) holds fp32 graphs.
    auto compiled_mode = model.precision_mode.empty() ? StatusOr<PrecisionMode>(PrecisionMode::kForceFp32)
                                                      : parse_precision_mode(model.precision_mode);
    if (!compiled_mode.is_ok() || compiled_mode.value() != *options.precision) {
      const std::string want = precision_mode_name(*options.precision);
      const std::string have = compiled_mode.is_ok() ? precision_mode_name(compiled_mode.value()) : model.precision_mode;
      return invalid_argument(file + ": compiled with precision mode '" + have + "', asked for '" + want +
                              "': a compiled model's precision is fixed when it is compiled; compile it again with "
                              "`ferry compile --precision-mode " + want + "`, load the .onnx model in that mode, or ask "
                              "for no mode to run the file in its own");
    }
  }
  s->executor_options_.device = s->device_;
  s->executor_options_.opt_level = 0;  // compiled graphs are optimized already
  s->executor_options_.threads = options.threads > 0 ? options.threads : model.threads;
  // The pool's executors (one per concurrent call) take the kernels' forms of the weights from one
  // place: each form is made once, by whichever executor and batch size needs it first.
  s->executor_options_.shared_forms = std::make_shared<SharedWeightForms>();
  s->observer_ = options.observer;
  for (const CompiledGear& cg : model.gears) {
    auto g = std::make_unique<Gear>();
    g->batch = cg.batch;
    g->model = cg.model;
    g->batched_output = batched_outputs(model, cg);
    // One executor per gear up front, so load time includes kernel creation (like a runtime session).
    ASSIGN_OR_RETURN(auto ex, Executor::create(g->model, s->executor_options_));
    if (s->observer_) ex->set_observer(s->observer_, /*keeps_outputs=*/false);
    g->idle.push_back(std::move(ex));
    s->gears_.push_back(std::move(g));
  }
  s->model_ = std::move(model);
  return s;
}

StatusOr<std::shared_ptr<Session>> Session::open_file(const std::string& path, const SessionOptions& options) {
  const bool ferry_suffix = path.size() > 6 && path.compare(path.size() - 6, 6, ".ferry") == 0;
  if (ferry_suffix || is_compiled_model_file(path)) {
    ASSIGN_OR_RETURN(CompiledModel cm, load_compiled_model(path));
    return open(std::move(cm), options);
  }
  // An ONNX model: optimize once here so every executor of the pool shares the optimized graph.
  ASSIGN_OR_RETURN(std::shared_ptr<Model> m, load_onnx_model(path));
  CompiledModel cm;
  cm.device = options.device.empty() ? "cpu" : options.device;
  cm.opt_level = default_opt_level(cm.device);
  if (cm.opt_level > 0) {
    OptimizeOptions oo;
    oo.opt_level = cm.opt_level;
    oo.device_traits = device_graph_traits(cm.device);
    RETURN_IF_ERROR(optimize_model(m.get(), oo));
  }
  m->metadata[kOptimizedMetadataKey] = std::to_string(cm.opt_level);
  // The precision rewrite on the optimized graph, before packing (as compile_model).
  cm.precision_mode = precision_mode_name(options.precision.value_or(PrecisionMode::kForceFp32));
  if (options.precision) {
    PrecisionOptions po;
    po.mode = *options.precision;
    if (!po.is_identity()) RETURN_IF_ERROR(apply_precision(m.get(), po).with_context(path + ": precision " + cm.precision_mode));
  }
  // The executors of the pool share one packed form of each weight, as they do a .ferry file's: the
  // kernels' packed forms are made once here (compiler/prepack.h) and kept on the nodes, where every
  // executor's kernels use them in place (not one copy per executor). A weight a node can hold in
  // its packed form alone then goes: it is unpacked only if something reads it (ir/packed_layout.h)
  // — ONNX Runtime's shared prepacked weights, with the initializer freed once prepacked. A backend
  // that packs nothing ahead (Backend::begin_prepack: cpu-ref, cuda) leaves the graph as it is.
  // A dynamic batch axis (ferry serve's models with max_batch_size > 0) is packed for batch 1 (the
  // kernels plan only for shapes known at load): the oneDNN forms made there are stored and their
  // originals go, as for a static model; a batch whose kernel asks for the same layout uses them, one
  // wanting another layout (or Winograd's) packs it at its first run, once for the pool
  // (ExecutorOptions::shared_forms). Measured on
  // ResNet-50, 2 instances after batches of 1 and 4 (one run each, docs/performance.md): RSS 365 ->
  // 308 MiB against packing nothing at open; batch 8 for the packing held more (311 MiB, peak 396).
  {
    ASSIGN_OR_RETURN(PrepackReport packed, prepack_weights(m, cm.device, options.threads, /*bind_batch=*/1));
    (void)packed;
    for (const auto& [name, p] : packed_only_weights(m->graph)) {
      Tensor& w = m->graph.initializers.at(name);
      w = unpacked_on_read(*p.packed, *p.layout, w.dtype(), w.dims());
    }
    trim_heap();  // the packing executor's forms and the freed originals leave the process now
  }
  cm.source = path;
  cm.gears.push_back({0, std::move(m)});
  return open(std::move(cm), options);
}

StatusOr<std::shared_ptr<Session>> Session::open_memory(const void* data, size_t size, const SessionOptions& options) {
  ASSIGN_OR_RETURN(CompiledModel cm, parse_compiled_model_copy(data, size, "model in memory"));
  return open(std::move(cm), options);
}

const std::vector<ValueInfo>& Session::inputs() const { return gears_.back()->model->graph.inputs; }
const std::vector<ValueInfo>& Session::outputs() const { return gears_.back()->model->graph.outputs; }

std::vector<int64_t> Session::batch_sizes() const {
  std::vector<int64_t> out;
  for (const auto& g : gears_)
    if (g->batch > 0) out.push_back(g->batch);
  return out;
}

StatusOr<std::unique_ptr<Executor>> Session::acquire(Gear& gear) {
  {
    std::lock_guard<std::mutex> lock(gear.mu);
    if (!gear.idle.empty()) {
      auto ex = std::move(gear.idle.back());
      gear.idle.pop_back();
      return ex;
    }
  }
  // Another thread holds the others.
  ASSIGN_OR_RETURN(auto ex, Executor::create(gear.model, executor_options_));
  if (observer_) ex->set_observer(observer_, /*keeps_outputs=*/false);
  return ex;
}

void Session::release(Gear& gear, std::unique_ptr<Executor> ex) {
  std::lock_guard<std::mutex> lock(gear.mu);
  gear.idle.push_back(std::move(ex));
}

// OpenMP's thread count is a per-thread setting: the executor sets it on the thread that creates
// it, so a run from another thread (a pool's second caller, a host's worker thread) would run its
// parallel regions on every core. Each run sets it on the calling thread (the cpu backend's rule:
// the asked count, else the machine's cores); measured on two Python threads of one 1-thread
// session (bench/python_overhead.py): without it each run spread over both cores and spun.
void Session::set_run_threads() const {
  const int n = executor_options_.threads > 0 ? executor_options_.threads
                                               : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

Status Session::run(const NamedTensors& feeds, NamedTensors* outputs) { return run(feeds, outputs, SessionRunOptions{}); }

Status Session::run(const NamedTensors& feeds, NamedTensors* outputs, const SessionRunOptions& options) {
  if (options.terminate && options.terminate->load(std::memory_order_relaxed)) return invalid_argument(kRunTerminatedMessage);
  ScopedRunTerminate terminate(options.terminate);
  set_run_threads();
  Gear* gear = gears_.front().get();
  if (has_batch_gears(model_)) {
    ASSIGN_OR_RETURN(int64_t batch, feeds_batch(feeds));
    ASSIGN_OR_RETURN(const CompiledGear* cg, select_gear(model_, batch));
    for (const auto& g : gears_)
      if (g->batch == cg->batch) gear = g.get();
    if (gear->batch != batch) return run_padded(*gear, batch, feeds, outputs);
  }
  ASSIGN_OR_RETURN(auto ex, acquire(*gear));
  Status st = ex->run(feeds, outputs);
  release(*gear, std::move(ex));
  return st;
}

Status Session::run_padded(Gear& gear, int64_t batch, const NamedTensors& feeds, NamedTensors* outputs) {
  ASSIGN_OR_RETURN(NamedTensors padded, pad_to_gear(feeds, gear.batch));
  ASSIGN_OR_RETURN(auto ex, acquire(gear));
  Status st = ex->run(padded, outputs);
  release(gear, std::move(ex));
  RETURN_IF_ERROR(st);
  cut_to_batch(gear.batched_output, batch, outputs);
  return Status::ok();
}

}  // namespace ferry
