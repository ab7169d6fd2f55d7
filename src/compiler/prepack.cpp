// Pre-packing weights at compile time; see prepack.h.
#include "compiler/prepack.h"

#include "backends/backend.h"
#include "runtime/executor.h"

namespace ferry {

StatusOr<PrepackReport> prepack_weights(const std::shared_ptr<Model>& model, const std::string& device, int threads) {
  PrepackReport report;
  // A device that cannot be opened here (a GPU this host lacks) packs at load, as one whose
  // backend packs nothing ahead (Backend::begin_prepack).
  StatusOr<std::unique_ptr<Backend>> backend = make_backend(device);
  if (!backend.is_ok()) return report;
  std::unique_ptr<WeightPrepack> prepack = backend.value()->begin_prepack(model->graph);
  if (!prepack) return report;
  {
    ExecutorOptions eo;
    eo.device = device;
    eo.opt_level = 0;  // the gear is optimized already; its kernels are the ones a load makes
    eo.threads = threads;
    ASSIGN_OR_RETURN(auto ex, Executor::create(model, eo));
  }
  prepack->store(model->graph, &report.nodes, &report.bytes);
  return report;
}

}  // namespace ferry
