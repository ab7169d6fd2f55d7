#include "op_tester.h"
#include "ops/op_util.h"

namespace ferry::testing {
namespace {

// ---- NonMaxSuppression ----

Tensor nms_boxes() {
  return T_({0.0f, 0.0f, 1.0f, 1.0f, 0.0f, 0.1f, 1.0f, 1.1f, 0.0f, -0.1f, 1.0f, 0.9f,
             0.0f, 10.0f, 1.0f, 11.0f, 0.0f, 10.1f, 1.0f, 11.1f, 0.0f, 100.0f, 1.0f, 101.0f},
            {1, 6, 4});
}
Tensor nms_scores() { return T_({0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f}, {1, 1, 6}); }

TEST(NonMaxSuppression, SuppressByIou) {
  auto out = OpTester("NonMaxSuppression", 11)
                 .input(nms_boxes()).input(nms_scores()).input(I64_({3}, {1})).input(T_({0.5f}, {1})).input(T_({0.0f}, {1}))
                 .run();
  expect_near(out[0], I64_({0, 0, 3, 0, 0, 0, 0, 0, 5}, {3, 3}));
}

TEST(NonMaxSuppression, ScoreThresholdAndLimit) {
  auto out = OpTester("NonMaxSuppression", 11)
                 .input(nms_boxes()).input(nms_scores()).input(I64_({3}, {1})).input(T_({0.5f}, {1})).input(T_({0.4f}, {1}))
                 .run();
  expect_near(out[0], I64_({0, 0, 3, 0, 0, 0}, {2, 3}));
  auto lim = OpTester("NonMaxSuppression", 11)
                 .input(nms_boxes()).input(nms_scores()).input(I64_({2}, {1})).input(T_({0.5f}, {1})).run();
  expect_near(lim[0], I64_({0, 0, 3, 0, 0, 0}, {2, 3}));
}

TEST(NonMaxSuppression, FlippedCornersAndCenterFormat) {
  Tensor flipped = T_({1.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.1f, 1.0f, 1.1f, 0.0f, 0.9f, 1.0f, -0.1f,
                       0.0f, 10.0f, 1.0f, 11.0f, 1.0f, 10.1f, 0.0f, 11.1f, 1.0f, 101.0f, 0.0f, 100.0f},
                      {1, 6, 4});
  auto out = OpTester("NonMaxSuppression", 11)
                 .input(flipped).input(nms_scores()).input(I64_({3}, {1})).input(T_({0.5f}, {1})).input(T_({0.0f}, {1}))
                 .run();
  expect_near(out[0], I64_({0, 0, 3, 0, 0, 0, 0, 0, 5}, {3, 3}));
  Tensor centers = T_({0.5f, 0.5f, 1.0f, 1.0f, 0.5f, 0.6f, 1.0f, 1.0f, 0.5f, 0.4f, 1.0f, 1.0f,
                       0.5f, 10.5f, 1.0f, 1.0f, 0.5f, 10.6f, 1.0f, 1.0f, 0.5f, 100.5f, 1.0f, 1.0f},
                      {1, 6, 4});
  auto c = OpTester("NonMaxSuppression", 11)
               .attr("center_point_box", 1)
               .input(centers).input(nms_scores()).input(I64_({3}, {1})).input(T_({0.5f}, {1})).input(T_({0.0f}, {1}))
               .run();
  expect_near(c[0], I64_({0, 0, 3, 0, 0, 0, 0, 0, 5}, {3, 3}));
}

TEST(NonMaxSuppression, BatchesAndClassesInOrder) {
  Tensor boxes = T_({0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1}, {2, 2, 4});
  Tensor scores = T_({0.1f, 0.9f, 0.8f, 0.2f, 0.5f, 0.5f, 0.3f, 0.4f}, {2, 2, 2});
  auto out = OpTester("NonMaxSuppression", 11).input(boxes).input(scores).input(I64_({5}, {1})).input(T_({0.5f}, {1})).run();
  // Identical boxes: one per (batch, class); equal scores keep the lower index.
  expect_near(out[0], I64_({0, 0, 1, 0, 1, 0, 1, 0, 0, 1, 1, 1}, {4, 3}));
}

TEST(NonMaxSuppression, NoMaxOutputSelectsNothing) {
  auto out = OpTester("NonMaxSuppression", 10).input(nms_boxes()).input(nms_scores()).run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 3}));
}

