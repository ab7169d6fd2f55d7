// Pre-packing weights at compile time; see prepack.h.
#include "compiler/prepack.h"

#include "backends/backend.h"
#include "ops/shape_inference.h"
#include "runtime/executor.h"

namespace ferry {
namespace {

// A copy of `model` (its weights shared) whose inputs' symbolic first dimension is `batch`, its
// shapes inferred again; null when no input has one, or the shapes do not follow.
std::shared_ptr<Model> batch_bound(const Model& model, int64_t batch) {
  std::shared_ptr<Model> bound = model.clone();
  Graph& g = bound->graph;
  bool any = false;
  for (ValueInfo& in : g.inputs) {
    if (!in.type.shape || in.type.shape->rank() < 1 || in.type.shape->dims[0].is_known()) continue;
    in.type.shape->dims[0] = Dim(batch);
    g.value_types[in.name] = in.type;
    any = true;
  }
  if (!any) return nullptr;
  for (const Node& n : g.nodes)
    for (const std::string& o : n.outputs) g.value_types.erase(o);
  for (ValueInfo& out : g.outputs) out.type.shape.reset();
  if (!infer_shapes(bound.get()).is_ok()) return nullptr;
  return bound;
}

}  // namespace

StatusOr<PrepackReport> prepack_weights(const std::shared_ptr<Model>& model, const std::string& device, int threads,
                                        int64_t bind_batch) {
  PrepackReport report;
  // A device that cannot be opened here (a GPU this host lacks) packs at load, as one whose
  // backend packs nothing ahead (Backend::begin_prepack).
  StatusOr<std::unique_ptr<Backend>> backend = make_backend(device);
  if (!backend.is_ok()) return report;
  std::unique_ptr<WeightPrepack> prepack = backend.value()->begin_prepack(model->graph);
  if (!prepack) return report;
  std::shared_ptr<Model> run = model;
  if (bind_batch > 0)
    if (std::shared_ptr<Model> bound = batch_bound(*model, bind_batch)) run = bound;
  {
    ExecutorOptions eo;
    eo.device = device;
    eo.opt_level = 0;  // the gear is optimized already; its kernels are the ones a load makes
    eo.threads = threads;
    StatusOr<std::unique_ptr<Executor>> ex = Executor::create(run, eo);
    if (!ex.is_ok() && run != model) ex = Executor::create(run = model, eo);  // packs for the shapes known, as unbound
    RETURN_IF_ERROR(ex.status());
  }
  prepack->store(run->graph, &report.nodes, &report.bytes);
  // The bound copy's nodes are the model's in the same order: what store() added to them goes over.
  if (run != model)
    for (size_t i = 0; i < run->graph.nodes.size(); ++i)
      for (const auto& [name, a] : run->graph.nodes[i].attrs) model->graph.nodes[i].attrs.emplace(name, a);
  return report;
}

}  // namespace ferry
