// Gradients of Conv, ConvTranspose, Gemm, MatMul, Resize and TrainDropout (src/grad/nn_grads.cpp,
// src/ops/grad_nn.cpp): finite-difference checks in f64 on cpu-ref, and the training dropout op.
#include <gtest/gtest.h>

#include "grad_net.h"
#include "op_tester.h"

namespace ferry::testing {
namespace {

using namespace grad_net;

// ---- Conv -----------------------------------------------------------------------------------

TEST(GradNnConv, StridesPadsBias2D) {
  check_one("Conv", {{"x", random_f64({2, 3, 6, 5}, 1)}, {"w", random_f64({4, 3, 3, 2}, 2)}, {"b", random_f64({4}, 3)}},
            {{"strides", ints({2, 1})}, {"pads", ints({1, 0, 1, 1})}}, {"x", "w", "b"});
}

TEST(GradNnConv, GroupsDilation) {
  check_one("Conv", {{"x", random_f64({1, 4, 7, 7}, 4)}, {"w", random_f64({6, 2, 2, 3}, 5)}},
            {{"group", i(2)}, {"dilations", ints({2, 1})}, {"pads", ints({1, 1, 0, 2})}, {"strides", ints({1, 2})}},
            {"x", "w"});
}

TEST(GradNnConv, DepthwiseSameUpper) {
  check_one("Conv", {{"x", random_f64({2, 3, 5, 6}, 6)}, {"w", random_f64({3, 1, 3, 3}, 7)}, {"b", random_f64({3}, 8)}},
            {{"group", i(3)}, {"auto_pad", s("SAME_UPPER")}, {"strides", ints({2, 2})}}, {"x", "w", "b"});
}

TEST(GradNnConv, OneAndThreeSpatialAxes) {
  check_one("Conv", {{"x", random_f64({2, 2, 9}, 9)}, {"w", random_f64({3, 2, 3}, 10)}, {"b", random_f64({3}, 11)}},
            {{"strides", ints({2})}, {"pads", ints({2, 1})}, {"dilations", ints({2})}}, {"x", "w", "b"});
  check_one("Conv", {{"x", random_f64({1, 2, 4, 3, 4}, 12)}, {"w", random_f64({2, 2, 2, 2, 3}, 13)}},
            {{"pads", ints({1, 0, 1, 0, 1, 1})}, {"strides", ints({1, 2, 2})}}, {"x", "w"});
}

TEST(GradNnConv, AutoPadValidAndSameLower) {
  check_one("Conv", {{"x", random_f64({1, 2, 6, 5}, 18)}, {"w", random_f64({2, 2, 3, 2}, 19)}},
            {{"auto_pad", s("VALID")}, {"strides", ints({2, 2})}}, {"x", "w"});
  check_one("Conv", {{"x", random_f64({1, 2, 5, 6}, 32)}, {"w", random_f64({2, 1, 2, 3}, 33)}},
            {{"auto_pad", s("SAME_LOWER")}, {"group", i(2)}, {"dilations", ints({2, 1})}}, {"x", "w"});
}

TEST(GradNnConv, OnlyInputGradientLeavesOtherOutputsEmpty) {
  Net n;
  std::string x = n.in("x", random_f64({1, 2, 5, 5}, 14));
  std::string w = n.init("w", random_f64({3, 2, 3, 3}, 15));
  n.out(n.node("Conv", {x, w}, {{"pads", ints({1, 1, 1, 1})}})[0]);
  std::shared_ptr<Model> m = n.build();
  expect_gradients_match(m, n.feeds, {"x"});
  // The ConvGrad node computes dX only.
  std::shared_ptr<Model> t = m->clone();
  Node id{.name = "loss", .op_type = "ReduceSum", .inputs = {t->graph.outputs[0].name}, .outputs = {"loss"}};
  id.attrs["keepdims"] = i(0);
  t->graph.nodes.push_back(id);
  t->graph.outputs = {{"loss", {}}};
  ASSERT_TRUE(infer_shapes(t.get()).is_ok());
  auto grads = build_gradients(t.get(), "loss", {"x"});
  ASSERT_TRUE(grads.is_ok()) << grads.status().to_string();
  int conv_grads = 0;
  for (const Node& node : t->graph.nodes)
    if (node.op_type == "ConvGrad") {
      ++conv_grads;
      ASSERT_EQ(node.outputs.size(), 1u);
    }
  EXPECT_EQ(conv_grads, 1);
}

TEST(GradNnConv, WeightGradientOnlySkipsInputGradient) {
  Net n;
  std::string x = n.in("x", random_f64({2, 2, 4, 4}, 16));
  std::string w = n.in("w", random_f64({2, 2, 2, 2}, 17));
  n.out(n.node("Conv", {x, w}, {{"strides", ints({2, 2})}})[0]);
  expect_gradients_match(n.build(), n.feeds, {"w"});
}

// ---- ConvTranspose --------------------------------------------------------------------------

TEST(GradNnConvTranspose, StridesPadsOutputPadding) {
  check_one("ConvTranspose",
            {{"x", random_f64({2, 3, 3, 4}, 20)}, {"w", random_f64({3, 2, 3, 2}, 21)}, {"b", random_f64({2}, 22)}},
            {{"strides", ints({2, 2})}, {"pads", ints({1, 0, 0, 1})}, {"output_padding", ints({1, 0})}},
            {"x", "w", "b"});
}

TEST(GradNnConvTranspose, GroupsDilationOutputShapeAutoPad) {
  check_one("ConvTranspose", {{"x", random_f64({1, 4, 3, 3}, 23)}, {"w", random_f64({4, 1, 2, 2}, 24)}},
            {{"group", i(2)}, {"dilations", ints({2, 1})}, {"strides", ints({1, 2})}}, {"x", "w"});
  check_one("ConvTranspose", {{"x", random_f64({1, 2, 3, 3}, 25)}, {"w", random_f64({2, 2, 3, 3}, 26)}},
            {{"strides", ints({2, 2})}, {"output_shape", ints({6, 7})}}, {"x", "w"});
  check_one("ConvTranspose", {{"x", random_f64({1, 2, 3, 2}, 27)}, {"w", random_f64({2, 3, 3, 3}, 28)}},
            {{"strides", ints({2, 2})}, {"auto_pad", s("SAME_UPPER")}}, {"x", "w"});
  check_one("ConvTranspose", {{"x", random_f64({2, 2, 5}, 29)}, {"w", random_f64({2, 2, 3}, 30)}, {"b", random_f64({2}, 31)}},
            {{"strides", ints({3})}, {"pads", ints({1, 2})}}, {"x", "w", "b"});
}

TEST(GradNnConvTranspose, SameLowerAndValid) {
  check_one("ConvTranspose", {{"x", random_f64({1, 2, 3, 3}, 34)}, {"w", random_f64({2, 2, 2, 3}, 35)}},
            {{"strides", ints({2, 3})}, {"auto_pad", s("SAME_LOWER")}}, {"x", "w"});
  check_one("ConvTranspose", {{"x", random_f64({2, 2, 2, 3}, 36)}, {"w", random_f64({2, 1, 3, 2}, 37)}},
            {{"auto_pad", s("VALID")}, {"strides", ints({2, 1})}}, {"x", "w"});
}

TEST(GradNnConv, MismatchedGradientIsAnError) {
  auto r = OpTester("ConvGrad", 1, "com.ferry")
               .input(random_f64({1, 3, 4, 4}, 38))
               .input(random_f64({1, 2, 5, 5}, 39))
               .input(random_f64({3, 2, 3, 3}, 40))
               .outputs(3)
               .run_status();
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("ConvGrad"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("is not the output shape"), std::string::npos) << r.status().to_string();
}

// ---- Gemm / MatMul --------------------------------------------------------------------------

TEST(GradNnGemm, TransposeFlagsAlphaBeta) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb));
      const std::vector<int64_t> ad = ta ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 4};
      const std::vector<int64_t> bd = tb ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{4, 5};
      check_one("Gemm", {{"a", random_f64(ad, 40)}, {"b", random_f64(bd, 41)}, {"c", random_f64({3, 5}, 42)}},
                {{"transA", i(ta)}, {"transB", i(tb)}, {"alpha", f(0.5f)}, {"beta", f(-1.5f)}}, {"a", "b", "c"});
    }
}