TEST(NonMaxSuppression, BadInputsAreErrors) {
  EXPECT_FALSE(OpTester("NonMaxSuppression", 11)
                   .input(nms_boxes()).input(nms_scores()).input(I64_({3}, {1})).input(T_({1.5f}, {1}))
                   .run_status().is_ok());
  EXPECT_FALSE(OpTester("NonMaxSuppression", 11).input(T_({0, 0, 1}, {1, 1, 3})).input(T_({1}, {1, 1, 1})).run_status().is_ok());
  EXPECT_FALSE(OpTester("NonMaxSuppression", 11).input(nms_boxes()).input(T_({1, 2}, {1, 1, 2})).run_status().is_ok());
  EXPECT_FALSE(OpTester("NonMaxSuppression", 11).attr("center_point_box", 2).input(nms_boxes()).input(nms_scores()).run_status().is_ok());
}

// ---- RoiAlign ----

Tensor arange(int64_t n, std::vector<int64_t> dims) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i);
  return T_(v, std::move(dims));
}

TEST(RoiAlign, OutputHalfPixelSamplesCenters) {
  auto out = OpTester("RoiAlign", 16)
                 .attr("coordinate_transformation_mode", "output_half_pixel")
                 .attr("sampling_ratio", 1)
                 .input(arange(16, {1, 1, 4, 4})).input(T_({0, 0, 3, 3}, {1, 4})).input(I64_({0}, {1}))
                 .run();
  // One sample at (1.5, 1.5): the mean of 5, 6, 9, 10.
  expect_near(out[0], T_({7.5f}, {1, 1, 1, 1}));
}

TEST(RoiAlign, HalfPixelShiftsByHalf) {
  auto out = OpTester("RoiAlign", 16).attr("sampling_ratio", 1)
                 .input(arange(16, {1, 1, 4, 4})).input(T_({0, 0, 3, 3}, {1, 4})).input(I64_({0}, {1})).run();
  expect_near(out[0], T_({5.0f}, {1, 1, 1, 1}));
  // Opset 10 has no coordinate_transformation_mode: it behaves as output_half_pixel.
  auto v10 = OpTester("RoiAlign", 10).attr("sampling_ratio", 1)
                 .input(arange(16, {1, 1, 4, 4})).input(T_({0, 0, 3, 3}, {1, 4})).input(I64_({0}, {1})).run();
  expect_near(v10[0], T_({7.5f}, {1, 1, 1, 1}));
}

TEST(RoiAlign, MaxModeTakesMaxOfWeightedCorners) {
  auto out = OpTester("RoiAlign", 16)
                 .attr("coordinate_transformation_mode", "output_half_pixel").attr("mode", "max").attr("sampling_ratio", 1)
                 .input(arange(16, {1, 1, 4, 4})).input(T_({0, 0, 3, 3}, {1, 4})).input(I64_({0}, {1})).run();
  expect_near(out[0], T_({2.5f}, {1, 1, 1, 1}));
}

TEST(RoiAlign, ShapesAndBatchIndex) {
  auto out = OpTester("RoiAlign", 16).attr("output_height", 2).attr("output_width", 3)
                 .input(arange(32, {2, 1, 4, 4})).input(T_({0, 0, 3, 3, 1, 1, 2, 2}, {2, 4})).input(I64_({1, 0}, {2})).run();
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 1, 2, 3}));
  auto bad = OpTester("RoiAlign", 16)
                 .input(arange(16, {1, 1, 4, 4})).input(T_({0, 0, 3, 3}, {1, 4})).input(I64_({1}, {1})).run_status();
  EXPECT_FALSE(bad.is_ok());
  EXPECT_FALSE(OpTester("RoiAlign", 16).attr("mode", "sum")
                   .input(arange(16, {1, 1, 4, 4})).input(T_({0, 0, 3, 3}, {1, 4})).input(I64_({0}, {1})).run_status().is_ok());
}

// ---- GridSample ----

TEST(GridSample, AlignedIdentityGridReproducesInput) {
  // Grid points at the pixel centers with align_corners=1: -1, 1/3 steps ... 1.
  std::vector<float> g;
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x) {
      g.push_back(-1.0f + 2.0f * x / 3.0f);
      g.push_back(-1.0f + 2.0f * y / 2.0f);
    }
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    auto out = OpTester("GridSample", 16).attr("align_corners", 1).attr("mode", mode)
                   .input(arange(12, {1, 1, 3, 4})).input(T_(g, {1, 3, 4, 2})).run();
    expect_near(out[0], arange(12, {1, 1, 3, 4}), 1e-4);
  }
}

