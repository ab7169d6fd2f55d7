// Gradient family 'loss' (see grad_families.inc): the training losses of src/ops/grad_loss.cpp.
#include "grad/registry.h"

namespace ferry {

void register_loss_grads(GradRegistry& r) {
  r.add(GradDef{.op = "CrossEntropyLoss", .domain = "com.ferry", .inputs = 0b01,
                .formula = "dScores = dLoss / N * (softmax(scores) - ((1 - e) * onehot(labels) + e / C))",
                .emits = {"com.ferry.CrossEntropyLossGrad"}, .build = [](GradContext& g) -> Status {
                  std::map<std::string, Attribute> attrs;
                  if (const Attribute* a = g.node().attr("label_smoothing")) attrs["label_smoothing"] = *a;
                  g.set_input_grad(0, g.emit1("CrossEntropyLossGrad", {g.output_grad(0), g.input(0), g.input(1)}, attrs,
                                              kFerryGradDomain));
                  return Status::ok();
                }});
  r.add(GradDef{.op = "MseLoss", .domain = "com.ferry", .inputs = 0b01, .formula = "dPred = dLoss * 2 (pred - target) / numel",
                .emits = {"com.ferry.MseLossGrad"}, .build = [](GradContext& g) -> Status {
                  g.set_input_grad(0, g.emit1("MseLossGrad", {g.output_grad(0), g.input(0), g.input(1)}, {}, kFerryGradDomain));
                  return Status::ok();
                }});
}

}  // namespace ferry