TEST(GradNnGemm, BroadcastBiasShapes) {
  for (const std::vector<int64_t>& cd : std::vector<std::vector<int64_t>>{{5}, {1, 5}, {3, 1}, {}, {1}}) {
    SCOPED_TRACE("C " + dims_to_string(cd));
    check_one("Gemm", {{"a", random_f64({3, 4}, 43)}, {"b", random_f64({4, 5}, 44)}, {"c", random_f64(cd, 45)}},
              {{"beta", f(2.0f)}}, {"a", "b", "c"});
  }
  check_one("Gemm", {{"a", random_f64({3, 4}, 46)}, {"b", random_f64({5, 4}, 47)}}, {{"transB", i(1)}}, {"a", "b"});
}

TEST(GradNnGemm, OldOpsetWithRequiredC) {
  check_one("Gemm", {{"a", random_f64({4, 3}, 48)}, {"b", random_f64({4, 2}, 49)}, {"c", random_f64({2}, 50)}},
            {{"transA", i(1)}, {"alpha", f(2.0f)}}, {"a", "b", "c"}, 9);
}

TEST(GradNnMatMul, TwoDAndOneD) {
  check_one("MatMul", {{"a", random_f64({3, 4}, 51)}, {"b", random_f64({4, 2}, 52)}}, {}, {"a", "b"});
  check_one("MatMul", {{"a", random_f64({4}, 53)}, {"b", random_f64({4, 3}, 54)}}, {}, {"a", "b"});
  check_one("MatMul", {{"a", random_f64({2, 3, 4}, 55)}, {"b", random_f64({4}, 56)}}, {}, {"a", "b"});
  check_one("MatMul", {{"a", random_f64({5}, 57)}, {"b", random_f64({5}, 58)}}, {}, {"a", "b"});
  check_one("MatMul", {{"a", random_f64({4}, 59)}, {"b", random_f64({2, 4, 3}, 60)}}, {}, {"a", "b"});
}

