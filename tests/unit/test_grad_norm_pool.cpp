// Gradients of the pools, LayerNormalization and the training-mode BatchNormTraining
// (src/grad/norm_pool_grads.cpp, src/ops/grad_norm_pool.cpp): finite-difference checks in f64 on
// cpu-ref, and BatchNormTraining's forward and backward against PyTorch.
#include <gtest/gtest.h>

#include <cmath>

#include "grad_net.h"
#include "op_tester.h"

namespace ferry::testing {
namespace {

using namespace grad_net;

// ---- pools ----------------------------------------------------------------------------------

TEST(GradNormPoolMaxPool, StridesPadsDilationsCeil) {
  check_one("MaxPool", {{"x", random_f64({2, 2, 7, 6}, 1)}},
            {{"kernel_shape", ints({3, 2})}, {"strides", ints({2, 2})}, {"pads", ints({1, 0, 1, 1})}}, {"x"});
  check_one("MaxPool", {{"x", random_f64({1, 2, 8, 7}, 2)}},
            {{"kernel_shape", ints({2, 3})}, {"dilations", ints({2, 1})}, {"strides", ints({2, 3})}, {"ceil_mode", i(1)}},
            {"x"});
  check_one("MaxPool", {{"x", random_f64({2, 3, 9}, 3)}},
            {{"kernel_shape", ints({3})}, {"strides", ints({2})}, {"pads", ints({1, 1})}, {"ceil_mode", i(1)}}, {"x"});
  check_one("MaxPool", {{"x", random_f64({1, 1, 4, 4, 5}, 4)}},
            {{"kernel_shape", ints({2, 2, 3})}, {"auto_pad", s("SAME_UPPER")}, {"strides", ints({2, 2, 2})}}, {"x"});
}

TEST(GradNormPoolMaxPool, FirstMaximumTakesTheGradient) {
  // Overlapping windows over ties: each window's gradient goes to its first maximum.
  Tensor x = Tensor::from_vector<double>({1, 3, 3, 2, 3}, {1, 1, 5});
  Tensor dy = Tensor::from_vector<double>({10, 20, 40}, {1, 1, 3});
  std::vector<Tensor> dx = OpTester("MaxPoolGrad", 1, "com.ferry")
                               .attr("kernel_shape", std::vector<int64_t>{3})
                               .input(dy)
                               .input(x)
                               .run();
  expect_near(dx[0], Tensor::from_vector<double>({0, 30, 40, 0, 0}, {1, 1, 5}));
}

TEST(GradNormPoolAveragePool, CountIncludePadAndCeil) {
  for (int cip = 0; cip < 2; ++cip) {
    SCOPED_TRACE("count_include_pad " + std::to_string(cip));
    check_one("AveragePool", {{"x", random_f64({2, 2, 6, 7}, 5)}},
              {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 0})},
               {"count_include_pad", i(cip)}},
              {"x"});
    check_one("AveragePool", {{"x", random_f64({1, 2, 7, 6}, 6)}},
              {{"kernel_shape", ints({3, 2})}, {"strides", ints({2, 2})}, {"pads", ints({1, 0, 1, 1})},
               {"ceil_mode", i(1)}, {"count_include_pad", i(cip)}},
              {"x"});
    check_one("AveragePool", {{"x", random_f64({2, 1, 8}, 7)}},
              {{"kernel_shape", ints({3})}, {"strides", ints({3})}, {"ceil_mode", i(1)}, {"count_include_pad", i(cip)}},
              {"x"});
  }
  check_one("AveragePool", {{"x", random_f64({1, 2, 5, 5}, 8)}},
            {{"kernel_shape", ints({2, 2})}, {"dilations", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}, {"x"}, 19);
}

TEST(GradNormPoolGlobal, AverageAndMax) {
  check_one("GlobalAveragePool", {{"x", random_f64({2, 3, 4, 3}, 9)}}, {}, {"x"});
  check_one("GlobalAveragePool", {{"x", random_f64({2, 3, 5}, 10)}}, {}, {"x"});
  check_one("GlobalMaxPool", {{"x", random_f64({2, 3, 4, 3}, 11)}}, {}, {"x"});
  check_one("GlobalMaxPool", {{"x", random_f64({1, 2, 2, 3, 2}, 12)}}, {}, {"x"});
}

