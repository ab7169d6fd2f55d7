// Tests for Resize and Upsample. Expected values: PyTorch 1.13 torch.nn.functional.interpolate
// (for the modes PyTorch exports) and a numpy port of onnx/reference/ops/op_resize.py (the rest).
#include "op_tester.h"

namespace ferry::testing {
namespace {

using V = std::vector<int64_t>;

Tensor seq(float first, V dims) {
  Tensor t = Tensor::allocate(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_data<float>()[i] = first + static_cast<float>(i);
  return t;
}

// x = arange(1, 13)^2 / 7 as [1,1,3,4], the PyTorch test input.
Tensor torch_x() {
  Tensor t = Tensor::allocate(DType::kF32, {1, 1, 3, 4});
  for (int i = 0; i < 12; ++i) t.mutable_data<float>()[i] = static_cast<float>((i + 1) * (i + 1)) / 7.0f;
  return t;
}

Tensor empty_f() { return T_({}, {0}); }

// Resize-13 with sizes (scales omitted).
std::vector<Tensor> resize_sizes(const std::string& mode, const std::string& coord, const std::string& nearest,
                                 const Tensor& x, V sizes, std::shared_ptr<Model>* model = nullptr) {
  OpTester t("Resize", 13);
  t.attr("mode", mode).attr("coordinate_transformation_mode", coord).attr("nearest_mode", nearest);
  t.attr("cubic_coeff_a", -0.75f);
  t.input(x).no_input().no_input().const_input(I64_(sizes, {static_cast<int64_t>(sizes.size())}));
  auto out = t.run();
  if (model) *model = t.last_model();
  return out;
}

// ---- PyTorch parity -------------------------------------------------------------------------

TEST(ResizeTorch, BilinearHalfPixelMatchesInterpolate) {
  // F.interpolate(x, size=(5,7), mode='bilinear', align_corners=False)
  const std::vector<float> expect57 = {
      0.14285715f, 0.29591841f, 0.54081637f, 0.92857152f, 1.357143f,  1.9285717f, 2.2857144f,
      1.5142858f,  1.8306123f,  2.3367348f,  2.9857147f,  3.6755109f, 4.5081639f, 5.0285721f,
      3.571429f,   4.1326532f,  5.0306129f,  6.0714293f,  7.1530623f, 8.377552f,  9.1428585f,
      8.3714294f,  9.1775513f,  10.467348f,  11.900002f,  13.373471f, 14.989798f, 16.000002f,
      11.571428f,  12.540815f,  14.091837f,  15.785715f,  17.520411f, 19.397961f, 20.571428f};
  for (const char* coord : {"half_pixel", "pytorch_half_pixel"}) {
    std::shared_ptr<Model> m;
    auto out = resize_sizes("linear", coord, "floor", torch_x(), {1, 1, 5, 7}, &m);
    expect_near(out[0], T_(expect57, {1, 1, 5, 7}), 1e-5, 1e-5);
    EXPECT_EQ(m->graph.value_types["out0"].shape->to_string(), "[1,1,5,7]");
  }
  // size=(2,3): downsampling
  auto d = resize_sizes("linear", "half_pixel", "floor", torch_x(), {1, 1, 2, 3});
  expect_near(d[0], T_({1.1190476f, 2.2142859f, 3.7857146f, 9.9761906f, 13.357143f, 17.214285f}, {1, 1, 2, 3}), 1e-5, 1e-5);
}

TEST(ResizeTorch, BilinearScaleFactor2) {
  // F.interpolate(x, scale_factor=2, mode='bilinear', align_corners=False), exported with scales.
  const std::vector<float> expect = {
      0.14285715f, 0.25f,      0.46428573f, 0.75f,      1.1071428f, 1.5357143f, 2.0357144f, 2.2857144f,
      1.0f,        1.1785715f, 1.5357143f,  1.9642857f, 2.4642856f, 3.0357144f, 3.6785715f, 4.0f,
      2.7142856f,  3.0357141f, 3.6785715f,  4.3928571f, 5.1785712f, 6.0357141f, 6.9642859f, 7.4285717f,
      5.5714283f,  6.0357141f, 6.9642859f,  7.9642859f, 9.0357141f, 10.178572f, 11.392858f, 12.0f,
      9.5714283f,  10.178572f, 11.392857f,  12.678572f, 14.035715f, 15.464286f, 16.964285f, 17.714285f,
      11.571428f,  12.25f,     13.607142f,  15.035714f, 16.535715f, 18.107143f, 19.75f,     20.571428f};
  OpTester t("Resize", 13);
  t.attr("mode", "linear").attr("coordinate_transformation_mode", "half_pixel");
  t.input(torch_x()).no_input().const_input(T_({1, 1, 2, 2}, {4}));
  auto out = t.run();
  expect_near(out[0], T_(expect, {1, 1, 6, 8}), 1e-5, 1e-5);
  EXPECT_EQ(inferred(t), "[1,1,6,8]");
}

TEST(ResizeTorch, NearestAsymmetricFloorMatchesInterpolate) {
  // F.interpolate(x, size=(5,7), mode='nearest')
  const float a = 0.14285715f, b = 0.5714286f, c = 1.2857143f, d = 2.2857144f, e = 3.5714285f, f = 5.1428571f,
              g = 7.0f, h = 9.1428576f, i = 11.571428f, j = 14.285714f, k = 17.285715f, l = 20.571428f;
  const std::vector<float> expect57 = {a, a, b, b, c, c, d, a, a, b, b, c, c, d, e, e, f, f, g, g, h,
                                       e, e, f, f, g, g, h, i, i, j, j, k, k, l};
  auto out = resize_sizes("nearest", "asymmetric", "floor", torch_x(), {1, 1, 5, 7});
  expect_near(out[0], T_(expect57, {1, 1, 5, 7}), 1e-6, 1e-6);
  auto s = resize_sizes("nearest", "asymmetric", "floor", torch_x(), {1, 1, 2, 3});
  expect_near(s[0], T_({a, b, c, e, f, g}, {1, 1, 2, 3}), 1e-6, 1e-6);
  // scale_factor=2 with scales
  OpTester t("Resize", 11);
  t.attr("mode", "nearest").attr("coordinate_transformation_mode", "asymmetric").attr("nearest_mode", "floor");
  t.input(torch_x()).const_input(empty_f()).const_input(T_({1, 1, 2, 2}, {4}));
  auto s2 = t.run();
  EXPECT_EQ(s2[0].dims(), (V{1, 1, 6, 8}));
  EXPECT_EQ(s2[0].get_double(8 + 3), static_cast<double>(b));   // row 1, col 3 -> x[0][1]
  EXPECT_EQ(s2[0].get_double(5 * 8 + 7), static_cast<double>(l));
}

TEST(ResizeTorch, BilinearAlignCornersAndBicubic) {
  // align_corners=True -> coordinate_transformation_mode=align_corners
  const std::vector<float> ac = {
      0.14285715f, 0.35714287f, 0.5714286f, 0.92857146f, 1.2857143f, 1.7857144f, 2.2857144f,
      1.8571428f,  2.3571429f,  2.8571429f, 3.5f,        4.1428571f, 4.9285717f, 5.7142859f,
      3.5714285f,  4.3571429f,  5.1428571f, 6.0714283f,  7.0f,       8.0714283f, 9.1428576f,
      7.5714283f,  8.6428566f,  9.7142859f, 10.928572f,  12.142858f, 13.5f,      14.857143f,
      11.571428f,  12.928572f,  14.285714f, 15.785715f,  17.285715f, 18.928572f, 20.571428f};
  expect_near(resize_sizes("linear", "align_corners", "floor", torch_x(), {1, 1, 5, 7})[0], T_(ac, {1, 1, 5, 7}), 1e-5,
              1e-5);
  // mode='bicubic', align_corners=False -> cubic, half_pixel, A=-0.75
  const std::vector<float> bc = {
      -0.21792151f, -0.11481714f, 0.086401619f, 0.38128614f, 0.81600761f, 1.3612497f, 1.7157604f,
      0.81879312f,  1.1000984f,   1.5919999f,   2.1710033f,  2.8898432f,  3.7257683f, 4.2584805f,
      3.4155192f,   3.9926717f,   4.9671621f,   6.017858f,   7.2083888f,  8.5269032f, 9.3554649f,
      8.4808187f,   9.3538179f,   10.810896f,   12.333287f,  13.995507f,  15.796611f, 16.921024f,
      12.059247f,   13.110446f,   14.858206f,   16.664717f,  18.611055f,  20.702841f, 22.005457f};
  expect_near(resize_sizes("cubic", "half_pixel", "floor", torch_x(), {1, 1, 5, 7})[0], T_(bc, {1, 1, 5, 7}), 1e-4, 1e-5);
  expect_near(resize_sizes("cubic", "half_pixel", "floor", torch_x(), {1, 1, 2, 3})[0],
              T_({0.71509701f, 1.6986609f, 3.2787857f, 10.189335f, 13.712054f, 17.831337f}, {1, 1, 2, 3}), 1e-4, 1e-5);
}

// ---- ONNX reference values ------------------------------------------------------------------

TEST(Resize, NearestDefaultsOpset11) {
  OpTester up("Resize", 11);
  up.input(T_({1, 2, 3, 4}, {1, 1, 2, 2})).const_input(empty_f()).const_input(T_({1, 1, 2, 3}, {4}));
  expect_near(up.run()[0], T_({1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, {1, 1, 4, 6}));
  OpTester down("Resize", 11);
  down.input(seq(1, {1, 1, 2, 4})).const_input(empty_f()).const_input(T_({1, 1, 0.6f, 0.6f}, {4}));
  expect_near(down.run()[0], T_({1, 3}, {1, 1, 1, 2}));
  EXPECT_EQ(inferred(down), "[1,1,1,2]");
}

TEST(Resize, NearestModes) {
  Tensor x = seq(1, {1, 1, 4, 4});
  expect_near(resize_sizes("nearest", "half_pixel", "ceil", x, {1, 1, 3, 5})[0],
              T_({5, 6, 7, 8, 8, 9, 10, 11, 12, 12, 13, 14, 15, 16, 16}, {1, 1, 3, 5}));
  expect_near(resize_sizes("nearest", "asymmetric", "round_prefer_ceil", x, {1, 1, 7, 6})[0],
              T_({1, 2, 2, 3, 4, 4, 5, 6, 6, 7, 8, 8, 5, 6, 6, 7, 8, 8, 9, 10, 10, 11, 12, 12,
                  9, 10, 10, 11, 12, 12, 13, 14, 14, 15, 16, 16, 13, 14, 14, 15, 16, 16}, {1, 1, 7, 6}));
  expect_near(resize_sizes("nearest", "align_corners", "floor", x, {1, 1, 3, 7})[0],
              T_({1, 1, 2, 2, 3, 3, 4, 5, 5, 6, 6, 7, 7, 8, 13, 13, 14, 14, 15, 15, 16}, {1, 1, 3, 7}));
}

TEST(Resize, LinearAlignCornersAndDownsample) {
  OpTester a("Resize", 13);
  a.attr("mode", "linear").attr("coordinate_transformation_mode", "align_corners");
  a.input(T_({1, 2, 3, 4}, {1, 1, 2, 2})).no_input().const_input(T_({1, 1, 2, 2}, {4}));
  expect_near(a.run()[0], T_({1, 1.333333f, 1.666667f, 2, 1.666667f, 2, 2.333333f, 2.666667f, 2.333333f, 2.666667f, 3,
                              3.333333f, 3, 3.333333f, 3.666667f, 4}, {1, 1, 4, 4}));
  OpTester d("Resize", 13);
  d.attr("mode", "linear").input(seq(1, {1, 1, 2, 4})).no_input().const_input(T_({1, 1, 0.6f, 0.6f}, {4}));
  expect_near(d.run()[0], T_({2.666667f, 4.333333f}, {1, 1, 1, 2}));
}

TEST(Resize, CubicVariants) {
  Tensor x = seq(1, {1, 1, 4, 4});
  OpTester up("Resize", 13);
  up.attr("mode", "cubic").input(x).no_input().const_input(T_({1, 1, 2, 2}, {4}));
  auto u = up.run();
  EXPECT_EQ(u[0].dims(), (V{1, 1, 8, 8}));
  const std::vector<float> row0 = {0.4726562f, 0.7695312f, 1.246094f, 1.875f, 2.28125f, 2.910156f, 3.386719f, 3.683594f};
  const std::vector<float> row7 = {13.31641f, 13.61328f, 14.08984f, 14.71875f, 15.125f, 15.75391f, 16.23047f, 16.52734f};
  for (int j = 0; j < 8; ++j) {
    EXPECT_NEAR(u[0].get_double(j), row0[j], 1e-4);
    EXPECT_NEAR(u[0].get_double(56 + j), row7[j], 1e-4);
  }
  OpTester ex("Resize", 13);
  ex.attr("mode", "cubic").attr("cubic_coeff_a", -0.5f).attr("exclude_outside", 1);
  ex.input(x).no_input().const_input(T_({1, 1, 0.8f, 0.8f}, {4}));
  expect_near(ex.run()[0], T_({1.368127f, 2.669501f, 4.013337f, 6.573625f, 7.875f, 9.218835f, 11.94897f, 13.25034f,
                               14.59418f}, {1, 1, 3, 3}), 1e-4, 1e-5);
  OpTester ac("Resize", 13);
  ac.attr("mode", "cubic").attr("coordinate_transformation_mode", "align_corners");
  ac.input(x).no_input().const_input(T_({1, 1, 2, 2}, {4}));
  auto c = ac.run();
  EXPECT_NEAR(c[0].get_double(1), 1.341108, 1e-4);
  EXPECT_NEAR(c[0].get_double(9), 2.705539, 1e-4);
  EXPECT_NEAR(c[0].get_double(63), 16.0, 1e-4);
}

TEST(Resize, TfCropAndResizeExtrapolates) {
  Tensor x = seq(1, {1, 1, 4, 4});
  Tensor roi = T_({0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f}, {8});
  for (const char* mode : {"linear", "nearest"}) {
    OpTester t("Resize", 13);
    t.attr("mode", mode).attr("coordinate_transformation_mode", "tf_crop_and_resize").attr("extrapolation_value", 10.0f);
    t.input(x).const_input(roi).no_input().const_input(I64_({1, 1, 3, 3}, {4}));
    auto out = t.run();
    if (std::string(mode) == "linear") expect_near(out[0], T_({7.6f, 10, 10, 12.4f, 10, 10, 10, 10, 10}, {1, 1, 3, 3}));
    else expect_near(out[0], T_({7, 10, 10, 11, 10, 10, 10, 10, 10}, {1, 1, 3, 3}));
  }
}

TEST(Resize, Opset18AntialiasAxesKeepAspect) {
  Tensor x = seq(1, {1, 1, 4, 4});
  OpTester la("Resize", 18);
  la.attr("mode", "linear").attr("antialias", 1).input(x).no_input().const_input(T_({1, 1, 0.6f, 0.6f}, {4}));
  expect_near(la.run()[0], T_({2.875f, 4.5f, 9.375f, 11}, {1, 1, 2, 2}), 1e-5, 1e-5);
  OpTester ca("Resize", 18);
  ca.attr("mode", "cubic").attr("antialias", 1).input(x).no_input().const_input(T_({1, 1, 0.6f, 0.6f}, {4}));
  expect_near(ca.run()[0], T_({2.518072f, 4.285886f, 9.589328f, 11.35714f}, {1, 1, 2, 2}), 1e-4, 1e-5);
  OpTester ax("Resize", 18);
  ax.attr("mode", "linear").attr("antialias", 1).attr("axes", V{2, 3});
  ax.input(x).no_input().no_input().const_input(I64_({3, 2}, {2}));
  expect_near(ax.run()[0], T_({2.715909f, 4.465909f, 7.625f, 9.375f, 12.53409f, 14.28409f}, {1, 1, 3, 2}), 1e-5, 1e-5);
  OpTester w("Resize", 18);
  w.attr("mode", "linear").attr("axes", V{-1}).input(x).no_input().const_input(T_({0.5f}, {1}));
  expect_near(w.run()[0], T_({1.5f, 3.5f, 5.5f, 7.5f, 9.5f, 11.5f, 13.5f, 15.5f}, {1, 1, 4, 2}));
  EXPECT_EQ(inferred(w), "[1,1,4,2]");
  OpTester nl("Resize", 18);
  nl.attr("mode", "linear").attr("axes", V{2, 3}).attr("keep_aspect_ratio_policy", "not_larger");
  nl.input(x).no_input().no_input().const_input(I64_({7, 8}, {2}));
  auto o = nl.run();
  EXPECT_EQ(o[0].dims(), (V{1, 1, 7, 7}));
  EXPECT_EQ(inferred(nl), "[1,1,7,7]");
  EXPECT_NEAR(o[0].get_double(1), 1.357143, 1e-5);
  EXPECT_NEAR(o[0].get_double(8), 2.785714, 1e-5);
  OpTester ns("Resize", 18);
  ns.attr("mode", "nearest").attr("axes", V{2, 3}).attr("keep_aspect_ratio_policy", "not_smaller");
  ns.input(x).no_input().no_input().const_input(I64_({7, 8}, {2}));
  auto s = ns.run();
  EXPECT_EQ(s[0].dims(), (V{1, 1, 8, 8}));
  EXPECT_EQ(s[0].get_double(2 * 8 + 2), 6.0);
}

TEST(Resize, HalfPixelSymmetricOpset19) {
  Tensor x = seq(1, {1, 1, 4, 4});
  OpTester d("Resize", 19);
  d.attr("mode", "linear").attr("coordinate_transformation_mode", "half_pixel_symmetric");
  d.input(x).no_input().const_input(T_({1, 1, 0.6f, 0.6f}, {4}));
  expect_near(d.run()[0], T_({4.333333f, 6, 11, 12.66667f}, {1, 1, 2, 2}), 1e-5, 1e-5);
  OpTester u("Resize", 19);
  u.attr("mode", "linear").attr("coordinate_transformation_mode", "half_pixel_symmetric");
  u.input(x).no_input().const_input(T_({1, 1, 1.7f, 1.3f}, {4}));
  auto o = u.run();
  EXPECT_EQ(o[0].dims(), (V{1, 1, 6, 5}));
  const std::vector<float> row0 = {1.117647f, 1.848416f, 2.617647f, 3.386878f, 4.117647f};
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(o[0].get_double(j), row0[j], 1e-5);
  EXPECT_NEAR(o[0].get_double(29), 15.88235, 1e-4);
  expect_error(OpTester("Resize", 18).attr("coordinate_transformation_mode", "half_pixel_symmetric")
                   .input(x).no_input().const_input(T_({1, 1, 2, 2}, {4})).run_status(),
               {"half_pixel_symmetric"});
}

TEST(Resize, ThreeDimensionalTrilinear) {
  Tensor x = seq(0, {2, 3, 4});
  auto out = resize_sizes("linear", "half_pixel", "floor", x, {3, 5, 3});
  EXPECT_EQ(out[0].dims(), (V{3, 5, 3}));
  EXPECT_NEAR(out[0].get_double(0), 0.1666667, 1e-5);
  EXPECT_NEAR(out[0].get_double(4), 3.1, 1e-5);
  EXPECT_NEAR(out[0].get_double(22), 11.5, 1e-5);
  EXPECT_NEAR(out[0].get_double(44), 22.83333, 1e-4);
}

TEST(Resize, PytorchHalfPixelSingleOutput) {
  auto out = resize_sizes("linear", "pytorch_half_pixel", "floor", seq(1, {1, 1, 4, 4}), {1, 1, 1, 3});
  expect_near(out[0], T_({1.166667f, 2.5f, 3.833333f}, {1, 1, 1, 3}));
}

TEST(Resize, DtypesAndShapes) {
  // Integers: nearest copies, linear truncates like numpy's astype.
  Tensor xi = I64_({0, 10, 20, 30}, {1, 4});
  OpTester n("Resize", 13);
  n.attr("mode", "nearest").input(xi).no_input().no_input().const_input(I64_({1, 8}, {2}));
  EXPECT_EQ(n.run()[0].to_int64_vector(), (V{0, 0, 10, 10, 20, 20, 30, 30}));
  OpTester l("Resize", 13);
  l.attr("mode", "linear").input(xi).no_input().no_input().const_input(I64_({1, 8}, {2}));
  EXPECT_EQ(l.run()[0].to_int64_vector(), (V{0, 2, 7, 12, 17, 22, 27, 30}));
  // f16 computed in f32 and rounded.
  Tensor h = Tensor::allocate(DType::kF16, {1, 2});
  h.mutable_data<uint16_t>()[0] = f32_to_f16(1.0f);
  h.mutable_data<uint16_t>()[1] = f32_to_f16(2.0f);
  OpTester hf("Resize", 13);
  hf.attr("mode", "linear").input(h).no_input().no_input().const_input(I64_({1, 4}, {2}));
  auto ho = hf.run();
  ASSERT_EQ(ho[0].dtype(), DType::kF16);
  EXPECT_EQ(ho[0].get_double(1), 1.25);
  // Runtime sizes: rank only. Symbolic batch with scales 1 keeps its symbol.
  OpTester rt("Resize", 13);
  rt.attr("mode", "nearest").input(seq(0, {1, 1, 2, 2})).no_input().no_input().input(I64_({1, 1, 4, 4}, {4}));
  EXPECT_EQ(rt.run()[0].dims(), (V{1, 1, 4, 4}));
  EXPECT_EQ(inferred(rt), "[?,?,?,?]");
  OpTester sym("Resize", 13);
  sym.attr("mode", "nearest").input(seq(0, {2, 1, 2, 2})).no_input().const_input(T_({1, 1, 2, 2}, {4}));
  sym.symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(1), Dim(2), Dim(2)}));
  sym.run();
  EXPECT_EQ(inferred(sym), "[n,1,4,4]");
}

TEST(Resize, Errors) {
  Tensor x = seq(0, {1, 1, 2, 2});
  expect_error(OpTester("Resize", 13).input(x).no_input().const_input(T_({1, 2}, {2})).run_status(),
               {"Resize_under_test", "scales"});
  expect_error(OpTester("Resize", 13).input(x).no_input().input(T_({1, 1, 2, 2}, {4})).input(I64_({1, 1, 4, 4}, {4})).run_status(),
               {"only one of scales and sizes"});
  expect_error(OpTester("Resize", 13).input(x).run_status(), {"one of scales and sizes"});
  expect_error(OpTester("Resize", 13).attr("mode", "area").input(x).no_input().const_input(T_({1, 1, 2, 2}, {4})).run_status(),
               {"mode='area'"});
  expect_error(OpTester("Resize", 13).input(x).no_input().input(T_({1, 1, 0, 2}, {4})).run_status(), {"positive"});
}

// ---- Resize-10 / Upsample -------------------------------------------------------------------

TEST(Upsample, Opset7And9NearestAndLinear) {
  Tensor x = T_({1, 2, 3, 4}, {1, 1, 2, 2});
  auto n7 = OpTester("Upsample", 7).attr("scales", std::vector<float>{1, 1, 2, 3}).input(x).run();
  expect_near(n7[0], T_({1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, {1, 1, 4, 6}));
  OpTester l9("Upsample", 9);
  l9.attr("mode", "linear").input(x).const_input(T_({1, 1, 2, 2}, {4}));
  expect_near(l9.run()[0], T_({1, 1.5f, 2, 2, 2, 2.5f, 3, 3, 3, 3.5f, 4, 4, 3, 3.5f, 4, 4}, {1, 1, 4, 4}));
  EXPECT_EQ(inferred(l9), "[1,1,4,4]");
}

TEST(Resize, Opset10DownsampleNearestUsesCeil) {
  OpTester t("Resize", 10);
  t.input(seq(1, {1, 1, 2, 4})).const_input(T_({1, 1, 0.6f, 0.6f}, {4}));
  expect_near(t.run()[0], T_({1, 3}, {1, 1, 1, 2}));
}

}  // namespace
}  // namespace ferry::testing