TEST(GradNnMatMul, BatchedBroadcast) {
  check_one("MatMul", {{"a", random_f64({2, 1, 3, 4}, 61)}, {"b", random_f64({3, 4, 2}, 62)}}, {}, {"a", "b"});
  check_one("MatMul", {{"a", random_f64({3, 4}, 63)}, {"b", random_f64({2, 4, 5}, 64)}}, {}, {"a", "b"});
  check_one("MatMul", {{"a", random_f64({2, 2, 3}, 65)}, {"b", random_f64({1, 3, 2}, 66)}}, {}, {"a", "b"});
}

// ---- Resize ---------------------------------------------------------------------------------

void check_resize(const std::string& mode, const std::string& coord, std::vector<float> scales,
                  std::vector<int64_t> sizes = {}, std::vector<int64_t> xd = {1, 2, 4, 5}) {
  SCOPED_TRACE(mode + " " + coord);
  Net n(13);
  std::string x = n.in("x", random_f64(xd, 70));
  std::string roi = n.init("roi", Tensor::from_vector<float>({}, {0}));
  std::string sc = scales.empty() ? "" : n.init("scales", Tensor::from_vector<float>(scales, {4}));
  std::vector<std::string> ins = {x, roi, sc};
  if (!sizes.empty()) ins.push_back(n.init("sizes", Tensor::from_vector<int64_t>(sizes, {4})));
  Attrs a{{"mode", s(mode)}, {"coordinate_transformation_mode", s(coord)}};
  if (mode == "nearest") a["nearest_mode"] = s("floor");
  n.out(n.node("Resize", ins, a)[0]);
  expect_gradients_match(n.build(), n.feeds, {"x"});
}

