// Finite-difference checks of gradient definitions (fp64, reference backend).
//   GraphBuilder b(17);
//   std::string x = b.input("x", DType::kF64, {2, 3});
//   b.output(b.node("Tanh", {x}));
//   expect_gradients_match(b.build(), {{"x", random_f64({2, 3}, 1)}}, {"x"});
// builds L = sum_k sum(Y_k * R_k) over the model's float outputs (R_k fixed random weights, so
// every output element matters differently), differentiates it with build_gradients, runs the
// training graph on cpu-ref and compares each gradient with central differences of L.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "grad/autodiff.h"
#include "ops/shape_inference.h"
#include "runtime/executor.h"
#include "graph_builder.h"
#include "ops/op_util.h"

namespace ferry::testing {

/// An f64 tensor of uniform values in [lo, hi) from `seed`.
inline Tensor random_f64(const std::vector<int64_t>& dims, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::allocate(DType::kF64, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<double>()[i] = dist(rng);
  return t;
}

struct GradCheckOptions {
  double eps = 1e-6;
  double rtol = 1e-5;
  double atol = 1e-7;
  /// Elements checked per input at most (spread evenly over the tensor).
  int64_t max_elements = 48;
};

namespace detail {

// The model with L = sum_k ReduceSum(Y_k * R_k) appended as output "grad_check/loss"; nullptr
// (the failure reported) when the forward model does not run.
inline std::shared_ptr<Model> with_loss(const Model& m, const NamedTensors& feeds) {
  std::shared_ptr<Model> model = m.clone();
  Graph& g = model->graph;
  // One forward run gives the outputs' dims.
  auto ex = Executor::create(m.clone(), ExecutorOptions{.device = "cpu-ref", .opt_level = 0});
  EXPECT_TRUE(ex.is_ok()) << ex.status().to_string();
  if (!ex.is_ok()) return nullptr;
  NamedTensors outs;
  Status st = ex.value()->run(feeds, &outs);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!st.is_ok()) return nullptr;
  std::vector<std::string> terms;
  uint32_t seed = 1000;
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    const Tensor& y = outs[k].second;
    if (!dtype_is_float(y.dtype())) continue;
    std::string r = "grad_check/r" + std::to_string(k);
    Tensor rt = random_f64(y.dims(), seed++);
    Tensor rc = y.dtype() == DType::kF64 ? rt : cast_tensor(rt, y.dtype()).value();
    g.value_types[r] = rc.type();
    g.initializers[r] = rc;
    Node mul{.name = "grad_check/mul" + std::to_string(k), .op_type = "Mul", .inputs = {g.outputs[k].name, r},
             .outputs = {"grad_check/m" + std::to_string(k)}};
    Node sum{.name = "grad_check/sum" + std::to_string(k), .op_type = "ReduceSum", .inputs = {mul.outputs[0]},
             .outputs = {"grad_check/s" + std::to_string(k)}};
    sum.attrs["keepdims"] = GraphBuilder::i(0);
    g.nodes.push_back(mul);
    g.nodes.push_back(sum);
    terms.push_back(sum.outputs[0]);
  }
  EXPECT_FALSE(terms.empty()) << "the model has no float output";
  if (terms.empty()) return nullptr;
  std::string loss = terms[0];
  for (size_t k = 1; k < terms.size(); ++k) {
    Node add{.name = "grad_check/add" + std::to_string(k), .op_type = "Add", .inputs = {loss, terms[k]},
             .outputs = {"grad_check/a" + std::to_string(k)}};
    g.nodes.push_back(add);
    loss = add.outputs[0];
  }
  Node id{.name = "grad_check/loss", .op_type = "Identity", .inputs = {loss}, .outputs = {"grad_check/loss"}};
  g.nodes.push_back(id);
  g.outputs = {{"grad_check/loss", {}}};
  return model;
}

// L at `feeds` on an executor created once per check (creating one per evaluation dominated the
// run time); NaN when the run fails (the failure is reported).
inline double run_loss(Executor* loss_exec, const NamedTensors& feeds) {
  NamedTensors outs;
  Status st = loss_exec->run(feeds, &outs);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!st.is_ok() || outs.empty()) return std::nan("");
  return outs.at(0).second.get_double(0);
}

}  // namespace detail

/// Checks d(sum_k Y_k * R_k)/d(wrt) from the gradient graph against central differences.
/// `wrt` are graph inputs (f64); `feeds` gives every graph input.
inline void expect_gradients_match(const std::shared_ptr<Model>& model, const NamedTensors& feeds,
                                   const std::vector<std::string>& wrt, GradCheckOptions opt = {}) {
  std::shared_ptr<Model> loss_model = detail::with_loss(*model, feeds);
  ASSERT_NE(loss_model, nullptr);
  std::shared_ptr<Model> train = loss_model->clone();
  std::unordered_map<std::string, Tensor> constants;
  Status st = infer_shapes(train.get(), &constants);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  auto grads = build_gradients(train.get(), "grad_check/loss", wrt, &constants);
  ASSERT_TRUE(grads.is_ok()) << grads.status().to_string();
  for (const auto& w : wrt) {
    ASSERT_TRUE(grads.value().count(w)) << "no gradient for '" << w << "'";
    train->graph.outputs.push_back({grads.value().at(w), {}});
  }
  st = infer_shapes(train.get());
  ASSERT_TRUE(st.is_ok()) << "training graph: " << st.to_string();
  auto ex = Executor::create(train, ExecutorOptions{.device = "cpu-ref", .opt_level = 0});
  ASSERT_TRUE(ex.is_ok()) << ex.status().to_string();
  NamedTensors outs;
  st = ex.value()->run(feeds, &outs);
  ASSERT_TRUE(st.is_ok()) << st.to_string();

  auto loss_exec = Executor::create(loss_model, ExecutorOptions{.device = "cpu-ref", .opt_level = 0});
  ASSERT_TRUE(loss_exec.is_ok()) << loss_exec.status().to_string();
  for (size_t w = 0; w < wrt.size(); ++w) {
    const Tensor& analytic = outs[w + 1].second;
    size_t fi = 0;
    while (fi < feeds.size() && feeds[fi].first != wrt[w]) ++fi;
    ASSERT_LT(fi, feeds.size()) << "no feed for '" << wrt[w] << "'";
    const Tensor& x0 = feeds[fi].second;
    ASSERT_EQ(x0.dtype(), DType::kF64) << "gradient checks run in f64: '" << wrt[w] << "'";
    ASSERT_EQ(analytic.dims(), x0.dims()) << "gradient of '" << wrt[w] << "' has the wrong shape";
    const int64_t n = x0.numel();
    // At most max_elements samples, spread over the tensor (rounding the step up).
    const int64_t step = std::max<int64_t>(1, (n + opt.max_elements - 1) / opt.max_elements);
    for (int64_t e = 0; e < n; e += step) {
      NamedTensors plus = feeds, minus = feeds;
      Tensor xp = x0.clone(), xm = x0.clone();
      xp.mutable_data<double>()[e] += opt.eps;
      xm.mutable_data<double>()[e] -= opt.eps;
      plus[fi].second = xp;
      minus[fi].second = xm;
      const double fd = (detail::run_loss(loss_exec.value().get(), plus) - detail::run_loss(loss_exec.value().get(), minus)) /
                        (2 * opt.eps);
      const double an = analytic.get_double(e);
      EXPECT_NEAR(an, fd, opt.atol + opt.rtol * std::fabs(fd)) << "d/d " << wrt[w] << "[" << e << "]";
    }
  }
}

}  // namespace ferry::testing