// ---- LayerNormalization ---------------------------------------------------------------------

TEST(GradNormPoolLayerNorm, LastAxis) {
  check_one("LayerNormalization", {{"x", random_f64({3, 5}, 20)}, {"scale", random_f64({5}, 21)}, {"b", random_f64({5}, 22)}},
            {{"epsilon", f(1e-3f)}}, {"x", "scale", "b"});
  check_one("LayerNormalization", {{"x", random_f64({2, 3, 4}, 23)}, {"scale", random_f64({4}, 24)}}, {}, {"x", "scale"});
}

TEST(GradNormPoolLayerNorm, AxisMinusTwoAndBroadcastParameters) {
  check_one("LayerNormalization",
            {{"x", random_f64({2, 3, 4}, 25)}, {"scale", random_f64({3, 4}, 26)}, {"b", random_f64({3, 4}, 27)}},
            {{"axis", i(-2)}}, {"x", "scale", "b"});
  // Scale broadcast along the normalized axes, and a bias of another shape than Scale.
  check_one("LayerNormalization",
            {{"x", random_f64({2, 3, 4}, 28)}, {"scale", random_f64({4}, 29)}, {"b", random_f64({3, 1}, 30)}},
            {{"axis", i(1)}}, {"x", "scale", "b"});
}

TEST(GradNormPoolLayerNorm, MeanAndInvStdDevOutputs) {
  // All three outputs feed the loss (stash_type double so the statistics stay exact).
  Net n;
  std::string x = n.in("x", random_f64({3, 2, 4}, 31));
  std::string sc = n.in("scale", random_f64({4}, 32));
  std::string b = n.in("b", random_f64({4}, 33));
  std::vector<std::string> o = n.node("LayerNormalization", {x, sc, b}, {{"stash_type", i(11)}}, 3);
  for (const auto& v : o) n.out(v);
  expect_gradients_match(n.build(), n.feeds, {"x", "scale", "b"});
  // Only the statistics feed the loss (no gradient flows into Y).
  Net m;
  x = m.in("x", random_f64({2, 5}, 34));
  sc = m.in("scale", random_f64({5}, 35));
  o = m.node("LayerNormalization", {x, sc}, {{"stash_type", i(11)}, {"axis", i(-1)}}, 3);
  m.out(o[1]);
  m.out(o[2]);
  expect_gradients_match(m.build(), m.feeds, {"x"});
}

// ---- BatchNormTraining ----------------------------------------------------------------------

// X [3, 2, 2, 2] = sin(0.37 i) * 2 + 0.05 i; expected values from torch.nn.functional.batch_norm
// (training=True, momentum=0.1 (PyTorch's convention), eps=1e-3), in f64.
Tensor bn_x() {
  std::vector<double> v;
  for (int k = 0; k < 24; ++k) v.push_back(std::sin(0.37 * k) * 2.0 + 0.05 * k);
  return Tensor::from_vector<double>(v, {3, 2, 2, 2});
}
Tensor vec2(double a, double b) { return Tensor::from_vector<double>({a, b}, {2}); }

TEST(GradNormPoolBatchNormTraining, ForwardMatchesPyTorch) {
  std::vector<Tensor> out = OpTester("BatchNormTraining", 1, "com.ferry")
                                .attr("epsilon", 1e-3f)
                                .attr("momentum", 0.9f)
                                .input(bn_x())
                                .input(vec2(1.5, -0.75))
                                .input(vec2(0.25, -1.0))
                                .input(vec2(0.5, -0.2))
                                .input(vec2(2.0, 0.7))
                                .outputs(5)
                                .run();
  const std::vector<double> y = {
      -0.8072306670126789, 0.3766051081928467,  1.4105751173461922,   2.1650972227782503,  -1.4150840322469809,
      -1.4066842542190858, -1.2845132655422542, -1.0680651979842246,  0.3581741269784016,  -0.6917750423181175,
      -1.6641029163153194, -2.4168486261667277, 0.12310666157544298,  0.1293231273139511,  0.017748517704493365,
      -0.19947492884279183, -0.6702148313280757, 0.5150073424218208,  1.6974052969462659,  2.7273078684771423,
      -1.6798952554214754, -1.7872509069254592, -1.776669221941117,   -1.652541243470498};
  expect_near(out[0], Tensor::from_vector<double>(y, {3, 2, 2, 2}), 1e-9, 1e-9);  // eps = 1e-3f
  // The attribute momentum is a float: 0.9f differs from 0.9 by ~2.4e-8.
  expect_near(out[1], vec2(0.519053782555735, -0.05575844528761756), 1e-7, 0);
  expect_near(out[2], vec2(1.9046053360450295, 0.9508784778965257), 1e-7, 0);
  expect_near(out[3], vec2(0.6905378255573501, 1.2424155471238245), 1e-12, 1e-12);
  expect_near(out[4], vec2(1.0206833262265413, 0.5829753257243533), 1e-8, 1e-8);  // eps is a float too
}