TEST(GridSample, PaddingModes) {
  // A 1x1x2x2 image sampled far outside on the left.
  Tensor x = T_({1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor grid = T_({-3.0f, -1.0f}, {1, 1, 1, 2});
  auto zeros = OpTester("GridSample", 16).attr("align_corners", 1).input(x).input(grid).run();
  expect_near(zeros[0], T_({0.0f}, {1, 1, 1, 1}));
  auto border = OpTester("GridSample", 16).attr("align_corners", 1).attr("padding_mode", "border").input(x).input(grid).run();
  expect_near(border[0], T_({1.0f}, {1, 1, 1, 1}));
  // x = -1 pixel reflects about 0 to 1.
  auto refl = OpTester("GridSample", 16).attr("align_corners", 1).attr("padding_mode", "reflection").input(x).input(grid).run();
  expect_near(refl[0], T_({2.0f}, {1, 1, 1, 1}));
}

TEST(GridSample, BilinearHalfwayAverages) {
  Tensor x = T_({1, 2, 3, 4}, {1, 1, 2, 2});
  auto out = OpTester("GridSample", 16).attr("align_corners", 1).input(x).input(T_({0.0f, 0.0f}, {1, 1, 1, 2})).run();
  expect_near(out[0], T_({2.5f}, {1, 1, 1, 1}));
  // align_corners=0: normalized 0 is still the center.
  auto out0 = OpTester("GridSample", 16).input(x).input(T_({0.0f, 0.0f}, {1, 1, 1, 2})).run();
  expect_near(out0[0], T_({2.5f}, {1, 1, 1, 1}));
}

TEST(GridSample, Opset20ThreeSpatialDims) {
  // 2x2x2 volume, sample its center with linear (trilinear) mode and a corner with nearest.
  Tensor x = arange(8, {1, 1, 2, 2, 2});
  auto out = OpTester("GridSample", 20).attr("align_corners", 1).attr("mode", "linear")
                 .input(x).input(T_({0.0f, 0.0f, 0.0f, 1.0f, -1.0f, 1.0f}, {1, 1, 1, 2, 3})).run();
  // (x=1, y=-1, z=1) -> d=1, h=0, w=1 -> 4 + 0 + 1 = 5.
  expect_near(out[0], T_({3.5f, 5.0f}, {1, 1, 1, 1, 2}));
  auto bad = OpTester("GridSample", 20).attr("mode", "bilinear").input(x).input(T_({0, 0, 0}, {1, 1, 1, 1, 3})).run_status();
  EXPECT_FALSE(bad.is_ok());
  auto bad16 = OpTester("GridSample", 16).input(x).input(T_({0, 0, 0}, {1, 1, 1, 1, 3})).run_status();
  EXPECT_FALSE(bad16.is_ok());
}

TEST(GridSample, ShapeMismatchIsAnError) {
  EXPECT_FALSE(OpTester("GridSample", 16).input(arange(4, {1, 1, 2, 2})).input(T_({0, 0, 0}, {1, 1, 1, 3})).run_status().is_ok());
  EXPECT_FALSE(OpTester("GridSample", 16).input(arange(4, {1, 1, 2, 2})).input(T_({0, 0, 0, 0}, {2, 1, 1, 2})).run_status().is_ok());
}

// ---- MaxUnpool ----

TEST(MaxUnpool, DefaultOutputShape) {
  auto out = OpTester("MaxUnpool", 11).attr("kernel_shape", std::vector<int64_t>{2, 2}).attr("strides", std::vector<int64_t>{2, 2})
                 .input(T_({1, 2, 3, 4}, {1, 1, 2, 2})).input(I64_({5, 7, 13, 15}, {1, 1, 2, 2})).run();
  expect_near(out[0], T_({0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 3, 0, 4}, {1, 1, 4, 4}));
}

TEST(MaxUnpool, OutputShapePadsAtTheEnd) {
  auto out = OpTester("MaxUnpool", 11).attr("kernel_shape", std::vector<int64_t>{2, 2}).attr("strides", std::vector<int64_t>{2, 2})
                 .input(T_({5, 6, 7, 8}, {1, 1, 2, 2})).input(I64_({5, 7, 13, 15}, {1, 1, 2, 2}))
                 .const_input(I64_({1, 1, 5, 5}, {4})).run();
  expect_near(out[0], T_({0, 0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 0, 0, 7, 0, 8, 0, 0, 0, 0, 0, 0}, {1, 1, 5, 5}));
  // The same with a runtime output_shape.
  auto rt = OpTester("MaxUnpool", 11).attr("kernel_shape", std::vector<int64_t>{2, 2}).attr("strides", std::vector<int64_t>{2, 2})
                .input(T_({5, 6, 7, 8}, {1, 1, 2, 2})).input(I64_({5, 7, 13, 15}, {1, 1, 2, 2})).input(I64_({1, 1, 5, 5}, {4})).run();
  expect_near(rt[0], out[0]);
}

TEST(MaxUnpool, BadIndexIsAnError) {
  auto r = OpTester("MaxUnpool", 11).attr("kernel_shape", std::vector<int64_t>{2, 2}).attr("strides", std::vector<int64_t>{2, 2})
               .input(T_({1, 2, 3, 4}, {1, 1, 2, 2})).input(I64_({5, 7, 13, 16}, {1, 1, 2, 2})).run_status();
  EXPECT_FALSE(r.is_ok());
  auto small = OpTester("MaxUnpool", 11).attr("kernel_shape", std::vector<int64_t>{2, 2}).attr("strides", std::vector<int64_t>{2, 2})
                   .input(T_({1, 2, 3, 4}, {1, 1, 2, 2})).input(I64_({5, 7, 13, 15}, {1, 1, 2, 2})).input(I64_({1, 1, 3, 3}, {4}))
                   .run_status();
  EXPECT_FALSE(small.is_ok());
}

}  // namespace
}  // namespace ferry::testing

