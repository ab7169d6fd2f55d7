// Gradient family 'norm_pool' (see grad_families.inc and grad/registry.h): MaxPool, AveragePool,
// GlobalAveragePool, GlobalMaxPool, LayerNormalization and the training-mode BatchNormTraining.
// Backward ops: src/ops/grad_norm_pool.cpp.
#include "grad/registry.h"

namespace ferry {
namespace {

using std::string;
using std::vector;

// The pooling attributes a backward pool op reads (the forward node's, without storage_order).
std::map<string, Attribute> pool_attrs(const GradContext& g) {
  std::map<string, Attribute> a = g.node().attrs;
  a.erase("storage_order");
  return a;
}

Status max_pool_grad(GradContext& g) {
  g.set_input_grad(0, g.emit1("MaxPoolGrad", {g.output_grad(0), g.input(0)}, pool_attrs(g), kFerryGradDomain));
  return Status::ok();
}

Status average_pool_grad(GradContext& g) {
  ASSIGN_OR_RETURN(vector<int64_t> xd, g.dims_of(g.input(0)));
  g.set_input_grad(0, g.emit1("AveragePoolGrad", {g.output_grad(0), g.ints_constant(xd)}, pool_attrs(g), kFerryGradDomain));
  return Status::ok();
}

// Global pools are pools with the whole spatial extent as kernel; rank 2 ([N, C]) is the identity.
template <bool kMax>
Status global_pool_grad(GradContext& g) {
  ASSIGN_OR_RETURN(vector<int64_t> xd, g.dims_of(g.input(0)));
  if (xd.size() <= 2) {
    g.set_input_grad(0, g.output_grad(0));
    return Status::ok();
  }
  std::map<string, Attribute> attrs{{"kernel_shape", attr_ints(vector<int64_t>(xd.begin() + 2, xd.end()))}};
  const string x = kMax ? g.input(0) : g.ints_constant(xd);
  g.set_input_grad(0, g.emit1(kMax ? "MaxPoolGrad" : "AveragePoolGrad", {g.output_grad(0), x}, std::move(attrs),
                              kFerryGradDomain));
  return Status::ok();
}

// LayerNormalizationGrad(dY, X, Scale[, dMean, dInvStdDev]) -> (dX, dScale, dBias of Scale's shape).
Status layer_norm_grad(GradContext& g) {
  const bool want_b = g.wants_input_grad(2) && !g.output_grad(0).empty();
  bool b_like_scale = false;
  if (want_b) {
    ASSIGN_OR_RETURN(vector<int64_t> sd, g.dims_of(g.input(1)));
    ASSIGN_OR_RETURN(vector<int64_t> bd, g.dims_of(g.input(2)));
    b_like_scale = sd == bd;
  }
  vector<bool> w = {g.wants_input_grad(0), g.wants_input_grad(1) && !g.output_grad(0).empty(), want_b && b_like_scale};
  while (!w.empty() && !w.back()) w.pop_back();
  if (!w.empty()) {
    vector<string> ins = {g.output_grad(0), g.input(0), g.input(1)};
    if (!g.output_grad(1).empty() || !g.output_grad(2).empty()) {
      ins.push_back(g.output_grad(1));
      ins.push_back(g.output_grad(2));
    }
    std::map<string, Attribute> attrs{{"axis", attr_int(g.get_int("axis", -1))},
                                      {"epsilon", attr_float(g.get_float("epsilon", 1e-5f))}};
    vector<string> outs = g.emit_wanted("LayerNormalizationGrad", std::move(ins), w, std::move(attrs), kFerryGradDomain);
    for (size_t i = 0; i < outs.size(); ++i)
      if (!outs[i].empty()) g.set_input_grad(static_cast<int64_t>(i), outs[i]);
  }
  if (want_b && !b_like_scale) {  // a bias of another broadcast shape than Scale
    ASSIGN_OR_RETURN(vector<int64_t> xd, g.dims_of(g.input(0)));
    ASSIGN_OR_RETURN(string db, g.sum_to(g.output_grad(0), xd, g.input(2)));
    g.set_input_grad(2, db);
  }
  return Status::ok();
}

// BatchNormTrainingGrad(dY, X, scale, saved_mean, saved_inv_std) -> (dX, dScale, dB). When the
// forward node does not expose its saved statistics, a second BatchNormTraining recomputes them.
// SyncBatchNormTraining (--sync-bn) gets the Sync forms of both: statistics over every rank.
Status batch_norm_training_grad(GradContext& g) {
  if (g.output_grad(0).empty()) return Status::ok();  // no gradient flows from the running / saved stats
  const string forward = g.node().op_type;  // BatchNormTraining or SyncBatchNormTraining
  string mean = g.output(3), inv = g.output(4);
  if (mean.empty() || inv.empty()) {
    vector<string> ins;
    for (int64_t i = 0; i < 5; ++i) ins.push_back(g.input(i));
    vector<string> outs = g.emit_wanted(forward, std::move(ins), {false, false, false, true, true},
                                        g.node().attrs, kFerryGradDomain);
    mean = outs[3];
    inv = outs[4];
  }
  vector<bool> w = {g.wants_input_grad(0), g.wants_input_grad(1), g.wants_input_grad(2)};
  while (!w.empty() && !w.back()) w.pop_back();
  if (w.empty()) return Status::ok();
  vector<string> outs = g.emit_wanted(forward + "Grad", {g.output_grad(0), g.input(0), g.input(1), mean, inv}, w,
                                      {}, kFerryGradDomain);
  for (size_t i = 0; i < outs.size(); ++i)
    if (!outs[i].empty()) g.set_input_grad(static_cast<int64_t>(i), outs[i]);
  return Status::ok();
}

}  // namespace

void register_norm_pool_grads(GradRegistry& r) {
  r.add(GradDef{.op = "MaxPool", .inputs = 0b1,
                .formula = "dX[argmax of each window] += dY (the first maximum in kernel order, as PyTorch)",
                .emits = {"com.ferry.MaxPoolGrad"}, .build = max_pool_grad});
  r.add(GradDef{.op = "AveragePool", .since_version = 7, .inputs = 0b1,
                .formula = "dX[window] += dY / count (count_include_pad: the padded window's size)",
                .emits = {"com.ferry.AveragePoolGrad"}, .build = average_pool_grad});
  r.add(GradDef{.op = "GlobalAveragePool", .inputs = 0b1, .formula = "dX = dY / spatial size, broadcast",
                .emits = {"com.ferry.AveragePoolGrad"}, .build = global_pool_grad<false>});
  r.add(GradDef{.op = "GlobalMaxPool", .inputs = 0b1, .formula = "dX[first argmax per plane] = dY",
                .emits = {"com.ferry.MaxPoolGrad"}, .build = global_pool_grad<true>});
  r.add(GradDef{.op = "LayerNormalization", .since_version = 17, .inputs = 0b111,
                .formula = "xh = (X - mean) * inv; g = dY * Scale; dX = inv * (g - mean(g) - xh * mean(g * xh)) "
                           "(+ the Mean / InvStdDev outputs' gradients); dScale = sum(dY * xh); dB = sum(dY)",
                .emits = {"com.ferry.LayerNormalizationGrad", "ReduceSum", "Reshape"}, .build = layer_norm_grad});
  r.add(GradDef{.op = "BatchNormTraining", .domain = kFerryGradDomain, .inputs = 0b111,
                .formula = "xh = (X - saved_mean) * saved_inv_std; dB = sum(dY); dScale = sum(dY * xh); "
                           "dX = scale * saved_inv_std / n * (n * dY - dB - xh * dScale); none from outputs 1-4",
                .emits = {"com.ferry.BatchNormTrainingGrad", "com.ferry.BatchNormTraining"},
                .build = batch_norm_training_grad});
  r.add(GradDef{.op = "SyncBatchNormTraining", .domain = kFerryGradDomain, .inputs = 0b111,
                .formula = "as BatchNormTraining with n, sum(dY) and sum(dY * xh) over every rank for dX "
                           "(torch.nn.SyncBatchNorm); dScale, dB from the local batch",
                .emits = {"com.ferry.SyncBatchNormTrainingGrad", "com.ferry.SyncBatchNormTraining"},
                .build = batch_norm_training_grad});
}

}  // namespace ferry