TEST(GradNormPoolBatchNormTraining, BackwardMatchesPyTorch) {
  std::vector<Tensor> fwd = OpTester("BatchNormTraining", 1, "com.ferry")
                                .attr("epsilon", 1e-3f)
                                .input(bn_x())
                                .input(vec2(1.5, -0.75))
                                .input(vec2(0.25, -1.0))
                                .input(vec2(0.5, -0.2))
                                .input(vec2(2.0, 0.7))
                                .outputs(5)
                                .run();
  std::vector<double> r;
  for (int k = 0; k < 24; ++k) r.push_back(std::cos(0.91 * k));
  std::vector<Tensor> g = OpTester("BatchNormTrainingGrad", 1, "com.ferry")
                              .input(Tensor::from_vector<double>(r, {3, 2, 2, 2}))
                              .input(bn_x())
                              .input(vec2(1.5, -0.75))
                              .input(fwd[3])
                              .input(fwd[4])
                              .outputs(3)
                              .run();
  const std::vector<double> dx = {
      1.972366606473189,    1.3541045013111923,    0.013352003349714028, -1.0293519453603381,   0.5178517686606907,
      0.20505208040092818,  -0.15490020398419174,  -0.2790313738587578,  1.246178982175786,     -0.06610760326395108,
      -0.9901753779247269,  -0.7983335427225551,   0.26762876932605506,  -0.08892544641062237,  -0.20294526383099404,
      0.008797733798474237, -0.19002087555942607,  -1.0765809819382106,  -0.813676313764049,    0.37824454722337597,
      -0.23173307424782186, -0.31306440605838065,  -0.060292569995903184, 0.33156198620052363};
  expect_near(g[0], Tensor::from_vector<double>(dx, {3, 2, 2, 2}), 1e-7, 1e-7);
  expect_near(g[1], vec2(0.26711960482786923, -1.348973269167598), 1e-7, 1e-7);
  expect_near(g[2], vec2(-3.270914116744959, 4.419099852408416), 1e-12, 1e-12);
}

TEST(GradNormPoolBatchNormTraining, GradientsOfXScaleBias) {
  for (int outputs : {5, 1}) {
    SCOPED_TRACE(outputs == 5 ? "saved statistics exposed" : "statistics recomputed");
    Net n;
    std::string x = n.in("x", random_f64({4, 3, 2, 3}, 40));
    std::string sc = n.in("scale", random_f64({3}, 41));
    std::string b = n.in("b", random_f64({3}, 42));
    std::string m = n.init("mean", random_f64({3}, 43));
    std::string v = n.init("var", random_f64({3}, 44, 0.5, 2.0));
    n.out(n.node("BatchNormTraining", {x, sc, b, m, v}, {{"epsilon", f(1e-5f)}}, outputs, "com.ferry")[0]);
    expect_gradients_match(n.build(), n.feeds, {"x", "scale", "b"});
  }
  // Rank 2 ([N, C], BatchNorm1d).
  Net n;
  std::string x = n.in("x", random_f64({5, 3}, 45));
  std::string sc = n.in("scale", random_f64({3}, 46));
  std::string b = n.in("b", random_f64({3}, 47));
  std::string m = n.init("mean", random_f64({3}, 48));
  std::string v = n.init("var", random_f64({3}, 49, 0.5, 2.0));
  n.out(n.node("BatchNormTraining", {x, sc, b, m, v}, {}, 5, "com.ferry")[0]);
  expect_gradients_match(n.build(), n.feeds, {"x", "scale", "b"});
}

