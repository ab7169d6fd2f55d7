#include "train/evaluate.h"

#include <algorithm>
#include <vector>

#include "data/dataset.h"
#include "train/train_step.h"

namespace ferry {

StatusOr<std::unique_ptr<Executor>> make_eval_executor(const TrainConfig& c, const Model& source, const TrainGraph& tg,
                                                       const std::map<std::string, Tensor>& weights, int64_t batch) {
  ASSIGN_OR_RETURN(std::shared_ptr<Model> m, inference_model(source, tg, weights, batch));
  ExecutorOptions eo;
  eo.device = c.device;
  eo.threads = c.threads;
  // The executor optimizes its own copy (BatchNorm folded into new convolution weights): those
  // copies go as the kernels pack them (ResNet-50: 91 MiB beside its packed forms during an
  // evaluation otherwise). The trained weights it shares with the trainer stay theirs.
  eo.release_weights = true;
  return Executor::create(std::move(m), eo);
}

StatusOr<EvalSums> evaluate_dataset(const TrainConfig& c, Executor& ex, const Dataset& data) {
  EvalSums s;
  const int64_t n = data.size();
  s.samples = n;
  for (int64_t begin = 0; begin < n; begin += c.batch_size) {
    std::vector<int64_t> idx;
    for (int64_t i = begin; i < std::min(n, begin + c.batch_size); ++i) idx.push_back(i);
    const int64_t rows = static_cast<int64_t>(idx.size());
    while (static_cast<int64_t>(idx.size()) < c.batch_size) idx.push_back(idx.back());  // fixed-batch models
    Batch b;
    RETURN_IF_ERROR(data.load(idx, 0, &b));
    NamedTensors outs;
    RETURN_IF_ERROR(ex.run(b.inputs, &outs).with_context("evaluation"));
    RETURN_IF_ERROR(add_eval_rows(c, outs[0].second, b.labels, rows, &s.loss_sum, &s.correct).with_context("evaluation"));
  }
  return s;
}

}  // namespace ferry
