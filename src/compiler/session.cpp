// Sessions: executor pools over compiled gears; see session.h.
#include "compiler/session.h"

#include <algorithm>
#include <cstring>

#include "onnx/onnx_import.h"
#include "passes/pipeline.h"

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
  s->device_ = options.device.empty() ? model.device : options.device;
  const bool cpu_family = [](const std::string& a, const std::string& b) {
    return (a == "cpu" || a == "cpu-ref") && (b == "cpu" || b == "cpu-ref");
  }(s->device_, model.device);
  if (s->device_ != model.device && !cpu_family)
    return invalid_argument((model.gears.empty() ? std::string("model") : model.gears[0].model->path) + ": compiled for device '" + model.device + "', the selected device is '" +
                            s->device_ + "'; recompile with `ferry compile --device " + s->device_ + "`");
  s->executor_options_.device = s->device_;
  s->executor_options_.opt_level = 0;  // compiled graphs are optimized already
  s->executor_options_.threads = options.threads > 0 ? options.threads : model.threads;
  for (const CompiledGear& cg : model.gears) {
    auto g = std::make_unique<Gear>();
    g->batch = cg.batch;
    g->model = cg.model;
    for (const ValueInfo& out : cg.model->graph.outputs) {
      bool batched = cg.batch > 0;
      for (const CompiledGear& other : model.gears) {
        const Graph& og = other.model->graph;
        auto it = std::find_if(og.outputs.begin(), og.outputs.end(), [&](const ValueInfo& v) { return v.name == out.name; });
        const auto& shape = it == og.outputs.end() ? std::nullopt : it->type.shape;
        if (!shape || shape->rank() == 0 || !shape->dims[0].is_known() || shape->dims[0].value != other.batch) batched = false;
      }
      g->batched_output.push_back(batched);
    }
    // One executor per gear up front, so load time includes kernel creation (like a runtime session).
    ASSIGN_OR_RETURN(auto ex, Executor::create(g->model, s->executor_options_));
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
  cm.opt_level = cm.device == "cpu-ref" ? 0 : 2;
  if (cm.opt_level > 0) {
    OptimizeOptions oo;
    oo.opt_level = cm.opt_level;
    oo.device = cm.device;
    RETURN_IF_ERROR(optimize_model(m.get(), oo));
  }
  m->metadata[kOptimizedMetadataKey] = std::to_string(cm.opt_level);
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
  return Executor::create(gear.model, executor_options_);  // another thread holds the others
}

void Session::release(Gear& gear, std::unique_ptr<Executor> ex) {
  std::lock_guard<std::mutex> lock(gear.mu);
  gear.idle.push_back(std::move(ex));
}

Status Session::run(const NamedTensors& feeds, NamedTensors* outputs) {
  Gear* gear = gears_.front().get();
  int64_t batch = 0;
  if (gears_.size() > 1 || gear->batch > 0) {
    for (const auto& [name, t] : feeds) {
      if (t.rank() == 0) return invalid_argument("input '" + name + "' is a scalar; this model is compiled per batch size");
      if (batch == 0) batch = t.dim(0);
      else if (t.dim(0) != batch)
        return invalid_argument("input '" + name + "' has batch " + std::to_string(t.dim(0)) +
                                ", another input has " + std::to_string(batch) + "; all inputs share the batch");
    }
    const CompiledGear* cg = model_.gear_for_batch(batch);
    if (!cg || batch < 1) {
      std::string sizes;
      for (int64_t b : batch_sizes()) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
      return invalid_argument("batch " + std::to_string(batch) + " is not covered by the compiled batch sizes " + sizes +
                              "; recompile with a larger --dynamic-batch gear");
    }
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
  NamedTensors padded;
  for (const auto& [name, t] : feeds) {
    if (t.dtype() == DType::kString) return unsupported("input '" + name + "': string inputs cannot be padded to a gear");
    std::vector<int64_t> dims = t.dims();
    dims[0] = gear.batch;
    ASSIGN_OR_RETURN(Tensor p, Tensor::create(t.dtype(), dims, "input '" + name + "'"));
    if (t.nbytes()) std::memcpy(p.mutable_raw(), t.raw(), static_cast<size_t>(t.nbytes()));
    padded.emplace_back(name, std::move(p));
  }
  NamedTensors full;
  ASSIGN_OR_RETURN(auto ex, acquire(gear));
  Status st = ex->run(padded, &full);
  release(gear, std::move(ex));
  RETURN_IF_ERROR(st);
  outputs->clear();
  for (size_t k = 0; k < full.size(); ++k) {
    auto& [name, t] = full[k];
    if (k >= gear.batched_output.size() || !gear.batched_output[k] || t.dtype() == DType::kString) {
      outputs->emplace_back(name, std::move(t));
      continue;
    }
    std::vector<int64_t> dims = t.dims();
    dims[0] = batch;
    Tensor cut = Tensor::allocate(t.dtype(), dims);
    std::memcpy(cut.mutable_raw(), t.raw(), static_cast<size_t>(cut.nbytes()));
    outputs->emplace_back(name, std::move(cut));
  }
  return Status::ok();
}

}  // namespace ferry