TEST(GradNnResize, LinearModes) {
  for (const char* coord : {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"}) {
    check_resize("linear", coord, {1, 1, 2, 1.5f});
    check_resize("linear", coord, {1, 1, 0.5f, 0.6f});
  }
  check_resize("linear", "pytorch_half_pixel", {}, {1, 2, 1, 7});
}

TEST(GradNnResize, NearestModes) {
  for (const char* coord : {"half_pixel", "asymmetric", "align_corners"}) {
    check_resize("nearest", coord, {1, 1, 2, 3});
    check_resize("nearest", coord, {1, 1, 0.5f, 0.4f});
  }
  check_resize("cubic", "half_pixel", {1, 1, 1.5f, 2});
}

TEST(GradNnResize, Opset10AndOpset18AxesAntialias) {
  Net a(10);
  std::string x = a.in("x", random_f64({1, 2, 3, 4}, 71));
  a.out(a.node("Resize", {x, a.init("scales", Tensor::from_vector<float>({1, 1, 2, 1.5f}, {4}))}, {{"mode", s("linear")}})[0]);
  expect_gradients_match(a.build(), a.feeds, {"x"});
  Net b(18);
  x = b.in("x", random_f64({1, 2, 8, 6}, 72));
  b.out(b.node("Resize", {x, "", b.init("scales", Tensor::from_vector<float>({0.5f, 0.4f}, {2}))},
               {{"mode", s("linear")}, {"antialias", i(1)}, {"axes", ints({2, 3})}})[0]);
  expect_gradients_match(b.build(), b.feeds, {"x"});
}

TEST(GradNnResize, CropAndResizeHasNoGradient) {
  Net n(13);
  std::string x = n.in("x", random_f64({1, 1, 4, 4}, 73));
  std::string roi = n.init("roi", Tensor::from_vector<float>({0, 0, 0.1f, 0.1f, 1, 1, 0.9f, 0.9f}, {8}));
  std::string sc = n.init("scales", Tensor::from_vector<float>({1, 1, 2, 2}, {4}));
  std::string y = n.node("Resize", {x, roi, sc}, {{"mode", s("linear")}, {"coordinate_transformation_mode", s("tf_crop_and_resize")}})[0];
  n.node("ReduceSum", {y}, {{"keepdims", i(0)}});
  std::shared_ptr<Model> m = n.build();
  const std::string loss = m->graph.nodes.back().outputs[0];
  m->graph.outputs = {{loss, {}}};
  std::unordered_map<std::string, Tensor> constants;
  ASSERT_TRUE(infer_shapes(m.get(), &constants).is_ok());
  auto grads = build_gradients(m.get(), loss, {"x"}, &constants);
  ASSERT_FALSE(grads.is_ok());
  EXPECT_NE(grads.status().message().find("tf_crop_and_resize"), std::string::npos) << grads.status().to_string();
  EXPECT_NE(grads.status().message().find("Resize"), std::string::npos) << grads.status().to_string();
}

// ---- TrainDropout ---------------------------------------------------------------------------

TEST(GradNnTrainDropout, MaskIsCounterBasedAndScaled) {
  Tensor x = random_f64({8, 125}, 80);
  auto run = [&](float ratio, int64_t seed) {
    return OpTester("TrainDropout", 1, "com.ferry").attr("ratio", ratio).input(x).input(Tensor::scalar<int64_t>(seed)).outputs(2).run();
  };
  std::vector<Tensor> a = run(0.3f, 7), b = run(0.3f, 7), c = run(0.3f, 8);
  ASSERT_EQ(a[1].dtype(), DType::kBool);
  int64_t kept = 0, same_as_c = 0;
  for (int64_t k = 0; k < x.numel(); ++k) {
    const bool m = a[1].data<bool>()[k];
    EXPECT_EQ(m, b[1].data<bool>()[k]);
    kept += m;
    same_as_c += m == c[1].data<bool>()[k];
    EXPECT_DOUBLE_EQ(a[0].data<double>()[k], m ? x.data<double>()[k] / (1.0 - double{0.3f}) : 0.0);
  }
  EXPECT_NEAR(static_cast<double>(kept) / x.numel(), 0.7, 0.05);
  EXPECT_LT(same_as_c, x.numel());  // another seed, another mask
  std::vector<Tensor> all = run(0.0f, 7);
  for (int64_t k = 0; k < x.numel(); ++k) {
    EXPECT_TRUE(all[1].data<bool>()[k]);
    EXPECT_EQ(all[0].data<double>()[k], x.data<double>()[k]);
  }
  std::vector<Tensor> none = run(1.0f, 7);
  for (int64_t k = 0; k < x.numel(); ++k) EXPECT_EQ(none[0].data<double>()[k], 0.0);
  // The documented draw: element i kept iff splitmix64(seed ^ golden * i) / 2^64 >= ratio.
  auto keep = [](uint64_t seed, uint64_t i, double ratio) {
    uint64_t z = seed ^ (0x9E3779B97F4A7C15ull * i);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53 >= ratio;
  };
  for (int64_t k = 0; k < x.numel(); ++k) EXPECT_EQ(a[1].data<bool>()[k], keep(7, k, double{0.3f})) << k;
}

TEST(GradNnTrainDropout, Gradient) {
  for (int outputs : {2, 1}) {
    SCOPED_TRACE(outputs == 2 ? "with mask" : "without mask output");
    Net n;
    std::string x = n.in("x", random_f64({3, 7}, 81));
    std::string seed = n.init("seed", Tensor::scalar<int64_t>(1234));
    n.out(n.node("TrainDropout", {x, seed}, {{"ratio", f(0.4f)}}, outputs, "com.ferry")[0]);
    expect_gradients_match(n.build(), n.feeds, {"x"});
  }
}

}  // namespace
}  // namespace ferry::testing