namespace ferry::testing {
namespace {

TEST(DetectionShapes, SymbolicDimsPropagate) {
  OpTester g("GridSample", 16);
  g.input(arange(8, {2, 1, 2, 2})).input(T_(std::vector<float>(2 * 3 * 5 * 2, 0.0f), {2, 3, 5, 2}))
      .symbolic_input_shape(0, Shape({Dim::symbolic("n"), Dim(1), Dim(), Dim()}));
  g.run();
  EXPECT_EQ(g.last_model()->graph.value_types["out0"].shape->to_string(), "[n,1,3,5]");
  OpTester r("RoiAlign", 16);
  r.input(arange(16, {1, 1, 4, 4})).input(T_({0, 0, 3, 3}, {1, 4})).input(I64_({0}, {1}))
      .symbolic_input_shape(1, Shape({Dim::symbolic("rois"), Dim(4)}));
  r.run();
  EXPECT_EQ(r.last_model()->graph.value_types["out0"].shape->to_string(), "[rois,1,1,1]");
  OpTester n("NonMaxSuppression", 11);
  n.input(nms_boxes()).input(nms_scores()).input(I64_({3}, {1}))
      .symbolic_input_shape(0, Shape({Dim(), Dim(), Dim(4)}));
  n.run();
  EXPECT_EQ(n.last_model()->graph.value_types["out0"].shape->to_string(), "[?,3]");
}

}  // namespace
}  // namespace ferry::testing

namespace ferry::testing {
namespace {

TEST(DetectionTypes, HalfAndDoubleInputs) {
  auto x16 = cast_tensor(T_({1, 2, 3, 4}, {1, 1, 2, 2}), DType::kF16).value();
  auto g16 = cast_tensor(T_({0.0f, 0.0f}, {1, 1, 1, 2}), DType::kF16).value();
  auto out = OpTester("GridSample", 16).attr("align_corners", 1).input(x16).input(g16).run();
  EXPECT_EQ(out[0].dtype(), DType::kF16);
  EXPECT_NEAR(out[0].get_double(0), 2.5, 1e-3);
  auto r = OpTester("RoiAlign", 16).attr("sampling_ratio", 1)
               .input(Tensor::from_vector<double>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {1, 1, 4, 4}))
               .input(Tensor::from_vector<double>({0, 0, 3, 3}, {1, 4})).input(I64_({0}, {1})).run();
  EXPECT_EQ(r[0].dtype(), DType::kF64);
  EXPECT_NEAR(r[0].get_double(0), 5.0, 1e-9);
  auto n = OpTester("NonMaxSuppression", 11)
               .input(cast_tensor(nms_boxes(), DType::kF64).value()).input(cast_tensor(nms_scores(), DType::kF64).value())
               .input(I64_({3}, {1})).input(T_({0.5f}, {1})).run();
  expect_near(n[0], I64_({0, 0, 3, 0, 0, 0, 0, 0, 5}, {3, 3}));
}

}  // namespace
}  // namespace ferry::testing