TEST(GradNormPoolBatchNormTraining, OneValuePerChannelIsRefused) {
  auto r = OpTester("BatchNormTraining", 1, "com.ferry")
               .input(Tensor::from_vector<double>({1, 2}, {1, 2}))
               .input(vec2(1, 1))
               .input(vec2(0, 0))
               .input(vec2(0, 0))
               .input(vec2(1, 1))
               .run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("more than one value per channel"), std::string::npos) << r.status().to_string();
}

// ---- composed --------------------------------------------------------------------------

// The definitions composed: a small convolutional network in training form, in f64 for the
// finite differences or f32 for the optimized backends.
std::shared_ptr<Model> small_network(Net& n, DType dt) {
  auto in = [&](const std::string& name, Tensor t) { return n.in(name, dt == DType::kF64 ? t : cast_tensor(t, dt).value()); };
  auto init = [&](const std::string& name, Tensor t) { return n.init(name, dt == DType::kF64 ? t : cast_tensor(t, dt).value()); };
  std::string x = in("x", random_f64({2, 2, 6, 6}, 60));
  std::string w1 = in("w1", random_f64({4, 2, 3, 3}, 61));
  std::string sc = in("bn_scale", random_f64({4}, 62, 0.5, 1.5));
  std::string bb = in("bn_bias", random_f64({4}, 63));
  std::string w2 = in("w2", random_f64({4, 3, 2, 2}, 64));
  std::string ln = in("ln_scale", random_f64({6}, 65));
  std::string wm = in("wm", random_f64({1, 3}, 66));
  std::string y = n.node("Conv", {x, w1}, {{"pads", ints({1, 1, 1, 1})}})[0];
  y = n.node("BatchNormTraining", {y, sc, bb, init("rm", random_f64({4}, 67)), init("rv", random_f64({4}, 68, 0.5, 2))},
             {}, 5, "com.ferry")[0];
  y = n.node("Relu", {y})[0];
  y = n.node("MaxPool", {y}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}})[0];
  y = n.node("Resize", {y, "", n.init("scales", Tensor::from_vector<float>({1, 1, 2, 2}, {4}))}, {{"mode", s("linear")}})[0];
  y = n.node("ConvTranspose", {y, w2}, {{"strides", ints({1, 1})}, {"pads", ints({1, 1, 0, 0})}})[0];
  y = n.node("LayerNormalization", {y, ln}, {{"axis", i(-1)}})[0];
  y = n.node("TrainDropout", {y, n.init("seed", Tensor::scalar<int64_t>(5))}, {{"ratio", f(0.25f)}}, 2, "com.ferry")[0];
  y = n.node("GlobalAveragePool", {y})[0];
  n.out(n.node("MatMul", {y, wm})[0]);
  return n.build();
}

const std::vector<std::string> kNetworkParams = {"x", "w1", "bn_scale", "bn_bias", "w2", "ln_scale", "wm"};

TEST(GradNormPoolNetwork, ConvBatchNormPoolResizeLayerNormDropoutMatMul) {
  Net n;
  std::shared_ptr<Model> m = small_network(n, DType::kF64);
  expect_gradients_match(m, n.feeds, kNetworkParams);
}

// The training graph optimized (fusions, layouts) and run on the cpu backend gives the
// reference's gradients.
TEST(GradNormPoolNetwork, OptimizedCpuMatchesReference) {
  Net n;
  std::shared_ptr<Model> m = small_network(n, DType::kF32);
  std::vector<Tensor> ref = cos_weighted_gradients(m, n.feeds, kNetworkParams);
  std::vector<Tensor> cpu = cos_weighted_gradients(m, n.feeds, kNetworkParams, ExecutorOptions{.device = "cpu", .opt_level = 2});
  ASSERT_EQ(ref.size(), kNetworkParams.size());
  ASSERT_EQ(cpu.size(), ref.size());
  for (size_t k = 0; k < ref.size(); ++k) {
    SCOPED_TRACE(kNetworkParams[k]);
    expect_near(cpu[k], ref[k], 1e-4, 1e-3);
  }
}

}  // namespace
}  // namespace ferry::testing
